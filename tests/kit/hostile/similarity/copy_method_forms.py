"""A disguised copy of ``submissions/diagnoses/correct_where_head_loop.py``
(principle 9): steps moved into private methods of the class, names
changed, and calls respelt in the other form: functions imported by name
(``matmul``, ``softmax``), ``k.t()`` for ``k.T``, ``swapaxes(-1, -2)`` for
``.mT``, ``transpose(2, 1)`` for ``permute(0, 2, 1, 3)``, ``torch.reshape``
with a tuple for ``view``, ``nn.Softmax(dim=-1)(x)`` for ``x.softmax(dim=
-1)``, keywords for positional arguments and back, ``-math.inf``, the
operands of ``*`` swapped, ``range(0, n)`` and ``.contiguous()`` added.
"""
import math

import torch
import torch.nn as nn
from torch import matmul
from torch.nn.functional import softmax


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
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v."""
        # YOUR CODE STARTS HERE
        results = []
        for i in range(0, x.size(0)):
            query, key, value = self.q(x[i]), self.k(x[i]), self.v(x[i])
            # [seq_len, hidden]
            weights = softmax(matmul(query, key.t()) / self.scale, dim=-1)
            # [seq_len, seq_len]
            results.append(matmul(weights, value))  # [seq_len, hidden]
        return torch.stack(tensors=results)  # [batch_size, seq_len, hidden]
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

    def _cols(self, t, j):
        """Head ``j``'s columns of ``t``."""
        return t[:, :, self.head_size * j:self.head_size * (1 + j)]

    def _logits(self, a, b):
        """One score matrix per head, stacked on axis 1."""
        per_head = [matmul(self._cols(a, j),
                           self._cols(b, j).swapaxes(-1, -2))
                    for j in range(0, self.num_heads)]
        # [batch_size, seq_len, seq_len] each
        return torch.stack(per_head, 1)  # [bs, heads, seq, seq]

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """Compute multi-head self-attention."""
        bs, seq, _ = x.shape

        # YOUR CODE STARTS HERE
        qs, ks, vs = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        logits = torch.div(self._logits(qs, ks), self.scale)
        # [batch_size, num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            allowed = torch.tril(torch.ones((seq, seq), dtype=torch.bool),
                                 diagonal=0)
            # [seq_len, seq_len]
            logits = torch.where(allowed, logits, -math.inf)
            # [batch_size, num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        probs = torch.flatten(self.dropout(nn.Softmax(dim=-1)(logits)),
                              start_dim=0, end_dim=1)
        # [batch_size * num_heads, seq_len, seq_len]
        per_head_v = torch.reshape(
            vs, (bs, seq, self.num_heads, -1)).transpose(2, 1)
        # [batch_size, num_heads, seq_len, head_size]
        att = matmul(torch.reshape(probs, (bs, self.num_heads, seq, seq)),
                     per_head_v)
        # [batch_size, num_heads, seq_len, head_size]
        att = self.mix(att.transpose(2, 1).contiguous().view(bs, seq, -1))
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
