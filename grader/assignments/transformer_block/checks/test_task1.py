"""Checks of Coding Task 1: TransformerEncoderLayer.

task1.layers: the layer built at two sets of sizes has exactly the
parameters of the naming contract (names and shapes) and its dropout
module has the rate it was given. task1.forward: the post-norm output
matches the reference on hidden random cases, causal and not, in eval
mode, also when the layer is built with dropout > 0 (dropout is off in eval
mode), and in train mode each sublayer's output, and nothing else, is
dropped (``dropout_effects``); a pre-norm layer or a missing residual is
diagnosed.
"""
import pytest

from grader.api import TaskRun, close, fail, max_error, require_ran, tensor_of
from grader.assignments.transformer_block import (dropout_effects,
                                                  mistakes, reference)

OUT = "[batch_size, seq_len, hidden]"
CALL = mistakes.LAYER_CALL


@pytest.mark.item("task1.layers")
def test_layers_follow_the_contract(task1: TaskRun) -> None:
    """self_attention, norm1, norm2, fcn (Linear, ReLU, Linear), dropout."""
    mistakes.check_layers(task1)


@pytest.mark.item("task1.forward")
def test_forward_matches_reference(task1: TaskRun) -> None:
    """norm2(x + fcn(x)) after x = norm1(x + self_attention(x))."""
    probes = task1.probe_ids("forward:")
    require_ran(task1, probes, CALL)
    for probe_id in probes:
        info = task1.result(probe_id).info
        case = info.case
        s = case.sizes
        student = tensor_of(task1.result(probe_id).value,
                            f"{CALL}'s output",
                            (s["batch_size"], s["seq_len"], s["hidden"]),
                            OUT, case)
        x, w = case.float64()
        is_causal = info.params["causal"]
        expected = reference.encoder_layer(x, w, s["num_heads"], is_causal)
        if not close(student, expected):
            ids = mistakes.layer_diagnoses(case, is_causal, student)
            causal = " with causal=True" if is_causal else ""
            fail(f"{CALL}'s output{causal}{dropout_words(info.params)} on "
                 f"{case.describe()} does not match the reference "
                 f"({max_error(student, expected)}).", *ids)
    dropout_effects.check_train_dropout(task1)


def dropout_words(params: dict) -> str:
    """What a message adds for a probe built with dropout > 0 (run in
    eval mode, where dropout must do nothing)."""
    rate = params.get("dropout", 0.0)
    if not rate:
        return ""
    return (f", built with dropout={rate:g} and run in eval mode "
            f"(model.eval(): dropout must be off, so the output is the one "
            f"without dropout; apply the nn.Dropout module self.dropout, "
            f"which follows train()/eval(), not F.dropout, whose "
            f"training=True is the default),")
