"""Principle 4: a C interpreter of data (``__reduce__`` trees).

The attention is a tree of ``_Node`` objects whose ``__reduce__`` (the
copy and pickle protocol) returns the node's operation, looked up in
torch's namespace by a hex-encoded name, and its arguments (further
nodes; the runtime values by persistent id). The forward pickles the
tree and loads it again: the C unpickler calls every operation, from
one line of the file's own that names none of them.

Expected: the operations ran inside a C call of a line that names none
of them: task 1's items earn nothing (flag ``untraceable``: "softmax by
line N of SelfAttention.forward, which does not name it"); task 2, the
reference, keeps its 6 points. Before this wall, task 1 earned its 4
points."""
import io
import pickle

import torch
import torch.nn as nn

NAMESPACE = vars(torch)
TRANSPOSE, MATMUL = "7472616e73706f7365", "6d61746d756c"
DIV, SOFTMAX = "646976", "736f66746d6178"


class _Node:
    """A step of the program: pickled as (operation, arguments)."""

    def __init__(self, coded: str, *args: object) -> None:
        self.coded, self.args = coded, args

    def __reduce__(self) -> tuple:
        return NAMESPACE[bytes.fromhex(self.coded).decode()], self.args


class _Ref:
    """A runtime value of the program, named by a persistent id."""

    def __init__(self, name: str) -> None:
        self.name = name


class _Writer(pickle.Pickler):
    """Writes a tree, its references as persistent ids."""

    def persistent_id(self, obj: object) -> object:
        """The name of a reference (None for anything else)."""
        return obj.name if isinstance(obj, _Ref) else None


class _Reader(pickle.Unpickler):
    """Reads a tree back, its references from ``values``."""

    def __init__(self, data: bytes, values: dict) -> None:
        super().__init__(io.BytesIO(data))
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
        values = {"q": self.q(x), "k": self.k(x), "v": self.v(x)}
        scores = _Node(MATMUL, _Ref("q"), _Node(TRANSPOSE, _Ref("k"), 1, 2))
        tree = _Node(MATMUL, _Node(SOFTMAX, _Node(
            DIV, scores, self.scale), -1), _Ref("v"))
        buffer = io.BytesIO()
        _Writer(buffer).dump(tree)
        return _Reader(buffer.getvalue(), values).load()
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
