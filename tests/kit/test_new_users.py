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


# --------------------------------------------------------------------------
# 2. The public tests point at the real fix

SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
HOMEWORK = ROOT / "assignment" / "multi_head_attention"
NO_SCALING = ("The scores are not divided by the square root of the key "
              "size. Divide q k^T by sqrt(d_k) before the softmax.")
SOFTMAX_DIM = ("The softmax runs over the wrong dimension. Take it over the "
               "keys, the last dimension of the scores (dim=-1).")
MASK_DIAGONAL = ("The causal mask also hides the current token. Mask only "
                 "j > i: torch.triu(..., diagonal=1).")
MASK_SEES_NEXT = ("The causal mask lets each token see the next one. Look "
                  "at the mask's diagonal: mask every j > i, "
                  "torch.triu(..., diagonal=1), not diagonal=2.")
WRONG = "the shape is right but the values are not."
# What each classic mistake's public tests say, word for word; and what
# they must not say (a cause the mistake is not).
CLASSIC = {
    "mistake_no_scaling": (
        [f"AssertionError: SelfAttention output: {WRONG} {NO_SCALING}",
         f"AssertionError: probs: {WRONG} {NO_SCALING}",
         f"AssertionError: att: {WRONG} {NO_SCALING}",
         f"AssertionError: att (causal): {WRONG} {NO_SCALING}"],
        "7 failed, 16 passed"),
    "mistake_softmax_dim": (
        [f"AssertionError: SelfAttention output: {WRONG} {SOFTMAX_DIM}",
         f"AssertionError: probs: {WRONG} {SOFTMAX_DIM}",
         f"AssertionError: att (causal): {WRONG} {SOFTMAX_DIM}",
         f"AssertionError: att (causal) at positions 0..2: {WRONG} "
         f"{SOFTMAX_DIM}",
         f"AssertionError: {SOFTMAX_DIM}"],
        "10 failed, 13 passed"),
    "mistake_mask_diagonal": (
        [f"AssertionError: att (causal): {WRONG} {MASK_DIAGONAL}",
         f"AssertionError: {MASK_DIAGONAL}",
         f"AssertionError: att (causal) at positions 0..2: {WRONG} "
         f"{MASK_DIAGONAL}"],
        "5 failed, 18 passed"),
    "diagnoses/mask_sees_next_triu2": (
        [f"AssertionError: att (causal): {WRONG} {MASK_SEES_NEXT}",
         f"AssertionError: {MASK_SEES_NEXT}"],
        None),
}
MISLEADING = ("lets tokens see the future", "Position i may attend",
              "check the mask", "Check the head split")


def test_classic_mistakes_get_their_cause_in_the_public_tests(tmp_path):
    """In the released homework, ``python -m pytest tests/public`` on the
    three classic mistakes (and a diagonal=2 mask) names the cause the
    grader's diagnosis names, in the grader's words, and nothing else."""
    import shutil

    from grader.rubric import get_assignment

    rubric = get_assignment("multi_head_attention").diagnoses
    for sentence, mistake in ((NO_SCALING, "no_scaling"),
                              (SOFTMAX_DIM, "softmax_dim"),
                              (MASK_DIAGONAL, "mask_diagonal"),
                              (MASK_SEES_NEXT, "mask_sees_next")):
        assert rubric[mistake] == sentence
    runs = {}
    for name in CLASSIC:
        folder = tmp_path / name.replace("/", "_")
        shutil.copytree(HOMEWORK, folder)
        shutil.copy(SUBMISSIONS / f"{name}.py",
                    folder / "transformer_lm" / "modeling_attention.py")
        runs[name] = subprocess.Popen(
            [sys.executable, "-m", "pytest", "tests/public", "-q",
             "-p", "no:cacheprovider", "-p", "no:xdist"], cwd=folder,
            env={k: v for k, v in environment().items()
                 if k != "PYTHONPATH"},
            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for name, run in runs.items():
        out, _ = run.communicate(timeout=300)
        lines, tally = CLASSIC[name]
        assert run.returncode == 1, out
        for line in lines:
            assert line in out, (name, line, out[-3000:])
        said = "\n".join(line for line in out.splitlines()
                         if line.startswith("E "))
        for words in MISLEADING:
            assert words not in said, (name, words)
        if tally is not None:
            assert tally in out, (name, out[-500:])
