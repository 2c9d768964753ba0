"""The shape reader's scan bound, lifted for trees of exact lists, tuples
and dicts (issue 24, principles 2 and 6; docs/threat-model.md, "The
scan's bound, lifted for exact trees").

``hostile/bigscan/`` is graded by ONE ``python -m grader batch`` at seed
7, whose secret dropout case (6 x 5 heads x 12 x 12) holds 4,320 scores:
more than the walker's 4096. The honest control that fills a flat list
one score at a time lost task2.shapes there (``capped``) before the
bound was lifted, and the dropout point with it (its reads ran out of
time); now it earns full marks. The hostile files use the lifted bound:
a value past 4096 swapped by a route the tracer does not read (found by
identity), one changed in place by such a route (the catch-all), a huge
list rebuilt at every execution to spend the grader's time (the read
budget: ``capped``), and a ``list`` subclass of 5000 values (read by the
walker, up to 4096: it fails closed as before). The budget's worst cases
are unit-tested in test_shapes_everywhere.py.
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

from grader.routes.rows import RECORD
from grader.worker import agent

KIT = Path(__file__).resolve().parents[2]
FOLDER = Path(__file__).resolve().parent / "hostile" / "bigscan"
SEED = "7"
ITEMS = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes")
CLEAN_1 = (1, 3, 0, 0, 1)
CLEAN_2 = (3, 1, 2, 0, 0)
SHAPES_1 = (1, 3, 0, -1, 0)
#: name -> (task 1 items, task 2 items, flag kinds, words of the report,
#: words it must not say).
CORPUS: dict[str, tuple] = {
    "honest_flat_score_list": (CLEAN_1, CLEAN_2, (),
                               ("every tensor statement in "
                                "MultiHeadSelfAttention.forward has a "
                                "correct shape comment",),
                               ("more values than the grader reads",
                                "not recorded", "did not finish",
                                "CPU-time")),
    "big_swap_past_scan": (SHAPES_1, CLEAN_2, (),
                           ("line 76: wrong shape",
                            "rows.append(probs[b, i] @ v[b])",
                            "1 problem"),
                           ("line 73", "not recorded")),
    "big_inplace_past_scan": (SHAPES_1, CLEAN_2, (),
                              ("line 79: missing shape comment",
                               "a torch operation on it made one that "
                               "outlived it", "1 problem"),
                              ("not recorded",)),
    "big_rebuilt_each_step": (SHAPES_1, CLEAN_2, ("capped",),
                              ("35 execution(s)", "(at line 75)",
                               "not recorded"),
                              ()),
    "big_list_subclass": (SHAPES_1, CLEAN_2, (),
                          ("line 70: wrong shape",
                           "more values than the grader reads"),
                          ()),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every file of the folder graded by one batch at SEED."""
    root = tmp_path_factory.mktemp("bigscan")
    folder = root / "class"
    folder.mkdir()
    for name in CORPUS:
        shutil.copy(FOLDER / f"{name}.py", folder / f"{name}.py")
    out = root / "grades.csv"
    env = {**os.environ, "PYTHONPATH": str(KIT)}
    env.pop("GRADER_SEED", None)
    # A generous --timeout: the honest control's task 2 reads its list
    # again at each of its 4,320 appends (incrementally, within the read
    # budget), about 40 s of a worker on a quick host and more than 60 s
    # on a slow one. What this file tests is the bound, not the clock.
    done = subprocess.run(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(out), "--jobs", "2", "--no-feedback", "--timeout", "300",
         "--seed", SEED, "--assignment", "multi_head_attention"],
        capture_output=True, text=True, env=env, timeout=900, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["student"] for row in csv.DictReader(out.open())}
    assert rows == set(CORPUS)
    reports = out.with_name(out.name + ".reports")
    records = [json.loads(p.read_text()) for p in
               reports.glob(f"*/{RECORD}")]
    return {record["student"]: record["report"] for record in records}


def test_the_table_lists_every_file() -> None:
    assert sorted(p.stem for p in FOLDER.glob("*.py")) == sorted(CORPUS)


def test_the_seed_holds_more_scores_than_the_walker_reads() -> None:
    """The pinned seed is one where the bound mattered: its dropout case
    holds more scores than MAX_HELD_SCAN, fewer than MAX_HELD_TREE."""
    from grader.assignments.multi_head_attention.cases import dropout_case

    sizes = dropout_case(int(SEED)).sizes
    scores = sizes["batch_size"] * sizes["num_heads"] * sizes["seq_len"] ** 2
    assert agent.MAX_HELD_SCAN < scores < agent.MAX_HELD_TREE


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_lifted_bound_reads_truthfully(name: str,
                                           graded: dict[str, dict]) -> None:
    """Exact item scores, the flags' kinds, and what the report says."""
    task1, task2, flags, says, never = CORPUS[name]
    report = graded[name]
    scores = {item["id"]: item["score"] for item in report["items"]}
    assert scores == pytest.approx(dict(zip(ITEMS, task1 + task2))), \
        [(i["id"], i["message"]) for i in report["items"]]
    assert sorted(f["kind"] for f in report["flags"]) == sorted(flags), \
        [f["message"] for f in report["flags"]]
    text = " ".join(" ".join(
        [i["message"] for i in report["items"]]
        + [f["message"] for f in report["flags"]]
        + [p for task in report["tasks"] for p in task["problems"]])
        .split())
    for words in says:
        assert words in text, (words, text[-800:])
    for words in never:
        assert words not in text, (words, text[-800:])
