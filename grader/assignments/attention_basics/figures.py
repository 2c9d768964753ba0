"""Which pictures explain a failing item of this assignment.

The modules of this assignment return context vectors, not attention
weights; but on the ``dropout`` case (d_in and d_out larger than
num_tokens, out_proj the identity) the weights can be read back
from the output (:func:`mistakes.recover_weights`). For a failing
task4.causal or task6.values, the figure shows the weights read back from
the eval-mode, dropout-0 output beside the expected causal weights, so a
mask on the wrong side, a hidden diagonal or a softmax over the wrong axis
is seen at a glance.
"""
from __future__ import annotations

import torch

from grader.api import MapFigure, TaskRun
from grader.assignments.attention import MAP_LABELS
from grader.assignments.attention_basics import mistakes, reference

ITEMS = {"task4.causal": "task4", "task6.values": "task6"}
PROBE = "dropout-off"


def student_weights(run: TaskRun) -> torch.Tensor | None:
    """The attention weights behind the ``dropout-off`` output
    [batch_size, num_tokens, num_tokens] (NaN where the output was not
    finite), or None when the output is not a mix of the values."""
    result = run.results.get(PROBE)
    if result is None or not result.ok or result.value is None \
            or result.value.tensor is None:
        return None
    case = result.info.case
    output = result.value.tensor
    s = case.sizes
    if tuple(output.shape) != (s["batch_size"], s["num_tokens"],
                               s["d_out"]):
        return None
    split, merge = mistakes.weights_layout(output, case, run.task)
    merged = mistakes.merged_output(output, case, run.task, merge)
    rows = torch.isfinite(merged).all(-1)
    weights, residual = mistakes.recover_weights(
        merged, mistakes.dropout_values(case, run.task, split), rows)
    if not rows.any() or residual > 1e-4:
        return None
    weights = weights.masked_fill(~rows[..., None], float("nan"))
    return weights.reshape(-1, s["num_tokens"], s["num_tokens"]).float()


def figures(failed: set[str], runs: dict[str, TaskRun]
            ) -> list[MapFigure]:
    """One figure per failing item whose weights could be read back."""
    found = []
    for item_id, task in ITEMS.items():
        run = runs.get(task)
        if item_id not in failed or run is None:
            continue
        student = student_weights(run)
        if student is None:
            continue
        case = run.case(PROBE)
        x, weights = case.float64()
        expected = reference.causal_weights(
            x, weights, case.sizes.get("num_heads", 1)).reshape(
                student.shape)
        found.append(MapFigure(
            item=item_id, case=case.describe(), panels=1, **MAP_LABELS,
            student=student, expected=expected.float(),
            title=("sequence 0: your attention weights, read back from "
                   "your output (top), and the expected ones (bottom)")))
    return found
