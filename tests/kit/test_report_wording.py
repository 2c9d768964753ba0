"""What a report says, whatever its form (text, JSON, Gradescope, the
nbgrader cells, the feedback files): a ``--public-only`` grade speaks of
no hidden case, since it has none."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grader.output.feedback import write_feedback
from grader.output.notebook import cell_text
from grader.output.report import Report
from grader.rubric import get_assignment

SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
# How a report speaks of hidden cases (``hidden`` alone is a dimension).
HIDDEN_CASES = re.compile(r"hidden\s+(random\s+)?(case|input|value|test)",
                          re.IGNORECASE)
# Submissions that fail on the few cases a public-only grade still draws
# itself (the public values are too small to measure a dropout rate).
FAILING_ON_GRADERS_CASES = [
    pytest.param(SUBMISSIONS / "diagnoses" / "hardcoded_size_view3.py",
                 "task2.output", id="multi_head_attention-dropout"),
    pytest.param(SUBMISSIONS / "attention_basics" /
                 "broken_forward_raises.py", "task6.dropout",
                 id="attention_basics-dropout"),
]


def _renderings(report: Report, folder: Path) -> dict[str, str]:
    """Every text a student or an instructor can read of ``report``."""
    assignment = get_assignment(report.assignment)
    data = report.as_json()
    texts = {"text": report.as_text(), "json": report.to_json(),
             "gradescope": json.dumps(report.as_gradescope())}
    for item in assignment.items:
        if item.kind in ("checks", "bonus"):  # the autograded cells
            texts[f"cell {item.id}"] = cell_text(data, assignment, item.id)
    for path in write_feedback(report, folder):
        if path.suffix != ".png":
            texts[path.name] = path.read_text(encoding="utf-8")
    return texts


@pytest.mark.parametrize("path, item_id", FAILING_ON_GRADERS_CASES)
def test_public_only_reports_mention_no_hidden_case(grade_path, tmp_path,
                                                    path, item_id):
    """The item that failed on a case the grader drew itself names it
    "the grader's own case", never a hidden one, in every rendering."""
    report = grade_path(path, public_only=True)
    assert report.public_only
    assert "the grader's own case 'dropout'" in \
        report.item(item_id).message
    for name, text in _renderings(report, tmp_path).items():
        found = HIDDEN_CASES.search(text)
        assert found is None, f"{name}: ...{text[found.start() - 80:]}"


def test_a_full_grade_names_its_hidden_cases(grade_path, tmp_path):
    """Without --public-only the same failure is on a hidden case, and the
    report says so (the wording above is the public-only one)."""
    report = grade_path(FAILING_ON_GRADERS_CASES[0].values[0])
    assert HIDDEN_CASES.search(report.item("task2.output").message)
    assert "the grader's own case" not in report.as_text()


def test_an_untouched_class_is_a_note_of_its_task(grade_path):
    """Task 2 left as the stub: its nbgrader cells and the Gradescope
    summary say so as a note of the task; nothing calls it an error."""
    report = grade_path(SUBMISSIONS / "partial_task2_stub.py",
                        public_only=True)
    note = ("MultiHeadSelfAttention is still the untouched stub: write "
            "your code between the YOUR CODE markers.")
    assert [t.notes for t in report.tasks] == [[], [note]]
    assert report.errors == []
    assignment = get_assignment(report.assignment)
    cell = cell_text(report.as_json(), assignment, "task2.scores")
    assert f"Note: {note}" in cell.split("\n")
    assert "untouched" not in cell_text(report.as_json(), assignment,
                                        "task1.forward")
    summary = report.as_gradescope()["output"].split("\n")
    heading = summary.index("Coding Task 2: MultiHeadSelfAttention: 0 / 6")
    assert summary[heading + 1] == f"  Note: {note}"


def test_a_cell_that_pays_a_penalty_says_so_before_its_message(grade_path):
    """A cell whose credit is less than its checks earned (the task's
    penalties absorbed there) says why right under its heading, so that
    the message's own points never contradict the heading."""
    report = grade_path(SUBMISSIONS / "clamp_penalties.py")
    assignment = get_assignment(report.assignment)
    data = report.as_json()
    lines = cell_text(data, assignment, "task1.forward").split("\n")
    assert lines[0].startswith("task1.forward: 1 / 3  (")
    assert lines[1] == ("The checks earned 3 / 3; this task's penalties "
                        "take 2 from this cell (below).")
    assert lines[2] == report.item("task1.forward").message
    assert any(line.startswith("Penalties of this task taken from this "
                               "cell: task1.pep8 -1") for line in lines)
    untouched = cell_text(data, assignment, "task1.init").split("\n")
    assert not any(line.startswith("The checks earned")
                   for line in untouched)
