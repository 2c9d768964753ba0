"""Run code under the sandbox agent's shape tracer, in this process.

The kit's unit tests of shape comments use the very line tracer the sandbox
agent runs (:func:`grader.worker.agent.line_tracer`), with the same plan
(:func:`grader.worker.agent.plan_units`): :class:`Trace` installs it for the
frames of one file's function, collects the records, and says whether every
traced frame returned (``intact``). It needs no torch when the caller passes
``is_tensor`` (the tracer probe runs on other Pythons).
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from grader.worker.agent import MAX_EXECUTIONS, line_tracer, plan_units


class Trace:
    """``with Trace(filename, function, plan) as trace: call()``; then
    ``trace.records`` (statement id -> executions) and ``trace.intact``."""

    def __init__(self, filename: str, function: str, plan: list[dict],
                 is_tensor: Callable[[Any], bool] | None = None) -> None:
        """Trace the frames of ``function`` in ``filename``."""
        self.filename, self.function = filename, function
        self.records: dict[str, list] = {}
        self.counters = {"returns": 0, "calls": 0}
        units, line_unit = plan_units(plan)
        self.lines = set(line_unit)
        if is_tensor is None:
            import torch

            def is_tensor(value: Any) -> bool:
                return isinstance(value, torch.Tensor)
        self.is_tensor = is_tensor
        self.local = line_tracer(units, line_unit, self._record, self._shape,
                                 self._read, self._expand, self.counters)
        self._previous: Any = None

    def __enter__(self) -> Trace:
        """Install the trace function."""
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        """Restore the previous trace function."""
        sys.settrace(self._previous)
        return False

    @property
    def intact(self) -> bool:
        """True when every traced frame returned."""
        return self.counters["calls"] == self.counters["returns"]

    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_filename != self.filename or \
                code.co_name != self.function:
            return None
        self.counters["calls"] += 1
        return self.local()

    def _shape(self, value: Any, slot: list | None = None
               ) -> list[int] | None:
        if self.is_tensor(value):
            return [int(size) for size in value.shape]
        return None

    @staticmethod
    def _read(chain: list[str], local_values: dict,
              global_values: dict) -> Any:
        name = chain[0]
        value = local_values.get(name, global_values.get(name))
        for attribute in chain[1:]:
            value = getattr(value, attribute, None)
        return value

    def _expand(self, value: Any) -> list:
        if isinstance(value, (tuple, list)):
            return [self._shape(element) for element in value]
        return [self._shape(value)]

    def _record(self, statement: dict, values: list) -> None:
        # As the agent keeps them (grader.worker.agent, record).
        executions = self.records.setdefault(str(statement["id"]), [])
        limit = MAX_EXECUTIONS
        if len(executions) >= limit and (values in executions
                                         or len(executions) >= 2 * limit):
            return
        executions.append(values)
