"""``python -m grader batch DIR``: grading a whole class, losing nothing.

Details: docs/internals.md, `grader.routes.batch`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.errors import BatchError
from grader.locate.submission import label
from grader.output.text import one_line
from grader.routes.classfolder import (ClassFolder, Entry, class_assignment,
                                       discover)
from grader.routes.judges import (JudgeOptions, judge_all, prewarm, row_of,
                                  save_error)
from grader.routes.rows import (STATUS_ERROR, STATUS_GRADED, error_row,
                                record_path, write_csv)

# Seconds between two rewrites of a running batch's CSV (see run_batch).
CSV_EVERY = 2.0


def check_writable(folder: Path) -> None:
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


# --------------------------------------------------------------------------
# Judges


class Progress:
    """A progress bar on a terminal, plain lines otherwise (stderr)."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()
        self.graded_here = 0

    def update(self, row: dict, seconds: float) -> None:
        self.done += 1
        self.graded_here += 1
        bonus = row.get("bonus") or 0.0
        score = (f"{row['score'] - bonus:g}/{row['max_score']:g}"
                 + (f" +{bonus:g} bonus" if bonus else "")
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
            row = row_of(entry, record, "")
            if row["status"] == STATUS_GRADED:
                rows[entry.key] = row
    return rows


@dataclass(frozen=True)
class BatchOptions:
    """What a batch is asked to do: the typed options of :func:`run_batch`
    (``python -m grader batch`` builds them with :meth:`from_args`)."""

    dir: Path
    out: Path
    judges: JudgeOptions = field(default_factory=JudgeOptions)
    resume: bool = False
    shard: tuple[int, int] | None = None
    only: tuple[str, ...] = ()
    roster: Path | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BatchOptions:
        """The options of a parsed ``batch`` command line."""
        roster = getattr(args, "roster", None)
        return cls(dir=Path(args.dir), out=Path(args.out),
                   judges=JudgeOptions.from_args(args),
                   resume=bool(getattr(args, "resume", False)),
                   shard=getattr(args, "shard", None),
                   only=tuple(getattr(args, "only", None) or ()),
                   roster=Path(roster) if roster is not None else None)


def _prepare(options: BatchOptions, out: Path, reports: Path
             ) -> tuple[ClassFolder, str]:
    """Everything checked before grading starts: the class folder, the
    outputs, the assignment (returned). Raises CliError (exit 2) with one
    line."""
    from grader.errors import CliError
    from grader.rubric import RubricError, get_assignment

    try:
        named = options.judges.assignment
        if named:
            get_assignment(named)
        from grader.routes.summary import summary_paths

        # The batch's own outputs, the summary too, are never students.
        found = discover(options.dir, named,
                         exclude=(out, reports, *summary_paths(out)))
        check_writable(out.parent if str(out.parent) else Path("."))
        check_writable(reports)
        chosen = named or found.assignment
        if chosen:
            how = ("--assignment" if named else
                   "the nbgrader course's assignment id")
            found.notes.append(f"assignment {chosen} ({how})")
        else:
            chosen, how = class_assignment(found.entries)
            found.notes.append(how)
    except (BatchError, RubricError) as exc:
        raise CliError(str(exc)) from exc
    return found, chosen


def read_roster(path: Path) -> list[str]:
    """The students of a roster file: one a line, a CSV's first column;
    blank lines, ``#`` comments and a ``student``/``name`` header are
    skipped. Raises CliError (exit 2) when it cannot be read."""
    import csv

    from grader.errors import CliError

    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read the roster {label(str(path))}: "
                       f"{exc}") from exc
    names = []
    for cells in csv.reader(text.splitlines()):
        name = cells[0].strip() if cells else ""
        if name and not name.startswith("#") and name.lower() not in (
                "student", "name", "students") and name not in names:
            names.append(name)
    return names


def absent_rows(roster: list[str], entries: list[Entry],
                source: Path) -> list[dict]:
    """A row of 0 for every student of the roster with no entry in the
    class folder (names compared without case)."""
    present = {e.student.lower() for e in entries}
    return [{**error_row(name, source, f"submitted nothing: {name} is on "
                         f"the roster {label(str(source))} but has no "
                         f"entry in the class folder"), "max_score": ""}
            for name in roster if name.lower() not in present]


def run_batch(options: BatchOptions) -> int:
    """Grade every submission of ``options.dir`` (or those of ``--only``,
    or one ``--shard``); return the exit status."""
    out = options.out
    reports = out.with_name(out.name + ".reports")
    found, chosen = _prepare(options, out, reports)
    everyone = found.entries
    entries, kept = _selected(options, everyone, out, reports)
    roster = options.roster
    if roster is not None:
        listed = {row["student"] for row in kept}
        kept = kept + [row for row in absent_rows(
            read_roster(roster), everyone, roster)
            if row["student"] not in listed]
    for note in found.notes:
        sys.stderr.write(f"{note}\n")

    rows: dict[str, dict] = _resumed(entries, reports) if options.resume \
        else {}
    if rows:
        sys.stderr.write(f"resuming: {len(rows)} already graded, "
                         f"{len(entries) - len(rows)} to go\n")
    progress = Progress(len(entries), len(rows))
    for entry in entries:
        if entry.problem and entry.key not in rows:
            rows[entry.key] = error_row(entry.student, entry.path,
                                        f"not graded: {entry.problem}")
            save_error(reports, entry, rows[entry.key])
            progress.update(rows[entry.key], 0.0)
    todo = [e for e in entries if e.key not in rows]
    judges = replace(options.judges, assignment=chosen)
    prewarm(judges)
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
    shard = options.shard
    if shard:
        from grader.routes.shards import write_manifest

        write_manifest(reports, shard, everyone, entries)
        sys.stdout.write(f"shard {shard[0]}/{shard[1]}: 'python -m grader "
                         f"merge' writes the class summary once every "
                         f"shard is done\n")
    else:
        summarise(out, kept + list(rows.values()), reports)
    return 0 if not errors else 1


def summarise(out: Path, rows: list[dict], reports: Path) -> None:
    """Print the class summary and write it beside ``out``
    (:func:`grader.routes.summary.write_summary`); a summary that fails is a
    warning: the grades are written already."""
    from grader.routes.summary import write_summary

    try:
        write_summary(out, rows, reports)
    except Exception as exc:  # never lose a finished batch to a picture
        sys.stderr.write(f"warning: no class summary ({type(exc).__name__}"
                         f": {one_line(str(exc))}); run python -m grader "
                         f"summary {out} to retry\n")


def _selected(options: BatchOptions, everyone: list[Entry], out: Path,
              reports: Path) -> tuple[list[Entry], list[dict]]:
    """The entries this run grades, and the rows it keeps as they are.

    ``--only NAME...``: those students (by the CSV's name or the entry's
    file name); every other row of an existing ``out`` is kept as it is,
    and the chosen students' report folders are replaced. ``--shard I/N``:
    the I-th of N deterministic parts of the class (see
    :func:`grader.routes.shards.shard_of`). Raises CliError for a name that is
    no student of the class.
    """
    from grader.errors import CliError

    entries = everyone
    kept: list[dict] = []
    if options.shard:
        from grader.routes.shards import shard_of

        entries = shard_of(entries, *options.shard)
    only = options.only
    if not only:
        return entries, kept
    if options.resume:
        raise CliError("--only regrades the students it names: it cannot "
                       "be combined with --resume")
    names = {n: e for e in entries for n in (e.student, e.path.name, e.key)}
    unknown = [name for name in only if name not in names]
    if unknown:
        raise CliError(f"--only: no student named "
                       f"{', '.join(label(n) for n in unknown[:5])} in "
                       f"{label(str(options.dir))}")
    chosen = list({names[n].key: names[n] for n in only}.values())
    if out.is_file():
        from grader.routes.rows import RowsError, read_csv

        try:
            previous = read_csv(out)
        except RowsError as exc:
            raise CliError(str(exc)) from exc
        students = {e.student for e in chosen}
        kept = [row for row in previous if row["student"] not in students]
    for entry in chosen:
        folder = reports / entry.key
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
    return chosen, kept
