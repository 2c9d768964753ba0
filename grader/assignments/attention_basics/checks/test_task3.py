"""Checks of Coding Task 3: SelfAttention_v2.

W_query, W_key and W_value are nn.Linear(d_in, d_out, bias=qkv_bias)
created in this order, and forward is scaled dot-product attention. One
point, when every check passes: the layers on every case's sizes (with and
without qkv_bias), the output with the case's weights loaded, and
``torch.manual_seed(789); SelfAttention_v2(3, 2)`` on the lecture's inputs.
"""
import pytest
import torch

from grader.api import Case, TaskRun
from grader.assignments.attention_basics import mistakes, reference
from grader.assignments.attention_basics.observations import (
    compare, described, expect_projections, seeded)


def expected(case: Case) -> torch.Tensor:
    """The reference output of a case."""
    x, weights = case.float64()
    return reference.self_attention_v2(x, weights)


def diagnose(case: Case, student: torch.Tensor) -> tuple[list[str], str]:
    """Scale, softmax axis and normalisation mistakes."""
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale(lambda c: mistakes.single_variant(case, scale=c),
                           student),
        case.sizes["d_out"] ** 0.5, case.sizes)
    ids += mistakes.matching(student, {
        "softmax_dim": lambda: mistakes.single_variant(case, softmax_dim=0),
        "sum_normalisation": lambda: mistakes.single_variant(
            case, normalise="sum")})
    return ids, words


@pytest.mark.item("task3.values", part="values")
def test_layers_are_linear_d_in_d_out(task3: TaskRun) -> None:
    """W_query, W_key, W_value: nn.Linear(d_in, d_out, bias=qkv_bias)."""
    for probe_id in task3.probe_ids("init:"):
        case, info = described(task3, probe_id)
        expect_projections(info, case, "SelfAttention_v2")


@pytest.mark.item("task3.values", part="values")
def test_forward_matches_reference(task3: TaskRun) -> None:
    """softmax(q k^T / sqrt(d_out)) v with the case's weights loaded."""
    compare(task3, "values:", expected, diagnose)


@pytest.mark.item("task3.values", part="values")
def test_seeded_construction_gives_the_lecture_numbers(
        task3: TaskRun) -> None:
    """torch.manual_seed(789); SelfAttention_v2(3, 2) on the lecture's
    inputs: the layers are created W_query, W_key, W_value."""
    seeded(task3, expected)
