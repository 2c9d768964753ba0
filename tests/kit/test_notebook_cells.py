"""Notebooks as the Jupyter kernel runs them (grader.locate.cells).

Cell magics whose body is Python in the notebook's namespace are graded,
others are not; line magics and shell escapes become what IPython makes of
them (IPython's own transformer, or the equivalent rule without it);
invalid text is refused in one line; flake8 judges the notebook as one
program and reports only what the student wrote.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from in_process import grade_command

import grader.locate.cells
from grader.judge.pep8 import attribute, run_flake8
from grader.locate.cells import _ipython_transformer, kernel_lines
from grader.locate.loading import load_notebook
from grader.locate.source import SourceError, find_class, node_span

KIT = Path(__file__).resolve().parents[2]
CONFIG = KIT / "grader" / "flake8.cfg"
IPYTHON = _ipython_transformer()
needs_ipython = pytest.mark.skipif(IPYTHON is None,
                                   reason="IPython is not installed")


def _lines(text: str, manager=IPYTHON) -> list[tuple[str, int, bool]] | None:
    lines = kernel_lines(text, manager)
    return None if lines is None else [(k.text, k.line, k.rewritten)
                                       for k in lines]


# --------------------------------------------------------------------------
# One cell


@pytest.mark.parametrize("magic", ["capture", "capture out", "time",
                                   "prun -q", "debug"])
def test_cell_magics_with_a_python_body_are_graded(magic: str) -> None:
    cell = f"\n%%{magic}\nclass A:\n    x = 1\n"
    assert _lines(cell) == [("class A:", 3, False), ("    x = 1", 4, False)]
    assert _lines(cell, None) == _lines(cell)


@pytest.mark.parametrize("magic", ["bash", "sh", "writefile a.py", "html",
                                   "javascript", "latex", "markdown",
                                   "timeit -n1", "python3", "script bash",
                                   "no_such_magic"])
def test_other_cell_magics_are_not_python_of_the_notebook(
        magic: str) -> None:
    assert _lines(f"%%{magic}\nclass A:\n    x = 1\n") is None


def test_nested_cell_magics_and_cleanup() -> None:
    cell = "%%time\n%%capture\n  >>> x = 1\n  >>> y = 2\n"
    assert _lines(cell) == [("x = 1", 3, False), ("y = 2", 4, False)]


EQUIVALENT = {
    "%matplotlib inline": "get_ipython().run_line_magic('matplotlib', "
                          "'inline')",
    "!pip install torch": "get_ipython().system('pip install torch')",
    "files = !ls -l": "files = get_ipython().getoutput('ls -l')",
    "out = !!ls": "out = get_ipython().getoutput('!ls')",
    "!!ls": "get_ipython().getoutput('ls')",
    "names = %who_ls": "names = get_ipython().run_line_magic('who_ls', '')",
    "SelfAttention?": "get_ipython().run_line_magic('pinfo', "
                      "'SelfAttention')",
    "    %time y = f(x)": "    get_ipython().run_line_magic('time', "
                          "'y = f(x)')",
}


@pytest.mark.parametrize("line", sorted(EQUIVALENT))
def test_line_magics_become_what_ipython_makes_of_them(line: str) -> None:
    cell = f"def f(x):\n{line}\n    return x\n" if line.startswith(" ") \
        else f"{line}\nx = 1\n"
    expected = EQUIVALENT[line]
    got = _lines(cell, None)
    assert (expected, 2 if line.startswith(" ") else 1, True) in got
    if IPYTHON is not None:
        assert _lines(cell) == got


@needs_ipython
def test_ipython_keeps_line_origins_when_it_joins_lines() -> None:
    cell = "def f():\n    !ls \\\n   -l\n    return 1\n"
    assert _lines(cell) == [("def f():", 1, False),
                            ("    get_ipython().system('ls     -l')", 2,
                             True),
                            ("    return 1", 4, False)]


@needs_ipython
def test_ipython_leaves_strings_alone() -> None:
    cell = "s = '''\n!not a command\n'''\n"
    assert _lines(cell) == [("s = '''", 1, False),
                            ("!not a command", 2, False),
                            ("'''", 3, False)]


def test_the_transform_budget_falls_back_to_the_rule(monkeypatch) -> None:
    monkeypatch.setattr(grader.locate.cells, "TRANSFORM_BUDGET", 10)
    cell = "%ls\nx = 1\n"
    assert _lines(cell) == _lines(cell, None)


# --------------------------------------------------------------------------
# Whole notebooks


def _notebook(path: Path, cells: list, **extra) -> Path:
    path.write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [cell if isinstance(cell, dict) else
                  {"cell_type": "code", "metadata": {}, "outputs": [],
                   "execution_count": None, "source": cell}
                  for cell in cells], **extra}), encoding="utf-8")
    return path


def _grade_cli(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "grade",
                           str(path), *args], cwd=KIT, capture_output=True,
                          text=True, timeout=300)


def test_the_notebook_module_takes_the_kernels_classes(
        tmp_path: Path) -> None:
    path = _notebook(tmp_path / "nb.ipynb", [
        "%matplotlib inline\nimport torch",
        "class A:\n    pass",
        "%%capture\nclass A:\n    x = 1",
        "%%bash\nclass A:\n    y = 2",
    ])
    source = load_notebook(path)
    assert "    x = 1" in source.lines and "    y = 2" not in source.lines
    assert source.where(source.lines.index("    x = 1") + 1) == \
        "cell 3, line 3"
    assert source.cell_errors == ()


def test_the_module_is_what_the_kernels_run_leaves_the_graded_names(
        tmp_path: Path) -> None:
    """Red team 14 (principle 7): a top-level block that may bind a name
    the graded code reads is kept whole, in cell order, and an earlier
    definition a later one reads (``class A(A):``) is kept before it;
    what binds nothing needed (prints, a training loop, an earlier value
    a plain assignment replaces) and what rebinds a graded name other
    than by a definition are left out. The module, run, gives the
    kernel's values."""
    path = _notebook(tmp_path / "nb.ipynb", [
        "import torch\nFAST = False\nSCALED = 0.5\nSTEPS = 3",
        "SCALED = True\nif not FAST:\n    SCALED = False\n"
        "else:\n    print('fast')",
        "class A:\n    def f(self):\n        return SCALED",
        "class A(A):\n    def g(self):\n        return DEVICE",
        "try:\n    DEVICE = NOT_BOUND\n"
        "except NameError:\n    DEVICE = 'cpu'",
        "for step in range(STEPS):\n    loss = step\nprint(loss)",
        "A = print\nA.extra = 1\nA().f()",
    ])
    source = load_notebook(path)
    assert "SCALED = 0.5" not in source.text    # replaced before it is read
    assert "    SCALED = False" in source.text  # the block that rebinds it
    assert source.text.count("class A(") == 1 and "class A:" in source.text
    assert source.text.index("class A:") < source.text.index("class A(A)")
    assert "except NameError:" in source.text
    for dropped in ("STEPS", "loss", "print(loss)", "A = ", "A.extra",
                    "A()"):
        assert dropped not in source.text, dropped
    assert source.where(source.lines.index("    SCALED = False") + 1) \
        == "cell 2, line 3"
    namespace: dict = {}
    exec(compile(source.text, "<module>", "exec"), namespace)
    made = namespace["A"]()
    assert made.f() is False and made.g() == "cpu"


INVALID = {
    "lone surrogate": (
        '{"cells": [{"cell_type": "code", "source": "x = \'\\ud800\'"}]}',
        "cell 1 is not valid text (a lone surrogate, \\ud800, at character "
        "5)"),
    "source not text": ('{"cells": [{"cell_type": "code", "source": 7}]}',
                        "cell 1's source is neither text nor a list of "
                        "lines"),
    "100,000 nested [": ("[" * 100_000 + "]" * 100_000,
                         "its JSON is nested too deeply"),
    "no cells": ('{"cells": 3}', "it has no list of cells"),
    "not JSON": ("{", "invalid JSON at line 1"),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_notebooks_are_refused_in_one_line(
        name: str, tmp_path: Path) -> None:
    text, words = INVALID[name]
    path = tmp_path / "bad.ipynb"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError) as caught:
        load_notebook(path)
    assert words in str(caught.value)
    completed = _grade_cli(path)
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1 and words in completed.stderr
    assert "Traceback" not in completed.stderr


def test_bad_bytes_and_size_caps_are_refused(tmp_path: Path,
                                             monkeypatch) -> None:
    path = tmp_path / "bytes.ipynb"
    path.write_bytes(b'{"cells": []}\xff')
    with pytest.raises(SourceError, match="is not UTF-8 text"):
        load_notebook(path)
    big = _notebook(tmp_path / "big.ipynb", ["x = 1\n" * 100])
    monkeypatch.setattr(grader.locate.cells, "MAX_SOURCE_BYTES", 500)
    with pytest.raises(SourceError, match="more than the grader's limit"):
        load_notebook(big)
    monkeypatch.setattr(grader.locate.cells, "MAX_NOTEBOOK_BYTES", 100)
    with pytest.raises(SourceError, match="larger than the grader's limit"):
        load_notebook(big)


def test_cells_python_cannot_compile_are_cell_errors(tmp_path: Path) -> None:
    path = _notebook(tmp_path / "nb.ipynb", [
        "import torch", "x = '\x00'", "y = " + "[" * 100_000,
        "def f(:\n    pass", "class A:\n    pass"])
    source = load_notebook(path)
    assert [error.split(":")[0] for error in source.cell_errors] == [
        "cell 2", "cell 3, line 1", "cell 4, line 1"]
    assert "null bytes" in source.cell_errors[0]
    assert "class A:" in source.lines
    completed = grade_command(  # in_process.py: a grade, no refusal
        str(path), "--assignment", "multi_head_attention", "--format",
        "json", "--public-only", unset=())
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["score"] == 0


# --------------------------------------------------------------------------
# flake8 on the notebook as one program


KIT_CELL = {"nbgrader": {"locked": True, "solution": False,
                         "grade": False, "grade_id": "setup"}}


def _cell(source: str, metadata: dict | None = None) -> dict:
    return {"cell_type": "code", "metadata": metadata or {}, "outputs": [],
            "execution_count": None, "source": source}


def test_flake8_judges_the_notebook_as_one_program(tmp_path: Path) -> None:
    path = _notebook(tmp_path / "nb.ipynb", [
        _cell("import os\nimport math\nimport torch.nn as nn\n"
              "import matplotlib.pyplot as plt\nunused=1", KIT_CELL),
        _cell("%matplotlib inline\n!echo a very long shell command that "
              "would be far too long as a line of Python code, twice over"),
        _cell("class A(nn.Module):\n    def f(self):\n"
              "        return math.pi"),
        _cell("import json\n\n\nclass A(nn.Module):\n"
              "    def f(self):\n        return json.dumps(1)"),
        _cell("plt.plot([1,2])\ndisplay(In[-1])\nget_ipython()"),
    ])
    source = load_notebook(path)
    findings = run_flake8(source, CONFIG)
    tree = source.parse()
    spans = {"A": node_span(find_class(tree, "A"), source.lines)}
    grouped = attribute(findings, spans)
    assert grouped["A"] == []
    # The kit's cell: F401 on os and E225 are the kit's, not the
    # student's; math, nn and plt are used in later cells. The magics,
    # the import in a later cell (E402) and the class redefined in a later
    # cell (F811) say nothing about the student's style.
    assert [(f.where, f.code) for f in grouped[None]] == [
        ("cell 5, line 1", "E231")]


def test_the_released_notebooks_give_no_flake8_notes() -> None:
    for notebook in sorted((KIT / "assignment").glob("*/*.ipynb")):
        source = load_notebook(notebook)
        findings = run_flake8(source, CONFIG)
        assert attribute(findings, {})[None] == [], notebook


# --------------------------------------------------------------------------
# What IPython executes (red team C)


@pytest.mark.parametrize("cell, flag", [
    ("%time SCALED = False", False),          # run in the namespace
    ("%prun -q -l 3 SCALED = False", False),  # likewise, options first
    ("time SCALED = False", False),           # automagic, one line
    ("if True:\n    %time SCALED = False", False),
    ("%timeit -n1 -r1 SCALED = False", True),  # a timing function's local
    ("%time SCALED = False; 1 / 0", False),   # %time shows its error
    ("raise RuntimeError('stop')\nSCALED = False", True),
    ("assert False\nSCALED = False", True),
    ("if X:\n    raise KeyError\nelse:\n    raise ValueError\n"
     "SCALED = False", True),
    ("try:\n    raise KeyError\nexcept KeyError:\n    pass\n"
     "SCALED = False", False),                # a try may swallow it
    ("%%script false\nSCALED = False", True),
])
def test_a_statement_does_what_ipython_executes(tmp_path: Path, cell: str,
                                                flag: bool) -> None:
    path = _notebook(tmp_path / "nb.ipynb", [
        "X = 0\nSCALED = True",
        "class A:\n    def f(self):\n        return SCALED", cell])
    source = load_notebook(path)
    assert source.cell_errors == () and source.notes == ()
    namespace: dict = {}
    exec(compile(source.text, "<module>", "exec"), namespace)
    assert namespace["A"]().f() is flag


def test_automagic_needs_the_name_unbound(tmp_path: Path) -> None:
    """``import time`` first: the line is Python (a cell error); bound
    only maybe: the grader cannot know, A is not earned, a note says so."""
    bound = load_notebook(_notebook(tmp_path / "a.ipynb", [
        "import time\nSCALED = True",
        "class A:\n    def f(self):\n        return SCALED",
        "time SCALED = False"]))
    assert bound.cell_errors[0].startswith("cell 3, line 1: SyntaxError")
    unsure = load_notebook(_notebook(tmp_path / "b.ipynb", [
        "SCALED = True\nif SCALED:\n    time = 1",
        "class A:\n    def f(self):\n        return SCALED",
        "class B:\n    pass",
        "time SCALED = False"]))
    assert "class A" not in unsure.text and "class B:" in unsure.text
    assert unsure.cell_errors == ()
    assert unsure.notes[0].startswith("cell 4, line 1: `time SCALED = "
                                      "False` is IPython's magic %time")


def test_imports_keep_their_place_among_the_cells(tmp_path: Path) -> None:
    source = load_notebook(_notebook(tmp_path / "nb.ipynb", [
        "import math\nf = 3",
        "from math import floor as f",
        "class A:\n    def g(self):\n        return f(2.5)"]))
    namespace: dict = {}
    exec(compile(source.text, "<module>", "exec"), namespace)
    assert namespace["A"]().g() == 2
