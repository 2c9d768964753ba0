"""A disguised copy of ``submissions/correct_einsum.py`` (principle 9):
every local renamed and, between the copied statements, statements that
change nothing the methods compute: each temporary read a second time by
a statement whose value is thrown away (an ``assert``, a name alone, a
shape read into a local nobody reads), locals assigned and never read,
``pass``, a branch that never runs and a loop over nothing. The reads
make every temporary read twice, so a comparison that puts a temporary
read once where it is read sees other statements. The same computation.
``python -m grader similarity`` must rank this pair above every pair of
independent solutions (tests/kit/test_similarity.py).
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
        qq, kk, vv = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        assert qq is not None
        unused = kk.shape  # [bs, seq, hidden]
        sim = torch.einsum("bqd,bkd->bqk", qq, kk)  # [bs, seq, seq]
        sim  # [bs, seq, seq]
        pass
        weights = (sim / self.scale).softmax(-1)  # [bs, seq, seq]
        spare = weights.sum()  # []
        return torch.einsum("bqk,bkd->bqd", weights, vv)  # [bs, seq, hidden]
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
        n, t, _ = x.shape
        ignored = x.dim()

        # YOUR CODE STARTS HERE
        qh = self.q(x).view(n, t, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        assert qh.dim() == 4
        kh = self.k(x).view(n, t, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        kh  # [batch_size, seq_len, num_heads, head_size]
        vh = self.v(x).view(n, t, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        width = vh.shape[-1]
        logits = torch.einsum("bqhd,bkhd->bhqk", qh, kh) / self.scale
        # [batch_size, num_heads, seq_len, seq_len]
        for _ in range(0):
            logits = logits + 0
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            hide = torch.ones(t, t, device=logits.device).triu(1).bool()
            # [seq_len, seq_len]
            hide  # [seq_len, seq_len]
            logits = logits.masked_fill(hide, float("-inf"))
            # [batch_size, num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE
        if False:
            logits = logits * 2
        probs = self.dropout(logits.softmax(dim=-1))
        # [batch_size, num_heads, seq_len, seq_len]
        total = probs.sum()  # []
        att = torch.einsum("bhqk,bkhd->bqhd", probs, vh).reshape(n, t, -1)
        # [batch_size, seq_len, hidden]
        assert att is not None
        att = self.mix(att)  # [batch_size, seq_len, hidden]
        probs = probs.reshape(n * self.num_heads, t, t)
        # [batch_size * num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
