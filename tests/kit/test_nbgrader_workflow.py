"""The real nbgrader workflow, in a scratch course directory.

generate_assignment, four submissions (the solution notebook, the untouched
release, a notebook with two known mistakes, and the untouched release with
the classes written in transformer_lm/modeling_attention.py), autograde,
generate_feedback and export, each run for real with nbgrader 0.9.6. The
points nbgrader records must equal those of ``python -m grader grade`` on
the same submitted notebook. Slow (a kernel per notebook, the grader per
graded cell): about two minutes.
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "multi_head_attention"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
pytestmark = pytest.mark.slow

# Per student: nbgrader credit of each autograded cell, and the total.
EXPECTED = {
    "alice": ({"task1_init": 1, "task1_forward": 3, "task1_bonus": 1,
               "task2_scores": 3, "task2_causal": 1, "task2_output": 2}, 11),
    "bob": ({"task1_init": 0, "task1_forward": 0, "task1_bonus": 0,
             "task2_scores": 0, "task2_causal": 0, "task2_output": 0}, 0),
    "carol": ({"task1_init": 1, "task1_forward": 2, "task1_bonus": 0,
               "task2_scores": 3, "task2_causal": 0, "task2_output": 2}, 8),
    "dave": ({"task1_init": 1, "task1_forward": 3, "task1_bonus": 1,
              "task2_scores": 3, "task2_causal": 1, "task2_output": 2}, 11),
}


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR"],
        cwd=course, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def _edit_cell(notebook: dict, cell_id: str, old: str, new: str) -> None:
    for cell in notebook["cells"]:
        if cell.get("id") == cell_id:
            source = "".join(cell["source"])
            assert old in source, f"{old!r} not in cell {cell_id}"
            cell["source"] = source.replace(old, new)
            return
    raise KeyError(cell_id)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A course directory where every nbgrader step has run."""
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / "source",
                    course / "solutions" / "source")
    _nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    release = course / "assignment" / ASSIGNMENT
    source = course / "solutions" / "source" / ASSIGNMENT

    def submit(student: str, folder: Path) -> Path:
        target = course / "submitted" / student / ASSIGNMENT
        shutil.copytree(folder, target)
        return target

    submit("alice", source)
    submit("bob", release)
    carol = submit("carol", release)
    notebook = json.loads((source / NOTEBOOK).read_text())
    _edit_cell(notebook, "self_attention", " / self.scale, dim=-1)",
               ", dim=-1)")
    _edit_cell(notebook, "multi_head_self_attention",
               ".triu(diagonal=1)", ".triu(diagonal=0)")
    released = json.loads((carol / NOTEBOOK).read_text())
    for cell_id in ("self_attention", "multi_head_self_attention"):
        mine = next(c for c in notebook["cells"] if c["id"] == cell_id)
        theirs = next(c for c in released["cells"] if c["id"] == cell_id)
        theirs["source"] = mine["source"]
    (carol / NOTEBOOK).write_text(json.dumps(released))
    dave = submit("dave", release)
    shutil.copy(ROOT / "solutions" / "modeling_attention.py",
                dave / "transformer_lm" / "modeling_attention.py")

    _nbgrader(course, "autograde", ASSIGNMENT, "--create")
    _nbgrader(course, "generate_feedback", ASSIGNMENT)
    _nbgrader(course, "export")
    return course


def test_release_equals_the_committed_one(course):
    """generate_assignment reproduces the committed release exactly."""
    made = course / "assignment" / ASSIGNMENT
    committed = ROOT / "assignment" / ASSIGNMENT
    names = sorted(p.relative_to(made) for p in made.rglob("*")
                   if p.is_file())
    assert names == sorted(p.relative_to(committed)
                           for p in committed.rglob("*") if p.is_file())
    for name in names:
        assert (made / name).read_text() == (committed / name).read_text()


def test_exported_totals(course):
    """grades.csv: each student's automatic points; max 10 + bonus + Q1-5."""
    rows = {row["student_id"]: row for row in
            csv.DictReader((course / "grades.csv").open())}
    assert set(rows) == set(EXPECTED)
    for student, (_, total) in EXPECTED.items():
        assert float(rows[student]["raw_score"]) == total, student
        assert float(rows[student]["max_score"]) == 16.0


def test_autograded_cell_credits(course):
    """Each autograded cell's score, as the gradebook recorded it."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student, (cells, _) in EXPECTED.items():
            for grade_id, points in cells.items():
                grade = gradebook.find_grade(grade_id, ASSIGNMENT,
                                             ASSIGNMENT, student)
                assert grade.auto_score == points, (student, grade_id)


def test_graded_cells_never_write_to_stderr(course):
    """A graded cell with stderr output would score 0 in nbgrader."""
    for student in EXPECTED:
        notebook = json.loads((course / "autograded" / student / ASSIGNMENT
                               / NOTEBOOK).read_text())
        for cell in notebook["cells"]:
            if cell["metadata"].get("nbgrader", {}).get("grade") and \
                    cell["cell_type"] == "code":
                kinds = [(o["output_type"], o.get("name"))
                         for o in cell["outputs"]]
                assert ("stream", "stderr") not in kinds, (student, kinds)
                assert ("error", None) not in kinds, (student, kinds)


def test_submitted_module_is_kept_and_stub_is_not_graded(course):
    """exclude_overwriting keeps dave's module; its classes are graded."""
    kept = (course / "autograded" / "dave" / ASSIGNMENT / "transformer_lm"
            / "modeling_attention.py").read_text()
    assert "### BEGIN SOLUTION" in kept


def test_feedback_shows_the_attention_maps_of_a_failing_item(course):
    """carol's causal mask is wrong: her graded cell shows the maps."""
    def causal_cell_images(student: str) -> int:
        notebook = json.loads((course / "autograded" / student / ASSIGNMENT
                               / NOTEBOOK).read_text())
        cell = next(c for c in notebook["cells"]
                    if c.get("id") == "task2_causal")
        return sum("image/png" in o.get("data", {}) for o in cell["outputs"])

    assert causal_cell_images("carol") == 1
    assert causal_cell_images("alice") == 0
    pages = {student: (course / "feedback" / student / ASSIGNMENT /
                       f"{ASSIGNMENT}.html").read_text()
             for student in ("alice", "carol")}
    assert "task2.causal: 0 / 1" in pages["carol"]
    assert "mask_diagonal" in pages["carol"]
    assert (pages["carol"].count("data:image/png;base64")
            == pages["alice"].count("data:image/png;base64") + 1)


def test_command_line_gives_the_same_points(course, grade_path):
    """python -m grader grade on each submitted notebook agrees."""
    for student, (_, total) in EXPECTED.items():
        report = grade_path(course / "submitted" / student / ASSIGNMENT
                            / NOTEBOOK, seed=2024)
        assert report.score == total, (student, report.scores())


def test_solution_notebook_runs_top_to_bottom(tmp_path):
    """The solution notebook runs in a real kernel without an error."""
    import nbformat
    from nbclient import NotebookClient

    folder = tmp_path / ASSIGNMENT
    shutil.copytree(ROOT / "solutions" / "source" / ASSIGNMENT, folder)
    notebook = nbformat.read(folder / NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert errors == []
    plots = [o for c in notebook.cells if c.cell_type == "code"
             for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(plots) >= 2
    credits = {c.id: o["data"]["text/plain"] for c in notebook.cells
               for o in c.get("outputs", [])
               if o.output_type == "execute_result"
               and c.id.startswith("task")}
    assert credits == {"task1_init": "1.0", "task1_forward": "3.0",
                       "task1_bonus": "1.0", "task2_scores": "3.0",
                       "task2_causal": "1.0", "task2_output": "2.0"}
