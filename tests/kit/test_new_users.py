"""What a new instructor, student and TA meet (issue 30), through the
routes they use: ``python -m grader ...`` as the README shows it, the
student repository's public tests, the Gradescope dry run.

Each test grades real files once and asserts everything it can about them.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "modeling_attention.py"
MARKER = re.compile(r"^\s*# YOUR CODE (STARTS|ENDS) HERE.*\n", re.M)
SOLUTION_TAG = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.M)


def solution_text(markers: bool = True) -> str:
    """The reference solution as a student would hand it in: the stub with
    its regions filled, with or without the ``# YOUR CODE`` markers."""
    text = SOLUTION_TAG.sub("", SOLUTION.read_text())
    return text if markers else MARKER.sub("", text)


def environment() -> dict[str, str]:
    """This interpreter's environment, without a seed from outside."""
    return {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}


def start(*args: str, cwd: Path = ROOT) -> subprocess.Popen:
    """Start ``python -m grader ARGS`` as a person types it."""
    return subprocess.Popen([sys.executable, "-m", "grader", *args],
                            cwd=cwd, env=environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen, code: int = 0) -> str:
    """The standard output of a started command that exited with
    ``code``."""
    out, err = process.communicate(timeout=300)
    assert process.returncode == code, err
    return out


def items(report: dict[str, Any]) -> dict[str, tuple[float, bool]]:
    """Each rubric item's (score, passed) in a JSON report."""
    return {i["id"]: (i["score"], i["passed"]) for i in report["items"]}


# --------------------------------------------------------------------------
# 1. One grade for one piece of code


def test_markers_do_not_change_the_grade(tmp_path):
    """The correct classes score the same, item by item, with the stub's
    markers and without them (an upload of any name): the stub's own
    closing lines (``return att, probs``) are not the student's."""
    marked = tmp_path / "modeling_attention.py"
    marked.write_text(solution_text(markers=True))
    bare = tmp_path / "my homework v2.py"
    bare.write_text(solution_text(markers=False))
    assert not MARKER.search(bare.read_text())
    runs = [start("grade", str(path), "--format", "json")
            for path in (marked, bare)]
    with_markers, without = (json.loads(finish(run)) for run in runs)
    assert items(without) == items(with_markers)
    assert without["score"] == with_markers["score"] == 11.0
    shapes = next(i for i in without["items"] if i["id"] == "task2.shapes")
    assert shapes["passed"] and "return att" not in shapes["message"]
