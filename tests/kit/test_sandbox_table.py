"""The generic worker knows an assignment's library classes only as data.

What the worker watches and reports of a library class beyond its generic
ones (the dropout rate of a child ``nn.Dropout``, a replaced method of
``nn.Dropout``) comes from the rubric's ``[sandbox]`` table, carried by the
job; the worker's code names no such class. A real worker runs with and
without the table, on a class no rubric names.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grader.rubric import RubricError, _sandbox, assignments
from grader.run.sandbox import Job, Limits, run_jobs
from grader.wire import check_frame

SOURCE = textwrap.dedent('''
    import torch


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(4, eps=0.25)
            self.drop = torch.nn.Dropout(0.5)
            self.inner = torch.nn.Sequential(torch.nn.LayerNorm(4,
                                                                eps=0.125))


    torch.nn.LayerNorm.extra_repr = lambda self: "patched"
''')
PROBE = {"id": "init", "target": "Net", "init": {"args": [], "kwargs": {}},
         "train": False, "seed": 0, "describe": True}
TABLE = {"watched": ["torch.nn.LayerNorm"],
         "numbers": {"torch.nn.LayerNorm": ["eps"],
                     "torch.nn.NoSuchLayer": ["p"]}}


@pytest.fixture(scope="module")
def results() -> dict:
    jobs = [Job(name, SOURCE, f"/nowhere/{name}.py", [PROBE],
                sandbox=table)
            for name, table in (("with", TABLE), ("without", {}))]
    return run_jobs(jobs, Limits(timeout=60))


def _frames(result, kind: str) -> list[dict]:
    return [m for m in result.frames if m.get("type") == kind]


def test_the_table_names_what_the_worker_reports(results: dict) -> None:
    result = results["with"]
    assert result.finished and result.channel_error is None
    assert [check_frame(m) for m in result.frames] == [None] * len(
        result.frames)
    [probe] = _frames(result, "probe")
    children = probe["describe"]["children"]
    assert children["norm"] == {"type": "LayerNorm", "is_linear": False,
                                "eps": 0.25}
    assert children["drop"] == {"type": "Dropout", "is_linear": False}
    patched = [w for m in _frames(result, "patched") for w in m["what"]]
    assert "torch.nn.LayerNorm.extra_repr" in patched


def test_modules_the_table_names_are_reported_flat_at_any_depth(
        results: dict) -> None:
    """Below the children (a plug-in reads an inner dropout's rate): each
    module of a class the table names, under its dotted path, with the
    table's numbers; a class the table does not name is not listed."""
    [probe] = _frames(results["with"], "probe")
    numbers = probe["describe"]["numbers"]
    assert numbers == {
        "norm": {"type": "LayerNorm", "is_linear": False, "eps": 0.25},
        "inner.0": {"type": "LayerNorm", "is_linear": False, "eps": 0.125}}
    assert probe["describe"]["numbers_complete"] is True
    assert "grandchildren" not in probe["describe"]


def test_without_the_table_the_worker_reports_none_of_it(
        results: dict) -> None:
    result = results["without"]
    assert result.finished and result.channel_error is None
    [probe] = _frames(result, "probe")
    children = probe["describe"]["children"]
    assert children["norm"] == {"type": "LayerNorm", "is_linear": False}
    patched = [w for m in _frames(result, "patched") for w in m["what"]]
    assert not any("LayerNorm" in w for w in patched)


def test_every_rubric_gives_its_dropout_rate_as_data() -> None:
    """Behaviour as before: every assignment reports a child dropout's
    rate and watches nn.Dropout, from its rubric."""
    for assignment in assignments():
        assert assignment.sandbox == {
            "watched": ["torch.nn.Dropout"],
            "numbers": {"torch.nn.Dropout": ["p"]}}, assignment.id


@pytest.mark.parametrize("raw", [
    {"watched": "torch.nn.Dropout"},
    {"numbers": {"torch.nn.Dropout": "p"}},
    {"numbers": {"torch.nn.Dropout": ["type"]}},
    {"numbers": {"torch.nn.Dropout": ["not a name"]}},
    {"other": []},
])
def test_a_malformed_sandbox_table_is_refused(raw: dict) -> None:
    with pytest.raises(RubricError, match="sandbox"):
        _sandbox(raw, Path("rubric.toml"))
