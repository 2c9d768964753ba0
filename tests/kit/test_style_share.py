"""Proportionate style penalties (issue 16): no task loses more than half
its points to style, and every route agrees on half points.

The rule is checked by the rubric loader (grader/rubric.py): a rubric
whose PEP-8 and shape-comment penalties could take more than half a task's
points does not load. The warm-up's 2-point tasks have -0.5 penalties;
the homework keeps its -1s. A real warm-up grade with half-point penalties
(``submissions/attention_basics/penalties.py``) is then read by every
route: nbgrader's cell credits, GitHub Classroom's runners and tests, and
Gradescope's results, and each adds up to the grader's score.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.output.notebook import nbgrader_credits
from grader.routes import classroom
from grader.rubric import (ASSIGNMENTS_DIR, MAX_STYLE_SHARE, STYLE_KINDS,
                           RubricError, assignments, get_assignment,
                           load_assignment)

PENALTIES = (Path(__file__).resolve().parent / "submissions"
             / "attention_basics" / "penalties.py")


def _rubric_copy(tmp_path: Path, assignment: str, old: str,
                 new: str) -> Path:
    folder = tmp_path / assignment
    shutil.copytree(ASSIGNMENTS_DIR / assignment, folder)
    path = folder / "rubric.toml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return folder


def test_no_shipped_task_can_lose_more_than_half_to_style() -> None:
    """Every task of every assignment keeps at least half its points
    when every style penalty applies."""
    for assignment in assignments():
        for task in assignment.tasks:
            style = -sum(i.points for i in assignment.items_of(task.id)
                         if i.kind in STYLE_KINDS)
            assert style <= MAX_STYLE_SHARE * task.max_score, (
                assignment.id, task.id)


def test_the_warm_up_takes_half_points_and_the_homework_whole_ones() -> None:
    """The rubric data: -0.5 in the warm-up's 2-point tasks, -1 in the
    homework's 4- and 6-point tasks."""
    warm_up = get_assignment("attention_basics")
    assert {(i.id, i.points) for i in warm_up.items
            if i.kind in STYLE_KINDS} == {
        (f"task{t}.{k}", -0.5) for t in (4, 6, 7) for k in STYLE_KINDS}
    homework = get_assignment("multi_head_attention")
    assert {i.points for i in homework.items
            if i.kind in STYLE_KINDS} == {-1.0}


def test_a_rubric_that_lets_style_take_more_than_half_does_not_load(
        tmp_path: Path) -> None:
    """A -1 PEP-8 penalty on a 2-point task with a -0.5 shapes penalty:
    1.5 of 2 points to style; the loader refuses it and says why."""
    folder = _rubric_copy(tmp_path, "attention_basics",
                          'id = "task4.pep8"\ntask = "task4"\nkind = '
                          '"pep8"\npoints = -0.5',
                          'id = "task4.pep8"\ntask = "task4"\nkind = '
                          '"pep8"\npoints = -1')
    with pytest.raises(RubricError) as raised:
        load_assignment(folder)
    assert str(raised.value).endswith(
        "rubric.toml: the style penalties of task4 take 1.5 of its 2 "
        "points; at most 1 (half) may be lost to style")


@pytest.mark.parametrize("old,new,says", [
    ('brackets = "()"', 'brackets = "{}"',
     "shapes.notation brackets must be one of [], ()"),
    ('label = "Shape:"', 'label = " "', "label must be non-empty text"),
    ('label = "Shape:"', 'label = "Shape:"\ncolour = "red"',
     "a shapes.notation table has brackets and, optionally, a label"),
    ('brackets = "()"', 'brackets = "[]"',
     "shapes.notation names a bracket pair twice"),
])
def test_a_notation_the_grader_cannot_read_does_not_load(
        tmp_path: Path, old: str, new: str, says: str) -> None:
    """The notation is rubric data, validated when it is loaded."""
    folder = _rubric_copy(tmp_path, "attention_basics", old, new)
    with pytest.raises(RubricError, match=says.replace("(", r"\(")
                       .replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        load_assignment(folder)


@pytest.fixture(scope="module")
def penalised(grade_path) -> dict:
    """The JSON report of a correct warm-up file with a wrong shape comment
    in CausalAttention and a flake8 finding in MultiHeadAttention."""
    return grade_path(PENALTIES, public_only=True).as_json()


def test_half_point_penalties_in_the_report(penalised: dict) -> None:
    """The grader: -0.5 each, 9 of 10."""
    scores = {i["id"]: i["score"] for i in penalised["items"]}
    assert scores["task4.shapes"] == -0.5 and scores["task6.pep8"] == -0.5
    assert penalised["score"] == 9.0
    tasks = {t["id"]: t["score"] for t in penalised["tasks"]}
    assert tasks["task4"] == tasks["task6"] == 1.5


def test_nbgrader_credits_agree_with_half_points(penalised: dict) -> None:
    """nbgrader: each cell in [0, its points], each task's cells adding up
    to the task's score; the penalty comes off the largest cell."""
    warm_up = get_assignment("attention_basics")
    credits = nbgrader_credits(penalised, warm_up)
    for item_id, credit in credits.items():
        assert 0 <= credit <= warm_up.item(item_id).points
    for task in penalised["tasks"]:
        cells = sum(credits[i.id] for i in warm_up.items_of(task["id"])
                    if i.kind == "checks")
        assert cells == task["score"], task["id"]
    assert credits["task4.causal"] == 0.5 and credits["task4.dropout"] == 1


def test_classroom_shows_half_points(penalised: dict) -> None:
    """Classroom: a task with half-point penalties has one test per half
    point; the reporter's passed / tests * max_score is the task's score,
    and the penalty test names the penalty and its line."""
    warm_up = get_assignment("attention_basics")
    found = {r.runner.id: r for r in classroom.results(penalised, warm_up)}
    task4 = found["task4"]
    assert len(task4.tests) == 4 and task4.each == 0.5
    assert task4.score == 1.5 and task4.status == "fail"
    names = [t.name for t in task4.tests]
    assert names[0].startswith("task4.causal 1/1: 0.5 point 1 of 2 - ")
    assert names[1].startswith("task4.shapes -0.5: shape-comment penalty, "
                               "takes 0.5 point of task4.causal (1/1 "
                               "correct) - line ")
    assert [t.passed for t in task4.tests] == [True, False, True, True]
    assert found["task1"].tests[0].name.startswith(
        "task1.values 1/1: point 1 of 1 - ")
    assert sum(r.score for r in found.values()) == penalised["score"]


def test_gradescope_shows_half_points(penalised: dict) -> None:
    """Gradescope: the penalty tests carry -0.5, the score is the
    grader's."""
    from grader.output.report import ItemReport, Report

    report = Report(assignment="attention_basics", title="t", path="p",
                    score=penalised["score"], max_score=10,
                    items=[ItemReport(i["id"], i["id"].split(".")[0], "t",
                                      i["score"], i["max_score"],
                                      i["passed"], i["message"])
                           for i in penalised["items"]], tasks=[])
    results = json.loads(json.dumps(report.as_gradescope()))
    assert results["score"] == 9.0
    tests = {t["number"]: t["score"] for t in results["tests"]}
    assert tests["task4.shapes"] == -0.5 and tests["task6.pep8"] == -0.5
