"""Checks of Coding Task 5: MultiHeadAttentionWrapper.

One point, when every check passes: ``heads`` is an nn.ModuleList of
num_heads CausalAttention modules (seen through the parameter names; the
mask buffer is task 4's) on every case's sizes; the output is the heads'
outputs side by side on the last dimension, head 0 first, with the case's
weights loaded (one hidden case, drawn from the seed, in training mode at
dropout 0: the same output, red team 13); ``torch.manual_seed(123);
MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2)`` on the lecture's batch gives
the lecture's numbers; built with dropout 0.5 in training mode, its output
moves (the heads got the rate).

The wrapper is judged on its own heads too: when the submission's
CausalAttention is wrong, the wrapper passes if its output is that
CausalAttention's output for each head's weights, side by side (the
``head:`` probes), so one mistake costs one point.
"""
import pytest
import torch

from grader.api import Case, TaskRun, close, fail, max_error, tensor_of
from grader.assignments.attention_basics import mistakes, reference
from grader.assignments.attention_basics.observations import (MEANINGS,
                                                              described,
                                                              name_of,
                                                              optional_output,
                                                              output_shape,
                                                              seeded)

TARGET = "MultiHeadAttentionWrapper"


def expected(case: Case) -> torch.Tensor:
    """The reference output of a case."""
    x, weights = case.float64()
    return reference.wrapper(x, weights, case.sizes["num_heads"])


def own_heads(task5: TaskRun, case: Case) -> torch.Tensor | None:
    """The submission's CausalAttention on each head's weights, side by
    side, or None when one of them did not run."""
    outputs = [optional_output(task5, f"head:{case.name}:{h}", "task4")
               for h in range(case.sizes["num_heads"])]
    if any(o is None for o in outputs):
        return None
    return torch.cat(outputs, dim=-1)


@pytest.mark.item("task5.values", part="heads")
def test_heads_are_a_module_list_of_causal_attention(task5: TaskRun) -> None:
    """heads: nn.ModuleList of num_heads CausalAttention, on all sizes."""
    for probe_id in task5.probe_ids("init:"):
        case, info = described(task5, probe_id)
        s = case.sizes
        heads = info.get("children", {}).get("heads")
        if heads is None:
            fail(f"{TARGET} has no submodule named 'heads': create "
                 f"self.heads = nn.ModuleList([CausalAttention(...) for _ "
                 f"in range(num_heads)]).")
        if heads.get("type") != "ModuleList":
            fail(f"{TARGET}.heads is a {heads.get('type')}; it should be an "
                 f"nn.ModuleList, so that PyTorch sees the heads' "
                 f"parameters.")
        parameters = info.get("parameters", {})
        count = len({name.split(".")[1] for name in parameters
                     if name.startswith("heads.")})
        if count != s["num_heads"]:
            fail(f"{TARGET}.heads holds {count} modules with parameters; "
                 f"with num_heads={s['num_heads']} it should hold "
                 f"{s['num_heads']} CausalAttention heads.")
        for head in range(s["num_heads"]):
            for name in ("W_query", "W_key", "W_value"):
                key = f"heads.{head}.{name}.weight"
                if parameters.get(key) != [s["d_out"], s["d_in"]]:
                    fail(f"{TARGET}.heads[{head}] has no {name} = "
                         f"nn.Linear(d_in, d_out) ({key}: "
                         f"{parameters.get(key, 'missing')}); each head is "
                         f"a CausalAttention(d_in, d_out, context_length, "
                         f"dropout, qkv_bias).")


@pytest.mark.item("task5.values", part="heads")
def test_outputs_are_concatenated_on_the_last_dimension(
        task5: TaskRun) -> None:
    """The heads side by side, head 0 first (or the submission's own
    CausalAttention heads side by side)."""
    if task5.import_error:
        fail(f"Not graded: {task5.import_error}")
    for probe_id in task5.probe_ids("values:"):
        case = task5.case(probe_id)
        result = task5.result(probe_id)
        what = name_of(task5, probe_id)
        if not result.ok:
            fail(f"{what} on {case.describe()}: {result.problem}")
        shape = output_shape("task5", case.sizes)
        value = result.value
        if (value is not None and value.kind == "tensor"
                and value.shape != shape and value.tensor is not None
                and value.tensor.numel() == torch.Size(shape).numel()):
            fail(f"The output of {what} on {case.describe()} has shape "
                 f"{list(value.shape)}; expected {list(shape)} = "
                 f"{MEANINGS['task5']}: the heads' outputs go side by side "
                 f"on the last dimension.", "concat_dim")
        student = tensor_of(value, f"The output of {what}", shape,
                            MEANINGS["task5"], case)
        want = expected(case)
        if close(student, want):
            continue
        mine = own_heads(task5, case)
        if mine is not None and mistakes.same(student, mine):
            continue
        if result.info.train and (mine is None or not close(mine, want)):
            # In training mode (dropout 0) the submission's own
            # CausalAttention is not the reference either (it drops, or
            # raises): task 4's point, not charged to the wrapper.
            continue
        fail(f"The output of {what} on {case.describe()} is neither the "
             f"reference ({max_error(student, want)}) nor your "
             f"CausalAttention heads side by side, head 0 first.")


@pytest.mark.item("task5.values", part="heads")
def test_seeded_construction_gives_the_lecture_numbers(
        task5: TaskRun) -> None:
    """torch.manual_seed(123); MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2):
    [-0.4519, 0.2216, 0.4772, 0.1063] for the first token."""
    seeded(task5, expected, lambda case: own_heads(task5, case))


@pytest.mark.item("task5.values", part="heads")
def test_heads_are_built_with_the_dropout_rate(task5: TaskRun) -> None:
    """Built with dropout 0.5 in training mode, the wrapper's output is
    not its eval-mode output: each head is CausalAttention(..., dropout,
    ...). When the submission's own CausalAttention never drops at that
    rate (task 4's dropout point), the wrapper is not charged for it."""
    if task5.import_error:
        fail(f"Not graded: {task5.import_error}")
    result = task5.result("wrapper-train")
    case = result.info.case
    what = name_of(task5, "wrapper-train")
    if not result.ok:
        # ``what`` says the mode and the rate.
        fail(f"{what} on {case.describe()}: {result.problem}")
    student = tensor_of(result.value, f"The output of {what}",
                        output_shape("task5", case.sizes),
                        MEANINGS["task5"], case)
    if not close(student, expected(case)):
        return
    head = optional_output(task5, "wrapper-head-train", "task4")
    head_case = task5.case("wrapper-head-train")
    if head is not None and close(
            head, reference.causal_attention(*head_case.float64())):
        return
    fail(f"Built with dropout {result.info.params['dropout']:g} in training "
         f"mode, {what} returned exactly its eval-mode output on "
         f"{case.describe()}, while your CausalAttention built with that "
         f"rate drops attention weights: the heads never got the rate. "
         f"Build each head as CausalAttention(d_in, d_out, context_length, "
         f"dropout, qkv_bias).")
