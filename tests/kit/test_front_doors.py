"""Every front door finds the student's work and nothing else.

Locating is the grader's first stage (``grader/locate/submission.py``): what a
folder's candidates are, that a notebook is recognised by what it defines
itself, that nothing is read through a link that leaves the submission or
from a FIFO or a device, that the assignment comes from the route (a
submission that fits another is flagged ``wrong_assignment``), and that
locating is linear and has a deadline. The routes a user runs from the
README are then taken end to end: ``grade .`` in a copy of the kit,
released and source notebooks, the Gradescope driver on uploads of odd
names, and the Gradescope bundle and student repository built from a
working tree whose stub holds a solution.

The five failures at the top of issue 11 (but the nbgrader kernel one,
pinned by the nbgrader route's tests) are pinned here by name:
``test_issue11_*``.
"""
from __future__ import annotations

import concurrent.futures
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from bundle_server import bundle_fork_server, children_cpu
from in_process import grade_command

from grader.locate.submission import (REFUSED_FILE, WRONG_ASSIGNMENT,
                                      SubmissionError, assess, defined_names,
                                      folder_candidates, locate)
from grader.routes import gradescope_driver
from grader.rubric import assignments, get_assignment
from grader.run.forkserver import SHARED_ADDRESS
from solutions import gradescope_bundle as bundle

KIT = Path(__file__).resolve().parents[2]
REFERENCE = KIT / "solutions" / "modeling_attention.py"
BASICS_REFERENCE = KIT / "solutions" / "attention_basics.py"
STUB = KIT / "transformer_lm" / "modeling_attention.py"
EXAMPLE = KIT / "examples" / "submission" / "transformer_lm" \
    / "modeling_attention.py"
UNSCALED = REFERENCE.read_text().replace(" / self.scale, dim=-1)",
                                         ", dim=-1)")
NOTEBOOKS = {(a.id, kind): KIT / folder / a.id / a.notebook
             for a in assignments()
             for kind, folder in (("release", "assignment"),
                                  ("source", "solutions/source"))}
IGNORED = ("solutions", "tests", "docs", "examples", "bench", ".git")


def _copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    return target


def _kit_copy(target: Path) -> Path:
    """The kit as a student clones it (no .git, no caches)."""
    shutil.copytree(KIT, target, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", ".pytest_cache", "*.egg-info"))
    return target


def _relative(submission, root: Path) -> dict[str, str]:
    return {task: source.path.resolve().relative_to(root.resolve())
            .as_posix() for task, source in submission.sources.items()}


def _env(path: Path) -> dict[str, str]:
    """This environment with no seed of its own and ``path`` as its only
    PYTHONPATH (where the grader is imported from)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GRADER_SEED", "PYTHONPATH")}
    env["PYTHONPATH"] = str(path)
    return env


def _grade(*args: str, cwd: Path = KIT) -> subprocess.Popen:
    env = _env(cwd)
    return subprocess.Popen([sys.executable, "-m", "grader", "grade", *args,
                             "--public-only", "--format", "json"],
                            cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _grade_here(path: Path) -> dict:
    """What ``_grade(str(path))`` reports, by the grade command's main in
    this process (in_process.py)."""
    result = grade_command(str(path), "--public-only", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _finish(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return json.loads(stdout)


# --------------------------------------------------------------------------
# Where a folder's work is


def test_the_kit_folder_is_located_from_the_students_files_only():
    """``grade .`` in the kit: candidates are transformer_lm/ and
    assignment/<id>/ only; solutions/, tests/, examples/... never."""
    searched, candidates = folder_candidates(KIT, list(assignments()))
    assert searched == KIT
    paths = [c.path.relative_to(KIT).as_posix() for c in candidates]
    assert paths == [
        "transformer_lm/attention_basics.py",
        "transformer_lm/modeling_attention.py",
        "transformer_lm/modeling_transformer.py",
        "assignment/attention_basics/attention_basics.ipynb",
        "assignment/attention_basics/transformer_lm/attention_basics.py",
        "assignment/multi_head_attention/multi_head_attention.ipynb",
        "assignment/multi_head_attention/transformer_lm/"
        "modeling_attention.py",
        "assignment/transformer_block/transformer_block.ipynb",
        "assignment/transformer_block/transformer_lm/"
        "modeling_transformer.py"]
    submission = locate(KIT, "multi_head_attention")
    assert set(_relative(submission, KIT).values()) == {
        "transformer_lm/modeling_attention.py"}
    assert submission.flags == ()


def test_folders_that_never_hold_a_students_work_are_not_read(tmp_path):
    """A correct module under solutions/, tests/, docs/, examples/,
    bench/, build/ or a hidden folder is not graded; the stub at the top
    is (0, not 11)."""
    for folder in ("solutions", "tests", "docs", "examples/submission",
                   "bench", "build", ".hidden", "__pycache__"):
        _copy(REFERENCE, tmp_path / folder / "transformer_lm"
              / "modeling_attention.py")
        _copy(REFERENCE, tmp_path / folder / "modeling_attention.py")
    _copy(STUB, tmp_path / "transformer_lm" / "modeling_attention.py")
    submission = locate(tmp_path)
    assert _relative(submission, tmp_path) == {
        "task1": "transformer_lm/modeling_attention.py",
        "task2": "transformer_lm/modeling_attention.py"}
    # With the stub gone there is nothing of the student's to grade.
    (tmp_path / "transformer_lm" / "modeling_attention.py").unlink()
    with pytest.raises(SubmissionError, match="no submission found"):
        locate(tmp_path)


def test_a_zip_extracted_into_a_folder_is_looked_into(tmp_path):
    """One lone ordinary folder (``hw3-main/``, a zip's top folder) is
    followed, up to three deep; a lone ``solutions/`` is not."""
    deep = tmp_path / "upload" / "hw3-main" / "repo"
    _copy(EXAMPLE, deep / "transformer_lm" / "modeling_attention.py")
    (tmp_path / "upload" / "__MACOSX").mkdir()
    submission = locate(tmp_path / "upload")
    assert _relative(submission, tmp_path / "upload") == {
        "task1": "hw3-main/repo/transformer_lm/modeling_attention.py",
        "task2": "hw3-main/repo/transformer_lm/modeling_attention.py"}
    _copy(REFERENCE, tmp_path / "lone" / "solutions" / "mine.py")
    with pytest.raises(SubmissionError, match="no submission found"):
        locate(tmp_path / "lone")


def test_uploads_of_any_name_are_recognised_by_what_they_define(tmp_path):
    """hw3_attention.py, 'modeling_attention (1).py', several files: the
    one that implements the graded names is graded."""
    _copy(REFERENCE, tmp_path / "one" / "hw3_attention.py")
    _copy(EXAMPLE, tmp_path / "two" / "modeling_attention (1).py")
    several = tmp_path / "several"
    _copy(KIT / "transformer_lm" / "test_values.py",
          several / "test_values.py")
    _copy(STUB, several / "modeling_attention.py")
    _copy(REFERENCE, several / "my attention v2.py")
    (several / "notes.md").write_text("my notes\n")
    expected = {"one": "hw3_attention.py",
                "two": "modeling_attention (1).py",
                "several": "my attention v2.py"}
    for folder, name in expected.items():
        submission = locate(tmp_path / folder, "multi_head_attention")
        assert set(_relative(submission, tmp_path / folder).values()) \
            == {name}, folder
        assert f'Graded from "{name}": SelfAttention, ' \
               f'MultiHeadSelfAttention' in submission.notes
    # Two files that implement the classes: the module's name first, and
    # the report says the other was not graded.
    _copy(EXAMPLE, tmp_path / "two" / "modeling_attention.py")
    notes = locate(tmp_path / "two").notes
    assert 'Graded from "modeling_attention.py": SelfAttention, ' \
           'MultiHeadSelfAttention' in notes
    assert 'Also written in "modeling_attention (1).py", not graded ' \
           '(the first file that implements a task is graded)' in notes


def test_nothing_that_defines_the_graded_names_lists_the_upload(tmp_path):
    """The error names what was handed in, escaped, so a student sees
    what the grader saw."""
    (tmp_path / "README.md").write_text("hi\n")
    (tmp_path / "helper.py").write_text("def helper():\n    return 1\n")
    (tmp_path / "evil\x1b[2J.txt").write_text("x\n")
    with pytest.raises(SubmissionError) as raised:
        locate(tmp_path, "multi_head_attention")
    message = str(raised.value)
    assert "defines SelfAttention, MultiHeadSelfAttention" in message
    for name in ('"README.md"', '"helper.py"', r'"evil\x1b[2J.txt"'):
        assert name in message, message
    assert "\x1b" not in message and "\n" not in message


# --------------------------------------------------------------------------
# Notebooks: recognised by what they define themselves


@pytest.mark.parametrize("key", sorted(NOTEBOOKS))
def test_every_released_and_source_notebook_is_recognised(key):
    """No --assignment: each notebook of the kit, alone, is its own
    assignment, graded from itself (never from solutions/ nearby)."""
    path = NOTEBOOKS[key]
    submission = locate(path)
    assert submission.assignment.id == key[0]
    assert submission.recognised
    assert {s.path for s in submission.sources.values()} == {path}
    assert submission.notes[0].startswith(f"Assignment {key[0]}: "
                                          f"recognised from what")


def test_a_notebook_comes_before_the_modules_beside_it(tmp_path):
    """A warm-up notebook beside a correct homework module is the
    warm-up; a notebook that defines nothing is graded from the module
    beside it (and only beside it, never from a folder above)."""
    basics = NOTEBOOKS[("attention_basics", "source")]
    _copy(basics, tmp_path / "nb" / basics.name)
    _copy(REFERENCE, tmp_path / "nb" / "transformer_lm"
          / "modeling_attention.py")
    assert locate(tmp_path / "nb" / basics.name).assignment.id \
        == "attention_basics"

    empty = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                        "execution_count": None,
                        "source": "from transformer_lm import "
                                  "modeling_attention\n"}],
             "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    notebook = tmp_path / "work" / "homework.ipynb"
    notebook.parent.mkdir()
    notebook.write_text(json.dumps(empty))
    _copy(REFERENCE, tmp_path / "modeling_attention.py")  # a folder above
    with pytest.raises(SubmissionError, match="defines"):
        locate(notebook)
    _copy(EXAMPLE, tmp_path / "work" / "transformer_lm"
          / "modeling_attention.py")
    submission = locate(notebook)
    assert _relative(submission, tmp_path / "work") == {
        "task1": "transformer_lm/modeling_attention.py",
        "task2": "transformer_lm/modeling_attention.py"}
    with pytest.raises(SubmissionError, match="defines"):
        locate(notebook, nearby=False)  # a batch entry: its own file only


ONE_LINERS = STUB.read_text().replace(
    'raise NotImplementedError("Task 1.1: SelfAttention.__init__")',
    'super().__init__(); self.q, self.k, self.v = (nn.Linear(input_size, '
    'hidden) for _ in "qkv")', 1).replace(
    'raise NotImplementedError("Task 1.2: SelfAttention.forward")',
    "return torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / "
    "self.q.out_features ** 0.5, -1) @ self.v(x)", 1)


def test_a_region_of_one_line_is_the_students_code(tmp_path):
    """A method whose student region is one line (the last of the
    method, the end marker below it) is written, not the stub: the
    notebook's class is chosen over the module beside it, by the grader
    and by the notebook's use_implemented alike."""
    import importlib.util

    from grader.locate.loading import load_source
    from grader.locate.submission import is_stub
    from transformer_lm.notebook import is_untouched_stub

    path = tmp_path / "one_liners.py"
    path.write_text(ONE_LINERS)
    assert ONE_LINERS != STUB.read_text()
    assert is_stub(load_source(path), "SelfAttention") is False
    assert is_stub(load_source(path), "MultiHeadSelfAttention") is True
    assert is_stub(load_source(STUB), "SelfAttention") is True
    spec = importlib.util.spec_from_file_location("one_liners", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not is_untouched_stub(module.SelfAttention)
    assert is_untouched_stub(module.MultiHeadSelfAttention)

    notebook = {"cells": [{"cell_type": "code", "metadata": {},
                           "outputs": [], "execution_count": None,
                           "source": ONE_LINERS}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "homework.ipynb").write_text(json.dumps(notebook))
    _copy(EXAMPLE, tmp_path / "repo" / "transformer_lm"
          / "modeling_attention.py")
    assert _relative(locate(tmp_path / "repo"), tmp_path / "repo") == {
        "task1": "homework.ipynb",
        "task2": "transformer_lm/modeling_attention.py"}


# --------------------------------------------------------------------------
# The assignment comes from the route


def test_a_submission_for_another_assignment_is_flagged(tmp_path):
    """Named assignment, other assignment's work: graded as the named one
    (its tasks defined nowhere) and flagged; honest work is not."""
    submission = locate(BASICS_REFERENCE, "multi_head_attention")
    assert submission.assignment.id == "multi_head_attention"
    [flag] = submission.flags
    assert flag.kind == WRONG_ASSIGNMENT
    assert "fits attention_basics (7 of 7 graded names implemented" \
        in flag.message
    assert "graded as multi_head_attention" in flag.message
    assert "Defined nowhere in the submission: SelfAttention, " \
           "MultiHeadSelfAttention" in submission.notes
    # More work, not wrong work: the warm-up done, the homework begun.
    both = tmp_path / "both"
    _copy(BASICS_REFERENCE, both / "transformer_lm" / "attention_basics.py")
    _copy(EXAMPLE, both / "transformer_lm" / "modeling_attention.py")
    (both / "transformer_lm" / "modeling_attention.py").write_text(
        STUB.read_text().replace(
            'raise NotImplementedError("Task 1.1: SelfAttention.__init__")',
            "self.q = nn.Linear(input_size, hidden)\n"
            "        self.k = nn.Linear(input_size, hidden)", 1))
    assert assess(both)["attention_basics"].implemented == 1.0
    assert assess(both)["multi_head_attention"].implemented == 0.5
    assert locate(both, "multi_head_attention").flags == ()
    for path, assignment in ((REFERENCE, "multi_head_attention"),
                             (STUB, "multi_head_attention"),
                             (KIT, "multi_head_attention"),
                             (KIT, "attention_basics"),
                             (BASICS_REFERENCE, "attention_basics")):
        assert locate(path, assignment).flags == (), (path, assignment)


def test_fits_rank_implemented_before_defined(tmp_path):
    """assess(): the warm-up stub beside an implemented homework module
    fits the homework; both stubs tie (the kit as cloned)."""
    _copy(KIT / "transformer_lm" / "attention_basics.py",
          tmp_path / "transformer_lm" / "attention_basics.py")
    _copy(REFERENCE,
          tmp_path / "transformer_lm" / "modeling_attention.py")
    fits = assess(tmp_path)
    assert fits["multi_head_attention"].key() == (1.0, 1.0)
    assert fits["attention_basics"].key() == (0.0, 1.0)
    assert locate(tmp_path).assignment.id == "multi_head_attention"
    kit = assess(KIT)
    assert kit["multi_head_attention"].key() == kit[
        "attention_basics"].key() == kit["transformer_block"].key() == (
        0.0, 1.0)
    note = locate(KIT).notes[0]
    assert "fits multi_head_attention, transformer_block equally" in note


# --------------------------------------------------------------------------
# Nothing outside the submission, only regular files


def test_a_symlink_that_leaves_the_submission_is_never_read(tmp_path):
    """Issue 12: transformer_lm/modeling_attention.py -> the kit's
    solution. Never read, flagged; with an untouched notebook beside it
    the notebook (the stub) is graded; alone, nothing is."""
    folder = tmp_path / "submitted" / "mallory" / "multi_head_attention"
    (folder / "transformer_lm").mkdir(parents=True)
    (folder / "transformer_lm" / "modeling_attention.py").symlink_to(
        REFERENCE)
    with pytest.raises(SubmissionError, match="symbolic link that leaves "
                                              "the submission"):
        locate(folder, "multi_head_attention")
    release = NOTEBOOKS[("multi_head_attention", "release")]
    _copy(release, folder / release.name)
    submission = locate(folder, "multi_head_attention")
    assert {s.path.name for s in submission.sources.values()} == {
        release.name}
    [flag] = submission.flags
    assert flag.kind == REFUSED_FILE
    assert '"transformer_lm/modeling_attention.py" is (or lies behind) ' \
           'a symbolic link that leaves the submission' in flag.message

    # The package folder itself linked out of the submission.
    other = tmp_path / "other"
    other.mkdir()
    (other / "transformer_lm").symlink_to(KIT / "solutions" / "source"
                                          / "multi_head_attention"
                                          / "transformer_lm")
    with pytest.raises(SubmissionError, match="leaves the submission"):
        locate(other)
    # A link that stays inside the submission is followed.
    inside = tmp_path / "inside"
    _copy(EXAMPLE, inside / "work" / "attention.py")
    (inside / "transformer_lm").mkdir()
    (inside / "transformer_lm" / "modeling_attention.py").symlink_to(
        inside / "work" / "attention.py")
    assert locate(inside).flags == ()


def test_fifos_devices_and_sockets_are_refused_before_reading(
        tmp_path, monkeypatch):
    """Named: a one-line error at once (opening a FIFO would block until
    the deadline). Inside a folder: refused and flagged."""
    fifo = tmp_path / "modeling_attention.py"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(SubmissionError, match="is a FIFO, not a regular "
                                              "file"):
        locate(fifo, timeout=5)
    assert time.monotonic() - started < 4
    with pytest.raises(SubmissionError, match="character device"):
        locate(Path("/dev/zero"))
    folder = tmp_path / "repo"
    _copy(EXAMPLE, folder / "homework.py")
    (folder / "transformer_lm").mkdir()
    server = socket.socket(socket.AF_UNIX)
    try:
        # A relative name: socket paths are limited to 107 bytes.
        monkeypatch.chdir(folder / "transformer_lm")
        server.bind("modeling_attention.py")
        os.mkfifo(folder / "notes.ipynb")
        submission = locate(folder)
    finally:
        server.close()
    assert {s.path.name for s in submission.sources.values()} == {
        "homework.py"}
    messages = sorted(f.message for f in submission.flags)
    assert [f.kind for f in submission.flags] == [REFUSED_FILE] * 2
    assert '"notes.ipynb" is a FIFO' in messages[0]
    assert '"transformer_lm/modeling_attention.py" is a socket' \
        in messages[1]


# --------------------------------------------------------------------------
# Bounded: linear recognition, a deadline


def test_recognition_is_linear_and_reads_broken_files():
    """40,000 blank lines before a correct file (issue 12: 88 s in a
    quadratic regular expression) are recognised well inside locate's
    own deadline; a file that does not parse is still recognised, and a
    class bound by assignment counts as defined."""
    text = "\n" * 40_000 + REFERENCE.read_text()
    assert {"SelfAttention", "MultiHeadSelfAttention"} <= defined_names(
        text)
    broken = "class SelfAttention(nn.Module:\n    pass\n"
    assert "SelfAttention" in defined_names(broken)
    bound = "SelfAttention = _Hidden\nMultiHeadSelfAttention: type = X\n"
    assert defined_names(bound) == {"SelfAttention",
                                    "MultiHeadSelfAttention"}
    assert defined_names("x == SelfAttention\n") == frozenset()


def test_padded_file_is_located_within_the_deadline(tmp_path):
    """The 40,000-blank-line file, through locate() with a 10 s budget
    (the old check took 88 s)."""
    padded = tmp_path / "modeling_attention.py"
    padded.write_text("\n" * 40_000 + REFERENCE.read_text())
    submission = locate(padded, timeout=10)
    assert submission.assignment.id == "multi_head_attention"


def test_locating_has_a_deadline(tmp_path, monkeypatch):
    """A read that hangs is stopped at the deadline with one line."""
    import grader.locate.submission as submission_module

    def hang(path: Path):
        time.sleep(30)

    monkeypatch.setattr(submission_module, "load_source", hang)
    _copy(REFERENCE, tmp_path / "modeling_attention.py")
    started = time.monotonic()
    with pytest.raises(SubmissionError, match="locating the submission "
                                              "took longer than 0.5 s"):
        locate(tmp_path, timeout=0.5)
    assert time.monotonic() - started < 10


# --------------------------------------------------------------------------
# End to end, as a new user runs it


@pytest.fixture(scope="module")
def kit_routes(tmp_path_factory) -> dict[str, dict]:
    """``grade`` runs on a clean and a worked kit copy (each a process
    of the copy's own grader) and a padded file, started first; the kit's
    notebooks and an unscaled file meanwhile by the grade command's main
    in this process (in_process.py: their grade is the subject)."""
    root = tmp_path_factory.mktemp("routes")
    clean = _kit_copy(root / "clean")
    worked = _kit_copy(root / "worked")
    (worked / "transformer_lm" / "modeling_attention.py").write_text(
        UNSCALED)
    (root / "unscaled.py").write_text(UNSCALED)
    padded = root / "padded.py"
    padded.write_text("\n" * 40_000 + REFERENCE.read_text())
    runs = {
        "clean": _grade(".", cwd=clean),
        "worked": _grade(".", cwd=worked),
        "worked_named": _grade(".", "--assignment", "multi_head_attention",
                               cwd=worked),
        "padded": _grade(str(padded)),
    }
    in_kit = {"unscaled_file": root / "unscaled.py",
              **{f"{a}:{kind}": path
                 for (a, kind), path in NOTEBOOKS.items()}}
    graded = {name: _grade_here(path) for name, path in in_kit.items()}
    return {**{name: _finish(process) for name, process in runs.items()},
            **graded}


@pytest.mark.slow
def test_issue11_grade_dot_in_the_kit_folder(kit_routes):
    """Issue 11: ``grade . --public-only`` in the kit said "fits ...
    equally"; with --assignment it graded solutions/source/ (11/10) while
    the student's module was wrong. Now: a grade (0 for the clean kit),
    and the student's own module's honest score either way."""
    clean = kit_routes["clean"]
    assert clean["score"] == 0.0
    assert "fits multi_head_attention, transformer_block equally" in \
        clean["notes"][0]
    honest = kit_routes["unscaled_file"]
    assert honest["score"] == 9.0  # unscaled: task1.forward 2, no bonus
    for name in ("worked", "worked_named"):
        report = kit_routes[name]
        assert report["assignment"] == "multi_head_attention"
        assert {i["id"]: i["score"] for i in report["items"]} == {
            i["id"]: i["score"] for i in honest["items"]}, name
        assert {t["source"].split("worked/")[-1]
                for t in report["tasks"]} == {
            "transformer_lm/modeling_attention.py"}, name
        assert 'Graded from "transformer_lm/modeling_attention.py": ' \
               'SelfAttention, MultiHeadSelfAttention' in report["notes"]


@pytest.mark.slow
def test_issue11_every_kit_notebook_grades_without_assignment(kit_routes):
    """Issue 11: the warm-up's source notebook needed --assignment. Each
    source notebook earns full marks, each release 0."""
    full = {"multi_head_attention": 11.0, "attention_basics": 10.0,
            "transformer_block": 10.0}
    for (assignment, kind), path in NOTEBOOKS.items():
        report = kit_routes[f"{assignment}:{kind}"]
        assert report["assignment"] == assignment
        assert report["score"] == (full[assignment] if kind == "source"
                                   else 0.0), (assignment, kind)
        assert report["flags"] == []


@pytest.mark.slow
def test_issue12_padded_file_grades_on_merit(kit_routes):
    """40,000 blank lines before the reference: full marks."""
    assert kit_routes["padded"]["score"] == 11.0


# --------------------------------------------------------------------------
# Gradescope


@pytest.fixture(scope="module")
def autograder(tmp_path_factory) -> Path:
    """The bundle for the homework, unpacked once as /autograder/source."""
    folder = tmp_path_factory.mktemp("autograder")
    out = bundle.write_bundle(folder / "autograder.zip",
                              assignment="multi_head_attention", seed=5)
    with zipfile.ZipFile(out) as archive:
        archive.extractall(folder / "source")
    return folder / "source"


def _upload(source: Path, root: Path, files: dict[str, Path | str]
            ) -> Path:
    (root / "submission").mkdir(parents=True)
    (root / "source").symlink_to(source)
    for name, content in files.items():
        target = root / "submission" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, target)
        else:
            target.write_text(content)
    return root


UPLOADS = {
    "hw3": ({"hw3_attention.py": REFERENCE}, 11.0),
    "browser_copy": ({"modeling_attention (1).py": EXAMPLE}, 9.0),
    "several": ({"test_values.py": KIT / "transformer_lm" / "test_values.py",
                 "notes.md": "notes\n", "attention.py": REFERENCE}, 11.0),
    "notebook": ({"Homework 3 (final).ipynb": NOTEBOOKS[
        ("multi_head_attention", "source")]}, 11.0),
    "zip_folder": ({"hw3-main/transformer_lm/modeling_attention.py":
                    EXAMPLE, "hw3-main/README.md": "mine\n"}, 9.0),
    "warm_up": ({"attention_basics.py": BASICS_REFERENCE}, 0.0),
    "nothing": ({"README.md": "hello\n", "helper.py": "X = 1\n"}, 0.0),
}


@pytest.fixture(scope="module")
def gradescope(autograder, tmp_path_factory) -> dict[str, dict]:
    """gradescope_driver.run() on a scratch AUTOGRADER_ROOT per upload;
    the runs fork their workers from one server of the bundle's grader
    (bundle_server.py) instead of starting one each."""
    roots = {name: _upload(autograder, tmp_path_factory.mktemp(name),
                           files)
             for name, (files, _) in UPLOADS.items()}
    source = autograder.resolve()
    pythonpath = os.pathsep.join(
        [str(source)] + ([os.environ["PYTHONPATH"]]
                         if os.environ.get("PYTHONPATH") else []))
    with bundle_fork_server(source, pythonpath) as (address, pid), \
            pytest.MonkeyPatch.context() as patch:
        patch.setenv(SHARED_ADDRESS, address)
        before = children_cpu(pid)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = {name: pool.submit(gradescope_driver.run, root,
                                         "multi_head_attention", 240)
                       for name, root in roots.items()}
            found = {name: future.result()
                     for name, future in futures.items()}
        deadline = time.monotonic() + 10
        while children_cpu(pid) == before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert children_cpu(pid) > before, "the bundle's server was unused"
    return found


@pytest.mark.slow
def test_issue11_gradescope_uploads_of_any_name(gradescope):
    """Issue 11: hw3_attention.py and 'modeling_attention (1).py' scored
    0. Every upload that holds the classes earns their score."""
    for name, (_, score) in UPLOADS.items():
        assert gradescope[name]["score"] == score, (name, gradescope[name])
    graded = gradescope["browser_copy"]
    assert {t["number"]: t["score"] for t in graded["tests"]}[
        "task2.shapes"] == -1.0


@pytest.mark.slow
def test_gradescope_says_what_was_uploaded_and_flags_the_wrong_one(
        gradescope):
    """Nothing defines the classes: the message lists the upload. The
    warm-up's solution in the homework's bundle: 0 and the flag."""
    output = gradescope["nothing"]["output"]
    assert output.startswith("Your submission could not be graded: ")
    assert "defines SelfAttention, MultiHeadSelfAttention" in output
    assert '"README.md"' in output and '"helper.py"' in output
    warm_up = gradescope["warm_up"]
    assert warm_up["tests"], warm_up
    assert "Integrity flag: wrong assignment: this submission fits " \
           "attention_basics" in warm_up["output"]


def test_bundle_needs_the_assignment_named(tmp_path):
    """This kit has two assignments: building without --assignment is a
    one-line error, and the driver always passes the baked one."""
    with pytest.raises(bundle.BundleError, match="attention_basics, "
                                                 "multi_head_attention"):
        bundle.write_bundle(tmp_path / "x.zip")
    assert not (tmp_path / "x.zip").exists()
    made = subprocess.run([sys.executable, "-m", "grader",
                           "gradescope-bundle", str(tmp_path / "y.zip")],
                          cwd=KIT, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 2
    assert made.stderr.count("\n") == 1
    assert "--assignment ID" in made.stderr
    script = bundle.run_script("attention_basics")
    assert "--assignment attention_basics" in script


# --------------------------------------------------------------------------
# The bundle and the student repository ship the generated stub


@pytest.fixture(scope="module")
def tampered_kit(tmp_path_factory) -> Path:
    """A kit copy whose working-tree stubs hold the solution."""
    kit = _kit_copy(tmp_path_factory.mktemp("tampered") / "kit")
    for stub in (kit / "transformer_lm" / "modeling_attention.py",
                 kit / "assignment" / "multi_head_attention"
                 / "transformer_lm" / "modeling_attention.py"):
        stub.write_text(REFERENCE.read_text())
    return kit


def _in_kit(kit: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(kit)
    result = subprocess.run([sys.executable, *args], cwd=kit, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow
def test_issue11_bundle_ships_the_generated_stub(tampered_kit, tmp_path):
    """Issue 11: the bundle shipped the working tree's stub (here, a
    solution). It ships the build's stub and test values."""
    out = tmp_path / "ag.zip"
    _in_kit(tampered_kit, "-m", "grader", "gradescope-bundle", str(out),
            "--assignment", "multi_head_attention")
    with zipfile.ZipFile(out) as archive:
        shipped = archive.read("transformer_lm/modeling_attention.py")
        values = archive.read("transformer_lm/test_values.py")
    assert shipped == STUB.read_bytes()
    assert values == (KIT / "transformer_lm" / "test_values.py").read_bytes()
    assert b"### BEGIN SOLUTION" not in shipped


@pytest.mark.slow
def test_student_repo_ships_the_generated_stub(tampered_kit, tmp_path):
    """The same rule for the GitHub Classroom repository."""
    _in_kit(tampered_kit, "-m", "solutions.build", "student-repo",
            "multi_head_attention", str(tmp_path / "repo"))
    shipped = tmp_path / "repo" / "transformer_lm" / "modeling_attention.py"
    assert shipped.read_bytes() == STUB.read_bytes()


def test_student_repo_workflow_grades_the_named_assignment():
    """Issue 18: the Classroom route names its assignment (the grade step
    runs the grader through grader.classroom)."""
    from solutions.student_repo import classroom_workflow

    for assignment in assignments():
        workflow = classroom_workflow(get_assignment(assignment.id))
        grading = [line for line in workflow.splitlines()
                   if "grader.classroom grade ." in line]
        assert grading and all(f"--assignment {assignment.id} " in line
                               for line in grading), assignment.id


# --------------------------------------------------------------------------
# The working folder is never an import path of the grader's (issue 24,
# principles 1 and 8; docs/threat-model.md, "The working folder")

#: Module-level code of a file named like a module the grader imports:
#: it leaves a mark and stops the process that imports it.
SHADOW = ("from pathlib import Path\n"
          "Path(__file__).resolve().parents[{up}].joinpath("
          "'IMPORTED-{name}').write_text('ran in the importing process')\n"
          "raise SystemExit('{name} imported')\n")


def test_files_in_the_working_folder_never_run_in_the_grader(tmp_path):
    """``python -m`` imports from the folder it runs in before the
    standard library. A student's ``typing.py``, ``copy.py`` or package
    ``json/`` in the folder a grade or a batch runs from is not imported
    by the grader's own process: the example grades 9 as anywhere else,
    the batch grades every entry (those files too, in workers), and no
    mark is left."""
    here = tmp_path / "class"
    (here / "json").mkdir(parents=True)
    (here / "json" / "__init__.py").write_text(
        SHADOW.format(up=2, name="json"))
    for name in ("typing", "copy"):
        (here / f"{name}.py").write_text(SHADOW.format(up=1, name=name))
    _copy(EXAMPLE, here / "alice.py")
    env = _env(KIT)
    graded = subprocess.run(
        [sys.executable, "-m", "grader", "grade", "alice.py", "--format",
         "json"], cwd=here, env=env, capture_output=True, text=True,
        timeout=300)
    assert graded.returncode == 0, graded.stderr
    assert json.loads(graded.stdout)["score"] == 9
    out = tmp_path / "grades.csv"
    batch = subprocess.run(
        [sys.executable, "-m", "grader", "batch", ".", "--out", str(out),
         "--no-feedback", "--assignment", "multi_head_attention"],
        cwd=here, env=env, capture_output=True, text=True, timeout=300)
    # Exit 1: the folder ``json/`` holds no submission (an error row).
    assert batch.returncode == 1, batch.stderr
    rows = {row["student"]: row for row in
            csv.DictReader(out.open(encoding="utf-8"))}
    assert set(rows) == {"alice", "json", "typing", "copy"}
    assert float(rows["alice"]["score"]) == 9
    assert rows["typing"]["status"] == "graded"
    assert rows["json"]["status"] == "error"
    assert float(rows["typing"]["score"]) == 0
    assert not list(tmp_path.rglob("IMPORTED-*"))
