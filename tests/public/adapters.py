"""Build models from the public test values and describe shapes in words."""
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


def expect_shape(tensor: object, expected: tuple[int, ...], what: str,
                 meaning: str) -> None:
    """Fail with a message that names the tensor, both shapes and dims."""
    if not isinstance(tensor, torch.Tensor):
        raise AssertionError(f"{what} should be a tensor of shape "
                             f"{list(expected)} = {meaning}, got "
                             f"{type(tensor).__name__}")
    assert tuple(tensor.shape) == expected, (
        f"{what} has shape {list(tensor.shape)}; expected {list(expected)} "
        f"= {meaning}")


def expect_close(actual: torch.Tensor, expected: torch.Tensor,
                 what: str, hint: str) -> None:
    """``assert_close`` at rtol 1e-4 / atol 1e-5 with a hint on failure."""
    try:
        torch.testing.assert_close(actual.detach().float(), expected,
                                   rtol=1e-4, atol=1e-5)
    except AssertionError as exc:
        detail = str(exc).split("\n")[1:4]
        raise AssertionError(f"{what}: the shape is right but the values "
                             f"are not. {hint}\n" + "\n".join(detail)
                             ) from None
