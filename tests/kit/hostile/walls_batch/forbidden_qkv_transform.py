"""Red team 16 (B1's task 2): torch._transform_bias_rescale_qkv, a helper
kernel of torch's native multi-head attention, splits q, k and v into
heads (batch-major) and scales q: most of task 2's head split. The
rubric's reading forbids the native fused MHA ops; its name now matches
the forbidden pattern (and its aten operator the tripwire's): task 2
earns nothing, flagged forbidden; task 1 keeps its points.
"""
import torch
import torch.nn as nn


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
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5
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
    """Multi-head self-attention: one fused helper kernel splits the heads."""

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        if hidden % num_heads:
            raise ValueError("hidden should be divisible by num_heads")
        super().__init__()
        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.causal = causal

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        bs, seq, hidden = x.shape[0], x.shape[1], self.mix.in_features
        qkv = torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)
        # [batch_size, seq_len, 3 * hidden]
        q, k, v = torch._transform_bias_rescale_qkv(
            qkv, torch.zeros(3 * hidden), self.num_heads)
        # [batch_size, num_heads, seq_len, head_size] each, q scaled
        scores = (q @ k.transpose(2, 3)).flatten(0, 1)
        # [batch_size * num_heads, seq_len, seq_len]
        if self.causal:
            mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
            # [seq_len, seq_len]
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size * num_heads, seq_len, seq_len]
        probs = self.dropout(torch.softmax(scores, dim=-1))
        # [batch_size * num_heads, seq_len, seq_len]
        att = probs @ v.flatten(0, 1)
        # [batch_size * num_heads, seq_len, head_size]
        att = att.view(bs, self.num_heads, seq, -1).transpose(1, 2)
        # [batch_size, seq_len, num_heads, head_size]
        att = self.mix(att.reshape(bs, seq, hidden))
        # [batch_size, seq_len, hidden]
        if return_attention:
            return att, probs
        return att
