"""Principles 3 and 10 (red team 6, A1), a second route: task 2 runs the
given layer's ``forward`` on a stand-in for ``self``. The import is made
inside ``forward`` (when the grader calls it, not at module level), so the
file loads as it is; the stand-in hands the given forward this layer's own
projections and a ``dropout`` that keeps the probabilities.

The given layer lives in ``transformer_lm/modeling_transformer.py``, which
the ``multi_head_attention`` release does not ship: the worker cannot
read it, the import raises in every call, and task 2's checks fail on
their merits. Task 1 is the student's own code: full marks.

Expected: task 1 full marks (5 with the bonus), task 2 zero; a
``refused`` flag naming the given file.
"""
import torch
import torch.nn as nn


class Shim:
    """What the given forward reads of ``self``, with a probs keeper."""

    def __init__(self, layer: nn.Module) -> None:
        """Borrow the layer's modules and sizes."""
        self.layer, self.kept = layer, []
        for name in ("q", "k", "v", "mix", "num_heads", "head_size",
                     "scale", "causal"):
            setattr(self, name, getattr(layer, name))

    def dropout(self, probs: torch.Tensor) -> torch.Tensor:
        """The layer's dropout; the result is kept."""
        out = self.layer.dropout(probs)
        # [batch_size, num_heads, seq_len, seq_len]
        self.kept.append(out)
        return out


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
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, hidden] @ [batch_size, hidden, seq_len]
        # -> softmax [batch_size, seq_len, seq_len]
        return probs @ v
        # [batch_size, seq_len, seq_len] @ [batch_size, seq_len, hidden]
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
        """The given forward on a stand-in; probs after dropout."""
        from transformer_lm.modeling_transformer import \
            MultiHeadSelfAttention as Given

        shim = Shim(self)
        att = Given.forward(shim, x)  # [batch_size, seq_len, hidden]
        probs = shim.kept[0].flatten(0, 1)
        # [batch_size * num_heads, seq_len, seq_len]
        if return_attention:
            return att, probs
        return att
