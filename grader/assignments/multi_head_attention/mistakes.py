"""Known mistakes, reproduced, so that a failing item can say what is wrong.

Each function computes what a submission with one classic mistake would
return on a case; :func:`matching` reports which variants a student's
output equals. The scale a submission used is recovered from its output
(:func:`fit_scale_output`) or, for probabilities, in closed form
(:func:`fit_scale_probs`), which tells ``no_scaling`` (scale 1) from
``wrong_scale`` (any other wrong constant).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from grader.assignments.multi_head_attention import reference
from grader.checking import close
from grader.fitting import fit_log_scale
from grader.plan import Case


def _heads(case: Case, merge_transpose: bool = True,
           split_transpose: bool = True) -> dict[str, torch.Tensor]:
    """q, k, v as [batch * heads, seq, head_size] (optionally mis-split)."""
    x, weights = case.float64()
    bs, seq = x.shape[:2]
    heads = case.sizes["num_heads"]
    out = {}
    for name in "qkv":
        t = reference.project(x, weights, name)
        if split_transpose:
            t = reference.heads_first(t, heads)
        out[name] = t.reshape(bs * heads, seq, -1)
    return out


def probs_variant(case: Case, *, scale: float | None = None,
                  softmax_dim: int = -1, split_transpose: bool = True,
                  causal: bool = False, diagonal: int = 1,
                  fill: float = float("-inf")) -> torch.Tensor:
    """Multi-head probabilities with one mistake (defaults: correct)."""
    parts = _heads(case, split_transpose=split_transpose)
    q, k = parts["q"], parts["k"]
    divisor = q.shape[-1] ** 0.5 if scale is None else scale
    scores = q @ k.transpose(1, 2) / divisor
    if causal:
        seq = scores.shape[-1]
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal)
        scores = scores.masked_fill(mask, fill)
    return torch.softmax(scores, dim=softmax_dim)


def output_variant(case: Case, *, probs: torch.Tensor | None = None,
                   split_transpose: bool = True,
                   merge_transpose: bool = True,
                   mix: bool = True) -> torch.Tensor:
    """Multi-head output from ``probs`` with a mistake in values/merge."""
    x, weights = case.float64()
    bs, seq = x.shape[:2]
    heads = case.sizes["num_heads"]
    if probs is None:
        probs = probs_variant(case, split_transpose=split_transpose)
    v = _heads(case, split_transpose=split_transpose)["v"]
    att = probs @ v
    if merge_transpose:
        att = att.reshape(bs, heads, seq, -1).transpose(1, 2)
    att = att.reshape(bs, seq, -1)
    if mix:
        att = torch.nn.functional.linear(att, weights["mix.weight"],
                                         weights["mix.bias"])
    return att


def self_attention_variant(case: Case, *, scale: float | None = None,
                           softmax_dim: int = -1) -> torch.Tensor:
    """SelfAttention's output with a scale or softmax-dimension mistake."""
    x, weights = case.float64()
    q, k, v = (reference.project(x, weights, n) for n in "qkv")
    divisor = q.shape[-1] ** 0.5 if scale is None else scale
    probs = torch.softmax(q @ k.transpose(1, 2) / divisor, dim=softmax_dim)
    return probs @ v


def matching(student: torch.Tensor,
             variants: dict[str, Callable[[], torch.Tensor]]) -> list[str]:
    """The ids of the variants whose output equals ``student``."""
    found = []
    for mistake, compute in variants.items():
        try:
            if close(student, compute().float()):
                found.append(mistake)
        except RuntimeError:
            continue
    return found


def name_scale(value: float, sizes: dict[str, int]) -> str:
    """Describe a scale constant by the size expression it equals."""
    candidates = {"1": 1.0}
    for key in ("hidden", "input_size", "seq_len"):
        if key in sizes:
            candidates[key] = float(sizes[key])
            candidates[f"sqrt({key})"] = math.sqrt(sizes[key])
    if "num_heads" in sizes:
        head_size = sizes["hidden"] // sizes["num_heads"]
        candidates["head_size"] = float(head_size)
        candidates["sqrt(head_size)"] = math.sqrt(head_size)
        candidates["num_heads"] = float(sizes["num_heads"])
    for label, candidate in candidates.items():
        if abs(value - candidate) <= 1e-3 * max(1.0, candidate):
            return f"{value:.4g} = {label}"
    return f"{value:.4g}"


def fit_scale_probs(case: Case, student: torch.Tensor,
                    causal: bool = False) -> float | None:
    """The constant c with softmax(q k^T / c) = student, if there is one.

    From log p_ij = s_ij / c - logsumexp_i, centering each row removes the
    normaliser: c = sum(s_c^2) / sum(s_c * log(p)_c). The fit is returned
    only when it reproduces the student's probabilities.
    """
    parts = _heads(case)
    scores = parts["q"] @ parts["k"].transpose(1, 2)
    logs = torch.log(student.double().clamp_min(1e-300))
    if causal or not torch.all(student > 0):
        return None
    s_c = scores - scores.mean(-1, keepdim=True)
    l_c = logs - logs.mean(-1, keepdim=True)
    denominator = (s_c * l_c).sum()
    if denominator.abs() < 1e-12:
        return None
    c = float((s_c ** 2).sum() / denominator)
    if not math.isfinite(c) or c <= 0:
        return None
    if close(student, torch.softmax(scores / c, dim=-1).float()):
        return c
    return None


def fit_scale_output(case: Case, student: torch.Tensor) -> float | None:
    """The constant c for which SelfAttention's output equals ``student``.

    A golden-section search on log c over [1e-2, 1e3] of the squared error;
    returned only when the output at c matches the student's.
    """
    def error(scale: float) -> float:
        variant = self_attention_variant(case, scale=scale)
        return float(((variant - student.double()) ** 2).sum())

    c = fit_log_scale(error)
    if close(student, self_attention_variant(case, scale=c).float()):
        return c
    return None


def scale_diagnosis(c: float | None, expected: float,
                    sizes: dict[str, int]) -> tuple[list[str], str]:
    """Ids and words for a recovered scale constant."""
    if c is None or abs(c - expected) <= 1e-3 * expected:
        return [], ""
    if abs(c - 1.0) <= 1e-3:
        return ["no_scaling"], "The scores are not scaled at all."
    return ["wrong_scale"], (f"The scores are divided by "
                             f"{name_scale(c, sizes)}; expected "
                             f"{name_scale(expected, sizes)}.")
