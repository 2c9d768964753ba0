"""The catch-all of principle 6 (docs/threat-model.md): a statement on
which a torch operation made a tensor that outlived it, and for which the
shape reader read no tensor, fails closed whatever its syntax.

Unit tests of its three parts (the end-to-end files are graded by
``test_walls_batch.py``): every statement of the student's code is
planned (``span`` statements group lines), the worker's ``made_keeper``
reports a line whose tensor outlived its statement (and not one whose
tensors died), and the verifier turns an unaccounted line into "not
verifiable" or "missing".
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

import torch

from grader.locate.source import load_python
from grader.shapes import (SPAN_KIND, DimensionTable, collect_statements,
                           verify)
from grader.worker import agent

SOURCE = '''import torch


class C(torch.nn.Module):
    def forward(self, x):
        # YOUR CODE STARTS HERE
        q = x + 1  # [batch_size]
        print(q)
        if q.sum() > 0:
            pass
        self.log.set(q * 2)  # [batch_size]
        stash(q * 3)

        class S:
            k = q * 4  # [batch_size]

        def inner(v=q * 5):
            return v
        return q  # [batch_size]
        # YOUR CODE ENDS HERE
'''
DIMS = DimensionTable.from_rubric({"batch_size": []})


def _statements(tmp_path: Path):
    path = tmp_path / "made.py"
    path.write_text(SOURCE)
    return collect_statements(load_python(path), "C", "forward")


def test_every_statement_is_planned_unwatched_ones_as_spans(
        tmp_path: Path) -> None:
    found = {s.first_line: s for s in _statements(tmp_path)}
    spans = {line: s for line, s in found.items() if s.kind == SPAN_KIND}
    # print, the if header, pass, the stash call, the class line, its
    # body's assignment, the nested def's header
    assert sorted(spans) == [8, 9, 10, 12, 14, 15, 17]
    assert all(s.watch == () for s in spans.values())
    assert spans[15].comment == "[batch_size]"
    assert spans[12].comment is None
    assert found[7].kind == "assign" and found[11].kind == "expr"
    ids = [s.id for s in found.values()]
    assert sorted(ids) == list(range(len(ids)))


def _runs(records: dict) -> list:
    return [({"batch_size": 3}, records)]


def test_an_unaccounted_line_fails_closed_and_a_read_tensor_accounts(
        tmp_path: Path) -> None:
    statements = _statements(tmp_path)
    by_line = {s.first_line: s for s in statements}
    records = {str(by_line[7].id): [[[3]]],       # q read: a tensor
               str(by_line[11].id): [[None]],     # self.log: no tensor
               str(by_line[19].id): [[[3]]]}
    findings = verify(statements, _runs(records), DIMS,
                      frozenset({7, 12, 15, 17, 19, 40}))
    assert [(f.line, f.kind) for f in findings] == [
        (12, "missing"), (15, "not_verified"), (17, "missing")]
    assert "outlived it" in findings[0].message
    # Line 11 read no tensor: with a tensor made on it, it fails closed.
    findings = verify(statements, _runs(records), DIMS, frozenset({11}))
    assert [(f.line, f.kind) for f in findings] == [(11, "not_verified")]
    # Without made lines, spans change nothing.
    assert verify(statements, _runs(records), DIMS) == []


def _student(handler, keep):
    """Stands for the submission's frame: two operations on two lines,
    the first one's tensor kept, the second one's dropped."""
    frame = sys._getframe()
    kept = handler(torch.ones(2))
    keep.append(kept)
    handler(torch.ones(3))
    return frame


def test_the_keeper_reports_a_line_whose_tensor_outlived_it() -> None:
    phase = {"made": {}}
    student_code = _student.__code__

    def classify(code):
        return "submission" if code is student_code else "library"

    made, settle, clear = agent.made_keeper(
        phase, classify, lambda value: isinstance(value, torch.Tensor))
    calls = []

    def handler(value):
        tracer = made(sys._getframe())
        result = value * 2
        calls.append(sys._getframe().f_back.f_lineno)
        tracer(None, "return", result)
        return result

    frame = _student(handler, keep := [])
    settle(frame, "returned")
    assert list(phase["made"]) == [calls[0]]
    assert len(keep) == 1
    clear()


def _fails(value: torch.Tensor) -> None:
    raise ValueError("refused")  # its frame (in the traceback) holds value


def test_a_statement_that_raised_is_judged_when_its_frame_ends() -> None:
    """A tensor held only by a caught exception's traceback dies with the
    handler (not made); one the raising statement stashed is made."""
    phase: dict = {"made": {}}
    codes: set = set()
    made, settle, _ = agent.made_keeper(
        phase, lambda code: "submission" if code in codes else "library",
        lambda value: isinstance(value, torch.Tensor))

    def handler(value):
        tracer = made(sys._getframe())
        tracer(None, "return", value)
        return value

    def refused():
        frame = sys._getframe()
        try:
            _fails(handler(torch.ones(2)))
        except ValueError:
            settle(frame, "raised")
        settle(frame, "statement")  # the handler's line
        return frame

    def stashed(box):
        frame = sys._getframe()
        try:
            box.append(handler(torch.ones(2))) or 1 / 0
        except ZeroDivisionError:
            settle(frame, "raised")
        settle(frame, "statement")
        assert phase["made"] == {}  # judged only when the frame ends
        return frame

    codes.update({refused.__code__, stashed.__code__})
    settle(refused(), "returned")
    assert phase["made"] == {}
    settle(stashed(box := []), "returned")
    assert len(phase["made"]) == 1 and box


def test_each_tensor_of_a_returned_tuple_is_made() -> None:
    """``torch.sort`` and ``split`` return tensors in a tuple: a stash of
    one of them is seen; a tuple whose tensors all die is not."""
    phase: dict = {"made": {}}
    codes: set = set()
    made, settle, _ = agent.made_keeper(
        phase, lambda code: "submission" if code in codes else "library",
        lambda value: isinstance(value, torch.Tensor))

    def handler(value):
        tracer = made(sys._getframe())
        tracer(None, "return", value)
        return value

    def student(box):
        frame = sys._getframe()
        box.append(handler(torch.sort(torch.rand(4)))[0])
        settle(frame, "statement")
        handler(torch.ones(4).split(2))
        settle(frame, "statement")
        return frame

    codes.add(student.__code__)
    settle(student(box := []), "returned")
    assert len(phase["made"]) == 1 and len(box) == 1


def _keeper(codes: set) -> tuple:
    """A keeper whose submission is the code in ``codes``, and a handler
    (the operation) that reports what it returns."""
    phase: dict = {"made": {}}
    made, settle, clear = agent.made_keeper(
        phase, lambda code: "submission" if code in codes else "library",
        lambda value: isinstance(value, torch.Tensor))

    def handler(value):
        tracer = made(sys._getframe())
        tracer(None, "return", value)
        return value

    return phase, handler, settle, clear


def _library_call(handler, answer, event: str = "return"):
    """A library call of the line: it runs an operation, keeps the tensor
    in ``box`` and returns what ``answer(tensor, box)`` gives. Its end is
    told to its local trace function as CPython would (``event``
    "exception" first: it saw one; "" : still open)."""
    frame = sys._getframe()
    box = types.SimpleNamespace(inner=handler(torch.ones(3)))
    result = answer(box.inner, box)
    if event == "exception":
        frame.f_trace(frame, "exception", (ValueError, None, None))
    if event:
        frame.f_trace(frame, "return", result)
    return result


def test_what_a_library_call_keeps_for_itself_is_not_the_lines() -> None:
    """A tensor an operation made inside a library call of the line is
    the line's only if the call returns it (alone, or nested in tuples,
    lists and dicts): a distribution's ``probs`` built from a number is
    the distribution's. A call that saw an exception, or is still open
    when the statement ends, counts every tensor (fails closed)."""
    codes: set = set()
    phase, handler, settle, clear = _keeper(codes)
    lines = {}

    def student(stash):
        frame = sys._getframe()
        stash.append(_library_call(handler, lambda t, box: box))
        lines["own"] = frame.f_lineno - 1
        settle(frame, "statement")
        stash.append(_library_call(handler,
                                   lambda t, box: ({"a": [0, t]},)))
        lines["nested"] = frame.f_lineno - 2
        settle(frame, "statement")
        stash.append(_library_call(handler, lambda t, box: box,
                                   "exception"))
        lines["raised"] = frame.f_lineno - 2
        settle(frame, "statement")
        stash.append(_library_call(handler, lambda t, box: box, ""))
        lines["open"] = frame.f_lineno - 1
        settle(frame, "statement")
        return frame

    codes.add(student.__code__)
    stash: list = []
    settle(student(stash), "returned")
    assert len(stash) == 4
    assert sorted(phase["made"]) == sorted(
        [lines["nested"], lines["raised"], lines["open"]])
    assert lines["own"] not in phase["made"]
    clear()
