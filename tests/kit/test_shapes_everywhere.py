"""Shape comments verified at every graded run (issue 24, principle 6).

Unit tests of ``grader.shapes.everywhere`` on hand-made records (the
worker's records are plain data): a statement the size sets left without a
problem is verified at the graded runs' sizes too, named by its case; a
statement already wrong at the size sets keeps its wording; a run whose
sizes lack a name the comment uses does not judge it; the note "not run
in any of the grader's runs" goes when a graded run verified the
statement, and a missing comment shows the graded runs it ran in; the
catch-all's lines are answered by every run's records; the worker's read
budget per statement and call fails closed. The end-to-end files are in
hostile/walls_batch/ (test_walls_batch.py).
"""
from __future__ import annotations

import sys
from pathlib import Path
from dataclasses import replace
from typing import Any

from grader.locate.source import SourceFile
from grader.shapes import (DimensionTable, collect_statements,
                           format_findings, known_sizes, verify,
                           verify_everywhere)

DIMS = DimensionTable.from_rubric({
    "batch_size": ["bs"], "seq_len": ["seq"], "hidden": [],
    "num_heads": [], "head_size": []})
SOURCE = '''class Net:
    def forward(self, x):
        # YOUR CODE STARTS HERE
        a = x + 1  # [batch_size, seq_len, hidden]
        b = a * 2  # [batch_size, seq_len, head_size]
        if self.training:
            c = b - 1  # [seq_len]
        return b  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE
'''
SET_1 = {"batch_size": 2, "seq_len": 5, "hidden": 33, "num_heads": 3,
         "head_size": 11}


def _statements() -> tuple[SourceFile, list]:
    source = SourceFile(text=SOURCE, path=Path("net.py"))
    statements = collect_statements(source, "Net", "forward")
    return source, statements


def _records(statements: list, shapes: dict[str, list]) -> dict:
    """Records: statement (by its text's first word) -> executions."""
    by_name = {s.text.split()[0]: str(s.id) for s in statements}
    return {by_name[name]: [[list(shape)] for shape in executions]
            for name, executions in shapes.items()}


def test_known_sizes_completes_an_identity_and_keeps_the_names() -> None:
    identity = (("hidden", "num_heads", "head_size"),)
    names = ("batch_size", "hidden", "num_heads", "head_size")
    assert known_sizes({"batch_size": 2, "hidden": 12, "num_heads": 3,
                        "num_layers": 2}, names, identity) == {
        "batch_size": 2, "hidden": 12, "num_heads": 3, "head_size": 4}
    assert known_sizes({"hidden": 10, "num_heads": 3}, names,
                       identity) == {"hidden": 10, "num_heads": 3}
    assert known_sizes({"num_heads": 2, "head_size": 5}, names,
                       identity)["hidden"] == 10


def test_a_statement_wrong_only_in_a_graded_run_is_found() -> None:
    source, statements = _statements()
    traced = [(SET_1, _records(statements, {"a": [(2, 5, 33)],
                                            "b": [(2, 5, 11)],
                                            "return": [(2, 5, 33)]}))]
    graded = [("the sizes of hidden case 'hidden-0'",
               {"batch_size": 4, "seq_len": 6, "hidden": 10,
                "num_heads": 2, "head_size": 5},
               _records(statements, {"a": [(4, 6, 10)],
                                     "b": [(4, 6, 10)],
                                     "c": [(4, 6, 10)],
                                     "return": [(4, 6, 10)]}))]
    assert [f.kind for f in verify(statements, traced, DIMS)] == [
        "never_ran"]  # c: not run in any run
    findings = verify_everywhere(statements, traced, graded, DIMS)
    assert [(f.line, f.kind) for f in findings] == [(5, "wrong_shape"),
                                                    (7, "wrong_shape")]
    text = format_findings(findings, source)
    assert "size set 1: claimed [2, 5, 11], real [2, 5, 11]" in text
    assert ("the sizes of hidden case 'hidden-0': claimed [4, 6, 5], "
            "real [4, 6, 10]") in " ".join(text.split())
    assert "not run in any of the grader's runs" not in text


def test_an_uncommented_statement_run_only_in_a_graded_run() -> None:
    """A missing comment on a statement the size sets never ran costs the
    point as before, but its finding shows the graded run where it ran
    (not "did not run in any of the grader's runs")."""
    bare = SOURCE.replace("c = b - 1  # [seq_len]", "c = b - 1")
    source = SourceFile(text=bare, path=Path("net.py"))
    statements = collect_statements(source, "Net", "forward")
    traced = [(SET_1, _records(statements, {"a": [(2, 5, 33)],
                                            "b": [(2, 5, 11)],
                                            "return": [(2, 5, 33)]}))]
    unrun = verify(statements, traced, DIMS)
    assert [(f.line, f.kind, f.penalised) for f in unrun] == [
        (7, "missing", True)]
    assert "did not run in any of the grader's runs" in unrun[0].message
    graded = [("the sizes of hidden case 'dropout'",
               {"batch_size": 4, "seq_len": 6, "hidden": 10,
                "num_heads": 2, "head_size": 5},
               _records(statements, {"c": [(4, 6, 5)]}))]
    findings = verify_everywhere(statements, traced, graded, DIMS)
    assert [(f.line, f.kind, f.penalised) for f in findings] == [
        (7, "missing", True)]
    text = " ".join(format_findings(findings, source).split())
    assert "the sizes of hidden case 'dropout': real [4, 6, 5]" in text
    assert "did not run in any" not in text
    assert verify_everywhere(statements, traced, [], DIMS) == unrun


def test_a_problem_at_the_size_sets_keeps_its_wording() -> None:
    _, statements = _statements()
    traced = [(SET_1, _records(statements, {"a": [(2, 5, 7)],
                                            "b": [(2, 5, 11)],
                                            "return": [(2, 5, 33)]}))]
    graded = [("the sizes of hidden case 'hidden-0'",
               {"batch_size": 4, "seq_len": 6, "hidden": 10,
                "num_heads": 2, "head_size": 5},
               _records(statements, {"a": [(4, 6, 3)]}))]
    assert verify_everywhere(statements, traced, graded, DIMS) == \
        verify(statements, traced, DIMS)


def test_a_run_without_a_comments_name_does_not_judge_it() -> None:
    _, statements = _statements()
    traced = [(SET_1, _records(statements, {"a": [(2, 5, 33)],
                                            "b": [(2, 5, 11)],
                                            "return": [(2, 5, 33)]}))]
    graded = [("the sizes of hidden case 'hidden-0'",
               {"batch_size": 4, "seq_len": 6, "hidden": 10},
               _records(statements, {"a": [(4, 6, 10)],
                                     "b": [(4, 6, 99)]}))]
    assert verify_everywhere(statements, traced, graded, DIMS) == \
        verify(statements, traced, DIMS)


def test_a_graded_run_that_verifies_a_statement_drops_its_note() -> None:
    _, statements = _statements()
    traced = [(SET_1, _records(statements, {"a": [(2, 5, 33)],
                                            "b": [(2, 5, 11)],
                                            "return": [(2, 5, 33)]}))]
    graded = [("the sizes of hidden case 'dropout'",
               {"batch_size": 4, "seq_len": 6, "hidden": 10,
                "num_heads": 2, "head_size": 5},
               _records(statements, {"c": [(6,)]}))]
    assert verify_everywhere(statements, traced, graded, DIMS) == []


def test_the_catch_all_reads_every_run() -> None:
    """A line whose tensor outlived its statement (``made``) is accounted
    for when a graded run read the statement's tensor (hand-made dropout
    under ``if self.training:``: no shape check runs it), and fails closed
    when no run read it."""
    _, statements = _statements()
    traced = [(SET_1, _records(statements, {"a": [(2, 5, 33)],
                                            "b": [(2, 5, 11)],
                                            "return": [(2, 5, 33)]}))]
    sizes = {"batch_size": 4, "seq_len": 6, "hidden": 10, "num_heads": 2,
             "head_size": 5}
    read = [("the sizes of hidden case 'dropout'", sizes,
             _records(statements, {"c": [(6,)]}))]
    assert verify_everywhere(statements, traced, read, DIMS,
                             frozenset({7})) == []
    unread = [("the sizes of hidden case 'dropout'", sizes, {})]
    findings = verify_everywhere(statements, traced, unread, DIMS,
                                 frozenset({7}))
    assert [(f.line, f.kind) for f in findings
            if f.penalised] == [(7, "not_verified")]
    # A run whose sizes the plan does not know answers the catch-all too.
    assert verify_everywhere(statements, traced, [], DIMS, frozenset({7}),
                             [_records(statements, {"c": [(6,)]})]) == [
        f for f in verify(statements, traced, DIMS) if not f.penalised]


GROWER = '''import torch


class Net:
    def forward(self, n):
        found = []  # no tensor yet
        for _ in range(n):
            found.append(torch.zeros(2))  # [2]
            x = torch.ones(3)  # [3]
        return found, x
'''


def test_reading_a_statement_is_bounded_per_call(tmp_path: Path,
                                                 monkeypatch: Any) -> None:
    """The worker's read budget (``MAX_READS``): a read costs 1 plus the
    container values it scans, per statement and call; past the budget
    the executions are counted as left out (the shapes item then fails
    closed, ``capped``), never read as "no tensor"."""
    import importlib.util

    import torch

    from grader.worker import agent

    path = tmp_path / "grower.py"
    path.write_text(GROWER)
    spec = importlib.util.spec_from_file_location("grower", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = SourceFile(text=GROWER, path=path)
    plan = [s.to_plain() for s in collect_statements(source, "Net",
                                                     "forward")]
    ids = {s.text.split()[0]: str(s.id) for s in collect_statements(
        source, "Net", "forward")}
    monkeypatch.setattr(agent, "MAX_READS", 2000)
    spent = [0]
    _, _, _, read_chain, expand = agent.value_readers(torch, spent)
    counters: dict = {"returns": 0, "calls": 0, "scanned": spent}
    records: dict = {}

    def record(statement: dict, values: list) -> None:
        records.setdefault(str(statement["id"]), []).append(values)

    units, line_unit = agent.plan_units(plan)
    local = agent.line_tracer(units, line_unit, record,
                              lambda value: expand(value, True), read_chain,
                              expand, counters)

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == str(path):
            counters["calls"] += 1
            return local()
        return None

    sys.settrace(tracer)
    try:
        module.Net().forward(300)
    finally:
        sys.settrace(None)
    append, plain = ids["found.append(torch.zeros(2))"], ids["x"]
    # The growing list: its k-th read costs 1 plus the k + 1 values it
    # scans (the list, its k tensors), so the budget of 2000 ends after
    # 61 reads; the other 239 executions are left out.
    assert len(records[append]) == 61
    assert counters["left_out"] == {append: 239}
    # A tensor costs 1 a read: all 300 read, within the budget.
    assert len(records[plain]) == 300
    assert counters["reads"][plain] == 300
    # A return is charged alike: 1 plus the list and its 300 tensors.
    assert counters["reads"][ids["return"]] == 302


IFEXP_SOURCE = '''class Net:
    def forward(self, x, both=False):
        # YOUR CODE STARTS HERE
        a = x + 1  # [batch_size, seq_len, hidden]
        b = (a, a) if both else a  # [batch_size, seq_len, hidden], [seq_len]
        return (a, a[0]) if both else a  # [bs, seq, hidden], [seq, hidden]
        # YOUR CODE ENDS HERE
'''


def test_a_conditional_expression_may_match_either_end() -> None:
    """``return (att, probs) if flag else att``: the branch with one
    tensor may match the comment's first shape (red team 6); the other
    branch still matches in order, and a wrong shape is still found."""
    source = SourceFile(text=IFEXP_SOURCE, path=Path("net.py"))
    statements = collect_statements(source, "Net", "forward")
    assert [s.alternatives for s in statements] == [False, True, True]
    by_line = {s.first_line: str(s.id) for s in statements}
    records = {by_line[4]: [[[2, 5, 33]]],
               by_line[5]: [[[2, 5, 33]], [[2, 5, 33], [2, 5, 33]]],
               by_line[6]: [[[2, 5, 33]], [[2, 5, 33], [5, 33]]]}
    findings = verify(statements, [(SET_1, records)], DIMS)
    # line 5: the two-tensor branch is [2, 5, 33] twice, not ..., [5]
    assert [(f.line, f.kind) for f in findings] == [(5, "wrong_shape")]
    plain = [replace(s, alternatives=False) for s in statements]
    found = verify(plain, [(SET_1, records)], DIMS)
    assert [(f.line, f.kind) for f in found] == [(5, "wrong_shape"),
                                                 (6, "wrong_shape")]


def test_a_tasks_fixed_sizes_replace_the_runs_and_their_factor() -> None:
    """A single-head task (rubric.toml ``sizes = { num_heads = 1 }``):
    num_heads is 1 and head_size follows from hidden, whatever the size
    set says; the task's own names are kept."""
    identity = (("hidden", "num_heads", "head_size"),)
    names = ("batch_size", "seq_len", "hidden")
    assert known_sizes({**SET_1, "input_size": 7}, names, identity,
                       {"num_heads": 1}) == {
        "batch_size": 2, "seq_len": 5, "hidden": 33, "num_heads": 1,
        "head_size": 33}
    assert known_sizes(SET_1, names, identity) == {
        "batch_size": 2, "seq_len": 5, "hidden": 33}


def test_the_single_head_task_reads_num_heads_as_one() -> None:
    """multi_head_attention's task 1 has num_heads = 1 (and only task 1);
    a malformed ``sizes`` table is refused."""
    from grader.rubric import _fixed_sizes, get_assignment

    assignment = get_assignment("multi_head_attention")
    fixed = {task.id: dict(task.sizes) for task in assignment.tasks}
    assert fixed == {"task1": {"num_heads": 1}, "task2": {}}
    for bad in ({"num_heads": 0}, {"num_heads": True}, {"h": "1"}):
        try:
            _fixed_sizes(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} was accepted")
