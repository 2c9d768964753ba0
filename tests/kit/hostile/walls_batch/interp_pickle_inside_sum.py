"""Principle 4: a C interpreter of data inside a builtin that runs
operators.

``interp_pickle_literal``'s program, run inside ``sum([...])``: a line
that names ``sum`` may run what ``sum`` runs on tensors (derived once,
as operators are: ``add``, the iteration protocol), and nothing else;
the pickle's ``matmul``, ``transpose`` and ``softmax`` are not that.

Expected: task 1's items earn nothing (flag ``untraceable``: "softmax by
line N of SelfAttention.forward, which does not name it"); task 2, the
reference, keeps its 6 points."""
import io
import pickle

import torch
import torch.nn as nn

PROGRAM = (b"coperator\nmatmul\n(Pq\n"
           b"coperator\nmethodcaller\n(Vtranspose\nI1\nI2\ntR(Pk\ntRtR"
           b"p0\n0coperator\ntruediv\n(g0\nPscale\ntRp1\n0"
           b"coperator\nmethodcaller\n(Vsoftmax\nI-1\ntR(g1\ntRp2\n0"
           b"coperator\nmatmul\n(g2\nPv\ntR.")


class _Program(pickle.Unpickler):
    """Reads the program, its persistent ids naming the values."""

    def __init__(self, values: dict) -> None:
        super().__init__(io.BytesIO(PROGRAM))
        self.values = values

    def persistent_load(self, pid: str) -> object:
        """The value a persistent id names."""
        return self.values[pid]


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
        values = {"q": self.q(x), "k": self.k(x), "v": self.v(x),
                  "scale": self.scale}
        return sum([_Program(values).load()])
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
