"""A method's comments describe its own input (issue 24, principle 6; red
team 7, H1).

``transformer_block`` declares the input of ``forward`` and ``loss``
(``inputs`` in its rubric.toml): a line run inside a call of one is
verified at the sizes of that call's own ``input_ids``, the other
dimensions at the run's, and only when the line also ran at the run's
own sizes in that run (docs/shape-comments.md). The files of
``hostile/shapes_calls/`` are graded by ONE ``batch``: the honest ones
(a loss that runs forward on ``input_ids[:, :-1]``, as a file and as a
notebook; a loss that runs forward once per row) earn 10/10; a comment
written for the loss's call, a comment written for a batch of one, and a
line run only in a call on an input the code chose (so that its wrong
comment is true at the sizes it chose) lose task2.shapes. The pure
functions are checked on plain data.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.routes.rows import read_csv
from grader.shapes.calls import CallInputs
from grader.shapes.verify import _by_call, _marked
from grader.wire import _trace

KIT = Path(__file__).resolve().parents[2]
FOLDER = Path(__file__).resolve().parent / "hostile" / "shapes_calls"
ITEMS = ("task1.layers", "task1.forward", "task1.pep8", "task1.shapes",
         "task2.layers", "task2.logits", "task2.causal", "task2.loss",
         "task2.training", "task2.pep8", "task2.shapes")
FULL = (1, 3, 0, 0, 1, 2, 1, 1, 1, 0, 0)
SHAPES = (1, 3, 0, 0, 1, 2, 1, 1, 1, 0, -1)
CALL = "in the calls of forward on an input of shape"
#: entry -> (item scores, words of task2.shapes's report, words it lacks).
CORPUS = {
    "honest_shift_input.py": (FULL, (), ()),
    "honest_shift_notebook.ipynb": (FULL, (), ()),
    "honest_rows_loss.py": (FULL, (), ()),
    "wrong_for_shorter_call.py": (SHAPES, (
        "claims [batch_size, seq_len - 1, vocab_size]",
        "size set 1: claimed [2, 4, 17], real [2, 5, 17]",
        f"size set 1, {CALL} [2, 4]:", "claimed [2, 3, 17], real [2, 4, 17]"),
        ()),
    "wrong_batch_of_one.py": (SHAPES, (
        "claims [1, seq_len, vocab_size]", "wrong in 6 of the 20 times",
        "size set 1: claimed [1, 5, 17], real [2, 5, 17]",
        f"size set 1, {CALL} [1, 4]:"), ()),
    "dodge_chosen_input.py": (SHAPES, (
        "first = x[:, 0]", "claims [seq_len, hidden]",
        "size set 1: claimed [5, 21], real [2, 21]"), (CALL,)),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[dict, Path]:
    """The folder graded by one batch: its rows, and where the reports
    are."""
    out = tmp_path_factory.mktemp("calls") / "calls.csv"
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env["PYTHONPATH"] = str(KIT)
    run = subprocess.run(
        [sys.executable, "-m", "grader", "batch", str(FOLDER), "--out",
         str(out), "--jobs", "2", "--assignment", "transformer_block"],
        cwd=KIT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = {Path(row["student"]).stem: row for row in read_csv(out)}
    return rows, out.with_name(out.name + ".reports")


def test_the_table_lists_every_file() -> None:
    assert sorted(p.name for p in FOLDER.iterdir()) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_call_is_judged_at_its_own_input(graded, name: str) -> None:
    scores, words, absent = CORPUS[name]
    rows, reports = graded
    row = rows[Path(name).stem]
    assert row["status"] == "graded", row
    assert {item: float(row[item]) for item in ITEMS} == dict(
        zip(ITEMS, map(float, scores))), row
    assert row["flags"] == "", row["flags"]
    report = json.loads((reports / name / "report.json").read_text(
        encoding="utf-8"))
    item = next(i for i in report["items"] if i["id"] == "task2.shapes")
    text = " ".join((item["message"] + " " + item.get("details", ""))
                    .split())
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
