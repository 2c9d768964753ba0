"""A disguised copy of ``submissions/correct_flat_heads.py`` (principle 9):
the classes and their methods in the other order, statements that commute
swapped (the projections, the scale before the product), every local
renamed, comments rewritten, blank lines and line breaks moved, redundant
parentheses added, a keyword argument given by name. The same
computation. ``python -m grader similarity`` must rank this pair above
every pair of independent solutions (tests/kit/test_similarity.py).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadSelfAttention(nn.Module):

    def forward(self, x, return_attention=False):
        """Heads side by side."""
        bs, seq, _ = x.shape

        # YOUR CODE STARTS HERE
        values = self.v(x).unflatten(
            -1, (self.num_heads, self.head_size))  # [bs, seq, heads, head]
        values = (values
                  .transpose(1, 2)
                  .flatten(0, 1))  # [bs * heads, seq, head]

        keys = self.k(x).unflatten(-1, (self.num_heads, self.head_size))
        # [bs, seq, heads, head]
        keys = keys.transpose(1, 2).flatten(0, 1)  # [bs * heads, seq, head]
        queries = self.q(x).unflatten(-1, (self.num_heads, self.head_size))
        # [bs, seq, heads, head]
        queries = queries.transpose(1, 2).flatten(0, 1)
        # [bs * heads, seq, head]
        logits = (torch.matmul(queries, keys.transpose(1, 2))
                  / self.scale)  # [bs * heads, seq, seq]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            upper = torch.ones(seq, seq, device=logits.device,
                               dtype=torch.bool).triu(diagonal=1)
            # [seq, seq]: the future
            logits = logits.masked_fill(upper, float("-inf"))
            # [bs * heads, seq, seq]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        probs = self.dropout(F.softmax(logits, dim=2))
        # [bs * heads, seq, seq]

        att = torch.matmul(probs, values)  # [bs * heads, seq, head]
        att = att.unflatten(0, (bs, self.num_heads)).transpose(1, 2)
        # [bs, seq, heads, head]
        att = self.mix(att.flatten(2))  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        """Layers."""
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


class SelfAttention(nn.Module):

    def forward(self, x):
        """One head."""
        # YOUR CODE STARTS HERE
        query = self.q(x)  # the queries: [bs, seq, hidden]

        logits = (query
                  @ self.k(x).transpose(-2, -1)
                  / self.scale)  # [bs, seq, seq]
        return F.softmax(logits, dim=-1) @ self.v(x)  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE

    def __init__(self, input_size, hidden):
        """Layers."""
        # YOUR CODE STARTS HERE
        super().__init__()
        self.scale = hidden ** 0.5
        self.v = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        # YOUR CODE ENDS HERE
