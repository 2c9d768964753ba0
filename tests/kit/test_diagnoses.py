"""Diagnoses of the mistakes real students make, hidden sizes, dropout as
randomness, one sentence per failure and seeds nobody can read back.

``submissions/diagnoses/`` holds submissions written for this file: for
each diagnosis id added from issue 13 (heads_not_split, head_order,
merge_wrong_axes, mask_inverted, hardcoded_size, mask_from_scores) at
least three different ways of making the mistake, dropout that is not
random or ignores its rate, and correct code that looks like a mistake
(a ``tril == 0`` mask, a functional dropout, a head loop).
``submissions/attention_basics/dropout/`` holds the same dropout mistakes
for the warm-up assignment. Every file is graded for real and every item's
score and diagnoses are checked against the table below, which is what
docs/rubric.md gives (not what the grader happens to print).

The rest pins the rules behind them: hidden sizes that differ from the
public ones, dropout bounds a correct dropout cannot miss, derived seeds,
the merged messages and the public test's word for ``mask_diagonal``.
"""
from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from grader.assignments import attention
from grader.assignments.attention_basics import cases as basics_cases
from grader.assignments.multi_head_attention import cases
from grader.judge.checking import (CheckOutcome, item_messages,
                                   share_bounds, share_outside)
from grader.output.report import Report
from grader.plan import derive_seed
from grader.rubric import get_assignment

KIT = Path(__file__).resolve().parents[2]
SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
CORPUS_DIR = SUBMISSIONS / "diagnoses"
BASICS_DIR = SUBMISSIONS / "attention_basics" / "dropout"
SEED = 7                     # the grade_path fixture's default
OTHER_SEED = 3               # correct code is also graded under this one
NEW_IDS = ("heads_not_split", "head_order", "merge_wrong_axes",
           "mask_inverted", "hardcoded_size", "mask_from_scores",
           "mask_sees_next")
ITEMS = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes")
T1_FULL = (1, 3, 0, 0, 1)
T2_FULL = (3, 1, 2, 0, 0)


@dataclass(frozen=True)
class Expected:
    """All ten items of a submission, its total and its diagnoses."""

    task1: tuple[float, ...]
    task2: tuple[float, ...]
    total: float
    diagnoses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    why: str = ""

    @property
    def scores(self) -> dict[str, float]:
        """Item id -> expected score."""
        return dict(zip(ITEMS, self.task1 + self.task2))


def only(item: str, mistake: str, task2: tuple[float, ...], total: float,
         why: str = "") -> Expected:
    """Task 1 full, ``task2`` as given, one item tagged ``mistake``."""
    return Expected(T1_FULL, task2, total, {item: (mistake,)}, why)


SCORES_ONLY = (0, 1, 2, 0, 0)    # probs wrong; mask, values, dropout right
CAUSAL_ONLY = (3, 0, 2, 0, 0)
VALUES_ONLY = (3, 1, 1, 0, 0)    # the value point lost, dropout kept
DROPOUT_ONLY = (3, 1, 1, 0, 0)   # the dropout point lost
ALL_TASK2 = {item: ("hardcoded_size",) for item in
             ("task2.scores", "task2.causal", "task2.output")}

CORPUS: dict[str, Expected] = {
    # --------------------------------------------------- heads_not_split
    "heads_not_split_repeat": only(
        "task2.scores", "heads_not_split", SCORES_ONLY, 8,
        why="the heads are identical full-width attention; the mask is "
            "right, and the value point is judged with uniform "
            "probabilities, where averaging identical heads is right"),
    "heads_not_split_expand": only(
        "task2.scores", "heads_not_split", SCORES_ONLY, 8),
    "heads_not_split_loop": only(
        "task2.scores", "heads_not_split", SCORES_ONLY, 8),
    "heads_not_split_concat": only(
        "task2.scores", "heads_not_split", SCORES_ONLY, 8),
    # -------------------------------------------------------- head_order
    "head_order_permute": only(
        "task2.scores", "head_order", SCORES_ONLY, 8,
        why="att is right (split and merge agree); only the row order of "
            "probs is wrong, and the causal structure holds in any order"),
    "head_order_slices": only(
        "task2.scores", "head_order", SCORES_ONLY, 8),
    "head_order_einsum": only(
        "task2.scores", "head_order", SCORES_ONLY, 8),
    # -------------------------------------------------- merge_wrong_axes
    "merge_wrong_axes_channels": only(
        "task2.output", "merge_wrong_axes", VALUES_ONLY, 10),
    "merge_wrong_axes_head_major": only(
        "task2.output", "merge_wrong_axes", VALUES_ONLY, 10),
    "merge_wrong_axes_loop": only(
        "task2.output", "merge_wrong_axes", VALUES_ONLY, 10),
    "merge_wrong_axes_transpose01": only(
        "task2.output", "merge_wrong_axes", VALUES_ONLY, 10),
    # ----------------------------------------------------- mask_inverted
    "mask_inverted_eq_zero": only(
        "task2.causal", "mask_inverted", CAUSAL_ONLY, 10,
        why="the last token has nothing left (NaN): said, but the id is "
            "mask_inverted, not mask_diagonal"),
    "mask_inverted_tril": only(
        "task2.causal", "mask_inverted", CAUSAL_ONLY, 10),
    "mask_inverted_where": only(
        "task2.causal", "mask_inverted", CAUSAL_ONLY, 10),
    "mask_inverted_additive": only(
        "task2.causal", "mask_inverted", CAUSAL_ONLY, 10),
    # -------------------------------------------------- mask_from_scores
    "mask_from_scores_ne_zero": only(
        "task2.causal", "mask_from_scores", CAUSAL_ONLY, 10,
        why="right on random scores, wrong when every score is 0"),
    "mask_from_scores_bool": only(
        "task2.causal", "mask_from_scores", CAUSAL_ONLY, 10),
    "mask_from_scores_zeros": only(
        "task2.causal", "mask_from_scores", CAUSAL_ONLY, 10,
        why="with every score 0 every score becomes -inf: NaN rows"),
    "mask_from_scores_where": only(
        "task2.causal", "mask_from_scores", CAUSAL_ONLY, 10),
    # ---------------------------------------------------- mask_sees_next
    "mask_sees_next_triu2": only(
        "task2.causal", "mask_sees_next", CAUSAL_ONLY, 10,
        why="the other off-by-one: each token also sees the next one"),
    "mask_sees_next_tril_eq_zero": only(
        "task2.causal", "mask_sees_next", CAUSAL_ONLY, 10,
        why="a finite fill (-1e9) still gives exact zeros beyond i + 1"),
    "mask_sees_next_where": only(
        "task2.causal", "mask_sees_next", CAUSAL_ONLY, 10),
    # ---------------------------------------------------- hardcoded_size
    "hardcoded_size_view3": Expected(
        T1_FULL, (0, 0, 0, 0, -1), 5, ALL_TASK2,
        why="num_heads written as 3: forward raises (or returns [bs * 3, "
            "seq, seq]) on every hidden case; where num_heads is not 3 and "
            "it runs to the end (the size probes), the comments' num_heads "
            "is wrong (task 2 is clamped at 0, so the total stays 5; "
            "docs/rubric-decisions.md)"),
    "hardcoded_size_mask5": only(
        "task2.causal", "hardcoded_size", CAUSAL_ONLY, 10,
        why="only the causal branch has the literal 5"),
    "hardcoded_size_merge_seq": Expected(
        T1_FULL, (0, 0, 0, 0, 0), 5, ALL_TASK2,
        why="forward raises before it returns probs on any other length"),
    "hardcoded_size_loops": Expected(
        (1, 0, 0, -1, 0), (0, 0, 0, 0, -1), 0,
        {"task1.forward": ("hardcoded_size",), **ALL_TASK2},
        why="task 1 loops over 3 sequences, task 2 over 3 heads; under the "
            "second shape size set (2 heads) the stacked scores have 3 "
            "heads, not the num_heads their comments claim; under the "
            "secret size set (issue 24, principle 6) task 1's loop over 3 "
            "sequences no longer matches the batch its comment claims"),
    # ----------------------------------------------------------- dropout
    "dropout_fixed_pattern": Expected(
        T1_FULL, DROPOUT_ONLY, 10,
        why="0 or eval / (1 - p), 50% zeros, but the same mask under "
            "every seed"),
    "dropout_self_seeded": Expected(T1_FULL, DROPOUT_ONLY, 10),
    "dropout_fixed_rate": Expected(
        T1_FULL, DROPOUT_ONLY, 10,
        why="right at p = 0.5, kept values doubled at p = 0.2"),
    "dropout_keep_rate": Expected(
        T1_FULL, DROPOUT_ONLY, 10,
        why="drops 80% of the probabilities at p = 0.2"),
    "dropout_not_rescaled": Expected(
        T1_FULL, DROPOUT_ONLY, 10,
        why="the kept probabilities are not scaled by 1 / (1 - p); no "
            "diagnosis (the mask is on the probabilities)"),
    # ----------------------------------------------------------- correct
    "correct_tril_eq_zero": Expected(T1_FULL, T2_FULL, 11),
    "correct_where_head_loop": Expected((1, 3, 0, 0, 0), T2_FULL, 10,
                                        why="task 1 is a loop: no bonus"),
}

# The warm-up's dropout mistakes: the item that loses its point.
BASICS: dict[str, str] = {
    "fixed_rate": "task4.dropout",
    "fixed_pattern": "task4.dropout",
    "self_seeded": "task6.dropout",
    "not_rescaled": "task4.dropout",
}
# The correct files of both corpora, graded again under OTHER_SEED.
CORRECT = sorted([f"diagnoses/{p.stem}" for p in
                  CORPUS_DIR.glob("correct_*.py")]
                 + [p.stem for p in SUBMISSIONS.glob("correct_*.py")])


# --------------------------------------------------------------------------
# Grading, once per (file, seed), half of it in a forked process

Key = tuple[str, int, str]        # (path below submissions/, seed, id)


def _keys() -> list[Key]:
    keys = [(f"diagnoses/{name}", SEED, "multi_head_attention")
            for name in CORPUS]
    keys += [(f"attention_basics/dropout/{name}", SEED, "attention_basics")
             for name in BASICS]
    keys += [(name, OTHER_SEED, "multi_head_attention") for name in CORRECT]
    keys += [("attention_basics/broken_forward_raises", SEED,
              "attention_basics")]
    return keys


@pytest.fixture(scope="module")
def graded(grade_path) -> Callable[..., Report]:
    """The report of a corpus file (by its path below submissions/)."""
    keys = _keys()
    theirs, mine = keys[1::2], keys[0::2]

    def run(key: Key) -> Report | str:
        try:
            return grade_path(SUBMISSIONS / f"{key[0]}.py", seed=key[1],
                              assignment=key[2])
        except Exception as exc:  # reported by the test that reads it
            return f"{type(exc).__name__}: {exc}"

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            found = {key: run(key) for key in theirs}
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump(found, pipe)
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        cache = {key: run(key) for key in mine}
    finally:
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
    cache.update(pickle.loads(data) if data else {})

    def report(name: str, seed: int = SEED,
               assignment: str = "multi_head_attention") -> Report:
        found = cache.get((name, seed, assignment))
        if found is None:
            found = cache[(name, seed, assignment)] = run(
                (name, seed, assignment))
        if isinstance(found, str):
            pytest.fail(f"grading {name} raised {found}")
        return found
    return report


def describe(report: Report) -> str:
    """Every item's score, diagnoses and message, for a failure."""
    return "\n".join(f"{i.id}: {i.score:g} {i.diagnosis} {i.message[:400]}"
                     for i in report.items)


# --------------------------------------------------------------------------
# The corpus


def test_table_lists_every_file() -> None:
    """Every file of both folders has a row, and every row a file."""
    assert {p.stem for p in CORPUS_DIR.glob("*.py")} == set(CORPUS)
    assert {p.stem for p in BASICS_DIR.glob("*.py")} == set(BASICS)


def test_every_new_id_has_three_styles_and_is_in_the_rubric() -> None:
    """Each new id is the diagnosis of at least three different files,
    and the rubric explains it (with where to look)."""
    rubric = get_assignment("multi_head_attention").diagnoses
    for mistake in NEW_IDS:
        files = [name for name, row in CORPUS.items()
                 if any(mistake in ids for ids in row.diagnoses.values())]
        assert len(files) >= 3, (mistake, files)
        assert "Look" in rubric[mistake], mistake
    for name, row in CORPUS.items():
        total = (min(max(sum(row.task1[:4]), 0), 4) + row.task1[4]
                 + min(max(sum(row.task2), 0), 6))
        assert total == row.total, name
        for ids in row.diagnoses.values():
            assert set(ids) <= set(rubric), name


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_scores_and_diagnoses(graded, name: str) -> None:
    """All ten items, every diagnosis and the total, as docs/rubric.md says."""
    expected = CORPUS[name]
    report = graded(f"diagnoses/{name}")
    assert report.scores() == pytest.approx(expected.scores), (
        f"expected because: {expected.why or 'see the file'}\n"
        + describe(report))
    diagnoses = {item.id: sorted(item.diagnosis) for item in report.items
                 if item.diagnosis}
    assert diagnoses == {k: sorted(v) for k, v in
                         expected.diagnoses.items()}, describe(report)
    assert report.score == expected.total
    assert report.errors == [], report.errors


@pytest.mark.parametrize("name", sorted(BASICS))
def test_warm_up_dropout_must_be_random(graded, name: str) -> None:
    """attention_basics: a fixed pattern, a fixed rate, a seed of the
    code's own or no rescale costs the task's dropout point, and nothing
    else."""
    report = graded(f"attention_basics/dropout/{name}",
                    assignment="attention_basics")
    lost = BASICS[name]
    for item in report.items:
        full = item.max_score if item.max_score > 0 else 0.0
        assert item.score == (0.0 if item.id == lost else full), (
            describe(report))
    assert report.score == 9


@pytest.mark.parametrize("name", CORRECT)
def test_correct_code_earns_everything_with_no_diagnosis(
        graded, name: str) -> None:
    """Under another seed (other hidden sizes and dropout masks) every
    correct file keeps every correctness point and no diagnosis fires."""
    report = graded(name, seed=OTHER_SEED)
    for item in report.items:
        if item.max_score > 0:
            assert item.score == item.max_score, describe(report)
        assert item.diagnosis == [], describe(report)


# --------------------------------------------------------------------------
# What the messages say


def test_hardcoded_size_names_the_size_that_breaks(graded) -> None:
    """The message says which single size change breaks the code."""
    heads = graded("diagnoses/hardcoded_size_view3").item("task2.scores")
    assert "but fails when only num_heads (3 -> " in heads.message
    mask = graded("diagnoses/hardcoded_size_mask5").item("task2.causal")
    assert "seq_len (5 -> " in mask.message
    assert "num_heads" not in mask.message.split("fails when only")[1]
    loops = graded("diagnoses/hardcoded_size_loops").item("task1.forward")
    assert "batch_size (3 -> 4)" in loops.message


def test_one_failure_one_sentence(graded) -> None:
    """The same exception at the same line, in several checks and cases
    of an item, is said once with the number of cases."""
    item = graded("diagnoses/hardcoded_size_view3").item("task2.output")
    assert item.message.count("is invalid for input of size") == 1
    assert item.message.count("raised RuntimeError") == 1
    assert " on 5 cases (hidden case " in item.message
    causal = graded("diagnoses/hardcoded_size_view3").item("task2.causal")
    assert " on 6 cases (" in causal.message
    warm_up = graded("attention_basics/broken_forward_raises",
                     assignment="attention_basics").item("task6.values")
    assert warm_up.message.count('RuntimeError: "unfinished"') == 1
    assert " on 5 cases (the public test values 'lecture' (" in (
        warm_up.message)


def test_item_messages_merge_the_same_failure() -> None:
    """item_messages: one sentence per (exception type, line), with the
    union of the cases; other messages are kept once each."""
    def outcome(key: str, cases_: list[list[str]],
                note: str = "") -> CheckOutcome:
        return CheckOutcome("t", "task2.output", "values", False,
                            message="ignored",
                            failures=[{"key": key, "before": f"{key} on ",
                                       "after": ".", "cases": cases_}],
                            note=note)

    plain = CheckOutcome("t", "task2.output", "dropout", False,
                         message="Dropout is not random.")
    # (Case.brief(), Case.describe()): the short form is quoted already.
    a, b, c = (["'a'", "case 'a' (x=1)"], ["'b'", "case 'b' (x=2)"],
               ["'c'", "case 'c' (x=3)"])
    messages = item_messages([
        outcome("RuntimeError@40", [a, b]),
        outcome("RuntimeError@40", [b, c], note=" Look at line 40."),
        outcome("IndexError@12", [a]),
        plain, plain])
    assert messages == [
        "RuntimeError@40 on 3 cases (case 'a' (x=1), 'b', 'c').",
        "Look at line 40.",
        "IndexError@12 on case 'a' (x=1).",
        "Dropout is not random."]


def test_text_report_explains_every_new_id(graded) -> None:
    """The text report spells out each new diagnosis id."""
    rubric = get_assignment("multi_head_attention").diagnoses
    for mistake in NEW_IDS:
        name = next(n for n, row in CORPUS.items()
                    if any(mistake in ids for ids in row.diagnoses.values()))
        text = graded(f"diagnoses/{name}").as_text()
        first = rubric[mistake].split(".")[0]
        assert f"diagnosis {mistake}: {first[:40]}" in text, (mistake, text)


def test_probs_shape_keeps_the_dropout_point(graded) -> None:
    """probs returned as [bs, num_heads, seq, seq]: the dropout point is
    judged on the probabilities whatever their layout."""
    report = graded("mistake_probs_shape")
    assert report.item("task2.output").score == 2
    assert report.item("task2.scores").diagnosis == ["probs_shape"]


def test_dropout_messages_name_the_rule(graded) -> None:
    """Each way dropout can fail says what to fix."""
    def said(name: str) -> str:
        return graded(f"diagnoses/{name}").item("task2.output").message

    assert "different random seeds drop exactly the same" in said(
        "dropout_fixed_pattern")
    assert "different random seeds drop exactly the same" in said(
        "dropout_self_seeded")
    assert "multiplied by 2 = 1 / (1 - 0.5)" in said("dropout_fixed_rate")
    assert f"dropout={cases.dropout_rates(SEED)[1]:g}" in said(
        "dropout_keep_rate")
    assert "must follow p" in said("dropout_keep_rate")
    # No rescale: the words name it, and no diagnosis says "misplaced"
    # (the mask is on the probabilities; the contract has no id for it).
    for report, item in (
            (graded("diagnoses/dropout_not_rescaled"), "task2.output"),
            (graded("attention_basics/dropout/not_rescaled",
                    assignment="attention_basics"), "task4.dropout")):
        assert "scale them by 1 / (1 - p) = 2" in report.item(item).message
        assert report.item(item).diagnosis == []


# --------------------------------------------------------------------------
# Hidden sizes


@pytest.mark.parametrize("seed", range(40))
def test_hidden_sizes_differ_from_the_public_ones(seed: int) -> None:
    """Every hidden size (the dropout case's too) differs from its value
    in every public case and from every other size; num_heads is never
    3."""
    found = cases.hidden_cases(seed)
    for task, heads in (("task1", False), ("task2", True)):
        public = cases.public_values(task)
        judged = found[task] + ([cases.dropout_case(seed)] if heads else [])
        for case in judged:
            sizes = cases.with_head_size(case.sizes)
            for key, value in sizes.items():
                assert value not in public[key], (task, case.name, sizes)
            assert cases.all_distinct(case.sizes), sizes
            if heads:
                assert sizes["num_heads"] != 3


def test_size_probes_change_one_size_at_a_time() -> None:
    """The size probes are each public case and copies with exactly one
    size changed (hidden follows num_heads and head_size)."""
    for task, keys in (("task1", cases.VARIED_1), ("task2", cases.VARIED_2)):
        pairs = cases.size_cases(SEED, task)
        for public in cases.public_cases()[task]:
            base = cases.with_head_size(public.sizes)
            mine = [(c, k) for c, k in pairs
                    if c.name == (public.name if k == "same"
                                  else f"{public.name}-{k}")]
            assert [k for _, k in mine] == ["same", *keys]
            for case, key in mine[1:]:
                changed = cases.with_head_size(case.sizes)
                differ = {k for k in base if base[k] != changed[k]}
                allowed = {key, "hidden"} if key in (
                    "num_heads", "head_size") else {key}
                assert key in differ and differ <= allowed, (key, differ)


# --------------------------------------------------------------------------
# Dropout bounds


def _binomial_outside(n: int, p: float, low: float, high: float) -> float:
    """P(X / n < low or X / n > high) for X ~ Binomial(n, p), exactly."""
    def log_pmf(k: int) -> float:
        return (math.lgamma(n + 1) - math.lgamma(k + 1)
                - math.lgamma(n - k + 1) + k * math.log(p)
                + (n - k) * math.log(1 - p))
    return sum(math.exp(log_pmf(k)) for k in range(n + 1)
               if k / n < low or k / n > high)


def _smallest_dropout_counts() -> dict[str, int]:
    """The fewest probabilities a rate is judged on, per assignment."""
    low = cases.DROPOUT_RANGES
    heads = min(h for h in range(low["num_heads"][0],
                                 low["num_heads"][1] + 1)
                if h not in cases.public_values("task2")["num_heads"])
    per_call = low["batch_size"][0] * heads * low["seq_len"][0] ** 2
    basics = basics_cases.dropout_case(0, "task4").sizes
    tokens = basics["num_tokens"]
    causal = basics["batch_size"] * tokens * (tokens + 1) // 2
    return {"multi_head_attention": per_call * cases.DROPOUT_DRAWS,
            "attention_basics": causal * basics_cases.DROPOUT_DRAWS}


def test_dropout_cases_are_as_large_as_promised() -> None:
    """Every seed's dropout case has at least the counts the bounds were
    computed for."""
    smallest = _smallest_dropout_counts()
    for seed in range(60):
        s = cases.dropout_case(seed).sizes
        per_call = s["batch_size"] * s["num_heads"] * s["seq_len"] ** 2
        assert per_call * cases.DROPOUT_DRAWS >= smallest[
            "multi_head_attention"]


#: Every rate dropout can be judged at: 0.5 and each seeded rate (the
#: two plug-ins draw from the same ones).
RATES = (cases.FIXED_RATE, *cases.SEEDED_RATES)


def test_the_plug_ins_judge_the_same_rates() -> None:
    """Both attention plug-ins judge 0.5 and one seeded rate of the same
    list; the seeded rate depends on the seed."""
    assert (basics_cases.FIXED_RATE, basics_cases.SEEDED_RATES) == (
        cases.FIXED_RATE, cases.SEEDED_RATES)
    drawn = {cases.dropout_rates(seed) for seed in range(40)}
    assert {rates[0] for rates in drawn} == {cases.FIXED_RATE}
    assert len({rates[1] for rates in drawn}) > 5
    assert {rates[1] for rates in drawn} <= set(cases.SEEDED_RATES)


@pytest.mark.parametrize("assignment", ["multi_head_attention",
                                        "attention_basics"])
@pytest.mark.parametrize("p", RATES)
def test_share_bounds_never_fail_a_correct_dropout(assignment: str,
                                                   p: float) -> None:
    """With the fewest values ever judged, a correct dropout's share of
    zeros falls outside the bounds with probability below 1e-9 (the exact
    binomial tail), and a dropout at the other rate judged with it (0.5
    with any seeded rate), or keeping with probability p, falls inside
    them with probability below 1e-9."""
    n = _smallest_dropout_counts()[assignment]
    rubric = {0.5: (0.3, 0.7)}.get(p)
    low, high = share_bounds(p, n, at_least=rubric)
    assert _binomial_outside(n, p, low, high) < 1e-9
    if rubric:
        assert (low, high) == rubric
    others = cases.SEEDED_RATES if p == cases.FIXED_RATE \
        else (cases.FIXED_RATE,)
    for wrong in {*others, 1 - p} - {p}:
        inside = 1 - _binomial_outside(n, wrong, low, high)
        assert inside < 1e-9, (p, wrong, low, high)


def test_share_outside_names_a_share_past_the_bounds() -> None:
    """A share of zeros at p is inside (None); none dropped, or all, is
    outside, with the share and the bounds it missed."""
    half = torch.arange(800) % 2 == 0
    assert share_outside(0.5, half) is None
    share, low, high = share_outside(0.5, torch.zeros(800, dtype=torch.bool))
    assert share == 0.0 and (low, high) == share_bounds(0.5, 800)
    share, low, high = share_outside(0.2, torch.ones(800, dtype=torch.bool),
                                     at_least=(0.1, 0.3))
    assert share == 1.0 and low <= 0.1 and high < 1.0


def test_independence_tests_never_fail_a_correct_dropout() -> None:
    """The dropout point's independence tests (test_task2's
    independent_masks): the binomial tail is exact; at every size of the
    dropout case, a correct dropout fails them all with probability below
    1e-9; at the smallest sizes, the attacks of hostile/effects/dropout
    (rows, columns or the diagonal kept whole) are caught on average."""
    n, p = 160, 0.2
    assert attention.binomial_tail(n, p, 20, False) == pytest.approx(
        _binomial_outside(n, p, 20.5 / n, 2))
    assert attention.binomial_tail(n, p, 21, True) == pytest.approx(
        _binomial_outside(n, p, -1, 20.5 / n))
    alpha = attention.ALPHA
    ranges = {key: range(low, high + 1)
              for key, (low, high) in cases.DROPOUT_RANGES.items()}
    kinds = len(attention.position_kinds(3))
    worst = 0.0
    for seq in ranges["seq_len"]:
        blocks = max(ranges["batch_size"]) * max(ranges["num_heads"])
        pairs = blocks * (blocks - 1) / 2
        for second in cases.SEEDED_RATES:   # 0.5 and one seeded rate
            shared = sum(_shared_chance(pairs, seq * seq, p)
                         for p in (cases.FIXED_RATE, second))
            worst = max(worst, shared)
    tests = 2 * (5 + kinds + 2 * len(attention.NEIGHBOURS))
    assert worst + tests * alpha < 1e-9
    # The shared-block test is judged at 0.5 always.
    assert _shared_chance(pairs, 100, cases.FIXED_RATE) < \
        attention.SHARED_CHANCE
    seq = min(ranges["seq_len"])
    blocks = min(ranges["batch_size"]) * min(ranges["num_heads"])
    # The attacks are caught at 0.5 (judged first).
    p = cases.FIXED_RATE
    lines = blocks * seq * cases.DROPOUT_DRAWS
    assert attention.unlikely(lines, p ** seq, int(p * lines), True)
    assert attention.unlikely(lines, p, 0, False)
    # Neighbours dropped alike (a diagonal, an anti-diagonal, dominoes):
    # every disjoint pair agrees, at either rate.
    pairs = blocks * (seq // 2) * (seq - 1) * cases.DROPOUT_DRAWS
    for rate in (p,) + cases.SEEDED_RATES:
        assert attention.unlikely(pairs, attention.alike(rate), pairs,
                                  True)


def test_masks_moved_along_fail_and_honest_masks_pass() -> None:
    """attention.mask_dependence's tests of masks moved along (red team
    16): seeded i.i.d. masks pass at every rate, at the smallest and the
    largest dropout sizes, causal or not; one draw rolled around the
    blocks, one a sequence rolled around its heads, and one mask kept
    and rolled from draw to draw fail at 0.5 and at the seeded rates, in
    their own words; and each of the three tests stays silent on honest
    masks (each is one test at ALPHA: the budget test above counts
    them)."""
    words = attention.MaskWords(
        prefix="With dropout={p:g}", blocks="blocks", of="of probs",
        weights="probabilities", advice="drop each on its own")
    generator = torch.Generator().manual_seed(16)
    ranges = cases.DROPOUT_RANGES
    for batch, heads, seq in ((ranges["batch_size"][0],
                               ranges["num_heads"][0], ranges["seq_len"][0]),
                              (ranges["batch_size"][1],
                               ranges["num_heads"][1],
                               ranges["seq_len"][1])):
        blocks = batch * heads
        for causal in (False, True):
            block = torch.ones(seq, seq, dtype=torch.bool)
            block = block.tril() if causal else block
            judged = block.expand(blocks, seq, seq).clone()
            for p in RATES:
                honest = [(torch.rand(blocks, seq, seq,
                                      generator=generator) < p) & judged
                          for _ in range(cases.DROPOUT_DRAWS)]
                assert attention.mask_dependence(judged, honest, p,
                                                 words) is None
                assert attention.counts_alike(judged, honest, p) is None
                assert attention.blocks_shifted(judged, honest, p) is None
                assert attention.draws_shifted(judged, honest, p) is None
        judged = torch.ones(blocks, seq, seq, dtype=torch.bool)
        turn = torch.arange(seq * seq)

        def rolled(count: int, p: float) -> torch.Tensor:
            base = torch.rand(seq * seq, generator=generator) < p
            return torch.stack([base[(turn - b * (seq + 1)) % (seq * seq)]
                                for b in range(count)])

        # Moved around the blocks: named as moved at 0.5 (the rubric's
        # rate, always judged); at a seeded rate the shift is weaker
        # evidence (most weights are kept) and another test (equal
        # counts, neighbours) may be what names it.
        moved = "are one mask moved along"
        for p in (cases.FIXED_RATE, 0.1, 0.19):
            one = [rolled(blocks, p).view(blocks, seq, seq)
                   for _ in range(cases.DROPOUT_DRAWS)]
            said = attention.mask_dependence(judged, one, p, words) or ""
            assert said, p
            assert p != cases.FIXED_RATE or moved in said, said
            per_sequence = [torch.cat([rolled(heads, p) for _ in
                                       range(batch)]).view(blocks, seq, seq)
                            for _ in range(cases.DROPOUT_DRAWS)]
            said = attention.mask_dependence(judged, per_sequence, p,
                                             words) or ""
            if p == cases.FIXED_RATE:
                assert moved in said, said
            kept = torch.rand(blocks * seq * seq, generator=generator) < p
            later = [kept.roll(draw * (seq + 1)).view(blocks, seq, seq)
                     for draw in range(1, cases.DROPOUT_DRAWS + 1)]
            said = attention.mask_dependence(judged, later, p, words)
            assert said is not None and \
                "one draw is another moved along" in said
        # Every block dropping as many as the others (any permutation of
        # one draw), at 0.5: the count test alone sees it.
        base = torch.rand(seq * seq, generator=generator) < 0.5
        shuffled = [torch.stack([base[torch.randperm(
            seq * seq, generator=generator)] for _ in range(blocks)]).view(
                blocks, seq, seq) for _ in range(cases.DROPOUT_DRAWS)]
        found = attention.counts_alike(judged, shuffled, 0.5)
        assert found == (blocks, blocks, cases.DROPOUT_DRAWS)


def test_neighbour_patterns_fail_and_honest_masks_pass() -> None:
    """attention.mask_dependence's neighbour test (red team 15): seeded
    i.i.d. masks pass at every rate and at the dropout case's smallest
    and largest sizes; masks constant along anti-diagonals or diagonals,
    dominoes of two rows, and every other key at a random phase per row
    (each its share of zeros right, no whole line) fail at every rate,
    at 0.5 in words naming the neighbours."""
    words_of = attention.MaskWords(
        prefix="With dropout={p:g} in train mode",
        blocks="[seq_len, seq_len] blocks of probs", of="of probs",
        weights="probabilities", advice="use self.dropout")
    generator = torch.Generator().manual_seed(15)
    ranges = cases.DROPOUT_RANGES

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=generator)

    for size in (min, max):
        blocks = size(ranges["batch_size"]) * size(ranges["num_heads"])
        seq = size(ranges["seq_len"])
        judged = torch.ones(blocks, seq, seq, dtype=torch.bool)
        lag = torch.arange(seq)[:, None] - torch.arange(seq) + seq - 1
        total = torch.arange(seq)[:, None] + torch.arange(seq)
        for p in (cases.FIXED_RATE,) + cases.SEEDED_RATES:
            for _ in range(20):
                masks = [uniform(blocks, seq, seq) < p
                         for _ in range(cases.DROPOUT_DRAWS)]
                assert attention.mask_dependence(judged, masks, p,
                                                 words_of) is None, p
            attacks = {
                "along an anti-diagonal": lambda: (
                    uniform(blocks, 2 * seq - 1) < p)[:, total],
                "along a diagonal": lambda: (
                    uniform(blocks, 2 * seq - 1) < p)[:, lag],
                "one above the other": lambda: (
                    uniform(blocks, (seq + 1) // 2, seq) < p
                ).repeat_interleave(2, dim=1)[:, :seq]}
            for words, build in attacks.items():
                masks = [build() for _ in range(cases.DROPOUT_DRAWS)]
                said = attention.mask_dependence(judged, masks, p,
                                                 words_of) or ""
                # Caught at every rate; at a low rate two small blocks
                # of so few bits may coincide first (another test's
                # words), never at 0.5.
                assert said, (size, p, words)
                if p == cases.FIXED_RATE:
                    assert words in said and "dropped alike" in said, (
                        size, p, words, said)
        # Every other key, at a random phase per query row: half of each
        # row, column and kind dropped, no two blocks alike.
        alternate = [(torch.arange(seq) + (uniform(blocks, seq, 1) < 0.5)
                      ) % 2 == 0 for _ in range(cases.DROPOUT_DRAWS)]
        said = attention.mask_dependence(judged, alternate, 0.5,
                                         words_of) or ""
        assert "side by side in a row are dropped alike" in said, said


def _shared_chance(pairs: float, size: int, p: float) -> float:
    """The chance that the shared-block test fails a correct dropout at
    rate p over DROPOUT_DRAWS draws: two of ``pairs`` blocks of ``size``
    judged weights share a mask, where the test is judged (a chance above
    attention.SHARED_CHANCE per draw is never judged)."""
    chance = pairs * attention.alike(p) ** size
    return cases.DROPOUT_DRAWS * (
        chance if chance <= attention.SHARED_CHANCE else 0.0)


def test_warm_up_independence_tests_on_causal_blocks() -> None:
    """attention_basics judges the same independence tests
    (attention.mask_dependence) on causal blocks (j <= i only): on its
    dropout cases an honest dropout fails the shared-block test with
    probability below 1e-9 (every test below 1e-9 in all); simulated
    honest masks pass, and masks of whole rows, whole columns, one block
    for the batch, one per sequence shared by the heads, or a spared
    diagonal fail, each with its own words."""
    from grader.assignments.attention_basics.observations import MASK_WORDS

    kinds = len(attention.position_kinds(3))
    for task in ("task4", "task6"):
        s = basics_cases.dropout_case(0, task).sizes
        tokens, heads = s["num_tokens"], s.get("num_heads", 1)
        blocks = s["batch_size"] * heads
        pairs = blocks * (blocks - 1) / 2
        judged = tokens * (tokens + 1) // 2
        shared = max(sum(_shared_chance(pairs, judged, p)
                         for p in (basics_cases.FIXED_RATE, second))
                     for second in basics_cases.SEEDED_RATES)
        tests = 2 * (5 + kinds + 2 * len(attention.NEIGHBOURS))
        assert shared + tests * attention.ALPHA < 1e-9, task
        assert _shared_chance(pairs, judged, basics_cases.FIXED_RATE) > 0
    s = basics_cases.dropout_case(0, "task6").sizes
    shape = (s["batch_size"], s["num_heads"], s["num_tokens"],
             s["num_tokens"])
    causal = torch.ones(shape[-2:], dtype=torch.bool).tril()
    judged = causal.expand(shape).reshape(-1, *shape[-2:])
    generator = torch.Generator().manual_seed(0)

    def draw(like: tuple[int, ...], p: float) -> torch.Tensor:
        return torch.rand(like, generator=generator) < p

    def check(build, p: float) -> str | None:
        masks = [(build(p) | ~causal).expand(shape).reshape(
            -1, *shape[-2:]) for _ in range(basics_cases.DROPOUT_DRAWS)]
        return attention.mask_dependence(judged, masks, p, MASK_WORDS)

    for p in RATES:
        assert check(lambda q: draw(shape, q), p) is None
    for p in (basics_cases.FIXED_RATE,):   # judged first: catches them
        for _ in range(5):
            assert check(lambda q: draw(shape, q), p) is None
        attacks = {
            "whole query rows": lambda q: draw(shape[:-1] + (1,), q),
            "whole key columns": lambda q: draw(
                shape[:-2] + (1, shape[-1]), q),
            "drop exactly the same": lambda q: draw((1, 1) + shape[2:], q),
            "exactly the same attention": lambda q: draw(
                (shape[0], 1) + shape[2:], q),
            "on the diagonal are dropped": lambda q: draw(shape, q) & ~torch
            .eye(shape[-1], dtype=torch.bool),
            "along an anti-diagonal are dropped alike": lambda q: draw(
                shape[:-2] + (2 * shape[-1] - 1,), q)[
                ..., torch.arange(shape[-1])[:, None]
                + torch.arange(shape[-1])]}
        for words, build in attacks.items():
            assert words in (check(build, p) or ""), (p, words)


# --------------------------------------------------------------------------
# Seeds


@pytest.mark.parametrize("module", [cases, basics_cases])
def test_no_probe_receives_the_grading_seed(module) -> None:
    """Every torch seed a probe gets is derived one-way from the grading
    seed (or is a public constant of the lecture); the raw seed never
    reaches the sandbox, and different seeds give different streams."""
    seed = 987654321
    plan = module.build(seed, False, get_assignment(
        "multi_head_attention" if module is cases
        else "attention_basics").size_sets)
    seeds = {wire.get("seed", 0) for probes in plan.probes.values()
             for wire in probes}
    public = {0} | {s for s, _ in basics_cases.SEEDED.values()}
    derived = seeds - public
    assert seed not in seeds
    assert derived, "no probe is seeded from the grading seed"
    assert all(s.bit_length() > 40 for s in derived)
    other = module.build(seed + 1, False, get_assignment(
        "multi_head_attention" if module is cases
        else "attention_basics").size_sets)
    assert derived.isdisjoint({wire.get("seed", 0) for probes in
                               other.probes.values() for wire in probes})


def test_hidden_inputs_come_from_derived_streams() -> None:
    """The hidden cases are drawn from derive_seed(seed, ...), not from
    the seed itself."""
    import numpy as np

    seed = 1234
    drawn = cases.hidden_cases(seed)["task2"][0]
    rng = np.random.default_rng(derive_seed(
        seed, "multi_head_attention", "hidden", "task2"))
    sizes = cases._distinct_sizes(rng, True)
    assert sizes == drawn.sizes
    rebuilt = cases.random_case(rng, "hidden-0", sizes, cases.LAYERS_2)
    assert rebuilt.x.equal(drawn.x)


def test_a_printed_torch_seed_is_not_the_grading_seed(grade_path,
                                                      tmp_path: Path) -> None:
    """A submission that prints torch.initial_seed() in forward shows one
    value for the whole grading, derived from the grading seed (as a
    process seeded once reads; red team 14)."""
    text = (SUBMISSIONS / "correct_matmul.py").read_text()
    marker = "        probs = self.dropout(probs)\n"
    assert marker in text
    path = tmp_path / "prints_seed.py"
    path.write_text(text.replace(
        marker, marker + "        print('seed', torch.initial_seed())\n"))
    seed = 424242
    report = grade_path(path, seed=seed)
    output = "\n".join(task.output for task in report.tasks)
    printed = {int(line.split()[-1]) for line in output.splitlines()
               if line.startswith("seed ")}
    assert printed, output[:500]
    assert seed not in printed
    assert str(seed) not in output
    assert printed == {derive_seed(seed, "torch-initial-seed") % 2 ** 31}


# --------------------------------------------------------------------------
# The public tests


@pytest.mark.parametrize("name", ["mistake_mask_diagonal",
                                  "mistake_mask_diagonal_finite"])
def test_public_tests_call_a_masked_diagonal_by_its_name(
        tmp_path: Path, name: str) -> None:
    """triu(..., diagonal=0) fails the public causal-structure test with
    the grader's words (the mask also hides the current token), not
    "tokens see the future"."""
    report = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/public/multi_head_attention/"
         "test_multi_head_self_attention.py",
         "-k", "causal_probs_structure", f"--junitxml={report}",
         "--impl", str(SUBMISSIONS / f"{name}.py")],
        cwd=KIT, capture_output=True, text=True, timeout=300)
    failures = [case.find("failure") for case in
                ElementTree.parse(report).getroot().iter("testcase")]
    assert len(failures) == 2 and all(f is not None for f in failures)
    for failure in failures:
        message = failure.get("message", "")
        assert "The causal mask also hides the current token" in message, \
            message
        assert "future" not in message, message
