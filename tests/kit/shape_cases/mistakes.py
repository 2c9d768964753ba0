"""Shape-comment mistakes, one per statement (see test_shapes.py).

SelfAttention: a missing comment, a comment without a shape, an unknown
name, a wrong shape, and a trailing comment without a shape whose shape sits
in the (unused) block below. MultiHeadSelfAttention: a shape right under one
size set only (a literal 3 for num_heads), a quotient that does not divide
evenly, the [bs, num_heads, ...] shape for a [bs * num_heads, ...] tensor,
and an unknown name in the causal region.
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
        # YOUR CODE STARTS HERE
        q = self.q(x)
        k = self.k(x)  # the keys
        v = self.v(x)  # [B, T, C]
        scores = q @ k.transpose(1, 2)  # [bs, seq, hidden]
        probs = torch.softmax(scores / self.scale, dim=-1)  # over the keys
        # [bs, seq, seq]
        return probs @ v  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE


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

    def forward(self, x, return_attention=False):
        bs, seq, _ = x.shape

        # YOUR CODE STARTS HERE
        k = (self.k(x).view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2).reshape(bs * self.num_heads, seq, -1))
        # [bs * 3, seq, head_size]
        q = (self.q(x).view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2).reshape(bs * self.num_heads, seq, -1))
        # [bs * num_heads, seq, hidden / 4]
        v = (self.v(x).view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2).reshape(bs * self.num_heads, seq, -1))
        # [bs, num_heads, seq, head_size]
        scores = q @ k.transpose(1, 2) / self.scale  # [bs * num_heads, seq, seq]
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # [T, T]
            scores = scores.masked_fill(mask, float("-inf"))  # [bs * num_heads, seq, seq]
            # YOUR CODE ENDS HERE

        # YOUR CODE STARTS HERE
        probs = self.dropout(torch.softmax(scores, dim=-1))  # [bs * num_heads, seq, seq]
        att = probs @ v  # [bs * num_heads, seq, head_size]
        att = att.view(bs, self.num_heads, seq, self.head_size).transpose(1, 2)  # [bs, seq, num_heads, head_size]
        att = self.mix(att.reshape(bs, seq, -1))  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
