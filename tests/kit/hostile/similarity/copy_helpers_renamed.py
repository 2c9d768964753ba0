"""A disguised copy of ``submissions/correct_seed_notebook.py`` (principle
9): every step of both forwards moved into module-level helpers (one calls
another), every local variable, helper and parameter renamed, the
functional module imported under another name. The same computation,
line for line. ``python -m grader similarity`` must rank this pair above
every pair of independent solutions (tests/kit/test_similarity.py).
"""
import torch
import torch.nn as nn
from torch.nn import functional as fn


def project_heads(layer, inp, n_parts, width):
    nb, length, _ = inp.shape
    return layer(inp).view(nb, length, n_parts, width).transpose(1, 2)


def affinities(left, right, denom):
    return torch.matmul(left, right.transpose(-2, -1)) / denom


def hide_future(raw, length, dev):
    upper = torch.triu(torch.ones(length, length, device=dev),
                       diagonal=1).bool()
    return raw.masked_fill(upper[None, None, :, :], float('-inf'))


def normalise(raw, drop):
    weights = fn.softmax(raw, dim=-1)
    return drop(weights)


def blend(weights, values, nb, length):
    ctx = torch.matmul(weights, values)
    return ctx.transpose(1, 2).contiguous().view(nb, length, -1)


def single_head(mod, inp):
    query = mod.q(inp)
    raw = torch.bmm(query, mod.k(inp).transpose(1, 2)) / mod.scale
    weights = fn.softmax(raw, dim=-1)
    return torch.bmm(weights, mod.v(inp))


class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        """Single-head attention."""
        # YOUR CODE STARTS HERE
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5
        # YOUR CODE ENDS HERE

    def forward(self, x):
        """Single-head attention."""
        # YOUR CODE STARTS HERE
        return single_head(self, x)  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, input_size, hidden, num_heads, causal=False,
                 dropout=0):
        """Multi-head attention."""
        if hidden % num_heads:
            raise ValueError(f"hidden should be divisible by num_heads, "
                             f"but got hidden={hidden} and "
                             f"num_heads={num_heads}")
        super().__init__()

        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.scale = self.head_size ** 0.5
        self.causal = causal  # causal masking

    def forward(self, x, return_attention=False):
        """Multi-head attention."""
        bs, seq, _ = x.shape

        # YOUR CODE STARTS HERE
        kk = project_heads(self.k, x, self.num_heads, self.head_size)
        qq = project_heads(self.q, x, self.num_heads, self.head_size)
        vv = project_heads(self.v, x, self.num_heads, self.head_size)
        scores = affinities(qq, kk, self.scale)
        # YOUR CODE ENDS HERE

        if self.causal:
            # YOUR CODE STARTS HERE
            scores = hide_future(scores, seq, x.device)
            # YOUR CODE ENDS HERE

        # YOUR CODE STARTS HERE
        probs = normalise(scores, self.dropout)
        att = blend(probs, vv, bs, seq)
        probs = probs.reshape(bs * self.num_heads, seq, seq)
        att = self.mix(att)
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs

        return att
