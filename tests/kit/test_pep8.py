"""Tests of the PEP-8 items (grader.judge.pep8): flake8 with the kit's
setup.cfg.

``shape_cases/pep8_style.py`` has findings at module level (reported, never
penalised) and inside each class; the reference solution has none once
nbgrader's markers are set aside; a notebook's findings point at its cells.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import grader.judge.pep8
from grader.judge.pep8 import (Flake8Error, Pep8Finding, attribute,
                               format_pep8, run_flake8)
from grader.locate.loading import load_notebook
from grader.locate.source import SourceFile, find_class, load_python, node_span

KIT = Path(__file__).resolve().parents[2]
CONFIG = KIT / "setup.cfg"
STYLE_CASE = Path(__file__).resolve().parent / "shape_cases" / "pep8_style.py"
REFERENCE = KIT / "solutions" / "modeling_attention.py"
CLASSES = ("SelfAttention", "MultiHeadSelfAttention")


def line_of(path: Path, snippet: str) -> int:
    """The line number of the one line of ``path`` that holds ``snippet``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [n for n, line in enumerate(lines, 1) if snippet in line]
    assert len(found) == 1, f"{snippet!r} is on lines {found} of {path.name}"
    return found[0]


def class_spans(source: SourceFile) -> dict[str, tuple[int, int]]:
    """The line span of each of the two classes present in ``source``."""
    tree = source.parse()
    return {name: node_span(find_class(tree, name)) for name in CLASSES
            if find_class(tree, name) is not None}


def codes(findings: list[Pep8Finding]) -> list[tuple[str, int]]:
    """The findings as (code, line)."""
    return [(finding.code, finding.line) for finding in findings]


def test_findings_inside_and_outside_the_classes() -> None:
    source = load_python(STYLE_CASE)
    findings = run_flake8(source, CONFIG)
    grouped = attribute(findings, class_spans(source))
    assert set(grouped) == {"SelfAttention", "MultiHeadSelfAttention", None}
    assert codes(grouped[None]) == [
        ("F401", line_of(STYLE_CASE, "import os")),
        ("E225", line_of(STYLE_CASE, "DEFAULT_HIDDEN=9")),
    ]
    assert codes(grouped["SelfAttention"]) == [
        ("E231", line_of(STYLE_CASE, "nn.Linear(input_size,hidden)")),
        ("E501", line_of(STYLE_CASE, "probs = torch.softmax(")),
    ]
    assert codes(grouped["MultiHeadSelfAttention"]) == [
        ("W291", line_of(STYLE_CASE, "self.att = SelfAttention(")),
    ]


def test_nbgrader_markers_are_not_style_findings() -> None:
    source = load_python(STYLE_CASE)
    assert "### BEGIN SOLUTION" in source.text
    assert all(finding.code != "E266"
               for finding in run_flake8(source, CONFIG))
    # A doubled '#' that is not an nbgrader marker is still reported.
    other = SourceFile(text="x = 1\n### my own banner\n",
                       path=Path("banner.py"))
    assert codes(run_flake8(other, CONFIG)) == [("E266", 2)]


def test_reference_solution_is_clean() -> None:
    source = load_python(REFERENCE)
    assert run_flake8(source, CONFIG) == []
    assert format_pep8([], source) == "PEP-8: flake8 found nothing."


def test_attribute_uses_inclusive_spans() -> None:
    findings = [Pep8Finding(line, 1, "E501", "line too long")
                for line in (9, 10, 20, 21, 30)]
    grouped = attribute(findings, {"A": (10, 20), "B": (21, 25)})
    assert [f.line for f in grouped["A"]] == [10, 20]
    assert [f.line for f in grouped["B"]] == [21]
    assert [f.line for f in grouped[None]] == [9, 30]
    assert attribute([], {"A": (1, 2)}) == {"A": [], None: []}


def test_notebook_findings_point_at_cell_and_line(tmp_path: Path) -> None:
    class_cell = "\n".join([
        "class SelfAttention(nn.Module):",
        "    def __init__(self, input_size, hidden):",
        "        super().__init__()",
        "        self.q = nn.Linear(input_size, hidden)",
        "        self.k = nn.Linear(input_size,hidden)",
        "        self.v = nn.Linear(input_size, hidden)",
    ])
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "# Homework"},
        {"cell_type": "code", "metadata": {}, "outputs": [],
         "execution_count": None,
         "source": ["import torch.nn as nn\n", "import os"]},
        {"cell_type": "markdown", "metadata": {}, "source": "Task 1"},
        {"cell_type": "code", "metadata": {}, "outputs": [],
         "execution_count": None, "source": class_cell},
        {"cell_type": "code", "metadata": {}, "outputs": [],
         "execution_count": None, "source": "model = SelfAttention(7,9)"},
    ]}
    path = tmp_path / "homework.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    source = load_notebook(path)
    findings = run_flake8(source, CONFIG)
    grouped = attribute(findings, class_spans(source))
    assert [f.code for f in grouped["SelfAttention"]] == ["E231"]
    # The test cell is linted too (the notebook is one program), and it is
    # the student's: its finding is reported, never penalised.
    assert [f.code for f in grouped[None]] == ["F401", "E231"]
    report = format_pep8(findings, source)
    assert report.splitlines() == [
        "PEP-8: flake8 found 3 problems:",
        "  cell 2, line 2, column 1: F401 'os' imported but unused",
        "  cell 4, line 5, column 38: E231 missing whitespace after ','",
        "  cell 5, line 1, column 24: E231 missing whitespace after ','",
    ]


def test_flake8_failure_raises(tmp_path: Path) -> None:
    source = load_python(STYLE_CASE)
    with pytest.raises(Flake8Error,
                       match="flake8 failed.*config file does not exist"):
        run_flake8(source, tmp_path / "missing.cfg")


def test_flake8_timeout_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grader.judge.pep8, "FLAKE8_TIMEOUT", 0.001)
    with pytest.raises(Flake8Error, match="did not finish"):
        run_flake8(load_python(STYLE_CASE), CONFIG)


def test_noqa_hides_nothing() -> None:
    """flake8 runs with --disable-noqa: neither a line's nor the file's
    noqa comment hides a finding."""
    for text in ("x=1  # noqa\n", "# flake8: noqa\nx=1\n",
                 "x=1  # noqa: E225\n", "x=1  # NOQA:E225,E501\n"):
        source = SourceFile(text=text, path=Path("noqa.py"))
        assert [f.code for f in run_flake8(source, CONFIG)] == ["E225"]


def test_code_flake8_cannot_check_costs_the_pep8_point() -> None:
    """A 600-term sum makes pyflakes give up: flake8 checks nothing, and
    the item says so and costs its point."""
    from grader.analyse.static import analyse
    from grader.judge.scoring import score_pep8_item
    from grader.rubric import get_assignment

    text = REFERENCE.read_text() + "\nX = " + " + ".join(["1"] * 600) + "\n"
    source = SourceFile(text=text, path=Path("sum.py"))
    with pytest.raises(Flake8Error, match=r'flake8 failed: "pyflakes\[F\]" '
                                          r'failed during execution due to '
                                          r'RecursionError'):
        run_flake8(source, CONFIG)
    assignment = get_assignment("multi_head_attention")
    task = assignment.tasks[0]
    item = assignment.item("task1.pep8")
    report = score_pep8_item(item, analyse(assignment, task, source),
                             "flake8 failed: it crashed")
    assert (report.score, report.passed) == (-1.0, False)
    assert report.message == (
        "flake8 could not check the code (flake8 failed: it crashed), so "
        "SelfAttention cannot be shown to be PEP-8 clean: code flake8 "
        "cannot check counts as not clean.")


@pytest.mark.parametrize("limit", [1000, 3000])
def test_a_fork_lints_as_a_new_interpreter_whatever_the_limit(
        limit: int) -> None:
    """A lint forked from a process whose recursion limit was raised
    (importing IPython's completer, jedi, sets 3000) gives up on the
    600-term sum as a new interpreter does, and passes a 300-term one
    alike: routes that fork (a batch's judges, the suite's own gradings)
    and routes that start an interpreter grade a file alike."""
    import sys

    from grader.judge.pep8 import warm_up

    warm_up(CONFIG)
    texts = {terms: REFERENCE.read_text() + "\nX = " +
             " + ".join(["1"] * terms) + "\n" for terms in (300, 600)}
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        for fork in (True, False):
            with pytest.raises(Flake8Error, match="RecursionError"):
                run_flake8(SourceFile(text=texts[600], path=Path("sum.py")),
                           CONFIG, fork=fork)
        found = [codes(run_flake8(SourceFile(text=texts[300],
                                             path=Path("sum.py")),
                                  CONFIG, fork=fork))
                 for fork in (True, False)]
    finally:
        sys.setrecursionlimit(before)
    assert found[0] == found[1]
    assert {code for code, _ in found[0]} == {"E305", "E501"}


def test_flake8_has_a_memory_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grader.judge.pep8, "FLAKE8_MEMORY_MB", 16)
    with pytest.raises(Flake8Error, match="flake8 failed"):
        run_flake8(load_python(STYLE_CASE), CONFIG)
