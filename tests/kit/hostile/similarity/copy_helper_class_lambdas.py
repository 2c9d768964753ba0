"""A disguised copy of ``submissions/correct_matmul.py`` (principle 9): the
head split moved into a static method of a helper class, the merge into a
module-level lambda, the scores into a local lambda and a parameterless
submodule of the file's own, locals renamed, and one product written with
``torch.einsum`` instead of ``@``. The same computation but that product.
``python -m grader similarity`` must rank this pair above every pair of
independent solutions (tests/kit/test_similarity.py).
"""
import torch
import torch.nn as nn


class _Ops:
    """Reshaping helpers."""

    @staticmethod
    def split(t, b, s, n, d):
        t = t.view(b, s, n, d)
        return t.transpose(1, 2).reshape(b * n, s, d)


merge = lambda o, b, n, s, d: (  # noqa: E731
    o.view(b, n, s, d).transpose(1, 2).reshape(b, s, -1))


class _Future(nn.Module):
    """Hides the future."""

    def forward(self, sc, s):
        hide = torch.ones(s, s, dtype=torch.bool,
                          device=sc.device).triu(diagonal=1)
        return sc.masked_fill(hide, float("-inf"))


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections."""
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v."""
        weigh = lambda a, c: torch.softmax(  # noqa: E731
            a @ c.transpose(1, 2) / self.scale, dim=-1)
        qq, kk, vv = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        return weigh(qq, kk) @ vv  # [batch_size, seq_len, hidden]


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
        self.future = _Future()

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """Compute multi-head self-attention."""
        bs, seq, _ = x.shape

        n, d = self.num_heads, self.head_size
        qh = _Ops.split(self.q(x), bs, seq, self.num_heads, self.head_size)
        kh = _Ops.split(self.k(x), bs, seq, self.num_heads, self.head_size)
        vh = _Ops.split(self.v(x), bs, seq, self.num_heads, self.head_size)
        scores = torch.einsum("bid,bjd->bij", qh, kh) / self.scale

        if self.causal:
            scores = self.future(scores, seq)

        probs = att = None  # both are set by Task 2.3
        probs = torch.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        att = probs @ vh  # [batch_size * num_heads, seq_len, head_size]
        att = merge(att, bs, n, seq, d)
        att = self.mix(att)  # [batch_size, seq_len, hidden]

        if return_attention:
            return att, probs
        return att
