"""Statements inside loops: every execution must match (see test_shapes.py).

SelfAttention loops over the batch, right in every iteration.
MultiHeadSelfAttention loops over the heads and grows ``att`` with
torch.cat; its comment [bs, seq, hidden] is right only in the last
iteration, so with two heads it is wrong in exactly one iteration per call.
There are no YOUR CODE markers: the whole body is the student's.
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
        outputs = []
        for b in range(x.shape[0]):
            q, k, v = self.q(x[b]), self.k(x[b]), self.v(x[b])  # [seq, hidden]
            probs = torch.softmax(q @ k.T / self.scale, dim=-1)  # [seq, seq]
            outputs.append(probs @ v)  # [seq, hidden]
        return torch.stack(outputs)  # [bs, seq, hidden]


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
        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        all_probs = []
        att = None
        for h in range(self.num_heads):
            cols = slice(h * self.head_size, (h + 1) * self.head_size)
            scores = q[:, :, cols] @ k[:, :, cols].transpose(1, 2) / self.scale  # [bs, seq, seq]
            if self.causal:
                mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # [seq, seq]
                scores = scores.masked_fill(mask, float("-inf"))  # [bs, seq, seq]
            probs = self.dropout(torch.softmax(scores, dim=-1))  # [bs, seq, seq]
            all_probs.append(probs)  # [bs, seq, seq]
            out = probs @ v[:, :, cols]  # [bs, seq, head_size]
            att = out if att is None else torch.cat([att, out], dim=-1)  # [bs, seq, hidden]
        probs = torch.stack(all_probs, dim=1).reshape(bs * self.num_heads, seq, seq)  # [bs * num_heads, seq, seq]
        att = self.mix(att)  # [bs, seq, hidden]
        if return_attention:
            return att, probs  # [bs, seq, hidden], [bs * num_heads, seq, seq]
        return att  # [bs, seq, hidden]
