"""Submissions that switch the shape tracing off (see test_shapes.py).

SelfAttention removes the trace function with sys.settrace(None);
MultiHeadSelfAttention removes its own frame's local trace function. Both
must leave the tracer not intact.
"""
import sys

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
        sys.settrace(None)
        probs = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / self.scale, dim=-1)  # [bs]
        return probs @ self.v(x)  # [bs]


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, input_size, hidden, num_heads, causal=False, dropout=0):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.num_heads = num_heads

    def forward(self, x, return_attention=False):
        sys._getframe().f_trace = None
        att = self.mix(self.q(x))  # [bs]
        return att  # [bs]
