"""A disguised copy of ``submissions/correct_flat_heads.py`` (principle 9):
every tensor method written as the ``torch`` function or the method of
another name (``torch.flatten(..., start_dim=0, end_dim=1)``,
``torch.unflatten``, ``swapaxes(2, 1)``, ``permute(0, 2, 1)``, ``bmm``,
``.div``, ``torch.masked_fill``, ``.mT``, ``-math.inf``), the three
projections reordered and their sizes held in one tuple, the merge joined
into one statement.
"""
import math

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
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v."""
        # YOUR CODE STARTS HERE
        logits = torch.div(torch.bmm(self.q(x), self.k(x).mT), self.scale)
        # [batch_size, seq_len, seq_len]
        return torch.bmm(logits.softmax(dim=-1), self.v(x))
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
        sizes = (self.num_heads, self.head_size)
        vv = torch.flatten(
            torch.unflatten(self.v(x), -1, sizes).swapaxes(2, 1),
            start_dim=0, end_dim=1)
        # [batch_size * num_heads, seq_len, head_size]
        kk = torch.flatten(
            torch.unflatten(self.k(x), -1, sizes).swapaxes(2, 1),
            start_dim=0, end_dim=1)
        # [batch_size * num_heads, seq_len, head_size]
        qq = torch.flatten(
            torch.unflatten(self.q(x), -1, sizes).swapaxes(2, 1),
            start_dim=0, end_dim=1)
        # [batch_size * num_heads, seq_len, head_size]
        logits = qq.bmm(kk.permute(0, 2, 1)).div(self.scale)
        # [batch_size * num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            hide = torch.triu(torch.ones((seq, seq), device=logits.device,
                                         dtype=torch.bool), 1)
            # [seq_len, seq_len]
            logits = torch.masked_fill(logits, hide, -math.inf)
            # [batch_size * num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        probs = self.dropout(torch.softmax(logits, 2))
        # [batch_size * num_heads, seq_len, seq_len]
        att = self.mix(torch.flatten(torch.transpose(
            probs.bmm(vv).unflatten(0, (bs, self.num_heads)), 2, 1),
            start_dim=2))  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
