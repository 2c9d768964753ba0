"""Notebooks as IPython runs them, cell by cell (issue 24, principle 7).

Each code cell is read as a kernel reads it: parsed whole, then
compiled and run one top-level statement at a time, so a ``__future__``
import is valid anywhere at a cell's top level and stays in force after
it; a cell magic's body is a cell; a top-level ``await`` is valid
(IPython's autoawait); what only the compiler refuses (``return``
outside a function) stops the cell after the statements above it, and
the report says so. The variants of ``hostile/notebooks/`` are graded
for real, item by item: an honest notebook never loses a point to the
way cells are joined. Those whose run turns on IPython's own rules also
run in a real kernel, and the grader's items must be what the classes
the kernel leaves bound earn.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest
from in_process import grade_command

from grader.locate.cells import (KernelLine, as_linted, compile_cell,
                                 compiled_nodes, future_flags,
                                 load_notebook, parse_cell)

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
    # IPython compiles a cell one statement at a time: a __future__
    # import below the class is valid (checked in a real kernel below).
    "future_below_code": (FULL, ("flake8 finds nothing inside "
                                 "SelfAttention",)),
    "compile_stops_cell": (UNSCALED, (
        "SyntaxError: 'return' outside function (the kernel runs the "
        "statements above it, then stops the cell", "no_scaling")),
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
    (barry_as_FLUFL: '<>' is valid only after it), as in IPython; a cell
    compiles one statement at a time, so a __future__ import below code
    is valid and in force from the next statement, and a statement the
    compiler refuses stops the cell after those above it."""
    tree = compile_cell("from __future__ import barry_as_FLUFL\n")
    flags = future_flags(tree)
    assert flags
    compile_cell("ok = 1 <> 2\n", flags)
    with pytest.raises(SyntaxError):
        compile_cell("ok = 1 <> 2\n")
    late = parse_cell("x = 1\nfrom __future__ import barry_as_FLUFL\n")
    assert compiled_nodes(late) == (2, None, flags)
    with pytest.raises(SyntaxError, match="beginning of the file"):
        compile_cell("x = 1\nfrom __future__ import annotations\n")
    count, refused, _ = compiled_nodes(parse_cell(
        "a = 1\nreturn\nb = 2\n"))
    assert count == 1 and "'return' outside function" in refused.msg
    count, refused, _ = compiled_nodes(parse_cell(
        "if True:\n    from __future__ import annotations\n"))
    assert count == 0 and "beginning of the file" in refused.msg


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
    "compile_stops_cell": ("SCALED", False),
}


@pytest.mark.parametrize("name", sorted(BOUND))
def test_the_module_leaves_what_the_kernel_leaves(name):
    """No note, no cell error but a statement that stops its cell; the
    module's flag is the kernel's."""
    source = load_notebook(NOTEBOOKS / f"{name}.ipynb")
    assert source.notes == ()
    assert all("then stops the cell" in error
               for error in source.cell_errors), source.cell_errors
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


#: Appended to a notebook run in a real kernel: what the classes it left
#: bound compute on the public values, against a reference written here
#: (scaled, unscaled), and the flag BOUND names; one JSON line.
PROBE = '''
import json as _json
import torch as _torch
from transformer_lm.test_values import (
    MultiHeadAttentionTestValues as _MV, SelfAttentionTestValues as _SV)


def _verdict(make, values, heads=None):
    try:
        model = make()
        for name in ("q", "k", "v", "mix")[:4 if heads else 3]:
            getattr(model, name).weight.data = getattr(values,
                                                       name + "_weight")
            getattr(model, name).bias.data = getattr(values, name + "_bias")
        with _torch.no_grad():
            out = model(values.x, return_attention=True) if heads \\
                else model(values.x)
    except Exception:
        return "raises"
    x = values.x.double()
    q, k, v = (_torch.nn.functional.linear(
        x, getattr(values, n + "_weight").double(),
        getattr(values, n + "_bias").double()) for n in "qkv")
    if heads:
        d = q.shape[-1] // heads

        def split(t):
            return t.unflatten(-1, (heads, d)).transpose(1, 2).flatten(0, 1)
        scores = split(q) @ split(k).transpose(1, 2) / d ** 0.5
        want = _torch.softmax(scores, -1)
        got = out[1]
        return "right" if got.shape == want.shape and _torch.allclose(
            got.double(), want, atol=1e-5) else "other"
    scores = q @ k.transpose(1, 2)
    for label, scale in (("right", q.shape[-1] ** 0.5), ("unscaled", 1.0)):
        want = _torch.softmax(scores / scale, -1) @ v
        if out.shape == want.shape and _torch.allclose(out.double(), want,
                                                       atol=1e-5):
            return label
    return "other"


print(_json.dumps({
    "task1": _verdict(lambda: SelfAttention(7, 9), _SV),
    "task2": _verdict(lambda: MultiHeadSelfAttention(7, 9, 3), _MV, 3),
    "SCALED": globals().get("SCALED")}))
'''
#: What each verdict of the kernel is worth in the grader's items.
WORTH = {"task1.forward": {"right": 3.0, "unscaled": 2.0, "other": 0.0,
                           "raises": 0.0},
         "task2.scores": {"right": 3.0, "other": 0.0, "raises": 0.0}}


#: The notebooks whose run turns on IPython's own rules (a magic's code,
#: automagic, a raise or a compile refusal that stops a cell, a late
#: __future__ import, imports in cell order), run in a real kernel:
#: about 7 s of CPU each (a kernel, torch, matplotlib). The others run
#: as plain Python would; the grader's items above cover them.
IN_A_KERNEL = ("automagic_time_rebinds", "cell_time_rebinds",
               "compile_stops_cell", "future_below_code",
               "import_after_alias_gain", "line_magic_time_rebinds",
               "prun_rebinds_then_raise", "raise_ends_cell",
               "script_cell_runs_nothing", "timeit_binds_nothing")


@pytest.fixture(scope="module")
def in_a_kernel(tmp_path_factory) -> dict[str, dict]:
    """The IN_A_KERNEL notebooks, each run top to bottom by a real
    IPython kernel in a folder of its own (a cell may write files:
    ``%%writefile``), the kit on the kernel's path (nbclient, errors
    allowed as nbgrader's autograde allows them; figures drawn by
    matplotlib's Agg backend, which keeps no picture), the PROBE cell
    last: name -> its verdicts."""
    import nbformat
    from nbclient import NotebookClient

    found = {}
    # The kernel inherits the environment.
    given = {"MPLBACKEND": "agg", "PYTHONPATH": os.pathsep.join(
        [str(KIT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    saved = {name: os.environ.get(name) for name in given}
    os.environ.update(given)
    try:
        for name in IN_A_KERNEL:
            folder = tmp_path_factory.mktemp(name)
            notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb",
                                     as_version=4)
            notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
            NotebookClient(
                notebook, timeout=300, kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": str(folder)}}).execute()
            text = "".join(output.get("text", "") for output in
                           notebook.cells[-1].outputs
                           if output.output_type == "stream")
            found[name] = json.loads(text.strip().splitlines()[-1])
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert not (KIT / "scaled.py").exists()  # nothing written in the kit
    return found


@pytest.mark.parametrize("name", IN_A_KERNEL)
def test_a_real_kernel_leaves_what_the_grader_grades(in_a_kernel, name):
    """Principle 7 on the real thing: what the classes a kernel leaves
    bound compute on the public values is what the grader's items say
    (task1.forward: scaled 3, unscaled 2, else 0; task2.scores: 3 or 0),
    and the flag BOUND names has the kernel's value."""
    verdicts = in_a_kernel[name]
    items = EXPECTED[name][0]
    assert {item: WORTH[item][verdicts[item.split(".")[0]]]
            for item in WORTH} == {item: items[item] for item in WORTH}, \
        verdicts
    if name in BOUND:
        assert verdicts[BOUND[name][0]] is BOUND[name][1], verdicts
