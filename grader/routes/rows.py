"""A class's rows: one per student, as the CSV holds them (graded or
error), and where each student's record lies."""
from __future__ import annotations

import csv
import io
from pathlib import Path

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


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write every row, atomically, items in rubric order; every cell
    through :func:`grader.output.text.csv_cell` (no formulas, no controls)."""
    fixed = ["student", "status", "score", "max_score"]
    tail = ["bonus", "diagnoses", "flags", "errors", "syntax_error",
            "notes", "assignment", "path"]
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


def record_path(reports: Path, entry: Entry) -> Path:
    """Where the judge keeps an entry's record (status, report or error):
    ``<reports>/<key>/record.json``, beside its feedback files."""
    return reports / entry.key / RECORD
