"""Attention, step by step (my solutions to the warm-up).

(Kit corpus: a learner who named four classes their own way: the book's
``CausalSelfAttention``-style name, ``SelfAttentionV1`` without the
underscore, ``MultiheadAttentionWrapper`` with a small h, and a
``MultiHeadAttention`` built inside a factory function. The contract's
names are fixed, so those tasks earn 0, but each item points at the class
that was meant. The other three tasks are correct: 4 / 10.)
"""
import torch
import torch.nn as nn


def simple_self_attention(inputs):
    scores = inputs @ inputs.T
    weights = torch.softmax(scores, dim=-1)
    return weights @ inputs


class SelfAttentionV1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        w = torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1)
        return w @ v


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        w = torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1)
        return w @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout,
                 qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(
            torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        n = x.shape[1]
        q = self.W_query(x)  # [b, n, d_out]
        k = self.W_key(x)  # [b, n, d_out]
        v = self.W_value(x)  # [b, n, d_out]
        s = q @ k.transpose(1, 2)  # [b, n, n]
        s = s.masked_fill(self.mask.bool()[:n, :n], -torch.inf)  # [b, n, n]
        w = self.dropout(torch.softmax(s / k.shape[-1] ** 0.5, dim=-1))
        # [b, n, n]
        return w @ v  # [b, n, d_out]


class MultiheadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalSelfAttention(d_in, d_out, context_length, dropout,
                                 qkv_bias) for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


def build_attention_layers():
    """The multi-head attention class, made where I tried it out."""

    class MultiHeadAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                     qkv_bias=False):
            super().__init__()
            self.d_out, self.num_heads = d_out, num_heads
            self.head_dim = d_out // num_heads
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.out_proj = nn.Linear(d_out, d_out)
            self.dropout = nn.Dropout(dropout)
            self.register_buffer("mask", torch.triu(
                torch.ones(context_length, context_length), diagonal=1))

        def forward(self, x):
            b, n, _ = x.shape
            q = self.W_query(x).view(b, n, self.num_heads, self.head_dim)
            k = self.W_key(x).view(b, n, self.num_heads, self.head_dim)
            v = self.W_value(x).view(b, n, self.num_heads, self.head_dim)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            s = q @ k.transpose(2, 3)
            s = s.masked_fill(self.mask.bool()[:n, :n], -torch.inf)
            w = self.dropout(torch.softmax(s / k.shape[-1] ** 0.5, dim=-1))
            out = (w @ v).transpose(1, 2).contiguous().view(b, n, self.d_out)
            return self.out_proj(out)

    return MultiHeadAttention


class QKVMultiheadAttention(nn.Module):
    def __init__(self, input_dim, d_model, num_heads):
        super().__init__()
        self.d_model, self.num_heads = d_model, num_heads
        self.head_dim = d_model // num_heads
        self.qkv_layer = nn.Linear(input_dim, 3 * d_model)
        self.linear_layer = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        qkv = self.qkv_layer(x).reshape(b, n, self.num_heads,
                                        3 * self.head_dim)
        # [b, num_tokens, num_heads, 3 * head_dim]
        q, k, v = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)
        # [b, num_heads, num_tokens, head_dim]
        s = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        # [b, num_heads, num_tokens, num_tokens]
        if mask is not None:
            s = s + mask  # [b, num_heads, num_tokens, num_tokens]
        w = torch.softmax(s, dim=-1)  # [b, num_heads, num_tokens, num_tokens]
        out = (w @ v).permute(0, 2, 1, 3).reshape(b, n, self.d_model)
        # [b, num_tokens, d_model]
        return self.linear_layer(out)  # [b, num_tokens, d_model]
