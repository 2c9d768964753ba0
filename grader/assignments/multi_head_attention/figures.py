"""Which pictures explain a failing item of this assignment.

For task2.scores and task2.causal, the student's attention maps of one
sequence (every head) beside the expected ones, so that a wrong mask or a
softmax over the wrong axis is seen at a glance.
"""
from __future__ import annotations

import torch

from grader.api import MapFigure, TaskRun
from grader.assignments.attention import MAP_LABELS
from grader.assignments.multi_head_attention import reference

ITEMS = {"task2.scores": ("probs:", False), "task2.causal": ("causal:", True)}


def _student_probs(value, case) -> torch.Tensor | None:
    if value is None or value.kind not in ("tuple", "list"):
        return None
    if len(value.items) != 2 or value.items[1].tensor is None:
        return None
    probs = value.items[1].tensor.float()
    s = case.sizes
    maps = s["batch_size"] * s["num_heads"] * s["seq_len"] ** 2
    if probs.numel() != maps:
        return None
    return probs.reshape(s["batch_size"] * s["num_heads"], s["seq_len"],
                         s["seq_len"])


def figures(failed: set[str], runs: dict[str, TaskRun]
            ) -> list[MapFigure]:
    """One figure per failing attention item (the first readable case)."""
    found = []
    run = runs.get("task2")
    for item_id, (prefix, causal) in ITEMS.items():
        if item_id not in failed or run is None:
            continue
        for probe_id in run.probe_ids(prefix):
            result = run.result(probe_id)
            case = result.info.case
            student = _student_probs(result.value, case)
            if student is None:
                continue
            x, weights = case.float64()
            _, expected = reference.multi_head(
                x, weights, case.sizes["num_heads"], causal)
            found.append(MapFigure(
                item=item_id, case=case.describe(),
                panels=case.sizes["num_heads"], **MAP_LABELS, student=student,
                expected=expected.float(),
                title=(f"causal={causal}, sequence 0: your attention "
                       f"probabilities (top) and the expected ones "
                       f"(bottom)")))
            break
    return found
