"""Checks of Coding Task 4: CausalAttention.

task4.causal (1 point): the layers and the ``mask`` buffer [context_length,
context_length] on every case's sizes; the output with the case's weights
loaded (the mask is the student's own buffer, longer than the hidden
inputs); and ``torch.manual_seed(123); CausalAttention(3, 2, 6, 0.0)`` on
the lecture's batch, also built with context_length 10.

task4.dropout (1 point): judged by the properties of dropout on the
attention weights, read back from the output (see
:func:`observations.dropout`), never by stored random numbers.
"""
import pytest
import torch

from grader.api import Case, TaskRun
from grader.assignments.attention_basics import mistakes, reference
from grader.assignments.attention_basics.observations import (
    at_every_call, compare, described, dropout, expect_mask_buffer,
    expect_projections, mask_not_sliced, optional_output, positions_only,
    seeded)


def expected(case: Case) -> torch.Tensor:
    """The reference output of a case (eval mode)."""
    x, weights = case.float64()
    return reference.causal_attention(x, weights)


def diagnose(case: Case, student: torch.Tensor) -> tuple[list[str], str]:
    """Known mistakes of the scores, the mask and the softmax."""
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale(lambda c: mistakes.single_variant(
            case, scale=c, causal=True), student),
        case.sizes["d_out"] ** 0.5, case.sizes)
    ids += mistakes.matching(student, {
        "softmax_dim": lambda: mistakes.single_variant(
            case, causal=True, softmax_dim=1),
        "mask_diagonal": lambda: mistakes.single_variant(
            case, causal=True, diagonal=0),
        "mask_zero_fill": lambda: mistakes.single_variant(
            case, causal=True, fill=0.0),
        "mask_ignored": lambda: mistakes.single_variant(
            case, causal=True, masked=False)})
    if not ids:
        ids, words = mistakes.two_mistakes(
            student, lambda **kw: mistakes.single_variant(
                case, causal=True, **kw), MISTAKES,
            case.sizes["d_out"] ** 0.5, case.sizes)
    return ids, words


def causal_variant(case: Case, **mistake: object) -> torch.Tensor:
    """CausalAttention's output with one known mistake."""
    return mistakes.single_variant(case, causal=True, **mistake)


#: Mistakes that leave the mask alone (a scale is fitted besides):
#: behind them a mask read from the scores is still named.
MASK_FREE = ({}, {"softmax_dim": 1})


#: The mistakes :func:`mistakes.two_mistakes` combines, as the keyword
#: arguments of :func:`mistakes.single_variant`.
MISTAKES = [("softmax_dim", {"softmax_dim": 1}),
            ("mask_diagonal", {"diagonal": 0}),
            ("mask_zero_fill", {"fill": 0.0}),
            ("mask_ignored", {"masked": False})]


def transposed_batch(task4: TaskRun) -> list[str]:
    """["transpose_batch"] when the square case (batch_size = num_tokens =
    d_out, where keys.T runs) computes with keys.T."""
    student = optional_output(task4, "square:square")
    if student is None:
        return []
    case = task4.case("square:square")
    found = mistakes.matching(student, {
        "transpose_batch": lambda: mistakes.single_variant(
            case, causal=True, transpose_batch=True)})
    for name, kwargs in MISTAKES if not found else ():
        found = mistakes.matching(student, {
            "transpose_batch": lambda: mistakes.single_variant(
                case, causal=True, transpose_batch=True, **kwargs)})
        if found:
            return found + [name]
    return found


@pytest.mark.item("task4.causal", part="causal")
def test_layers_and_mask_buffer(task4: TaskRun) -> None:
    """nn.Linear projections and a registered mask buffer, on all sizes."""
    for probe_id in task4.probe_ids("init:"):
        case, info = described(task4, probe_id)
        expect_projections(info, case, "CausalAttention")
        expect_mask_buffer(info, case, "CausalAttention")


@pytest.mark.item("task4.causal", part="causal")
def test_forward_matches_reference(task4: TaskRun) -> None:
    """Causal scaled attention with the case's weights loaded."""
    def on_error(case: Case) -> list[str]:
        return mask_not_sliced(task4, case, expected, diagnose) \
            + transposed_batch(task4)

    def explain(case: Case, student: torch.Tensor
                ) -> tuple[list[str], str]:
        ids, words = diagnose(case, student)
        return ids + transposed_batch(task4), words

    compare(task4, "values:", expected, explain, on_error)


@pytest.mark.item("task4.causal", part="causal")
def test_seeded_construction_gives_the_lecture_numbers(
        task4: TaskRun) -> None:
    """torch.manual_seed(123); CausalAttention(3, 2, 6, 0.0)(batch): the
    first two columns of the lecture's wrapper output; the same with
    context_length 10."""
    seeded(task4, expected)


@pytest.mark.item("task4.causal", part="causal")
def test_right_at_every_call(task4: TaskRun) -> None:
    """The first hidden case's module, called again on an input as long
    as its context, still matches the reference: a mask kept from the
    first call fails."""
    at_every_call(task4, expected)


@pytest.mark.item("task4.causal", part="causal")
def test_mask_depends_on_positions_only(task4: TaskRun) -> None:
    """With every score equal (zero W_query weights) the output is still
    the reference's: a mask read from the score values fails
    (mask_from_scores)."""
    positions_only(task4, expected, causal_variant, MASK_FREE)


@pytest.mark.item("task4.dropout", part="dropout")
def test_dropout_on_attention_weights_only_in_training(
        task4: TaskRun) -> None:
    """Eval: no dropout; training: weights zeroed or scaled by 1/(1-p)."""
    dropout(task4)
