"""Honest control of principle 4: operations passed as values, on the
file's own traced lines.

Correct attention whose operations are often values rather than calls:
``functools.reduce(operator.matmul, ...)``, ``functools.reduce(torch.add,
...)``, ``map`` over the layers, a softmax kept in an attribute
(``self.normalise = torch.softmax``), a library copy of a tensor
(``copy.deepcopy`` of a constant: a deep copy of an activation raises
with autograd on, as in a training step, and every probe family runs in
both modes, red team 10's R1). Each of these operations runs during a line of the
visible source (the C helpers ``reduce`` and ``map`` have no frame of
their own, so the line that calls them is where the operation is
chosen); its result's shape is verified by that line's comment.

Expected: full marks, as the plain reference: nothing is flagged.
"""
import copy
import functools
import operator

import torch
import torch.nn as nn


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
        self.normalise = torch.softmax
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v."""
        # YOUR CODE STARTS HERE
        q, k, v = map(lambda layer: layer(x), (self.q, self.k, self.v))
        # [batch_size, seq_len, hidden] each
        scores = functools.reduce(operator.matmul, (q, k.transpose(1, 2)))
        # [batch_size, seq_len, seq_len]
        probs = self.normalise(scores / self.scale, dim=-1)
        # [batch_size, seq_len, seq_len]
        half = torch.bmm(probs * copy.deepcopy(torch.tensor(0.5)), v)
        # [batch_size, seq_len, hidden]
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
