"""The sloppy code, with SelfAttention made by ``type(...)`` as a
subclass of a class of another name: no ``class SelfAttention``
statement, so the pep8 and shapes items were "not checked" (red team
15).

Expected: what the honest code earns (6).
"""
import torch
import torch.nn as nn


class _Impl(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections."""
        # YOUR CODE STARTS HERE
        super().__init__()
        self.q=nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size,hidden)
        self.v = nn.Linear(input_size, hidden)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v."""
        # YOUR CODE STARTS HERE
        q = self.q(x)
        k = self.k(x)
        v = self.v(x)
        scores = q@k.transpose(1, 2) / q.shape[-1] ** 0.5
        probs = torch.softmax(scores, dim=-1)
        return probs @ v
        # YOUR CODE ENDS HERE


SelfAttention = type("SelfAttention", (_Impl,), {})


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
        k = self.k(x).view(bs, seq, self.num_heads, self.head_size).transpose(1, 2).reshape(bs * self.num_heads, seq, self.head_size)
        q = self.q(x).view(bs, seq, self.num_heads, self.head_size).transpose(1, 2).reshape(bs * self.num_heads, seq, self.head_size)
        v = self.v(x).view(bs, seq, self.num_heads, self.head_size).transpose(1, 2).reshape(bs * self.num_heads, seq, self.head_size)
        scores = q @ k.transpose(1, 2) / self.scale
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool, device=scores.device).triu(diagonal=1)
            scores = scores.masked_fill(mask, float("-inf"))
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        probs = torch.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        att = (probs @ v).view(bs, self.num_heads, seq, self.head_size).transpose(1, 2).reshape(bs, seq, -1)
        att = self.mix(att)
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
