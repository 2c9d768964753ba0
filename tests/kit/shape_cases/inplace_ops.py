"""In-place operations (see test_shapes.py).

An in-place method call, an augmented assignment and a subscript assignment
change no binding, yet each is a statement whose tensor needs a shape.
SelfAttention: ``scores /= ...`` (right), ``probs.mul_(...)`` (wrong).
MultiHeadSelfAttention: ``scores.masked_fill_`` without a comment (missing),
``scores[:, mask] = ...`` (right), ``probs *= ...`` (wrong), and a list's
``append`` (not a tensor: no comment needed).
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
        scores = self.q(x) @ self.k(x).transpose(1, 2)  # [bs, seq, seq]
        scores /= self.scale  # [bs, seq, seq]
        probs = torch.softmax(scores, dim=-1)  # [bs, seq, seq]
        probs.mul_(1.0)  # [bs, seq, hidden]
        return probs @ self.v(x)  # [bs, seq, hidden]
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
        q, k, v = [t.view(bs, seq, self.num_heads, self.head_size).transpose(1, 2)
                   .reshape(bs * self.num_heads, seq, self.head_size)
                   for t in (self.q(x), self.k(x), self.v(x))]  # [bs * num_heads, seq, head_size]
        scores = q @ k.transpose(1, 2) / self.scale  # [bs * num_heads, seq, seq]
        # YOUR CODE ENDS HERE
        if self.causal:
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # [seq, seq]
            scores.masked_fill_(mask, float("-inf"))
            scores[:, mask] = float("-inf")  # [bs * num_heads, seq, seq]
            # YOUR CODE ENDS HERE
        # YOUR CODE STARTS HERE
        probs = self.dropout(torch.softmax(scores, dim=-1))  # [bs * num_heads, seq, seq]
        probs *= 1.0  # [bs, num_heads, seq, seq]
        outputs = []
        outputs.append(probs @ v)
        att = outputs[0].view(bs, self.num_heads, seq, self.head_size)  # [bs, num_heads, seq, head_size]
        att = self.mix(att.transpose(1, 2).reshape(bs, seq, -1))  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE
        if return_attention:
            return att, probs
        return att
