"""Assertions shared by every assignment's public tests: a failure names
the tensor, both shapes and what each dimension means, or says where to
look when the values are wrong."""
from __future__ import annotations

import torch


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
