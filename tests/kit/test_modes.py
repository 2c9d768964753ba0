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
from grader.plan import (TWIN, TWIN_SAME, TWIN_STATE, Case, Plan, ProbeInfo,
                         TwinInput, family, probe, state_words)
from grader.rubric import load_assignment
from grader.run.observe import observe
from grader.run.sandbox import JobResult
from grader.wire import encode_tensor, encode_value

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
            branches: dict[tuple[str, str], set[bool]] = {}
            for wire in wires:
                assert isinstance(wire["grad"], bool), wire["id"]
                if wire.get("call") is None or wire.get("lead"):
                    continue
                probe_id = plan.info[(task, wire["id"])].twin_of \
                    or wire["id"]
                name = family(probe_id)
                families.setdefault(name, set()).add(wire["grad"])
                branch = plan.info[(task, probe_id)].branch
                branches.setdefault((name, branch), set()).add(wire["grad"])
            for name, modes in families.items():
                trained = all(w.get("fit") for w in wires
                              if family(w["id"]) == name)
                assert modes == {True, False} or trained, (
                    assignment_id, task, name)
            # Every branch the plug-in declared (a rate, a flag) too.
            for (name, branch), modes in branches.items():
                assert modes == {True, False} or not branch, (
                    assignment_id, task, name, branch)
        again = build_plan(assignment, DEFAULT_SEED)
        assert again.probes == plan.probes
        assert build_plan(assignment, DEFAULT_SEED + 1).probes != \
            plan.probes


def test_each_declared_branch_sees_both_modes() -> None:
    """Branches (issue 24, R-b): a family's probes alternate within each
    branch; a branch of one probe gets its own twin."""
    for seed in range(6):
        plan = Plan()
        for probe_id, branch in (("rate:0.5", "0.5"), ("rate:0.2", "0.2"),
                                 ("train:0.5:0", "0.5"),
                                 ("train:0.5:1", "0.5"),
                                 ("train:0.2:0", "0.2"),
                                 ("train:0.2:1", "0.2")):
            plan.add("t", probe(probe_id, "M", x=X, branch=branch))
        plan.assign_modes(seed)
        modes = _modes(plan)
        assert modes["train:0.5:0"] != modes["train:0.5:1"]
        assert modes["train:0.2:0"] != modes["train:0.2:1"]
        for rate in ("0.5", "0.2"):
            assert modes[TWIN + f"rate:{rate}"] is not modes[f"rate:{rate}"]
        assert len(modes) == 8


def _fresh(task: str, info: ProbeInfo, seed: int) -> TwinInput | None:
    """A twin_input for the tests: X + 1 and X + 2, answers doubled."""
    if info.id.startswith("repeat"):
        return None
    inputs = (X + 1, X + 2)
    return TwinInput(inputs=inputs, expected=(inputs[0] * 2, inputs[1] * 2),
                     reference=X * 2, rtol=1e-5, atol=1e-6)


def test_twins_on_fresh_inputs_one_per_mode() -> None:
    """With a plug-in's fresh inputs (issue 24, R-a), a probe alone gets
    a twin in the other mode on the first and one in its own mode on the
    second; a led probe's lead is copied before each; a probe the
    plug-in gives none keeps one twin on its own input."""
    plan = Plan()
    plan.add("t", probe("prime:seeded", "M", x=X))
    plan.probes["t"][-1]["lead"] = True
    plan.add("t", probe("seeded", "M", x=X))
    plan.add("t", probe("alone", "M", x=X))
    plan.add("t", probe("repeat", "M", x=X))
    plan.assign_modes(DEFAULT_SEED, _fresh)
    modes = _modes(plan)
    assert list(modes)[4:] == [
        TWIN + "prime:seeded", TWIN + "seeded", TWIN + "alone",
        TWIN + "repeat", TWIN_SAME + "prime:seeded", TWIN_SAME + "seeded",
        TWIN_SAME + "alone"]
    wires = {wire["id"]: wire for wire in plan.probes["t"]}
    for name in ("seeded", "alone"):
        assert modes[TWIN + name] is not modes[name]
        assert modes[TWIN_SAME + name] is modes[name]
        assert wires[TWIN + name]["call"]["args"] == [encode_tensor(X + 1)]
        assert wires[TWIN_SAME + name]["call"]["args"] == [
            encode_tensor(X + 2)]
        assert plan.info[("t", TWIN_SAME + name)].other_index == 1
    assert wires[TWIN + "repeat"]["call"] == wires["repeat"]["call"]
    assert plan.info[("t", TWIN + "repeat")].other is None
    # A lead's copies take the mode of the twin each leads, and keep
    # their own call (they prepare a random state).
    assert modes[TWIN + "prime:seeded"] is modes[TWIN + "seeded"]
    assert modes[TWIN_SAME + "prime:seeded"] is modes["seeded"]
    assert wires[TWIN_SAME + "prime:seeded"]["call"] == \
        wires["prime:seeded"]["call"]


def _four(task: str, info: ProbeInfo, seed: int) -> TwinInput:
    """A twin_input with the state twins' inputs: X + 1 .. X + 4."""
    inputs = (X + 1, X + 2, X + 3, X + 4)
    return TwinInput(inputs=inputs, expected=tuple(x * 2 for x in inputs),
                     reference=X * 2, rtol=1e-5, atol=1e-6)


def _state_plan(twin_input=_four) -> Plan:
    plan = Plan()
    plan.add("t", probe("alone", "M", x=X))
    plan.add("t", probe("pair:a", "M", x=X))
    plan.add("t", probe("pair:b", "M", x=X))
    plan.assign_modes(DEFAULT_SEED, twin_input)
    plan.assign_states(DEFAULT_SEED, twin_input)
    return plan


def test_state_twins_give_every_family_both_states() -> None:
    """Red team 11 (m01, a07, b04): a family with one probe of a mode
    gets a state twin in that mode, on the third (off) or fourth (on)
    fresh input, so each mode meets the plain state and the state off it
    in every way, .grad set there."""
    for twin_input in (_four, None):
        plan = _state_plan(twin_input)
        wires = {wire["id"]: wire for wire in plan.probes["t"]}
        groups: dict[tuple[str, bool], list[dict]] = {}
        for wire in wires.values():
            info = plan.info[("t", wire["id"])]
            groups.setdefault((family(info.twin_of or wire["id"]),
                               wire["grad"]), []).append(wire)
        assert set(groups) == {("alone", True), ("alone", False),
                               ("pair", True), ("pair", False)}
        for (name, on), members in groups.items():
            assert len(members) == 2, (name, on)
            off_plain = [m for m in members if not m.get("raw")
                         and not m.get("inference")]
            deviant = [m for m in members if m.get("raw")
                       and (on or m.get("inference"))]
            assert len(off_plain) == len(deviant) == 1, (name, on)
            assert deviant[0].get("grads") and not off_plain[0].get("grads")
        for number, on in ((2, False), (3, True)):
            for name in ("alone", "pair:a", "pair:b"):
                twin = wires.get(f"{TWIN_STATE}{number}:{name}")
                if twin is None:
                    continue
                assert twin["grad"] is on
                info = plan.info[("t", twin["id"])]
                assert info.twin_of == name
                if twin_input is None:
                    assert info.other is None
                    assert twin["call"] == wires[name]["call"]
                else:
                    assert info.other_index == number
                    assert twin["call"]["args"] == [
                        encode_tensor(X + 1 + number)]


def test_state_twins_judge_states_within_a_mode() -> None:
    """A state twin in the probe's own mode that misses on its fresh
    input, while the probe matches: the probe fails, naming both
    states; a property judge (random dropout) says what it asks."""
    plan = _state_plan()
    ids = [wire["id"] for wire in plan.probes["t"]]
    values = {}
    for probe_id in ids:
        info = plan.info[("t", probe_id)]
        x = X if info.other is None else info.other.inputs[
            info.other_index]
        values[probe_id] = x * 2
    run = observe("t", SourceFile(text="x = 1\n", path=Path("s.py")),
                  plan.of_task("t"), _job(values))
    assert all(result.ok for result in run.results.values())
    twin = next(i for i in ids if i.startswith(TWIN_STATE)
                and plan.info[("t", i)].twin_of == "pair:a")
    info = plan.info[("t", twin)]
    run = observe("t", SourceFile(text="x = 1\n", path=Path("s.py")),
                  plan.of_task("t"), _job({**values, twin: X * 2}))
    problem = str(run.results["pair:a"].problem)
    assert f"but not {state_words(info)}" in problem \
        or f"{state_words(info)} but not" in problem, problem
    assert "on a fresh input of the same sizes" in problem

    def judge(value: object, index: int) -> str | None:
        return None if index < 2 else "it is not random"

    judged = Plan()
    judged.add("t", probe("alone", "M", x=X))

    def with_judge(task: str, info: ProbeInfo, seed: int) -> TwinInput:
        return replace(_four(task, info, seed), judge=judge,
                       asked="drops as asked")

    judged.assign_modes(DEFAULT_SEED, with_judge)
    judged.assign_states(DEFAULT_SEED, with_judge)
    run = observe("t", SourceFile(text="x = 1\n", path=Path("s.py")),
                  judged.of_task("t"), _job(
                      {wire["id"]: X for wire in judged.probes["t"]}))
    assert "it drops as asked" in str(run.results["alone"].problem)
    assert "it is not random" in str(run.results["alone"].problem)


def _fresh_folded(values: dict[str, object]) -> dict:
    plan = Plan()
    plan.add("t", probe("alone", "M", x=X))
    plan.assign_modes(DEFAULT_SEED, _fresh)
    run = observe("t", SourceFile(text="x = 1\n", path=Path("s.py")),
                  plan.of_task("t"), _job(values))
    return run.results


def test_fresh_inputs_judge_agreement_with_the_reference() -> None:
    """Right in both modes, or wrong alike in both (the checks' to
    judge): the probe stands. Right in one mode only, on its own input
    or on a fresh one (an answer remembered by input does not fit it):
    the probe fails, naming the mode and the input."""
    right = {"alone": X * 2, TWIN + "alone": (X + 1) * 2,
             TWIN_SAME + "alone": (X + 2) * 2}
    assert _fresh_folded(right)["alone"].ok
    wrong = {"alone": X * 3, TWIN + "alone": (X + 1) * 3,
             TWIN_SAME + "alone": (X + 2) * 3}
    assert _fresh_folded(wrong)["alone"].ok
    mode = Plan()
    mode.add("t", probe("alone", "M", x=X))
    mode.assign_modes(DEFAULT_SEED, _fresh)
    own = "with autograd on (as in training)" if \
        mode.info[("t", "alone")].grad else "under torch.no_grad()"
    other = ("under torch.no_grad()" if own.startswith("with")
             else "with autograd on (as in training)")
    # The probe's input remembered: its twin in the other mode repeats
    # the remembered answer on a fresh input.
    remembered = {**right, TWIN + "alone": X * 2}
    results = _fresh_folded(remembered)
    assert list(results) == ["alone"]
    assert results["alone"].problem == (
        f"it matches the reference {own} but not {other} (on a fresh "
        f"input of the same sizes, with the same weights: the value "
        f"differs from it by 2)")
    # Wrong in the probe's own mode, right in the other: the fresh input
    # in its own mode shows it even when its own input was remembered.
    own_wrong = {**right, TWIN_SAME + "alone": X * 2}
    assert _fresh_folded(own_wrong)["alone"].problem.startswith(
        f"it matches the reference {other} but not {own} (on a fresh")
    raised = _folded_fresh_raised()
    assert "it raised ValueError" in raised


def _folded_fresh_raised() -> str:
    plan = Plan()
    plan.add("t", probe("alone", "M", x=X))
    plan.assign_modes(DEFAULT_SEED, _fresh)
    run = observe("t", SourceFile(text="x = 1\n", path=Path("s.py")),
                  plan.of_task("t"), _job(
                      {"alone": X * 2, TWIN + "alone": (X + 1) * 2,
                       TWIN_SAME + "alone": None},
                      raised=(TWIN_SAME + "alone",)))
    return str(run.results["alone"].problem)


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


def partner_of(wire: dict, position: dict, info: ProbeInfo) -> bool:
    """Whether ``wire`` takes its state from a partner (mode_of)."""
    return wire.get("mode_of") in position and info.twin_of is None


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
                    # .grad set: an again probe's (its chain), or the
                    # probe off the plain state in every way.
                    assert not wire.get("grads") or wire.get("again") or (
                        wire.get("raw") and (wire["grad"]
                                             or wire.get("inference"))
                        and not wire.get("fit")) or wire.get("lead") or (
                        partner_of(wire, position, info)), wire["id"]
                    if wire.get("lead") and following:
                        for key in ("raw", "via"):
                            assert wire.get(key) == following.get(key)
                    partner = wire.get("mode_of")
                    twin_of = info.twin_of
                    if partner in position and twin_of is None:
                        for key in ("raw", "via"):
                            assert wire.get(key) == \
                                wires[position[partner]].get(key)
                    if wire.get("call") is None or wire.get("lead") or (
                            partner in position and twin_of is None) or (
                            not wire["grad"] and following.get("again")):
                        continue
                    name = family(twin_of or wire["id"])
                    seen.setdefault((name, wire["grad"]), []).append(
                        (bool(wire.get("inference")), bool(wire.get("raw")),
                         wire.get("via"), bool(wire.get("grads")),
                         bool(info.trace), bool(wire.get("again"))))
                for (name, on), states in seen.items():
                    # Every family (traces aside) meets, in each mode it
                    # runs in, the plain state and the state off it in
                    # every way, .grad set there unless an again probe
                    # (issue 24, red team 11: m01, a07, b04).
                    if len(states) < 2:
                        assert states[0][4], (assignment_id, task, name, on)
                        continue
                    plain = (False, False) if not on else (None, False)
                    assert any(s[1] == plain[1] and (on or not s[0])
                               for s in states), (task, name, on)
                    assert any(s[1] and (on or s[0]) and (s[3] or s[5])
                               for s in states), (task, name, on)
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
                    if wire.get("again") and not wire["id"].startswith(
                            TWIN_STATE):
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
        "input that requires grad and with the parameters' .grad set (as "
        "after loss.backward())",
        "hidden case 'h' (n=2) with autograd on (as in training)",
        "hidden case 'h' (n=2) with autograd on and an input that "
        "requires no grad (as for a first layer in training) and with the "
        "parameters' .grad set (as after loss.backward())"}
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


def test_the_deviating_state_sets_the_mode_itself_beside_a_decoy() -> None:
    """Red team 13: the probes off the plain state in every way (and
    they alone) set the mode through the module's own eval()/train()
    (wire key ``own``) and build a second object of their target with
    another of the plan's inits (``decoy``), which differs first where
    the plan varies least: a flag. Every family of the assignments that
    builds an object meets that state in each autograd mode it runs in
    (its group of :meth:`Plan._state_groups`, a trace or a training
    probe aside), and the state's words say it."""
    for name in ASSIGNMENTS:
        plan = build_plan(load_assignment(KIT / "grader" / "assignments"
                                          / name), DEFAULT_SEED)
        for task, wires in plan.probes.items():
            for key, members in plan._state_groups(task, wires).items():
                builders = [wires[index] for index in members
                            if wires[index].get("init") is not None]
                if builders and not plan.info[
                        (task, builders[0]["id"])].trace \
                        and not builders[0].get("fit"):
                    assert any(wire.get("own") for wire in builders), (
                        name, task, key)
            for wire in wires:
                info = plan.info[(task, wire["id"])]
                deviant = bool(wire.get("raw")) and bool(
                    wire.get("grad") or wire.get("inference"))
                builds = wire.get("init") is not None \
                    and wire.get("call") is not None
                assert bool(wire.get("own")) == (deviant and builds), \
                    wire["id"]
                assert info.own == bool(wire.get("own"))
                assert info.decoy == wire.get("decoy")
                if wire.get("decoy") is not None:
                    assert wire["decoy"] != wire["init"], wire["id"]
                    kwargs = wire["init"].get("kwargs") or {}
                    if "causal" in kwargs:
                        assert wire["decoy"]["kwargs"].get("causal") \
                            is not kwargs["causal"], wire["id"]
                    assert state_words(info).endswith(" built after it")
                    assert (", in train mode set by model.train() and with "
                            "another " if info.train else
                            ", in eval mode set by model.eval() and with "
                            "another ") in state_words(info)


def test_the_worker_seeds_each_probe_with_one_initial_seed() -> None:
    """Red team 14: a ``seeding`` probe's draws are those of
    manual_seed(seed) (rand, randn, dropout, randperm, an nn.Linear, past
    a twist), while torch.initial_seed() reads the plan's one value and
    the state is neither the fresh engine's nor
    manual_seed(initial_seed())'s; every wire of a plan carries that
    value."""
    from grader.worker.agent import torch_seeder

    def draws() -> list[torch.Tensor]:
        return [torch.rand(5), torch.randn(40),
                torch.nn.functional.dropout(torch.ones(4, 9, 9), 0.3),
                torch.randperm(50), torch.nn.Linear(20, 30).weight.detach(),
                torch.rand(3000), torch.randn(3)]

    plan = build_plan(load_assignment(KIT / "grader" / "assignments"
                                      / "multi_head_attention"), DEFAULT_SEED)
    values = {wire["initial_seed"] for wires in plan.probes.values()
              for wire in wires}
    assert len(values) == 1
    initial = values.pop()
    seed_probe = torch_seeder(torch)
    saved = torch.get_rng_state()
    try:
        for seed in (0, 1, 123, 622, 623, 624, 2 ** 62 + 7):
            torch.manual_seed(seed)
            expected = draws()
            seed_probe({"seed": seed, "initial_seed": initial})
            assert torch.initial_seed() == initial
            state = torch.get_rng_state()
            assert not torch.equal(state, torch.Generator().manual_seed(
                initial).get_state())
            head = state[8:24].tolist()
            assert head[:4] != [1, 0, 0, 0] and head[8:] != [0] * 8
            for got, want in zip(draws(), expected):
                assert torch.equal(got, want), seed
    finally:
        torch.set_rng_state(saved)


def _seeding_pairs(state: torch.Tensor) -> int:
    """How many consecutive words of a generator's state follow a
    seeding's recurrence (w' = 1812433253 * (w ^ w >> 30) + i mod 2**32,
    0 < i < 624)."""
    raw = bytes(state[24:24 + 8 * 624].tolist())
    words = [int.from_bytes(raw[i:i + 8], "little") & 0xFFFFFFFF
             for i in range(0, len(raw), 8)]
    return sum(0 < (b - 1812433253 * (a ^ a >> 30)) % 2 ** 32 < 624
               for a, b in zip(words, words[1:]))


def test_a_probes_state_holds_no_seeding() -> None:
    """Issue 24 (the reseed residual): every probe but a ``seeding`` one
    (attention_basics' ``prime:`` probes and their copies) carries a
    secret ``stream``, and its state holds words no seeding wrote: no two
    consecutive words follow the seeding's recurrence (a state right
    after manual_seed has 623 such pairs, torch_seeder's window for a
    seeding probe some), initial_seed() reads the plan's value, the same
    stream gives the same draws and another stream others."""
    from grader.worker.agent import torch_seeder

    seeding = set()
    for name in ("attention_basics", "multi_head_attention",
                 "transformer_block"):
        plan = build_plan(load_assignment(
            KIT / "grader" / "assignments" / name), DEFAULT_SEED)
        for task, wires in plan.probes.items():
            for wire in wires:
                assert ("stream" in wire) != bool(wire.get("seeding")), \
                    (name, task, wire["id"])
                if wire.get("seeding"):
                    # A prime: probe, or a twin's copy of one.
                    assert wire["id"].startswith("prime:seeded:") or (
                        wire["id"].startswith(TWIN_STATE) and ":seeded:" in
                        wire["id"] and wire["id"].endswith("<0")), \
                        wire["id"]
                    seeding.add(name)
    assert seeding == {"attention_basics"}

    seed_probe = torch_seeder(torch)
    saved = torch.get_rng_state()
    try:
        torch.manual_seed(5)
        assert _seeding_pairs(torch.get_rng_state()) == 623
        seed_probe({"seed": 5, "initial_seed": 77})
        assert _seeding_pairs(torch.get_rng_state()) > 0  # the window
        drawn = {}
        for stream in (1, 2, 623, 624, 2 ** 62 + 7):
            for _ in range(2):
                seed_probe({"seed": 5, "initial_seed": 77,
                            "stream": stream})
                assert torch.initial_seed() == 77
                state = torch.get_rng_state()
                assert _seeding_pairs(state) == 0, stream
                values = torch.rand(2000)
                if stream in drawn:
                    assert torch.equal(values, drawn[stream])
                drawn[stream] = values
                assert _seeding_pairs(torch.get_rng_state()) == 0
        firsts = {float(values[0]) for values in drawn.values()}
        assert len(firsts) == len(drawn)
    finally:
        torch.set_rng_state(saved)
