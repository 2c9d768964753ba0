"""Probes that call an object again, and modes through its own train().

A probe marked ``again`` (``grader.plan.probe(..., again=True)``) builds
nothing: the worker calls again the object the task's previous probe
built, its state loaded and its mode set anew, and keeps that object only
until the next probe that builds (docs/internals.md, grader.worker.agent).
:meth:`grader.plan.Plan.add` accepts an ``again`` probe only after a
probe of the same task with the same target and init. Every probe sets
the mode through the object's own ``train(mode)``. One real worker runs
a small class through every case.
"""
from __future__ import annotations

import textwrap

import pytest
import torch

from grader.plan import Plan, probe
from grader.run.sandbox import Job, Limits, run_jobs
from grader.wire import check_frame, decode_value

SOURCE = textwrap.dedent('''
    import weakref

    import torch

    ALIVE = weakref.WeakSet()


    class Counter(torch.nn.Module):
        def __init__(self, start):
            super().__init__()
            self.calls = start
            self.w = torch.nn.Parameter(torch.zeros(2))
            ALIVE.add(self)

        def forward(self, x):
            self.calls += 1
            return self.calls, bool(self.training), float(self.w.sum())


    class Broken(Counter):
        def __init__(self, start):
            raise ValueError("no")


    class Moody(Counter):
        def train(self, mode=True):
            self.asked = mode
            return super().train(True)

        def forward(self, x):
            return bool(self.training), bool(self.asked)


    class Stubborn(Counter):
        train = 3


    def alive(x):
        return len(ALIVE)
''')
X = torch.zeros(1)
INIT = {"args": [10], "kwargs": {}}


def _probe(probe_id: str, target: str = "Counter", again: bool = False,
           train: bool = False, weight: float = 0.0,
           init: dict | None = INIT) -> dict:
    wire, _ = probe(probe_id, target, init=init, x=X, train=train,
                    again=again)
    if init is not None:
        from grader.wire import encode_tensor
        wire["state"] = {"w": encode_tensor(torch.full((2,), weight))}
    return wire


PROBES = [
    _probe("first"),
    _probe("second", again=True, train=True, weight=1.0),
    _probe("third", again=True),
    _probe("alive-after-chain", "alive", init=None),
    _probe("fresh"),
    _probe("broken", "Broken"),
    _probe("after-broken", "Broken", again=True),
    _probe("moody-eval", "Moody"),
    _probe("stubborn", "Stubborn"),
]


@pytest.fixture(scope="module")
def results() -> dict:
    result = run_jobs([Job("again", SOURCE, "/nowhere/again.py", PROBES)],
                      Limits(timeout=60))["again"]
    assert result.finished and result.channel_error is None
    assert [check_frame(m) for m in result.frames] == [None] * len(
        result.frames)
    return {m["id"]: m for m in result.frames if m.get("type") == "probe"}


def _value(results: dict, probe_id: str) -> list:
    frame = results[probe_id]
    assert frame["ok"], frame
    value = decode_value(frame["value"])
    return [item.number for item in value.items]


def test_an_again_probe_calls_the_same_object(results: dict) -> None:
    """The chain's calls count on one object, with each probe's state
    and mode; the next building probe starts afresh."""
    assert _value(results, "first") == [11, False, 0.0]
    assert _value(results, "second") == [12, True, 2.0]
    assert _value(results, "third") == [13, False, 0.0]
    assert _value(results, "fresh") == [11, False, 0.0]


def test_the_kept_object_dies_after_its_chain(results: dict) -> None:
    """Released after the chain's last probe, on the submission's
    thread: the probe that follows sees no Counter alive."""
    frame = results["alive-after-chain"]
    assert frame["ok"], frame
    assert decode_value(frame["value"]).number == 0


def test_an_again_probe_after_a_failed_build_says_so(results: dict) -> None:
    assert not results["broken"]["ok"]
    error = results["after-broken"]["error"]
    assert not results["after-broken"]["ok"]
    assert "the object of the previous probe could not be built" in \
        error["message"]


def test_modes_go_through_the_object_s_own_train(results: dict) -> None:
    """eval mode is asked through the override, which keeps training;
    a train attribute that is not callable fails the probe."""
    frame = results["moody-eval"]
    assert frame["ok"], frame
    assert [item.number for item in decode_value(
        frame["value"]).items] == [True, False]
    stubborn = results["stubborn"]
    assert not stubborn["ok"]
    assert "train attribute is not callable" in stubborn["error"]["message"]


def test_plan_add_checks_an_again_probe() -> None:
    plan = Plan()
    with pytest.raises(ValueError, match="first probe of its task"):
        plan.add("t", probe("a", "Counter", init=INIT, x=X, again=True))
    plan.add("t", probe("a", "Counter", init=INIT, x=X))
    plan.add("u", probe("b", "Counter", init={"args": [11], "kwargs": {}},
                        x=X))
    with pytest.raises(ValueError, match="target or init differs"):
        plan.add("t", probe("c", "Counter",
                            init={"args": [11], "kwargs": {}}, x=X,
                            again=True))
    with pytest.raises(ValueError, match="target or init differs"):
        plan.add("t", probe("c", "Other", init=INIT, x=X, again=True))
    with pytest.raises(ValueError, match="target or init differs"):
        plan.add("t", probe("c", "Counter", init={"args": [10.0],
                                                  "kwargs": {}},
                            x=X, again=True))
    plan.add("t", probe("c", "Counter", init={"args": [10], "kwargs": {}},
                        x=X, again=True, train=True))
    assert plan.probes["t"][-1]["again"] is True
    assert plan.info[("t", "c")].again
    assert "again" not in plan.probes["t"][0]
