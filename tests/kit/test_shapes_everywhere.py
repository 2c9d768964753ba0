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


GROWER = """import torch


class Net:
    def forward(self, n):
        found = []  # no tensor yet
        for _ in range(n):
            found.append(torch.zeros(2))  # [2]
            x = torch.ones(3)  # [3]
        for _ in range(n):
            found[0].unsqueeze_(0).squeeze_(0)  # [2]
        for _ in range(n):
            fresh = list(map(torch.zeros, [2] * n))  # [2]
        return found, x, fresh
"""


def _grown_cost(count: int) -> int:
    """What the worker charges the reads of a statement that appends one
    tensor to a list ``count`` times (agent.HELD_INCREMENTAL and
    HELD_COMPARE): 1 a read; a small list (the list and its tensors)
    walked whole; once bigger, read whole once, then only the new tensor
    plus its size compared by identity (1 per 128 values)."""
    from grader.worker import agent

    cost = 0
    for length in range(1, count + 1):
        total = 1 + length
        if total <= agent.HELD_INCREMENTAL:
            cost += 1 + total
        elif total == agent.HELD_INCREMENTAL + 1:
            cost += 1 + total  # read whole, kept for the next read
        else:
            cost += 2 + -(-total // agent.HELD_COMPARE)
    return cost


def test_reading_a_statement_is_bounded_per_call(tmp_path: Path,
                                                 monkeypatch: Any) -> None:
    """The worker's read budget (``MAX_READS``), per statement and call:
    a read costs 1 plus the container values it scans. A list the same
    statement read before is read again incrementally: only what changed
    identity is read, so a list grown one tensor at a time costs about
    its length, not its square; a statement that changes no value's
    identity (an item changed in place) or rebuilds its list reads it
    whole every time. Past the budget the executions are counted as
    left out (the shapes item then fails closed, ``capped``), never read
    as "no tensor"."""
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
    monkeypatch.setattr(agent, "MAX_READS", 4000)
    spent = [0]
    _, _, _, read_chain, expand = agent.value_readers(torch, spent)
    counters: dict = {"returns": 0, "calls": 0, "scanned": spent}
    records: dict = {}

    def record(statement: dict, values: list) -> None:
        records.setdefault(str(statement["id"]), []).append(values)

    def held(value: Any, slot: list | None = None) -> Any:
        return expand(value, True, slot)

    units, line_unit = agent.plan_units(plan)
    local = agent.line_tracer(units, line_unit, record, held, read_chain,
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
    in_place, fresh = ids["found[0].unsqueeze_(0).squeeze_(0)"], ids["fresh"]
    # The growing list: all 300 reads within the budget (read whole each
    # time, they would cost 45,450), its records the same as a whole
    # read's (64 shapes, then only new ones: none).
    assert counters["reads"][append] == _grown_cost(300) < 4000
    assert append not in counters["left_out"]
    assert len(records[append]) == 300
    assert records[append][-1] == [[[2]] * agent.MAX_HELD]
    # A tensor costs 1 a read: all 300 read, within the budget.
    assert len(records[plain]) == 300
    assert counters["reads"][plain] == 300
    # An item changed in place (no value changed identity): the list is
    # read whole, 1 + 301 a read; the 14th read starts below the budget
    # (13 x 302 = 3926) and is the last.
    assert len(records[in_place]) == 14
    assert counters["left_out"][in_place] == 286
    # A list rebuilt at every execution (every value new): whole too.
    assert len(records[fresh]) == 14
    assert counters["left_out"][fresh] == 286
    # A return is charged alike: 1 plus each list and its 300 tensors
    # (read whole: a return is read once a call).
    assert counters["reads"][ids["return"]] == 1 + 301 + 301


class _Lying(list):
    """A list that hides what it holds from Python-level readers."""

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Any:
        return iter(())

    def __getitem__(self, index: Any) -> Any:
        return None


def test_an_incremental_read_equals_a_whole_read() -> None:
    """Reading a container again through its slot (what the same
    statement read before) gives exactly the record a whole read gives,
    whatever changed between the reads: appends, an item swapped at any
    depth, pop then append, the list replaced by one of the same length,
    a dict's value changed under the same key, an item changed in place,
    a tree whose depth changes, a list subclass that lies to Python."""
    import random

    import torch

    from grader.worker import agent

    spent = [0]
    _, _, _, _, expand = agent.value_readers(torch, spent)
    rng = random.Random(24)
    shapes = [(), (2,), (3, 1)]

    def tensor() -> Any:
        return torch.zeros(rng.choice(shapes))

    def flat(value: list) -> list:
        step = rng.random()
        if step < 0.6 or not value:
            value.append(tensor())
        elif step < 0.7:
            value[rng.randrange(len(value))] = tensor()
        elif step < 0.75:
            value.pop()
            value.append(tensor())
        elif step < 0.8:
            return value[:-1] + [tensor()]
        elif step < 0.9:
            chosen = value[rng.randrange(len(value))]
            if isinstance(chosen, torch.Tensor):
                chosen.unsqueeze_(0)
        elif step < 0.95:
            value.insert(rng.randrange(len(value)), tensor())
        else:
            value.append([tensor()])
        return value

    def grid(value: list) -> list:
        rows = value[rng.randrange(len(value))]
        row = rows[rng.randrange(len(rows))]
        row[rng.randrange(len(row))] = tensor()
        if rng.random() < 0.02:
            value[0][0] = [tensor() for _ in range(4)]
        return value

    def store(value: dict) -> dict:
        value[rng.randrange(90)] = tensor() if rng.random() < 0.95 else 1
        return value

    def lying(value: _Lying) -> _Lying:
        list.append(value, tensor())
        return value

    # Each starts past HELD_INCREMENTAL values (read incrementally from
    # its second read on).
    cases = [(flat, lambda: [tensor() for _ in range(70)]),
             (store, lambda: {key: tensor() for key in range(70)}),
             (lying, lambda: _Lying(tensor() for _ in range(70))),
             (grid, lambda: [[[None] * 4 for _ in range(3)]
                             for _ in range(8)])]
    for change, make in cases * 3:
        value, slot = make(), [None]
        for _ in range(rng.randrange(50, 100)):
            value = change(value)
            assert expand(value, True, slot) == expand(value, True)


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


def test_an_exact_tree_is_read_past_the_walkers_scan() -> None:
    """A tree of exact lists, tuples and dicts is read by levels up to
    MAX_HELD_TREE values (the walker stops at MAX_HELD_SCAN): its record
    is the one an unbounded walk makes, a wrong shape past the scan
    included; anything else is walked and fails closed as before. What
    a failed level read copied is charged, and a mixed depth is found
    before any value's key is read."""
    import torch

    from grader.worker import agent

    spent = [0]
    _, _, _, _, expand = agent.value_readers(torch, spent)
    row = torch.zeros(3)
    size = agent.MAX_HELD_SCAN + 1000
    full = [[3]] * agent.MAX_HELD
    # An exact list past the scan: every value read, no "more values".
    flat = [row] * size
    assert expand(flat, True) == full
    assert spent[0] == size + 1
    # A wrong shape past the scan is read (past the first 64 shapes, the
    # record ends with None, as an unbounded walk's would).
    flat[size - 10] = torch.zeros(2, 3)
    assert expand(flat, True) == full + [None]
    grid = [[flat[-100:] for _ in range(3)] for _ in range(20)]
    assert expand(grid, True) == full + [None]

    class Rows(list):
        pass

    # Not exact, too big, or of mixed depth: the walker, past its scan.
    for value in (Rows([row] * size), [row] * (agent.MAX_HELD_TREE + 1),
                  [row] * size + [[row]]):
        spent[0] = 0
        assert expand(value, True) == full + [None]
        assert spent[0] < agent.MAX_HELD_SCAN + 1 + (
            len(value) + 1) // agent.HELD_COMPARE + 2
    # A list whose last value is a list subclass: charged whole (its keys
    # were being read), then walked.
    spent[0] = 0
    assert expand([row] * size + [Rows()], True) == full + [None]
    assert spent[0] == size + 2 + agent.MAX_HELD_SCAN


def test_a_kept_record_is_the_whole_reads() -> None:
    """A record read again is kept only while values of shapes it holds
    are added after its first 64 tensors: every read equals a whole
    one, whatever is added, swapped or removed."""
    import torch

    from grader.worker import agent

    _, _, _, _, expand = agent.value_readers(torch, [0])
    value, slot = [None] * 30, [None]
    steps = ([torch.zeros(2)] * 80 + [None, torch.zeros(3)]
             + [torch.zeros(2)] * 5 + ["irregular"] + [torch.zeros(3)])
    for step in steps:
        if step == "irregular":
            value.pop(-3)
        else:
            value.append(step)
        assert expand(value, True, slot) == expand(value, True)
    value[40] = torch.zeros(4)
    assert expand(value, True, slot) == expand(value, True)
