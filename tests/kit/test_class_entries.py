"""No entry can stop the class (issue 24, principle 8).

Whatever one student's entry of a class folder is named or holds (the
entries of ``hostile/entries/``: ``nbgrader_config.py``, a folder named
``transformer_lm/`` or ``assignment/``, ``submitted/`` with a made-up
course; a link; an empty folder), it is at worst that student's error
row: the batch grades every classmate exactly as without it and writes
every row. The discovery rule is checked for each entry without grading;
three real batches then pin the rows and each classmate's items.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.errors import BatchError
from grader.routes.classfolder import discover

KIT = Path(__file__).resolve().parents[2]
ENTRIES = KIT / "tests" / "kit" / "hostile" / "entries"
REFERENCE = KIT / "solutions" / "modeling_attention.py"
EXAMPLE = KIT / "examples" / "submission" / "transformer_lm" \
    / "modeling_attention.py"
Run = subprocess.CompletedProcess


def _classmates(folder: Path) -> Path:
    """Two honest students: alice.py (the reference) and bob/ (a
    student repository holding the example, 9 points)."""
    (folder / "bob" / "transformer_lm").mkdir(parents=True)
    shutil.copy(REFERENCE, folder / "alice.py")
    shutil.copy(EXAMPLE, folder / "bob" / "transformer_lm"
                / "modeling_attention.py")
    return folder


def _hand_in(folder: Path, *variants: str) -> Path:
    for variant in variants:
        shutil.copytree(ENTRIES / variant, folder, dirs_exist_ok=True)
    return folder


def _batch(folder: Path, out: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env["PYTHONPATH"] = str(KIT)
    return subprocess.run([sys.executable, "-m", "grader", "batch",
                           str(folder), "--out", str(out), "--public-only",
                           "--jobs", "2", "--no-feedback"], cwd=KIT,
                          env=env, capture_output=True, text=True,
                          timeout=900)


def _rows(out: Path) -> dict[str, dict]:
    with out.open(newline="", encoding="utf-8") as stream:
        return {row["student"]: row for row in csv.DictReader(stream)}


def _items(out: Path, key: str) -> dict[str, float]:
    record = json.loads((out.with_name(out.name + ".reports") / key
                         / "record.json").read_text(encoding="utf-8"))
    return {item["id"]: item["score"] for item in record["report"]["items"]}


# --------------------------------------------------------------------------
# Discovery: every entry is a student's, without grading


@pytest.mark.parametrize("variants, hostile", [
    (("course_config",), {"nbgrader_config.py"}),
    (("package_folder",), {"transformer_lm"}),
    (("release_folder",), {"assignment"}),
    (("fake_course",), {"submitted"}),
    (("fake_course", "fake_course_config"),
     {"submitted", "nbgrader_config.py"}),
])
def test_a_hostile_entry_is_one_more_student(tmp_path, variants, hostile):
    """Each variant beside two classmates: a flat class of three (four),
    the classmates first-class entries, nobody refused."""
    folder = _hand_in(_classmates(tmp_path / "class"), *variants)
    found = discover(folder)
    assert found.layout == "flat"
    names = {e.path.name: e.problem for e in found.entries}
    expected = {"alice.py": "", "bob": ""} | dict.fromkeys(hostile, "")
    assert names == expected


def test_names_tools_use_are_students_unless_tool_folders(tmp_path):
    """A file of any name is a student's (red team 16: ``__carol.py`` had
    no row); only hidden entries and the folders tools leave
    (``__MACOSX/``, ``__pycache__/``) are nobody's."""
    folder = _classmates(tmp_path / "class")
    for name in ("__carol.py", "__pycache__.py", "=eve.py", "'=eve.py"):
        shutil.copy(REFERENCE, folder / name)
    for name in ("__MACOSX", "__pycache__", ".git"):
        (folder / name).mkdir()
    found = discover(folder)
    assert sorted(e.path.name for e in found.entries) == sorted(
        ["'=eve.py", "=eve.py", "__carol.py", "__pycache__.py", "alice.py",
         "bob"])
    assert len({e.student for e in found.entries}) == 6


def test_no_two_students_share_a_csv_cell(tmp_path):
    """The formula guard never maps two names to one cell: ``=eve`` is
    written ``'=eve`` and ``'=eve`` is written ``''=eve``; each reads
    back as itself, and the writer writes it again byte for byte."""
    from grader.output.text import csv_cell
    from grader.routes.rows import read_cell, read_csv, write_csv

    names = ["=eve", "'=eve", "''=eve", "'eve", "eve", "-1", "'-1"]
    cells = [csv_cell(name) for name in names]
    assert len(set(cells)) == len(names)
    assert [read_cell("student", cell) for cell in cells] == names
    rows = [{"student": name, "status": "graded", "score": 1.0,
             "max_score": 10.0, "path": f"{index}.py"}
            for index, name in enumerate(names)]
    out = tmp_path / "grades.csv"
    write_csv(out, rows)
    assert sorted(row["student"] for row in read_csv(out)) == sorted(names)
    again = tmp_path / "again.csv"
    write_csv(again, read_csv(out))
    assert again.read_bytes() == out.read_bytes()


def test_without_classmates_the_refusals_stand(tmp_path):
    """A student repository, the kit and a lone course config are still
    refused: the rule needs the rest of the folder to be a class."""
    alone = _hand_in(tmp_path / "alone", "package_folder")
    with pytest.raises(BatchError, match="is one submission"):
        discover(alone)
    config = _hand_in(tmp_path / "config", "course_config")
    (config / "notes").mkdir()
    with pytest.raises(BatchError, match="without a submitted/ folder"):
        discover(config)
    with pytest.raises(BatchError, match="without a submitted/ folder"):
        discover(KIT)


def test_a_real_course_root_is_still_a_course(tmp_path):
    """nbgrader_config.py + submitted/ + the course's own folders (whose
    source/ holds solved notebooks): one row per submitted student."""
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(KIT / "nbgrader_config.py", root / "nbgrader_config.py")
    for where in ("source/multi_head_attention",
                  "submitted/ann/multi_head_attention/transformer_lm"):
        (root / where).mkdir(parents=True)
    shutil.copy(REFERENCE, root / "source" / "multi_head_attention"
                / "modeling_attention.py")
    shutil.copy(REFERENCE, root / "submitted" / "ann" /
                "multi_head_attention" / "transformer_lm"
                / "modeling_attention.py")
    found = discover(root)
    assert found.layout == "nbgrader"
    assert [e.student for e in found.entries] == ["ann"]


# --------------------------------------------------------------------------
# Graded for real


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, tuple[Path, Run]]:
    """Three hostile classes, each graded by a real batch."""
    base = tmp_path_factory.mktemp("entries")
    runs = {}
    package = _hand_in(_classmates(base / "package"), "package_folder")
    (package / "linked.py").symlink_to(REFERENCE)
    (package / "empty").mkdir()
    # Red team 16: a name tools use, and two names one formula guard
    # once wrote alike (the reference and the stub).
    shutil.copy(REFERENCE, package / "__carol.py")
    shutil.copy(REFERENCE, package / "=eve.py")
    shutil.copy(KIT / "transformer_lm" / "modeling_attention.py",
                package / "'=eve.py")
    colluding = _hand_in(_classmates(base / "colluding"), "fake_course",
                         "fake_course_config")
    course = base / "course"
    course.mkdir()
    shutil.copy(KIT / "nbgrader_config.py", course / "nbgrader_config.py")
    for student, module in (("ann", REFERENCE), ("ben", EXAMPLE),
                            ("eve", EXAMPLE)):
        where = (course / "submitted" / student / "multi_head_attention"
                 / "transformer_lm")
        where.mkdir(parents=True)
        shutil.copy(module, where / "modeling_attention.py")
    # Eve adds an assignment folder of her own and a file beside her.
    (course / "submitted" / "eve" / "zzz_homework").mkdir()
    (course / "submitted" / "nbgrader_config.py").write_text("X = 1\n")
    for name, folder in (("package", package), ("colluding", colluding),
                         ("course", course)):
        out = base / f"{name}.csv"
        runs[name] = (out, _batch(folder, out))
    return runs


REFERENCE_ITEMS = {"task1.init": 1.0, "task1.forward": 3.0,
                   "task1.pep8": 0.0, "task1.shapes": 0.0,
                   "task1.bonus": 1.0, "task2.scores": 3.0,
                   "task2.causal": 1.0, "task2.output": 2.0,
                   "task2.pep8": 0.0, "task2.shapes": 0.0}


@pytest.mark.slow
def test_classmates_beside_a_package_a_link_and_an_empty_folder(graded):
    """transformer_lm/ is graded like bob (the same file); the link and
    the empty folder are their own error rows; the exit status says not
    everything was graded."""
    from grader.routes.rows import read_csv

    out, run = graded["package"]
    assert run.returncode == 1, run.stderr
    rows = _rows(out)
    assert sorted(rows) == ["''=eve", "'=eve", "__carol", "alice", "bob",
                            "empty", "linked", "transformer_lm"]
    assert _items(out, "alice.py") == REFERENCE_ITEMS
    assert _items(out, "__carol.py") == REFERENCE_ITEMS
    read = {row["student"]: row for row in read_csv(out)}
    assert read["=eve"]["score"] == 11.0
    assert read["'=eve"]["score"] == 0.0
    bob = _items(out, "bob")
    assert float(rows["bob"]["score"]) == 9.0
    assert _items(out, "transformer_lm") == bob
    assert rows["linked"]["status"] == "error"
    assert "follows no links" in rows["linked"]["errors"]
    assert rows["empty"]["status"] == "error"
    assert "no submission found" in rows["empty"]["errors"]
    assert "the folder is empty" in rows["empty"]["errors"]


@pytest.mark.slow
def test_a_colluding_fake_course_is_two_students(graded):
    """nbgrader_config.py + submitted/ beside classmates: a flat class;
    the config is graded as the file it is (0: it defines nothing),
    submitted/ is graded from its own file, and zed (the made-up student)
    is nobody's row."""
    out, run = graded["colluding"]
    assert run.returncode == 0, run.stderr
    rows = _rows(out)
    assert sorted(rows) == ["alice", "bob", "nbgrader_config",
                            "submitted"]
    assert _items(out, "alice.py") == REFERENCE_ITEMS
    assert _items(out, "submitted") == _items(out, "bob")
    assert set(_items(out, "nbgrader_config.py").values()) == {0.0}


@pytest.mark.slow
def test_an_extra_assignment_folder_does_not_stop_a_course(graded):
    """Eve's made-up assignment folder is outvoted; the file in
    submitted/ is its own error row; everyone else is graded."""
    out, run = graded["course"]
    assert run.returncode == 1, run.stderr
    rows = _rows(out)
    assert sorted(rows) == ["ann", "ben", "eve", "nbgrader_config"]
    assert _items(out, "ann") == REFERENCE_ITEMS
    assert _items(out, "eve") == _items(out, "ben")
    assert float(rows["eve"]["score"]) == 9.0
    assert "not a student folder" in rows["nbgrader_config"]["errors"]
