"""Checks of Coding Task 7: QKVMultiheadAttention.

task7.values (1 point): qkv_layer = nn.Linear(input_dim, 3 * d_model) and
linear_layer = nn.Linear(d_model, d_model) on every case's sizes; the
output without a mask, with the case's weights loaded; and
``torch.manual_seed(123); QKVMultiheadAttention(3, 4, 2)`` on the
lecture's batch (the layers created in the documented order).

The module called again without a mask right after a call with one
(``after-mask:``, red team 13, a10) matches the reference too: a mask
acts on its own call only.

task7.mask (1 point): with an additive causal mask, and with an additive
padding mask [batch_size, 1, 1, num_tokens] (0/-inf, hiding the last keys
of each sequence, never all) or, on every other hidden case (which ones
follow the seed), a mask of its own per sequence and head [batch_size,
num_heads, num_tokens, num_tokens] (red team 13, a03: code that kept one
head's mask), the output matches the reference: the mask's values are
judged, not only its presence. When task7.values failed, the
mask is judged on "blank" cases instead (one head, zero query and key
weights, identity linear_layer: every score is 0, so token i must average
the values of the keys the mask allows whatever the scale, split or merge).
"""
import pytest
import torch

from grader.api import Case, TaskRun, close, fail, max_error
from grader.assignments.attention_basics import mistakes, reference
from grader.assignments.attention_basics.cases import PER_HEAD, padding_mask
from grader.assignments.attention_basics.observations import (compare,
                                                              described,
                                                              expect_linear,
                                                              name_of,
                                                              optional_output,
                                                              output, seeded)

TARGET = "QKVMultiheadAttention"


def expected(case: Case, masked: bool = False,
             padding: bool = False) -> torch.Tensor:
    """The reference output of a case, with the causal mask, the padding
    mask (``padding``: per sequence and head on a per-head case) or
    without a mask."""
    x, weights = case.float64()
    mask = None
    if padding:
        mask = padding_mask(case, torch.float64)
    elif masked:
        mask = reference.causal_additive_mask(x.shape[1], torch.float64)
    return reference.qkv_attention(x, weights, case.sizes["num_heads"],
                                   mask)


def diagnose(case: Case, student: torch.Tensor) -> tuple[list[str], str]:
    """Known mistakes of the fused split, scores, merge and linear_layer."""
    head_dim = case.sizes["d_out"] // case.sizes["num_heads"]
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale(lambda c: mistakes.qkv_variant(case, scale=c),
                           student),
        head_dim ** 0.5, case.sizes)

    def variant(**mistake: object):
        return lambda: mistakes.qkv_variant(case, **mistake)

    ids += mistakes.matching(student, {
        "softmax_dim": variant(softmax_dim=-2),
        "qkv_split_order": variant(chunk_first=True),
        "reshape_not_transpose": variant(merge_permute=False)})
    ids += mistakes.matching(student, {
        "softmax_dim": variant(softmax_dim=1),
        "reshape_not_transpose": variant(split_permute=False)})
    ids += mistakes.matching(student, {
        "reshape_not_transpose": variant(split_permute=False,
                                         merge_permute=False),
        "no_out_proj": variant(linear_layer=False)})
    if not ids:
        ids, words = mistakes.two_mistakes(
            student, lambda **kw: mistakes.qkv_variant(case, **kw), [
                ("softmax_dim", {"softmax_dim": -2}),
                ("qkv_split_order", {"chunk_first": True}),
                ("reshape_not_transpose", {"split_permute": False}),
                ("reshape_not_transpose", {"merge_permute": False}),
                ("no_out_proj", {"linear_layer": False})],
            head_dim ** 0.5, case.sizes)
    return list(dict.fromkeys(ids)), words


def values_correct(task7: TaskRun) -> bool:
    """Every unmasked output matches (task7.values, without failing)."""
    for probe_id in task7.probe_ids("values:"):
        student = optional_output(task7, probe_id)
        if student is None or not close(student,
                                        expected(task7.case(probe_id))):
            return False
    return True


def diagnose_mask(task7: TaskRun, case: Case, student: torch.Tensor
                  ) -> tuple[list[str], str]:
    """mask_ignored: the masked output is the unmasked one."""
    unmasked = optional_output(task7, "values:"
                               + case.name.replace(PER_HEAD, ""))
    if close(student, expected(case)) or (
            unmasked is not None and close(student, unmasked)):
        return ["mask_ignored"], ("The output is the same with and without "
                                  "the mask.")
    return [], ""


def diagnose_padding(task7: TaskRun, case: Case, student: torch.Tensor
                     ) -> tuple[list[str], str]:
    """mask_ignored as with the causal mask; a causal output instead of the
    padded one: the mask's values are not what is added."""
    ids, words = diagnose_mask(task7, case, student)
    if ids:
        return ids, words
    if close(student, expected(case, masked=True)):
        words = "The output is the one with a causal mask. "
    return [], (words + "The mask's values are not what is added to the "
                "scores: add the mask you are given (0 where attention "
                "is allowed, -inf where it is not), whatever its pattern.")


@pytest.mark.item("task7.values", part="values")
def test_layers(task7: TaskRun) -> None:
    """qkv_layer and linear_layer, both with a bias, on all sizes."""
    for probe_id in task7.probe_ids("init:"):
        case, info = described(task7, probe_id)
        d_in, d_out = case.sizes["d_in"], case.sizes["d_out"]
        expect_linear(info, "qkv_layer", TARGET, (d_in, 3 * d_out), True,
                      "input_dim, 3 * d_model")
        expect_linear(info, "linear_layer", TARGET, (d_out, d_out), True,
                      "d_model, d_model")


@pytest.mark.item("task7.values", part="values")
def test_forward_without_mask_matches_reference(task7: TaskRun) -> None:
    """Fused split per head, scaled attention, merge, linear_layer."""
    compare(task7, "values:", expected, diagnose)


@pytest.mark.item("task7.values", part="values")
def test_no_mask_after_a_masked_call(task7: TaskRun) -> None:
    """forward(x) on the module just called with a mask (``after-mask:``,
    red team 13, a10) matches the reference, where a fresh module's
    forward(x) does (``values:``)."""
    for probe_id in task7.probe_ids("after-mask:"):
        name = probe_id.removeprefix("after-mask:")
        case = task7.case(probe_id)
        want = expected(case)
        first = optional_output(task7, f"values:{name}")
        if first is None or not close(first, want):
            continue
        _, student = output(task7, probe_id)
        if not close(student, want):
            fail(f"The output of {name_of(task7, probe_id)} on "
                 f"{case.describe()} does not match the reference "
                 f"({max_error(student, want)}), though a fresh module's "
                 f"does: a mask acts on its own call only, never keep it "
                 f"on the module.")


@pytest.mark.item("task7.values", part="values")
def test_seeded_construction(task7: TaskRun) -> None:
    """torch.manual_seed(123); QKVMultiheadAttention(3, 4, 2) creates
    qkv_layer, then linear_layer."""
    seeded(task7, expected)


@pytest.mark.item("task7.mask", part="mask")
def test_mask_is_added_before_the_softmax(task7: TaskRun) -> None:
    """forward(x, causal_mask) and forward(x, padding_mask) match the
    reference (on blank cases when the unmasked output is wrong)."""
    blank = "" if values_correct(task7) else "blank-"
    compare(task7, f"{blank}mask:", lambda case: expected(case, masked=True),
            lambda case, student: diagnose_mask(task7, case, student))
    compare(task7, f"{blank}padding:",
            lambda case: expected(case, padding=True),
            lambda case, student: diagnose_padding(task7, case, student))


@pytest.mark.item("task7.mask", part="mask")
def test_mask_acts_in_training(task7: TaskRun) -> None:
    """forward(x, causal_mask) in training mode (``mask-train:``, a blank
    case's module called again after its eval-mode call, red team 10, R7)
    matches the reference, where the eval-mode call does: the mask acts
    in training too (the class has no dropout, so the mode changes
    nothing)."""
    for probe_id in task7.probe_ids("mask-train:"):
        name = probe_id.removeprefix("mask-train:")
        case = task7.case(probe_id)
        want = expected(case, masked=True)
        evaluated = optional_output(task7, f"blank-mask:{name}")
        if evaluated is None or not close(evaluated, want):
            continue
        where = (f"in training mode (model.train(), the same module "
                 f"called again after its eval-mode call) on "
                 f"{case.describe()} with one head, zero query and key "
                 f"weights and an identity linear_layer")
        result = task7.result(probe_id)
        if not result.ok:
            fail(f"forward(x, mask) runs in eval mode but raises "
                 f"{where} ({result.problem}): the mask must be added in "
                 f"training too.")
        student = optional_output(task7, probe_id)
        if student is None or not close(student, want):
            fail(f"With the causal mask, the output {where} does not "
                 f"match the reference, though it does in eval mode: add "
                 f"the mask you are given to the scaled scores whatever "
                 f"the mode, and leave the module's state alone between "
                 f"calls.")
