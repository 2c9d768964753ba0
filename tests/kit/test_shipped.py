"""What ships to students carries no other homework (issue 24,
principle 10, first half).

The student repository of an assignment ships the grader for
self-checks, with that assignment's plug-in only: another homework's
reference, cases and mistake catalog never ship. The nbgrader release
ships no grader at all. Both are read file by file, as a student gets
them.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.rubric import assignments
from solutions.student_repo import student_files

KIT = Path(__file__).resolve().parents[2]
RELEASED = [a.id for a in assignments()
            if (KIT / "assignment" / a.id).is_dir()]


@pytest.mark.parametrize("assignment", RELEASED)
def test_a_student_repo_ships_its_own_plugin_only(assignment):
    """grader/assignments/ holds the shared modules and this assignment's
    folder; no file anywhere names another plug-in's folder."""
    files = student_files(assignment)
    plugins = {p.parts[2] for p in files
               if len(p.parts) > 3 and p.parts[:2] == ("grader",
                                                       "assignments")}
    assert plugins == {assignment}
    assert Path("grader", "assignments", assignment, "rubric.toml") in files
    others = [a.id for a in assignments() if a.id != assignment]
    for path in files:
        assert not any(f"assignments/{other}" in path.as_posix()
                       for other in others), path


@pytest.mark.parametrize("assignment", RELEASED)
def test_the_nbgrader_release_ships_no_grader(assignment):
    """assignment/<id>/ holds the notebook, the student package and the
    public tests: no grader file, no plug-in, nothing of solutions/."""
    release = KIT / "assignment" / assignment
    shipped = [p.relative_to(release) for p in release.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts]
    assert shipped
    for path in shipped:
        assert path.parts[0] in ("transformer_lm", "tests") or (
            path.suffix == ".ipynb" and len(path.parts) == 1), path
        assert "grader" not in path.parts and "solutions" not in path.parts
