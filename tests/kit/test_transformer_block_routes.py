"""``transformer_block`` through every front door: the command line, a
batch, the nbgrader route, the Gradescope bundle and the student
repository. On each, the reference earns 10, the stub 0, and a mistake
(a pre-norm layer) the same points as ``python -m grader grade`` gives it.
Slow: real subprocesses, nbgrader and a kernel-free course.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from in_process import grade_command

from grader.rubric import get_assignment
from solutions import gradescope_bundle as bundle

ROOT = Path(__file__).resolve().parents[2]
HW = "transformer_block"
ASSIGNMENT = get_assignment(HW)
MODULE = f"{ASSIGNMENT.module}.py"
SOLUTION = ROOT / "solutions" / MODULE
STUB = ROOT / "transformer_lm" / MODULE
PRE_NORM = ROOT / "tests" / "kit" / "submissions" / HW / \
    "mistake_pre_norm_a.py"
SEED = 5
ENV = {**os.environ, "GRADER_SEED": str(SEED),
       "PYTHONPATH": os.pathsep.join(
           [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
CELLS = ("task1_layers", "task1_forward", "task2_layers", "task2_logits",
         "task2_causal", "task2_loss", "task2_training")
FULL = dict(zip(CELLS, (1, 3, 1, 2, 1, 1, 1)))
pytestmark = pytest.mark.slow


def _run(*args: str, cwd: Path = ROOT, check: bool = True
         ) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=ENV,
                            capture_output=True, text=True, timeout=900)
    if check:
        assert result.returncode == 0, result.stdout[-2000:] + \
            result.stderr[-3000:]
    return result


def _grade_json(path: Path, *extra: str) -> dict:
    """``grade --format json``, by the command's main in this process
    (in_process.py; test_student_repository runs it as a process)."""
    result = grade_command(str(path), "--format", "json", "--seed",
                           str(SEED), *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_grader_lists_three_assignments() -> None:
    """``python -m grader assignments`` names all three."""
    listed = _run("grader", "assignments").stdout
    for assignment_id in ("attention_basics", "multi_head_attention", HW):
        assert f"{assignment_id}:" in listed


def test_grade_command_on_reference_stub_and_mistake() -> None:
    """The command line: 10, 0 (with --assignment: a lone stub file does
    not tell which homework it is), 7 with the pre_norm diagnosis."""
    reference = _grade_json(SOLUTION)
    assert reference["assignment"] == HW
    assert reference["score"] == 10.0
    stub = _grade_json(STUB, "--assignment", HW)
    assert stub["score"] == 0.0
    mistake = _grade_json(PRE_NORM)
    assert mistake["score"] == 7.0
    items = {i["id"]: i for i in mistake["items"]}
    assert items["task1.forward"]["diagnosis"] == ["pre_norm"]


def test_batch_grades_a_class(tmp_path: Path) -> None:
    """A flat class folder: one row per student, the same scores."""
    folder = tmp_path / "class"
    folder.mkdir()
    shutil.copy(SOLUTION, folder / "alice.py")
    shutil.copy(STUB, folder / "bob.py")
    shutil.copy(PRE_NORM, folder / "carol.py")
    out = tmp_path / "grades.csv"
    _run("grader", "batch", str(folder), "--out", str(out), "--assignment",
         HW, "--jobs", "2")
    with out.open(newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"alice", "bob", "carol"}
    assert {s: float(r["score"]) for s, r in rows.items()} == {
        "alice": 10.0, "bob": 0.0, "carol": 7.0}
    assert all(r["assignment"] == HW for r in rows.values())
    assert float(rows["carol"]["task1.forward"]) == 0.0
    assert float(rows["carol"]["task2.training"]) == 1.0


def _auto_scores(course: Path, student: str) -> dict[str, float | None]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        found = gradebook.find_submission_notebook(HW, HW, student)
        return {g.name: g.auto_score for g in found.grades}


def _complete_release(folder: Path, source: Path) -> None:
    """Fill the release's two task cells of ``folder`` with the source
    notebook's solutions, marker lines dropped, as a student would; every
    other cell (the given attention included) stays as released."""
    name = ASSIGNMENT.notebook
    solved = {cell["id"]: cell["source"] for cell in json.loads(
        (source / name).read_text(encoding="utf-8"))["cells"]}
    notebook = json.loads((folder / name).read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["id"] in ("transformer_encoder_layer", "transformer_lm"):
            cell["source"] = [line for line in solved[cell["id"]]
                              if "### BEGIN SOLUTION" not in line
                              and "### END SOLUTION" not in line]
    (folder / name).write_text(json.dumps(notebook), encoding="utf-8")


def test_nbgrader_route(tmp_path: Path) -> None:
    """A course: the source notebook earns every autograded cell's
    points, the untouched release none, the release with a pre-norm
    module beside it what the grade command gives, and the release
    completed in its two task cells (the given attention cell as
    released) every point."""
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    source = course / "solutions" / "source" / HW
    shutil.copytree(ROOT / "solutions" / "source" / HW, source)
    _run("nbgrader", "generate_assignment", HW, "--force",
         "--log-level=ERROR", cwd=course)
    release = course / "assignment" / HW
    for student, folder in (("alice", source), ("bob", release),
                            ("carol", release), ("dave", release)):
        shutil.copytree(folder, course / "submitted" / student / HW)
    shutil.copy(PRE_NORM, course / "submitted" / "carol" / HW
                / "transformer_lm" / MODULE)
    _complete_release(course / "submitted" / "dave" / HW, source)
    _run("grader", "nbgrader", HW, cwd=course)
    scores = {s: _auto_scores(course, s) for s in ("alice", "bob",
                                                   "carol", "dave")}
    assert {c: scores["alice"][c] for c in CELLS} == FULL
    assert {c: scores["bob"][c] for c in CELLS} == dict.fromkeys(CELLS, 0)
    assert {c: scores["carol"][c] for c in CELLS} == {**FULL,
                                                      "task1_forward": 0}
    assert {c: scores["dave"][c] for c in CELLS} == FULL


def _autograder(built: Path, folder: Path, files: dict[str, Path]
                ) -> dict:
    with zipfile.ZipFile(built) as archive:
        archive.extractall(folder / "source")
    for name, path in files.items():
        target = folder / "submission" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    (folder / "submission").mkdir(parents=True, exist_ok=True)
    (folder / "results").mkdir()
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("GRADER_SEED", "PYTHONPATH")}
    environment.update({"AUTOGRADER_ROOT": str(folder),
                        "AUTOGRADER_PYTHON": sys.executable})
    result = subprocess.run(["bash", str(folder / "source"
                                         / "run_autograder")],
                            cwd=folder, env=environment, text=True,
                            capture_output=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:]
    return json.loads((folder / "results" / "results.json").read_text())


def test_gradescope_bundle(tmp_path: Path) -> None:
    """The bundle of this assignment grades the reference 10 and the
    stub 0, one Gradescope test per rubric item."""
    built = bundle.write_bundle(tmp_path / "autograder.zip", assignment=HW,
                                seed=SEED)
    good = _autograder(built, tmp_path / "good", {MODULE: SOLUTION})
    stub = _autograder(built, tmp_path / "stub",
                       {f"transformer_lm/{MODULE}": STUB})
    assert good["score"] == 10.0
    assert stub["score"] == 0.0
    assert [t["number"] for t in good["tests"]] == [
        i.id for i in ASSIGNMENT.items]


def test_student_repository(tmp_path: Path) -> None:
    """The student repository: its public tests fail on the stub and pass
    once the reference is in place; the grader in it gives 0, then 10."""
    out = tmp_path / "repo"
    _run("solutions.build", "student-repo", HW, str(out))
    module = out / "transformer_lm" / MODULE
    assert module.read_text() == STUB.read_text()
    environment = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    public = subprocess.run([sys.executable, "-m", "pytest", "-q",
                             "tests/public"], cwd=out, env=environment,
                            capture_output=True, text=True, timeout=600)
    assert public.returncode != 0
    assert "not implemented yet" in public.stdout
    stub = json.loads(subprocess.run(
        [sys.executable, "-m", "grader", "grade", ".", "--format", "json"],
        cwd=out, env=environment, capture_output=True, text=True,
        timeout=600).stdout)
    assert stub["assignment"] == HW
    assert stub["score"] == 0.0
    shutil.copy(SOLUTION, module)
    public = subprocess.run([sys.executable, "-m", "pytest", "-q",
                             "tests/public"], cwd=out, env=environment,
                            capture_output=True, text=True, timeout=600)
    assert public.returncode == 0, public.stdout[-2000:]
    done = json.loads(subprocess.run(
        [sys.executable, "-m", "grader", "grade", ".", "--format", "json"],
        cwd=out, env=environment, capture_output=True, text=True,
        timeout=600).stdout)
    assert done["score"] == 10.0
