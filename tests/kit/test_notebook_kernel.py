"""Notebooks as IPython runs them, cell by cell (issue 24, principle 7).

Each code cell is its own compilation unit, as in a kernel: a
``__future__`` import at the top of a cell is valid there and stays in
force for later cells; a cell magic's body is a cell; a top-level
``await`` is valid (IPython's autoawait); what only the compiler refuses
(a ``__future__`` import below code) makes that cell define nothing, as
in the kernel, and the report says so. The variants of
``hostile/notebooks/`` are graded for real, item by item: an honest
notebook never loses a point to the way cells are joined.
"""
from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest
from in_process import grade_command

from grader.locate.cells import (KernelLine, as_linted, compile_cell,
                                 future_flags, load_notebook)

KIT = Path(__file__).resolve().parents[2]
NOTEBOOKS = KIT / "tests" / "kit" / "hostile" / "notebooks"
FULL = {"task1.init": 1.0, "task1.forward": 3.0, "task1.pep8": 0.0,
        "task1.shapes": 0.0, "task1.bonus": 1.0, "task2.scores": 3.0,
        "task2.causal": 1.0, "task2.output": 2.0, "task2.pep8": 0.0,
        "task2.shapes": 0.0}
TASK1_LOST = FULL | {"task1.init": 0.0, "task1.forward": 0.0,
                     "task1.bonus": 0.0}
# SelfAttention as the kernel leaves it when SCALED ends False: unscaled.
UNSCALED = FULL | {"task1.forward": 2.0, "task1.bonus": 0.0}
# The classes call log_softmax where softmax is meant.
LOG_SOFTMAX = {item: 0.0 for item in FULL} | {"task1.init": 1.0}
EXPECTED = {  # notebook -> (items, words of the text report)
    "future_top_of_cell": (FULL, ("flake8 finds nothing inside "
                                  "SelfAttention",)),
    "future_in_cell_magic": (FULL, ("flake8 finds nothing inside "
                                    "MultiHeadSelfAttention",)),
    "await_and_time": (FULL, ("every tensor statement in "
                              "MultiHeadSelfAttention.forward",)),
    # Red team 10, H1: a shell escape atop SelfAttention's cell and a line
    # magic atop MultiHeadSelfAttention's (before: E302 on each class,
    # both pep8 items -1).
    "magics_atop_classes": (FULL, ("flake8 finds nothing inside "
                                   "SelfAttention",
                                   "flake8 finds nothing inside "
                                   "MultiHeadSelfAttention")),
    # Red team C: a statement's effect is what IPython executes (N1, N2,
    # and the cell magics), a top-level raise ends its cell (N3), imports
    # stand in cell order like any binding (N4, N5).
    "line_magic_time_rebinds": (UNSCALED, ("no_scaling",)),
    "automagic_time_rebinds": (UNSCALED, ("no_scaling",)),
    "raise_ends_cell": (UNSCALED, ("no_scaling",)),
    "import_after_demo_honest": (FULL, ()),
    "import_after_alias_gain": (LOG_SOFTMAX, ()),
    "cell_time_rebinds": (UNSCALED, ("no_scaling",)),
    "script_cell_runs_nothing": (FULL, ()),
    "import_in_if_later": (FULL, ()),
    "timeit_binds_nothing": (FULL, ()),
    "prun_rebinds_then_raise": (UNSCALED, ("no_scaling",)),
    "automagic_unsure": (TASK1_LOST, (
        "is IPython's magic %time only while `time` is unbound",
        "SelfAttention is not graded (not earned)")),
    "future_below_code": (TASK1_LOST, (
        "SyntaxError: from __future__ imports must occur at the beginning "
        "of the file (the kernel runs nothing of that cell",)),
}


def _grade(path: Path, form: str) -> subprocess.CompletedProcess:
    """``grade --public-only``, by the command's main in this process
    (in_process.py)."""
    return grade_command(str(path), "--public-only", "--format", form)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_variant_is_graded_as_the_kernel_runs_it(name):
    """Exact items, no flag, no error; the report's words."""
    path = NOTEBOOKS / f"{name}.ipynb"
    items, words = EXPECTED[name]
    run = _grade(path, "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert {i["id"]: i["score"] for i in report["items"]} == items
    assert report["flags"] == [] and report["errors"] == []
    text = " ".join(_grade(path, "text").stdout.split())
    for said in words:
        assert said in text, said


def test_futures_stand_first_in_the_module_and_the_program():
    """The module the sandbox runs and the program flake8 lints both
    begin with the notebook's __future__ imports, each line still traced
    to its cell; the cells they came from keep the rest."""
    source = load_notebook(NOTEBOOKS / "future_in_cell_magic.ipynb")
    first = source.text.splitlines()[0]
    assert first == "from __future__ import annotations, division"
    assert source.lint.text.splitlines()[0] == first
    assert source.lint.where(1).startswith("cell 16, line 2")
    assert source.lint.text.count("from __future__") == 1
    assert source.cell_errors == ()


def test_a_top_level_await_is_no_cell_error_and_not_in_the_module():
    """The experiment is linted as the student wrote it; the module the
    sandbox runs leaves it out (it is no definition's need)."""
    source = load_notebook(NOTEBOOKS / "await_and_time.ipynb")
    assert source.cell_errors == ()
    assert "await asyncio.sleep(0)" in source.lint.text
    assert "await" not in source.text


def test_cells_compile_with_the_futures_in_force():
    """A feature imported by one cell changes how later cells compile
    (barry_as_FLUFL: '<>' is valid only after it), as in IPython."""
    tree = compile_cell("from __future__ import barry_as_FLUFL\n")
    flags = future_flags(tree)
    assert flags
    compile_cell("ok = 1 <> 2\n", flags)
    with pytest.raises(SyntaxError):
        compile_cell("ok = 1 <> 2\n")
    with pytest.raises(SyntaxError, match="beginning of the file"):
        compile_cell("x = 1\nfrom __future__ import annotations\n")


def test_flake8_reads_a_top_level_magic_as_a_comment():
    """A rewritten top-level expression (magic, shell escape, help) is a
    comment for flake8, as the student sees it; an indented one or an
    assignment stays a statement (a comment could empty a block or
    leave a name undefined); a line IPython did not rewrite is kept."""
    magic = "get_ipython().run_line_magic('matplotlib', 'inline')"
    assert as_linted(KernelLine(magic, 1, True)) == "# " + magic
    shell = "get_ipython().system('pip install -q torch')"
    assert as_linted(KernelLine(shell, 1, True)) == "# " + shell
    for kept in ("    " + magic, "files = get_ipython().getoutput('ls')"):
        assert as_linted(KernelLine(kept, 1, True)) == kept
    assert as_linted(KernelLine(magic, 1, False)) == magic


#: Red team C's notebooks: what the kernel leaves bound, as the module the
#: grader runs leaves it (checked against a real kernel by hand with
#: nbclient; the graded items above are the kernel's).
BOUND = {
    "line_magic_time_rebinds": ("SCALED", False),
    "automagic_time_rebinds": ("SCALED", False),
    "raise_ends_cell": ("SCALED", False),
    "cell_time_rebinds": ("SCALED", False),
    "script_cell_runs_nothing": ("SCALED", True),
    "timeit_binds_nothing": ("SCALED", True),
    "prun_rebinds_then_raise": ("SCALED", False),
}


@pytest.mark.parametrize("name", sorted(BOUND))
def test_the_module_leaves_what_the_kernel_leaves(name):
    """No cell error, no note; the module's flag is the kernel's."""
    source = load_notebook(NOTEBOOKS / f"{name}.ipynb")
    assert source.cell_errors == () and source.notes == ()
    flag, value = BOUND[name]
    tree = ast.parse(source.text)
    module = ast.Module([node for node in tree.body if not isinstance(
        node, (ast.Import, ast.ImportFrom, ast.ClassDef))], [])
    namespace: dict = {}
    exec(compile(module, "<module>", "exec"), namespace)
    assert namespace[flag] is value


def test_imports_stand_in_cell_order():
    """An import rebinds a name where its cell stands (N4, N5): the demo
    value before it is not what the classes read."""
    honest = load_notebook(NOTEBOOKS / "import_after_demo_honest.ipynb")
    assert "from torch import softmax" in honest.lines
    assert "softmax = torch.softmax(torch.randn(3), dim=0)" \
        not in honest.lines
    gain = load_notebook(NOTEBOOKS / "import_after_alias_gain.ipynb")
    assert "from torch import log_softmax as softmax" in gain.lines
    assert "softmax = torch.softmax" not in gain.lines
