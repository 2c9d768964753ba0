"""Principle 4: a C interpreter of data (Python's own operator dispatch).

Each step of the attention is written as ``tensor + slot``: the slot is
an instance of a class made at run time whose ``__radd__`` is a
``functools.partial`` of an operation looked up in torch by a name
XOR-encoded in hex. The tensor's ``+`` gives up on the slot
(NotImplemented), so Python's own C dispatch calls the slot's
``__radd__``: the operation runs at the ``+`` of a line of the file's
own, which writes an addition and names none of it.

Expected: the operations ran at an operator of a line that names none
of them (a ``+`` runs what torch runs for an addition, derived by the
grader, not a transpose, a matmul or a softmax): task 1's items earn
nothing (flag ``untraceable``: "softmax by line N of
SelfAttention.forward, which does not name it", "matmul by line N");
task 2, the reference, keeps its 6 points. Before this wall, task 1
earned its 4 points; a rule that let an operator run any operation
would let it through.
"""
import functools

import torch
import torch.nn as nn

TRANSPOSE, MATMUL, DIV, SOFTMAX = (
    "2127343b26253a2630", "383421382039", "313c23", "263a332138342d")


def _slot(coded: str, **fixed: object) -> object:
    """An object whose ``__radd__`` runs the coded operation."""
    name = bytes(byte ^ 0x55 for byte in bytes.fromhex(coded)).decode()
    step = functools.partial(getattr(torch, name), **fixed)
    return type("_Slot", (), {"__radd__": staticmethod(step)})()


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
        kt = self.k(x) + _slot(TRANSPOSE, dim0=1, dim1=2)
        # [batch_size, hidden, seq_len]
        scores = self.q(x) + _slot(MATMUL, other=kt)
        # [batch_size, seq_len, seq_len]
        scores = scores + _slot(DIV, other=self.scale)
        # [batch_size, seq_len, seq_len]
        probs = scores + _slot(SOFTMAX, dim=-1)
        # [batch_size, seq_len, seq_len]
        return probs + _slot(MATMUL, other=self.v(x))
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
        scores = torch.bmm(q, k.transpose(1, 2)) / self.scale
        # [batch_size * num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool,
                              device=scores.device).triu(diagonal=1)
            # [seq_len, seq_len]
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size * num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        probs = torch.softmax(scores, dim=-1)
        # [batch_size * num_heads, seq_len, seq_len]
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
        att = torch.bmm(probs, v)
        # [batch_size * num_heads, seq_len, head_size]
        att = att.view(bs, self.num_heads, seq, self.head_size)
        # [batch_size, num_heads, seq_len, head_size]
        att = att.transpose(1, 2).reshape(bs, seq, -1)
        # [batch_size, seq_len, hidden]
        att = self.mix(att)  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
