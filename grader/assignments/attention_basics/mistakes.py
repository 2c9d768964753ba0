"""Known mistakes, reproduced, so that a failing item can say what is wrong.

Each ``*_variant`` function computes, in float64, what a submission with one
classic mistake returns on a case (its keyword arguments name the mistake),
from what torch's own (forbidden) attention kernels compute: scores are read
off ``scaled_dot_product_attention`` and the head layout off
``multi_head_attention_forward`` (:mod:`grader.assignments.attention`), so
nothing here can be handed in (docs/threat-model.md, principle 10).
:func:`matching` reports which variants a student's output equals, NaN included
(a mask that hides the diagonal gives the first token a NaN row).

The scale a submission divided its scores by is recovered from its output
(:func:`fit_scale`), which tells ``no_scaling`` (1) from ``wrong_scale``
(any other wrong constant). :func:`two_mistakes` names two mistakes
that coexist (the composites ``python -m grader audit --pairs`` grades).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch

from grader.api import ATOL, RTOL, Case, fit_log_scale
from grader.assignments import attention
from grader.assignments.attention_basics import reference

NEG_INF = float("-inf")


def same(student: torch.Tensor, expected: torch.Tensor) -> bool:
    """The rubric's match (rtol 1e-4, atol 1e-5), NaN equal to NaN."""
    if tuple(student.shape) != tuple(expected.shape):
        return False
    return bool(torch.allclose(student.float(), expected.float(),
                               rtol=RTOL, atol=ATOL, equal_nan=True))


def matching(student: torch.Tensor,
             variants: dict[str, Callable[[], torch.Tensor]]) -> list[str]:
    """The ids of the variants whose output equals ``student``."""
    found = []
    for mistake, compute in variants.items():
        try:
            if mistake not in found and same(student, compute()):
                found.append(mistake)
        except (RuntimeError, ValueError, IndexError):
            continue
    return found


def _normalise(scores: torch.Tensor, divisor: float, softmax_dim: int,
               normalise: str) -> torch.Tensor:
    if normalise == "sum":
        return scores / scores.sum(dim=-1, keepdim=True)
    return torch.softmax(scores / divisor, dim=softmax_dim)


def _mask(scores: torch.Tensor, diagonal: int, fill: float) -> torch.Tensor:
    n = scores.shape[-1]
    hidden = torch.ones(n, n, dtype=torch.bool).triu(diagonal)
    return scores.masked_fill(hidden, fill)


# --------------------------------------------------------------------------
# Task 1


def simple_variant(x: torch.Tensor, *, scale: float = 1.0,
                   softmax_dim: int = -1,
                   normalise: str = "softmax") -> torch.Tensor:
    """simple_self_attention with a scale, axis or normalisation mistake."""
    x = x.double()
    weights = _normalise(attention.kernel_scores(x, x), scale, softmax_dim,
                         normalise)
    return weights @ x


# --------------------------------------------------------------------------
# Tasks 2-4: one head


def single_variant(case: Case, *, scale: float | None = None,
                   softmax_dim: int = -1, normalise: str = "softmax",
                   causal: bool = False, masked: bool = True,
                   diagonal: int = 1, fill: float = NEG_INF,
                   transpose_batch: bool = False) -> torch.Tensor:
    """SelfAttention_v1/v2 (``causal=False``) or CausalAttention."""
    x, weights = case.float64()
    if "W_query" in weights:  # SelfAttention_v1: x @ W
        q, k, v = (x @ weights[n] for n in reference.PROJECTIONS)
    else:
        q, k, v = (reference.linear(x, weights, n)
                   for n in reference.PROJECTIONS)
    keys = k.permute(2, 1, 0) if transpose_batch else k.transpose(-2, -1)
    scores = attention.kernel_scores(q, keys.transpose(-2, -1))
    if causal and masked:
        scores = _mask(scores, diagonal, fill)
    divisor = k.shape[-1] ** 0.5 if scale is None else scale
    return _normalise(scores, divisor, softmax_dim, normalise) @ v


# --------------------------------------------------------------------------
# Task 6: heads from weight splits


def multi_variant(case: Case, *, scale: float | None = None,
                  softmax_dim: int = -1, split_transpose: bool = True,
                  merge_transpose: bool = True, out_proj: bool = True,
                  masked: bool = True, diagonal: int = 1,
                  fill: float = NEG_INF) -> torch.Tensor:
    """MultiHeadAttention in eval mode with one mistake."""
    x, weights = case.float64()
    b, n = x.shape[:2]
    heads = case.sizes["num_heads"]

    def split(t: torch.Tensor) -> torch.Tensor:
        if split_transpose:
            return attention.split_heads(t, heads)
        return t.reshape(b, heads, n, -1)

    q, k, v = (split(reference.linear(x, weights, name))
               for name in reference.PROJECTIONS)
    scores = attention.kernel_scores(q, k)
    if masked:
        scores = _mask(scores, diagonal, fill)
    divisor = k.shape[-1] ** 0.5 if scale is None else scale
    context = torch.softmax(scores / divisor, dim=softmax_dim) @ v
    if merge_transpose:
        merged = attention.merge_heads(context)
    else:
        merged = context.reshape(b, n, -1)
    if not out_proj:
        return merged
    return reference.linear(merged, weights, "out_proj")


# --------------------------------------------------------------------------
# Task 7: one fused projection


def qkv_variant(case: Case, *, mask: torch.Tensor | None = None,
                scale: float | None = None, softmax_dim: int = -1,
                chunk_first: bool = False, split_permute: bool = True,
                merge_permute: bool = True,
                linear_layer: bool = True) -> torch.Tensor:
    """QKVMultiheadAttention with one mistake.

    ``chunk_first``: q, k, v are the three thirds of qkv_layer's output,
    each then split into heads (another reading of the fused layer).
    ``split_permute=False``: [b, tokens, 3 * d_model] reshaped straight to
    [b, heads, tokens, 3 * head_dim]. ``merge_permute=False``: [b, heads,
    tokens, head_dim] reshaped straight to [b, tokens, d_model] (the
    lecture notes' own bug).
    """
    x, weights = case.float64()
    b, n = x.shape[:2]
    heads = case.sizes["num_heads"]
    qkv = reference.linear(x, weights, "qkv_layer")
    if chunk_first:
        q, k, v = (attention.split_heads(t, heads)
                   for t in qkv.chunk(3, dim=-1))
    elif split_permute:
        q, k, v = attention.split_heads(qkv, heads).chunk(3, dim=-1)
    else:
        q, k, v = qkv.reshape(b, heads, n, -1).chunk(3, dim=-1)
    divisor = k.shape[-1] ** 0.5 if scale is None else scale
    scores = attention.kernel_scores(q, k, divisor)
    if mask is not None:  # additive: 0 or -inf
        scores = scores + mask.double()
    context = torch.softmax(scores, dim=softmax_dim) @ v
    merged = (attention.merge_heads(context) if merge_permute
              else context.reshape(b, n, -1))
    if not linear_layer:
        return merged
    return reference.linear(merged, weights, "linear_layer")


# --------------------------------------------------------------------------
# Scales


def fit_scale(variant: Callable[[float], torch.Tensor],
              student: torch.Tensor) -> float | None:
    """The constant c for which ``variant(c)`` equals ``student``, if any.

    A golden-section search on log c over [1e-2, 1e3] of the squared
    error; returned only when the output at c matches the student's.
    """
    if not torch.isfinite(student).all():
        return None

    def error(scale: float) -> float:
        diff = variant(scale) - student.double()
        return float((diff ** 2).sum())

    try:
        c = fit_log_scale(error)
        return c if same(student, variant(c)) else None
    except RuntimeError:  # a shape the variant cannot produce
        return None


def two_mistakes(student: torch.Tensor, variant: Callable[..., torch.Tensor],
                 known: list[tuple[str, dict]], expected_scale: float,
                 sizes: dict[str, int]) -> tuple[list[str], str]:
    """Two mistakes of ``known`` (id, the variant's keyword arguments)
    together: the first pair whose arguments do not overlap and whose
    variant equals ``student``, else the first mistake that does with a
    scale mistake too. ``([], "")`` when none explains it."""
    for (first, one), (second, other) in itertools.combinations(known, 2):
        if set(one) & set(other):
            continue
        if matching(student, {"both": lambda: variant(**one, **other)}):
            return list(dict.fromkeys([first, second])), ""
    for name, kwargs in known:
        ids, words = scale_diagnosis(fit_scale(
            lambda c: variant(scale=c, **kwargs), student), expected_scale,
            sizes)
        if ids:
            return [name] + ids, words
    return [], ""


def scale_candidates(sizes: dict[str, int]) -> dict[str, float]:
    """The size expressions a scale constant may equal, by name."""
    candidates = {}
    for key in ("head_dim", "d_out", "d_in", "num_tokens", "num_heads"):
        if key in sizes:
            candidates[f"sqrt({key})"] = math.sqrt(sizes[key])
            candidates[key] = float(sizes[key])
    candidates["1"] = 1.0
    return candidates


def name_scale(value: float, sizes: dict[str, int]) -> str:
    """Describe a scale constant by the size expression it equals."""
    return attention.name_scale(value, scale_candidates(sizes))


def scale_diagnosis(c: float | None, expected: float,
                    sizes: dict[str, int]) -> tuple[list[str], str]:
    """Ids and words for a recovered scale constant."""
    return attention.scale_diagnosis(c, expected, scale_candidates(sizes))


# --------------------------------------------------------------------------
# Reading attention weights back from an output


def recover_weights(output: torch.Tensor, values: torch.Tensor,
                    rows: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The weights A with A @ values = output, and the relative residual.

    ``values`` [..., num_tokens, d] of rank num_tokens (d_in and d both
    larger) make A unique; a large residual says the output is not a mix
    of the value vectors at all. Only the tokens where ``rows`` [...,
    num_tokens] is True are solved for and measured (the others are 0).
    """
    values = values.double()
    output = torch.where(rows[..., None], output.double(), 0.0)
    weights = torch.linalg.lstsq(values.transpose(-2, -1),
                                 output.transpose(-2, -1)).solution
    weights = weights.transpose(-2, -1)
    residual = (weights @ values - output).abs()[rows]
    if residual.numel() == 0:
        return weights, 0.0
    scale = output.abs().max().clamp_min(1e-12)
    return weights, float(residual.max() / scale)


#: How the heads of task 6 may be split (values) and merged (output):
#: (split_transpose, merge_transpose), the reference's first, then the
#: layouts of ``reshape_not_transpose`` (judged by task6.values, so that
#: the dropout point reads the weights in the code's own layout).
LAYOUTS = ((True, True), (False, True), (True, False), (False, False))


def dropout_values(case: Case, task: str,
                   split_transpose: bool = True) -> torch.Tensor:
    """The value vectors of the dropout case, head_dim-wide per head
    (``split_transpose`` False: heads split by reshape alone)."""
    x, weights = case.float64()
    values = reference.linear(x, weights, "W_value")
    if task == "task6":
        heads = case.sizes["num_heads"]
        if split_transpose:
            return attention.split_heads(values, heads)
        return values.reshape(values.shape[0], heads, values.shape[1], -1)
    return values


def row_fates(output: torch.Tensor, weights: torch.Tensor,
              values: torch.Tensor, p: float
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """How a training call dropped causal attention weights, read from
    its ``output`` [..., num_tokens, d] when the values are too narrow
    to solve for the weights: for each row i, every way of keeping
    some of its weights a_ij (j <= i, scaled by 1 / (1 - p)) and
    dropping the others is tried, and the sum of the kept weights times
    the value vectors closest to the output's row is its reading.

    Returns ``(dropped, error)``: True where the closest way drops the
    weight [..., num_tokens, num_tokens] (False above the diagonal), and
    each row's distance to it relative to the output's scale
    [..., num_tokens]. A row that dropout on the weights made is within
    float32 rounding of one way; dropout anywhere else (the values, the
    context vectors, the scores) leaves rows no way comes near.
    """
    output, weights, values = output.double(), weights.double(), \
        values.double()
    n = weights.shape[-1]
    scale = float(output.abs().max().clamp_min(1e-12))
    dropped = torch.zeros(weights.shape, dtype=torch.bool)
    error = torch.zeros(weights.shape[:-1], dtype=torch.float64)
    for i in range(n):
        size = i + 1
        ways = torch.tensor(list(itertools.product((0.0, 1.0),
                                                   repeat=size)),
                            dtype=torch.float64)          # [2**size, size]
        terms = weights[..., i, :size, None] * values[..., :size, :] \
            / (1 - p)                                      # [..., size, d]
        sums = torch.einsum("wj,...jd->...wd", ways, terms)
        distance = (sums - output[..., i, None, :]).abs().amax(-1)
        best, index = distance.min(-1)
        error[..., i] = best / scale
        dropped[..., i, :size] = ways[index] == 0
    return dropped, error


def merged_output(output: torch.Tensor, case: Case, task: str,
                  merge_transpose: bool = True) -> torch.Tensor:
    """The output split per head (task 6: out_proj is the identity;
    ``merge_transpose`` False: heads merged by reshape alone)."""
    output = output.double()
    if task != "task6":
        return output
    heads = case.sizes["num_heads"]
    if merge_transpose:
        return attention.split_heads(output, heads)
    return output.reshape(output.shape[0], heads, output.shape[1], -1)


def weights_layout(output: torch.Tensor, case: Case, task: str
                   ) -> tuple[bool, bool]:
    """The first of :data:`LAYOUTS` (task 4: the only one) in which the
    dropout case's ``output`` is a mix of the value vectors per head;
    the reference's when none is."""
    if task != "task6":
        return LAYOUTS[0]
    for split, merge in LAYOUTS:
        merged = merged_output(output, case, task, merge)
        rows = torch.isfinite(merged).all(-1)
        _, residual = recover_weights(
            merged, dropout_values(case, task, split), rows)
        if rows.any() and residual <= 1e-4:
            return split, merge
    return LAYOUTS[0]
