"""Checks of Coding Task 1: TransformerEncoderLayer.

task1.layers: the layer built at two sets of sizes has exactly the
parameters of the naming contract (names and shapes) and its dropout
module has the rate it was given. task1.forward: the post-norm output
matches the reference on hidden random cases, causal and not, in eval
mode; a pre-norm layer or a missing residual is diagnosed.
"""
import pytest

from grader.api import TaskRun, close, fail, max_error, require_ran, tensor_of
from grader.assignments.transformer_block import mistakes, reference
from grader.assignments.transformer_block.cases import INIT_1
from grader.assignments.transformer_block.mistakes import check_parameters

OUT = "[batch_size, seq_len, hidden]"
CALL = mistakes.LAYER_CALL


@pytest.mark.item("task1.layers")
def test_layers_follow_the_contract(task1: TaskRun) -> None:
    """self_attention, norm1, norm2, fcn (Linear, ReLU, Linear), dropout."""
    if task1.import_error:
        fail(f"Not graded: {task1.import_error}")
    for index, sizes in enumerate(INIT_1):
        built = (f"TransformerEncoderLayer({sizes['hidden']}, "
                 f"{sizes['num_heads']}, {sizes['fcn_hidden']}, "
                 f"dropout={sizes['dropout']})")
        result = task1.result(f"init:{index}")
        if not result.ok:
            fail(f"{built} could not be built: {result.problem}")
        info = result.describe or {}
        check_parameters(built, info, reference.layer_shapes(
            sizes["hidden"], sizes["fcn_hidden"]))
        dropout = (info.get("children") or {}).get("dropout") or {}
        if dropout.get("p") != sizes["dropout"]:
            fail(f"In {built}, self.dropout should be "
                 f"nn.Dropout({sizes['dropout']}); got "
                 f"{dropout.get('type', 'nothing')}"
                 f"{'' if 'p' not in dropout else ' p=%g' % dropout['p']}"
                 f".")


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
            fail(f"{CALL}'s output{causal} on {case.describe()} does not "
                 f"match the reference ({max_error(student, expected)}).",
                 *ids)
