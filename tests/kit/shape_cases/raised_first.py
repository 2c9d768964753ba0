"""Forwards that raise after some of their statements ran.

A run that stops with an error verifies no comment (a forward that never
completes earns nothing from its comments), but its statements did run:
the note of each statement that completed before the error, and of the
one that raised, says "ran only in runs that ended in an error", never
"not run". The statements after the error did not run. SelfAttention's
``k`` comment is wrong but unjudged (no run of it completes); every
forward raises, so the correctness items are lost either way.
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
        q = self.q(x)  # [batch_size, seq_len, hidden]
        k = self.k(x)  # [seq_len, hidden]
        scores = q @ k  # [batch_size, seq_len, seq_len]
        return torch.softmax(scores / self.scale, dim=-1) @ self.v(x)
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, input_size, hidden, num_heads, causal=False,
                 dropout=0):
        super().__init__()
        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.causal = causal

    def forward(self, x, return_attention=False):
        bs, seq, _ = x.shape
        # YOUR CODE STARTS HERE
        k = self.k(x).view(bs, seq, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        q = self.q(x).view(bs, seq, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        raise NotImplementedError("the scores come next")
        return q @ k  # [batch_size, num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE
