"""GitHub Classroom's autograding: the rubric as pass/fail tests.

Classroom's ``autograding-command-grader`` action runs one command per test
and awards the test's whole ``max-score`` (a whole number) when the command
exits 0, else nothing; ``autograding-grading-reporter`` adds the tests up.
So a rubric item worth P points becomes P one-point tests, "point k of
P", each passed when the item's credit is at least k: partial credit
(2 of 3 for the unscaled SelfAttention) shows as 2 passed tests of 3.

A test cannot be worth negative points, so the PEP-8 and shape-comment
penalties are absorbed exactly as for nbgrader
(:func:`grader.notebook.nbgrader_credits`): taken from the task's
point-bearing items, largest first, never below 0, so that each task's
tests add up to its clamped score. The bonus is a 1-point test of its own:
Classroom's maximum is the rubric's ``max_score`` plus the bonus points
(11 for 10 + 1), as in nbgrader. Each penalty also appears as a 0-point
test, failing when the penalty applies, so the report says where a point
went.

The workflow grades once (``python -m grader grade . --feedback grading``
writes ``grading/report.json``); every Classroom test then runs::

    python -m grader.classroom check grading/report.json ITEM [POINT]

which prints why and exits 0 (passed) or 1 (not passed, or no report).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.notebook import nbgrader_credits
from grader.rubric import Assignment, RubricError, get_assignment

REPORT = "grading/report.json"


@dataclass(frozen=True)
class ClassroomTest:
    """One Classroom test: a step of the workflow."""

    id: str          # the step id (letters, digits, underscores)
    name: str        # the test-name the reporter shows
    item: str        # the rubric item
    point: int       # k in 1..P for point-bearing items; 0 for a penalty
    of: int          # P, the item's points; 0 for a penalty
    max_score: int   # 1, or 0 for a penalty check

    @property
    def step_name(self) -> str:
        """The short name of the workflow step, e.g. ``task1.forward 2/3``."""
        if not self.point:
            return f"{self.item} (penalty check)"
        return f"{self.item} {self.point}/{self.of}"

    def command(self, report: str = REPORT) -> str:
        """The shell command the step runs."""
        point = f" {self.point}" if self.point else ""
        return (f"python -m grader.classroom check {report} "
                f"{self.item}{point}")


def _whole(points: float, item_id: str) -> int:
    if points != int(points):
        raise ValueError(f"{item_id} is worth {points:g} points; Classroom "
                         f"tests are worth whole points")
    return int(points)


def classroom_tests(assignment: Assignment) -> list[ClassroomTest]:
    """The Classroom tests of ``assignment``, in rubric order."""
    tests = []
    for item in assignment.items:
        slug = item.id.replace(".", "_")
        if item.kind in ("checks", "bonus"):
            points = _whole(item.points, item.id)
            label = "bonus point" if item.kind == "bonus" else "point"
            for point in range(1, points + 1):
                tests.append(ClassroomTest(
                    f"{slug}_{point}",
                    f"{item.id}: {label} {point} of {points} - "
                    f"{item.title}", item.id, point, points, 1))
        else:
            tests.append(ClassroomTest(
                slug, f"{item.id}: no penalty - {item.title} (a penalty is "
                      f"taken from {item.task}'s points)", item.id, 0, 0, 0))
    return tests


def check(report: dict, item_id: str, point: int = 0) -> tuple[bool, str]:
    """Whether one Classroom test passed, and why.

    ``point`` k >= 1: the item's credit (penalties absorbed) is at least k.
    ``point`` 0 (a penalty item): the penalty does not apply.
    """
    assignment = get_assignment(report["assignment"])
    rubric = assignment.item(item_id)
    items = {i["id"]: i for i in report["items"]}
    item = items[item_id]
    penalty = rubric.kind in ("pep8", "shapes")
    if penalty != (point == 0) or (not penalty and point > rubric.points):
        raise ValueError(f"{item_id} has no Classroom test for point "
                         f"{point}")
    if point == 0:
        passed = float(item["score"]) == 0.0
        verdict = "no penalty" if passed else f"penalty {item['score']:+g}"
        return passed, f"{item_id}: {verdict}. {item['message']}"
    credit = nbgrader_credits(report, assignment)[item_id]
    passed = credit >= point
    lines = [f"{item_id}: point {point} of {rubric.points:g} "
             f"{'earned' if passed else 'not earned'} (credit {credit:g} / "
             f"{rubric.points:g}). {item['message']}"]
    for mistake in item.get("diagnosis", []):
        lines.append(f"[{mistake}] {assignment.diagnoses.get(mistake, '')}")
    if credit < float(item["score"]):
        taken = [f"{i['id']} {i['score']:+g}" for i in report["items"]
                 if i["id"].startswith(rubric.task + ".")
                 and assignment.item(i["id"]).kind in ("pep8", "shapes")
                 and i["score"] < 0]
        lines.append(f"Penalties of {rubric.task} taken from this item: "
                     + ", ".join(taken))
    return passed, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.classroom check REPORT ITEM [POINT]``."""
    parser = argparse.ArgumentParser(
        prog="python -m grader.classroom",
        description="One GitHub Classroom test from a grader report: exit "
                    "0 when it passed, 1 when not.")
    commands = parser.add_subparsers(dest="command", required=True)
    checker = commands.add_parser("check", help="one test")
    checker.add_argument("report", type=Path,
                         help="the JSON report (python -m grader grade "
                              "--feedback DIR writes DIR/report.json)")
    checker.add_argument("item", help="a rubric item id, e.g. task1.forward")
    checker.add_argument("point", type=int, nargs="?", default=0,
                         help="k: passed when the item's credit is at least "
                              "k; omitted for a penalty item")
    args = parser.parse_args(argv)
    try:
        report = json.loads(args.report.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{args.item}: not graded: no grader report ({exc}); see the "
              f"grading step's log")
        return 1
    try:
        passed, message = check(report, args.item, args.point)
    except (KeyError, TypeError, ValueError, RubricError) as exc:
        print(f"{args.item}: not graded: the report has no such item or is "
              f"malformed ({exc!r})")
        return 1
    print(message)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
