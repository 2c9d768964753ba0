"""Autograd modes and twins (red team 10, R1; docs/threat-model.md, "Right
only in the state the grader probes").

:meth:`grader.plan.Plan.assign_modes` gives every probe a mode, each
family of probes both (a family of one by a twin in the other mode), and
:func:`grader.run.observe.observe` folds each twin into the probe it
repeats, failing it closed when the twin answered otherwise, raised or
never ran. The real files are graded in tests/kit/test_effects.py
(``hostile/effects/modes/``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from grader.constants import DEFAULT_SEED
from grader.engine import build_plan
from grader.locate.source import SourceFile
from grader.judge.checking import cases_phrase
from grader.plan import TWIN, Case, Plan, family, probe, state_words
from grader.rubric import load_assignment
from grader.run.observe import observe
from grader.run.sandbox import JobResult
from grader.wire import encode_value

KIT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = ("multi_head_attention", "attention_basics",
               "transformer_block")
X = torch.arange(6.0).reshape(2, 3)


def _plan() -> Plan:
    """A task with a family of three, a singleton, a led singleton, a
    trained singleton, a describe-only probe and an ``again`` probe."""
    plan = Plan()
    for probe_id in ("values:a", "values:b", "values:c"):
        plan.add("t", probe(probe_id, "M", x=X))
    plan.add("t", probe("init:a", "M", init={"args": []}, describe=True))
    plan.add("t", probe("prime:seeded", "M", x=X))
    plan.probes["t"][-1]["lead"] = True
    plan.add("t", probe("seeded", "M", init={"args": []}, x=X))
    plan.add("t", probe("alone:a", "M", x=X))
    plan.probes["t"][-1]["again"] = True
    plan.add("t", probe("trained", "M", x=X))
    plan.probes["t"][-1]["fit"] = {"method": "loss", "lr": 0.1,
                                   "batches": []}
    plan.add("t", probe("equal:a", "M", x=X))
    plan.probes["t"][-1]["mode_of"] = "values:b"
    return plan


def _modes(plan: Plan, task: str = "t") -> dict[str, bool]:
    return {wire["id"]: wire["grad"] for wire in plan.probes[task]}


def test_families_alternate_and_singletons_get_twins() -> None:
    plan = _plan()
    plan.assign_modes(DEFAULT_SEED)
    modes = _modes(plan)
    ids = list(modes)
    assert modes["values:a"] != modes["values:b"] != modes["values:c"]
    # The lead takes the mode of the probe it leads; mode_of its pair's.
    assert modes["prime:seeded"] == modes["seeded"]
    assert modes["equal:a"] == modes["values:b"]
    # Twins, at the end, in the other mode: the led probe after a copy
    # of its lead, a family of one paired probe too; none for the family
    # of three, the trained probe or the describe-only probe.
    twins = [i for i in ids if i.startswith(TWIN)]
    assert twins == [TWIN + "prime:seeded", TWIN + "seeded",
                     TWIN + "alone:a", TWIN + "equal:a"]
    assert ids[-4:] == twins
    for twin in twins:
        assert modes[twin] is not modes[twin.removeprefix(TWIN)]
        info = plan.info[("t", twin)]
        assert info.twin_of == twin.removeprefix(TWIN)
        assert info.grad is modes[twin]
    assert plan.info[("t", "values:a")].grad is modes["values:a"]
    assert plan.info[("t", "values:a")].twin_of is None
    # A twin is built fresh, and answers to no check's prefix.
    again = next(w for w in plan.probes["t"] if w["id"] == TWIN + "alone:a")
    assert "again" not in again
    assert plan.probes["t"][6]["again"] is True
    assert all(not i.startswith(("values", "seeded", "alone", "prime"))
               for i in twins)


def test_modes_follow_the_seed_one_way() -> None:
    seen = set()
    for seed in range(8):
        first, second = _plan(), _plan()
        first.assign_modes(seed)
        second.assign_modes(seed)
        assert first.probes == second.probes
        seen.add(tuple(_modes(first).values()))
    assert len(seen) > 1


def test_every_family_of_the_assignments_sees_both_modes() -> None:
    for assignment_id in ASSIGNMENTS:
        assignment = load_assignment(KIT / "grader" / "assignments"
                                     / assignment_id)
        plan = build_plan(assignment, DEFAULT_SEED)
        for task, wires in plan.probes.items():
            families: dict[str, set[bool]] = {}
            for wire in wires:
                assert isinstance(wire["grad"], bool), wire["id"]
                if wire.get("call") is None or wire.get("lead"):
                    continue
                name = family(wire["id"].removeprefix(TWIN))
                families.setdefault(name, set()).add(wire["grad"])
            for name, modes in families.items():
                trained = all(w.get("fit") for w in wires
                              if family(w["id"]) == name)
                assert modes == {True, False} or trained, (
                    assignment_id, task, name)
        again = build_plan(assignment, DEFAULT_SEED)
        assert again.probes == plan.probes
        assert build_plan(assignment, DEFAULT_SEED + 1).probes != \
            plan.probes


# --------------------------------------------------------------------------
# Folding twins


def _job(values: dict[str, object], raised: tuple[str, ...] = (),
         ended: str = "finished") -> JobResult:
    """Frames of a worker that answered ``values`` (id -> value), raised
    at ``raised``, in order; ``ended`` other than finished: it stopped
    after them."""
    frames: list[dict] = [{"type": "import", "ok": True}]
    for probe_id, value in values.items():
        frames.append({"type": "start", "id": probe_id})
        if probe_id in raised:
            frames.append({"type": "probe", "id": probe_id, "ok": False,
                           "error": {"type": "ValueError",
                                     "message": "no grad here"},
                           "coverage": {"ran": [["f", 3, "forward",
                                                 "call"]]}})
        else:
            frames.append({"type": "probe", "id": probe_id, "ok": True,
                           "value": encode_value(value)})
    return JobResult(name="t", frames=frames, ended=ended,
                     detail="" if ended == "finished"
                     else "its time ran out")


def _folded(values: dict[str, object], **kwargs) -> dict:
    plan = Plan()
    plan.add("t", probe("alone:a", "M", x=X))
    plan.assign_modes(DEFAULT_SEED)
    run = observe("t", SourceFile(text="x = 1\n", path=Path("s.py")),
                  plan.of_task("t"), _job(values, **kwargs))
    return run.results


def test_a_twin_that_agrees_is_folded_away() -> None:
    results = _folded({"alone:a": X, TWIN + "alone:a": X + 1e-9})
    assert list(results) == ["alone:a"]
    assert results["alone:a"].ok


def test_a_twin_that_differs_fails_the_probe() -> None:
    results = _folded({"alone:a": (X, X), TWIN + "alone:a": (X, X + 0.31)})
    assert list(results) == ["alone:a"]
    problem = results["alone:a"].problem
    assert problem == (
        "it answered differently with autograd on (as in training) than "
        "under torch.no_grad(), on the same input, weights and random "
        "seed (item 1 differs by 0.31)")
    shape = _folded({"alone:a": X, TWIN + "alone:a": X[:1]})
    assert "of shape [2, 3] with autograd on" in shape["alone:a"].problem \
        or "of shape [1, 3] with autograd on" in shape["alone:a"].problem
    nan = X.clone()
    nan[0, 0] = float("nan")
    same = _folded({"alone:a": nan, TWIN + "alone:a": nan.clone()})
    assert same["alone:a"].ok


def test_a_twin_that_raised_or_never_ran_fails_closed() -> None:
    plan = Plan()
    plan.add("t", probe("alone:a", "M", x=X))
    plan.assign_modes(DEFAULT_SEED)
    twin_mode = plan.info[("t", TWIN + "alone:a")].grad
    said = ("with autograd on (as in training)" if twin_mode
            else "under torch.no_grad()")
    raised = _folded({"alone:a": X, TWIN + "alone:a": None},
                     raised=(TWIN + "alone:a",))
    assert raised["alone:a"].problem == (
        f"{said}, it raised ValueError: \"no grad here\"")
    # What ran in the twin counts as having run for the probe.
    assert ("f", 3, "forward", "call") in raised["alone:a"].ran
    stopped = _folded({"alone:a": X}, ended="timeout")
    assert stopped["alone:a"].problem == (
        f"{said}, it never ran: the process had already stopped (its "
        f"time ran out)")
    # A probe that failed keeps its own problem.
    both = _folded({"alone:a": X, TWIN + "alone:a": X},
                   raised=("alone:a",))
    assert both["alone:a"].problem.startswith("ValueError")


# --------------------------------------------------------------------------
# The finer states (issue 24, R-c): inference_mode, raw inputs, the
# activation's operation, .grad set


def _states(plan: Plan, task: str) -> dict[str, tuple]:
    return {w["id"]: (w["grad"], bool(w.get("inference")),
                      bool(w.get("raw")), w.get("via"),
                      bool(w.get("grads"))) for w in plan.probes[task]}


def test_every_family_meets_its_finer_states() -> None:
    for assignment_id in ASSIGNMENTS:
        assignment = load_assignment(KIT / "grader" / "assignments"
                                     / assignment_id)
        for seed in (DEFAULT_SEED, 1, 2):
            plan = build_plan(assignment, seed)
            for task, wires in plan.probes.items():
                position = {w["id"]: i for i, w in enumerate(wires)}
                seen: dict[tuple[str, bool], list[tuple]] = {}
                for index, wire in enumerate(wires):
                    state = _states(plan, task)[wire["id"]]
                    info = plan.info[(task, wire["id"])]
                    assert (info.grad, info.inference, info.raw, info.via,
                            info.grads) == state
                    following = wires[index + 1] if index + 1 < len(
                        wires) else {}
                    # Never inference before an again probe, never with
                    # autograd on; raw and via only with it on.
                    if following.get("again") or wire["grad"]:
                        assert not wire.get("inference"), wire["id"]
                    if not wire["grad"]:
                        # Off: raw is an input that requires grad.
                        assert "via" not in wire
                    elif wire.get("call") is not None:
                        assert wire.get("raw") or wire.get("via")
                    assert not wire.get("grads") or wire.get("again")
                    if wire.get("lead") and following:
                        for key in ("raw", "via"):
                            assert wire.get(key) == following.get(key)
                    partner = wire.get("mode_of")
                    if partner in position and not wire["id"].startswith(
                            TWIN):
                        for key in ("raw", "via"):
                            assert wire.get(key) == \
                                wires[position[partner]].get(key)
                    if wire.get("call") is None or wire.get("lead") or (
                            partner in position
                            and not wire["id"].startswith(TWIN)) or (
                            not wire["grad"] and following.get("again")):
                        continue
                    name = family(wire["id"].removeprefix(TWIN))
                    seen.setdefault((name, wire["grad"]), []).append(
                        (bool(wire.get("inference")), bool(wire.get("raw")),
                         wire.get("via")))
                for (name, on), states in seen.items():
                    if len(states) < 2:
                        continue
                    for key in ((1,) if on else (0, 1)):
                        assert {s[key] for s in states} == {True, False}, (
                            assignment_id, task, name, on)
                    if on:
                        made = [s[2] for s in states if s[2]]
                        assert made and set(made) != {"clone"}
                # Every chain of two or more again probes: one with .grad
                # set, one without.
                chain: list[bool] = []
                for wire in wires + [{}]:
                    if wire.get("again"):
                        chain.append(bool(wire.get("grads")))
                        continue
                    if len(chain) >= 2:
                        assert set(chain) == {True, False}, (task, chain)
                    chain = []


def test_the_state_is_said() -> None:
    plan = Plan()
    case = Case(name="h", public=False, sizes={"n": 2}, x=X, weights={})
    plan.add("t", probe("values:a", "M", case=case))
    plan.add("t", probe("values:b", "M", case=case))
    plan.add("t", probe("values:c", "M", case=case))
    plan.add("t", probe("values:d", "M", case=case))
    plan.assign_modes(DEFAULT_SEED)
    plan.assign_states(DEFAULT_SEED)
    run = observe("t", SourceFile(text="x = 1\n", path=Path("s.py")),
                  plan.of_task("t"), _job({i: X for i in (
                      "values:a", "values:b", "values:c", "values:d")}))
    said = {result.info.case.describe() for result in run.results.values()}
    assert said == {
        "hidden case 'h' (n=2)",
        "hidden case 'h' (n=2) under torch.inference_mode() with an "
        "input that requires grad",
        "hidden case 'h' (n=2) with autograd on (as in training)",
        "hidden case 'h' (n=2) with autograd on and an input that "
        "requires no grad (as for a first layer in training)"}
    info = plan.info[("t", "values:a")]
    assert state_words(replace(info, grad=False, inference=False,
                               grads=True)) == (
        "under torch.no_grad() and with the parameters' .grad set (as "
        "after loss.backward())")
    assert state_words(replace(info, grad=False, inference=False,
                               raw=True)) == (
        "under torch.no_grad() with an input that requires grad")
    assert cases_phrase([("'h'", "hidden case 'h' (n=2) under x"),
                         ("'h'", "hidden case 'h' (n=2)"),
                         ("'g'", "hidden case 'g'")]) == (
        "2 cases (hidden case 'h' (n=2) under x, 'g')")
