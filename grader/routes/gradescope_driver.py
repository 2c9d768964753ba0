"""The driver that runs inside a Gradescope autograder (trusted side).

Details: docs/internals.md, `grader.routes.gradescope_driver`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from grader.constants import DEFAULT_SEED, KIT_ROOT, SEED_ENV
from grader.run.proctree import kill_group

# Inside grader/assignments/, which the sandbox keeps submissions from
# reading (grader.run.sandbox.sandbox_paths: the grader's own folder).
SEED_FILE = "grader/assignments/.grader_seed"
ROOT_ENV = "AUTOGRADER_ROOT"
DEFAULT_ROOT = "/autograder"
# Seconds the whole grading may take before the driver gives up (Gradescope
# stops an autograder after 10 minutes by default).
DEFAULT_TIMEOUT = 480.0
TIMEOUT_ENV = "AUTOGRADER_TIMEOUT"
_TAIL_LINES = 20
#: The visibilities Gradescope offers for a test.
VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")
#: Who sees the hidden cases' details (their names and sizes), by default:
#: nobody before the due date, so the sizes stay secret while it matters.
DEFAULT_HIDDEN_DETAILS = "after_due_date"
#: Bytes of an upload's files that its digest reads (then only sizes).
UPLOAD_BYTES = 64 * 1024 * 1024
_HIDDEN_CASE = re.compile(r"hidden case '[^'\n]*'[^(\n]* \([^)\n]*\)")


def kit_version(root: Path = KIT_ROOT) -> str:
    """The kit's version, from its ``setup.cfg``."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(root / "setup.cfg", encoding="utf-8")
    return parser.get("metadata", "version", fallback="unknown")


def failure_results(message: str, seconds: float = 0.0) -> dict[str, Any]:
    """A valid ``results.json`` for a submission that could not be graded:
    score 0, the reason in ``output``."""
    return {"score": 0.0, "execution_time": round(seconds, 3),
            "output": message, "stdout_visibility": "hidden", "tests": []}


def _tail(text: str) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[-_TAIL_LINES:])


def _valid_report(path: Path) -> dict[str, Any] | None:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (isinstance(report, dict) and isinstance(report.get("tests"), list)
            and isinstance(report.get("score"), (int, float))
            and not isinstance(report.get("score"), bool)):
        return None
    return report


def _grade_command(submission: Path, output: Path,
                   assignment: str | None) -> list[str]:
    command = [sys.executable, "-m", "grader", "grade", str(submission),
               "--format", "gradescope", "--output", str(output)]
    if assignment:
        command += ["--assignment", assignment]
    return command


def upload_digest(submission: Path, budget: int = UPLOAD_BYTES) -> str:
    """A digest of what was uploaded to ``submission``: every entry's
    relative path, and the bytes of its regular files (at most ``budget``
    in all, then their sizes); a symbolic link counts by its target's
    name and is never followed, and nothing else is opened (a FIFO would
    block)."""
    import hashlib
    import stat

    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(submission):
        dirs.sort()
        for name in sorted(files) + dirs:
            path = Path(folder) / name
            digest.update(os.fsencode(path.relative_to(submission)) + b"\0")
            try:
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    digest.update(b"->" + os.fsencode(os.readlink(path)))
                elif stat.S_ISREG(info.st_mode):
                    digest.update(str(info.st_size).encode() + b"\0")
                    budget = _digest_file(digest, path, budget)
            except OSError:
                digest.update(b"?")
    return digest.hexdigest()


def _digest_file(digest: Any, path: Path, budget: int) -> int:
    """Add up to ``budget`` bytes of ``path`` to ``digest``; the budget
    left."""
    if budget <= 0:
        return 0
    with path.open("rb") as handle:
        while budget > 0:
            chunk = handle.read(min(budget, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            budget -= len(chunk)
    return budget


def _environment(source: Path, submission: Path | None = None
                 ) -> dict[str, str]:
    """The grader's environment: the course's secret seed (the
    container's $GRADER_SEED, else the one baked into the bundle, else
    the public default) mixed with a digest of the upload, so that every
    upload draws hidden cases of its own (docs/gradescope.md)."""
    env = dict(os.environ)
    seed_file = source / SEED_FILE
    if not env.get(SEED_ENV, "").strip() and seed_file.is_file():
        env[SEED_ENV] = seed_file.read_text(encoding="utf-8").strip()
    if submission is not None:
        secret = env.get(SEED_ENV, "").strip() or str(DEFAULT_SEED)
        env[SEED_ENV] = f"{secret}:{upload_digest(submission)}"
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(source) + (os.pathsep + path if path else "")
    return env


def _execute(command: list[str], cwd: Path, env: dict[str, str],
             timeout: float) -> tuple[int | None, str]:
    """Run ``command`` in its own session; kill the whole group on timeout.

    Returns (exit status or None on timeout, standard error).
    """
    process = subprocess.Popen(command, cwd=cwd, env=env,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        return None, stderr
    finally:
        if process.poll() is None:
            process.kill()
    if stdout:
        sys.stdout.write(stdout)
    return process.returncode, stderr


def hide_case_details(results: dict[str, Any], visibility: str
                      ) -> dict[str, Any]:
    """``results`` whose tests name no hidden case's sizes before
    ``visibility`` allows it (see docs/gradescope.md).

    Unless ``visibility`` is ``visible``, a test whose output describes a
    hidden case says "a hidden case" instead, and a test of 0 points with
    the full output follows it, shown to students as ``visibility`` says
    (its status is the test's, so nothing is lost)."""
    if visibility == "visible":
        return results
    tests = []
    for test in results.get("tests", []):
        output = str(test.get("output", ""))
        if not _HIDDEN_CASE.search(output):
            tests.append(test)
            continue
        tests.append({**test, "output": _HIDDEN_CASE.sub(
            "a hidden case", output) + f"\n\nThe hidden cases' sizes are "
            f"in the test '{test.get('name')} (hidden-case details)', "
            f"shown {visibility.replace('_', ' ')}."})
        tests.append({"name": f"{test.get('name')} (hidden-case details)",
                      "number": f"{test.get('number', '')}.details",
                      "score": 0.0, "max_score": 0.0,
                      "status": test.get("status", "passed"),
                      "output": output, "visibility": visibility})
    return {**results, "tests": tests}


def run(root: Path, assignment: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        hidden_details: str = DEFAULT_HIDDEN_DETAILS) -> dict[str, Any]:
    """Grade ``root/submission`` and write ``root/results/results.json``.

    Returns what was written. The grader runs in a subprocess (its own
    sandbox forks the submission's workers); if it cannot grade (exit 2:
    nothing gradable submitted), crashes, times out or writes no valid
    report, the results say so with a score of 0.
    """
    started = time.perf_counter()
    root = Path(root)
    source = root / "source"
    submission = root / "submission"
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    partial = results.with_name(".results.grader.json")
    partial.unlink(missing_ok=True)
    command = _grade_command(submission, partial, assignment)
    which = assignment or "recognised from the submission"
    print(f"grading {submission} with kit {kit_version()} (assignment: "
          f"{which})", flush=True)
    try:
        status, stderr = _execute(command, source,
                                  _environment(source, submission), timeout)
    except OSError as exc:
        status, stderr = -1, f"cannot start the grader: {exc}"
    seconds = time.perf_counter() - started
    if stderr.strip():
        sys.stdout.write(f"--- grader's standard error ---\n{stderr}\n")
    report = _valid_report(partial) if status == 0 else None
    if report is not None:
        outcome = hide_case_details(report, hidden_details)
    elif status == 0:
        outcome = failure_results(
            "The grader finished but wrote no valid report, so nothing was "
            "graded. Please tell your instructor.", seconds)
    elif status is None:
        outcome = failure_results(
            f"Grading took longer than {timeout:g} s and was stopped, so "
            f"nothing was graded. Please tell your instructor.", seconds)
    elif status == 2:
        lines = _tail(stderr).splitlines() or ["(no reason given)"]
        reason = lines[-1].split(": error: ", 1)[-1]
        outcome = failure_results(
            f"Your submission could not be graded: {reason}\n\n"
            f"Upload the Python file or the notebook that holds your "
            f"classes, or your whole repository, and try again.", seconds)
    else:
        outcome = failure_results(
            f"The autograder failed unexpectedly (exit status {status}); "
            f"your submission was not graded. Please tell your "
            f"instructor.\n\n{_tail(stderr)}", seconds)
    from grader.output.files import write_atomic

    write_atomic(results, json.dumps(outcome, indent=2) + "\n")
    partial.unlink(missing_ok=True)
    print(f"score: {outcome['score']:g}", flush=True)
    return outcome


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.routes.gradescope_driver run [--root DIR]
    [--assignment ID] [--hidden-details VISIBILITY]``."""
    parser = argparse.ArgumentParser(
        prog="python -m grader.routes.gradescope_driver",
        description="Inside a Gradescope autograder: grade the submission "
                    "and write results/results.json.")
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="grade ROOT/submission")
    runner.add_argument("--root", type=Path,
                        default=Path(os.environ.get(ROOT_ENV, DEFAULT_ROOT)))
    runner.add_argument("--assignment", metavar="ID")
    runner.add_argument("--hidden-details", choices=VISIBILITIES,
                        default=DEFAULT_HIDDEN_DETAILS,
                        help="who sees the hidden cases' sizes (default: "
                             f"{DEFAULT_HIDDEN_DETAILS})")
    args = parser.parse_args(argv)
    timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    run(args.root, args.assignment, timeout, args.hidden_details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
