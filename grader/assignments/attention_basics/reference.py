"""The grader's reference: torch's own attention on the student's weights.

Every function is built on ``torch.nn.functional.scaled_dot_product_attention``
(which submissions may not use), applied to the weights the grader loaded
into the student's module, so shipping the grader reveals nothing a student
could hand in. The kit's tests check that it agrees with the reference
solution ``solutions/attention_basics.py``.

Weights are dicts keyed by the modules' parameter names (``W_query`` for
``SelfAttention_v1``, ``W_query.weight`` and ``W_query.bias`` for the
``nn.Linear`` versions, ``heads.0.W_query.weight`` for the wrapper,
``qkv_layer.weight`` for the fused version). All attention functions take
float64 tensors and return float64 tensors.

:func:`documented_weights` recreates the parameters a module creates, in
the order its docstring documents, after ``torch.manual_seed(seed)``: the
weights behind the numbers the lecture notes printed.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from grader.assignments import attention

Weights = dict[str, torch.Tensor]
PROJECTIONS = ("W_query", "W_key", "W_value")


def linear(x: torch.Tensor, weights: Weights, name: str) -> torch.Tensor:
    """Apply the ``nn.Linear`` called ``name`` (its bias if it has one)."""
    return F.linear(x, weights[f"{name}.weight"],
                    weights.get(f"{name}.bias"))


def simple_self_attention(x: torch.Tensor) -> torch.Tensor:
    """softmax(x x^T) x, unscaled, for one sequence [num_tokens, d_in]."""
    return F.scaled_dot_product_attention(x, x, x, scale=1.0)


def self_attention_v1(x: torch.Tensor, weights: Weights) -> torch.Tensor:
    """``SelfAttention_v1``: x @ W, scaled by sqrt(d_out)."""
    q, k, v = (x @ weights[name] for name in PROJECTIONS)
    return F.scaled_dot_product_attention(q, k, v)


def self_attention_v2(x: torch.Tensor, weights: Weights) -> torch.Tensor:
    """``SelfAttention_v2``: nn.Linear projections, scaled by sqrt(d_out)."""
    q, k, v = (linear(x, weights, name) for name in PROJECTIONS)
    return F.scaled_dot_product_attention(q, k, v)


def causal_attention(x: torch.Tensor, weights: Weights,
                     prefix: str = "") -> torch.Tensor:
    """``CausalAttention`` in eval mode: token i attends to j <= i."""
    q, k, v = (linear(x, weights, prefix + name) for name in PROJECTIONS)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def causal_weights(x: torch.Tensor, weights: Weights,
                   num_heads: int = 1) -> torch.Tensor:
    """``CausalAttention``'s attention weights [..., num_tokens,
    num_tokens] (attending to the identity returns the weights); with
    ``num_heads`` > 1, ``MultiHeadAttention``'s, [batch_size, num_heads,
    num_tokens, num_tokens]."""
    q, k = (linear(x, weights, name) for name in PROJECTIONS[:2])
    if num_heads > 1:
        q, k = (attention.split_heads(t, num_heads) for t in (q, k))
    n = x.shape[-2]
    identity = torch.eye(n, dtype=x.dtype).expand(*q.shape[:-2], n, n)
    return F.scaled_dot_product_attention(q, k, identity, is_causal=True)


def wrapper(x: torch.Tensor, weights: Weights,
            num_heads: int) -> torch.Tensor:
    """``MultiHeadAttentionWrapper``: the heads side by side, head 0 first."""
    return torch.cat([causal_attention(x, weights, f"heads.{h}.")
                      for h in range(num_heads)], dim=-1)


def multi_head_attention(x: torch.Tensor, weights: Weights,
                         num_heads: int) -> torch.Tensor:
    """``MultiHeadAttention`` in eval mode (causal, then ``out_proj``)."""
    q, k, v = (attention.split_heads(linear(x, weights, name), num_heads)
               for name in PROJECTIONS)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return linear(attention.merge_heads(heads), weights, "out_proj")


def causal_additive_mask(num_tokens: int,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive causal mask: 0 on and below the diagonal, -inf above."""
    return torch.triu(torch.full((num_tokens, num_tokens), float("-inf"),
                                 dtype=dtype), diagonal=1)


def padding_additive_mask(batch_size: int, num_tokens: int,
                          dtype: torch.dtype = torch.float32
                          ) -> torch.Tensor:
    """An additive padding mask, [batch_size, 1, 1, num_tokens]: sequence b
    hides its last 1 + b % (num_tokens - 1) keys (-inf), never all of them,
    so no row of scores is all -inf and the hidden keys differ between
    sequences (a causal mask applied instead differs from it)."""
    mask = torch.zeros(batch_size, 1, 1, num_tokens, dtype=dtype)
    for b in range(batch_size):
        hidden = 1 + b % max(num_tokens - 1, 1)
        mask[b, ..., num_tokens - hidden:] = float("-inf")
    return mask


def per_head_additive_mask(batch_size: int, num_heads: int,
                           num_tokens: int,
                           dtype: torch.dtype = torch.float32
                           ) -> torch.Tensor:
    """An additive mask of its own for each sequence and head, [batch_size,
    num_heads, num_tokens, num_tokens] (the widest shape the docstring
    allows): head h of sequence b is causal when b + h is even, else it
    hides the last 1 + (b + h) % (num_tokens - 1) keys of every query.
    No row is all -inf, and with two heads or more, head 0's mask is not
    every head's (code that keeps one head's mask, or one sequence's,
    differs from the reference)."""
    mask = torch.zeros(batch_size, num_heads, num_tokens, num_tokens,
                       dtype=dtype)
    causal = causal_additive_mask(num_tokens, dtype)
    for b in range(batch_size):
        for h in range(num_heads):
            if (b + h) % 2 == 0:
                mask[b, h] = causal
            else:
                hidden = 1 + (b + h) % max(num_tokens - 1, 1)
                mask[b, h, :, num_tokens - hidden:] = float("-inf")
    return mask


def qkv_attention(x: torch.Tensor, weights: Weights, num_heads: int,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """``QKVMultiheadAttention``: head h reads its q, k, v (head_dim each)
    from columns 3 * head_dim * h onwards of ``qkv_layer``'s output."""
    qkv = attention.split_heads(linear(x, weights, "qkv_layer"), num_heads)
    q, k, v = qkv.chunk(3, dim=-1)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return linear(attention.merge_heads(heads), weights, "linear_layer")


# --------------------------------------------------------------------------
# The documented initialisation


def _linears(prefix: str, d_in: int, d_out: int, bias: bool) -> Weights:
    found = {}
    for name in PROJECTIONS:
        layer = nn.Linear(d_in, d_out, bias=bias)
        found[f"{prefix}{name}.weight"] = layer.weight.detach().clone()
        if bias:
            found[f"{prefix}{name}.bias"] = layer.bias.detach().clone()
    return found


def _layer(name: str, d_in: int, d_out: int) -> Weights:
    layer = nn.Linear(d_in, d_out)
    return {f"{name}.weight": layer.weight.detach().clone(),
            f"{name}.bias": layer.bias.detach().clone()}


def _create(target: str, args: tuple, bias: bool) -> Weights:
    if target == "SelfAttention_v1":
        d_in, d_out = args[:2]
        return {name: torch.rand(d_in, d_out) for name in PROJECTIONS}
    if target in ("SelfAttention_v2", "CausalAttention"):
        return _linears("", args[0], args[1], bias)
    if target == "MultiHeadAttentionWrapper":
        d_in, d_out, _, _, num_heads = args[:5]
        weights: Weights = {}
        for head in range(num_heads):  # one CausalAttention after another
            weights.update(_linears(f"heads.{head}.", d_in, d_out, bias))
        return weights
    if target == "MultiHeadAttention":
        d_in, d_out = args[:2]
        return {**_linears("", d_in, d_out, bias),
                **_layer("out_proj", d_out, d_out)}
    if target == "QKVMultiheadAttention":
        input_dim, d_model = args[:2]
        return {**_layer("qkv_layer", input_dim, 3 * d_model),
                **_layer("linear_layer", d_model, d_model)}
    raise KeyError(f"no documented initialisation for {target}")


def documented_weights(target: str, args: tuple, seed: int,
                       qkv_bias: bool = False) -> Weights:
    """The parameters ``target(*args, qkv_bias=qkv_bias)`` creates after
    ``torch.manual_seed(seed)`` when it follows its docstring (float32).

    The global random state of the calling process is left untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _create(target, tuple(args), qkv_bias)
