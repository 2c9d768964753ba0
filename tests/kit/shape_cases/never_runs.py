"""Lines that never execute (see test_shapes.py).

MultiHeadSelfAttention handles unbatched input and huge sequences in
branches the grader never enters: a right comment there gives a note; a
missing one on a tensor statement (``scores`` held a tensor every time the
grader looked) is a finding, whether or not it ran; an unknown name is a
finding too. A statement sharing its line with an ``if`` header cannot be
traced: with its comment it gives a note.
"""
import torch
import torch.nn as nn


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
        # YOUR CODE STARTS HERE
        if x.dim() == 2:
            x = x.unsqueeze(0)  # [1, seq, input_size]
        bs, seq, _ = x.shape
        q, k, v = [t.view(bs, seq, self.num_heads, -1).transpose(1, 2)
                   .reshape(bs * self.num_heads, seq, -1)
                   for t in (self.q(x), self.k(x), self.v(x))]
        # [bs * num_heads, seq, head_size]
        scores = q @ k.transpose(1, 2) / self.scale  # [bs * num_heads, seq, seq]
        if seq > 10 ** 6:
            scores = scores.float()
            scores = scores.half()  # [bs * num_heads, T, T]
        if self.causal:
            mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # [seq, seq]
            scores = scores.masked_fill(mask, float("-inf"))  # [bs * num_heads, seq, seq]
        probs = self.dropout(torch.softmax(scores, dim=-1))  # [bs * num_heads, seq, seq]
        att = (probs @ v).view(bs, self.num_heads, seq, -1).transpose(1, 2)  # [bs, seq, num_heads, head_size]
        att = self.mix(att.reshape(bs, seq, -1))  # [bs, seq, hidden]
        if bs < 0: att = att.flip(0)  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE
        if return_attention:
            return att, probs
        return att
