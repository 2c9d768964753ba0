"""Integrity: the grade is earned by the code that runs.

Every file in ``integrity/`` attacks the grading logic (not the sandbox's
walls, see ``test_hostile.py``): it swaps the graded classes at run time,
runs code from strings or from the kit's own files, hides its work in a
helper, uses a ready-made attention kernel nobody listed, lies about its
types, or reaches for the grader's instruments (frames, tracer, objects,
serialisers, channel, threads). Each is graded for real and must earn
exactly what its honest code earns, item by item, with the integrity flags
that say what it tried. "Sloppy" code below is correct code without shape
comments and with PEP-8 faults: it honestly earns 6 of 10.
"""
from __future__ import annotations

import dis
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader import wire
from grader.output.report import Report
from grader.worker import agent

INTEGRITY = Path(__file__).resolve().parent / "hostile" / "integrity"
ITEMS = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes")
SLOPPY_1 = (1, 3, -1, -1, 0)
SLOPPY_2 = (3, 1, 2, -1, -1)
CLEAN_1 = (1, 3, 0, 0, 1)
ZERO_1 = (0, 0, 0, 0, 0)
ZERO_2 = (0, 0, 0, 0, 0)
FORBIDDEN_2 = (0, 0, 0, 0, 0)
FORBIDDEN_1 = (0, 0, 0, 0, 0)
CLEAN_2 = (3, 1, 2, 0, 0)


@dataclass(frozen=True)
class Expected:
    """Item scores, the integrity flag kinds and words of the report."""

    task1: tuple[float, ...]
    task2: tuple[float, ...]
    total: float
    flags: tuple[str, ...] = ()
    says: tuple[str, ...] = ()
    diagnosis: tuple[str, ...] = ()   # items tagged forbidden_api

    @property
    def scores(self) -> dict[str, float]:
        """Item id -> expected score."""
        return dict(zip(ITEMS, self.task1 + self.task2))


TASK2_CHECKS = ("task2.scores", "task2.causal", "task2.output")
TASK1_CHECKS = ("task1.init", "task1.forward")
CORPUS: dict[str, Expected] = {
    # ------------------------------------------- the code that runs is graded
    "swap_decorator": Expected(SLOPPY_1, SLOPPY_2, 6,
                               says=("and the code it ran (_SA",)),
    "swap_rebind": Expected(SLOPPY_1, SLOPPY_2, 6,
                            says=("and the code it ran (_MHA",)),
    "swap_setattr": Expected(SLOPPY_1, SLOPPY_2, 6),
    "swap_inherit": Expected(SLOPPY_1, SLOPPY_2, 6),
    "swap_class_body": Expected(SLOPPY_1, SLOPPY_2, 6,
                                says=("_sa_init (line",)),
    "swap_module_call": Expected(SLOPPY_1, SLOPPY_2, 6, flags=("patched",),
                                 says=("torch.nn.Module.__call__",)),
    "swap_metaclass": Expected(SLOPPY_1, SLOPPY_2, 6),
    "swap_dunder_new": Expected(SLOPPY_1, SLOPPY_2, 6),
    "swap_alternate": Expected(SLOPPY_1, SLOPPY_2, 6),
    "helper_module_function": Expected(
        SLOPPY_1, SLOPPY_2, 6, says=("and the code it ran (_attend (line",)),
    # ------------------------------- code that is not the visible source
    "exec_string": Expected(ZERO_1, ZERO_2, 0,
                            flags=("untraceable", "untraceable"),
                            says=("made at run time by exec",)),
    "exec_marshal": Expected(ZERO_1, ZERO_2, 0,
                             flags=("untraceable", "untraceable")),
    "exec_function_type": Expected(
        ZERO_1, ZERO_2, 0, flags=("untraceable",),
        says=("a function made from a code object",)),
    "exec_code_replace": Expected(ZERO_1, ZERO_2, 0,
                                  flags=("untraceable", "untraceable")),
    "exec_kit_file": Expected(ZERO_1, ZERO_2, 0, flags=("refused",),
                              says=("tried to read",)),
    # --------------------------------------------------- every kernel
    "forbidden_flex_attention": Expected(
        CLEAN_1, FORBIDDEN_2, 5, flags=("forbidden",),
        diagnosis=TASK2_CHECKS, says=("flex_attention",)),
    "forbidden_flex_obfuscated": Expected(
        CLEAN_1, FORBIDDEN_2, 5, flags=("forbidden",),
        diagnosis=TASK2_CHECKS, says=("sdpa_dense",)),
    "forbidden_quantizable_mha": Expected(
        CLEAN_1, FORBIDDEN_2, 5, flags=("forbidden",),
        diagnosis=TASK2_CHECKS,
        says=("torch.ao.nn.quantizable.MultiheadAttention",)),
    "forbidden_mha_subclass_own_code": Expected(
        CLEAN_1, FORBIDDEN_2, 5, flags=("forbidden", "forbidden"),
        diagnosis=TASK2_CHECKS,
        says=('subclass "torch.nn.MultiheadAttention"',)),
    "forbidden_aten_math": Expected(
        FORBIDDEN_1, CLEAN_2, 6, flags=("forbidden",),
        diagnosis=TASK1_CHECKS,
        says=("_scaled_dot_product_attention_math",)),
    "forbidden_getattr_functional": Expected(
        FORBIDDEN_1, CLEAN_2, 6, flags=("forbidden",),
        diagnosis=TASK1_CHECKS, says=("scaled_dot_product_attention",)),
    "forbidden_c_nn": Expected(
        FORBIDDEN_1, CLEAN_2, 6, flags=("forbidden",),
        diagnosis=TASK1_CHECKS, says=("scaled_dot_product_attention",)),
    "forbidden_op_overload": Expected(
        FORBIDDEN_1, CLEAN_2, 6, flags=("forbidden",),
        diagnosis=TASK1_CHECKS, says=("scaled_dot_product_attention",)),
    "forbidden_flash_cpu": Expected(
        FORBIDDEN_1, CLEAN_2, 6, flags=("forbidden",),
        diagnosis=TASK1_CHECKS,
        says=("_scaled_dot_product_flash_attention_for_cpu",)),
    # ----------------------------------------------- behaviour, not identity
    "identity_class_lie": Expected(
        ZERO_1, (3, 1, 2, 0, 0), 6,
        says=("self.q is a _Projection", "has no parameter q.bias")),
    # ------------------------------------------------ the instruments
    "tamper_frames": Expected(SLOPPY_1, SLOPPY_2, 6, flags=("tampered",),
                              says=("inspect the grader's stack frames",)),
    "tamper_traceback_frames": Expected(
        SLOPPY_1, SLOPPY_2, 6, flags=("tampered",),
        says=("inspect the grader's stack frames",)),
    "tamper_settrace": Expected(
        SLOPPY_1, SLOPPY_2, 6, flags=("tampered", "tampered"),
        says=("replace the grader's trace function",
              "install a profiler over the grader")),
    "tamper_gc": Expected(SLOPPY_1, SLOPPY_2, 6, flags=("tampered",),
                          says=("inspect the grader's objects (gc)",)),
    "tamper_json": Expected(SLOPPY_1, SLOPPY_2, 6, flags=("patched",),
                            says=("json.dumps", "pickle.dumps")),
    "tamper_channel": Expected(SLOPPY_1, SLOPPY_2, 6, flags=("channel",),
                               says=("to the grader's result channel",)),
    "tamper_threads": Expected(SLOPPY_1, SLOPPY_2, 6, flags=("refused",),
                               says=("start a thread",)),
    "tamper_closures": Expected(SLOPPY_1, SLOPPY_2, 6),
    # --------------------------------------- no false alarm on honest code
    "honest_matplotlib": Expected(CLEAN_1, (3, 1, 2, 0, 0), 11),
    # ------------------------------------------------- forged reports
    "report_spoof": Expected(CLEAN_1, ZERO_2, 5,
                             says=('"Total: 11 / 10": "ok Total: 11 / 10',)),
}


def test_the_table_lists_every_integrity_file() -> None:
    """No file of the corpus is left ungraded, no entry lacks its file."""
    assert sorted(p.stem for p in INTEGRITY.glob("*.py")) == sorted(CORPUS)


@pytest.fixture(scope="module")
def graded(grade_path) -> Callable[[str], Report]:
    """The report of a corpus file, graded once for the module."""
    cache: dict[str, Report] = {}

    def report(name: str) -> Report:
        if name not in cache:
            cache[name] = grade_path(INTEGRITY / f"{name}.py", timeout=20.0)
        return cache[name]
    return report


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_integrity_submission(name: str, graded) -> None:
    """Exact item scores, the flags' kinds, and what the report says."""
    expected = CORPUS[name]
    report = graded(name)
    assert report.scores() == pytest.approx(expected.scores), \
        report.as_text()
    assert report.score == expected.total
    assert sorted(f.kind for f in report.flags) == sorted(expected.flags), \
        [f.message for f in report.flags]
    text = "\n".join([i.message for i in report.items]
                     + [f.message for f in report.flags])
    for words in expected.says:
        assert words in text
    tagged = sorted(i.id for i in report.items
                    if "forbidden_api" in i.diagnosis)
    assert tagged == sorted(expected.diagnosis)


def test_a_forged_report_line_never_reaches_a_report(graded) -> None:
    """What the submission prints and raises (escapes, a fake total, fake
    item lines) is cleaned and shown quoted or indented under a label, in
    the text report, the JSON and Gradescope's output."""
    import json

    report = graded("report_spoof")
    text = report.as_text()
    renderings = [text, json.dumps(report.as_json()),
                  json.dumps(report.as_gradescope())]
    for rendering in renderings:
        assert "\x1b" not in rendering and "\\u001b" not in rendering
    lines = text.split("\n")
    assert [line for line in lines if line.startswith("Total:")] == \
        ["Total: 4 / 10 + 1 bonus"]
    assert not any(line.lstrip().startswith(("[PASS] task2.scores 3",
                                             "Coding Task 2: 6"))
                   for line in lines)
    printed = [line for line in lines if "Total: 11 / 10" in line]
    assert printed and all(
        line.startswith("    | ") or '"' in line for line in printed)
    gradescope = report.as_gradescope()["output"].split("\n")
    assert not any(line.startswith(("Total:", "Coding Task 2: 6"))
                   for line in gradescope)


# --------------------------------------------------------------------------
# The sealed runtime looks up no global name once the submission runs


def _factories() -> list[types.FunctionType]:
    """The runtime's factories: the agent's and the wire's."""
    return list(agent.FACTORIES) + list(wire.FACTORIES)


def _nested(code: types.CodeType) -> list[types.CodeType]:
    """Every code object nested in ``code`` (closures, comprehensions)."""
    found, pending = [], list(code.co_consts)
    while pending:
        const = pending.pop()
        if isinstance(const, types.CodeType):
            found.append(const)
            pending += list(const.co_consts)
    return found


def _runtime_codes() -> list[types.CodeType]:
    """Every code object nested in a factory of the runtime: the closures
    it returns run while (or after) the submission runs. A factory's own
    body runs before the submission (set-up) and may look names up."""
    return [code for factory in _factories()
            for code in _nested(factory.__code__)]


def _unwalked(factories: list[types.FunctionType]) -> list[str]:
    """The functions of the agent and the wire that make closures (define
    a function inside) and are not among ``factories``."""
    makers = {f"{module.__name__}.{name}"
              for module in (agent, wire)
              for name, value in vars(module).items()
              if isinstance(value, types.FunctionType)
              and value.__module__ == module.__name__
              and any(not code.co_name.startswith("<")
                      or code.co_name == "<lambda>"
                      for code in _nested(value.__code__))}
    return sorted(makers - {f"{f.__module__}.{f.__name__}"
                            for f in factories})


def test_runtime_closures_look_up_no_globals() -> None:
    """A submission that replaces ``builtins.len`` or a module attribute
    changes nothing the agent does: its closures only use cells."""
    offenders = {}
    for code in _runtime_codes():
        names = [i.argval for i in dis.get_instructions(code)
                 if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
        if names:
            offenders[code.co_name] = names
    assert offenders == {}
    assert len(_runtime_codes()) > 40  # the walk did find the closures


def test_every_factory_of_the_runtime_is_walked() -> None:
    """Every function of the agent and the wire that makes closures is a
    listed factory, so the walk above covers it; one left out of the
    lists is found."""
    factories = _factories()
    assert _unwalked(factories) == []
    for index, factory in enumerate(factories):
        rest = factories[:index] + factories[index + 1:]
        assert _unwalked(rest) == [f"{factory.__module__}."
                                   f"{factory.__name__}"]


# --------------------------------------------------------------------------
# In a batch, classmates are invisible

CLASSMATES = Path(__file__).resolve().parent / "hostile" / "classmates"
SECRET_SEED = "918273645"


@pytest.mark.slow
def test_a_batch_submission_sees_no_classmate_and_no_secret(
        tmp_path: Path) -> None:
    """A nosy submission, graded in a batch beside classmates with a secret
    seed, finds nothing of them in its worker: no file name, no score, no
    seed; its frame and object look-ups are refused and flagged."""
    import csv
    import json
    import os
    import shutil
    import subprocess
    import sys

    from grader.routes.rows import RECORD

    root = Path(__file__).resolve().parents[2]
    folder = tmp_path / "class"
    folder.mkdir()
    example = root / "examples" / "submission" / "transformer_lm"
    shutil.copy(example / "modeling_attention.py",
                folder / "alice_wonderland.py")
    shutil.copy(root / "solutions" / "modeling_attention.py",
                folder / "carol_secretive.py")
    shutil.copy(CLASSMATES / "nosy.py", folder / "bob_nosy.py")
    out = tmp_path / "grades.csv"
    env = {**os.environ, "GRADER_SEED": SECRET_SEED, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(out), "--jobs", "2", "--no-feedback",
         "--assignment", "multi_head_attention"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {row["student"]: row for row in csv.DictReader(out.open())}
    assert set(rows) == {"alice_wonderland", "bob_nosy", "carol_secretive"}
    reports = out.with_name(out.name + ".reports")
    records = {json.loads(p.read_text())["student"]: json.loads(
        p.read_text()) for p in reports.glob(f"*/{RECORD}")}
    bob = records["bob_nosy"]["report"]
    printed = json.dumps(bob.get("output", {}))
    # Only its own scratch folder (empty) can be listed.
    assert str(folder) not in printed and str(tmp_path) not in printed
    assert "no listing" in printed and "no frames" in printed
    assert "no objects" in printed and "ENVIRON" in printed
    for secret in ("alice", "carol", "wonderland", "secretive",
                   SECRET_SEED, str(out), rows["carol_secretive"]["score"]
                   + ","):
        assert secret not in printed, secret
    kinds = sorted({flag["kind"] for flag in bob["flags"]})
    assert kinds == ["tampered"]
    scores = {item["id"]: item["score"] for item in bob["items"]}
    assert (scores["task1.init"], scores["task1.forward"]) == (1.0, 3.0)
    assert float(rows["carol_secretive"]["score"]) == 11.0


# --------------------------------------------------------------------------
# The tripwires' index finds every alias a full scan finds


def test_the_alias_index_finds_what_a_full_scan_finds() -> None:
    """The fork server indexes where the replaced calls are bound; a
    worker visits those places and scans only modules loaded (or
    replaced) since. Both ways must find the same places, including an
    alias in a module loaded after the index, in a module put in place
    of an indexed one, and a binding removed since."""
    import os
    import sys

    import torch.nn.functional as functional

    from grader.rubric import get_assignment

    functions, _ = agent.prepare(
        get_assignment("multi_head_attention").forbidden)
    sdpa = functional.scaled_dot_product_attention
    assert id(sdpa) in functions
    saved = dict(agent._ALIASES)
    late = types.ModuleType("kit_test_late_aliases")
    late.leave, late.attend = os._exit, sdpa
    swapped = types.ModuleType("kit_test_swapped")
    swapped.kept = os.abort
    gone = types.ModuleType("kit_test_gone")
    gone.leave = os._exit
    sys.modules[swapped.__name__] = swapped
    sys.modules[gone.__name__] = gone
    try:
        agent.index_aliases(agent.KIT_PACKAGES)
        sys.modules[late.__name__] = late
        sys.modules[swapped.__name__] = types.ModuleType("kit_test_swapped")
        sys.modules[swapped.__name__].stays = os.abort
        del gone.leave
        wanted = set(functions) | {id(v) for v, _ in agent.refused_values()}
        wanted |= {id(sys.gettrace), id(sys.getprofile)}
        indexed = sorted(agent.alias_sites(wanted, agent.KIT_PACKAGES))
        agent._ALIASES.clear()
        scanned = sorted(agent.alias_sites(wanted, agent.KIT_PACKAGES))
        assert indexed == scanned
        assert ("kit_test_late_aliases", "leave", id(os._exit)) in indexed
        assert ("kit_test_late_aliases", "attend", id(sdpa)) in indexed
        assert ("kit_test_swapped", "stays", id(os.abort)) in indexed
        assert all(site[0] != "kit_test_gone" for site in indexed)
        assert ("os", "_exit", id(os._exit)) in indexed
        # An id the index never saw: the whole scan, same answer.
        agent.index_aliases(agent.KIT_PACKAGES)
        late.other = print
        both = wanted | {id(print)}
        assert sorted(agent.alias_sites(both, agent.KIT_PACKAGES)) == \
            sorted(_full_scan(both))
    finally:
        for name in (late.__name__, swapped.__name__, gone.__name__):
            sys.modules.pop(name, None)
        agent._ALIASES.clear()
        agent._ALIASES.update(saved)


def _full_scan(wanted: set[int]) -> list[tuple[str, str, int]]:
    import sys

    return [(name, attribute, id(value))
            for name, module in list(sys.modules.items())
            if module is not None
            and name.split(".")[0] not in agent.KIT_PACKAGES
            and type(getattr(module, "__dict__", None)) is dict
            for attribute, value in list(vars(module).items())
            if id(value) in wanted]
