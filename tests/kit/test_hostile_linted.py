"""What is linted is what runs, and penalties cannot be dodged.

The corpus in ``hostile/linted/`` is one sloppy submission (``sloppy.py``:
correct values, no shape comments, PEP-8 findings in both classes; it
honestly earns 6) and, in every other file, the same code plus one way of
dodging the pep8 or shapes penalties: ``noqa`` comments, a sum pyflakes
cannot check, a forward that refuses zeros or the shape-check sizes, code
outside the YOUR CODE markers, a fake marker in a string, characters on
which ``str.splitlines`` and Python disagree, coding cookies. Each file's
docstring says what it does. Notebooks built here add cell magics
(``%%capture`` and ``%%time`` bodies are graded, ``%%bash`` and
``%%timeit`` bodies are not) and line magics.

Every case is graded for real and must earn exactly what its honest code
earns, item by item, with reports that say why. The kit's main hostile
corpus (``test_hostile.py``) covers the sandbox.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
CORPUS_DIR = Path(__file__).resolve().parent / "hostile" / "linted"
REFERENCE = KIT / "solutions" / "modeling_attention.py"
ITEMS = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes")
# The sloppy baseline, item by item (ITEMS order): 2 + 4 = 6.
SLOPPY = (1, 3, -1, -1, 0, 3, 1, 2, -1, -1)
BOUND_SECONDS = 60.0


@dataclass(frozen=True)
class Expected:
    """What a case earns and what its report must say."""

    scores: tuple[float, ...] = SLOPPY
    says: tuple[str, ...] = ()      # in the items' messages and details

    @property
    def total(self) -> float:
        """Clamped task totals plus bonus, as the rubric adds them."""
        task1 = max(sum(self.scores[:4]), 0) + self.scores[4]
        return task1 + max(sum(self.scores[5:]), 0)


PEP8_BOTH = ("flake8 reports 2 finding(s) inside SelfAttention",
             "flake8 reports 5 finding(s) inside MultiHeadSelfAttention")
UNLOCATED = ("SelfAttention earned points, but no `class SelfAttention` "
             "statement stands at the top level of the file")
CORPUS: dict[str, Expected] = {
    "sloppy": Expected(says=PEP8_BOTH),
    "noqa_file": Expected(says=PEP8_BOTH),
    "noqa_lines": Expected(says=PEP8_BOTH + (
        "the comment has no bracketed shape",)),
    "pyflakes_crash": Expected(says=(
        "flake8 could not check the code (flake8 failed: \"pyflakes[F]\" "
        "failed during execution due to RecursionError",
        "code flake8 cannot check counts as not clean")),
    "refuses_zeros": Expected(says=("this statement produces a tensor but "
                                    "has no shape comment",)),
    "zeros_early_return": Expected(says=("q = self.q(x)\n  this statement "
                                         "produces a tensor",)),
    # It refuses the shape checks at the sizes it can recognise; the
    # secret size set (issue 24, principle 6) is not one of them, so its
    # wrong comments are judged there.
    "refuses_shape_checks": Expected(says=(
        "6 statement(s) in SelfAttention.forward have a missing or wrong "
        "shape comment",
        "size set 3: claimed [7, 12, 10], real [7, 12, 38]")),
    "outside_markers": Expected(says=(
        "line 29: missing shape comment\n    q = self.q(x)",
        "line 67: missing shape comment\n    k = self.k(x)")),
    "between_markers": Expected(says=(
        "3 statement(s) in SelfAttention.forward have a missing",
        "2 statement(s) in MultiHeadSelfAttention.forward have a missing",
        "scores = q @ k.transpose(1, 2) / self.scale\n  this statement")),
    "marker_in_string": Expected(says=("q = self.q(x)\n  this statement "
                                       "produces a tensor",)),
    "line_shift": Expected(says=(
        "line 33: missing shape comment\n    q = self.q(x)",
        "line 70: missing shape comment\n    k = self.k(x)",
        "line 24, column 15: E225")),
    "cr_line_ends": Expected(says=PEP8_BOTH),
    # No `class SelfAttention` statement, yet the class earns points
    # (red team 15): its penalty items cannot be shown clean.
    "class_alias": Expected(says=(UNLOCATED,)),
    "class_from_factory": Expected(says=(
        UNLOCATED, "ok; found `SelfAttention` at line")),
    "class_by_type": Expected(says=(UNLOCATED,)),
    "latin1_cookie": Expected(says=PEP8_BOTH + (
        "line 30: missing shape comment\n    q = self.q(x)",)),
    "unicode_escape_cookie": Expected(says=(
        "line 64: missing shape comment\n    probs = torch.softmax(",
        "line 65, column 14: E225 missing whitespace around operator",
        "line 195, column 12: E225 missing whitespace around operator")),
}


def _report_text(report) -> str:
    return "\n".join(f"{item.message}\n{item.details}"
                     for item in report.items)


def _check(report, expected: Expected, elapsed: float) -> None:
    scores = tuple(report.scores()[item] for item in ITEMS)
    assert scores == expected.scores, _report_text(report)
    assert report.score == expected.total
    assert elapsed < BOUND_SECONDS
    text = _report_text(report)
    for words in expected.says:
        assert words in text, f"{words!r} not in the report:\n{text}"
    assert not any("untouched stub" in p for t in report.tasks
                   for p in t.problems + t.notes)


def test_the_corpus_table_lists_every_file() -> None:
    """No case is left ungraded; each says what it does and earns."""
    files = sorted(p.stem for p in CORPUS_DIR.glob("*.py"))
    assert files == sorted(CORPUS)
    for path in CORPUS_DIR.glob("*.py"):
        head = path.read_bytes()[:400]
        assert b'"""' in head and b"Expected" in path.read_bytes()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_linted_case(name: str, grade_path) -> None:
    """Exact item scores and the reasons, in bounded time."""
    started = time.monotonic()
    report = grade_path(CORPUS_DIR / f"{name}.py", timeout=5.0,
                        memory_mb=1024)
    _check(report, CORPUS[name], time.monotonic() - started)


# --------------------------------------------------------------------------
# Notebooks as the kernel runs them


def _classes(path: Path) -> str:
    """The classes of a file (imports and docstring left out)."""
    text = path.read_text(encoding="utf-8")
    lines = [line for line in text[text.index("\nclass ") + 1:].split("\n")
             if "### BEGIN SOLUTION" not in line
             and "### END SOLUTION" not in line]
    return "\n".join(lines).rstrip() + "\n"


SLOPPY_CLASSES = _classes(CORPUS_DIR / "sloppy.py")
CLEAN_CLASSES = _classes(REFERENCE)
IMPORTS = "import torch\nimport torch.nn as nn\n"

NOTEBOOKS: dict[str, tuple[list[str], Expected]] = {
    # The kernel runs the %%capture body: its classes replace the clean
    # ones defined before.
    "capture_over_clean": ([IMPORTS, CLEAN_CLASSES,
                            "%%capture output\n" + SLOPPY_CLASSES],
                           Expected(says=PEP8_BOTH)),
    "time_over_clean": ([IMPORTS, CLEAN_CLASSES,
                         "\n%%time\n" + SLOPPY_CLASSES],
                        Expected(says=PEP8_BOTH)),
    # %%bash, %%writefile and %%timeit bodies define nothing in the
    # notebook: the sloppy classes are the ones that run.
    "bash_decoy": ([IMPORTS, SLOPPY_CLASSES,
                    "%%bash\ncat > /dev/null <<'EOF'\n" + CLEAN_CLASSES
                    + "EOF\n"], Expected(says=PEP8_BOTH)),
    "writefile_decoy": ([IMPORTS, SLOPPY_CLASSES,
                         "%%writefile clean.py\n" + IMPORTS
                         + CLEAN_CLASSES], Expected(says=PEP8_BOTH)),
    "timeit_decoy": ([IMPORTS, SLOPPY_CLASSES,
                      "%%timeit -n1\n" + CLEAN_CLASSES],
                     Expected(says=PEP8_BOTH)),
    # Line magics and shell escapes are what IPython makes of them.
    "line_magics": (["%matplotlib inline\n!echo setting up\n" + IMPORTS,
                     SLOPPY_CLASSES,
                     "files = !ls\n%time model = SelfAttention(7, 9)\n"
                     "SelfAttention?\n"], Expected(says=PEP8_BOTH)),
}


def _notebook(cells: list[str], path: Path) -> Path:
    path.write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                   "execution_count": None, "source": cell}
                  for cell in cells]}), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_linted_notebook(name: str, grade_path, tmp_path: Path) -> None:
    """Cell magics are run (or not) as the kernel runs them."""
    cells, expected = NOTEBOOKS[name]
    path = _notebook(cells, tmp_path / f"{name}.ipynb")
    started = time.monotonic()
    report = grade_path(path, timeout=5.0, memory_mb=1024,
                        assignment="multi_head_attention")
    _check(report, expected, time.monotonic() - started)
    notes = "\n".join(report.notes)
    assert "get_ipython" not in notes
    assert report.errors == []
