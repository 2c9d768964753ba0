"""Checks of Coding Task 1: SelfAttention.

Judged on the public test values and on hidden random cases. A forward that
matches the reference earns 3 points ("scaled"); one that matches the
reference without the 1 / sqrt(hidden) scaling earns 2 ("unscaled").
"""
from collections.abc import Iterator

import pytest
import torch

from grader.assignments.multi_head_attention import mistakes, reference
from grader.assignments.multi_head_attention.cases import INIT_SIZES
from grader.checking import close, fail, max_error, returned, tensor_of
from grader.observe import TaskRun
from grader.plan import Case

OUT = "[batch_size, seq_len, hidden]"


def outputs(task1: TaskRun) -> Iterator[tuple[Case, torch.Tensor]]:
    """Every forward output, checked to be a float tensor of the right
    shape, with its case."""
    for probe_id in task1.probe_ids("forward:"):
        case = task1.case(probe_id)
        sizes = case.sizes
        value = returned(task1, probe_id, "SelfAttention.forward")
        yield case, tensor_of(value, "SelfAttention.forward's output",
                              (sizes["batch_size"], sizes["seq_len"],
                               sizes["hidden"]), OUT, case)


def diagnose(case: Case, student: torch.Tensor) -> tuple[list[str], str]:
    """Known mistakes that explain a wrong output."""
    expected = case.sizes["hidden"] ** 0.5
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale_output(case, student), expected, case.sizes)
    ids += mistakes.matching(student, {
        "softmax_dim": lambda: mistakes.self_attention_variant(
            case, softmax_dim=1)})
    return ids, words


@pytest.mark.item("task1.init")
def test_init_creates_q_k_v_linear_layers(task1: TaskRun) -> None:
    """q, k, v are nn.Linear(input_size, hidden) with a bias (two sizes)."""
    for probe_id, (inputs, hidden) in INIT_SIZES.items():
        built = f"SelfAttention(input_size={inputs}, hidden={hidden})"
        result = task1.result(probe_id)
        if not result.ok:
            fail(f"{built} could not be built: {result.problem}")
        info = result.describe or {}
        if not info.get("is_module"):
            fail(f"{built} is not an nn.Module: call super().__init__() "
                 f"first in __init__.")
        children = info.get("children", {})
        for name in ("q", "k", "v"):
            layer = children.get(name)
            if layer is None:
                fail(f"SelfAttention has no layer named '{name}': create "
                     f"self.{name} = nn.Linear(input_size, hidden).")
            if not layer.get("is_linear"):
                fail(f"self.{name} is a {layer.get('type')}; it should be "
                     f"nn.Linear(input_size, hidden).")
            sizes = (layer["in_features"], layer["out_features"])
            if sizes != (inputs, hidden):
                fail(f"In {built}, self.{name} maps "
                     f"{layer['in_features']} -> {layer['out_features']} "
                     f"features; it should map input_size -> hidden = "
                     f"{inputs} -> {hidden}.")
            if not layer.get("bias"):
                fail(f"self.{name} has no bias; the reference uses "
                     f"nn.Linear(input_size, hidden) with its default "
                     f"bias.")


@pytest.mark.item("task1.forward", part="scaled")
def test_forward_matches_reference(task1: TaskRun) -> None:
    """softmax(q k^T / sqrt(hidden)) v on every case."""
    for case, student in outputs(task1):
        x, weights = case.float64()
        expected = reference.self_attention(x, weights)
        if not close(student, expected):
            ids, words = diagnose(case, student)
            error = max_error(student, expected)
            fail(f"SelfAttention.forward's output on {case.describe()} "
                 f"does not match the reference ({error}). {words}".rstrip(),
                 *ids)


@pytest.mark.item("task1.forward", part="unscaled")
def test_forward_matches_unscaled_reference(task1: TaskRun) -> None:
    """softmax(q k^T) v on every case: the "-1 for not scaling" credit."""
    for case, student in outputs(task1):
        x, weights = case.float64()
        expected = reference.self_attention(x, weights, scale=1.0)
        if not close(student, expected):
            fail(f"SelfAttention.forward's output on {case.describe()} "
                 f"does not match the unscaled reference either.")
