"""A Gradescope autograder zip, and the driver that runs inside it.

``python -m grader gradescope-bundle OUT.zip`` calls :func:`write_bundle`,
which writes, at the root of the zip (Gradescope's layout):

* ``setup.sh``: run once, as root, when Gradescope builds the image. It
  finds (or installs with apt) a Python >= 3.11, makes a virtual
  environment ``.venv`` beside itself, installs the CPU build of torch from
  PyTorch's CPU index and the pinned ``requirements.txt``, then the kit
  itself from the zip's copy, and checks that the grader imports.
* ``run_autograder``: run for every submission. It grades
  ``$AUTOGRADER_ROOT/submission`` (``AUTOGRADER_ROOT`` defaults to
  ``/autograder``) with ``python -m grader grade --format gradescope``
  through :func:`run` below and writes ``results/results.json``. Whatever
  fails, a valid ``results.json`` is left behind (score 0, the error in
  ``output``); never none.
* ``requirements.txt``: torch pinned to :data:`TORCH_VERSION` (CPU index)
  and the grader's tools pinned to the versions installed where the bundle
  was built, so PEP-8 grading and plots match the instructor's machine.
* the kit's grader and student package (``grader/``, ``transformer_lm/``)
  and ``setup.cfg``, ``pyproject.toml``, ``README.md``, ``LICENSE``,
  ``NOTICE``, plus ``manifest.json`` (versions and a checksum per file).
  Never ``solutions/``: nothing of the reference solution is shipped. The
  package's generated files (the stubs, the public test values) are
  shipped as a fresh build makes them from ``solutions/``, whatever the
  working tree holds (:func:`generated_package`).

**The assignment** is baked in at build time (``--assignment``; required
when the kit has more than one): ``run_autograder`` grades every upload
against it, never against what an upload happens to define. An upload of
any name is graded (a ``.py`` file, several files, a notebook, a zip
extracted into a folder: the file that defines the graded names);
when nothing does, the result lists what was uploaded.

**The secret seed.** Gradescope documents no per-assignment environment
variables, so the seed of the hidden cases is baked into the bundle when
it is built: ``seed=`` (or, when not given, ``$GRADER_SEED`` of the shell
that builds the bundle, the same variable ``grade`` and ``batch`` read).
It is stored in :data:`SEED_FILE`, inside the grader's private folder that
the sandbox forbids submissions to read, and reaches the grader through its
environment, which the sandbox scrubs. ``GRADER_SEED`` set in the
container's environment overrides it. Without either, the grader's public
default seed is used.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from grader.cli import CliError

KIT_ROOT = Path(__file__).resolve().parent.parent
# The torch release the kit pins (README, .ci/run); the CPU build.
TORCH_VERSION = "2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Pinned at the versions installed where the bundle is built. flake8's own
# checkers are pinned too: a different pycodestyle may judge PEP-8 anew.
PINNED_PACKAGES = ("numpy", "pytest", "flake8", "pycodestyle", "pyflakes",
                   "mccabe", "matplotlib")
KIT_FOLDERS = ("grader", "transformer_lm")
KIT_FILES = ("setup.cfg", "pyproject.toml", "README.md", "LICENSE", "NOTICE")
# Inside grader/assignments/, which the sandbox keeps submissions from
# reading (grader.sandbox.sandbox_paths: the grader's own folder).
SEED_FILE = "grader/assignments/.grader_seed"
SEED_ENV = "GRADER_SEED"
ROOT_ENV = "AUTOGRADER_ROOT"
DEFAULT_ROOT = "/autograder"
# Seconds the whole grading may take before the driver gives up (Gradescope
# stops an autograder after 10 minutes by default).
DEFAULT_TIMEOUT = 480.0
TIMEOUT_ENV = "AUTOGRADER_TIMEOUT"
_SKIPPED_PARTS = ("__pycache__", ".pytest_cache", ".ipynb_checkpoints")
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
_EPOCH = (1980, 1, 1, 0, 0, 0)
_TAIL_LINES = 20


class BundleError(CliError):
    """The bundle cannot be built (a tool is missing, a bad option)."""


# --------------------------------------------------------------------------
# Building


def _installed_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError as exc:
        raise BundleError(f"{package} is not installed here, so its version "
                          f"cannot be pinned: pip install {package}") from exc


def pinned_requirements(extra: tuple[str, ...] = (),
                        why_extra: str = "") -> str:
    """The text of ``requirements.txt``: every dependency pinned.

    torch comes from PyTorch's CPU index (an unpinned ``torch`` from PyPI
    is a multi-GB CUDA build); the other packages, and ``extra`` ones
    (``why_extra`` says what for, in a comment), are pinned to the
    versions installed here.
    """
    lines = ["# Written by python -m grader gradescope-bundle (and "
             "python -m solutions.build",
             "# student-repo). torch: the CPU build from PyTorch's index; "
             "the grader's",
             "# tools: the versions the instructor's kit was built with.",
             f"--extra-index-url {TORCH_CPU_INDEX}",
             f"torch=={TORCH_VERSION}"]
    lines += [f"{name}=={_installed_version(name)}"
              for name in PINNED_PACKAGES]
    if extra:
        lines += [f"# {why_extra}"] if why_extra else []
        lines += [f"{name}=={_installed_version(name)}" for name in extra]
    return "\n".join(lines) + "\n"


def _shipped(path: Path) -> bool:
    return (not any(part in _SKIPPED_PARTS for part in path.parts)
            and path.suffix not in _SKIPPED_SUFFIXES
            and path.as_posix() != SEED_FILE)


def kit_files(root: Path = KIT_ROOT) -> list[Path]:
    """The kit's files that the bundle (and a student repo) ship.

    Relative to ``root``: every file of ``grader/`` and ``transformer_lm/``
    except caches and a seed file, and the top-level metadata files.
    """
    found = []
    for folder in KIT_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and _shipped(relative):
                found.append(relative)
    for name in KIT_FILES:
        if (root / name).is_file():
            found.append(Path(name))
    return found


def setup_script() -> str:
    """The text of ``setup.sh`` (Gradescope runs it once, as root)."""
    return f"""\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image
# (written by python -m grader gradescope-bundle). It installs a Python >=
# 3.11, a virtual environment beside this file with the pinned requirements
# (the CPU build of torch), then the kit from this folder.
set -euo pipefail
SOURCE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
VENV="$SOURCE/.venv"
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

find_python() {{
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c \\
                'import sys; sys.exit(sys.version_info < (3, 11))'; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}}

PYTHON="$(find_python || true)"
if [ -z "$PYTHON" ]; then
    echo "setup.sh: no Python >= 3.11 here; installing python3.11 with apt"
    apt-get update
    apt-get install -y python3.11 python3.11-venv
    PYTHON="$(find_python)"
fi
echo "setup.sh: using $PYTHON ($("$PYTHON" --version))"
if ! "$PYTHON" -m venv "$VENV"; then
    # Debian and Ubuntu ship venv's pip in a separate package.
    VERSION="$("$PYTHON" -c \\
        'import sys; print("%d.%d" % sys.version_info[:2])')"
    apt-get install -y "python$VERSION-venv"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi
# torch alone from the CPU index first: PyPI's torch is a multi-GB CUDA build.
"$VENV/bin/python" -m pip install "torch=={TORCH_VERSION}" \\
    --index-url {TORCH_CPU_INDEX}
"$VENV/bin/python" -m pip install -r "$SOURCE/requirements.txt"
"$VENV/bin/python" -m pip install --no-deps -e "$SOURCE"
# Fail the build now, not at the first submission, if anything is missing.
cd /
"$VENV/bin/python" -c "import torch, numpy, pytest, flake8, matplotlib"
"$VENV/bin/python" -m grader assignments
"""


def run_script(assignment: str | None = None) -> str:
    """The text of ``run_autograder`` (Gradescope runs it per submission).

    The real work is :func:`run`; this wrapper only finds Python and, if
    even that fails, writes a minimal valid ``results.json`` itself.
    """
    extra = f" --assignment {assignment}" if assignment else ""
    return f"""\
#!/usr/bin/env bash
# Gradescope runs this for every submission (written by python -m grader
# gradescope-bundle). It grades $AUTOGRADER_ROOT/submission (default
# /autograder/submission) and writes $AUTOGRADER_ROOT/results/results.json.
# Whatever fails, a valid results.json is left behind.
set -u
ROOT="${{{ROOT_ENV}:-{DEFAULT_ROOT}}}"
SOURCE="$ROOT/source"
RESULTS="$ROOT/results/results.json"
PYTHON="${{AUTOGRADER_PYTHON:-$SOURCE/.venv/bin/python}}"
if [ ! -x "$PYTHON" ]; then
    PYTHON=python3
fi
mkdir -p "$ROOT/results"
rm -f "$RESULTS"
status=0
(cd "$SOURCE" && PYTHONPATH="$SOURCE${{PYTHONPATH:+:$PYTHONPATH}}" \\
    "$PYTHON" -m grader.bundle run --root "$ROOT"{extra}) || status=$?
if [ ! -s "$RESULTS" ]; then
    echo "run_autograder: the driver exited with status $status and wrote" \\
        "no results.json; writing a score of 0"
    MESSAGE="The autograder failed before it could grade your submission"
    MESSAGE="$MESSAGE (exit status $status). Nothing of yours was graded;"
    MESSAGE="$MESSAGE please tell your instructor."
    printf '{{"score": 0.0, "output": "%s", "tests": []}}\\n' "$MESSAGE" \\
        > "$RESULTS"
fi
exit 0
"""


def _manifest(files: dict[str, bytes], assignment: str,
              seeded: bool) -> str:
    from grader.rubric import assignments

    metadata = {
        "kit_version": _kit_version(),
        "assignment": assignment,
        "assignments": [a.id for a in assignments()],
        "torch": f"{TORCH_VERSION} (CPU build, {TORCH_CPU_INDEX})",
        "secret_seed": "baked in" if seeded else "none: the public default",
        "files": {name: hashlib.sha256(data).hexdigest()
                  for name, data in sorted(files.items())},
    }
    return json.dumps(metadata, indent=2) + "\n"


def _kit_version() -> str:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(KIT_ROOT / "setup.cfg", encoding="utf-8")
    return parser.get("metadata", "version", fallback="unknown")


def bundle_assignment(assignment: str | None) -> str:
    """The assignment a bundle grades: the one named, or the kit's only
    one. Building for a kit of several without naming one is an error:
    the assignment comes from the route, never from an upload."""
    from grader.rubric import assignments, get_assignment

    if assignment is not None:
        return get_assignment(assignment).id  # RubricError if unknown
    known = [a.id for a in assignments()]
    if len(known) == 1:
        return known[0]
    raise BundleError(f"name the assignment this bundle grades: "
                      f"--assignment ID (this kit has {len(known)}: "
                      f"{', '.join(known)})")


def generated_package() -> dict[str, bytes]:
    """The student package's generated files as a fresh build makes them
    (zip path -> bytes): the stubs and the public test values.

    They come from the single source in ``solutions/``, whatever the
    working tree's ``transformer_lm/`` holds (an instructor who tried a
    solution there ships the stub all the same). Needs the instructor's
    kit (``solutions/``).
    """
    try:
        from solutions import build
    except ImportError as exc:
        raise BundleError(f"the bundle is built from the instructor's kit: "
                          f"solutions/ (the source of the student stubs) "
                          f"cannot be imported ({exc})") from exc
    if Path(build.__file__).resolve().parent.parent != KIT_ROOT:
        raise BundleError(f"solutions/ is imported from "
                          f"{Path(build.__file__).parent}, not from this "
                          f"kit ({KIT_ROOT}): run from the kit's folder")
    from grader.rubric import assignments

    files = {}
    for assignment in assignments():
        source = build.SOLUTIONS / f"{assignment.module}.py"
        if source.is_file():
            stub = build.make_stub(source.read_text(encoding="utf-8"),
                                   str(source))
            files[f"transformer_lm/{assignment.module}.py"] = stub.encode()
    files["transformer_lm/test_values.py"] = \
        build.make_test_values().encode()
    return files


def bundle_contents(assignment: str | None = None,
                    seed: int | str | None = None) -> dict[str, bytes]:
    """Every file of the bundle: zip path -> bytes (nothing is written)."""
    assignment = bundle_assignment(assignment)
    if seed is None:
        seed = os.environ.get(SEED_ENV, "").strip() or None
    if seed is not None and not str(seed).strip():
        raise BundleError("the seed is empty")
    files: dict[str, bytes] = {
        "setup.sh": setup_script().encode(),
        "run_autograder": run_script(assignment).encode(),
        "requirements.txt": pinned_requirements().encode(),
    }
    for relative in kit_files():
        files[relative.as_posix()] = (KIT_ROOT / relative).read_bytes()
    files.update(generated_package())
    if seed is not None:
        files[SEED_FILE] = f"{str(seed).strip()}\n".encode()
    files["manifest.json"] = _manifest(
        {k: v for k, v in files.items() if k != SEED_FILE}, assignment,
        seed is not None).encode()
    return files


def write_bundle(out: Path, assignment: str | None = None,
                 seed: int | str | None = None) -> Path:
    """Write the autograder zip to ``out``; return its path.

    ``assignment``: grade every submission as this assignment (required
    when the kit has more than one). ``seed``: the secret seed of the
    hidden cases, baked into the bundle (default: ``$GRADER_SEED`` if set,
    else none, and the grader's public default applies). The zip is
    reproducible: same kit, same options, same bytes.
    """
    out = Path(out)
    files = bundle_contents(assignment, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=out.parent, suffix=".zip.tmp")
    os.close(handle)
    try:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in sorted(files):
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                executable = name in ("setup.sh", "run_autograder")
                info.external_attr = (0o100755 if executable
                                      else 0o100644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, files[name])
        os.chmod(temporary, 0o644)
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return out


# --------------------------------------------------------------------------
# Running (inside the Gradescope container)


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


def _environment(source: Path) -> dict[str, str]:
    env = dict(os.environ)
    seed_file = source / SEED_FILE
    if not env.get(SEED_ENV, "").strip() and seed_file.is_file():
        env[SEED_ENV] = seed_file.read_text(encoding="utf-8").strip()
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
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = process.communicate()
        return None, stderr
    finally:
        if process.poll() is None:
            process.kill()
    if stdout:
        sys.stdout.write(stdout)
    return process.returncode, stderr


def run(root: Path, assignment: str | None = None,
        timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
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
    print(f"grading {submission} with kit {_kit_version()} (assignment: "
          f"{which})", flush=True)
    try:
        status, stderr = _execute(command, source, _environment(source),
                                  timeout)
    except OSError as exc:
        status, stderr = -1, f"cannot start the grader: {exc}"
    seconds = time.perf_counter() - started
    if stderr.strip():
        sys.stdout.write(f"--- grader's standard error ---\n{stderr}\n")
    report = _valid_report(partial) if status == 0 else None
    if report is not None:
        outcome = report
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
    from grader.files import write_atomic

    write_atomic(results, json.dumps(outcome, indent=2) + "\n")
    partial.unlink(missing_ok=True)
    print(f"score: {outcome['score']:g}", flush=True)
    return outcome


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.bundle run [--root DIR] [--assignment ID]``."""
    parser = argparse.ArgumentParser(
        prog="python -m grader.bundle",
        description="Inside a Gradescope autograder: grade the submission "
                    "and write results/results.json.")
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="grade ROOT/submission")
    runner.add_argument("--root", type=Path,
                        default=Path(os.environ.get(ROOT_ENV, DEFAULT_ROOT)))
    runner.add_argument("--assignment", metavar="ID")
    args = parser.parse_args(argv)
    timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    run(args.root, args.assignment, timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
