"""A disguised copy of ``submissions/correct_head_loop.py`` (principle 9):
both head loops moved into module-level helpers written as ``while``
counter loops, names changed, statements reordered, and every call respelt
by an API synonym: ``torch.matmul`` for ``@``, ``permute(0, 2, 1)`` for
``transpose(1, 2)``, ``F.softmax(x, -1)``, ``torch.div``, ``-float("inf")``,
``torch.triu(t, 1)`` for ``t.triu(diagonal=1)``, ``[..., i]`` for ``[:, :,
i]``, and the return flipped under ``if not return_attention``.
"""
import torch
import torch.nn.functional as F
import torch.nn as nn


def _head_scores(a, b, n, size):
    out = []
    i = 0
    while i < n:
        part = slice(i * size, (i + 1) * size)
        out.append(torch.matmul(a[..., part], b[..., part].permute(0, 2, 1)))
        i += 1
    return torch.stack(out, 1)  # [bs, heads, seq, seq]


def _combine(weights, vals, n, size):
    res = []
    i = 0
    while i < n:
        part = slice(i * size, (i + 1) * size)
        res.append(torch.matmul(weights[:, i], vals[..., part]))
        i += 1
    return torch.cat(res, -1)  # [bs, seq, hidden]


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
        outputs = []
        for b in range(x.shape[0]):
            q = self.q(x[b])  # [seq_len, hidden]
            k = self.k(x[b])  # [seq_len, hidden]
            v = self.v(x[b])  # [seq_len, hidden]
            probs = torch.softmax(q @ k.T / self.scale, dim=-1)
            # [seq_len, seq_len]
            outputs.append(probs @ v)  # [seq_len, hidden]
        return torch.stack(outputs)  # [batch_size, seq_len, hidden]
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
        n_batch, n_tok, _ = x.shape
        keys = self.k(x)  # [bs, seq, hidden]
        queries = self.q(x)  # [bs, seq, hidden]
        values = self.v(x)  # [bs, seq, hidden]
        sc = _head_scores(queries, keys, self.num_heads, self.head_size)
        # [bs, heads, seq, seq]
        sc = torch.div(sc, self.scale)  # [bs, heads, seq, seq]
        if self.causal:
            upper = torch.triu(torch.ones(n_tok, n_tok, device=sc.device,
                                          dtype=torch.bool), 1)
            # [seq, seq]
            sc = sc.masked_fill(upper, -float("inf"))  # [bs, heads, seq, seq]
        p_att = self.dropout(F.softmax(sc, -1))  # [bs, heads, seq, seq]
        mixed = self.mix(_combine(p_att, values, self.num_heads,
                                  self.head_size))  # [bs, seq, hidden]
        if not return_attention:
            return mixed
        return mixed, p_att.reshape(-1, n_tok, n_tok)
