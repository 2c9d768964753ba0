"""The submission's own stack (docs/threat-model.md, principle 1).

The worker runs every call of the submission's code on a thread whose
loop is C (``agent.trampoline``): the stack below the submission's frames
holds no frame at all of the grader. These tests build the trampoline in
this process and look at the stacks directly (no audit hook here, so
every frame can be walked), which the sandbox forbids a submission to do.
The graded files of ``hostile/walls_batch/`` (``stack_seen_by_every_call``,
``error_text_walks``, ``globals_key_on_grader``) show the same from the
submission's side.
"""
from __future__ import annotations

import _thread
import sys
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from grader.worker import agent

AGENT_FILE = Path(agent.__file__).resolve()


@pytest.fixture(scope="module")
def trampoline():
    """``(call, carried, release, thread)``; sys.unraisablehook restored."""
    before = sys.unraisablehook
    try:
        yield agent.trampoline(_thread.start_new_thread, _thread.stack_size,
                               agent.TRAMPOLINE_STACK)
    finally:
        sys.unraisablehook = before


def _stack() -> list:
    """The code objects of every frame from the caller down."""
    codes = []
    frame = sys._getframe(1)
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def _looks_below() -> list:
    return _stack()


class _Watched(Exception):
    """An exception a finalizer can watch (weakly referable)."""


class _Probe(nn.Module):
    """A module whose forward keeps the stack below it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = _stack()
        return x * 2


def test_a_call_runs_on_a_stack_with_no_frame_below(trampoline) -> None:
    call, _, _, thread = trampoline
    assert call(_looks_below) == [_looks_below.__code__]
    assert thread() != _thread.get_ident()
    assert call(_thread.get_ident) == thread()


def test_a_forward_sees_only_itself_and_torch(trampoline) -> None:
    call, _, _, _ = trampoline
    module = _Probe()
    out = call(module, torch.ones(2))
    assert torch.equal(out, torch.full((2,), 2.0))
    files = [Path(code.co_filename).resolve() for code in module.seen]
    assert module.seen[0] is _Probe.forward.__code__
    assert all("torch" in path.parts for path in files[1:]), files
    assert AGENT_FILE not in files
    assert Path(__file__).resolve() not in files[1:]


def test_errors_are_carried_and_the_loop_survives(trampoline) -> None:
    call, carried, _, _ = trampoline

    def fails(kind: type) -> None:
        raise kind("in the submission")

    for _ in range(40):
        with pytest.raises(RuntimeError) as caught:
            call(fails, ValueError)
        marker, box = caught.value.args
        assert marker is carried and type(box[0]) is ValueError
        frames = []
        tb = box[0].__traceback__
        while tb is not None:
            frames.append(tb.tb_frame.f_code)
            tb = tb.tb_next
        assert frames == [fails.__code__]  # nothing of the grader in it
    with pytest.raises(RuntimeError) as caught:
        call(sys.exit, 3)
    assert type(caught.value.args[1][0]) is SystemExit
    assert caught.value.args[1][0].code == 3
    assert [call(pow, n, 2) for n in range(5)] == [0, 1, 4, 9, 16]


def test_recursion_reaches_the_limit_as_on_the_main_thread(trampoline
                                                           ) -> None:
    call, _, _, _ = trampoline

    def deep(n: int) -> int:
        return 0 if n == 0 else 1 + deep(n - 1)

    assert call(deep, sys.getrecursionlimit() - 20) == \
        sys.getrecursionlimit() - 20
    with pytest.raises(RuntimeError) as caught:
        call(deep, 10 * sys.getrecursionlimit())
    assert type(caught.value.args[1][0]) is RecursionError
    assert call(deep, 3) == 3


def test_what_is_released_dies_on_the_thread(trampoline) -> None:
    call, _, release, thread = trampoline
    died = []

    def doomed() -> Exception:
        error = _Watched("watched")
        weakref.finalize(error, lambda: died.append(_thread.get_ident()))
        return error

    def fails() -> None:
        raise doomed()  # held by no frame of its own (no cycle)

    try:
        call(fails)
    except RuntimeError as error:
        release(error)
    assert died == [thread()]


def test_the_guard_runs_none_of_the_submission_on_its_thread() -> None:
    ran = []

    def submission() -> None:
        ran.append(1)

    refusing: list = [None]
    guard = agent.guard_tracer(
        lambda code: "submission" if code is submission.__code__
        else "library", refusing, _thread.get_ident)
    before = sys.gettrace()
    sys.settrace(guard)
    try:
        with pytest.raises(PermissionError):
            submission()
    finally:
        sys.settrace(before)
    assert ran == [] and refusing == [_thread.get_ident()]


def test_describing_an_error_runs_its_text_on_the_thread(trampoline
                                                         ) -> None:
    call, carried, release, thread = trampoline
    seen = []

    class Loud(Exception):
        def __str__(self) -> str:
            seen.append((_thread.get_ident(), len(_stack())))
            return "loud"

    def fails() -> None:
        raise Loud()

    describe = agent.error_describer(__file__, [], 100, call, carried,
                                     release)
    try:
        call(fails)
    except RuntimeError as error:
        info = describe(error)
    assert (info["type"], info["message"], info["function"]) == \
        ("Loud", "loud", "fails")
    assert seen == [(thread(), 1)]  # its own frame alone, on the thread
