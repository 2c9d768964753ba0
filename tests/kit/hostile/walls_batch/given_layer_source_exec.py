"""Principles 3 and 10 (red team 6, A1), a fourth route: task 2 reads the
given layer's source text through the package's resources
(``importlib.resources.files("transformer_lm")``) and runs it with
``exec`` into a namespace of its own, then answers with that class's
forward on this layer's weights. No import of the given module at all.

The worker grading ``multi_head_attention`` cannot read the file (not
shipped with this homework): reading it raises in every call, and task
2's checks fail on their merits. Task 1 is the student's own code: full
marks.

It also prints which modules of the package the worker found loaded
(none of another homework's: the fork server's warm-up loads only the
shared ``transformer_lm.notebook``).

Expected: task 1 full marks (5 with the bonus), task 2 zero; a
``refused`` flag naming the given file.
"""
import importlib.resources
import sys

import torch
import torch.nn as nn

# The fork server loads nothing of the package beyond what every worker
# shares: no module of another homework is waiting in sys.modules.
print("other homeworks' modules loaded:", sorted(
    name for name in sys.modules if name.startswith("transformer_lm.")
    and name.split(".")[1] not in ("notebook", "test_values",
                                   "modeling_attention")))


def given_forward() -> object:
    """The given layer's forward, from its source text."""
    package = importlib.resources.files("transformer_lm")
    text = package.joinpath("modeling_transformer.py").read_text()
    space: dict = {}
    exec(compile(text, "given", "exec"), space)
    return space["MultiHeadSelfAttention"].forward


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
        """The given forward on this layer; probs kept from its dropout."""
        kept = []
        hook = self.dropout.register_forward_hook(
            lambda module, args, out: kept.append(out))
        att = given_forward()(self, x)  # [batch_size, seq_len, hidden]
        hook.remove()
        probs = kept[0].flatten(0, 1)
        # [batch_size * num_heads, seq_len, seq_len]
        if return_attention:
            return att, probs
        return att
