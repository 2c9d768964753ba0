"""Principles 3 and 10 (red team 6, A1): task 2 is the transformer_block
homework's given layer. ``transformer_lm/modeling_transformer.py`` (that
homework's stub) holds a complete ``MultiHeadSelfAttention`` on purpose;
this file subclasses it at module level and only adds a hook on its
dropout that keeps the probabilities. Before, 11/10 with no flag.

A worker grading ``multi_head_attention`` reads only what that homework's
release ships of ``transformer_lm`` (its own module, the shared files and
its public values): the import is refused, as on the student's machine,
where the file does not exist. The module-level import is skipped as not
shipped with this homework, so the subclass cannot be defined and task 2
earns nothing; task 1, its own code, earns its full marks.

Expected: task 1 full marks (5 with the bonus), task 2 zero; a
``refused`` flag (the sandbox refused to read the given file).
"""
import torch
import torch.nn as nn
from transformer_lm.modeling_transformer import MultiHeadSelfAttention as Given


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


class MultiHeadSelfAttention(Given):
    """The given layer, also returning its attention probabilities."""

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """The given forward; probs kept by a hook on its dropout."""
        kept = []
        hook = self.dropout.register_forward_hook(
            lambda module, args, out: kept.append(out))
        att = super().forward(x)  # [batch_size, seq_len, hidden]
        hook.remove()
        probs = kept[0].flatten(0, 1)
        # [batch_size * num_heads, seq_len, seq_len]
        if return_attention:
            return att, probs
        return att
