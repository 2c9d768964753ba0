"""Which comment belongs to which statement (see test_shapes.py).

SelfAttention writes every comment ABOVE its statement: each comment then
belongs to the statement before it, so v and probs get the next statement's
shape and the return gets none (the END marker is not a comment). The first
comment, right after the START marker, belongs to no statement.
MultiHeadSelfAttention: a comment separated by a blank line (missing), a
trailing comment that wins over the block below it, a trailing comment on a
middle line of a multi-line statement (it claims the intermediate shape:
wrong), a block below a multi-line statement (right), and a statement
followed directly by the END marker (missing).
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
        # [batch_size, seq_len, hidden]
        q = self.q(x)
        # [batch_size, seq_len, hidden]
        k = self.k(x)
        # [batch_size, seq_len, hidden]
        v = self.v(x)
        # [batch_size, seq_len, seq_len]
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, hidden]
        return probs @ v
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
        k = self.k(x).view(bs, seq, self.num_heads, self.head_size)

        # [bs, seq, num_heads, head_size]
        k = k.transpose(1, 2).reshape(bs * self.num_heads, seq, -1)  # [bs * num_heads, seq, head_size]
        # [bs, num_heads, seq, head_size]
        q = (self.q(x)
             .view(bs, seq, self.num_heads, self.head_size)  # [bs, seq, num_heads, head_size]
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, -1))
        v = (self.v(x)
             .view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, -1))
        # -> [bs * num_heads, seq, head_size]
        scores = q @ k.transpose(1, 2) / self.scale
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)  # [seq, seq]
            scores = scores.masked_fill(mask, float("-inf"))  # [bs * num_heads, seq, seq]
            # YOUR CODE ENDS HERE

        # YOUR CODE STARTS HERE
        probs = self.dropout(torch.softmax(scores, dim=-1))  # [bs * num_heads, seq, seq]
        att = (probs @ v).view(bs, self.num_heads, seq, self.head_size)  # [bs, num_heads, seq, head_size]
        att = self.mix(att.transpose(1, 2).reshape(bs, seq, -1))  # [bs, seq, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
