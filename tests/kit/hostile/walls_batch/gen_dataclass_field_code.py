"""Red team 16 (A1): the attention is written in a dataclass field name.

dataclass writes each field's name into the text of ``__repr__`` it
compiles (it checks no name), so a name holding a quote and line breaks
writes a function of its own, which both tasks call. The code was the
library's (a generator's) and its file "<string>": neither traced nor
foreign, full marks. Now code a generator made from a name that is no
identifier is the submission's, made at run time: untraceable, and the
tasks' correctness items earn nothing (docs/threat-model.md,
principle 4).
"""
import dataclasses

import torch
import torch.nn as nn

_BODY = '''"
 def __repr__(q, k, v, num_heads=1, causal=False, drop=None):
  b, t, h = q.shape
  d = h // num_heads
  s = lambda x: x.view(b, t, num_heads, d).transpose(1, 2).reshape(b * num_heads, t, d)
  q, k, v = s(q), s(k), s(v)
  w = q @ k.transpose(1, 2) / d ** .5
  if causal: w = w.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
  p = w.softmax(-1)
  if drop is not None: p = drop(p)
  o = (p @ v).view(b, num_heads, t, d).transpose(1, 2).reshape(b, t, h)
  return o, p
  #'''
_HOLDER = dataclasses.dataclass(init=False, eq=False)(
    type("H", (), {"__annotations__": {_BODY: int}}))
_attend = _HOLDER.__repr__.__wrapped__
_attend.__globals__["torch"] = torch


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        return _attend(q, k, v)[0]
        # [batch_size, seq_len, hidden]


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking and dropout."""

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
        self.head_size = hidden // num_heads
        self.causal = causal

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        att, probs = _attend(self.q(x), self.k(x), self.v(x), self.num_heads,
                             self.causal, self.dropout)
        # [batch_size, seq_len, hidden],
        # [batch_size * num_heads, seq_len, seq_len]
        att = self.mix(att)  # [batch_size, seq_len, hidden]
        if return_attention:
            return att, probs
        return att
