"""Honest control of principle 4: calls that run what their code names.

Correct attention whose operations reach torch through C helpers and
stored values, each named by the visible source where it runs or where
it was stored: a ``functools.partial`` of ``F.softmax`` kept in an
attribute, a closure over ``torch.bmm`` made by a helper,
``operator.methodcaller("transpose", 1, 2)`` and ``getattr(torch,
"bmm")`` with their names written on the line, ``map(torch.clone,
...)`` drained by an unpacking, ``functools.reduce(torch.matmul, ...)``
and ``sorted(..., key=...)`` of plain numbers.

Expected: full marks, as the plain reference: nothing is flagged.
"""
import functools
import operator
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


def _pair(op: Callable) -> Callable:
    """A function of two tensors that runs ``op`` on them."""
    return lambda a, b: op(a, b)


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections."""
        # YOUR CODE STARTS HERE
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5
        self.normalise = functools.partial(F.softmax, dim=-1)
        self.weigh = _pair(torch.bmm)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v."""
        # YOUR CODE STARTS HERE
        order = sorted((2, 0, 1), key=abs)
        q, k, v = map(torch.clone, [(self.q, self.k, self.v)[i](x)
                                    for i in order])
        # [batch_size, seq_len, hidden] each
        kt = operator.methodcaller("transpose", 1, 2)(k)
        # [batch_size, hidden, seq_len]
        scores = getattr(torch, "bmm")(q, kt) / self.scale
        # [batch_size, seq_len, seq_len]
        probs = self.normalise(scores)  # [batch_size, seq_len, seq_len]
        half = self.weigh(probs, v * 0.5)  # [batch_size, seq_len, hidden]
        return functools.reduce(torch.add, (half, half))
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking and dropout."""

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        """Create the projections, the mixing layer and the dropout."""
        if hidden % num_heads:
            raise ValueError(f"hidden should be divisible by num_heads, "
                             f"but got hidden={hidden} and "
                             f"num_heads={num_heads}")
        super().__init__()

        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.scale = self.head_size ** 0.5
        self.causal = causal  # causal masking

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """Compute multi-head self-attention."""
        bs, seq, _ = x.shape

        # YOUR CODE STARTS HERE
        q = self.q(x).view(bs, seq, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        q = q.transpose(1, 2).reshape(bs * self.num_heads, seq, self.head_size)
        # [batch_size * num_heads, seq_len, head_size]
        k = self.k(x).view(bs, seq, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        k = k.transpose(1, 2).reshape(bs * self.num_heads, seq, self.head_size)
        # [batch_size * num_heads, seq_len, head_size]
        v = self.v(x).view(bs, seq, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        v = v.transpose(1, 2).reshape(bs * self.num_heads, seq, self.head_size)
        # [batch_size * num_heads, seq_len, head_size]
        scores = torch.bmm(q, k.transpose(1, 2)) / self.scale
        # [batch_size * num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool,
                              device=scores.device).triu(diagonal=1)
            # [seq_len, seq_len]
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size * num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        probs = torch.softmax(scores, dim=-1)
        # [batch_size * num_heads, seq_len, seq_len]
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
        att = torch.bmm(probs, v)
        # [batch_size * num_heads, seq_len, head_size]
        att = att.view(bs, self.num_heads, seq, self.head_size)
        # [batch_size, num_heads, seq_len, head_size]
        att = att.transpose(1, 2).reshape(bs, seq, -1)
        # [batch_size, seq_len, hidden]
        att = self.mix(att)  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
