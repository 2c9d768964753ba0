"""The grader on the second assignment, ``attention_basics``, item by item.

Every file in ``submissions/attention_basics/`` is a complete student
module: correct variants, one known mistake of the rubric's diagnosis table
per file, a forbidden API and broken code. The table below gives, for each,
the score of every rubric item that does not earn its full points, the
diagnosis ids of the items it fails and the total, as the rubric
(``grader/assignments/attention_basics/rubric.toml``) says. Further tests:
the reference earns 10 under several seeds and with ``--public-only``, the
stub earns 0, the assignment is recognised from a submission, failing mask
items come with a picture of the attention weights, the plan's cases have
the properties the rubric promises, and the grader's SDPA-based reference
agrees with ``solutions/attention_basics.py``.

Submissions are graded in-process with the ``grade_path`` fixture (about a
second each), every (file, options) pair once per session, half of them in
a forked copy of this process.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn as nn

from grader.assignments.attention_basics import cases, reference
from grader.locate.submission import locate
from grader.output.report import Report
from grader.rubric import get_assignment

KIT = Path(__file__).resolve().parents[2]
SUBMISSIONS = Path(__file__).resolve().parent / "submissions" / \
    "attention_basics"
SOLUTION = KIT / "solutions" / "attention_basics.py"
STUB = KIT / "transformer_lm" / "attention_basics.py"
ASSIGNMENT = get_assignment("attention_basics")
FULL = {item.id: item.points if item.kind == "checks" else 0.0
        for item in ASSIGNMENT.items}
DEFAULT_SEED = 7                   # the grade_path fixture's default
SEEDS = (0, 1, 2024)               # a correct submission earns 10 with each


@dataclass(frozen=True)
class Expected:
    """What a submission earns: the items that differ from full marks."""

    changes: dict[str, float] = field(default_factory=dict)
    diagnoses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    why: str = ""

    @property
    def scores(self) -> dict[str, float]:
        """Item id -> expected score."""
        return {**FULL, **self.changes}

    @property
    def total(self) -> float:
        """The rubric's total: each task's items clamped to [0, max]."""
        scores = self.scores
        return sum(min(max(sum(scores[i.id] for i in
                               ASSIGNMENT.items_of(task.id)), 0.0),
                       task.max_score) for task in ASSIGNMENT.tasks)


def lost(*items: str, diagnosis: str | None = None,
         why: str = "") -> Expected:
    """``items`` earn 0, each with the diagnosis id ``diagnosis``."""
    return Expected({item: 0.0 for item in items},
                    {item: (diagnosis,) for item in items}
                    if diagnosis else {}, why)


CORPUS: dict[str, Expected] = {
    # ---------------------------------------------------------- correct
    "correct_compact": Expected(),
    "correct_inplace_mask": Expected(
        why="the seeds' masked_fill_ is as good as masked_fill"),
    "correct_qkv_masked_fill": Expected(
        why="masked_fill(mask == -inf, -inf) is the same as adding any "
            "0/-inf mask, the padding probe's as well as the causal one"),
    # ---------------------------------------------------------- mistakes
    "mistake_scaled_simple_attention": lost(
        "task1.values", diagnosis="scaled_simple_attention"),
    "mistake_sum_normalisation": lost(
        "task1.values", diagnosis="sum_normalisation"),
    "mistake_softmax_dim": lost(
        "task4.causal", diagnosis="softmax_dim",
        why="the wrapper is judged on its own (wrong) heads side by side, "
            "and dropout on the weights read back from its own output"),
    "mistake_no_scaling": lost("task3.values", diagnosis="no_scaling"),
    "mistake_wrong_scale": lost("task6.values", diagnosis="wrong_scale",
                                why="dropout is judged on one head"),
    "mistake_init_order": lost(
        "task2.values", diagnosis="init_order",
        why="right with the weights loaded; the seeded construction is "
            "not the lecture's"),
    "mistake_init_order_out_proj": lost("task6.values",
                                        diagnosis="init_order"),
    "mistake_init_randn": lost("task2.values", diagnosis="init_order"),
    "mistake_transpose_batch": Expected(
        {"task4.causal": 0, "task4.dropout": 0, "task5.values": 0},
        {"task4.causal": ("transpose_batch",)},
        why="keys.T raises on every batch but the square one, so nothing "
            "of CausalAttention (nor of the wrapper that runs it) can be "
            "judged"),
    "mistake_mask_diagonal": lost(
        "task4.causal", diagnosis="mask_diagonal",
        why="the NaN row of token 0 is left out of the dropout check"),
    "mistake_mask_zero_fill": lost("task6.values",
                                   diagnosis="mask_zero_fill"),
    "mistake_mask_ignored": lost("task4.causal", diagnosis="mask_ignored"),
    "mistake_mask_not_sliced": lost(
        "task4.causal", "task6.values", diagnosis="mask_not_sliced",
        why="the dropout and wrapper cases have context_length = "
            "num_tokens, so only the items of the mask lose"),
    "mistake_mask_not_buffer": lost("task4.causal",
                                    diagnosis="mask_not_buffer"),
    "mistake_mask_from_scores": lost(
        "task4.causal", diagnosis="mask_from_scores",
        why="judged with equal scores (zero W_query weights), where a mask "
            "read from the scores hides nothing (red team 8, U4); the "
            "wrapper is judged on its own heads"),
    "mistake_reshape_not_transpose": lost(
        "task6.values", diagnosis="reshape_not_transpose"),
    "mistake_merge_not_permuted": lost(
        "task7.values", diagnosis="reshape_not_transpose",
        why="the mask point is judged on one-head blank cases"),
    "mistake_qkv_split_order": lost("task7.values",
                                    diagnosis="qkv_split_order"),
    "mistake_no_out_proj": lost("task6.values", diagnosis="no_out_proj"),
    "mistake_concat_dim": lost("task5.values", diagnosis="concat_dim"),
    "mistake_dropout_misplaced": lost("task4.dropout",
                                      diagnosis="dropout_misplaced"),
    "mistake_dropout_before_softmax": lost("task6.dropout",
                                           diagnosis="dropout_misplaced"),
    "mistake_dropout_in_eval": lost("task6.dropout",
                                    diagnosis="dropout_in_eval"),
    "mistake_no_dropout": lost("task4.dropout"),
    "mistake_qkv_mask_ignored": lost("task7.mask", diagnosis="mask_ignored"),
    "mistake_qkv_mask_values_ignored": lost(
        "task7.mask",
        why="a causal mask of its own whenever a mask is given: right with "
            "the causal probe, wrong with the padding probe (red team 7, "
            "U2)"),
    "mistake_hardcoded_sizes": lost(
        "task3.values",
        why="nn.Linear(3, 2) is right for the lecture's sizes only"),
    "penalties": Expected({"task4.shapes": -0.5, "task6.pep8": -0.5},
                          why="style costs at most half a task: -0.5 "
                              "each in the 2-point tasks"),
    # ---------------------------------------------------------- forbidden
    "forbidden_sdpa": lost("task7.values", "task7.mask",
                           diagnosis="forbidden_api"),
    # ---------------------------------------------------------- broken
    "broken_syntax_error": Expected({i: 0.0 for i in FULL}),
    "broken_forward_raises": lost(
        "task6.values", "task6.dropout",
        why="statements that never ran cannot be shown wrong: no shapes "
            "penalty"),
}
TOTALS = {"mistake_transpose_batch": 7, "mistake_mask_not_sliced": 8,
          "penalties": 9, "forbidden_sdpa": 8, "broken_syntax_error": 0,
          "broken_forward_raises": 8, "correct_compact": 10,
          "correct_inplace_mask": 10, "correct_qkv_masked_fill": 10}


# --------------------------------------------------------------------------
# Grading, once per (file, options), in two processes


Key = tuple[str, bool, int]        # (name or path, public_only, seed)


def _path(name: str) -> Path:
    path = Path(name)
    return path if path.suffix else SUBMISSIONS / f"{name}.py"


def _needed() -> list[Key]:
    keys = [(name, False, DEFAULT_SEED) for name in sorted(CORPUS)]
    keys += [(str(SOLUTION), False, seed) for seed in (DEFAULT_SEED,)
             + SEEDS]
    keys += [(str(SUBMISSIONS / "correct_compact.py"), False, seed)
             for seed in SEEDS]
    keys += [(str(SOLUTION), True, DEFAULT_SEED),
             (str(STUB), False, DEFAULT_SEED),
             ("mistake_hardcoded_sizes", True, DEFAULT_SEED),
             ("mistake_mask_not_sliced", True, DEFAULT_SEED)]
    return keys


def _grade_all(grade_path: Callable, keys: list[Key]) -> dict[Key, object]:
    """Grade ``keys``: half here, half in a forked copy of this process
    (grading is CPU-bound and mostly single-threaded)."""
    theirs, mine = keys[1::2], keys[0::2]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            found: dict[Key, object] = {}
            for key in theirs:
                try:
                    found[key] = grade_path(_path(key[0]),
                                            public_only=key[1], seed=key[2])
                except Exception as exc:  # reported by the test
                    found[key] = f"{type(exc).__name__}: {exc}"
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump(found, pipe)
        finally:
            os._exit(0)
    os.close(write_fd)
    results: dict[Key, object] = {}
    try:
        for key in mine:
            results[key] = grade_path(_path(key[0]), public_only=key[1],
                                      seed=key[2])
    finally:
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
    if data:
        results.update(pickle.loads(data))
    return results


@pytest.fixture(scope="module")
def graded(grade_path) -> Callable[..., Report]:
    """Grade a corpus file (by name) or a path; cached for the module."""
    cache = _grade_all(grade_path, _needed())

    def run(name: str | Path, *, public_only: bool = False,
            seed: int = DEFAULT_SEED) -> Report:
        key = (str(name), public_only, seed)
        if key not in cache:
            cache[key] = grade_path(_path(str(name)),
                                    public_only=public_only, seed=seed)
        report = cache[key]
        if isinstance(report, str):
            pytest.fail(f"grading {name} raised {report}")
        return report
    return run


def describe(report: Report) -> str:
    """Every item's score, diagnoses and message, for a failure."""
    return "\n".join(f"{i.id}: {i.score:g} {i.diagnosis} {i.message[:300]}"
                     for i in report.items)


# --------------------------------------------------------------------------
# The table


def test_corpus_covers_every_submission_file() -> None:
    """Every file in submissions/attention_basics/ has a row, and every
    row a file."""
    assert {p.stem for p in SUBMISSIONS.glob("*.py")} == set(CORPUS)


def test_table_follows_the_rubric() -> None:
    """Items and diagnoses named in the table exist; stated totals agree;
    every diagnosis of the rubric is triggered by some file."""
    triggered = set()
    for name, expected in CORPUS.items():
        assert set(expected.changes) <= set(FULL), name
        for item, ids in expected.diagnoses.items():
            assert set(ids) <= set(ASSIGNMENT.diagnoses), (name, item)
            triggered |= set(ids)
        assert expected.total == TOTALS.get(name, 9), name
    assert triggered == set(ASSIGNMENT.diagnoses)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_submission_scores_and_diagnoses(graded, name: str) -> None:
    """Every item's score, the failing items' diagnoses and the total."""
    expected = CORPUS[name]
    report = graded(name)
    assert report.assignment == "attention_basics"
    assert [item.id for item in report.items] == list(FULL)
    assert report.scores() == pytest.approx(expected.scores), (
        f"expected because: {expected.why or 'see the file'}\n"
        + describe(report))
    diagnoses = {item.id: sorted(item.diagnosis) for item in report.items
                 if item.diagnosis}
    assert diagnoses == {k: sorted(v) for k, v in
                         expected.diagnoses.items()}, describe(report)
    assert report.score == expected.total
    assert report.max_score == 10
    assert report.errors == [] or name.startswith("broken"), report.errors


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_passed_flags_agree_with_scores(graded, name: str) -> None:
    """A correctness item passes exactly when it earned its points."""
    for item in graded(name).items:
        if item.max_score > 0:
            assert item.passed == (item.score == item.max_score), item.id
        else:  # an item the grader could not check is no pass
            assert item.passed == (item.score == 0 and item.checked), \
                item.id


# --------------------------------------------------------------------------
# Reference, stub, seeds, public-only


@pytest.mark.parametrize("seed", (DEFAULT_SEED,) + SEEDS)
def test_reference_earns_full_marks(graded, seed: int) -> None:
    """solutions/attention_basics.py: 10 under every seed, no finding."""
    report = graded(str(SOLUTION), seed=seed)
    assert report.score == 10, describe(report)
    assert all(item.passed for item in report.items), describe(report)
    assert report.errors == []


@pytest.mark.parametrize("seed", SEEDS)
def test_correct_submission_earns_full_marks_under_every_seed(
        graded, seed: int) -> None:
    """Another correct submission: 10 whatever the hidden cases."""
    report = graded(str(SUBMISSIONS / "correct_compact.py"), seed=seed)
    assert report.score == 10, describe(report)


def test_reference_earns_full_marks_on_public_values(graded) -> None:
    """--public-only: the lecture's inputs and seeds alone give 10."""
    report = graded(str(SOLUTION), public_only=True)
    assert report.public_only
    assert report.score == 10, describe(report)


def test_stub_earns_nothing_and_says_why(graded) -> None:
    """The generated stub: 0, every task "still the untouched stub" (a
    note of the task, not an error), every correctness item naming the
    NotImplementedError of its task."""
    report = graded(str(STUB))
    assert report.score == 0
    assert all(item.score == 0 for item in report.items)
    for task in report.tasks:
        target = get_assignment(report.assignment).task(task.id).target
        assert task.notes == [
            f"{target} is still the untouched stub: "
            f"write your code between the YOUR CODE markers."], task.notes
        assert not [p for p in task.problems if "untouched" in p]
    assert not [e for e in report.errors if "untouched" in e]
    for item in report.items:
        if item.max_score > 0:
            assert 'NotImplementedError: "Task' in item.message, item.message
        elif item.id.endswith(".shapes"):
            assert "has no code of yours yet" in item.message


def test_hidden_cases_catch_what_the_public_values_cannot(graded) -> None:
    """Layers hard-coded to the lecture's sizes pass on the lecture's
    values alone; the hidden sizes catch them."""
    public = graded("mistake_hardcoded_sizes", public_only=True)
    assert public.item("task3.values").score == 1
    hidden = graded("mistake_hardcoded_sizes")
    assert hidden.item("task3.values").score == 0
    assert "maps 3 -> 2 features" in hidden.item("task3.values").message


def test_unsliced_mask_is_caught_on_public_values(graded) -> None:
    """The public probes include the lecture's construction with
    context_length 10 > 6 tokens, so --public-only catches it too."""
    report = graded("mistake_mask_not_sliced", public_only=True)
    item = report.item("task4.causal")
    assert item.score == 0
    assert item.diagnosis == ["mask_not_sliced"]
    assert "CausalAttention(3, 2, 10, 0.0)" in item.message


# --------------------------------------------------------------------------
# Messages a student can act on


def test_init_order_message_names_the_seeded_construction(graded) -> None:
    """The init_order message shows the seeded call it ran."""
    item = graded("mistake_init_order").item("task2.values")
    assert "torch.manual_seed(123); SelfAttention_v1(3, 2)" in item.message
    assert "With the same weights loaded" in item.message


def test_wrong_scale_message_names_the_constant(graded) -> None:
    """The recovered scale is named: sqrt(d_out) instead of sqrt(head_dim).
    """
    item = graded("mistake_wrong_scale").item("task6.values")
    assert "= sqrt(d_out)" in item.message
    assert "expected" in item.message and "sqrt(head_dim)" in item.message


def test_mask_values_message_names_the_padding_mask(graded) -> None:
    """A causal mask of its own instead of the given one: the message names
    the padding probe and says to add the mask given."""
    item = graded("mistake_qkv_mask_values_ignored").item("task7.mask")
    assert "with a padding mask (0/-inf" in item.message
    assert "The output is the one with a causal mask" in item.message
    assert "add the mask you are given" in item.message


def test_shape_penalty_points_at_the_wrong_comment(graded) -> None:
    """task4.shapes explains which comment is wrong."""
    item = graded("penalties").item("task4.shapes")
    assert item.score == -0.5
    assert "values = self.W_value(x)" in item.details


def test_failing_mask_items_show_the_attention_weights(graded) -> None:
    """figures.py: the weights read back from the output of a failing
    causal item, NaN where the output was NaN; none when all is right."""
    [figure] = graded("mistake_mask_diagonal").figures
    assert figure.item == "task4.causal"
    assert torch.isnan(figure.student[:, 0]).all()
    later = figure.student[:, 1:]
    assert not torch.isnan(later).any()
    assert torch.allclose(later.diagonal(offset=1, dim1=1, dim2=2),
                          torch.zeros(1), atol=1e-4)
    assert [f.item for f in graded("mistake_mask_zero_fill").figures] == [
        "task6.values"]
    assert graded("correct_compact").figures == []


# --------------------------------------------------------------------------
# The assignment is recognised from the submission


@pytest.mark.parametrize("path,assignment", [
    (SOLUTION, "attention_basics"),
    (STUB, "attention_basics"),
    (SUBMISSIONS / "mistake_no_dropout.py", "attention_basics"),
    (KIT / "solutions" / "modeling_attention.py", "multi_head_attention"),
    (KIT / "transformer_lm" / "modeling_attention.py",
     "multi_head_attention"),
])
def test_assignment_is_recognised(path: Path, assignment: str) -> None:
    """No --assignment: the graded names decide (stubs included)."""
    assert locate(path).assignment.id == assignment


def test_assignment_can_be_chosen(grade_path) -> None:
    """--assignment attention_basics on a broken file still grades it as
    this assignment."""
    report = grade_path(SUBMISSIONS / "broken_syntax_error.py",
                        assignment="attention_basics", public_only=True)
    assert report.assignment == "attention_basics"
    assert report.score == 0


# --------------------------------------------------------------------------
# The plan


def test_hidden_cases_have_distinct_sizes() -> None:
    """No two sizes of a hidden case are equal; masks are longer than the
    input for tasks 4 and 6; qkv_bias alternates; no size 3 in task 7."""
    for seed in (0, 7, 2024):
        for task, found in cases.hidden_cases(seed).items():
            biases = set()
            for case in found:
                s = dict(case.sizes)
                context = s.pop("context_length", None)
                assert len(set(s.values())) == len(s), (task, s)
                if task in ("task4", "task6"):
                    assert context > s["num_tokens"]
                if task == "task7":
                    assert 3 not in s.values()
                if task in ("task3", "task4", "task5", "task6"):
                    biases.add(cases.has_bias(case))
            if task in ("task3", "task4", "task5", "task6"):
                assert biases == {False, True}, task


def test_padding_mask_hides_some_keys_never_a_whole_row() -> None:
    """The padding probe's mask: [batch_size, 1, 1, num_tokens], 0/-inf,
    at least one key hidden and one kept per sequence, not the same keys
    in every sequence; every task7 case has a padding and a blank-padding
    probe."""
    for batch_size, num_tokens in ((2, 6), (3, 4), (5, 8)):
        mask = reference.padding_additive_mask(batch_size, num_tokens)
        assert mask.shape == (batch_size, 1, 1, num_tokens)
        hidden = mask == float("-inf")
        assert bool(((mask == 0) | hidden).all())
        per_row = hidden.sum(-1).flatten()
        assert bool((per_row >= 1).all())
        assert bool((per_row < num_tokens).all())
        assert len(set(per_row.tolist())) > 1
    plan = cases.build(7, False, ASSIGNMENT.size_sets)
    ids = [wire["id"] for wire in plan.probes["task7"]]
    masked = {i.split(":", 1)[1] for i in ids if i.startswith("mask:")}
    assert masked
    padded = {i.split(":", 1)[1] for i in ids if i.startswith("padding:")}
    assert {i.removesuffix(cases.PER_HEAD) for i in padded} == masked
    assert len([i for i in ids if i.startswith("blank-padding:")]) == len(
        masked)


def test_per_head_masks_differ_between_heads() -> None:
    """Red team 13 (a03): every other hidden task 7 case (which ones
    follow the seed) gets a mask [batch_size, num_heads, num_tokens,
    num_tokens] whose heads differ, never a whole row hidden; the public
    case keeps the padding mask."""
    for batch_size, heads, num_tokens in ((2, 2, 3), (3, 4, 6)):
        mask = reference.per_head_additive_mask(batch_size, heads,
                                                num_tokens)
        assert mask.shape == (batch_size, heads, num_tokens, num_tokens)
        assert bool(((mask == 0) | (mask == float("-inf"))).all())
        assert bool((mask == 0).any(-1).all())
        assert not torch.equal(mask, mask[:, :1].expand_as(mask))
    for seed in (7, 2024):
        plan = cases.build(seed, False, ASSIGNMENT.size_sets)
        ids = [w["id"] for w in plan.probes["task7"]
               if w["id"].startswith("padding:")]
        per_head = [i for i in ids if i.endswith(cases.PER_HEAD)]
        assert per_head and len(per_head) < len(ids) - 1, ids
        assert "padding:lecture" in ids


def test_chains_and_modes_of_red_team_13() -> None:
    """Red team 13: task 7's last case called again without a mask right
    after its padding: probe (a10); one hidden wrapper case, with its
    head: probes, in training mode at dropout 0 (a02); a seeded: probe
    per task under a seed derived from the grading seed (a01)."""
    plan = cases.build(7, False, ASSIGNMENT.size_sets)
    ids = [w["id"] for w in plan.probes["task7"]]
    after = [i for i in ids if i.startswith("after-mask:")]
    assert len(after) == 1
    assert ids[ids.index(after[0]) - 1].startswith("padding:")
    trained = [w for w in plan.probes["task5"] if w["train"]
               and w["id"].startswith(("values:", "head:"))]
    name = trained[0]["id"].split(":")[1]
    assert name.startswith("hidden")
    assert {w["id"] for w in trained} == {f"values:{name}"} | {
        f"head:{name}:{h}" for h in range(len(trained) - 1)}
    for task in list(cases.TARGETS)[1:]:
        reseeded = [w for w in plan.probes[task]
                    if w["id"].endswith(cases.RESEEDED)]
        assert [w["id"] for w in reseeded] == [
            f"prime:seeded:lecture{cases.RESEEDED}",
            f"seeded:lecture{cases.RESEEDED}"]
        assert reseeded[0]["seed"] != cases.SEEDED[task][0]
    public = cases.build(7, True, ASSIGNMENT.size_sets)
    assert not any(w["id"].endswith(cases.RESEEDED)
                   for probes in public.probes.values() for w in probes)


def test_every_seeded_probe_follows_its_prime() -> None:
    """The prime: probe (seed set, no-argument call) comes right before
    each seeded: probe of the same task, which loads no weights."""
    plan = cases.build(7, False, ASSIGNMENT.size_sets)
    for task, probes in plan.probes.items():
        for index, wire in enumerate(probes):
            if wire["id"].startswith("seeded:"):
                prime = probes[index - 1]
                assert prime["id"] == f"prime:{wire['id']}"
                assert prime["call"] == {"args": [], "kwargs": {}}
                if not wire["id"].endswith(cases.RESEEDED):
                    assert prime["seed"] == cases.SEEDED[task][0]
                assert prime["init"] == wire["init"]
                assert "state" not in wire


def test_public_plan_uses_the_lecture_inputs_only() -> None:
    """--public-only: every judged case is the lecture's (or a property
    case: dropout, square, blank, seeded)."""
    plan = cases.build(7, True, ASSIGNMENT.size_sets)
    names = {info.case.name for info in plan.info.values() if info.case}
    assert not any(name.startswith("hidden") for name in names)
    assert cases.PUBLIC in names


# --------------------------------------------------------------------------
# The grader's reference agrees with the reference solution


@pytest.fixture(scope="module")
def solution() -> ModuleType:
    """solutions/attention_basics.py, loaded from its file."""
    spec = importlib.util.spec_from_file_location("attention_basics_sol",
                                                  SOLUTION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _weights(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().double()
            for name, p in module.named_parameters()}


def _models(solution: ModuleType, sizes: dict[str, int], bias: bool
            ) -> dict[str, tuple[nn.Module, Callable]]:
    s = sizes
    d_in, d_out, n_ctx = s["d_in"], s["d_out"], s["context_length"]
    heads = s["num_heads"]
    return {
        "SelfAttention_v1": (
            solution.SelfAttention_v1(d_in, d_out),
            lambda x, w: reference.self_attention_v1(x[0], w)),
        "SelfAttention_v2": (
            solution.SelfAttention_v2(d_in, d_out, bias),
            lambda x, w: reference.self_attention_v2(x[0], w)),
        "CausalAttention": (
            solution.CausalAttention(d_in, d_out, n_ctx, 0.0, bias),
            reference.causal_attention),
        "MultiHeadAttentionWrapper": (
            solution.MultiHeadAttentionWrapper(d_in, d_out, n_ctx, 0.0,
                                               heads, bias),
            lambda x, w: reference.wrapper(x, w, heads)),
        "MultiHeadAttention": (
            solution.MultiHeadAttention(d_in, d_out, n_ctx, 0.0, heads,
                                        bias),
            lambda x, w: reference.multi_head_attention(x, w, heads)),
        "QKVMultiheadAttention": (
            solution.QKVMultiheadAttention(d_in, d_out, heads),
            lambda x, w: reference.qkv_attention(x, w, heads)),
    }


@pytest.mark.parametrize("seed", range(4))
def test_sdpa_reference_agrees_with_the_solution(solution: ModuleType,
                                                 seed: int) -> None:
    """On random sizes, weights and inputs (float64), every function of
    the grader's reference equals the reference solution."""
    import numpy as np

    rng = np.random.default_rng([seed, 99])
    sizes = cases.random_sizes(rng, "task6")
    torch.manual_seed(seed)
    x = torch.randn(sizes["batch_size"], sizes["num_tokens"], sizes["d_in"],
                    dtype=torch.float64)
    torch.testing.assert_close(reference.simple_self_attention(x[0]),
                               solution.simple_self_attention(x[0]))
    mask = reference.causal_additive_mask(sizes["num_tokens"],
                                          torch.float64)
    for name, (model, compute) in _models(solution, sizes,
                                          seed % 2 == 0).items():
        model = model.double().eval()
        arg = x[0] if name.startswith("SelfAttention") else x
        with torch.no_grad():
            torch.testing.assert_close(compute(x, _weights(model)),
                                       model(arg), msg=name)
            if name == "QKVMultiheadAttention":
                torch.testing.assert_close(
                    reference.qkv_attention(x, _weights(model),
                                            sizes["num_heads"], mask),
                    model(x, mask), msg=name)


@pytest.mark.parametrize("task", sorted(cases.SEEDED))
def test_documented_weights_are_what_the_solution_creates(
        solution: ModuleType, task: str) -> None:
    """documented_weights(seed) = the solution's parameters after the same
    torch.manual_seed (for both qkv_bias values), and the global random
    state is left alone."""
    seed, sizes = cases.SEEDED[task]
    init = cases.init_of(task, sizes)
    target = cases.TARGETS[task]
    for bias in (False, True):
        kwargs = {"qkv_bias": True} if bias and task not in (
            "task2", "task7") else {}
        state = torch.random.get_rng_state()
        expected = reference.documented_weights(
            target, tuple(init["args"]), seed, qkv_bias=bool(kwargs))
        assert torch.equal(torch.random.get_rng_state(), state)
        torch.manual_seed(seed)
        model = getattr(solution, target)(*init["args"], **kwargs)
        made = {n: p.detach() for n, p in model.named_parameters()}
        assert list(made) == list(expected)
        for name, tensor in made.items():
            assert torch.equal(tensor, expected[name]), (task, name)


# The lecture's printed numbers, as the grader's seeded cases expect them.
PRINTED = {
    "task2": ([0.2996, 0.8053], lambda c: reference.self_attention_v1(
        *c.float64())[0]),
    "task4": ([-0.4519, 0.2216], lambda c: reference.causal_attention(
        *c.float64())[0, 0]),
    "task5": ([-0.4519, 0.2216, 0.4772, 0.1063],
              lambda c: reference.wrapper(*c.float64(), 2)[0, 0]),
    "task6": ([0.3190, 0.4858], lambda c: reference.multi_head_attention(
        *c.float64(), 2)[0, 0]),
}


@pytest.mark.parametrize("task", sorted(PRINTED))
def test_public_cases_reproduce_the_lecture_numbers(task: str) -> None:
    """The grader's expectation for the seeded construction is what the
    lecture printed (first token)."""
    printed, compute = PRINTED[task]
    case = cases.public_cases()[task]
    torch.testing.assert_close(compute(case).float(), torch.tensor(printed),
                               rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------
# Reports on tasks without a penalty item


def test_flake8_findings_of_unpenalised_tasks_are_reported(
        grade_path, tmp_path: Path) -> None:
    """A flake8 finding in simple_self_attention costs nothing but is
    reported in the notes."""
    text = (SUBMISSIONS / "correct_compact.py").read_text()
    path = tmp_path / "attention_basics.py"
    path.write_text(text.replace(
        "attn_scores = inputs @ inputs.T  # [num_tokens, num_tokens]",
        "attn_scores = inputs @ inputs.T # [num_tokens, num_tokens]"))
    report = grade_path(path, public_only=True)
    assert report.score == 10
    assert any("simple_self_attention" in note and "E261" in note
               for note in report.notes), report.notes


def test_the_dropout_case_sizes_follow_the_seed() -> None:
    """Red team 9: code that dropped only at the one batch size every
    seed used (24) earned both dropout points. Every size of the dropout
    case is drawn from the seed, and each keeps what the dropout checks
    need: at least 12 tokens, values wider than the tokens (the weights
    can be read back), two heads for task 6."""
    from grader.assignments.attention_basics.cases import dropout_case

    for task in ("task4", "task6"):
        drawn = [dropout_case(seed, task).sizes for seed in range(40)]
        assert len({s["batch_size"] for s in drawn}) >= 8
        assert len({s["num_tokens"] for s in drawn}) == 2
        assert len({s["d_in"] for s in drawn}) >= 3
        for sizes in drawn:
            assert sizes["num_tokens"] >= 12
            assert sizes["batch_size"] >= 18
            assert sizes["d_in"] > sizes["num_tokens"]
            width = sizes.get("head_dim", sizes["d_out"])
            assert width > sizes["num_tokens"]
            assert sizes.get("num_heads", 2) == 2
