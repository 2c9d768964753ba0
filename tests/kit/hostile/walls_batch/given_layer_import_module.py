"""Principles 3 and 10 (red team 6, A1), a third route, in task 1: the
given layer is found by a name built at run time
(``importlib.import_module("transformer_lm." + ...)``), so no import
statement names it; one head of it, with an identity mix, is single-head
self-attention, and the file answers task 1 with it.

The worker grading ``multi_head_attention`` cannot read the module
(another homework's, not shipped with this one): the import raises in
every call of task 1's forward. Task 1 keeps its init point (its layers
are its own); task 2 is the student's own correct code: full marks.

Expected: task 1 earns only its init point, task 2 full marks; a
``refused`` flag naming the given file.
"""
import importlib

import torch
import torch.nn as nn


def given_layer() -> type:
    """The transformer_block homework's given layer, by a built name."""
    name = "modeling_" + "transformer"
    return importlib.import_module("transformer_lm." + name) \
        .MultiHeadSelfAttention


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
        """The given layer's forward, with one head and no mix."""
        # YOUR CODE STARTS HERE
        self.num_heads, self.head_size = 1, self.q.out_features
        self.causal, self.mix = False, nn.Identity()
        self.dropout = nn.Identity()
        return given_layer().forward(self, x)
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
