# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Attention from scratch
#
# (Kit corpus: a notebook paired with jupytext, kept in a package of the
# learner's repository: it imports a plotting helper with a relative import,
# which fails when the file is loaded on its own. Its demo sits under
# `if __name__ == "__main__":`. Every class is correct; CausalAttention has a
# flake8 finding (-0.5) and MultiHeadAttention a shape comment that names a
# dimension the grammar does not know (-0.5). Expected: 9 / 10.)

# %%
import torch
import torch.nn as nn

from .plotting import show_weights

# %% [markdown]
# ## Simplified self-attention


# %%
def simple_self_attention(inputs):
    return torch.softmax(inputs @ inputs.T, dim=-1) @ inputs


# %% [markdown]
# ## Trainable weights

# %%
class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys, queries = x @ self.W_key, x @ self.W_query
        weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5,
                                dim=-1)
        return weights @ (x @ self.W_value)


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys, queries = self.W_key(x), self.W_query(x)
        weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5,
                                dim=-1)
        return weights @ self.W_value(x)


# %% [markdown]
# ## Causal attention

# %%
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout,
                 qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)  # Shape: (b, num_tokens, d_out)
        queries = self.W_query(x)  # Shape: (b, num_tokens, d_out)
        values = self.W_value(x)  # Shape: (b, num_tokens, d_out)
        attn_scores = queries @ keys.transpose(1, 2)
        # Shape: (b, num_tokens, num_tokens)
        attn_scores = attn_scores.masked_fill(
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        # Shape: (b, num_tokens, num_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)
        # Shape: (b, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)
        # Shape: (b, num_tokens, num_tokens)
        return attn_weights @ values  # Shape: (b, num_tokens, d_out)


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


# %% [markdown]
# ## Multi-head attention with weight splits

# %%
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1))

    def forward(self, x):
        b, num_tokens, _ = x.shape
        shape = (b, num_tokens, self.num_heads, self.head_dim)
        keys = self.W_key(x).view(shape).transpose(1, 2)
        # Shape: (b, num_heads, num_tokens, head_dim)
        queries = self.W_query(x).view(shape).transpose(1, 2)
        # Shape: (b, num_heads, num_tokens, head_dim)
        values = self.W_value(x).view(shape).transpose(1, 2)
        # Shape: (b, num_heads, num_tokens, head_dim)
        attn_scores = queries @ keys.transpose(2, 3)
        # Shape: (b, num_heads, T, T)
        attn_scores = attn_scores.masked_fill(
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        # Shape: (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(
            torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        # Shape: (b, num_heads, num_tokens, num_tokens)
        context = (attn_weights @ values).transpose(1, 2)
        # Shape: (b, num_tokens, num_heads, head_dim)
        context = context.contiguous().view(b, num_tokens, self.d_out)
        # Shape: (b, num_tokens, d_out)
        return self.out_proj(context)  # Shape: (b, num_tokens, d_out)


# %% [markdown]
# ## Fused projection

# %%
class QKVMultiheadAttention(nn.Module):
    def __init__(self, input_dim, d_model, num_heads):
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.qkv_layer = nn.Linear(input_dim, 3 * d_model)
        self.linear_layer = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, num_tokens, _ = x.shape
        qkv = self.qkv_layer(x)  # Shape: (b, num_tokens, 3 * d_model)
        qkv = qkv.reshape(b, num_tokens, self.num_heads, 3 * self.head_dim)
        # Shape: (b, num_tokens, num_heads, 3 * head_dim)
        q, k, v = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)
        # Shape: (b, num_heads, num_tokens, head_dim) each
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        # Shape: (b, num_heads, num_tokens, num_tokens)
        if mask is not None:
            scores = scores + mask
            # Shape: (b, num_heads, num_tokens, num_tokens)
        weights = torch.softmax(scores, dim=-1)
        # Shape: (b, num_heads, num_tokens, num_tokens)
        out = (weights @ v).permute(0, 2, 1, 3)
        # Shape: (b, num_tokens, num_heads, head_dim)
        out = out.reshape(b, num_tokens, self.d_model)
        # Shape: (b, num_tokens, d_model)
        return self.linear_layer(out)  # Shape: (b, num_tokens, d_model)


# %%
if __name__ == "__main__":
    torch.manual_seed(123)
    batch = torch.rand(2, 6, 3)
    mha = MultiHeadAttention(3, 4, 6, 0.0, num_heads=2)
    show_weights(mha(batch))
