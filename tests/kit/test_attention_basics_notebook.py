"""The notebook of the ``attention_basics`` assignment, run for real.

The nbgrader source notebook (solutions included) runs top to bottom in a
real kernel, its public test cells pass, its demonstration shows the
wrapper and the split version computing one function, and each autograded
cell, worth its rubric item's points, counts 0 in a kernel (the points
are filled in outside the kernel by ``python -m grader nbgrader``). The
released notebook, submitted with the reference module beside it, earns 10
from ``python -m grader grade``, the assignment being recognised from the
submission. Slow: a kernel, and the grader run as a
command.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from in_process import grade_command

from grader.rubric import get_assignment

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = get_assignment("attention_basics")
NOTEBOOK = ASSIGNMENT.notebook
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict:
    """The solution notebook after a top-to-bottom run (nbformat node)."""
    import nbformat
    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("notebook") / ASSIGNMENT.id
    shutil.copytree(ROOT / "solutions" / "source" / ASSIGNMENT.id, folder)
    notebook = nbformat.read(folder / NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.output_type == "stream")


def test_solution_notebook_runs_without_an_error(executed) -> None:
    """No cell raised; every public test cell printed that it passed."""
    errors = [(c.id, o.get("ename"), o.get("evalue"))
              for c in executed.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert errors == []
    public = [c for c in executed.cells if c.id.startswith("public_test_")]
    assert len(public) == 7
    for cell in public:
        assert "public test passed." in _text(cell), cell.id


def test_graded_cells_count_zero_in_a_kernel(executed) -> None:
    """In a kernel each autograded cell says it is graded outside the
    notebook and counts 0 (``python -m grader nbgrader`` fills them in);
    the cells cover every checks item, worth its points."""
    credits = {c.id: o["data"]["text/plain"] for c in executed.cells
               for o in c.get("outputs", [])
               if o.output_type == "execute_result"
               and c.id.startswith("task")}
    expected = {item.id.replace(".", "_"): float(item.points)
                for item in ASSIGNMENT.items if item.kind == "checks"}
    assert credits == {name: "0.0" for name in expected}
    for cell in executed.cells:
        if cell.id in expected:
            assert "graded outside the notebook" in _text(cell), cell.id
    points = {c.id: c.metadata["nbgrader"]["points"]
              for c in executed.cells
              if c.metadata.get("nbgrader", {}).get("grade")
              and c.cell_type == "code"}
    assert points == expected
    assert sum(points.values()) == ASSIGNMENT.max_score


def test_demonstration_ties_the_wrapper_to_the_split_version(
        executed) -> None:
    """The demo cell: different before tying, the same after, timed."""
    cell = next(c for c in executed.cells if c.id == "demo_wrapper_vs_split")
    text = _text(cell)
    assert "same function before tying: False" in text
    assert "same function after tying:  True" in text
    assert "wrapper: " in text and " ms, split: " in text


def test_release_with_reference_module_grades_ten(tmp_path: Path) -> None:
    """The released notebook (stubs) with solutions/attention_basics.py as
    transformer_lm/attention_basics.py beside it: the grader, run as a
    command without --assignment, grades the module and gives 10."""
    folder = tmp_path / ASSIGNMENT.id
    shutil.copytree(ROOT / "assignment" / ASSIGNMENT.id, folder)
    shutil.copy(ROOT / "solutions" / "attention_basics.py",
                folder / "transformer_lm" / "attention_basics.py")
    result = grade_command(str(folder / NOTEBOOK), "--format", "json",
                           "--seed", "11", unset=())  # in_process.py
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["assignment"] == ASSIGNMENT.id
    assert report["score"] == 10, [(i["id"], i["score"], i["message"])
                                   for i in report["items"]
                                   if not i["passed"]]
    assert report["max_score"] == 10


def test_use_implemented_picks_the_module_function_over_a_stub() -> None:
    """The notebook's pick cell for the task-1 function: an untouched
    notebook stub gives way to the module's implementation."""
    import importlib.util

    from transformer_lm.notebook import use_implemented

    def load(path: Path, name: str):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    stub = load(ROOT / "transformer_lm" / "attention_basics.py", "ab_stub")
    written = load(ROOT / "solutions" / "attention_basics.py", "ab_written")
    assert use_implemented(stub.CausalAttention,
                           written.CausalAttention) is written.CausalAttention
    assert use_implemented(stub.simple_self_attention,
                           written.simple_self_attention) is \
        written.simple_self_attention
