"""Checks of Coding Task 1: SelfAttention.

Judged on the public test values and on hidden random cases. A forward that
matches the reference earns 3 points ("scaled"); one that matches the
reference without the 1 / sqrt(hidden) scaling earns 2 ("unscaled").
Code that works only at the public sizes is tagged ``hardcoded_size``.
"""
from collections.abc import Callable, Iterator

import pytest
import torch

from grader.api import (Case, CheckFailed, TaskRun, close, explained, fail,
                        max_error, require_ran, tensor_of)
from grader.assignments.multi_head_attention import mistakes, reference
from grader.assignments.multi_head_attention.cases import INIT_SIZES

OUT = "[batch_size, seq_len, hidden]"


def contract(case: Case) -> list[tuple[int, ...]]:
    """The shape of SelfAttention's output for a case's sizes."""
    s = case.sizes
    return [(s["batch_size"], s["seq_len"], s["hidden"])]


def hardcoded(task1: TaskRun) -> Callable[[], tuple[list[str], str]]:
    """The ``hardcoded_size`` explanation of a failing forward."""
    return lambda: mistakes.size_dependence(task1, "", contract)


def outputs(task1: TaskRun) -> Iterator[tuple[Case, torch.Tensor]]:
    """Every forward output, checked to be a float tensor of the right
    shape, with its case."""
    require_ran(task1, task1.probe_ids("forward:"), "SelfAttention.forward")
    for probe_id in task1.probe_ids("forward:"):
        case = task1.case(probe_id)
        yield case, tensor_of(task1.result(probe_id).value,
                              "SelfAttention.forward's output",
                              contract(case)[0], OUT, case)


def diagnose(case: Case, student: torch.Tensor) -> tuple[list[str], str]:
    """Known mistakes that explain a wrong output."""
    expected = case.sizes["hidden"] ** 0.5
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale_output(case, student), expected, case.sizes)
    ids += mistakes.matching(student, {
        "softmax_dim": lambda: mistakes.self_attention_variant(
            case, softmax_dim=1)})
    if not ids:  # a scale mistake behind a softmax over the queries
        more, said = mistakes.scale_diagnosis(mistakes.fit_scale_output(
            case, student, softmax_dim=1), expected, case.sizes)
        if more:
            ids, words = ["softmax_dim"] + more, (
                f"{said} The softmax is taken over the queries (dim=1); "
                f"take it over the keys (dim=-1).")
    return ids, words


def check_layers(task1: TaskRun, probe_id: str) -> None:
    """q, k, v of one SelfAttention built at INIT_SIZES[probe_id]."""
    inputs, hidden = INIT_SIZES[probe_id]
    built = f"SelfAttention(input_size={inputs}, hidden={hidden})"
    if task1.import_error:
        fail(f"Not graded: {task1.import_error}")
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


def layers_hardcoded(task1: TaskRun) -> tuple[list[str], str]:
    """``hardcoded_size`` when the layers are right at the public sizes
    (7, 9) only."""
    try:
        check_layers(task1, "init")
    except CheckFailed:
        return [], ""
    return ["hardcoded_size"], (
        "The layers are right for SelfAttention(7, 9), the public sizes, "
        "only: build them from the input_size and hidden arguments.")


@pytest.mark.item("task1.init")
def test_init_creates_q_k_v_linear_layers(task1: TaskRun) -> None:
    """q, k, v are nn.Linear(input_size, hidden) with a bias (two sizes)."""
    with explained(lambda: layers_hardcoded(task1)):
        for probe_id in INIT_SIZES:
            check_layers(task1, probe_id)


@pytest.mark.item("task1.forward", part="scaled")
def test_forward_matches_reference(task1: TaskRun) -> None:
    """softmax(q k^T / sqrt(hidden)) v on every case."""
    with explained(hardcoded(task1)):
        for case, student in outputs(task1):
            x, weights = case.float64()
            expected = reference.self_attention(x, weights)
            if not close(student, expected):
                ids, words = diagnose(case, student)
                error = max_error(student, expected)
                fail(f"SelfAttention.forward's output on "
                     f"{case.describe()} does not match the reference "
                     f"({error}). {words}".rstrip(), *ids)


@pytest.mark.item("task1.forward", part="unscaled")
def test_forward_matches_unscaled_reference(task1: TaskRun) -> None:
    """softmax(q k^T) v on every case: the "-1 for not scaling" credit."""
    with explained(hardcoded(task1)):
        unscaled(task1)


def unscaled(task1: TaskRun) -> None:
    """Every output equals the unscaled reference."""
    for case, student in outputs(task1):
        x, weights = case.float64()
        expected = reference.self_attention(x, weights, scale=1.0)
        if not close(student, expected):
            fail(f"SelfAttention.forward's output on {case.describe()} "
                 f"does not match the unscaled reference either.")
