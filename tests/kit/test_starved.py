"""A busy machine does not change a grade.

A batch runs more workers than cores (one judge more than the cores, two
workers each), so a worker may get a third of a core or less. A worker's
time limit is wall-clock time, except for a worker the machine starves:
it may go on until its own CPU time reaches the limit (within
``WALL_FACTOR`` times the limit), as long as it keeps computing. So a slow
but honest submission earns on a starved core what it earns alone, and
code that waits (sleeps) is still stopped at the limit.

The starved machine is made for real: the grading command and three
processes that spin forever share one core (``sched_setaffinity``).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.run import sandbox

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "solutions" / "modeling_attention.py"
TIMEOUT = 6.0
# Each forward call multiplies matrices for a while (C code: no Python
# line events for the grader's tracer), so that the task-2 worker needs
# about 3 s of CPU time alone: half its limit.
BURN = ("        burn = torch.ones(256, 256)\n"
        "        for _ in range(120):\n"
        "            burn = (burn @ burn).clamp(max=1.0)\n")
SLEEP = ("        import time\n"
         "        time.sleep(60)\n")


def _with(body: str, path: Path) -> Path:
    """The reference solution with ``body`` at the start of each
    forward."""
    text = REFERENCE.read_text()
    text = re.sub(r'(    def forward\(self[^\n]*\n(?:[^\n]*\n)*?'
                  r'        """[\s\S]*?"""\n)', lambda m: m.group(1) + body,
                  text)
    assert text.count(body) == 2
    path.write_text(text)
    return path


def _grade(path: Path, core: int | None) -> tuple[dict, float]:
    """``grade --format json`` of ``path``; with ``core``, the command and
    three spinning processes share that core alone."""
    def pin() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})

    # Each spinner in a session of its own: with the kernel's autogroup
    # scheduling, a session shares the core as one (the workers have
    # sessions of their own too).
    spinners = [] if core is None else [
        subprocess.Popen([sys.executable, "-c", "while True: pass"],
                         preexec_fn=pin, start_new_session=True)
        for _ in range(3)]
    try:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "grader", "grade", str(path),
             "--assignment", "multi_head_attention", "--format", "json",
             "--seed", "3", "--timeout", str(TIMEOUT)],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            preexec_fn=pin)
        seconds = time.monotonic() - started
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), seconds


def _items(report: dict) -> dict[str, tuple]:
    return {i["id"]: (i["score"], i["passed"]) for i in report["items"]}


def _core() -> int:
    return sorted(os.sched_getaffinity(0))[-1]


def test_a_slow_honest_submission_keeps_its_grade_on_a_starved_core(
        tmp_path: Path) -> None:
    path = _with(BURN, tmp_path / "slow.py")
    alone, _ = _grade(path, None)
    assert "did not finish" not in json.dumps(alone)
    starved, seconds = _grade(path, _core())
    assert _items(starved) == _items(alone)
    assert starved["score"] == alone["score"]
    assert "did not finish" not in json.dumps(starved)
    # It did need the extra time: more than its limit of wall-clock time
    # went by (the spinners took most of the core).
    assert seconds > TIMEOUT


def test_code_that_waits_is_stopped_at_the_limit_on_a_starved_core(
        tmp_path: Path) -> None:
    path = _with(SLEEP, tmp_path / "sleeps.py")
    report, seconds = _grade(path, _core())
    text = json.dumps(report)
    assert f"did not finish within {TIMEOUT:g} seconds and was stopped" \
        in text
    assert report["score"] < 11.0
    # Both tasks' workers are stopped near the limit, not at
    # WALL_FACTOR times it (start-up on the shared core included).
    assert seconds < TIMEOUT * sandbox.WALL_FACTOR + 30


def test_cpu_seconds_reads_a_process_s_own_time() -> None:
    """The starved check reads a worker's CPU time from /proc."""
    before = sandbox._cpu_seconds(os.getpid())
    total = 0
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        total += 1
    after = sandbox._cpu_seconds(os.getpid())
    assert before is not None and after is not None
    assert after - before >= 0.2
    assert sandbox._cpu_seconds(2 ** 22 + 12345) is None  # no such pid
