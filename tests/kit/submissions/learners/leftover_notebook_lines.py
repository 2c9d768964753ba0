#!/usr/bin/env python
# coding: utf-8

# (Kit corpus: a notebook exported with nbconvert after the learner deleted
# the cell that defined d_in and d_out: the demo cells below the classes use
# them, so loading stops at a NameError. CausalAttention is written twice
# (a first try with the mask on the diagonal, then the fix); the last one
# counts, as it does when the file runs. The classes read module-level
# values (MASK_VALUE, computed from DTYPE; DEFAULTS), which are loaded with
# them. Every graded class is correct: 10 / 10.)

# In[1]:


import torch
import torch.nn as nn

DTYPE = torch.float32
MASK_VALUE = torch.finfo(DTYPE).min
DEFAULTS = {"qkv_bias": False}


# In[2]:


def simple_self_attention(inputs):
    scores = inputs @ inputs.T  # [num_tokens, num_tokens]
    return torch.softmax(scores, dim=-1) @ inputs


# In[3]:


class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_weights = torch.softmax(queries @ keys.T / keys.shape[-1]**0.5, dim=-1)
        return attn_weights @ values


sa_v1 = SelfAttention_v1(d_in, d_out)
print(sa_v1(inputs))


# In[4]:


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=DEFAULTS["qkv_bias"]):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_weights = torch.softmax(queries @ keys.T / keys.shape[-1]**0.5, dim=-1)
        return attn_weights @ values


sa_v2 = SelfAttention_v2(d_in, d_out)
print(sa_v2(inputs))


# In[5]:


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout,
                 qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(
            torch.ones(context_length, context_length)))

    def forward(self, x):
        n = x.shape[1]
        scores = self.W_query(x) @ self.W_key(x).transpose(1, 2)
        scores = scores.masked_fill(self.mask.bool()[:n, :n], MASK_VALUE)
        weights = torch.softmax(scores / scores.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ self.W_value(x)


# In[6]:


# Fixed: the diagonal stays visible, and the scale is the keys' size.
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout,
                 qkv_bias=DEFAULTS["qkv_bias"]):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(
            torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        num_tokens = x.shape[1]
        keys = self.W_key(x)  # [batch, num_tokens, d_out]
        scores = self.W_query(x) @ keys.transpose(1, 2)
        # [batch, num_tokens, num_tokens]
        scores = scores.masked_fill(
            self.mask.bool()[:num_tokens, :num_tokens], MASK_VALUE)
        # [batch, num_tokens, num_tokens]
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        # [batch, num_tokens, num_tokens]
        return self.dropout(weights) @ self.W_value(x)
        # [batch, num_tokens, num_tokens] @ [batch, num_tokens, d_out]
        # -> [batch, num_tokens, d_out]


torch.manual_seed(123)
ca = CausalAttention(d_in, d_out, batch.shape[1], 0.0)
print(ca(batch))


# In[7]:


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


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
        self.register_buffer("mask", torch.triu(
            torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, _ = x.shape
        heads = (b, num_tokens, self.num_heads, self.head_dim)
        keys = self.W_key(x).view(heads).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        queries = self.W_query(x).view(heads).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        values = self.W_value(x).view(heads).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        scores = queries @ keys.transpose(2, 3)
        # [b, num_heads, num_tokens, num_tokens]
        scores = scores.masked_fill(
            self.mask.bool()[:num_tokens, :num_tokens], MASK_VALUE)
        # [b, num_heads, num_tokens, num_tokens]
        weights = self.dropout(
            torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1))
        # [b, num_heads, num_tokens, num_tokens]
        context = (weights @ values).transpose(1, 2).contiguous()
        # [b, num_tokens, num_heads, head_dim]
        context = context.view(b, num_tokens, self.d_out)
        # [b, num_tokens, d_out]
        return self.out_proj(context)  # [b, num_tokens, d_out]


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
        qkv = self.qkv_layer(x).reshape(b, num_tokens, self.num_heads,
                                        3 * self.head_dim)
        # [b, num_tokens, num_heads, 3 * head_dim]
        q, k, v = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)
        # [b, num_heads, num_tokens, head_dim]
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        # [b, num_heads, num_tokens, num_tokens]
        if mask is not None:
            scores = scores + mask  # [b, num_heads, num_tokens, num_tokens]
        weights = torch.softmax(scores, dim=-1)
        # [b, num_heads, num_tokens, num_tokens]
        out = (weights @ v).permute(0, 2, 1, 3).reshape(b, num_tokens,
                                                        self.d_model)
        # [b, num_tokens, d_model]
        return self.linear_layer(out)  # [b, num_tokens, d_model]


mha = MultiHeadAttention(d_in, 4, batch.shape[1], 0.0, num_heads=2)
print(mha(batch).shape)
