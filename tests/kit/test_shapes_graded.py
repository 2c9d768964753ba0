"""The shape-comment and PEP-8 items, end to end: real submission files
graded by the grader (sandbox, tracing, verification, scoring).

The files are the verifier's cases in ``shape_cases/``; each file's
docstring says what it holds. ``test_shapes.py`` checks the findings line by
line; this module checks the items they cost, which are what a student sees.
"""
from __future__ import annotations

from pathlib import Path

import pytest

CASES = Path(__file__).resolve().parent / "shape_cases"

# file -> (task1.shapes, task2.shapes), from each file's documented intent.
SHAPES = {
    "accepted_forms": (0, 0),     # every accepted form, all right
    "seed_solution": (0, 0),      # the seed's own comments (the right ones)
    "attribution": (-1, -1),      # comments above their statement, etc.
    "inplace_ops": (-1, -1),      # probs.mul_ wrong; masked_fill_ missing
    "loops": (0, -1),             # right in every iteration / wrong in one
    "mistakes": (-1, -1),         # missing, no shape, unknown name, wrong
    "multiline_tuples": (-1, -1),  # tuple shapes in the wrong order
    "never_runs": (0, -1),        # unrun: missing comment, unknown name
    "raised_first": (0, 0),       # ran only in runs that raised: notes
    # sys.settrace(None) and a frame's trace removed: both refused by the
    # sandbox (the tracer stays on), so each forward fails where it tries
    # and earns nothing; the attempts are integrity flags (below).
    "tampering": (0, 0),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_items(grade_path, name: str) -> None:
    """Each file costs exactly the shapes points its findings deserve."""
    report = grade_path(CASES / f"{name}.py", public_only=True)
    scores = report.scores()
    got = (scores["task1.shapes"], scores["task2.shapes"])
    assert got == SHAPES[name], [report.item(i).message for i in
                                 ("task1.shapes", "task2.shapes")]
    for item_id in ("task1.shapes", "task2.shapes"):
        item = report.item(item_id)
        assert item.passed == (item.score == 0 and item.checked)
        if item.score < 0 and "sys.settrace" not in item.message:
            assert "line " in item.details, item.details


def test_tampering_is_named(grade_path) -> None:
    """Switching the tracer off is refused, and flagged for what it was."""
    report = grade_path(CASES / "tampering.py", public_only=True)
    flags = " ".join(f.message for f in report.flags)
    assert "replace the grader's trace function (line 22)" in flags
    assert "inspect the grader's stack frames (line 35)" in flags
    assert "refuses to replace the grader's trace function" in \
        report.item("task1.forward").message


def test_never_executed_lines_are_judged_statically(grade_path) -> None:
    """Branches the grader never enters: a right comment is a note; a
    missing one on a tensor statement, or an unknown name, costs the
    point all the same."""
    report = grade_path(CASES / "never_runs.py", public_only=True)
    details = report.item("task2.shapes").details
    assert "note: not run in any of the grader's runs" in details
    assert "unknown" in details and "never ran" not in details
    assert ("scores = scores.float()\n  this statement produces a tensor "
            "but has no shape comment (it did not run in\n  any of the "
            "grader's runs") in details


def test_lines_that_ran_before_an_error_are_not_called_unrun(
        grade_path) -> None:
    """A statement that completed before its call raised, and the one
    that raised, are noted as run in runs that ended in an error (such a
    run verifies nothing, so a wrong comment there costs nothing); only
    the statements after the error are "not run"."""
    report = grade_path(CASES / "raised_first.py", public_only=True)
    ran_first = "note: ran only in runs that ended in an error"
    unrun = "note: not run in any of the grader's runs"
    task1 = report.item("task1.shapes").details
    for line in (25, 26, 27):
        assert f"line {line}: {ran_first}" in task1, task1
    assert f"line 28: {unrun}" in task1, task1
    assert "a run that does not complete verifies no comment" in \
        " ".join(task1.split()), task1
    task2 = report.item("task2.shapes").details
    for line in (49, 51):
        assert f"line {line}: {ran_first}" in task2, task2
    assert f"line 54: {unrun}" in task2, task2
    assert report.scores()["task1.forward"] == 0
    assert report.scores()["task2.scores"] == 0


def test_pep8_items_inside_and_outside_the_classes(grade_path) -> None:
    """Findings inside each class cost its point; module-level ones are
    reported in the notes and cost nothing."""
    report = grade_path(CASES / "pep8_style.py", public_only=True)
    assert report.scores()["task1.pep8"] == -1
    assert report.scores()["task2.pep8"] == -1
    outside = [n for n in report.notes if "outside the graded classes" in n]
    assert outside and "F401" in outside[0]
    clean = grade_path(CASES.parents[2] / "examples" / "submission",
                       public_only=True)
    assert not any("outside the graded classes" in n for n in clean.notes)
