"""The grader's reference: torch's own attention on the student's weights.

It is built on ``torch.nn.functional.scaled_dot_product_attention`` and
``multi_head_attention_forward`` (which submissions may not use), so shipping
the grader to students for self-checks reveals nothing they could hand in. The
kit's tests check that it agrees with the reference solution in ``solutions/``.

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


def multi_head(x: torch.Tensor, weights: dict[str, torch.Tensor],
               num_heads: int, causal: bool, *, mix: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """MultiHeadSelfAttention's (att, probs) in eval mode, computed by
    ``torch.nn.functional.multi_head_attention_forward`` (torch's own
    multi-head attention: the head split, scores, softmax, values and
    merge all happen inside it).

    probs are [batch * num_heads, seq, seq], batch-major; with ``causal``
    position i attends to j <= i. ``mix=False``: att before ``mix`` (the
    merged heads).
    """
    q, k, v = (project(x, weights, n).transpose(0, 1) for n in "qkv")
    hidden, seq = q.shape[-1], q.shape[0]
    own = torch.eye(hidden, dtype=x.dtype)
    if mix:
        out_weight, out_bias = weights["mix.weight"], weights["mix.bias"]
    else:
        out_weight, out_bias = own, None
    mask = (torch.ones(seq, seq, dtype=torch.bool).triu(1) if causal
            else None)
    att, probs = F.multi_head_attention_forward(
        q, k, v, hidden, num_heads, None, None, None, None, False, 0.0,
        out_weight, out_bias, training=False, need_weights=True,
        attn_mask=mask, use_separate_proj_weight=True, q_proj_weight=own,
        k_proj_weight=own, v_proj_weight=own, average_attn_weights=False)
    return att.transpose(0, 1), probs.flatten(0, 1)
