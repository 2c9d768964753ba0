"""The warm-up on code shaped like real learners' (issue 16), item by item.

Every file in ``submissions/learners/`` is a complete submission of the
warm-up (``attention_basics``) written the way public learners'
repositories of "Build a Large Language Model (From Scratch)", chapter 3,
are written: notebooks exported to ``.py`` (nbconvert, jupytext) or handed
in as notebooks, module-level demos and prints, training code below the
classes, ``import tiktoken``, a data file read at module level, helpers in
files that were not handed in, leftover notebook lines that use names of a
deleted cell, the book's own names and comments (``# Shape: (b,
num_tokens, d_out)``), and names of the learner's own. Each file's header
comment says what it is and what it earns. The table gives the score of
every item that does not earn full marks and the total; further tests pin
what the report says (the skipped statements and why, the pointer to a
near-miss name, the reason a graded class fails) and the issue's "done
when": a correct file with ``import tiktoken`` and a data-file ``open``
earns its full correctness points, and the book's chapter 3 classes keep
at least half of every task's points.

Graded in-process with the ``grade_path`` fixture, each file once, half of
them in a forked copy of this process.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.output.report import Report
from grader.rubric import get_assignment

LEARNERS = Path(__file__).resolve().parent / "submissions" / "learners"
ASSIGNMENT = get_assignment("attention_basics")
FULL = {item.id: item.points if item.kind == "checks" else 0.0
        for item in ASSIGNMENT.items}
TIKTOKEN_HERE = importlib.util.find_spec("tiktoken") is not None


@dataclass(frozen=True)
class Expected:
    """What a learner's file earns: the items that differ from full
    marks, and the total."""

    total: float
    changes: dict[str, float] = field(default_factory=dict)
    why: str = ""

    @property
    def scores(self) -> dict[str, float]:
        """Item id -> expected score."""
        return {**FULL, **self.changes}


def zero(*tasks: str) -> dict[str, float]:
    """Every correctness item of ``tasks`` at 0."""
    return {i.id: 0.0 for i in ASSIGNMENT.items
            if i.task in tasks and i.kind == "checks"}


CORPUS: dict[str, Expected] = {
    "ch03_tiktoken_data_file.py": Expected(
        10, why="the issue's first 'done when': tiktoken, a data file and "
                "training code at module level are not run; every class "
                "is correct, with complete comments in the book's "
                "notation"),
    "ch03_notebook_tiktoken.ipynb": Expected(
        10, why="the notebook loader keeps every import; tiktoken is left "
                "out when the module it builds cannot be loaded"),
    "book_chapter3_nbconvert.py": Expected(
        5, {**zero("task1", "task7"), "task4.pep8": -0.5,
            "task4.shapes": -0.5, "task6.pep8": -0.5,
            "task6.shapes": -0.5},
        why="the book has no simple_self_attention and no "
            "QKVMultiheadAttention; its style faults cost half of "
            "CausalAttention and of MultiHeadAttention, never more"),
    "leftover_notebook_lines.py": Expected(
        9.5, {"task4.pep8": -0.5},
        why="loading stops at d_in, a name of a deleted cell; the first "
            "CausalAttention is replaced by the second (flake8's F811 on "
            "the redefinition is inside the graded class: a .py file is "
            "one program)"),
    "local_modules_missing.py": Expected(
        5, {**zero("task4", "task5", "task7")},
        why="CausalAttention's base class and QKVMultiheadAttention's "
            "helper live in files that were not handed in"),
    "near_miss_names.py": Expected(
        4, zero("task2", "task4", "task5", "task6"),
        why="the contract's names are fixed: four classes are named the "
            "learner's way"),
    "percent_cells_relative_import.py": Expected(
        9, {"task4.pep8": -0.5, "task6.shapes": -0.5},
        why="a relative import cannot load when the file is graded on "
            "its own; a long line and an unknown dimension name (T)"),
    "old_torch_import.py": Expected(
        0, {**zero(*(t.id for t in ASSIGNMENT.tasks))},
        why="torch._six is kept (torch is installed): without its "
            "module-level code the file still cannot load, so it is "
            "graded as it is"),
}


# --------------------------------------------------------------------------
# Grading, once per file, in two processes


def _grade_all(grade_path: Callable, names: list[str]) -> dict[str, object]:
    theirs, mine = names[1::2], names[0::2]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            found: dict[str, object] = {}
            for name in theirs:
                try:
                    found[name] = grade_path(LEARNERS / name)
                except Exception as exc:  # reported by the test
                    found[name] = f"{type(exc).__name__}: {exc}"
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump(found, pipe)
        finally:
            os._exit(0)
    os.close(write_fd)
    results: dict[str, object] = {}
    try:
        for name in mine:
            results[name] = grade_path(LEARNERS / name)
    finally:
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
    if data:
        results.update(pickle.loads(data))
    return results


@pytest.fixture(scope="module")
def graded(grade_path) -> Callable[[str], Report]:
    """The report of a learner's file (graded once for the module)."""
    cache = _grade_all(grade_path, sorted(CORPUS))

    def get(name: str) -> Report:
        report = cache[name]
        if isinstance(report, str):
            pytest.fail(f"grading {name} raised {report}")
        return report
    return get


def describe(report: Report) -> str:
    """Every item's score and message, and the notes, for a failure."""
    return "\n".join([f"{i.id}: {i.score:g} {i.message[:300]}"
                      for i in report.items] + report.notes)


def note(report: Report, starting: str) -> str:
    """The report's note that starts with ``starting``."""
    found = [n for n in report.notes if n.startswith(starting)]
    assert len(found) == 1, report.notes
    return found[0]


# --------------------------------------------------------------------------
# The table


def test_corpus_covers_every_learner_file() -> None:
    """Every file in submissions/learners/ has a row, every row a file."""
    assert {p.name for p in LEARNERS.iterdir() if p.is_file()} == set(
        CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_learner_scores(graded, name: str) -> None:
    """Every item's score and the total, as the table says."""
    expected = CORPUS[name]
    report = graded(name)
    assert report.assignment == "attention_basics"
    assert report.scores() == pytest.approx(expected.scores), (
        f"expected because: {expected.why}\n" + describe(report))
    assert report.score == expected.total, describe(report)


# --------------------------------------------------------------------------
# Issue 16, "done when"


def test_tiktoken_and_a_data_file_keep_every_correctness_point(
        graded) -> None:
    """A correct file with ``import tiktoken`` and a data-file ``open`` at
    module level earns every correctness point; the skips are reported,
    one line each, and the statements after the import (the download, the
    training loop) were never run."""
    report = graded("ch03_tiktoken_data_file.py")
    for item in report.items:
        if item.max_score > 0:
            assert item.score == item.max_score, describe(report)
    text = note(report, '"ch03_tiktoken_data_file.py" could not be '
                        'loaded as it is')
    lines = text.split("\n")
    if not TIKTOKEN_HERE:
        assert ("ModuleNotFoundError: \"No module named 'tiktoken'\" (at "
                "line 11: `import tiktoken`)") in lines[0]
        assert ("  - line 11: `import tiktoken` skipped: not installed "
                "here; nothing graded uses it") in lines
    assert ('  - line 24: `with open(file_path, "r", encoding="utf-8") as '
            'f: ...` skipped: module-level code (not a definition, nor a '
            'value one reads)') in lines
    assert any(line.startswith("  - line 295: `for epoch in range(2): "
                               "...` skipped") for line in lines)
    # Nothing it printed at module level reached the graded run.
    assert not any("Total number of characters" in t.output or "epoch"
                   in t.output for t in report.tasks)
    assert report.errors == []


def test_the_books_classes_keep_half_of_every_task(graded) -> None:
    """Chapter 3's classes with the book's comments: each task the book
    has keeps at least half its points; its `# Shape: (b, num_tokens,
    d_out)` comment is understood."""
    report = graded("book_chapter3_nbconvert.py")
    book = {"task2", "task3", "task4", "task5", "task6"}
    for task in report.tasks:
        if task.id in book:
            assert task.score >= task.max_score / 2, describe(report)
    details = report.item("task6.shapes").details
    assert "keys = self.W_key(x)" not in details   # its Shape: comment
    assert "queries = self.W_query(x)" in details  # no comment at all


# --------------------------------------------------------------------------
# What the reports say


def test_a_skipped_import_a_graded_class_needs_is_its_reason(graded) -> None:
    """A graded class that needs what was skipped fails, and its items say
    which statement was skipped and why; so do the skip lines."""
    report = graded("local_modules_missing.py")
    qkv = report.item("task7.values").message
    assert ("NameError: \"name 'scaled_dot_product' is not defined\"" in qkv
            and "(`scaled_dot_product` was not loaded: line 21, `from "
                "attention_helpers import scaled_dot_product`, skipped: "
                "not installed here)" in qkv), qkv
    causal = report.item("task4.causal").message
    assert ("`CausalAttention` was not loaded: line 76, `class "
            "CausalAttention(AttentionBase): ...`, skipped: its definition "
            "reads `AttentionBase`, which is not installed here") in causal
    lines = note(report, '"local_modules_missing.py" could not be '
                         'loaded as it is').split("\n")
    assert ("  - line 22: `from common import AttentionBase` skipped: not "
            "installed here; `CausalAttention` and "
            "`MultiHeadAttentionWrapper` use it, so they fail without it"
            ) in lines
    assert ("  - line 21: `from attention_helpers import scaled_dot_product`"
            " skipped: not installed here; `QKVMultiheadAttention` uses it,"
            " so it fails without it") in lines
    assert 'NameError: "name \'get_ipython\' is not defined"' in lines[0]


@pytest.mark.parametrize("task,found,asked", [
    ("task2", "found `SelfAttentionV1` at line 20", "`SelfAttention_v1`"),
    ("task4", "found `CausalSelfAttention` at line 46", "`CausalAttention`"),
    ("task5", "found `MultiheadAttentionWrapper` at line 69",
     "`MultiHeadAttentionWrapper`"),
    ("task6", "found `MultiHeadAttention` at line 84, inside "
              "`build_attention_layers`",
     "`MultiHeadAttention` at the top level of the file"),
])
def test_near_miss_names_point_at_the_class_meant(
        graded, task: str, found: str, asked: str) -> None:
    """Every item of a task whose class is missing names the definition
    that was most likely meant; the score stays 0."""
    report = graded("near_miss_names.py")
    for item in report.items:
        if item.task == task:
            assert f"{found}; the assignment asks for {asked}" in \
                item.message, item.message
            assert item.score == 0


def test_the_last_definition_is_graded_and_the_values_it_reads(
        graded) -> None:
    """The earlier CausalAttention (mask on the diagonal) is skipped as
    redefined; MASK_VALUE and DTYPE, which the classes read, are loaded,
    and the leftover demo lines are not."""
    report = graded("leftover_notebook_lines.py")
    lines = note(report, '"leftover_notebook_lines.py" could not be '
                         'loaded as it is').split("\n")
    assert ("  - line 78: `class CausalAttention(nn.Module): ...` skipped: "
            "redefined at line 101 (the last definition is graded)") in lines
    assert not any("MASK_VALUE" in line or "DTYPE" in line
                   or "DEFAULTS" in line for line in lines)
    assert any(line.startswith("  - line 49: `sa_v1 = SelfAttention_v1("
                               "d_in, d_out)` skipped") for line in lines)


def test_a_file_that_cannot_load_either_way_is_graded_as_it_is(
        graded) -> None:
    """Without its module-level code the file still fails (an import of
    torch that torch no longer has): the first error stands, and the note
    says both."""
    report = graded("old_torch_import.py")
    assert report.errors == ['The submission could not be loaded: '
                             'ModuleNotFoundError: "No module named '
                             '\'tiktoken\'" (at line 11: `import '
                             'tiktoken`).'] or TIKTOKEN_HERE
    text = note(report, '"old_torch_import.py" could not be loaded as '
                        'it is')
    assert ("without its module-level code it could not be loaded either "
            "(ModuleNotFoundError: \"No module named 'torch._six'\" (at "
            "line 14: `from torch._six import inf`)), so it is graded as "
            "it is.") in text


def test_notebook_skips_name_their_cells(graded) -> None:
    """In a notebook, a skipped import is named by its cell and line."""
    report = graded("ch03_notebook_tiktoken.ipynb")
    if TIKTOKEN_HERE:
        pytest.skip("tiktoken is installed here: nothing to skip")
    lines = note(report, '"ch03_notebook_tiktoken.ipynb" could not be '
                         "loaded as it is").split("\n")
    assert lines[1:] == ["  - cell 3, line 1: `import tiktoken` skipped: "
                         "not installed here; nothing graded uses it"]


def test_a_relative_import_is_skipped_and_says_why(graded) -> None:
    """A relative import cannot load in a file graded on its own; the
    `__main__` block is module-level code, never run."""
    lines = note(graded("percent_cells_relative_import.py"),
                 '"percent_cells_relative_import.py" could not be loaded '
                 "as it is").split("\n")
    assert lines[1:] == [
        "  - line 27: `from .plotting import show_weights` skipped: a "
        "relative import (the file is graded on its own); nothing graded "
        "uses it",
        "  - line 195: `if __name__ == \"__main__\": ...` skipped: "
        "module-level code (not a definition, nor a value one reads)"]


def test_the_homework_is_graded_on_what_can_load_too(
        grade_path, tmp_path: Path) -> None:
    """The rule is the grader's, not the warm-up's: the homework's
    reference with a module it cannot import and a data file read at
    module level still earns its 11 points, and the note says why."""
    solution = Path(__file__).resolve().parents[2] / "solutions" / \
        "modeling_attention.py"
    text = solution.read_text(encoding="utf-8")
    head = "import torch\n"
    assert head in text
    text = text.replace(head, head + "from previous_chapters import "
                                     "GPTModel\n\nCORPUS = open('train.txt')"
                                     ".read()\n", 1)
    path = tmp_path / "modeling_attention.py"
    path.write_text(text, encoding="utf-8")
    report = grade_path(path, public_only=True)
    assert report.assignment == "multi_head_attention"
    assert report.score == 11, describe(report)
    lines = note(report, '"modeling_attention.py" could not be loaded as '
                         "it is").split("\n")
    assert any("`from previous_chapters import GPTModel` skipped: not "
               "installed here; nothing graded uses it" in line
               for line in lines), lines
    assert any("`CORPUS = open('train.txt').read()` skipped: module-level "
               "code" in line for line in lines), lines
