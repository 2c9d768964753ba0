"""Checks of Coding Task 1: simple_self_attention.

Judged on the lecture's inputs and on hidden random sequences
[num_tokens, d_in]: the output must be softmax(x x^T) x, unscaled.
"""
import pytest
import torch

from grader.api import Case, TaskRun
from grader.assignments.attention_basics import mistakes, reference
from grader.assignments.attention_basics.observations import compare


def expected(case: Case) -> torch.Tensor:
    """softmax(x x^T) x in float64."""
    return reference.simple_self_attention(case.x.double())


def diagnose(case: Case, student: torch.Tensor) -> tuple[list[str], str]:
    """Known mistakes that explain a wrong output."""
    x = case.x
    ids, words = [], ""
    c = mistakes.fit_scale(lambda s: mistakes.simple_variant(x, scale=s),
                           student)
    if c is not None and abs(c - 1.0) > 1e-3:
        ids.append("scaled_simple_attention")
        words = (f"The scores are divided by "
                 f"{mistakes.name_scale(c, case.sizes)}.")
    ids += mistakes.matching(student, {
        "sum_normalisation": lambda: mistakes.simple_variant(
            x, normalise="sum"),
        "softmax_dim": lambda: mistakes.simple_variant(x, softmax_dim=0)})
    return ids, words


@pytest.mark.item("task1.values", part="values")
def test_simple_self_attention_matches_reference(task1: TaskRun) -> None:
    """softmax(inputs inputs^T) inputs on every case."""
    compare(task1, "values:", expected, diagnose)
