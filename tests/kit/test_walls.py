"""Walls by construction (issue 24): the worker's instruments fail closed.

Every file in ``hostile/walls/`` is a submission that attacks one of the
worker-side walls of docs/threat-model.md ("Walls by construction"): it
silences an instrument or floods one of the report's caps (principle 2),
walks everything it can reach for the grader's secrets (principle 1),
loads a second copy of a module to reach a forbidden kernel (principle
3), or runs code where no trace function follows (principle 4). Each is
graded for real and must earn exactly the scores below, item by item,
with the flags that say what it tried.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grader.worker import agent

WALLS = Path(__file__).resolve().parent / "hostile" / "walls"
ITEMS = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes")
ZERO = (0, 0, 0, 0, 0)
CLEAN_2 = (3, 1, 2, 0, 0)
#: name -> (task 1 items, task 2 items, total, flag kinds, words).
CORPUS: dict[str, tuple] = {
    # -- Principle 2: an instrument that was silenced fails closed.
    "silence_import_recursion": (ZERO, ZERO, 0,
                                 ("untraceable", "untraceable"),
                                 ("made at run time by exec",)),
    # (Its traceback.extract_stack() once listed the grader's frames
    # below its own and tried to read the agent's file, refused; the
    # submission's stack now holds no grader frame, so nothing is read.)
    "silence_each_call": ((0, 0, 0, -1, 0), (0, 0, 0, 0, -1), 0,
                          ("untraceable", "untraceable"),
                          ("made at run time by exec",)),
    "silence_repr_loop": (ZERO, ZERO, 0, ("untraceable", "untraceable"),
                          ("made at run time by exec",)),
    # -- Principle 2: past a report's cap, what is left out is counted and
    #    a forbidden use still costs its items.
    "flood_then_forbidden_call": (
        (0, 0, -1, 0, 0), CLEAN_2, 6, ("forbidden", "refused", "refused"),
        ("6 attempt(s) not listed",
         "torch.nn.functional.scaled_dot_product_attention")),
    "flood_import_then_subclass": (
        (1, 3, 0, 0, 1), ZERO, 5, ("forbidden", "refused", "refused"),
        ("16 attempt(s) not listed",
         'subclass "torch.nn.MultiheadAttention"')),
    "flood_then_aten": (
        (0, 0, -1, 0, 0), CLEAN_2, 6, ("forbidden", "refused", "refused"),
        ("36 attempt(s) not listed", "_scaled_dot_product_attention_math")),
    # -- Principle 4: code the grader cannot see earns nothing it serves.
    # Refused at import (red team 9): nothing was compiled, so a refused
    # attempt (a flag). The line that raised is left out of the loadable
    # part: the class that calls what it compiles fails with a NameError
    # (the items it serves earn nothing), the other class earns on merit.
    "jit_script_helper": ((1, 0, 0, 0, 0), CLEAN_2, 7, ("refused",),
                          ('compile code with "torch._C._jit_script_'
                           'compile"', "name '_attend' is not defined")),
    "jit_string_unit": ((1, 3, 0, 0, 1), ZERO, 5, ("refused",),
                        ('compile code with "torch._C.CompilationUnit"',
                         "name '_UNIT' is")),
    "jit_trace_method": (
        (1, 0, 0, 0, 0), CLEAN_2, 7, ("refused",),
        ('compile code with "torch._C._create_function_from_trace"',
         "name '_FAST' is not defined")),
    # -- Principle 3: a forbidden kernel is unreachable, not watched.
    "copy_from_spec": ((0, 0, 0, -1, 0), CLEAN_2, 6, ("forbidden",),
                       ("load a second copy of", "torch/nn/functional.py")),
    "copy_by_hand": ((1, 3, 0, 0, 1), (0, 0, 0, 0, -1), 5, ("forbidden",),
                     ("load a second copy of", "torch/nn/functional.py")),
    "copy_by_reload": ((0, 0, 0, -1, 0), CLEAN_2, 6,
                       ("forbidden", "forbidden", "patched"),
                       ("load a second copy of",
                        "torch.nn.functional.multi_head_attention_forward")),
    # -- Principle 1: nothing of the grader is reachable from student code.
    "reach_walk": ((1, 3, 0, 0, 1), CLEAN_2, 11, ("tampered", "tampered"),
                   ("inspect the grader's stack frames",
                    "inspect the grader's objects (gc)")),
}
#: Memory (MB above the worker's start) for files that need more.
MEMORY_MB = {"reach_walk": 4096}
#: What a file must print in every task's output (its own verdict).
PRINTS = {"reach_walk": "found none"}


def test_the_table_lists_every_walls_file() -> None:
    assert sorted(p.stem for p in WALLS.glob("*.py")) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_a_wall_holds(name: str, grade_path) -> None:
    """Exact item scores, the flags' kinds, and what the report says."""
    task1, task2, total, flags, says = CORPUS[name]
    # The walk keeps alive every object it reaches (up to 40,000, and
    # what it queued): it needs more than the default 1 GB of address
    # space above the worker's start, or it may stop with MemoryError.
    report = grade_path(WALLS / f"{name}.py", timeout=30.0,
                        memory_mb=MEMORY_MB.get(name, 1024))
    assert report.scores() == pytest.approx(dict(zip(ITEMS, task1 + task2))
                                            ), report.as_text()
    assert report.score == total
    assert sorted(f.kind for f in report.flags) == sorted(flags), \
        [f.message for f in report.flags]
    text = "\n".join([i.message for i in report.items]
                     + [f.message for f in report.flags])
    for words in says:
        assert words in text
    if name in PRINTS:
        assert all(PRINTS[name] in task.output for task in report.tasks), \
            [task.output[-300:] for task in report.tasks]


def test_a_removed_tracer_is_seen_in_every_later_phase() -> None:
    """The worker's coverage fails closed: once its trace function was
    removed (CPython removes one that raises), the phase and every later
    one report code the grader could not see; the tracer is installed
    again, so later code is traced all the same."""
    phase = {"name": "x", "stage": "call", "ran": set(), "foreign": [],
             "foreign_left_out": 0, "records": None, "tracing": False,
             "returns": 0, "calls": 0, "silenced": False}
    readers = agent.value_readers(__import__("torch"))
    tracer, still_tracing = agent.shape_tracer(
        [], {}, phase, lambda code: "library", {}, readers)
    coverage, start_phase = agent.coverage_keeper(
        phase, {}, agent.make_fingerprint(), still_tracing)
    before = sys.gettrace()
    try:
        sys.settrace(tracer)
        start_phase("first")
        assert coverage()["foreign"] == []
        sys.settrace(None)  # what CPython does to a tracer that raised
        assert coverage()["foreign"] == [agent.SILENCED]
        assert sys.gettrace() is tracer
        start_phase("second")
        assert coverage()["foreign"] == [agent.SILENCED]
        phase["foreign_left_out"] = 3
        assert coverage()["foreign"][0][1].startswith("3 more")
    finally:
        sys.settrace(before)
