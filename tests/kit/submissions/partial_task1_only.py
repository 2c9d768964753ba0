"""Only SelfAttention was submitted: MultiHeadSelfAttention is not defined at
all. Task 1 is graded as usual, task 2 earns 0. Expected: 5.
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
        # [batch_size, seq_len, hidden] @ [batch_size, hidden, seq_len]
        # -> [batch_size, seq_len, seq_len]
        return probs @ v  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE
