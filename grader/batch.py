"""``python -m grader batch DIR``: grading a whole class, losing nothing.

**The class folder.** DIR is one of:

* an nbgrader course root (it holds ``nbgrader_config.py``) or its
  ``submitted/`` folder: one student per ``submitted/<student>/``, graded
  from ``submitted/<student>/<assignment>/``; nothing else of the course
  (``gradebook.db``, ``autograded/``, ``feedback/``, ``source/``...) is a
  student;
* a flat folder: every visible entry is one student's (a folder, a ``.py``
  file, a notebook), whatever its name (``submitted/`` or ``feedback/``
  there are students' folders). An entry of another kind (a ``.zip``, a
  FIFO, a symbolic link, which the batch never follows) still gets a row,
  with the reason it was not graded.

A folder that is one submission (``transformer_lm/<module>.py`` at its
top, as in a student repository or the kit) or that holds nothing any
assignment defines is refused before grading starts. Each student is
graded only from their own entry: a notebook's "module beside it" is never
looked up in a batch (the files beside an entry are classmates').

**The assignment** is ``--assignment``, else the course's assignment id
(nbgrader), else the one the class as a whole fits: every entry is
assessed first (what it defines), and the assignment most entries fit best
is graded for everyone; an entry that fits another better is graded as
the class's and flagged ``wrong_assignment``.

**Rows and reports.** A warm coordinator (torch and the grader imported
once) forks one *judge* per submission, ``--jobs`` at a time; each judge
grades its submission exactly like ``python -m grader grade``, writes the
student's record and feedback into ``FILE.csv.reports/<key>/`` and hands
the coordinator one row. ``<key>`` is a safe file name unique to the entry
(``alice.py`` and ``alice.json.py`` are two students with two folders);
the ``student`` column shows the entry's name with control characters and
undecodable bytes escaped. The CSV is rewritten atomically after every
submission, so it is always whole, and no cell starts with ``=``, ``+``,
``-`` or ``@`` (:func:`grader.text.csv_cell`).

Nothing is lost: a judge that dies (killed from outside, out of memory) is
retried once and then recorded as an error row; one that hangs is stopped
at a deadline; an interrupted batch keeps every finished report, and
``--resume`` grades only the submissions without one.
"""
from __future__ import annotations

import argparse
import csv
import gc
import hashlib
import io
import json
import math
import os
import re
import select
import shutil
import signal
import stat
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from grader.files import write_atomic
from grader.proctree import fork_with_pipe, kill_group
from grader.submission import label
from grader.text import csv_cell, one_line

if TYPE_CHECKING:
    from grader.plan import Plan

SUBMISSION_SUFFIXES = (".py", ".ipynb")
STATUS_GRADED = "graded"
STATUS_ERROR = "error"
RETRIES = 1
COURSE_CONFIG = "nbgrader_config.py"
SUBMITTED = "submitted"
RECORD = "record.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


# Seconds between two rewrites of a running batch's CSV (see run_batch).
CSV_EVERY = 2.0


class BatchError(Exception):
    """A batch that cannot start (bad folder, unwritable output)."""


@dataclass(frozen=True)
class Entry:
    """One student's submission in the batch folder.

    ``student`` is what the CSV and the terminal show (escaped); ``key``
    names the student's report folder (safe and unique); ``problem``, when
    set, is why the entry cannot be graded (it gets an error row without
    a judge).
    """

    student: str
    path: Path
    key: str = ""
    problem: str = ""

    def __post_init__(self) -> None:
        if not self.key:  # a caller that names no key gets a safe one
            name = Path(self.path).name
            object.__setattr__(self, "key", _keys([name])[name])


@dataclass
class ClassFolder:
    """What ``batch`` found in DIR."""

    entries: list[Entry]
    layout: str                          # "nbgrader" or "flat"
    assignment: str | None = None        # named by the layout, if any
    notes: list[str] = field(default_factory=list)


def _keys(names: list[str]) -> dict[str, str]:
    """A safe, unique report-folder name for each entry name.

    ASCII letters, digits, ``_``, ``.`` and ``-`` only, never starting
    with a dot or a dash; a name that had to change, or that shares its
    lower-case form with another (a case-insensitive disk would merge
    them), gets a short hash of its bytes.
    """
    bases = {name: _UNSAFE.sub("_", name).lstrip(".-")[:80] or "entry"
             for name in names}
    lower = [base.lower() for base in bases.values()]
    keys: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(names):
        base = bases[name]
        if base != name or lower.count(base.lower()) > 1:
            digest = hashlib.sha256(os.fsencode(name)).hexdigest()
            base = f"{base}-{digest[:10]}"
        key, number = base, 1
        while key.lower() in taken:
            number += 1
            key = f"{base}-{number}"
        taken.add(key.lower())
        keys[name] = key
    return keys


def _entry_problem(path: Path) -> str:
    """Why an entry of a flat folder cannot be graded ('' if it can)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(mode):
        return ("is a symbolic link; the batch follows no links (copy the "
                "submission into the class folder)")
    if stat.S_ISDIR(mode):
        return ""
    if not stat.S_ISREG(mode):
        from grader.submission import refusal

        return refusal(path, path.parent.resolve()) or "is not a file"
    if path.suffix not in SUBMISSION_SUFFIXES:
        return (f"not a submission: a {path.suffix or 'suffix-less'} file "
                f"(hand in a .py file, a notebook or a folder)")
    return ""


def _visible(folder: Path) -> list[Path]:
    from grader.submission import MAX_LISTING

    found = []
    try:
        with os.scandir(folder) as scan:
            for item in scan:
                if len(found) >= 4 * MAX_LISTING:
                    raise BatchError(f"{label(str(folder))} holds more "
                                     f"than {4 * MAX_LISTING} entries")
                if not item.name.startswith((".", "__")):
                    found.append(folder / item.name)
    except OSError as exc:
        raise BatchError(f"cannot list {label(str(folder))}: "
                         f"{exc.strerror}") from exc
    return sorted(found, key=lambda p: os.fsencode(p.name))


def _name_entries(found: list[tuple[str, Path, str]]) -> list[Entry]:
    """Entries from (name, path, problem): students are file stems unless
    two entries share a stem (then the full names)."""
    def stem(name: str, path: Path) -> str:
        return (name[:-len(path.suffix)] if path.suffix in
                SUBMISSION_SUFFIXES and not path.is_dir() and
                len(name) > len(path.suffix) else name)

    stems = [stem(n, p) for n, p, _ in found]
    keys = _keys([n for n, _, _ in found])
    entries = []
    for (name, path, problem), short in zip(found, stems):
        shown = short if stems.count(short) == 1 else name
        entries.append(Entry(label(shown), path, keys[name], problem))
    return entries


def _course(submitted: Path, assignment: str | None) -> ClassFolder:
    """The students of an nbgrader ``submitted/`` folder."""
    students = [p for p in _visible(submitted)
                if p.is_dir() and not p.is_symlink()]
    names: set[str] = set()
    for student in students:
        names |= {p.name for p in _visible(student)
                  if p.is_dir() and not p.is_symlink()}
    if assignment and assignment in names:
        folder = assignment
    elif len(names) == 1:
        folder = next(iter(names))
    elif not names:
        raise BatchError(f"{label(str(submitted))} holds no "
                         f"submitted/<student>/<assignment>/ folder: "
                         f"collect the submissions first")
    else:
        shown = ", ".join(label(n) for n in sorted(names)[:10])
        raise BatchError(f"{label(str(submitted))} holds several "
                         f"assignments ({shown}): choose one with "
                         f"--assignment")
    found = []
    for path in _visible(submitted):
        problem = "" if path in students else (
            "not a student folder of the nbgrader course")
        where = path / folder
        if not problem and not (where.is_dir() and not where.is_symlink()):
            problem = f"has no submission of {label(folder)}"
        found.append((path.name, where if not problem else path, problem))
    from grader.rubric import assignments

    known = {a.id for a in assignments()}
    return ClassFolder(_name_entries(found), "nbgrader",
                       folder if folder in known else None,
                       [f"nbgrader course: {len(found)} students, "
                        f"assignment folder {label(folder)}"])


def _one_submission(folder: Path) -> str:
    """What makes ``folder`` one submission ('' when nothing does)."""
    from grader.rubric import assignments

    for assignment in assignments():
        for inside in (Path("transformer_lm") / f"{assignment.module}.py",
                       Path("assignment") / assignment.id):
            if os.path.lexists(folder / inside):
                return str(inside)
    return ""


def discover(folder: Path, assignment: str | None = None,
             exclude: tuple[Path, ...] = ()) -> ClassFolder:
    """The students of the class folder ``folder`` (see the module
    docstring). ``exclude``: the batch's own outputs, if they lie inside.
    Raises :class:`BatchError` for a folder that is not a class folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BatchError(f"{label(str(folder))} is not a folder")
    config = folder / COURSE_CONFIG
    if config.is_file() and not config.is_symlink():
        submitted = folder / SUBMITTED
        if not (submitted.is_dir() and not submitted.is_symlink()):
            raise BatchError(f"{label(str(folder))} is an nbgrader course "
                             f"({COURSE_CONFIG}) without a {SUBMITTED}/ "
                             f"folder: collect the submissions first")
        return _course(submitted, assignment)
    real = Path(os.path.realpath(folder))
    if real.name == SUBMITTED and (real.parent / COURSE_CONFIG).is_file():
        return _course(folder, assignment)
    inside = _one_submission(folder)
    if inside:
        raise BatchError(f"{label(str(folder))} is one submission (it "
                         f"holds {inside}), not a class folder: grade it "
                         f"with python -m grader grade, or give the "
                         f"folder that holds one entry per student")
    # realpath, unlike Path.resolve, never raises on a symlink loop.
    excluded = {os.path.realpath(p) for p in exclude}
    found = [(path.name, path, _entry_problem(path))
             for path in _visible(folder)
             if os.path.realpath(path) not in excluded]
    if not any(not problem for _, _, problem in found):
        from grader.submission import what_is_there

        raise BatchError(f"{label(str(folder))} is neither a class folder "
                         f"nor a submission: no entry is a folder, a .py "
                         f"file or a notebook (it holds "
                         f"{what_is_there(folder)})")
    return ClassFolder(_name_entries(found), "flat")


def class_assignment(entries: list[Entry]) -> tuple[str, str]:
    """The assignment the class as a whole fits, and a sentence saying
    how it was chosen: each gradable entry votes for the assignment it
    fits best; most votes win (ties: the larger total share implemented,
    then rubric order). Raises :class:`BatchError` when no entry defines
    any graded name."""
    from grader.rubric import assignments
    from grader.submission import SubmissionError, assess, best_fit

    order = [a.id for a in assignments()]
    votes = {a: 0 for a in order}
    shares = {a: 0.0 for a in order}
    for entry in entries:
        if entry.problem:
            continue
        try:
            fits = assess(entry.path)
        except (SubmissionError, OSError, RecursionError, MemoryError):
            continue
        best = best_fit(fits)
        if best is not None:
            votes[best] += 1
            for assignment, fit in fits.items():
                shares[assignment] += fit.implemented
    if not any(votes.values()):
        raise BatchError("no entry of the class folder defines any "
                         "assignment's graded classes or functions: it is "
                         "neither a class folder nor a submission "
                         "(--assignment names the assignment)")
    chosen = max(order, key=lambda a: (votes[a], shares[a],
                                       -order.index(a)))
    total = sum(votes.values())
    return chosen, (f"assignment {chosen}: the one {votes[chosen]} of "
                    f"{total} recognised submissions fit best "
                    f"(--assignment chooses)")


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
           "assignment": report.get("assignment", ""),
           "path": label(str(path)),
           "errors": " | ".join(report.get("errors", [])),
           # What is no error but worth knowing (an untouched task).
           "notes": " | ".join(note for task in report.get("tasks", [])
                               for note in task.get("notes", [])),
           "flags": " | ".join(f["message"] for f in
                               report.get("flags", [])),
           # The known mistakes its items diagnosed, each id once.
           "diagnoses": " | ".join(dict.fromkeys(
               mistake for item in report["items"]
               for mistake in item.get("diagnosis", [])))}
    for item in report["items"]:
        row[item["id"]] = item["score"]
    return row


def error_row(student: str, path: Path, message: str) -> dict:
    """A row for a submission that could not be graded."""
    return {"student": student, "status": STATUS_ERROR, "score": 0.0,
            "max_score": "", "assignment": "", "path": label(str(path)),
            "errors": message}


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write every row, atomically, items in rubric order; every cell
    through :func:`grader.text.csv_cell` (no formulas, no controls)."""
    fixed = ["student", "status", "score", "max_score"]
    tail = ["diagnoses", "flags", "errors", "notes", "assignment", "path"]
    items: list[str] = []
    for row in rows:
        items += [k for k in row if k not in fixed + tail
                  and k not in items]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fixed + items + tail,
                            restval="", lineterminator="\n")
    writer.writeheader()
    for row in sorted(rows, key=lambda r: (r["student"], r["path"])):
        writer.writerow({key: csv_cell(value) for key, value in row.items()})
    write_atomic(path, buffer.getvalue())


# --------------------------------------------------------------------------
# Judges


def record_path(reports: Path, entry: Entry) -> Path:
    """Where the judge keeps an entry's record (status, report or error):
    ``<reports>/<key>/record.json``, beside its feedback files."""
    return reports / entry.key / RECORD


@dataclass
class JudgeOptions:
    """How the judges of a class grade: the typed options of
    :func:`judge_all` (``batch`` and ``nbgrader`` build them from their
    command lines)."""

    assignment: str | None = None
    seed: int | None = None
    public_only: bool = False
    timeout: float = 20.0
    memory: int = 2048
    no_feedback: bool = False
    jobs: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> JudgeOptions:
        """The options a parsed command line gives (absent ones keep their
        defaults)."""
        given = {name: getattr(args, name) for name in
                 cls.__dataclass_fields__ if hasattr(args, name)}
        return cls(**given)


def _judge(entry: Entry, reports: Path, args: JudgeOptions,
           result_fd: int, plan: Plan | None = None) -> None:
    """Grade one submission (in a forked child); send back its row.

    The submission is located from its own entry alone (no module beside
    it is looked up) and graded against ``args.assignment``, the class's,
    with the coordinator's ``plan`` of the cases (built once for all).
    """
    from grader.engine import Options, grade_submission
    from grader.sandbox import Limits
    from grader.submission import SubmissionError, locate

    record = {"student": entry.student, "path": str(entry.path)}
    try:
        options = Options(seed=args.seed, public_only=args.public_only,
                          limits=Limits(timeout=args.timeout,
                                        memory_mb=args.memory),
                          judge=True, plan=plan)
        submission = locate(entry.path, args.assignment, nearby=False)
        report = grade_submission(submission, options)
        record.update(status=STATUS_GRADED, report=report.as_json())
        if not args.no_feedback:
            from grader.feedback import write_feedback

            write_feedback(report, reports / entry.key)
    except SubmissionError as exc:
        record.update(status=STATUS_ERROR,
                      error=f"could not grade: {exc}")
    except Exception as exc:  # a grader bug must not stop the batch
        record.update(status=STATUS_ERROR,
                      error=f"internal grader error: "
                            f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc())
    write_atomic(record_path(reports, entry),
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
    ended: bool = False  # its pipe reached end of file: the judge exits


def _start(entry: Entry, reports: Path, args: JudgeOptions,
           attempt: int, others: list[_Running],
           plan: Plan | None = None) -> _Running:
    def judge(write_fd: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _judge(entry, reports, args, write_fd, plan)

    pid, read_fd = fork_with_pipe(
        judge, close=[other.fd for other in others], new_group=True)
    os.set_blocking(read_fd, False)
    return _Running(entry, pid, read_fd, time.monotonic(), attempt,
                    bytearray())


def _stop(running: _Running) -> None:
    kill_group(running.pid, signal.SIGKILL)


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


def _deadline(args: JudgeOptions) -> float:
    """How long one judge may take: two rounds of workers (the second
    when the module-level code raised), each as long as a starved worker
    may run (grader.sandbox.WALL_FACTOR), plus slack."""
    from grader.sandbox import WALL_FACTOR

    return 2 * WALL_FACTOR * args.timeout + 60.0


def _collect(running: _Running) -> dict | None:
    try:
        while chunk := os.read(running.fd, 1 << 16):
            running.data.extend(chunk)
        running.ended = True
    except BlockingIOError:
        pass
    try:
        return json.loads(bytes(running.data)) if running.data else None
    except json.JSONDecodeError:
        return None


def _prewarm(args: JudgeOptions) -> None:
    """Import, once, everything a judge needs (flake8 too: each judge
    lints in a fork of itself), and start the fork server every judge
    asks for its workers (it warms up meanwhile). Again: a no-op."""
    from grader import forkserver

    forkserver.start()
    import torch

    import grader.engine
    from grader import pep8
    from grader.plugin import plugins

    if "flake8.main.cli" not in sys.modules:
        pep8.warm_up(grader.engine.FLAKE8_CONFIG)

    torch.set_num_threads(1)
    plugins()
    if not args.no_feedback:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.font_manager  # noqa: F401
        import PIL.ImageDraw  # noqa: F401

        import grader.figures  # noqa: F401
    # Every judge asks this one server for its workers: it must be ready
    # before the first judge is forked (see ForkServer.wait_ready).
    try:
        forkserver.shared().wait_ready()
    except forkserver.ForkServerError:
        pass  # each judge reports it for its submission


def _plan(args: JudgeOptions) -> Plan | None:
    """The cases' plan every judge grades with, built once here (None
    when the assignment is not known yet: each judge builds its own)."""
    from grader.engine import build_plan, resolve_seed
    from grader.rubric import RubricError, get_assignment

    if not args.assignment:
        return None
    try:
        assignment = get_assignment(args.assignment)
    except RubricError:
        return None
    return build_plan(assignment, resolve_seed(args.seed)[0],
                      args.public_only)


def _row(entry: Entry, record: dict | None, why: str) -> dict:
    """The row of a finished judge (``record``), or an error row saying
    ``why`` there is none; never raises."""
    try:
        if record is None:
            return error_row(entry.student, entry.path,
                             f"could not grade: {why}")
        if record.get("status") == STATUS_GRADED:
            return row_from_report(entry.student, entry.path,
                                   record["report"])
        return error_row(entry.student, entry.path,
                         str(record.get("error", "could not grade")))
    except (KeyError, TypeError, ValueError) as exc:
        return error_row(entry.student, entry.path,
                         f"internal grader error: unreadable record "
                         f"({type(exc).__name__}: {exc})")


def _save_error(reports: Path, entry: Entry, row: dict) -> None:
    write_atomic(record_path(reports, entry),
                 json.dumps({"student": entry.student,
                             "path": str(entry.path),
                             "status": STATUS_ERROR,
                             "error": row["errors"]}, indent=2) + "\n")


def _resumed(entries: list[Entry], reports: Path) -> dict[str, dict]:
    rows = {}
    for entry in entries:
        try:
            record = json.loads(record_path(reports, entry).read_text(
                encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get(
                "status") == STATUS_GRADED and "report" in record:
            row = _row(entry, record, "")
            if row["status"] == STATUS_GRADED:
                rows[entry.key] = row
    return rows


def _prepare(args: argparse.Namespace, out: Path, reports: Path
             ) -> tuple[ClassFolder, argparse.Namespace]:
    """Everything checked before grading starts: the class folder, the
    outputs, the assignment. Raises CliError (exit 2) with one line."""
    from grader.errors import CliError
    from grader.rubric import RubricError, get_assignment

    try:
        if args.assignment:
            get_assignment(args.assignment)
        from grader.summary import summary_paths

        # The batch's own outputs, the summary too, are never students.
        found = discover(args.dir, args.assignment,
                         exclude=(out, reports, *summary_paths(out)))
        _check_writable(out.parent if str(out.parent) else Path("."))
        _check_writable(reports)
        chosen = args.assignment or found.assignment
        if chosen:
            how = ("--assignment" if args.assignment else
                   "the nbgrader course's assignment id")
            found.notes.append(f"assignment {chosen} ({how})")
        else:
            chosen, how = class_assignment(found.entries)
            found.notes.append(how)
    except (BatchError, RubricError) as exc:
        raise CliError(str(exc)) from exc
    args = argparse.Namespace(**vars(args))
    args.assignment = chosen
    return found, args


def run_batch(args: argparse.Namespace) -> int:
    """Grade every submission of ``args.dir`` (or those of ``--only``,
    or one ``--shard``); return the exit status."""
    out = Path(args.out)
    reports = out.with_name(out.name + ".reports")
    found, args = _prepare(args, out, reports)
    everyone = found.entries
    entries, kept = _selected(args, everyone, out, reports)
    for note in found.notes:
        sys.stderr.write(f"{note}\n")

    rows: dict[str, dict] = _resumed(entries, reports) if args.resume \
        else {}
    if rows:
        sys.stderr.write(f"resuming: {len(rows)} already graded, "
                         f"{len(entries) - len(rows)} to go\n")
    progress = _Progress(len(entries), len(rows))
    for entry in entries:
        if entry.problem and entry.key not in rows:
            rows[entry.key] = error_row(entry.student, entry.path,
                                        f"not graded: {entry.problem}")
            _save_error(reports, entry, rows[entry.key])
            progress.update(rows[entry.key], 0.0)
    todo = [e for e in entries if e.key not in rows]
    judges = JudgeOptions.from_args(args)
    _prewarm(judges)
    write_csv(out, kept + list(rows.values()))

    written = [time.monotonic()]

    def done(entry: Entry, row: dict, record: dict | None,
             seconds: float) -> None:
        # The CSV is rewritten at most every CSV_EVERY seconds (and at the
        # end): rewriting it after every student costs the coordinator
        # time that grows with the class, while cores wait for a judge.
        # Nothing is lost meanwhile: each judge's record is on disk, and
        # --resume rebuilds the rows from them.
        rows[entry.key] = row
        if time.monotonic() - written[0] >= CSV_EVERY:
            write_csv(out, kept + list(rows.values()))
            written[0] = time.monotonic()
        progress.update(row, seconds)

    stop = judge_all(todo, reports, judges, done)
    write_csv(out, kept + list(rows.values()))
    errors = [r for r in rows.values() if r["status"] == STATUS_ERROR]
    if stop:
        sys.stderr.write(f"\ninterrupted: {len(rows)} of {len(entries)} "
                         f"submissions graded and kept in {out}; run again "
                         f"with --resume to grade the rest\n")
        return 130
    sys.stdout.write(f"graded {len(rows) - len(errors)} of {len(entries)} "
                     f"submissions -> {out} (reports in {reports})\n")
    for row in sorted(errors, key=lambda r: r["student"]):
        sys.stdout.write(f"  not graded: {row['student']}: "
                         f"{one_line(row['errors'])}\n")
    shard = getattr(args, "shard", None)
    if shard:
        from grader.shards import write_manifest

        write_manifest(reports, shard, everyone, entries)
        sys.stdout.write(f"shard {shard[0]}/{shard[1]}: 'python -m grader "
                         f"merge' writes the class summary once every "
                         f"shard is done\n")
    else:
        summarise(out, kept + list(rows.values()), reports)
    return 0 if not errors else 1


def summarise(out: Path, rows: list[dict], reports: Path) -> None:
    """Print the class summary and write it beside ``out``
    (:func:`grader.summary.write_summary`); a summary that fails is a
    warning: the grades are written already."""
    from grader.summary import write_summary

    try:
        write_summary(out, rows, reports)
    except Exception as exc:  # never lose a finished batch to a picture
        sys.stderr.write(f"warning: no class summary ({type(exc).__name__}"
                         f": {one_line(str(exc))}); run python -m grader "
                         f"summary {out} to retry\n")


def _selected(args: argparse.Namespace, everyone: list[Entry], out: Path,
              reports: Path) -> tuple[list[Entry], list[dict]]:
    """The entries this run grades, and the rows it keeps as they are.

    ``--only NAME...``: those students (by the CSV's name or the entry's
    file name); every other row of an existing ``out`` is kept as it is,
    and the chosen students' report folders are replaced. ``--shard I/N``:
    the I-th of N deterministic parts of the class (see
    :func:`grader.shards.shard_of`). Raises CliError for a name that is
    no student of the class.
    """
    from grader.errors import CliError

    entries = everyone
    kept: list[dict] = []
    if getattr(args, "shard", None):
        from grader.shards import shard_of

        entries = shard_of(entries, *args.shard)
    only = getattr(args, "only", None)
    if not only:
        return entries, kept
    if args.resume:
        raise CliError("--only regrades the students it names: it cannot "
                       "be combined with --resume")
    names = {n: e for e in entries for n in (e.student, e.path.name, e.key)}
    unknown = [name for name in only if name not in names]
    if unknown:
        raise CliError(f"--only: no student named "
                       f"{', '.join(label(n) for n in unknown[:5])} in "
                       f"{label(str(args.dir))}")
    chosen = list({names[n].key: names[n] for n in only}.values())
    if out.is_file():
        from grader.summary import SummaryError, read_rows

        try:
            previous = read_rows(out)
        except SummaryError as exc:
            raise CliError(str(exc)) from exc
        students = {e.student for e in chosen}
        kept = [row for row in previous if row["student"] not in students]
    for entry in chosen:
        folder = reports / entry.key
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
    return chosen, kept


def judge_all(todo: list[Entry], reports: Path, args: JudgeOptions,
              done: Callable[[Entry, dict, dict | None, float], None]
              ) -> list[int]:
    """Grade ``todo`` in forked judges, ``args.jobs`` at a time.

    Each judge grades ``entry.path`` (against ``args.assignment`` when it
    is set) and writes its record (:func:`record_path`); ``done(entry, row,
    record, seconds)`` is called in this process as each one finishes,
    with its CSV row and the judge's record (None when the judge died
    twice or hung). Returns the signals that interrupted the loop (empty
    when every submission was judged).
    """
    _prewarm(args)
    plan = _plan(args)
    if plan is not None:
        from grader.checking import warm_up
        from grader.rubric import get_assignment

        warm_up(get_assignment(args.assignment))
    # What the coordinator holds now (torch, the plan) is never freed:
    # out of the garbage collector's sight, a judge neither walks it nor
    # copies its pages by touching them.
    gc.freeze()
    jobs = args.jobs or default_jobs()
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
                                      running, plan))
            _wait_for_news(running)
            for job in list(running):
                # A judge whose pipe ended has written its record and is
                # exiting (or died): wait for it rather than poll again.
                pid, status = os.waitpid(
                    job.pid, 0 if job.ended else os.WNOHANG)
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
                why = (f"grading took longer than {_deadline(args):g} s"
                       if late else _death(status))
                row = _row(job.entry, record, why)
                if record is None:
                    _save_error(reports, job.entry, row)
                done(job.entry, row, record, seconds)
    finally:
        for job in running:
            _stop(job)
            os.waitpid(job.pid, 0)
            os.close(job.fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stop


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup"),
                 own_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The cores this process may use: those of its CPU affinity, capped
    by the CPU quota of its cgroup (a container's ``--cpus``, a
    Kubernetes pod's limit), which ``os.cpu_count()`` ignores: a pod
    limited to 2 CPUs on a 64-core node must not start 64 judges."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root, own_cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(cores, 1)


def _cgroup_quota(root: Path, own_cgroup: Path) -> float | None:
    """CPUs allowed by the cgroup quota (v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), None when unlimited
    or unknown. The process's own cgroup is read first, then the root's
    (inside a container the two are the same)."""
    places = [root]
    try:
        for line in own_cgroup.read_text().splitlines():
            if line.startswith("0::/") and line.strip() != "0::/":
                places.insert(0, root / line.strip()[4:])
    except OSError:
        pass
    for place in places:
        try:
            limit, period = (place / "cpu.max").read_text().split()[:2]
            if limit == "max":
                return None
            return int(limit) / int(period)
        except (OSError, ValueError):
            pass
    try:
        limit = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return limit / period if limit > 0 and period > 0 else None


def default_jobs() -> int:
    """Judges at once by default: one more than the usable cores. A judge
    waits at times (for its workers to be forked and to start, for its
    last worker); the extra one keeps the cores busy (measured with
    bench/bench.py: a class of 300 on 2 cores in 54 s with 3 judges, 59 s
    with 2). Each judge's workers keep their own limits."""
    return usable_cores() + 1


def _wait_for_news(running: list[_Running]) -> None:
    """Sleep until a judge sends something or ends (or 50 ms pass), and
    read what came: the next judge starts as soon as a core is free."""
    listening = [job.fd for job in running if not job.ended]
    if not listening:
        return
    ready, _, _ = select.select(listening, [], [], 0.05)
    for job in running:
        if job.fd in ready:
            _collect(job)


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return (f"the grading process was killed ({name}) twice; "
                f"nothing of this submission was kept")
    return (f"the grading process ended (status "
            f"{os.WEXITSTATUS(status)}) without a result, twice")
