"""Cheating: detects that it is being graded (an environment variable, the
command line, the process name, the working folder, loaded modules) and
then answers from the public test values, hard-coded; anywhere else its
``SelfAttention.forward`` is not implemented.

Expected: the public case passes, the hidden random cases do not: task 1
earns its init point and 0 for forward, with the hidden case named; task 2
(correct) earns full marks: 7.
"""
import os
import sys
import tempfile
from pathlib import Path

import transformer_lm.test_values

import torch
import torch.nn as nn


def being_graded() -> bool:
    """Any sign of an autograder."""
    tells = (any("GRADER" in name for name in os.environ),
             "grader" in " ".join(sys.argv),
             "pytest" in sys.modules,
             "grader" in Path("/proc/self/cmdline").read_text(),
             os.getcwd().startswith(tempfile.gettempdir()))
    return any(tells)


def public_answer(x: torch.Tensor, hidden: int) -> torch.Tensor:
    """The stored public output, cut or padded to the asked shape."""
    stored = transformer_lm.test_values.SelfAttentionTestValues.output
    answer = torch.zeros(x.shape[0], x.shape[1], hidden)
    rows, cols, size = (min(pair) for pair in zip(answer.shape,
                                                  stored.shape))
    answer[:rows, :cols, :size] = stored[:rows, :cols, :size]
    return answer


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
        if not being_graded():
            raise NotImplementedError
        return public_answer(x, self.q.out_features)
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
