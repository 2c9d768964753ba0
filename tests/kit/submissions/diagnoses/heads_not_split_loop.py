"""heads_not_split: a loop over the heads in which every head uses the whole
q and k (only v is sliced per head), so all heads have the same
probabilities. Expected: 5 + 3 = 8.
"""
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
        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, seq_len]
        return probs @ v  # [batch_size, seq_len, hidden]
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
        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        scores = torch.bmm(q, k.transpose(1, 2)) / self.scale
        # [batch_size, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            hidden = torch.ones(seq, seq).triu(1) == 1
            # [seq_len, seq_len]
            scores = scores.masked_fill(hidden, -float("inf"))
            # [batch_size, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        maps, outputs = [], []
        for head in range(self.num_heads):
            weights = self.dropout(torch.softmax(scores, dim=-1))
            # [batch_size, seq_len, seq_len]
            start = head * self.head_size
            outputs.append(weights @ v[:, :, start:start + self.head_size])
            # [batch_size, seq_len, head_size]
            maps.append(weights)  # [batch_size, seq_len, seq_len]
        probs = torch.stack(maps, dim=1).reshape(-1, seq, seq)
        # [batch_size * num_heads, seq_len, seq_len]
        att = self.mix(torch.cat(outputs, dim=-1))
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
