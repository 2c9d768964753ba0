"""The public tests, run as a student runs them: on the reference, on the
untouched stub, and inside each homework (the student repository and the
nbgrader release), where ``python -m pytest tests/public`` runs that
homework's tests only."""
from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from grader.rubric import assignments, get_assignment
from solutions.paths import PUBLIC_TESTS, public_test_files
from solutions.student_repo import write_student_repo

ROOT = Path(__file__).resolve().parents[2]
WITH_PUBLIC_TESTS = [a.id for a in assignments() if a.public_tests]


def _run_public(tmp_path: Path, *extra: str, where: Path = ROOT,
                target: str = "tests/public"):
    report = tmp_path / "junit.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", target, "-q",
         "-p", "no:cacheprovider", f"--junitxml={report}", *extra],
        cwd=where, capture_output=True, text=True, timeout=300)
    assert report.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    cases = ElementTree.parse(report).getroot().iter("testcase")
    return result, list(cases)


def _test_names(cases) -> set[str]:
    """'<folder>/<module>::<test>' for each test case of a JUnit report."""
    names = set()
    for case in cases:
        module = case.get("classname").split(".")
        names.add(f"{module[-2]}/{module[-1]}::{case.get('name')}")
    return names


@pytest.mark.parametrize("assignment_id", WITH_PUBLIC_TESTS)
def test_public_tests_pass_on_the_reference(tmp_path, assignment_id):
    """Every public test of an assignment passes against its reference
    (``--impl`` on the assignment's folder)."""
    assignment = get_assignment(assignment_id)
    result, cases = _run_public(
        tmp_path, "--impl", f"solutions/{assignment.module}.py",
        target=f"tests/public/{assignment.public_tests}")
    assert result.returncode == 0, result.stdout[-3000:]
    assert len(cases) >= 20
    assert all(list(case) == [] for case in cases)


@pytest.fixture(scope="module")
def on_the_stub(tmp_path_factory):
    """``python -m pytest tests/public`` in the kit, on the stubs, once:
    its result and its JUnit test cases."""
    return _run_public(tmp_path_factory.mktemp("stub"))


def test_public_tests_fail_shortly_on_the_stub(on_the_stub):
    """On the stubs every test of every assignment fails with one "not
    implemented yet" line."""
    result, cases = on_the_stub
    assert result.returncode == 1
    folders = {name.split("/")[0] for name in _test_names(cases)}
    assert folders == {get_assignment(a).public_tests
                       for a in WITH_PUBLIC_TESTS}
    assert len(cases) >= 50
    for case in cases:
        failures = case.findall("failure")
        assert failures, f"{case.get('name')} did not fail on the stub"
        message = failures[0].get("message", "").removeprefix("Failed: ")
        assert message.startswith("not implemented yet: Task "), message
        assert "\n" not in message
    assert "Traceback" not in result.stdout
    assert "raise NotImplementedError" not in result.stdout


def test_a_public_test_folder_per_assignment():
    """Each assignment names its own folder; no test module sits outside
    one (it would run in every homework), and no two folders share a
    module name (pytest imports them side by side in the kit)."""
    folders = [get_assignment(a).public_tests for a in WITH_PUBLIC_TESTS]
    assert len(set(folders)) == len(folders)
    assert sorted(p.name for p in PUBLIC_TESTS.iterdir() if p.is_dir()
                  and p.name != "__pycache__") == sorted(folders)
    assert not list(PUBLIC_TESTS.glob("test_*.py"))
    modules = [p.name for folder in folders
               for p in (PUBLIC_TESTS / folder).glob("*.py")
               if p.name != "conftest.py"]
    assert len(set(modules)) == len(modules), modules


def _homeworks(assignment_id: str, tmp_path: Path) -> dict[str, Path]:
    """The two homeworks a student receives: the student repository and
    the nbgrader release (fetched as a folder of its own)."""
    repo = tmp_path / "repo"
    write_student_repo(assignment_id, repo)
    release = tmp_path / "release"
    shutil.copytree(ROOT / "assignment" / assignment_id, release,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return {"student repository": repo, "nbgrader release": release}


@pytest.mark.parametrize("assignment_id", WITH_PUBLIC_TESTS)
def test_each_homework_runs_its_own_tests_only(tmp_path, assignment_id,
                                               on_the_stub):
    """In the student repository and in the nbgrader release, tests/ holds
    the assignment's public tests and nothing else, and ``python -m pytest
    tests/public`` runs exactly the tests of the kit's folder of that
    assignment (all failing on the stub with one line each): the kit's
    tests of that folder in the kit's own run on the stubs."""
    assignment = get_assignment(assignment_id)
    shipped = {p.as_posix() for p in public_test_files(
        assignment.public_tests)}
    own = f"tests/public/{assignment.public_tests}/"
    assert any(name.startswith(own) for name in shipped)
    others = [get_assignment(a).public_tests for a in WITH_PUBLIC_TESTS
              if a != assignment_id]
    assert not [n for n in shipped for other in others
                if n.startswith(f"tests/public/{other}/")]
    expected = {name for name in _test_names(on_the_stub[1])
                if name.startswith(f"{assignment.public_tests}/")}
    assert expected
    for label, homework in _homeworks(assignment_id,
                                      tmp_path / "homes").items():
        files = {p.relative_to(homework).as_posix()
                 for p in (homework / "tests").rglob("*") if p.is_file()}
        assert files == shipped, label
        result, cases = _run_public(tmp_path, where=homework)
        assert _test_names(cases) == expected, (label, result.stdout[-2000:])
        assert result.returncode == 1, label
        for case in cases:
            message = case.find("failure").get("message", "")
            assert "not implemented yet" in message, (label, message)
