"""PEP-8 findings inside and outside the classes (see test_pep8.py).

Module level: an unused import (F401) and a missing space around "="
(E225) - reported, never penalised. SelfAttention: a line too long (E501)
and a missing space after a comma (E231). MultiHeadSelfAttention: trailing
whitespace (W291) and nbgrader markers, whose E266 is not the student's.
"""
import os
import torch
import torch.nn as nn

DEFAULT_HIDDEN=9


class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size,hidden)
        self.scale = hidden ** 0.5

    def forward(self, x):
        probs = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / self.scale, dim=-1)
        return probs @ self.v(x)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, input_size, hidden, num_heads, causal=False,
                 dropout=0):
        super().__init__()
        ### BEGIN SOLUTION
        self.att = SelfAttention(input_size, hidden) 
        ### END SOLUTION

    def forward(self, x, return_attention=False):
        return self.att(x)
