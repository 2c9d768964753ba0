"""Checks of Coding Task 2: MultiHeadSelfAttention.

Items are isolated as RUBRIC.md says: task2.causal is judged on the
structure of the causal probabilities alone; task2.output's value point is
judged on cases with zero query and key weights when task2.scores failed
(the probabilities are then uniform whatever the score computation); its
dropout point is judged by the properties of dropout on the student's own
probabilities.
"""
from collections.abc import Iterator

import pytest
import torch

from grader.assignments.multi_head_attention import mistakes, reference
from grader.checking import (ATOL, RTOL, close, fail, max_error, returned,
                             tensor_of)
from grader.observe import TaskRun
from grader.plan import Case

OUT = "[batch_size, seq_len, hidden]"
PROBS = "[batch_size * num_heads, seq_len, seq_len]"
CALL = "forward(x, return_attention=True)"


def pair(task2: TaskRun, probe_id: str) -> tuple[Case, object, object]:
    """The (att, probs) values a return_attention=True call returned."""
    info = task2.result(probe_id).info
    what = f"MultiHeadSelfAttention.{CALL}" + (
        " with causal=True" if info.causal else "")
    value = returned(task2, probe_id, what)
    case = info.case
    if value.kind not in ("tuple", "list") or value.length != 2:
        fail(f"{what} on {case.describe()} should return (att, probs); "
             f"got {value.describe()}.")
    return case, value.items[0], value.items[1]


def probs_of(task2: TaskRun, probe_id: str) -> tuple[Case, torch.Tensor]:
    """The returned probs, checked to be [bs * num_heads, seq, seq]."""
    case, _, probs = pair(task2, probe_id)
    s = case.sizes
    bs, seq, heads = s["batch_size"], s["seq_len"], s["num_heads"]
    if probs.kind == "tensor" and tuple(probs.shape) == (bs, heads, seq,
                                                         seq):
        fail(f"probs on {case.describe()} have shape {list(probs.shape)} "
             f"= [batch_size, num_heads, seq_len, seq_len]; expected "
             f"{[bs * heads, seq, seq]} = {PROBS}: reshape them after the "
             f"softmax.", "probs_shape")
    return case, tensor_of(probs, "probs", (bs * heads, seq, seq), PROBS,
                           case)


def att_of(task2: TaskRun, probe_id: str) -> tuple[Case, torch.Tensor]:
    """The returned att, checked to be [bs, seq, hidden]."""
    case, att, _ = pair(task2, probe_id)
    s = case.sizes
    return case, tensor_of(att, "att", (s["batch_size"], s["seq_len"],
                                        s["hidden"]), OUT, case)


def expected(case: Case, causal: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference (att, probs) of a case."""
    x, weights = case.float64()
    return reference.multi_head(x, weights, case.sizes["num_heads"], causal)


def scored_probs(task2: TaskRun) -> Iterator[tuple[Case, torch.Tensor]]:
    """Every non-causal probs with its case."""
    for probe_id in task2.probe_ids("probs:"):
        yield probs_of(task2, probe_id)


def scores_correct(task2: TaskRun) -> bool:
    """task2.scores's verdict, without failing (used to isolate items)."""
    try:
        return all(close(probs, expected(case)[1])
                   for case, probs in scored_probs(task2))
    except AssertionError:
        return False


def diagnose_probs(case: Case, student: torch.Tensor
                   ) -> tuple[list[str], str]:
    """Known mistakes that explain wrong non-causal probabilities."""
    head_size = case.sizes["hidden"] // case.sizes["num_heads"]
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale_probs(case, student), head_size ** 0.5,
        case.sizes)
    ids += mistakes.matching(student, {
        "softmax_dim": lambda: mistakes.probs_variant(case, softmax_dim=-2),
        "reshape_not_transpose": lambda: mistakes.probs_variant(
            case, split_transpose=False)})
    return ids, words


@pytest.mark.item("task2.scores")
def test_probs_match_reference(task2: TaskRun) -> None:
    """Non-causal probs: right shape, batch-major, equal to the reference."""
    for case, probs in scored_probs(task2):
        want = expected(case)[1]
        if not close(probs, want):
            ids, words = diagnose_probs(case, probs)
            error = max_error(probs, want)
            fail(f"probs on {case.describe()} do not match the reference "
                 f"({error}). {words}".rstrip(), *ids)


def sums_to_one(probs: torch.Tensor, dim: int = -1) -> bool:
    """True when ``probs`` sum to 1 along ``dim`` (within ATOL)."""
    sums = probs.sum(dim)
    return bool(torch.allclose(sums, torch.ones_like(sums), rtol=0,
                               atol=ATOL))


def hides_diagonal(probs: torch.Tensor) -> bool:
    """True when every row after the first gives 0 to j >= i: the mask
    hides the current token too (triu(diagonal=0)), whatever the fill
    (with -inf the first row is NaN; with a finite fill it is uniform)."""
    seq = probs.shape[-1]
    if seq < 2:
        return False
    hidden = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=0)
    hidden[0] = False
    return bool(torch.all(probs[:, hidden] == 0))


@pytest.mark.item("task2.causal")
def test_causal_probs_structure(task2: TaskRun) -> None:
    """causal=True: 0 above the diagonal, > 0 on and below, rows sum 1."""
    for probe_id in task2.probe_ids("causal:"):
        case, probs = probs_of(task2, probe_id)
        seq = case.sizes["seq_len"]
        future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
        where = f"with causal=True on {case.describe()}"
        if torch.isnan(probs).any():
            ids = ["mask_diagonal"] if torch.isnan(probs[:, 0]).all() \
                else []
            fail(f"probs {where} contain NaN. A row whose every score is "
                 f"-inf gives NaN: the first token must still see "
                 f"itself.", *ids)
        if not torch.all(probs[:, future] == 0):
            ids = []
            plain = task2.results.get(f"probs:{case.name}")
            if plain is not None and plain.ok:
                try:
                    _, unmasked = probs_of(task2, f"probs:{case.name}")
                    if close(probs, unmasked):
                        ids.append("mask_ignored")
                except AssertionError:
                    pass
            ids += mistakes.matching(probs, {
                "mask_zero_fill": lambda: mistakes.probs_variant(
                    case, causal=True, fill=0.0)})
            hint = ""
            if hides_diagonal(probs):
                ids.append("mask_diagonal")
                hint = (" Every later token gives itself probability 0, "
                        "and the first token, with every score masked, "
                        "spreads its attention over all positions.")
            fail(f"probs {where} are not 0 above the diagonal: tokens "
                 f"attend to the future.{hint}", *ids)
        if not torch.all(probs[:, ~future] > 0):
            ids = (["mask_diagonal"] if torch.all(
                probs.diagonal(dim1=1, dim2=2)[:, 1:] == 0) else [])
            fail(f"probs {where} have zeros on or below the diagonal; "
                 f"position i may attend to every j <= i, itself "
                 f"included.", *ids)
        sums = probs.sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), rtol=0,
                              atol=ATOL):
            ids = (["softmax_dim"] if sums_to_one(probs, dim=-2) else [])
            fail(f"rows of probs {where} do not sum to 1 (they range "
                 f"from {sums.min().item():.4g} to "
                 f"{sums.max().item():.4g}).", *ids)


def diagnose_output(case: Case, student: torch.Tensor
                    ) -> tuple[list[str], str]:
    """Known mistakes in the value, merge and mix steps."""
    ids = mistakes.matching(student, {
        "no_mix": lambda: mistakes.output_variant(case, mix=False),
        "reshape_not_transpose": lambda: mistakes.output_variant(
            case, merge_transpose=False)})
    if "reshape_not_transpose" not in ids:
        ids += mistakes.matching(student, {
            "reshape_not_transpose": lambda: mistakes.output_variant(
                case, split_transpose=False, merge_transpose=False)})
    return ids, ""


@pytest.mark.item("task2.output", part="values")
def test_output_matches_reference(task2: TaskRun) -> None:
    """Non-causal att equals the reference (zero q/k if scores failed)."""
    if scores_correct(task2):
        prefix, note = "probs:", ""
    else:
        prefix = "zero-qk:"
        note = (" (judged with zero query and key weights, where the "
                "probabilities are uniform, because task2.scores failed)")
    for probe_id in task2.probe_ids(prefix):
        case, att = att_of(task2, probe_id)
        want = expected(case)[0]
        if not close(att, want):
            ids, _ = diagnose_output(case, att)
            error = max_error(att, want)
            fail(f"att on {case.describe()}{note} does not match the "
                 f"reference ({error}).", *ids)


@pytest.mark.item("task2.output", part="values")
def test_return_attention_false_returns_att(task2: TaskRun) -> None:
    """forward(x) returns att alone, the same att as with probs."""
    for probe_id in task2.probe_ids("att-only:"):
        case = task2.case(probe_id)
        s = case.sizes
        value = returned(task2, probe_id, "MultiHeadSelfAttention.forward(x)")
        att = tensor_of(value, "forward(x) (return_attention=False)",
                        (s["batch_size"], s["seq_len"], s["hidden"]), OUT,
                        case)
        _, with_probs = att_of(task2, f"probs:{case.name}")
        if not close(att, with_probs):
            fail(f"forward(x) and {CALL} return different att on "
                 f"{case.describe()}.")


@pytest.mark.item("task2.output", part="dropout")
def test_dropout_acts_on_probabilities(task2: TaskRun) -> None:
    """p = 0.5, train mode: each prob is 0 or eval / (1 - p); 30-70% zero."""
    p = task2.result("dropout-train").info.dropout
    case, eval_probs = probs_of(task2, "dropout-eval")
    _, train_probs = probs_of(task2, "dropout-train")
    _, eval_att = att_of(task2, "dropout-eval")
    _, train_att = att_of(task2, "dropout-train")
    if not (torch.all(eval_probs >= 0) and sums_to_one(eval_probs)):
        if sums_to_one(eval_probs, dim=-2):
            fail("In eval mode the probabilities of a model with "
                 "dropout=0.5 are not a distribution: their rows do not "
                 "sum to 1 but their columns do, so the softmax runs over "
                 "the queries; dropout cannot be judged on them.",
                 "softmax_dim")
        fail("In eval mode (model.eval()) the probabilities of a model "
             "with dropout=0.5 are not a distribution (rows must sum to "
             "1): dropout must act only in training. Use self.dropout, "
             "an nn.Dropout, not F.dropout(..., training=True).")
    if close(train_probs, eval_probs):
        if close(train_att, eval_att):
            fail("With dropout=0.5 in train mode nothing changes: apply "
                 "self.dropout to probs.")
        fail("With dropout=0.5 in train mode att changes but the returned "
             "probs do not: dropout is applied elsewhere (scores, values "
             "or output), or probs are returned before dropout. Apply "
             "self.dropout to probs and return the dropped probs.",
             "dropout_misplaced")
    zero = train_probs == 0
    scaled = eval_probs / (1 - p)
    kept_ok = torch.isclose(train_probs, scaled, rtol=RTOL, atol=ATOL)
    if not torch.all(zero | kept_ok):
        fail(f"With dropout=0.5 in train mode the returned probabilities "
             f"are neither 0 nor their eval value / (1 - p): dropout is "
             f"not applied to the probabilities after the softmax "
             f"(case {case.describe()}).", "dropout_misplaced")
    share = zero.float().mean().item()
    if not 0.3 <= share <= 0.7:
        fail(f"With dropout=0.5 in train mode {share:.0%} of the "
             f"probabilities are 0; expected between 30% and 70%.")
