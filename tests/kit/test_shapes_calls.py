"""Whose call a line ran in (issue 24, principle 6; red team 7, H1 and
H2).

H1: ``transformer_block`` declares the input of ``forward`` and ``loss``
(``inputs`` in its rubric.toml): a line run inside a call of one is
verified at the sizes of that call's own ``input_ids``, the other
dimensions at the run's, and only when the line also ran at the run's
own sizes in that run (docs/shape-comments.md). In
``hostile/shapes_calls/`` the honest files (a loss that runs forward on
``input_ids[:, :-1]``, as a file and as a notebook; a loss that runs
forward once per row) earn 10/10; a comment written for the loss's call,
a comment written for a batch of one, and a line run only in a call on an
input the code chose (so that its wrong comment is true at the sizes it
chose) lose task2.shapes.

H2: a module-level helper that two graded classes of ``attention_basics``
run with different shapes gives each class's shape on a comment line
that names the class. In ``hostile/shapes_helpers/`` the honest file
earns 10/10; labels swapped, two unlabelled shapes, a label naming a
class that does not run the helper and one comment for the heads lose
the shapes items of the tasks where the claim is wrong.

Each folder is graded by ONE ``batch``; the pure functions are checked on
plain data.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.locate.source import SourceFile
from grader.rubric import get_assignment
from grader.routes.rows import read_csv
from grader.shapes import DimensionTable, collect_statements
from grader.shapes.calls import CallInputs, for_caller
from grader.shapes.verify import _by_call, _marked
from grader.wire import _trace

KIT = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).resolve().parent / "hostile"
TRANSFORMER = ("task1.layers", "task1.forward", "task1.pep8",
               "task1.shapes", "task2.layers", "task2.logits",
               "task2.causal", "task2.loss", "task2.training", "task2.pep8",
               "task2.shapes")
BASICS = ("task1.values", "task2.values", "task3.values", "task4.causal",
          "task4.dropout", "task4.pep8", "task4.shapes", "task5.values",
          "task6.values", "task6.dropout", "task6.pep8", "task6.shapes",
          "task7.values", "task7.mask", "task7.pep8", "task7.shapes")
FULL = (1, 3, 0, 0, 1, 2, 1, 1, 1, 0, 0)
SHAPES = (1, 3, 0, 0, 1, 2, 1, 1, 1, 0, -1)
BASICS_FULL = (1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0)
TASK4 = (1, 1, 1, 1, 1, 0, -0.5, 1, 1, 1, 0, 0, 1, 1, 0, 0)
TASKS_4_6 = (1, 1, 1, 1, 1, 0, -0.5, 1, 1, 1, 0, -0.5, 1, 1, 0, 0)
CALL = "in the calls of forward on an input of shape"
HINT = ("this line is outside CausalAttention (code it runs); when "
        "several graded classes run it with different shapes, give each "
        "class's shape on a comment line of its own that names the class")
#: folder -> (assignment, items, {entry: (item scores, judged item, words
#: of its report, words it lacks)}).
CORPUS = {
    "shapes_calls": ("transformer_block", TRANSFORMER, {
        "honest_shift_input.py": (FULL, "task2.shapes", (), ()),
        "honest_shift_notebook.ipynb": (FULL, "task2.shapes", (), ()),
        "honest_rows_loss.py": (FULL, "task2.shapes", (), ()),
        "wrong_for_shorter_call.py": (SHAPES, "task2.shapes", (
            "claims [batch_size, seq_len - 1, vocab_size]",
            "size set 1: claimed [2, 4, 17], real [2, 5, 17]",
            f"size set 1, {CALL} [2, 4]:",
            "claimed [2, 3, 17], real [2, 4, 17]"), ()),
        "wrong_batch_of_one.py": (SHAPES, "task2.shapes", (
            "claims [1, seq_len, vocab_size]", "wrong in 6 of the 20 times",
            "size set 1: claimed [1, 5, 17], real [2, 5, 17]",
            f"size set 1, {CALL} [1, 4]:"), ()),
        "dodge_chosen_input.py": (SHAPES, "task2.shapes", (
            "first = x[:, 0]", "claims [seq_len, hidden]",
            "size set 1: claimed [5, 21], real [2, 21]"), (CALL,)),
    }),
    "shapes_helpers": ("attention_basics", BASICS, {
        "honest_helper_per_class.py": (BASICS_FULL, "task4.shapes", (),
                                       ()),
        "wrong_helper_swapped_labels.py": (TASKS_4_6, "task4.shapes", (
            "claims [batch_size, num_heads, num_tokens, num_tokens]",
            "size set 1: claimed [2, 5, 8, 8], real [2, 8, 8]"), ()),
        "wrong_helper_unlabelled_shapes.py": (TASK4, "task4.shapes", (
            "claims [batch_size, num_heads, num_tokens, num_tokens]",), ()),
        "wrong_helper_other_class.py": (TASK4, "task4.shapes", (
            "claims [batch_size, num_heads, num_tokens, num_tokens]",), ()),
        "one_helper_comment_for_heads.py": (TASK4, "task4.shapes", (
            "size set 1: claimed [2, 5, 8, 8], real [2, 8, 8]", HINT), ()),
    }),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, tuple[dict, Path]]:
    """Each folder graded by one batch: its rows, and where the reports
    are."""
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env["PYTHONPATH"] = str(KIT)
    found = {}
    for folder, (assignment, _, _) in CORPUS.items():
        out = tmp_path_factory.mktemp(folder) / f"{folder}.csv"
        run = subprocess.run(
            [sys.executable, "-m", "grader", "batch", str(HOSTILE / folder),
             "--out", str(out), "--jobs", "2", "--assignment", assignment],
            cwd=KIT, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-2000:]
        rows = {Path(row["student"]).stem: row for row in read_csv(out)}
        found[folder] = (rows, out.with_name(out.name + ".reports"))
    return found


def test_the_table_lists_every_file() -> None:
    for folder, (_, _, table) in CORPUS.items():
        assert sorted(p.name for p in (HOSTILE / folder).iterdir()) == \
            sorted(table)


@pytest.mark.parametrize("folder,name", [(folder, name)
                                         for folder in CORPUS
                                         for name in CORPUS[folder][2]])
def test_each_call_is_judged_as_its_caller_reads_it(graded, folder: str,
                                                    name: str) -> None:
    _, items, table = CORPUS[folder]
    scores, judged, words, absent = table[name]
    rows, reports = graded[folder]
    row = rows[Path(name).stem]
    assert row["status"] == "graded", row
    assert {item: float(row[item]) for item in items} == dict(
        zip(items, map(float, scores))), row
    assert row["flags"] == "", row["flags"]
    report = json.loads((reports / name / "report.json").read_text(
        encoding="utf-8"))
    item = next(i for i in report["items"] if i["id"] == judged)
    text = " ".join(item["message"].split())
    for word in words:
        assert " ".join(word.split()) in text, (word, text)
    for word in absent:
        assert word not in text, (word, text)


# --------------------------------------------------------------------------
# The pure parts, on plain data

CALLS = CallInputs((("forward", ("batch_size", "seq_len")),
                    ("layer", ("batch_size", "seq_len", "hidden"))),
                   (("hidden", "num_heads", "head_size"),))
SIZES = {"batch_size": 2, "seq_len": 5, "num_heads": 3, "head_size": 7,
         "hidden": 21}


def test_a_binding_comes_from_the_input_alone() -> None:
    assert CALLS.bind(SIZES, (0, (2, 4))) == {**SIZES, "seq_len": 4}
    one = {**SIZES, "batch_size": 1, "seq_len": 4}
    assert CALLS.bind(SIZES, (0, (1, 4))) == one
    # no marker, no tensor, another rank, an unknown call, an empty
    # dimension, an identity broken: nothing is bound.
    assert CALLS.bind(SIZES, None) is None
    assert CALLS.bind(SIZES, (0, None)) is None
    assert CALLS.bind(SIZES, (0, (2, 4, 21))) is None
    assert CALLS.bind(SIZES, (5, (2, 4))) is None
    assert CALLS.bind(SIZES, (0, (2, 0))) is None
    assert CALLS.bind(SIZES, (1, (2, 5, 20))) is None
    assert CALLS.bind(SIZES, (1, (2, 3, 21))) == {**SIZES, "seq_len": 3}
    repeated = CallInputs((("f", ("seq_len", "seq_len")),))
    assert repeated.bind(SIZES, (0, (4, 3))) is None
    assert repeated.bind(SIZES, (0, (4, 4))) == {**SIZES, "seq_len": 4}


def _records(*executions: tuple) -> dict:
    return {"7": [[list(shape)] + [{"call": call, "input": list(given)}]
                  for shape, call, given in executions]}


def test_a_call_binds_only_a_line_that_also_ran_at_the_runs_sizes() -> None:
    home = ((2, 5, 21), 0, (2, 5))
    away = ((2, 4, 21), 0, (2, 4))
    both = _by_call(1, SIZES, _marked(_records(home, away), 7), CALLS)
    assert both == [(SIZES, [((2, 5, 21),)], (1, "")),
                    ({**SIZES, "seq_len": 4}, [((2, 4, 21),)],
                     (1, "in the calls of forward on an input of shape "
                         "[2, 4]"))]
    # only away from the run's sizes: judged at them, as if unbound
    alone = _by_call(1, SIZES, _marked(_records(away, away), 7), CALLS)
    assert alone == [(SIZES, [((2, 4, 21),), ((2, 4, 21),)], (1, ""))]
    # no declared inputs: every execution at the run's sizes
    assert _by_call(1, SIZES, _marked(_records(home, away), 7), None) == \
        [(SIZES, [((2, 5, 21),), ((2, 4, 21),)], (1, ""))]


def test_the_wire_takes_a_marker_only_as_an_executions_last_entry() -> None:
    good = {"intact": True, "records": {"7": [[[2, 5], {"call": 0,
                                                        "input": [2, 5]}],
                                              [[2, 5], {"call": 0,
                                                        "input": None}]]}}
    assert _trace(good) is None
    for bad in ([{"call": 0, "input": [2, 5]}, [2, 5]],
                [[2, 5], {"call": -1, "input": [2, 5]}],
                [[2, 5], {"call": 0, "input": [2, 5], "x": 1}],
                [[2, 5], {"call": 0, "input": "[2, 5]"}]):
        assert _trace({"intact": True, "records": {"7": [bad]}}) == \
            "trace records are not shapes", bad


def test_a_helpers_comment_is_read_for_the_class_it_names() -> None:
    source = SourceFile(text=(
        "def helper(s):\n"
        "    return s.softmax(-1)\n"
        "    # [batch_size, num_tokens, num_tokens] in CausalAttention,\n"
        "    # [batch_size, num_heads, num_tokens, num_tokens] in\n"
        "    # MultiHeadAttention (the heads)\n"), path=Path("helper.py"))
    table = DimensionTable.of(get_assignment("attention_basics"))
    (statement,) = collect_statements(source, None, "helper")
    (causal,) = for_caller([statement], "CausalAttention", table)
    assert causal.comment == \
        "[batch_size, num_tokens, num_tokens] in CausalAttention,"
    # a name that is part of a longer one, or a line without a shape,
    # names nothing: the comment is read whole
    for other in ("MultiHeadAttentionWrapper", "MultiHead",
                  "MultiHeadAttention"):
        (kept,) = for_caller([statement], other, table)
        assert kept.comment == statement.comment, other
