"""Multi-line statements and tuples (see test_shapes.py).

SelfAttention: tuple unpacking with one shape for two same-shaped tensors
(right), with one shape per tensor in order (right), with one shape for two
tensors of different shapes (wrong), with the shapes in the wrong order
(wrong), and a call spread over four lines with its comment on the last one.
MultiHeadSelfAttention: a comment on the first line of a three-line
statement (right), a chained assignment, and a tuple return whose two shapes
are given in the wrong order.
"""
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5

    def forward(self, x):
        q, k = self.q(x), self.k(x)  # [bs, seq, hidden]
        v, x_t = self.v(x), x.transpose(1, 2)  # [bs, seq, hidden], [bs, input_size, seq]
        scores, k_t = q @ k.transpose(1, 2), k.transpose(1, 2)  # [bs, seq, seq]
        probs, values = torch.softmax(scores / self.scale, dim=-1), v  # [bs, seq, hidden], [bs, seq, seq]
        out = torch.bmm(
            probs,
            values,
        )  # [bs, seq, hidden]
        return out  # [bs, seq, hidden]


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, input_size, hidden, num_heads, causal=False, dropout=0):
        if hidden % num_heads:
            raise ValueError("hidden must be divisible by num_heads")
        super().__init__()
        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.scale = self.head_size ** 0.5
        self.causal = causal

    def split(self, t, bs, seq):
        return (t.view(bs, seq, self.num_heads, self.head_size)
                .transpose(1, 2).reshape(bs * self.num_heads, seq, -1))

    def forward(self, x, return_attention=False):
        bs, seq, _ = x.shape
        k = (self.k(x).view(bs, seq, self.num_heads, self.head_size)  # -> [bs * heads, seq, head_size]
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, -1))
        q, v = self.split(self.q(x), bs, seq), self.split(self.v(x), bs, seq)
        # [bs * heads, seq, head_size] each
        scores = logits = q @ k.transpose(1, 2) / self.scale  # [bs * heads, seq, seq]
        if self.causal:
            mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # [seq, seq]
            scores = logits.masked_fill(mask, float("-inf"))  # [bs * heads, seq, seq]
        probs = self.dropout(torch.softmax(scores, dim=-1))  # [bs * heads, seq, seq]
        att = self.mix(
            (probs @ v)
            .view(bs, self.num_heads, seq, self.head_size)
            .transpose(1, 2)
            .reshape(bs, seq, -1)
        )
        # [bs, seq, hidden]
        if return_attention:
            return att, probs  # [bs * heads, seq, seq], [bs, seq, hidden]
        return att  # [bs, seq, hidden]
