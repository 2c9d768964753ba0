"""Not a copy (principle 9's control): an independently written, correct
solution in a style of its own (the query scaled before the product, the
heads as a fourth axis, an ``einsum`` over heads, a ``tril`` mask with
``where``) whose methods are module-level functions the classes bind by
assignment: ``forward = _attend`` and a helper ``_heads = _split_heads``
that ``forward`` calls as ``self._heads(...)``. Its code is compared as
its methods', helper inlined, and it shares no more with any classmate
than honest solutions do: it must rank below every real copy
(tests/kit/test_similarity.py).
"""
import torch
import torch.nn as nn


def _attend(self, x: torch.Tensor) -> torch.Tensor:
    """Compute softmax(q k^T / sqrt(hidden)) v."""
    query = self.q(x) / self.scale  # [batch_size, seq_len, hidden]
    weights = (query @ self.k(x).mT).softmax(-1)
    # [batch_size, seq_len, seq_len]
    return weights @ self.v(x)  # [batch_size, seq_len, hidden]


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections."""
        # YOUR CODE STARTS HERE
        super().__init__()
        self.scale = hidden ** 0.5
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        # YOUR CODE ENDS HERE

    forward = _attend


def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
    """[batch_size, seq_len, hidden] -> [batch_size, num_heads, seq_len,
    head_size]."""
    return t.unflatten(-1, (self.num_heads, self.head_size)).movedim(2, 1)


def _attend_heads(self, x: torch.Tensor, return_attention: bool = False):
    """Compute multi-head self-attention."""
    bs, seq, _ = x.shape

    # YOUR CODE STARTS HERE
    query = self._heads(self.q(x)) / self.scale
    # [batch_size, num_heads, seq_len, head_size]
    scores = torch.einsum("bhid,bhjd->bhij", query, self._heads(self.k(x)))
    # [batch_size, num_heads, seq_len, seq_len]
    # YOUR CODE ENDS HERE

    if self.causal:
        # YOUR CODE STARTS HERE
        seen = torch.tril(torch.ones(seq, seq, device=x.device)).bool()
        # [seq_len, seq_len]
        scores = torch.where(seen, scores, scores.new_tensor(-torch.inf))
        # [batch_size, num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

    probs = att = None  # both are set by Task 2.3
    # YOUR CODE STARTS HERE
    probs = self.dropout(scores.softmax(dim=-1))
    # [batch_size, num_heads, seq_len, seq_len]
    heads = probs @ self._heads(self.v(x))
    # [batch_size, num_heads, seq_len, head_size]
    att = self.mix(heads.movedim(1, 2).flatten(2))
    # [batch_size, seq_len, hidden]
    probs = probs.flatten(0, 1)
    # [batch_size * num_heads, seq_len, seq_len]
    # YOUR CODE ENDS HERE

    if return_attention:
        return att, probs
    return att


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

    _heads = _split_heads
    forward = _attend_heads
