"""Shapes where the student cannot predict them (issue 24, principle 6,
first half).

Every grade traces ``forward`` at the rubric's printed size sets and at a
secret one drawn from the seed (:mod:`grader.shapes.sizes`). The files of
``hostile/shapes_secret/`` are correct everywhere but keep a layout whose
shape comment is true only at the printed sizes (a conditional
expression, an if-branch, a lookup table): each loses the shapes point,
item by item, and the report shows the third size set.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from in_process import grade_command

from grader.rubric import assignments
from grader.shapes.sizes import secret_size_sets

KIT = Path(__file__).resolve().parents[2]
VARIANTS = KIT / "tests" / "kit" / "hostile" / "shapes_secret"
EXPECTED = {"task1.init": 1.0, "task1.forward": 3.0, "task1.pep8": 0.0,
            "task1.shapes": 0.0, "task1.bonus": 1.0, "task2.scores": 3.0,
            "task2.causal": 1.0, "task2.output": 2.0, "task2.pep8": 0.0,
            "task2.shapes": -1.0}


def _grade(path: Path, form: str) -> str:
    """``grade``, by the command's main in this process (in_process.py)."""
    run = grade_command(str(path), "--format", form)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("name", ["printed_conditional", "printed_branch",
                                  "printed_lookup"])
def test_a_layout_true_only_at_printed_sizes_loses_the_point(name):
    path = VARIANTS / f"{name}.py"
    report = json.loads(_grade(path, "json"))
    assert {i["id"]: i["score"] for i in report["items"]} == EXPECTED
    assert report["flags"] == []
    text = " ".join(_grade(path, "text").split())
    assert "have a missing or wrong shape comment" in text
    assert "size set 3:" in text


def test_secret_sets_keep_the_rubric_relations_and_change_with_the_seed():
    for assignment in assignments():
        drawn = [secret_size_sets(assignment.size_sets, seed, assignment.id)
                 for seed in range(40)]
        assert all(len(d) == 1 for d in drawn), assignment.id
        assert len({tuple(d[0].items()) for d in drawn}) > 20
        for (sizes,) in drawn:
            assert sizes not in assignment.size_sets
            assert len(set(sizes.values())) == len(sizes)
            if "hidden" in sizes:
                assert sizes["hidden"] == sizes["num_heads"] * \
                    sizes["head_size"]
