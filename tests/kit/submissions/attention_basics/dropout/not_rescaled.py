"""not_rescaled: CausalAttention's dropout by hand keeps each weight with
probability 1 - p but does not scale the kept ones by 1 / (1 - p).
task4.dropout is lost, with a message that names the missing rescale (and
no diagnosis: the mask is on the attention weights). Expected: 9.
"""
import torch
import torch.nn as nn


def simple_self_attention(inputs: torch.Tensor) -> torch.Tensor:
    """softmax(inputs inputs^T) inputs, without scaling."""
    # YOUR CODE STARTS HERE
    attn_scores = inputs @ inputs.T  # [num_tokens, num_tokens]
    attn_weights = torch.softmax(attn_scores, dim=-1)
    # [num_tokens, num_tokens]
    return attn_weights @ inputs  # [num_tokens, d_in]
    # YOUR CODE ENDS HERE


class SelfAttention_v1(nn.Module):
    """Self-attention with nn.Parameter weights."""

    def __init__(self, d_in: int, d_out: int) -> None:
        """Create W_query, W_key, W_value."""
        super().__init__()
        # YOUR CODE STARTS HERE
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scaled dot-product attention over one sequence."""
        # YOUR CODE STARTS HERE
        keys = x @ self.W_key  # [num_tokens, d_out]
        queries = x @ self.W_query  # [num_tokens, d_out]
        values = x @ self.W_value  # [num_tokens, d_out]
        attn_scores = queries @ keys.T  # [num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)  # [num_tokens, num_tokens]
        return attn_weights @ values  # [num_tokens, d_out]
        # YOUR CODE ENDS HERE


class SelfAttention_v2(nn.Module):
    """Self-attention with nn.Linear projections."""

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False) -> None:
        """Create W_query, W_key, W_value."""
        super().__init__()
        # YOUR CODE STARTS HERE
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scaled dot-product attention over one sequence."""
        # YOUR CODE STARTS HERE
        keys = self.W_key(x)  # [num_tokens, d_out]
        queries = self.W_query(x)  # [num_tokens, d_out]
        values = self.W_value(x)  # [num_tokens, d_out]
        attn_scores = queries @ keys.T  # [num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)  # [num_tokens, num_tokens]
        return attn_weights @ values  # [num_tokens, d_out]
        # YOUR CODE ENDS HERE


class CausalAttention(nn.Module):
    """Causal self-attention with dropout, for batches."""

    def __init__(self, d_in: int, d_out: int, context_length: int,
                 dropout: float, qkv_bias: bool = False) -> None:
        """Create the projections, the dropout and the mask buffer."""
        super().__init__()
        self.d_out = d_out
        # YOUR CODE STARTS HERE
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(
            torch.ones(context_length, context_length), diagonal=1))
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal scaled dot-product attention."""
        b, num_tokens, _ = x.shape
        # YOUR CODE STARTS HERE
        keys = self.W_key(x)  # [b, num_tokens, d_out]
        queries = self.W_query(x)  # [b, num_tokens, d_out]
        values = self.W_value(x)  # [b, num_tokens, d_out]
        attn_scores = queries @ keys.transpose(1, 2)
        # [b, num_tokens, num_tokens]
        attn_scores = attn_scores.masked_fill(
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        # [b, num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)  # [b, num_tokens, num_tokens]
        if self.training:
            keep = torch.rand_like(attn_weights) >= self.dropout.p
            # [b, num_tokens, num_tokens]
            attn_weights = attn_weights * keep  # [b, num_tokens, num_tokens]
        return attn_weights @ values  # [b, num_tokens, d_out]
        # YOUR CODE ENDS HERE


class MultiHeadAttentionWrapper(nn.Module):
    """Several CausalAttention heads side by side."""

    def __init__(self, d_in: int, d_out: int, context_length: int,
                 dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        """Create the heads."""
        super().__init__()
        # YOUR CODE STARTS HERE
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)])
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The heads' outputs, concatenated."""
        # YOUR CODE STARTS HERE
        return torch.cat([head(x) for head in self.heads], dim=-1)
        # [b, num_tokens, num_heads * d_out]
        # YOUR CODE ENDS HERE


class MultiHeadAttention(nn.Module):
    """Multi-head causal attention with weight splits."""

    def __init__(self, d_in: int, d_out: int, context_length: int,
                 dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        """Create the projections, out_proj, dropout and mask."""
        super().__init__()
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        # YOUR CODE STARTS HERE
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(
            torch.ones(context_length, context_length), diagonal=1))
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Multi-head causal attention."""
        b, num_tokens, _ = x.shape
        # YOUR CODE STARTS HERE
        shape = (b, num_tokens, self.num_heads, self.head_dim)
        keys = self.W_key(x).view(shape).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        queries = self.W_query(x).view(shape).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        values = self.W_value(x).view(shape).transpose(1, 2)
        # [b, num_heads, num_tokens, head_dim]
        attn_scores = queries @ keys.transpose(2, 3)
        # [b, num_heads, num_tokens, num_tokens]
        attn_scores = attn_scores.masked_fill(
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        # [b, num_heads, num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)
        # [b, num_heads, num_tokens, num_tokens]
        attn_weights = self.dropout(attn_weights)
        # [b, num_heads, num_tokens, num_tokens]
        context = (attn_weights @ values).transpose(1, 2)
        # [b, num_tokens, num_heads, head_dim]
        context = context.reshape(b, num_tokens, self.d_out)
        # [b, num_tokens, d_out]
        return self.out_proj(context)  # [b, num_tokens, d_out]
        # YOUR CODE ENDS HERE


class QKVMultiheadAttention(nn.Module):
    """Multi-head attention with one fused QKV projection."""

    def __init__(self, input_dim: int, d_model: int, num_heads: int) -> None:
        """Create qkv_layer and linear_layer."""
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        # YOUR CODE STARTS HERE
        self.qkv_layer = nn.Linear(input_dim, 3 * d_model)
        self.linear_layer = nn.Linear(d_model, d_model)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Multi-head attention from the fused projection."""
        b, num_tokens, _ = x.shape
        # YOUR CODE STARTS HERE
        qkv = self.qkv_layer(x)  # [b, num_tokens, 3 * d_model]
        qkv = qkv.reshape(b, num_tokens, self.num_heads, 3 * self.head_dim)
        # [b, num_tokens, num_heads, 3 * head_dim]
        qkv = qkv.permute(0, 2, 1, 3)
        # [b, num_heads, num_tokens, 3 * head_dim]
        q, k, v = qkv.chunk(3, dim=-1)  # [b, num_heads, num_tokens, head_dim]
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        # [b, num_heads, num_tokens, num_tokens]
        if mask is not None:
            scores = scores + mask  # [b, num_heads, num_tokens, num_tokens]
        attention = torch.softmax(scores, dim=-1)
        # [b, num_heads, num_tokens, num_tokens]
        values = (attention @ v).permute(0, 2, 1, 3)
        # [b, num_tokens, num_heads, head_dim]
        values = values.reshape(b, num_tokens, self.d_model)
        # [b, num_tokens, d_model]
        return self.linear_layer(values)  # [b, num_tokens, d_model]
        # YOUR CODE ENDS HERE
