"""Checks of Coding Task 2: SelfAttention_v1.

W_query, W_key and W_value are nn.Parameter [d_in, d_out] created in this
order with torch.rand, and forward is scaled dot-product attention. One
point, when every check passes: the structure on every case's sizes, the
output with the case's weights loaded (lecture's inputs and hidden random
sequences), and ``torch.manual_seed(123); SelfAttention_v1(3, 2)`` on the
lecture's inputs (the lecture's numbers).
"""
import pytest
import torch

from grader.api import Case, TaskRun, fail
from grader.assignments.attention_basics import mistakes, reference
from grader.assignments.attention_basics.observations import (compare,
                                                              described,
                                                              seeded)

NAMES = ("W_query", "W_key", "W_value")


def expected(case: Case) -> torch.Tensor:
    """The reference output of a case."""
    x, weights = case.float64()
    return reference.self_attention_v1(x, weights)


def diagnose_single(case: Case, student: torch.Tensor
                    ) -> tuple[list[str], str]:
    """Scale, softmax axis and normalisation mistakes of one head
    (SelfAttention_v1 and SelfAttention_v2)."""
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale(lambda c: mistakes.single_variant(case, scale=c),
                           student),
        case.sizes["d_out"] ** 0.5, case.sizes)
    ids += mistakes.matching(student, {
        "softmax_dim": lambda: mistakes.single_variant(case, softmax_dim=0),
        "sum_normalisation": lambda: mistakes.single_variant(
            case, normalise="sum")})
    if not ids:
        ids, words = mistakes.two_mistakes(
            student, lambda **kw: mistakes.single_variant(case, **kw),
            [("softmax_dim", {"softmax_dim": 0})],
            case.sizes["d_out"] ** 0.5, case.sizes)
    return ids, words


@pytest.mark.item("task2.values", part="values")
def test_parameters_are_d_in_by_d_out(task2: TaskRun) -> None:
    """W_query, W_key, W_value: nn.Parameter [d_in, d_out], on all sizes."""
    for probe_id in task2.probe_ids("init:"):
        case, info = described(task2, probe_id)
        s = case.sizes
        parameters = info.get("parameters", {})
        for name in NAMES:
            if name not in parameters:
                inside = [p for p in parameters if p.startswith(name + ".")]
                how = (f"it is a layer with parameters {', '.join(inside)}"
                       if inside else "it is missing")
                fail(f"SelfAttention_v1 has no parameter {name} ({how}): "
                     f"create self.{name} = nn.Parameter(torch.rand(d_in, "
                     f"d_out)).")
            if parameters[name] != [s["d_in"], s["d_out"]]:
                fail(f"SelfAttention_v1.{name} has shape {parameters[name]}"
                     f"; with d_in={s['d_in']} and d_out={s['d_out']} it "
                     f"should be [{s['d_in']}, {s['d_out']}] = [d_in, "
                     f"d_out].")


@pytest.mark.item("task2.values", part="values")
def test_forward_matches_reference(task2: TaskRun) -> None:
    """softmax(q k^T / sqrt(d_out)) v with the case's weights loaded."""
    compare(task2, "values:", expected, diagnose_single)


@pytest.mark.item("task2.values", part="values")
def test_seeded_construction_gives_the_lecture_numbers(
        task2: TaskRun) -> None:
    """torch.manual_seed(123); SelfAttention_v1(3, 2): the lecture's
    [[0.2996, 0.8053], [0.3061, 0.8210], ...]."""
    seeded(task2, expected, diagnose=diagnose_single)
