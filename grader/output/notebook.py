"""The autograded cells of the kit's notebooks, as nbgrader sees them.

Details: docs/internals.md, `grader.output.notebook`.
"""
from __future__ import annotations

from grader.output.text import clean
from grader.rubric import Assignment

PENALTY_KINDS = ("pep8", "shapes")
CELL_KINDS = ("checks", "bonus")


def grade_id(item_id: str) -> str:
    """nbgrader's grade id of an item's cell: ``task1.init`` ->
    ``task1_init``."""
    return item_id.replace(".", "_")


def cell_points(assignment: Assignment, item_id: str) -> float:
    """What an item's autograded cell is worth in nbgrader: its points,
    but 0 for a bonus, which nbgrader records as the cell's extra credit
    (so nbgrader's maximum is the rubric's, the bonus apart)."""
    item = assignment.item(item_id)
    return 0.0 if item.kind == "bonus" else float(item.points)


def cell_items(assignment: Assignment) -> list[str]:
    """The items that have an autograded cell, in rubric order."""
    return [item.id for item in assignment.items
            if item.kind in CELL_KINDS]


def nbgrader_credits(report: dict, assignment: Assignment
                     ) -> dict[str, float]:
    """Each item's credit in nbgrader: penalties absorbed per task."""
    scores = {item["id"]: float(item["score"]) for item in report["items"]}
    credits = {}
    for task in assignment.tasks:
        items = assignment.items_of(task.id)
        positive = [i for i in items if i.kind == "checks"]
        penalty = -sum(scores.get(i.id, 0.0) for i in items
                       if i.kind in PENALTY_KINDS)
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


def cell_heading(assignment: Assignment, item_id: str, credit: float
                 ) -> str:
    """An autograded cell's first line: its credit out of its points, or
    for a bonus the extra credit it gives."""
    rubric = assignment.item(item_id)
    if rubric.kind == "bonus":
        return (f"{item_id}: +{credit:g} bonus, extra credit beyond the "
                f"{assignment.max_score:g} points (this cell is worth 0 "
                f"of them)  ({rubric.title})")
    return f"{item_id}: {credit:g} / {rubric.points:g}  ({rubric.title})"


def cell_text(report: dict, assignment: Assignment, item_id: str) -> str:
    """What an item's autograded cell says: its credit, the grader's
    message and diagnoses, the penalties taken from it, the task's notes
    and problems and the integrity flags on its task."""
    items = {i["id"]: i for i in report["items"]}
    item = items[item_id]
    rubric = assignment.item(item_id)
    credit = nbgrader_credits(report, assignment)[item_id]
    lines = [cell_heading(assignment, item_id, credit)]
    if credit < float(item["score"]):
        # Said before the message, whose points are the checks' own.
        lines.append(f"The checks earned {float(item['score']):g} / "
                     f"{rubric.points:g}; this task's penalties take "
                     f"{float(item['score']) - credit:g} from this cell "
                     f"(below).")
    lines.append(item["message"])
    for mistake in item["diagnosis"]:
        lines.append(f"[{mistake}] {assignment.diagnoses.get(mistake, '')}")
    if credit < float(item["score"]):
        penalties = [f"{i['id']} {i['score']:+g}: {i['message']}"
                     for i in report["items"]
                     if i["id"].startswith(rubric.task + ".")
                     and assignment.item(i["id"]).kind in PENALTY_KINDS
                     and i["score"] < 0]
        lines.append("Penalties of this task taken from this cell: "
                     + "; ".join(penalties))
    for task in report.get("tasks", []):
        if task["id"] == rubric.task:
            lines += [f"Note: {n}" for n in task.get("notes", [])]
            lines += [f"Problem: {p}" for p in task["problems"]]
    for flag in report.get("flags", []):
        if flag.get("task") in (None, rubric.task):
            lines.append(f"Integrity flag: {flag['message']}")
    return clean("\n".join(line for line in lines if line))
