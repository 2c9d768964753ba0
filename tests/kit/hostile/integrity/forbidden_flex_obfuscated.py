"""Task 2 reaches flex_attention's higher-order operator through
``importlib`` and ``getattr`` with names built at run time, so that no
forbidden name appears in the source.

Expected: still forbidden (the sandbox trips the operator itself):
task 2's correctness items earn 0 (forbidden_api): 5.
"""
import torch
import torch.nn as nn
import importlib


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections.

        Args:
            input_size: size of the input vectors.
            hidden: size of the query, key, value and output vectors.

        The layers must be named ``q``, ``k`` and ``v``; each is
        ``nn.Linear(input_size, hidden)`` with a bias.
        """
        # Task 1.1: create the layers self-attention needs (1 point)
        # YOUR CODE STARTS HERE (~5 lines)
        ### BEGIN SOLUTION
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5
        ### END SOLUTION
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v for a batch of sequences.

        Args:
            x: FloatTensor[batch_size, seq_len, input_size]

        Returns:
            FloatTensor[batch_size, seq_len, hidden]

        Every position attends to every position of its own sequence. The
        scores are divided by sqrt(hidden) before the softmax, which is taken
        over the keys (the last dimension).
        """
        # Task 1.2: compute self-attention (3 points)
        # 1. Compute the query, key and value matrices from x.
        # 2. Compute the scores q k^T and scale them by 1 / sqrt(hidden).
        # 3. Turn the scores into probabilities with a softmax over the keys.
        # 4. Compute the output from the probabilities and the values.
        # Write the shape of every tensor in a comment, e.g.
        #     q = self.q(x)  # [batch_size, seq_len, hidden]
        # Remember that x is a batch [batch_size, seq_len, input_size], not a
        # single example [seq_len, input_size] as in the lecture.
        # YOUR CODE STARTS HERE (~4 lines, or 3 if you combine steps 2 and 3)
        ### BEGIN SOLUTION
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, hidden] @ [batch_size, hidden, seq_len]
        # -> softmax [batch_size, seq_len, seq_len]
        return probs @ v
        # [batch_size, seq_len, seq_len] @ [batch_size, seq_len, hidden]
        # -> [batch_size, seq_len, hidden]
        ### END SOLUTION
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking."""

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        """Create the projections, the mixing layer and the dropout."""
        if hidden % num_heads:
            raise ValueError("hidden should be divisible by num_heads")
        super().__init__()
        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.causal = causal

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """Multi-head self-attention through a ready-made kernel."""
        # YOUR CODE STARTS HERE

        bs, seq, _ = x.shape
        heads, size = self.num_heads, self.head_size
        q = self.q(x).view(bs, seq, heads, size).transpose(1, 2)
        # [batch_size, num_heads, seq_len, head_size]
        k = self.k(x).view(bs, seq, heads, size).transpose(1, 2)
        # [batch_size, num_heads, seq_len, head_size]
        v = self.v(x).view(bs, seq, heads, size).transpose(1, 2)
        # [batch_size, num_heads, seq_len, head_size]
        module = importlib.import_module(
            "torch._higher_order_ops." + "flex" + "_attention")
        kernel = getattr(module, "sdpa" + "_dense")
        att = kernel(q, k, v, lambda s, *a: s, (), 1.0, {})[0]
        # [batch_size, num_heads, seq_len, head_size]
        att = self.mix(att.transpose(1, 2).reshape(bs, seq, heads * size))
        # [batch_size, seq_len, hidden]
        return att
        # YOUR CODE ENDS HERE
