"""The shape records' untraced reading of plain tensors (issue 28).

The line tracer reads a completed statement's values in the trace
function itself, with C calls only, when each is a plain tensor
(:func:`grader.worker.agent.plain_reader`) named by the frame's locals;
anything else is read through ``read``, traced, as before
(docs/threat-model.md, "What the trace function reads, it reads
traced"). These tests check that the plain reader runs no Python code
(no torch function mode, no dispatch mode, no subclass of anyone's is
called) and refuses everything but plain tensors, and that the line
tracer records exactly the same executions with and without it, on a
function whose statements hold plain tensors, parameters, containers,
a tensor subclass, a nested tensor, an attribute and a global.
"""
from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from grader.worker import agent

GLOBAL_TENSOR = torch.zeros(3, 1)


class Sub(torch.Tensor):
    """A tensor subclass: never read untraced."""


class Counting(TorchFunctionMode):
    """A torch function mode that counts what it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


class Dispatching(TorchDispatchMode):
    """A dispatch mode that counts what it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_plain_reader_reads_plain_tensors_only_and_runs_no_python() -> None:
    plain = agent.plain_reader(torch)
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    parameter = torch.nn.Parameter(torch.zeros(4, 5))
    three, scalar = torch.zeros(2, 3, 4), torch.tensor(1.0)
    counting, dispatching = Counting(), Dispatching()
    with counting, dispatching:
        assert plain(three) == [2, 3, 4]
        assert plain(scalar) == []
        assert plain(parameter) == [4, 5]
    assert counting.calls == 0 and dispatching.calls == 0
    for value in (torch.zeros(2).as_subclass(Sub), nested, [torch.zeros(1)],
                  (torch.zeros(1),), {"a": torch.zeros(1)}, 3, None, "x"):
        assert plain(value) is None


def traced_records(function: Any, plan: list[dict],
                   plain: Any) -> tuple[dict, int]:
    """The records the agent's line tracer makes of one call of
    ``function`` with the agent's own readers (and ``plain``), and how
    many values ``plain`` read."""
    spent = [0]
    is_tensor, shape_of, _, read_chain, expand = agent.value_readers(
        torch, spent)
    records: dict = {}
    counters: dict = {"returns": 0, "scanned": spent}
    read = [0]

    def counted(value: Any) -> Any:
        shape = plain(value)
        read[0] += shape is not None
        return shape

    def record(statement: dict, values: list) -> None:
        records.setdefault(str(statement["id"]), []).append(values)

    def held(value: Any, slot: Any = None) -> Any:
        return expand(value, True, slot)

    units, line_unit = agent.plan_units(plan)
    local = agent.line_tracer(units, line_unit, record, held, read_chain,
                              expand, counters,
                              plain=counted if plain else None)
    code = function.__code__

    def global_trace(frame: Any, event: str, arg: Any) -> Any:
        return local() if frame.f_code is code else None

    sys.settrace(global_trace)
    try:
        function()
    finally:
        sys.settrace(None)
    return records, read[0]


def sample() -> None:
    """Statements of every kind the reader meets."""
    a = torch.zeros(2, 3)
    b = torch.nn.Parameter(torch.zeros(4))
    c = [a, a[0]]
    d = a.as_subclass(Sub)
    e = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    f = b
    g = GLOBAL_TENSOR
    for step in range(3):
        a = torch.cat([a, a], dim=0)
    del a, b, c, d, e, f, g, step


def plan_of(function: Any) -> list[dict]:
    """One statement a line of ``function``'s body (from its second
    line), each watching what it assigns; ``f`` watched as ``b.data``
    too (an attribute: read traced), ``g`` a global."""
    first = function.__code__.co_firstlineno
    watches = [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"], ["step"],
               ["a"]]
    plan = []
    for index, name in enumerate(watches):
        line = first + 2 + index
        watch = [name] + ([["b", "data"]] if name == ["f"] else [])
        plan.append({"id": index, "kind": "assign", "first_line": line,
                     "last_line": line, "watch": watch})
    return plan


def test_line_tracer_records_the_same_with_the_plain_reader() -> None:
    plan = plan_of(sample)
    before, _ = traced_records(sample, plan, None)
    after, read = traced_records(sample, plan, agent.plain_reader(torch))
    assert after == before
    # a (2 statements, 3 times in the loop), b: read untraced; the
    # units with a container, a subclass, a nested tensor, an attribute,
    # a global or an int went the traced way.
    assert read >= 5
    assert before["0"] == [[[2, 3]]] and before["1"] == [[[4]]]
    assert before["8"] == [[[4, 3]], [[8, 3]], [[16, 3]]]
    assert before["6"] == [[[3, 1]]]
