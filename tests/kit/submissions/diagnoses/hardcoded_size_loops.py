"""hardcoded_size, in both tasks: SelfAttention loops over 3 sequences (the
public batch size) and MultiHeadSelfAttention over 3 heads (the public
num_heads). On the hidden sizes task 1's output has the wrong batch size
and task 2 cannot run. Expected: 1 + 0 = 1.
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
        """Compute softmax(q k^T / sqrt(hidden)) v, one sequence at a
        time."""
        # YOUR CODE STARTS HERE
        outputs = []
        for b in range(3):
            q, k, v = self.q(x[b]), self.k(x[b]), self.v(x[b])
            # [seq_len, hidden]
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
        bs, seq, _ = x.shape

        # YOUR CODE STARTS HERE
        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        heads = []
        for h in range(3):
            cols = slice(h * self.head_size, (h + 1) * self.head_size)
            heads.append(q[:, :, cols] @ k[:, :, cols].transpose(1, 2))
            # [batch_size, seq_len, seq_len]
        scores = torch.stack(heads, dim=1) / self.scale
        # [batch_size, num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
            # [seq_len, seq_len]
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size, num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        probs = self.dropout(torch.softmax(scores, dim=-1))
        # [batch_size, num_heads, seq_len, seq_len]
        outputs = []
        for h in range(3):
            cols = slice(h * self.head_size, (h + 1) * self.head_size)
            outputs.append(probs[:, h] @ v[:, :, cols])
            # [batch_size, seq_len, head_size]
        att = self.mix(torch.cat(outputs, dim=-1))
        # [batch_size, seq_len, hidden]
        probs = probs.flatten(0, 1)
        # [batch_size * num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
