"""Checks of Coding Task 6: MultiHeadAttention.

task6.values (1 point): the layers (W_query, W_key, W_value, out_proj) on
every case's sizes; the output with the case's weights loaded (the mask is
the student's own buffer, longer than the hidden inputs); and
``torch.manual_seed(123); MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)``
on the lecture's batch, also built with context_length 10.

task6.dropout (1 point): judged by the properties of dropout on the
attention weights, read back from the output of a one-head model whose
out_proj is the identity (see :func:`observations.dropout`), so a wrong
head split or a missing out_proj does not cost this point too.
"""
import pytest
import torch

from grader.api import Case, TaskRun
from grader.assignments.attention_basics import mistakes, reference
from grader.assignments.attention_basics.observations import (
    at_every_call, compare, described, dropout, expect_linear,
    expect_projections, mask_not_sliced, positions_only, seeded)


def expected(case: Case) -> torch.Tensor:
    """The reference output of a case (eval mode)."""
    x, weights = case.float64()
    return reference.multi_head_attention(x, weights,
                                          case.sizes["num_heads"])


def diagnose(case: Case, student: torch.Tensor) -> tuple[list[str], str]:
    """Known mistakes of the split, scores, mask, merge and out_proj."""
    head_dim = case.sizes["d_out"] // case.sizes["num_heads"]
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale(lambda c: mistakes.multi_variant(case, scale=c),
                           student),
        head_dim ** 0.5, case.sizes)

    def variant(**mistake: object):
        return lambda: mistakes.multi_variant(case, **mistake)

    ids += mistakes.matching(student, {
        "softmax_dim": variant(softmax_dim=-2),
        "reshape_not_transpose": variant(split_transpose=False)})
    ids += mistakes.matching(student, {
        "softmax_dim": variant(softmax_dim=1),
        "reshape_not_transpose": variant(merge_transpose=False)})
    ids += mistakes.matching(student, {
        "reshape_not_transpose": variant(split_transpose=False,
                                         merge_transpose=False),
        "mask_diagonal": variant(diagonal=0),
        "mask_zero_fill": variant(fill=0.0),
        "mask_ignored": variant(masked=False),
        "no_out_proj": variant(out_proj=False)})
    if not ids:
        ids, words = mistakes.two_mistakes(
            student, lambda **kw: mistakes.multi_variant(case, **kw), [
                ("softmax_dim", {"softmax_dim": -2}),
                ("reshape_not_transpose", {"split_transpose": False}),
                ("reshape_not_transpose", {"merge_transpose": False}),
                ("mask_diagonal", {"diagonal": 0}),
                ("mask_zero_fill", {"fill": 0.0}),
                ("mask_ignored", {"masked": False}),
                ("no_out_proj", {"out_proj": False})],
            head_dim ** 0.5, case.sizes)
    return list(dict.fromkeys(ids)), words


#: Mistakes that leave the mask alone (a scale is fitted besides):
#: behind them a mask read from the scores is still named.
MASK_FREE = ({}, {"out_proj": False}, {"split_transpose": False},
             {"merge_transpose": False}, {"softmax_dim": -2})


@pytest.mark.item("task6.values", part="values")
def test_layers(task6: TaskRun) -> None:
    """W_query, W_key, W_value: nn.Linear(d_in, d_out, bias=qkv_bias);
    out_proj: nn.Linear(d_out, d_out) with a bias; on all sizes."""
    for probe_id in task6.probe_ids("init:"):
        case, info = described(task6, probe_id)
        expect_projections(info, case, "MultiHeadAttention")
        d_out = case.sizes["d_out"]
        expect_linear(info, "out_proj", "MultiHeadAttention",
                      (d_out, d_out), True, "d_out, d_out")


@pytest.mark.item("task6.values", part="values")
def test_forward_matches_reference(task6: TaskRun) -> None:
    """Split, causal scaled attention per head, merge, out_proj."""
    compare(task6, "values:", expected, diagnose,
            lambda case: mask_not_sliced(task6, case, expected, diagnose))


@pytest.mark.item("task6.values", part="values")
def test_seeded_construction_gives_the_lecture_numbers(
        task6: TaskRun) -> None:
    """torch.manual_seed(123); MultiHeadAttention(3, 2, 6, 0.0, 2): the
    lecture's [0.3190, 0.4858] for the first token; the same with
    context_length 10."""
    seeded(task6, expected, diagnose=diagnose)


@pytest.mark.item("task6.values", part="values")
def test_right_at_every_call(task6: TaskRun) -> None:
    """The first hidden case's module, called again on an input as long
    as its context, still matches the reference: a mask kept from the
    first call fails."""
    at_every_call(task6, expected)


@pytest.mark.item("task6.values", part="values")
def test_mask_depends_on_positions_only(task6: TaskRun) -> None:
    """With every score equal (zero W_query weights) the output is still
    the reference's: a mask read from the score values fails
    (mask_from_scores)."""
    positions_only(task6, expected, mistakes.multi_variant, MASK_FREE)


@pytest.mark.item("task6.dropout", part="dropout")
def test_dropout_on_attention_weights_only_in_training(
        task6: TaskRun) -> None:
    """Eval: no dropout; training: weights zeroed or scaled by 1/(1-p)."""
    dropout(task6)
