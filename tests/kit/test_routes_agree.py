"""Every front door gives the same grade: one class of honest and hostile
submissions, graded through ``grade FILE``, ``grade FOLDER`` (the student
repository's layout, the self-check that recognises the assignment),
``batch`` and the Gradescope driver (``run_autograder`` from a built
bundle). Item by item, each route must give what ``grade FILE`` gives, with
the same integrity flags where the route shows them.

The nbgrader route has its own end-to-end test against ``grade``
(test_nbgrader_route.py), as has GitHub Classroom (test_classroom.py).
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from bundle_server import bundle_fork_server, children_cpu
from in_process import grade_command

from grader.run.forkserver import SHARED_ADDRESS
from solutions import gradescope_bundle as bundle

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ASSIGNMENT = "multi_head_attention"
SEED = 31
CLASS = {
    # student -> (file, the total its honest code earns)
    "ada": (ROOT / "examples" / "submission" / "transformer_lm"
            / "modeling_attention.py", 9.0),
    "ben": (HERE / "hostile" / "integrity" / "swap_decorator.py", 6.0),
    "cy": (HERE / "hostile" / "integrity" / "forbidden_flex_attention.py",
           5.0),
    "dee": (HERE / "hostile" / "integrity" / "exec_code_replace.py", 0.0),
    "eve": (HERE / "hostile" / "integrity" / "report_spoof.py", 5.0),
}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}


def _grade(path: Path, *extra: str) -> dict:
    """``grade PATH --format json --seed SEED`` by the command's main in
    this process (in_process.py: the grade is the subject here; batch and
    the Gradescope driver below run as processes of their own)."""
    result = grade_command(str(path), "--format", "json", "--seed",
                           str(SEED), *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _items(report: dict) -> dict[str, float]:
    return {i["id"]: i["score"] for i in report["items"]}


def _said(report: dict, path: Path) -> dict[str, tuple]:
    """Each item's verdict in words: passed, message (the graded file's
    path, which differs between routes, left out), diagnosis."""
    return {i["id"]: (i["passed"], i["message"].replace(str(path), "FILE"),
                      i["diagnosis"]) for i in report["items"]}


def _flags(report: dict) -> list[str]:
    return sorted(f["kind"] for f in report.get("flags", []))


@pytest.fixture(scope="module")
def by_file() -> dict[str, dict]:
    """The reference route: ``grade FILE --assignment``."""
    return {student: _grade(path, "--assignment", ASSIGNMENT)
            for student, (path, _) in CLASS.items()}


def test_grade_file_gives_the_honest_totals(by_file) -> None:
    """The anchor of the comparison is itself right."""
    assert {s: r["score"] for s, r in by_file.items()} == {
        s: total for s, (_, total) in CLASS.items()}
    assert _flags(by_file["dee"]) == ["untraceable", "untraceable"]
    assert _flags(by_file["cy"]) == ["forbidden"]


def test_a_student_folder_grades_like_the_file(by_file, tmp_path) -> None:
    """``grade .`` in the student repository's layout, the assignment
    recognised from what the module defines."""
    for student, (path, _) in CLASS.items():
        folder = tmp_path / student / "transformer_lm"
        folder.mkdir(parents=True)
        shutil.copy(path, folder / "modeling_attention.py")
        report = _grade(folder.parent)
        assert report["assignment"] == ASSIGNMENT, student
        assert _items(report) == _items(by_file[student]), student
        assert _flags(report) == _flags(by_file[student]), student


def test_batch_grades_like_the_file(by_file, tmp_path) -> None:
    """One class folder, one row and one record per student, each the
    grade of the file alone (no classmate changes anyone's grade)."""
    folder = tmp_path / "class"
    folder.mkdir()
    for student, (path, _) in CLASS.items():
        shutil.copy(path, folder / f"{student}.py")
    out = tmp_path / "grades.csv"
    result = subprocess.run(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(out), "--seed", str(SEED), "--jobs", "2", "--no-feedback"],
        cwd=ROOT, env=_environment(), capture_output=True, text=True,
        timeout=900)
    assert result.returncode == 0, result.stderr
    with out.open(newline="") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert sorted(rows) == sorted(CLASS)
    for student, report in by_file.items():
        row = rows[student]
        assert float(row["score"]) == report["score"], student
        assert {k: float(row[k]) for k in _items(report)} == \
            _items(report), student
        record = json.loads((out.parent / "grades.csv.reports"
                             / f"{student}.py" / "record.json").read_text())
        assert record["status"] == "graded", student
        record = record["report"]
        assert _items(record) == _items(report), student
        assert _flags(record) == _flags(report), student
        # The batch's checks run in a session its coordinator prepared
        # once; a grade runs a whole session: same words, same mistakes.
        assert _said(record, folder / f"{student}.py") == \
            _said(report, CLASS[student][0]), student


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Iterator[tuple[Path, str, int]]:
    """The Gradescope bundle with the same seed baked in, unpacked once
    (as /autograder/source), and a fork server of its grader that the
    runs share (bundle_server.py): the source, its address and pid."""
    folder = tmp_path_factory.mktemp("bundle")
    out = folder / "autograder.zip"
    bundle.write_bundle(out, assignment=ASSIGNMENT, seed=SEED)
    with zipfile.ZipFile(out) as archive:
        archive.extractall(folder / "source")
    source = (folder / "source").resolve()
    with bundle_fork_server(source, str(source)) as (address, pid):
        yield source, address, pid


def _run_autograder(built: tuple[Path, str, int], root: Path,
                    upload: Path) -> dict:
    """Gradescope's layout: the bundle in source/ (the one unpacked
    copy), the upload (under the name a browser gives a second download)
    in submission/."""
    source, address, _ = built
    (root / "source").parent.mkdir(parents=True, exist_ok=True)
    (root / "source").symlink_to(source)
    (root / "submission").mkdir(parents=True)
    (root / "results").mkdir()
    shutil.copy(upload, root / "submission" / "modeling_attention (1).py")
    environment = {k: v for k, v in _environment().items()
                   if k != "PYTHONPATH"}
    environment.update({"AUTOGRADER_ROOT": str(root),
                        "AUTOGRADER_PYTHON": sys.executable,
                        SHARED_ADDRESS: address})
    result = subprocess.run(["bash", str(root / "source" / "run_autograder")],
                            cwd=root, env=environment, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_gradescope_grades_like_the_file(by_file, built, tmp_path) -> None:
    """The driver inside Gradescope gives every item the score ``grade``
    gives, and its output shows each integrity flag."""
    before = children_cpu(built[2])
    for student, (path, _) in CLASS.items():
        results = _run_autograder(built, tmp_path / student, path)
        report = by_file[student]
        assert results["score"] == report["score"], student
        tests = {t["number"]: t["score"] for t in results["tests"]
                 if t.get("number") in _items(report)}
        assert tests == _items(report), student
        assert results["output"].count("Integrity flag") == \
            len(_flags(report)), student
    # The runs forked their workers from the bundle's server (a run that
    # found it foreign would have started a server of its own).
    deadline = time.monotonic() + 10
    while children_cpu(built[2]) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert children_cpu(built[2]) > before, "the bundle's server was unused"
