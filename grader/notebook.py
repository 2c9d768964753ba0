"""Autograded notebook cells that run the real grader.

nbgrader's autograded test cells of the homework notebook call
:func:`grade_cells` on the code the kernel has executed (IPython's ``In``).
It writes that code to a scratch notebook (with the student module beside
it, as in the submission) and grades it with ``python -m grader grade`` in
a subprocess, so the points nbgrader records are exactly those of the
command line, and student code never runs in the kernel's grading cells.

nbgrader takes a test cell's last expression as its partial credit, which
must lie in [0, the cell's points]: a negative number would give full
marks. So the rubric's penalties (PEP-8, shape comments) are taken from
the task's point-bearing cells, largest first and never below 0; each
task's cells then add up to the task's clamped total, exactly as the grader
computes it. The bonus is a 1-point cell of its own.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.rubric import Assignment, get_assignment
from grader.source import GRADING_CELL_MARK

_CACHE: dict[str, NotebookGrade] = {}


def nbgrader_credits(report: dict, assignment: Assignment
                     ) -> dict[str, float]:
    """Each item's credit in nbgrader: penalties absorbed per task."""
    scores = {item["id"]: float(item["score"]) for item in report["items"]}
    credits = {}
    for task in assignment.tasks:
        items = assignment.items_of(task.id)
        positive = [i for i in items if i.kind == "checks"]
        penalty = -sum(scores.get(i.id, 0.0) for i in items
                       if i.kind in ("pep8", "shapes"))
        for item in sorted(positive, key=lambda i: scores.get(i.id, 0.0),
                           reverse=True):
            earned = scores.get(item.id, 0.0)
            taken = min(earned, penalty)
            credits[item.id] = earned - taken
            penalty -= taken
        for item in items:
            if item.kind == "bonus":
                credits[item.id] = scores.get(item.id, 0.0)
    return credits


@dataclass
class NotebookGrade:
    """The grader's report on the notebook, and nbgrader's credits."""

    report: dict
    assignment: Assignment
    figures: dict[str, list[Path]]

    @property
    def credits(self) -> dict[str, float]:
        """Item id -> nbgrader credit of its cell."""
        return nbgrader_credits(self.report, self.assignment)

    def explain(self, item_id: str) -> str:
        """What the student sees in the cell's output."""
        items = {i["id"]: i for i in self.report["items"]}
        item = items[item_id]
        rubric = self.assignment.item(item_id)
        credit = self.credits[item_id]
        lines = [f"{item_id}: {credit:g} / {rubric.points:g}  "
                 f"({rubric.title})", item["message"]]
        for mistake in item["diagnosis"]:
            lines.append(f"[{mistake}] "
                         f"{self.assignment.diagnoses.get(mistake, '')}")
        if credit < float(item["score"]):
            penalties = [f"{i['id']} {i['score']:+g}: {i['message']}"
                         for i in self.report["items"]
                         if i["id"].startswith(rubric.task + ".")
                         and self.assignment.item(i["id"]).kind in
                         ("pep8", "shapes") and i["score"] < 0]
            lines.append("Penalties of this task taken from this cell: "
                         + "; ".join(penalties))
        for task in self.report.get("tasks", []):
            if task["id"] == rubric.task:
                lines += [f"Problem: {p}" for p in task["problems"]]
        return "\n".join(line for line in lines if line)

    def cell(self, item_id: str) -> float:
        """Print the explanation, show any figure; return the credit."""
        print(self.explain(item_id))
        for figure in self.figures.get(item_id, []):
            try:
                from IPython.display import Image, display
            except ImportError:
                break
            display(Image(filename=str(figure)))
        return self.credits[item_id]


def _graded_code(history: list[str]) -> list[str]:
    return [cell for cell in history
            if cell.strip() and GRADING_CELL_MARK not in cell]


def _write_notebook(cells: list[str], path: Path) -> None:
    notebook = {"cells": [{"cell_type": "code", "metadata": {},
                           "execution_count": None, "outputs": [],
                           "source": cell} for cell in cells],
                "metadata": {"language_info": {"name": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook), encoding="utf-8")


def grade_cells(history: list[str], assignment_id: str,
                folder: Path | None = None,
                timeout: float = 300.0) -> NotebookGrade:
    """Grade the executed code cells ``history`` (IPython's ``In``).

    ``folder`` (default: the working folder) is where the submission's
    ``transformer_lm/<module>.py`` lives; it is graded when the notebook's
    class is still the stub, as ``python -m grader grade`` does. Results
    are cached per code, so several cells cost one grading.
    """
    assignment = get_assignment(assignment_id)
    folder = Path.cwd() if folder is None else Path(folder)
    module = folder / "transformer_lm" / f"{assignment.module}.py"
    cells = _graded_code(history)
    module_text = module.read_text(encoding="utf-8") \
        if module.is_file() else ""
    key = hashlib.sha256(json.dumps([assignment_id, cells, module_text])
                         .encode()).hexdigest()
    if key in _CACHE:
        return _CACHE[key]
    scratch = Path(tempfile.mkdtemp(prefix="notebook-grade-"))
    try:
        notebook = scratch / assignment.notebook
        _write_notebook(cells, notebook)
        if module_text:
            (scratch / "transformer_lm").mkdir()
            (scratch / "transformer_lm" / module.name).write_text(
                module_text, encoding="utf-8")
        feedback = scratch / "feedback"
        result = subprocess.run(
            [sys.executable, "-m", "grader", "grade", str(notebook),
             "--assignment", assignment_id, "--format", "json",
             "--feedback", str(feedback)],
            capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if result.returncode != 0:
            raise RuntimeError(f"the grader could not grade this notebook: "
                               f"{result.stderr.strip()}")
        report = json.loads(result.stdout)
        keep = Path(tempfile.mkdtemp(prefix="notebook-figures-"))
        figures: dict[str, list[Path]] = {}
        for png in sorted(feedback.glob("*.png")):
            item_id = png.name.split("__")[0]
            target = keep / png.name
            shutil.copy(png, target)
            figures.setdefault(item_id, []).append(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    grade = NotebookGrade(report=report, assignment=assignment,
                          figures=figures)
    _CACHE[key] = grade
    return grade


def item_cell(history: Any, assignment_id: str, item_id: str) -> float:
    """One autograded cell: grade (cached), explain, return the credit."""
    return grade_cells(list(history), assignment_id).cell(item_id)
