"""A disguised copy of ``submissions/correct_head_loop.py`` (principle 9):
both methods of both classes moved out into module-level functions with
other names, bound in the class bodies by assignment (``__init__ =
_sa_init``, ``forward = _sa_forward``), ``super().__init__()`` written
``nn.Module.__init__(self)``, the markers dropped, locals renamed. The
classes run the same methods, so they are graded the same; ``python -m
grader similarity`` must compare the functions as the methods they are
and rank this pair above every pair of independent solutions
(tests/kit/test_similarity.py).
"""
import torch
import torch.nn as nn


def _sa_init(self, input_size: int, hidden: int) -> None:
    """Create the query, key and value projections."""
    nn.Module.__init__(self)
    self.q = nn.Linear(input_size, hidden)
    self.k = nn.Linear(input_size, hidden)
    self.v = nn.Linear(input_size, hidden)
    self.scale = hidden ** 0.5


def _sa_forward(self, x: torch.Tensor) -> torch.Tensor:
    """Compute softmax(q k^T / sqrt(hidden)) v."""
    rows = []
    for n in range(x.shape[0]):
        qq = self.q(x[n])  # [seq_len, hidden]
        kk = self.k(x[n])  # [seq_len, hidden]
        vv = self.v(x[n])  # [seq_len, hidden]
        weights = torch.softmax(qq @ kk.T / self.scale, dim=-1)
        # [seq_len, seq_len]
        rows.append(weights @ vv)  # [seq_len, hidden]
    return torch.stack(rows)  # [batch_size, seq_len, hidden]


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    __init__ = _sa_init
    forward = _sa_forward


def _mha_init(self, input_size: int, hidden: int, num_heads: int,
              causal: bool = False, dropout: float = 0) -> None:
    """Create the projections, the mixing layer and the dropout."""
    if hidden % num_heads:
        raise ValueError(f"hidden should be divisible by num_heads, "
                         f"but got hidden={hidden} and "
                         f"num_heads={num_heads}")
    nn.Module.__init__(self)

    self.k = nn.Linear(input_size, hidden)
    self.q = nn.Linear(input_size, hidden)
    self.v = nn.Linear(input_size, hidden)
    self.mix = nn.Linear(hidden, hidden)
    self.dropout = nn.Dropout(dropout)

    self.num_heads = num_heads
    self.head_size = hidden // num_heads
    self.scale = self.head_size ** 0.5
    self.causal = causal  # causal masking


def _mha_forward(self, x: torch.Tensor, return_attention: bool = False):
    """Compute multi-head self-attention."""
    bs, seq, _ = x.shape

    qq, kk, vv = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
    parts = []
    for i in range(self.num_heads):
        span = slice(i * self.head_size, (i + 1) * self.head_size)
        parts.append(qq[:, :, span] @ kk[:, :, span].transpose(1, 2))
        # [batch_size, seq_len, seq_len]
    logits = torch.stack(parts, dim=1) / self.scale
    # [batch_size, num_heads, seq_len, seq_len]

    if self.causal:
        upper = torch.ones(seq, seq, dtype=torch.bool,
                           device=logits.device).triu(diagonal=1)
        # [seq_len, seq_len]
        logits = logits.masked_fill(upper, float("-inf"))
        # [batch_size, num_heads, seq_len, seq_len]

    probs = att = None  # both are set by Task 2.3
    probs = self.dropout(torch.softmax(logits, dim=-1))
    # [batch_size, num_heads, seq_len, seq_len]
    pieces = []
    for i in range(self.num_heads):
        span = slice(i * self.head_size, (i + 1) * self.head_size)
        pieces.append(probs[:, i] @ vv[:, :, span])
        # [batch_size, seq_len, head_size]
    att = self.mix(torch.cat(pieces, dim=-1))
    # [batch_size, seq_len, hidden]
    probs = probs.flatten(0, 1)
    # [batch_size * num_heads, seq_len, seq_len]

    if return_attention:
        return att, probs
    return att


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking and dropout."""

    __init__ = _mha_init
    forward = _mha_forward
