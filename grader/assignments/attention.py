"""What the attention plug-ins share (``attention_basics`` and
``multi_head_attention``): naming a scale constant a submission used, the
diagnosis it means, and the words of an attention-map picture. A plug-in
module, not a generic one: it may name attention."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

#: What the maps are, in the figures' words.
MAP_LABELS = {"panel_label": "head",
              "value_label": "attention probability",
              "column_label": "key position j",
              "row_label": "query position i"}


def name_scale(value: float, candidates: dict[str, float]) -> str:
    """``value`` with the first of ``candidates`` (label -> constant,
    e.g. ``"sqrt(head_size)"``) it equals, or alone."""
    for label, candidate in candidates.items():
        if abs(value - candidate) <= 1e-3 * max(1.0, candidate):
            return f"{value:.4g} = {label}"
    return f"{value:.4g}"


def scale_diagnosis(c: float | None, expected: float,
                    candidates: dict[str, float]) -> tuple[list[str], str]:
    """Diagnosis ids and words for a recovered scale constant ``c`` (None:
    no constant explains the output) where ``expected`` was due."""
    if c is None or abs(c - expected) <= 1e-3 * expected:
        return [], ""
    if abs(c - 1.0) <= 1e-3:
        return ["no_scaling"], "The scores are not scaled at all."
    return ["wrong_scale"], (f"The scores are divided by "
                             f"{name_scale(c, candidates)}; expected "
                             f"{name_scale(expected, candidates)}.")


def _broadcast(first: tuple[int, ...], second: tuple[int, ...]
               ) -> tuple[int, ...]:
    """The shape two batch shapes broadcast to. Not
    ``torch.broadcast_shapes``: in torch 2.13 its first call imports
    sympy (through ``torch._refs``), 11 % of a batch's CPU time when
    every judge did it (measured side by side on 46 files)."""
    width = max(len(first), len(second))
    first = (1,) * (width - len(first)) + tuple(first)
    second = (1,) * (width - len(second)) + tuple(second)
    if any(a != b and 1 not in (a, b) for a, b in zip(first, second)):
        raise ValueError(f"shapes {first} and {second} do not broadcast")
    return tuple(b if a == 1 else a for a, b in zip(first, second))


# --------------------------------------------------------------------------
# The grader's computations go through torch's own attention kernels
# (docs/threat-model.md, principle 10): these kernels are forbidden to
# submissions, so nothing below can be handed in. Scores and the head
# layout are read off the kernels' outputs; no correct head split, merge
# or score computation is written out here.


def kernel_scores(q: torch.Tensor, k: torch.Tensor,
                  scale: float = 1.0) -> torch.Tensor:
    """``q k^T / scale`` ([..., L, S]), read off
    ``scaled_dot_product_attention``: the kernel attends to the keys and
    one zero key (whose score is 0) with the identity as values, so the
    log-probabilities minus the zero key's are the scores. float64."""
    batch = _broadcast(q.shape[:-2], k.shape[:-2])
    q = q.double().expand(*batch, *q.shape[-2:])
    k = k.double().expand(*batch, *k.shape[-2:])
    keys = torch.cat([k, k.new_zeros(*batch, 1, k.shape[-1])], dim=-2)
    count = keys.shape[-2]
    identity = torch.eye(count, dtype=torch.float64).expand(
        *batch, count, count)
    probs = F.scaled_dot_product_attention(q, keys, identity,
                                           scale=1.0 / scale)
    return probs[..., :-1].log() - probs[..., -1:].log()


@functools.lru_cache(maxsize=64)
def _layout(batch: int, seq: int, width: int,
            num_heads: int) -> torch.Tensor:
    """Where torch's multi-head attention reads head h's feature d of
    position i of sequence b: an index [batch, num_heads, seq, width //
    num_heads] into the flattened [batch, seq, width] input.

    The kernel's query input holds each element's own (scaled) index, its
    keys are the unit vectors of one head's features, so its scores are
    the indices as the kernel splits them (read as in
    :func:`kernel_scores`, against the zero key it adds)."""
    size = width // num_heads
    total = batch * seq * width
    index = torch.arange(total, dtype=torch.float64) / total
    query = index.reshape(batch, seq, width).transpose(0, 1)
    keys = torch.eye(size, dtype=torch.float64).repeat(1, num_heads)
    keys = keys[:, None].expand(size, batch, width)
    own = torch.eye(width, dtype=torch.float64)
    _, probs = F.multi_head_attention_forward(
        query, keys, keys, width, num_heads, None,
        torch.zeros(3 * width, dtype=torch.float64), None, None, True, 0.0,
        own, None, training=False, need_weights=True,
        use_separate_proj_weight=True, q_proj_weight=own,
        k_proj_weight=own, v_proj_weight=own, average_attn_weights=False)
    scores = probs[..., :-1].log() - probs[..., -1:].log()
    return torch.round(scores * size ** 0.5 * total).long()


def split_heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[batch, seq, width] -> [batch, num_heads, seq, width // num_heads],
    as torch's multi-head attention splits it (:func:`_layout`)."""
    return t.flatten()[_layout(*t.shape, num_heads)]


def merge_heads(t: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`split_heads`: [batch, num_heads, seq, size]
    -> [batch, seq, num_heads * size]."""
    batch, heads, seq, size = t.shape
    merged = t.new_empty(batch * seq * heads * size)
    merged[_layout(batch, seq, heads * size, heads).flatten()] = t.flatten()
    return merged.reshape(batch, seq, heads * size)
