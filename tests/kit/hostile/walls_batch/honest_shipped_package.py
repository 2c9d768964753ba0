"""Principles 3 and 10, the honest control: a file that imports what its
own homework ships of the student package (``transformer_lm.test_values``,
the public test values, and ``transformer_lm.notebook``) and is otherwise
the plain solution. The worker reads the files the release ships: they
import as on the student's machine.

Expected: full marks, no flag.
"""
import torch
import torch.nn as nn
import transformer_lm.notebook
from transformer_lm import test_values

SHIPPED = (test_values.__name__, transformer_lm.notebook.__name__)


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
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, hidden] @ [batch_size, hidden, seq_len]
        # -> softmax [batch_size, seq_len, seq_len]
        return probs @ v
        # [batch_size, seq_len, seq_len] @ [batch_size, seq_len, hidden]
        # -> [batch_size, seq_len, hidden]
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
        """Compute multi-head self-attention; probs after dropout."""
        bs, seq, _ = x.shape

        # YOUR CODE STARTS HERE
        k = (self.k(x)
             .view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, self.head_size))
        # 'k' [batch_size, seq_len, hidden]
        # -> view [batch_size, seq_len, num_heads, head_size]
        # -> transpose [batch_size, num_heads, seq_len, head_size]
        # -> reshape [batch_size * num_heads, seq_len, head_size]
        q = (self.q(x)
             .view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, self.head_size))
        # -> [batch_size * num_heads, seq_len, head_size], as for k
        v = (self.v(x)
             .view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, self.head_size))
        # -> [batch_size * num_heads, seq_len, head_size], as for k
        scores = q @ k.transpose(1, 2) / self.scale
        # [batch_size * num_heads, seq_len, head_size]
        # @ [batch_size * num_heads, head_size, seq_len]
        # -> [batch_size * num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool,
                              device=scores.device).triu(diagonal=1)
            # [seq_len, seq_len], True strictly above the diagonal
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size * num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set below
        # YOUR CODE STARTS HERE
        probs = torch.softmax(scores, dim=-1)
        # [batch_size * num_heads, seq_len, seq_len]
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
        att = probs @ v  # [batch_size * num_heads, seq_len, head_size]
        att = (att.view(bs, self.num_heads, seq, self.head_size)
               .transpose(1, 2)
               .reshape(bs, seq, self.num_heads * self.head_size))
        # -> view [batch_size, num_heads, seq_len, head_size]
        # -> transpose [batch_size, seq_len, num_heads, head_size]
        # -> reshape [batch_size, seq_len, hidden]
        att = self.mix(att)  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
