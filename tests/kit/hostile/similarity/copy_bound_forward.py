"""A disguised copy of ``submissions/correct_matmul.py`` (principle 9):
each forward moved out of its class into a module-level function, bound
in the class body by assignment (``forward = _sa_forward``), the
markers dropped. The class runs the same methods, so it is graded the
same; ``python -m grader similarity`` must compare the functions as the
methods they are and rank this pair above every pair of independent
solutions (tests/kit/test_similarity.py).
"""
import torch
import torch.nn as nn


def _sa_forward(self, x: torch.Tensor) -> torch.Tensor:
    """Compute softmax(q k^T / sqrt(hidden)) v."""
    q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
    probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
    # [batch_size, seq_len, seq_len]
    return probs @ v  # [batch_size, seq_len, hidden]


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

    forward = _sa_forward


def _mha_forward(self, x: torch.Tensor, return_attention: bool = False):
    """Compute multi-head self-attention."""
    bs, seq, _ = x.shape

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
    scores = q @ k.transpose(1, 2) / self.scale
    # [batch_size * num_heads, seq_len, seq_len]

    if self.causal:
        mask = torch.ones(seq, seq, dtype=torch.bool,
                          device=scores.device).triu(diagonal=1)
        # [seq_len, seq_len]
        scores = scores.masked_fill(mask, float("-inf"))
        # [batch_size * num_heads, seq_len, seq_len]

    probs = att = None  # both are set by Task 2.3
    probs = torch.softmax(scores, dim=-1)
    # [batch_size * num_heads, seq_len, seq_len]
    probs = self.dropout(probs)
    # [batch_size * num_heads, seq_len, seq_len]
    att = probs @ v  # [batch_size * num_heads, seq_len, head_size]
    att = att.view(bs, self.num_heads, seq, self.head_size)
    # [batch_size, num_heads, seq_len, head_size]
    att = att.transpose(1, 2).reshape(bs, seq, -1)
    # [batch_size, seq_len, hidden]
    att = self.mix(att)  # [batch_size, seq_len, hidden]

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

    forward = _mha_forward
