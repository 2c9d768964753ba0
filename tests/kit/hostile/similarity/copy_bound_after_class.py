"""A disguised copy of ``submissions/diagnoses/heads_not_split_loop.py``
(principle 9): the classes come first with nothing but their
``__init__``; every forward is a module-level function defined after
them, its instance named ``me``, bound to the class after the fact
through an alias (``attend = _attend``; ``SelfAttention.forward =
attend``); one step of the head loop moved into another function bound
the same way and called as ``me._head(...)``; locals renamed, the
markers dropped. The classes run the same methods, so they are graded
the same; ``python -m grader similarity`` must compare the functions as
the methods they are and rank this pair above every pair of independent
solutions (tests/kit/test_similarity.py).
"""
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections."""
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5


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


def _attend(me, inputs: torch.Tensor) -> torch.Tensor:
    """Compute softmax(q k^T / sqrt(hidden)) v."""
    a, b, c = me.q(inputs), me.k(inputs), me.v(inputs)  # [bs, seq, hidden]
    w = torch.softmax(a @ b.transpose(1, 2) / me.scale, dim=-1)
    # [batch_size, seq_len, seq_len]
    return w @ c  # [batch_size, seq_len, hidden]


def _slice_head(me, w: torch.Tensor, c: torch.Tensor, n: int):
    """One head's output."""
    first = n * me.head_size
    return w @ c[:, :, first:first + me.head_size]
    # [batch_size, seq_len, head_size]


def _attend_heads(me, inputs: torch.Tensor, return_attention: bool = False):
    """Compute multi-head self-attention."""
    bs, seq, _ = inputs.shape

    a, b, c = me.q(inputs), me.k(inputs), me.v(inputs)  # [bs, seq, hidden]
    logits = torch.bmm(a, b.transpose(1, 2)) / me.scale
    # [batch_size, seq_len, seq_len]

    if me.causal:
        future = torch.ones(seq, seq).triu(1) == 1
        # [seq_len, seq_len]
        logits = logits.masked_fill(future, -float("inf"))
        # [batch_size, seq_len, seq_len]

    probs = att = None  # both are set by Task 2.3
    kept, pieces = [], []
    for n in range(me.num_heads):
        w = me.dropout(torch.softmax(logits, dim=-1))
        # [batch_size, seq_len, seq_len]
        pieces.append(me._head(w, c, n))
        # [batch_size, seq_len, head_size]
        kept.append(w)  # [batch_size, seq_len, seq_len]
    probs = torch.stack(kept, dim=1).reshape(-1, seq, seq)
    # [batch_size * num_heads, seq_len, seq_len]
    att = me.mix(torch.cat(pieces, dim=-1))
    # [batch_size, seq_len, hidden]

    if return_attention:
        return att, probs
    return att


attend = _attend
attend_heads = _attend_heads
SelfAttention.forward = attend
MultiHeadSelfAttention._head = _slice_head
MultiHeadSelfAttention.forward = attend_heads
