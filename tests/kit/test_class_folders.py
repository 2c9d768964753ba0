"""``batch`` on class folders as they really come: nbgrader courses, flat
LMS exports, and hostile ones.

What must hold (issue 11 items 3 and 6, issue 18 items 1 and 8): a real
nbgrader course root (``nbgrader_config.py``) or its ``submitted/`` gives
one row per student and nothing of the course is a student; in a flat
folder every entry gets a row, whatever its name (spaces, leading dashes,
formula characters, escape sequences, undecodable bytes, lookalikes,
``submitted/`` or ``feedback/`` as a student's folder); each student is
graded only from their own entry; the class is graded against one
assignment and a submission for another is flagged; report folders never
collide; no CSV cell starts with ``=``, ``+``, ``-`` or ``@``; no control
character reaches the terminal or the CSV. The discovery rules are
checked without grading first, then two real batches pin exact rows.
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

from grader.locate.submission import label
from grader.output.text import csv_cell
from grader.errors import BatchError
from grader.routes.classfolder import (Entry, class_assignment, discover,
                                       entry_keys)

KIT = Path(__file__).resolve().parents[2]
REFERENCE = KIT / "solutions" / "modeling_attention.py"
BASICS_REFERENCE = KIT / "solutions" / "attention_basics.py"
STUB = KIT / "transformer_lm" / "modeling_attention.py"
EXAMPLE = KIT / "examples" / "submission" / "transformer_lm" \
    / "modeling_attention.py"
RELEASE = KIT / "assignment" / "multi_head_attention" \
    / "multi_head_attention.ipynb"
SOURCE = KIT / "solutions" / "source" / "multi_head_attention" \
    / "multi_head_attention.ipynb"
LAYOUT_NAMES = ("submitted", "autograded", "feedback", "source", "release")


def _put(source: Path | str, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(source, Path):
        shutil.copy(source, target)
    else:
        target.write_text(source)
    return target


def _repo(folder: Path, module: Path, notebook: Path | None = None) -> Path:
    """A student's folder: transformer_lm/<module> and maybe a notebook."""
    _put(module, folder / "transformer_lm" / "modeling_attention.py")
    if notebook is not None:
        _put(notebook, folder / notebook.name)
    return folder


def _course(root: Path, assignment: str = "multi_head_attention") -> Path:
    """An nbgrader course root with every layout folder and file."""
    _put(KIT / "nbgrader_config.py", root / "nbgrader_config.py")
    (root / "gradebook.db").write_bytes(b"SQLite format 3\x00")
    for name in ("source", "release", "autograded", "feedback"):
        _repo(root / name / "ann" / assignment, REFERENCE)
    return root


def _batch(folder: Path, out: Path, *extra: str
           ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env["PYTHONPATH"] = str(KIT)
    return subprocess.run([sys.executable, "-m", "grader", "batch",
                           str(folder), "--out", str(out), "--public-only",
                           "--jobs", "2", *extra], cwd=KIT, env=env,
                          capture_output=True, text=True, timeout=900)


def _rows(out: Path) -> dict[str, dict]:
    with out.open(newline="", encoding="utf-8") as stream:
        return {row["student"]: row for row in csv.DictReader(stream)}


# --------------------------------------------------------------------------
# Names


def test_labels_escape_what_a_terminal_would_obey():
    """Controls, bidi overrides, undecodable bytes: escaped, visible."""
    assert label("alice") == "alice"
    assert label("evil\x1b[2J\rTotal: 11") == "evil\\x1b[2J\\x0dTotal: 11"
    assert label("caf" + os.fsdecode(b"\xe9")) == "caf\\xe9"
    assert label("x\u202eyp.py") == "x\\u202eyp.py"
    assert label("a\\b") == "a\\\\b"
    assert label("\u0430lice") == "\u0430lice"  # a lookalike stays itself


def test_report_folder_names_are_safe_and_unique():
    """alice.py / alice.json.py / ALICE.py / '-rf.py' / '.x.py': one
    folder each, no clash even on a case-insensitive disk."""
    names = ["alice.py", "alice.json.py", "ALICE.py", "-rf.py", ".x.py",
             "a b.py", "caf" + os.fsdecode(b"\xe9") + ".py",
             "evil\x1b[2J.py"]
    keys = entry_keys(names)
    assert len({k.lower() for k in keys.values()}) == len(names)
    assert keys["alice.json.py"] == "alice.json.py"
    assert keys["a b.py"].startswith("a_b.py-")
    assert keys["alice.py"] != "alice.py"  # ALICE.py shares its form
    assert entry_keys(["alice.py", "bob.py"]) == {
        "alice.py": "alice.py", "bob.py": "bob.py"}
    assert Entry("x", Path("/class/a b.py")).key == keys["a b.py"]
    for key in keys.values():
        assert key[0] not in ".-"
        assert all(c.isascii() and (c.isalnum() or c in "_.-")
                   for c in key), key


# --------------------------------------------------------------------------
# Which folders are class folders (no grading)


def test_an_nbgrader_course_root_is_one_row_per_student(tmp_path):
    """Issue 11: the course root (nbgrader_config.py) merged the class
    into one row beside rows for its layout folders. Now only
    submitted/<student>/<assignment>/ are students."""
    course = _course(tmp_path / "course")
    for student in ("ann", "ben"):
        _repo(course / "submitted" / student / "multi_head_attention",
              REFERENCE)
    (course / "submitted" / "cat").mkdir()
    for folder in (course, course / "submitted"):
        found = discover(folder)
        assert found.layout == "nbgrader"
        assert found.assignment == "multi_head_attention"
        assert [(e.student, e.problem) for e in found.entries] == [
            ("ann", ""), ("ben", ""),
            ("cat", "has no submission of multi_head_attention")]
        assert found.entries[0].path == (course / "submitted" / "ann"
                                         / "multi_head_attention")


def test_a_course_with_several_assignments_needs_one_named(tmp_path):
    """submitted/ holds hw3 and hw4: --assignment picks the folder; a
    folder name that is no kit assignment leaves the choice to the
    class's fit."""
    course = _course(tmp_path / "course")
    _repo(course / "submitted" / "ann" / "hw3", REFERENCE)
    _repo(course / "submitted" / "ben" / "hw4", REFERENCE)
    with pytest.raises(BatchError, match=r"several assignments \(hw3, "
                                         r"hw4\)"):
        discover(course)
    assert discover(course, "hw4").entries[1].path.name == "hw4"
    shutil.rmtree(course / "submitted" / "ben")
    _repo(course / "submitted" / "ann" / "multi_head_attention", EXAMPLE)
    # A tie between folders of one student: the kit's assignment id wins.
    assert discover(course).entries[0].path.name == "multi_head_attention"
    found = discover(course, "multi_head_attention")
    assert found.entries[0].path.name == "multi_head_attention"
    shutil.rmtree(course / "submitted" / "ann" / "multi_head_attention")
    found = discover(course)
    assert found.assignment is None
    assert class_assignment(found.entries)[0] == "multi_head_attention"
    (tmp_path / "empty").mkdir()
    _put(KIT / "nbgrader_config.py", tmp_path / "empty"
         / "nbgrader_config.py")
    with pytest.raises(BatchError, match="without a submitted/ folder"):
        discover(tmp_path / "empty")


def test_layout_names_in_a_flat_folder_are_students(tmp_path):
    """Without nbgrader_config.py, submitted/ or feedback/ are students'
    folders like any other."""
    for name in LAYOUT_NAMES:
        _repo(tmp_path / name, REFERENCE)
    _put(REFERENCE, tmp_path / "gradebook.py")
    found = discover(tmp_path)
    assert found.layout == "flat"
    assert sorted(e.student for e in found.entries) == sorted(
        LAYOUT_NAMES + ("gradebook",))
    assert all(not e.problem for e in found.entries)


def test_a_submission_or_an_unrelated_folder_is_refused(tmp_path):
    """A student repository (one submission), the kit (a course root with
    nothing collected) and a folder of documents are clear errors before
    grading; so is a class where nothing defines a graded name."""
    with pytest.raises(BatchError, match="is one submission .*transformer"
                                         "_lm/modeling_attention.py"):
        discover(KIT / "examples" / "submission")
    with pytest.raises(BatchError, match="is an nbgrader course "
                                         r"\(nbgrader_config.py\) without "
                                         "a submitted/ folder"):
        discover(KIT)
    _put("# Notes\n", tmp_path / "documents" / "README.md")
    _put("notes\n", tmp_path / "documents" / "notes.txt")
    with pytest.raises(BatchError, match="neither a class folder nor a "
                                         "submission"):
        discover(tmp_path / "documents")
    _put("X = 1\n", tmp_path / "class" / "a.py")
    _put("def f():\n    pass\n", tmp_path / "class" / "b" / "b.py")
    found = discover(tmp_path / "class")
    with pytest.raises(BatchError, match="no entry of the class folder "
                                         "defines"):
        class_assignment(found.entries)


def test_the_class_as_a_whole_decides_the_assignment(tmp_path):
    """Two homework submissions outvote one warm-up."""
    _put(REFERENCE, tmp_path / "a.py")
    _put(STUB, tmp_path / "b.py")
    _put(BASICS_REFERENCE, tmp_path / "c.py")
    chosen, how = class_assignment(discover(tmp_path).entries)
    assert chosen == "multi_head_attention"
    assert "2 of 3 recognised submissions" in how


# --------------------------------------------------------------------------
# A hostile flat class, graded for real


CAFE = "caf" + os.fsdecode(b"\xe9")
EVIL = "evil\x1b[2J\rTotal: 11"
# entry name -> (content, expected student label, status, score, flag)
FLAT = {
    "alice.py": (REFERENCE, "alice", "graded", 11.0, ""),
    "alice.json.py": (EXAMPLE, "alice.json", "graded", 9.0, ""),
    "ALICE.py": (STUB, "ALICE", "graded", 0.0, ""),
    "\u0430lice.py": (REFERENCE, "\u0430lice", "graded", 11.0, ""),
    "-rf.py": (EXAMPLE, "-rf", "graded", 9.0, ""),
    "=HYPERLINK(1).py": (REFERENCE, "=HYPERLINK(1)", "graded", 11.0, ""),
    "@sum.ipynb": (SOURCE, "@sum", "graded", 11.0, ""),
    f"{EVIL}.py": (STUB, label(EVIL), "graded", 0.0, ""),
    f"{CAFE}.py": (EXAMPLE, "caf\\xe9", "graded", 9.0, ""),
    "new\nline.py": (EXAMPLE, "new\\x0aline", "graded", 9.0, ""),
    "my homework (final).ipynb": (RELEASE, "my homework (final)",
                                  "graded", 0.0, ""),
    # One student's unrenamed module beside classmates' notebooks.
    "modeling_attention.py": (REFERENCE, "modeling_attention", "graded",
                              11.0, ""),
    "trudy.py": (BASICS_REFERENCE, "trudy", "graded", 0.0,
                 "wrong assignment"),
    "linked.py": (None, "linked", "error", 0.0, ""),
    "loop.py": (None, "loop", "error", 0.0, ""),
    "pipe.py": (None, "pipe", "error", 0.0, ""),
    "notes.txt": ("my notes\n", "notes.txt", "error", 0.0, ""),
    "bundle.zip": ("PK\x03\x04", "bundle", "error", 0.0, ""),
}
FOLDERS = {  # student folders: (module, notebook, score, flag)
    "submitted": (EXAMPLE, None, 9.0, ""),
    "feedback": (STUB, SOURCE, 11.0, ""),
    "autograded": (STUB, None, 0.0, ""),
    "mallory": ("link", RELEASE, 0.0, "symbolic link that leaves"),
}


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess,
                                    subprocess.CompletedProcess]:
    """The hostile class, graded, then resumed; the CSV lies inside it."""
    folder = tmp_path_factory.mktemp("flat") / "class"
    folder.mkdir()
    for name, (content, *_rest) in FLAT.items():
        if isinstance(content, (Path, str)):
            _put(content, folder / name)
    (folder / "linked.py").symlink_to(REFERENCE)
    (folder / "loop.py").symlink_to(folder / "loop.py")
    (folder / "loopy" / "transformer_lm").mkdir(parents=True)
    (folder / "loopy" / "transformer_lm" / "modeling_attention.py"
     ).symlink_to(folder / "loopy" / "transformer_lm"
                  / "modeling_attention.py")
    os.mkfifo(folder / "pipe.py")
    (folder / ".DS_Store").write_bytes(b"\x00\x01")
    (folder / "__MACOSX").mkdir()
    for name, (module, notebook, _, _) in FOLDERS.items():
        if module == "link":
            (folder / name / "transformer_lm").mkdir(parents=True)
            (folder / name / "transformer_lm"
             / "modeling_attention.py").symlink_to(REFERENCE)
            _put(notebook, folder / name / notebook.name)
        else:
            _repo(folder / name, module, notebook)
    out = folder / "grades.csv"
    first = _batch(folder, out)
    again = _batch(folder, out, "--resume", "--no-feedback")
    return out, first, again


@pytest.mark.slow
def test_every_entry_gets_its_own_row(flat):
    """Exact rows: each student graded from their own entry (the
    release notebooks beside an implemented modeling_attention.py earn
    0), layout-named folders graded, odd entries given error rows."""
    out, first, _ = flat
    assert first.returncode == 1, first.stderr
    rows = _rows(out)
    expected = {csv_cell(shown): (status, score, flag)
                for shown, status, score, flag in
                (v[1:] for v in FLAT.values())}
    expected.update({name: ("graded", score, flag)
                     for name, (_, _, score, flag) in FOLDERS.items()})
    expected["loopy"] = ("error", 0.0, "")
    assert sorted(rows) == sorted(expected)
    for student, (status, score, flag) in expected.items():
        row = rows[student]
        assert (row["status"], float(row["score"])) == (status, score), (
            student, row)
        assert flag in row["flags"], (student, row["flags"])
        if status == "graded":
            assert row["assignment"] == "multi_head_attention"
    assert "assignment multi_head_attention: the one" in first.stderr
    assert "symbolic link; the batch follows no links" in rows[
        "linked"]["errors"]
    assert "is a FIFO" in rows["pipe"]["errors"]
    assert "broken or looping symbolic link" in rows["loopy"]["errors"]
    assert "not a zip Python can read" in rows["bundle"]["errors"]
    assert "grades.csv" not in rows
    assert float(rows["alice.json"]["task2.shapes"]) == -1.0


@pytest.mark.slow
def test_no_cell_is_a_formula_and_no_control_reaches_csv_or_terminal(
        flat):
    """Leading = + - @ get a quote; ESC, CR and raw bytes never leave."""
    out, first, again = flat
    raw = out.read_bytes()
    assert b"\x1b" not in raw and b"\r" not in raw
    raw.decode("utf-8")  # the CSV is valid UTF-8 whatever the names
    with out.open(newline="", encoding="utf-8") as stream:
        cells = [cell for row in csv.reader(stream) for cell in row]
    # Only numbers (penalties: -1.0) may start so; a spreadsheet reads
    # them as numbers, never as formulas.
    leading = [c for c in cells if c[:1] in ("=", "+", "-", "@")]
    assert leading and all(float(c) < 0 for c in leading), leading
    rows = _rows(out)
    assert "'-rf" in rows and "'=HYPERLINK(1)" in rows and "'@sum" in rows
    for run in (first, again):
        for stream in (run.stdout, run.stderr):
            assert "\x1b" not in stream and "\r" not in stream
    assert label(EVIL) in first.stderr


@pytest.mark.slow
def test_each_entry_has_its_own_report_folder_and_resume_keeps_rows(flat):
    """alice.py and alice.json.py: two folders, two records; the resumed
    run grades nothing again and keeps every row."""
    out, first, again = flat
    reports = out.with_name("grades.csv.reports")
    records = {}
    for folder in reports.iterdir():
        record = json.loads((folder / "record.json").read_text())
        records[csv_cell(record["student"])] = (folder.name, record)
    assert sorted(records) == sorted(_rows(out))
    assert records["alice"][0].startswith("alice.py-")  # and ALICE.py
    assert records["ALICE"][0].startswith("ALICE.py-")
    assert records["alice.json"][0] == "alice.json.py"
    assert records["alice"][1]["report"]["score"] == 11.0
    assert records["alice.json"][1]["report"]["score"] == 9.0
    assert (reports / "alice.json.py" / "report.txt").is_file()
    assert (reports / records["alice"][0] / "report.txt").is_file()
    assert again.returncode == 1, again.stderr
    graded = sum(1 for v in FLAT.values() if v[2] == "graded") + len(
        FOLDERS)
    assert f"resuming: {graded} already graded" in again.stderr
    assert sorted(_rows(out)) == sorted(records)


# --------------------------------------------------------------------------
# A real nbgrader course, graded for real


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> tuple[Path, dict, dict]:
    """Five students; graded from the root and from submitted/."""
    root = _course(tmp_path_factory.mktemp("course") / "course")
    submitted = root / "submitted"
    hw = "multi_head_attention"
    _repo(submitted / "ann" / hw, STUB, SOURCE)          # notebook: 11
    _repo(submitted / "ben" / hw, REFERENCE, RELEASE)    # module: 11
    _repo(submitted / "cat" / hw, STUB, RELEASE)         # untouched: 0
    (submitted / "dan" / hw / "transformer_lm").mkdir(parents=True)
    (submitted / "dan" / hw / "transformer_lm"
     / "modeling_attention.py").symlink_to(REFERENCE)    # link out: 0
    _put(RELEASE, submitted / "dan" / hw / RELEASE.name)
    (submitted / "eve").mkdir()                          # nothing handed in
    results = {}
    for name, folder in (("root", root), ("submitted", submitted)):
        out = root.parent / f"{name}.csv"
        result = _batch(folder, out, "--no-feedback")
        assert result.returncode == 1, result.stderr
        results[name] = _rows(out)
    return root, results["root"], results["submitted"]


@pytest.mark.slow
def test_issue11_batch_on_an_nbgrader_course(course):
    """One row per student, from submitted/ only, the same either way."""
    _, from_root, from_submitted = course
    for rows in (from_root, from_submitted):
        assert {s: (r["status"], float(r["score"]))
                for s, r in rows.items()} == {
            "ann": ("graded", 11.0), "ben": ("graded", 11.0),
            "cat": ("graded", 0.0), "dan": ("graded", 0.0),
            "eve": ("error", 0.0)}
        assert "symbolic link that leaves the submission" in rows["dan"][
            "flags"]
        assert "has no submission of multi_head_attention" in rows["eve"][
            "errors"]
        assert all(r["flags"] == "" for s, r in rows.items() if s != "dan")
