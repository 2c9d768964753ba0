"""The grader's equivalent of torch.nn.Linear's initialisation
(``grader.worker.agent.quick_init``; docs/threat-model.md, principle 2).

A worker builds ~90 modules a submission, and torch's own
``reset_parameters`` runs dozens of Python frames that the trace function
follows and the operation judge judges. The worker runs the grader's
equivalent instead: these tests check that it draws the very same numbers
(bit for bit, and leaves the generator where torch leaves it), and that
anything unusual (a subclass, torch's code on the path replaced, another
torch function mode) still runs torch's own, so that the submission's
code on that path runs as before. The corpus's CSV is the end-to-end
check (tests/kit/test_grader_corpus.py): identical before and after.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode

from grader.worker import agent

ORIGINAL = torch.nn.Linear.reset_parameters
MODE = id(ORIGINAL)  # the grader's mode: none here (no mode is this object)


@pytest.fixture
def quick() -> Iterator[list[str]]:
    """torch.nn.Linear with the grader's initialisation installed and
    sealed as a worker does; yields the log of calls of torch's own."""
    calls: list[str] = []

    def original(module: torch.nn.Linear) -> None:
        calls.append(type(module).__name__)
        ORIGINAL(module)

    reset, seal = agent.quick_init(torch, original, MODE)
    torch.nn.Linear.reset_parameters = reset
    seal(agent._lookup, agent._code_objects)
    try:
        yield calls
    finally:
        torch.nn.Linear.reset_parameters = ORIGINAL


def _built(seed: int, *args: object, **kwargs: object
           ) -> tuple[list[torch.Tensor], torch.Tensor]:
    torch.manual_seed(seed)
    layer = torch.nn.Linear(*args, **kwargs)
    return ([p.detach().clone() for p in layer.parameters()],
            torch.rand(5))  # where the generator was left


CASES = [((3, 4), {}), ((7, 5), {"bias": False}), ((1, 9), {}),
         ((6, 6), {"dtype": torch.float64})]


def test_the_same_numbers_and_generator_bit_for_bit() -> None:
    expected = [_built(11 + i, *args, **kwargs)
                for i, (args, kwargs) in enumerate(CASES)]
    reset, seal = agent.quick_init(torch, ORIGINAL, MODE)
    torch.nn.Linear.reset_parameters = reset
    seal(agent._lookup, agent._code_objects)
    try:
        built = [_built(11 + i, *args, **kwargs)
                 for i, (args, kwargs) in enumerate(CASES)]
    finally:
        torch.nn.Linear.reset_parameters = ORIGINAL
    for (params, after), (want, want_after) in zip(built, expected):
        assert len(params) == len(want)
        for got, ref in zip(params, want):
            assert got.dtype == ref.dtype
            assert torch.equal(got, ref)
        assert torch.equal(after, want_after)


def test_gradients_and_leaves_as_torch_leaves_them(quick: list) -> None:
    with torch.enable_grad():
        layer = torch.nn.Linear(4, 3)
        assert torch.is_grad_enabled()
    assert layer.weight.is_leaf and layer.weight.requires_grad
    assert layer.weight.grad_fn is None and layer.bias.grad_fn is None
    assert quick == []  # the grader's own ran


def test_anything_unusual_runs_torchs_own(quick: list) -> None:
    class Sub(torch.nn.Linear):
        pass

    Sub(3, 2)
    assert quick == ["Sub"]

    seen: list[str] = []

    class Watching(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with Watching():
        torch.nn.Linear(3, 2)
    assert quick == ["Sub", "Linear"]
    assert "kaiming_uniform_" in seen

    kaiming = torch.nn.init.kaiming_uniform_
    replaced: list[tuple] = []

    def mine(tensor: torch.Tensor, **kwargs: object) -> torch.Tensor:
        replaced.append(tuple(tensor.shape))
        return kaiming(tensor, **kwargs)

    torch.nn.init.kaiming_uniform_ = mine
    try:
        torch.nn.Linear(3, 2)
    finally:
        torch.nn.init.kaiming_uniform_ = kaiming
    assert replaced == [(2, 3)]  # the submission's code on the path ran
    assert quick == ["Sub", "Linear", "Linear"]

    layer = torch.nn.Linear(3, 2)  # as it was again: the grader's
    assert quick == ["Sub", "Linear", "Linear"]
    layer.weight = torch.nn.Parameter(torch.zeros(2, 0))
    with pytest.warns(UserWarning, match="zero-element"):
        layer.reset_parameters()  # empty: torch's own
    assert quick[-1] == "Linear" and len(quick) == 4
