"""A tensor kept in a list, tuple or dict needs its comment like any other
(issue 24, principle 6, second half).

The tracer records the shapes of the tensors a list, tuple or dict holds
after a statement (:func:`grader.worker.agent.value_readers`, nested ones
too; past what it reads the record says so and the comment fails
closed); the static rule (:mod:`grader.shapes.tensor_facts`) counts a
display, a comprehension or ``append``/``update``/... of a tensor as a
tensor statement for code that never ran. ``hostile/shapes_held/`` holds
correct files whose container statements lack their comment, claim a
wrong shape or hold too much, and a control whose containers are
commented, and heads merged by comprehensions, a generator expression
and a lambda that read the name their statement rebinds (the
expression's own frame never records the statement): all graded in
one batch, item by item, at the printed and the
secret sizes.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from derived import materialize

from grader import wire
from grader.shapes.tensor_facts import TensorFacts
from grader.shapes.verify import ShapeRecordError, _executions
from grader.worker import agent

KIT = Path(__file__).resolve().parents[2]
VARIANTS = KIT / "tests" / "kit" / "hostile" / "shapes_held"
FULL = {"task1.init": 1.0, "task1.forward": 3.0, "task1.pep8": 0.0,
        "task1.shapes": 0.0, "task1.bonus": 1.0, "task2.scores": 3.0,
        "task2.causal": 1.0, "task2.output": 2.0, "task2.pep8": 0.0,
        "task2.shapes": 0.0}
#: Each variant: its task2.shapes score and the words its finding says.
EXPECTED = {
    "append_uncommented": (-1.0, ["line 152: missing shape comment",
                                  "keeps tensors in a list, tuple or dict",
                                  "3 x [24, 7, 19]"]),
    "dict_uncommented": (-1.0, ["line 150: missing shape comment",
                                "keeps tensors in a list, tuple or dict",
                                "real 3 x [4, 7, 114]",
                                "line 158: missing shape comment",
                                "did not run in any of the grader's runs"]),
    "list_wrong_claim": (-1.0, ["line 160: wrong shape",
                                "the comment claims [bs * h, seq, d_k]",
                                "claimed [24, 7, 19], real [24, 7, 19] and "
                                "[4, 7, 114]"]),
    "list_too_long": (-1.0, ["wrong shape", "more values than the grader "
                             "reads", "64 x [4, 7, 17]"]),
    "containers_commented": (0.0, []),
    # A comprehension, a generator expression and a lambda on the line
    # that rebinds the name they read run in frames of their own, which
    # hold the old value: the statement's frame alone records it.
    "expressions_merge_heads": (0.0, []),
    "expression_claims_old_value": (-1.0, [
        "line 182: wrong shape",
        "claimed [4, 6, 7, 19], real [4, 7, 114]"]),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, dict]:
    """Every variant graded in one batch: name -> its JSON report."""
    root = tmp_path_factory.mktemp("held")
    folder = root / "class"
    folder.mkdir()
    materialize(VARIANTS, folder)
    out = root / "grades.csv"
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env["PYTHONPATH"] = str(KIT)
    run = subprocess.run([sys.executable, "-m", "grader", "batch",
                          str(folder), "--out", str(out), "--public-only",
                          "--jobs", "2", "--no-feedback"], cwd=KIT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    reports = {}
    for record in out.with_name(out.name + ".reports").glob(
            "*/record.json"):
        data = json.loads(record.read_text(encoding="utf-8"))
        reports[record.parent.name.removesuffix(".py")] = data["report"]
    return reports


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_tensor_in_a_container_needs_its_comment(graded, name):
    """Item by item: only task2.shapes moves; the finding names the
    statement, what it keeps and its shapes at the secret size set."""
    shapes, words = EXPECTED[name]
    report = graded[name]
    assert {i["id"]: i["score"] for i in report["items"]} == {
        **FULL, "task2.shapes": shapes}
    assert report["flags"] == []
    message = " ".join(next(i["message"] for i in report["items"]
                            if i["id"] == "task2.shapes").split())
    assert "size set 3:" in message or not words
    for word in words:
        assert word in message, (word, message)


def _facts(body: str) -> tuple[TensorFacts, list[ast.stmt]]:
    tree = ast.parse("import torch\n\n\ndef forward(x, n):\n" + "".join(
        f"    {line}\n" for line in body.splitlines()))
    func = tree.body[-1]
    return TensorFacts(tree, func, None), func.body


def test_the_static_rule_sees_tensors_kept_in_containers():
    """For code that never runs: displays, comprehensions and stores of a
    tensor are tensor statements; containers of other values are not."""
    facts, body = _facts(
        "heads = []\n"
        "heads.append(x @ x.T)\n"
        "d = {'q': x.relu()}\n"
        "out = [x * w for w in range(n)]\n"
        "pair = (x, 1)\n"
        "d.update({'k': x})\n"
        "d.setdefault('v', x)\n"
        "heads.insert(0, x)\n"
        "names = ['a', n]\n"
        "heads.append(n)\n")
    verdicts = [facts.resolved(facts.statement(node)).always
                for node in body]
    assert verdicts == [False, True, True, True, True, True, True, True,
                        False, False]


def test_container_records_cross_the_wire_and_parse():
    """The wire accepts a container's shapes (None last: more than was
    read) and nothing else; the verifier reads them back."""
    trace = {"intact": True, "records": {
        "0": [[[2, 5], [[2, 5], [3]], [[1], None], None]]}}
    assert wire._trace(trace) is None
    for bad in ([[["2"]]], [[[None, [2]]]], [[[[2]] * 66]]):
        assert wire._trace({"intact": True, "records": {"0": bad}}) \
            is not None
    (execution,) = _executions(trace["records"], 0)
    assert execution[0] == (2, 5)
    assert execution[1].shapes == ((2, 5), (3,))
    assert execution[2].unread and execution[2].shapes == ((1,),)
    with pytest.raises(ShapeRecordError):
        _executions({"0": [[[[2], "x"]]]}, 0)
    assert agent.MAX_HELD == wire.MAX_HELD_SHAPES
