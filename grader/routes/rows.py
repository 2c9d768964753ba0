"""A class's rows: one per student, as the CSV holds them (graded or
error), and where each student's record lies.

:func:`write_csv` and :func:`read_csv` are the CSV's one writer and one
reader: whatever a run writes and another reads back (``batch --only``,
``merge``, ``summary``) is written again byte for byte. Numbers stay
numbers (a penalty of ``-1.0`` is written ``-1.0``), and text that
:func:`grader.output.text.csv_cell` guarded (``'=cmd``) is read back
unguarded, so that it is guarded once, never twice (docs/cluster.md);
text that starts with a quote is guarded too, so that two students
(``=eve`` and ``'=eve``) never share a cell.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from grader.errors import GraderError
from grader.locate.submission import label
from grader.output.files import write_atomic
from grader.output.text import csv_cell
from grader.routes.classfolder import Entry

STATUS_GRADED = "graded"


STATUS_ERROR = "error"


RECORD = "record.json"


def row_from_report(student: str, path: Path, report: dict) -> dict:
    """A CSV row from a report's JSON."""
    row = {"student": student, "status": STATUS_GRADED,
           "score": report["score"], "max_score": report["max_score"],
           # The bonus points the score includes (shown apart everywhere).
           "bonus": report.get("bonus", 0.0),
           "assignment": report.get("assignment", ""),
           "path": label(str(path)),
           "errors": " | ".join(report.get("errors", [])),
           # Code that does not compile, for a TA to filter on.
           "syntax_error": " | ".join(dict.fromkeys(
               task["syntax_error"] for task in report.get("tasks", [])
               if task.get("syntax_error"))),
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


FIXED = ("student", "status", "score", "max_score")
TAIL = ("bonus", "diagnoses", "flags", "errors", "syntax_error", "notes",
        "assignment", "path")
# The columns that hold text whatever it looks like (a student named 3).
TEXT = ("student", "status", *(column for column in TAIL
                               if column != "bonus"))
# The cells csv_cell guarded: a formula's first character, or a quote.
GUARDED = ("'=", "'+", "'-", "'@", "''")


class RowsError(GraderError):
    """A CSV that is no batch's (one line, for the command line)."""


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write every row, atomically, items in rubric order; every cell
    through :func:`grader.output.text.csv_cell` (no formulas, no controls)."""
    fixed, tail = list(FIXED), list(TAIL)
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


def read_cell(column: str, text: str) -> object:
    """The value :func:`write_csv` wrote as ``text`` in ``column``: the
    formula guard taken off text, numbers (an unguarded ``-1.0``) as
    numbers. ``csv_cell(read_cell(column, text)) == text`` for every cell
    the writer writes."""
    if text[:2] in GUARDED:
        return text[1:]
    if column in TEXT:
        return text
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        # Only the writer's own spelling of a number is one ("1.50" is
        # text: written back as a number it would read 1.5).
        if str(number) == text:
            return number
    return text


def read_csv(path: Path) -> list[dict]:
    """The rows of a batch's CSV as :func:`write_csv` was given them (its
    exact inverse: writing them again writes the same bytes). Raises
    :class:`RowsError` with one line for a file that is unreadable or
    no batch's."""
    try:
        with Path(path).open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            cells = list(reader)
            fields = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RowsError(f"cannot read {label(str(path))}: {exc}") from exc
    if not {"student", "status", "score"} <= set(fields) or any(
            None in row for row in cells):
        raise RowsError(f"{label(str(path))} is not a batch's CSV (it has "
                        f"no student, status and score columns, or a row "
                        f"has more cells than the header)")
    return [{column: read_cell(column, text if text is not None else "")
             for column, text in row.items()} for row in cells]


def record_path(reports: Path, entry: Entry) -> Path:
    """Where the judge keeps an entry's record (status, report or error):
    ``<reports>/<key>/record.json``, beside its feedback files."""
    return reports / entry.key / RECORD
