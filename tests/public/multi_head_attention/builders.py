"""Build the homework's models from the public test values, as the
notebook does."""
from __future__ import annotations

from types import ModuleType

import torch

LINEARS = ("q", "k", "v", "mix")


def load_weights(model: torch.nn.Module, values: type) -> torch.nn.Module:
    """Copy the stored weights into ``model``, as the notebook does."""
    for name in LINEARS:
        if not hasattr(values, f"{name}_weight"):
            continue
        layer = getattr(model, name)
        layer.weight.data = getattr(values, f"{name}_weight")
        layer.bias.data = getattr(values, f"{name}_bias")
    return model


def self_attention(impl: ModuleType, values: type) -> torch.nn.Module:
    """``SelfAttention`` with the weights of ``values``, in eval mode."""
    model = impl.SelfAttention(values.input_size, values.hidden)
    return load_weights(model, values).eval()


def multi_head(impl: ModuleType, values: type, causal: bool = False,
               dropout: float = 0.0) -> torch.nn.Module:
    """``MultiHeadSelfAttention`` with the weights of ``values``."""
    model = impl.MultiHeadSelfAttention(values.input_size, values.hidden,
                                        values.num_heads, causal=causal,
                                        dropout=dropout)
    return load_weights(model, values).eval()
