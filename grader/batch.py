"""``python -m grader batch DIR``: grading a whole class, losing nothing.

DIR holds one entry per student: a folder (a student repository, or
nbgrader's ``submitted/<student>/<assignment>/``), a ``.py`` file or a
notebook. A warm coordinator (torch and the grader imported once) forks one
*judge* per submission, ``--jobs`` at a time; each judge grades its
submission exactly like ``python -m grader grade`` (its own sandboxed
workers), writes the student's JSON report and feedback, and hands the
coordinator one row. The CSV is rewritten atomically after every
submission, so it is always whole.

Nothing is lost: a judge that dies (killed from outside, out of memory) is
retried once and then recorded as an error row; one that hangs is stopped
at a deadline; an interrupted batch keeps every finished report, and
``--resume`` grades only the submissions without one.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.files import write_atomic
from grader.text import csv_cell

SUBMISSION_SUFFIXES = (".py", ".ipynb")
STATUS_GRADED = "graded"
STATUS_ERROR = "error"
RETRIES = 1


class BatchError(Exception):
    """A batch that cannot start (bad folder, unwritable output)."""


@dataclass(frozen=True)
class Entry:
    """One student's submission in the batch folder."""

    student: str
    path: Path


def discover(folder: Path) -> tuple[list[Entry], list[str]]:
    """The submissions in ``folder`` (and what was skipped, and why)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BatchError(f"{folder} is not a folder")
    if (folder / "submitted").is_dir() and not any(
            p.suffix in SUBMISSION_SUFFIXES for p in folder.iterdir()):
        folder = folder / "submitted"  # an nbgrader course directory
    entries, skipped = [], []
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "__")):
            continue
        if path.is_dir() or path.suffix in SUBMISSION_SUFFIXES:
            student = path.name if path.is_dir() else path.stem
            entries.append(Entry(student, path))
        else:
            skipped.append(f"{path.name} (not a folder, .py or .ipynb)")
    students = [e.student for e in entries]
    clashes = sorted({s for s in students if students.count(s) > 1})
    if clashes:
        raise BatchError(f"several entries for the same student: "
                         f"{', '.join(clashes)} (e.g. alice.py and "
                         f"alice/); keep one per student")
    return entries, skipped


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".write-test-")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise BatchError(f"cannot write to {folder}: "
                         f"{exc.strerror or exc}") from exc


# --------------------------------------------------------------------------
# Rows


def row_from_report(student: str, path: Path, report: dict) -> dict:
    """A CSV row from a report's JSON."""
    row = {"student": student, "status": STATUS_GRADED,
           "score": report["score"], "max_score": report["max_score"],
           "assignment": report.get("assignment", ""), "path": str(path),
           "errors": " | ".join(report.get("errors", [])),
           "flags": " | ".join(f["message"] for f in
                               report.get("flags", []))}
    for item in report["items"]:
        row[item["id"]] = item["score"]
    return row


def error_row(student: str, path: Path, message: str) -> dict:
    """A row for a submission that could not be graded."""
    return {"student": student, "status": STATUS_ERROR, "score": 0.0,
            "max_score": "", "assignment": "", "path": str(path),
            "errors": message}


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write every row, atomically, items in rubric order."""
    fixed = ["student", "status", "score", "max_score"]
    tail = ["flags", "errors", "assignment", "path"]
    items: list[str] = []
    for row in rows:
        items += [k for k in row if k not in fixed + tail
                  and k not in items]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fixed + items + tail,
                            restval="", lineterminator="\n")
    writer.writeheader()
    for row in sorted(rows, key=lambda r: r["student"]):
        writer.writerow({key: csv_cell(value) for key, value in row.items()})
    write_atomic(path, buffer.getvalue())


# --------------------------------------------------------------------------
# Judges


def _judge(entry: Entry, reports: Path, args: argparse.Namespace,
           result_fd: int) -> None:
    """Grade one submission (in a forked child); send back its row."""
    from grader.engine import Options, grade
    from grader.sandbox import Limits
    from grader.submission import SubmissionError

    record = {"student": entry.student, "path": str(entry.path)}
    try:
        options = Options(seed=args.seed, public_only=args.public_only,
                          limits=Limits(timeout=args.timeout,
                                        memory_mb=args.memory))
        report = grade(entry.path, args.assignment, options)
        record.update(status=STATUS_GRADED, report=report.as_json())
        if not args.no_feedback:
            from grader.feedback import write_feedback

            write_feedback(report, reports / entry.student)
    except SubmissionError as exc:
        record.update(status=STATUS_ERROR,
                      error=f"could not grade: {exc}")
    except Exception as exc:  # a grader bug must not stop the batch
        record.update(status=STATUS_ERROR,
                      error=f"internal grader error: "
                            f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc())
    write_atomic(reports / f"{entry.student}.json",
                 json.dumps(record, indent=2) + "\n")
    data = json.dumps(record).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(result_fd, view):]


@dataclass
class _Running:
    entry: Entry
    pid: int
    fd: int
    started: float
    attempt: int
    data: bytearray


def _start(entry: Entry, reports: Path, args: argparse.Namespace,
           attempt: int, others: list[_Running]) -> _Running:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            for other in others:
                os.close(other.fd)
            os.setpgid(0, 0)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _judge(entry, reports, args, write_fd)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return _Running(entry, pid, read_fd, time.monotonic(), attempt,
                    bytearray())


def _stop(running: _Running) -> None:
    for kill in (lambda: os.killpg(running.pid, signal.SIGKILL),
                 lambda: os.kill(running.pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


class _Progress:
    """A progress bar on a terminal, plain lines otherwise (stderr)."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()
        self.graded_here = 0

    def update(self, row: dict, seconds: float) -> None:
        self.done += 1
        self.graded_here += 1
        score = (f"{row['score']:g}/{row['max_score']:g}"
                 if row["status"] == STATUS_GRADED else "ERROR")
        if not self.tty:
            sys.stderr.write(f"[{self.done}/{self.total}] {row['student']}:"
                             f" {score} ({seconds:.1f} s)\n")
            return
        rate = (time.monotonic() - self.started) / self.graded_here
        left = rate * (self.total - self.done)
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.total}  {rate:.2f} s each  "
                         f"{int(left) // 60}:{int(left) % 60:02d} left  ")
        if self.done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _deadline(args: argparse.Namespace) -> float:
    """How long one judge may take: both tasks' limits plus slack."""
    return 2 * args.timeout + 60.0


def _collect(running: _Running) -> dict | None:
    try:
        while chunk := os.read(running.fd, 1 << 16):
            running.data.extend(chunk)
    except BlockingIOError:
        pass
    try:
        return json.loads(bytes(running.data)) if running.data else None
    except json.JSONDecodeError:
        return None


def _prewarm(args: argparse.Namespace) -> None:
    """Import, once, everything a judge needs (again: a no-op)."""
    import torch

    import grader.engine  # noqa: F401
    from grader.rubric import assignments

    torch.set_num_threads(1)
    for assignment in assignments():
        if (assignment.folder / "cases.py").is_file():
            __import__(f"grader.assignments.{assignment.id}.cases")
    if not args.no_feedback:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot  # noqa: F401


def run_batch(args: argparse.Namespace) -> int:
    """Grade every submission of ``args.dir``; return the exit status."""
    try:
        entries, skipped = discover(args.dir)
    except BatchError as exc:
        from grader.cli import CliError

        raise CliError(str(exc)) from exc
    out = Path(args.out)
    reports = out.with_name(out.name + ".reports")
    from grader.cli import CliError

    try:
        _check_writable(out.parent if str(out.parent) else Path("."))
        _check_writable(reports)
    except BatchError as exc:
        raise CliError(str(exc)) from exc
    for note in skipped:
        sys.stderr.write(f"skipped: {note}\n")
    if not entries:
        raise CliError(f"no submissions in {args.dir}")

    rows: dict[str, dict] = {}
    if args.resume:
        for entry in entries:
            saved = reports / f"{entry.student}.json"
            try:
                record = json.loads(saved.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if record.get("status") == STATUS_GRADED and "report" in record:
                rows[entry.student] = row_from_report(
                    entry.student, entry.path, record["report"])
    todo = [e for e in entries if e.student not in rows]
    if rows:
        sys.stderr.write(f"resuming: {len(rows)} already graded, "
                         f"{len(todo)} to go\n")
    _prewarm(args)
    progress = _Progress(len(entries), len(rows))
    write_csv(out, list(rows.values()))

    def done(entry: Entry, row: dict, record: dict | None,
             seconds: float) -> None:
        rows[entry.student] = row
        write_csv(out, list(rows.values()))
        progress.update(row, seconds)

    stop = judge_all(todo, reports, args, done)
    write_csv(out, list(rows.values()))
    errors = [r for r in rows.values() if r["status"] == STATUS_ERROR]
    if stop:
        sys.stderr.write(f"\ninterrupted: {len(rows)} of {len(entries)} "
                         f"submissions graded and kept in {out}; run again "
                         f"with --resume to grade the rest\n")
        return 130
    sys.stdout.write(f"graded {len(rows) - len(errors)} of {len(entries)} "
                     f"submissions -> {out} (reports in {reports})\n")
    for row in errors:
        sys.stdout.write(f"  not graded: {row['student']}: "
                         f"{row['errors']}\n")
    return 0 if not errors else 1


def judge_all(todo: list[Entry], reports: Path, args: argparse.Namespace,
              done: Callable[[Entry, dict, dict | None, float], None]
              ) -> list[int]:
    """Grade ``todo`` in forked judges, ``args.jobs`` at a time.

    Each judge grades ``entry.path`` (against ``args.assignment`` when it
    is set) and writes ``reports/<student>.json``; ``done(entry, row,
    record, seconds)`` is called in this process as each one finishes,
    with its CSV row and the judge's record (None when the judge died
    twice or hung). Returns the signals that interrupted the loop (empty
    when every submission was judged).
    """
    _prewarm(args)
    jobs = args.jobs or os.cpu_count() or 1
    queue = [(entry, 0) for entry in todo]
    running: list[_Running] = []
    # Ctrl-C and SIGTERM only raise a flag that the loop checks: an
    # exception raised by a signal can land in a finaliser, where Python
    # prints it and carries on.
    stop: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stop.append(signum)

    previous = {sig: signal.signal(sig, on_signal)
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while (queue or running) and not stop:
            while queue and len(running) < jobs:
                entry, attempt = queue.pop(0)
                running.append(_start(entry, reports, args, attempt,
                                      running))
            time.sleep(0.02)
            for job in list(running):
                pid, status = os.waitpid(job.pid, os.WNOHANG)
                late = time.monotonic() - job.started > _deadline(args)
                if not pid and not late:
                    _collect(job)
                    continue
                if not pid:
                    _stop(job)
                    os.waitpid(job.pid, 0)
                record = _collect(job)
                os.close(job.fd)
                running.remove(job)
                seconds = time.monotonic() - job.started
                if record is None and not late and job.attempt < RETRIES:
                    queue.append((job.entry, job.attempt + 1))
                    continue
                if record is None:
                    why = (f"grading took longer than {_deadline(args):g} s"
                           if late else _death(status))
                    row = error_row(job.entry.student, job.entry.path,
                                    f"could not grade: {why}")
                    write_atomic(reports / f"{job.entry.student}.json",
                                 json.dumps({**row, "error": row["errors"]},
                                            indent=2) + "\n")
                elif record["status"] == STATUS_GRADED:
                    row = row_from_report(job.entry.student,
                                          job.entry.path, record["report"])
                else:
                    row = error_row(job.entry.student, job.entry.path,
                                    record["error"])
                done(job.entry, row, record, seconds)
    finally:
        for job in running:
            _stop(job)
            os.waitpid(job.pid, 0)
            os.close(job.fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stop


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return (f"the grading process was killed ({name}) twice; "
                f"nothing of this submission was kept")
    return (f"the grading process ended (status "
            f"{os.WEXITSTATUS(status)}) without a result, twice")
