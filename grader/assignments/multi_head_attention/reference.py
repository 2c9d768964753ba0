"""The grader's reference: torch's own attention on the student's weights.

It is built on ``torch.nn.functional.scaled_dot_product_attention`` (which
submissions may not use), so shipping the grader to students for
self-checks reveals nothing they could hand in. The kit's tests check that
it agrees with the reference solution in ``solutions/``.

All functions take float64 tensors and return float64 tensors.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def project(x: torch.Tensor, weights: dict[str, torch.Tensor],
            name: str) -> torch.Tensor:
    """Apply the linear layer ``name`` (e.g. ``"q"``) of ``weights``."""
    return F.linear(x, weights[f"{name}.weight"], weights[f"{name}.bias"])


def self_attention(x: torch.Tensor, weights: dict[str, torch.Tensor],
                   scale: float | None = None) -> torch.Tensor:
    """SelfAttention's output; scores divided by ``scale``.

    ``scale`` defaults to sqrt(hidden); ``scale=1`` is the unscaled variant.
    """
    q, k, v = (project(x, weights, n) for n in "qkv")
    divisor = q.shape[-1] ** 0.5 if scale is None else scale
    return F.scaled_dot_product_attention(q, k, v, scale=1.0 / divisor)


def heads_first(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[batch, seq, hidden] -> [batch, num_heads, seq, head_size]."""
    return t.unflatten(-1, (num_heads, -1)).movedim(-2, -3)


def multi_head(x: torch.Tensor, weights: dict[str, torch.Tensor],
               num_heads: int, causal: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """MultiHeadSelfAttention's (att, probs) in eval mode.

    probs are [batch * num_heads, seq, seq], batch-major; with ``causal``
    position i attends to j <= i.
    """
    q, k, v = (heads_first(project(x, weights, n), num_heads)
               for n in "qkv")
    scale = 1.0 / q.shape[-1] ** 0.5
    seq = x.shape[-2]
    # Attending to the identity matrix returns the probabilities themselves.
    identity = torch.eye(seq, dtype=x.dtype).expand(*q.shape[:-2], seq, seq)
    probs = F.scaled_dot_product_attention(q, k, identity, scale=scale,
                                           is_causal=causal)
    heads = F.scaled_dot_product_attention(q, k, v, scale=scale,
                                           is_causal=causal)
    merged = heads.movedim(-3, -2).flatten(-2)
    att = F.linear(merged, weights["mix.weight"], weights["mix.bias"])
    return att, probs.flatten(0, 1)
