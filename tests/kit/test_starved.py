"""A busy machine does not change a grade.

A batch runs more workers than cores (one judge more than the cores, two
workers each), so a worker may get a third of a core or less. A worker's
time limit is wall-clock time, except for a worker the machine starves:
it may go on until its own CPU time reaches the limit (within
``WALL_FACTOR`` times the limit), as long as it keeps computing. So a slow
but honest submission earns on a starved core what it earns alone, and
code that waits (sleeps) is still stopped at the limit.

The starved machine is made for real, for the workers themselves: they
are forked by a fork server pinned to one core (``sched_setaffinity``;
a forked worker keeps its server's core), which three processes that
spin forever share with them. One grading proves both: task 1's forward
computes until more than its limit of wall-clock time has gone by (so it
keeps its points only if the starved worker's deadline was moved: alone
on a core it would be stopped), task 2's forward sleeps (and is stopped
at the limit).
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.run import forkserver, sandbox

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "solutions" / "modeling_attention.py"
TIMEOUT = 3.0
#: prctl's option: a signal the child gets when its parent dies.
PR_SET_PDEATHSIG = 1
# At import, the module notes the time; SelfAttention.forward's first
# call multiplies matrices (C code: no Python line events for the
# grader's tracer) until TIMEOUT + 1 s of wall-clock time have gone by
# since then: a worker that had a whole core would have used more CPU
# time than its limit and be stopped; a starved one has not.
STARTED = "import time\n_STARTED = time.monotonic()\n_BURNT = []\n"
BURN = ("        while not _BURNT:\n"
        "            burn = torch.ones(128, 128)\n"
        "            for _ in range(20):\n"
        "                burn = (burn @ burn).clamp(max=1.0)\n"
        f"            if time.monotonic() - _STARTED > {TIMEOUT + 1}:\n"
        "                _BURNT.append(True)\n")
SLEEP = "        time.sleep(60)\n"
FORWARD = (r'(    def forward\(self[^\n]*\n(?:[^\n]*\n)*?'
           r'        """[\s\S]*?"""\n)')


def _submission(path: Path) -> Path:
    """The reference solution, SelfAttention.forward starting with BURN
    and MultiHeadSelfAttention.forward with SLEEP."""
    text = REFERENCE.read_text()
    bodies = iter((BURN, SLEEP))
    text = re.sub(FORWARD, lambda m: m.group(1) + next(bodies), text)
    assert text.count(BURN) == 1 and text.count(SLEEP) == 1
    text = text.replace("\nimport torch\n", f"\n{STARTED}import torch\n",
                        1)
    assert STARTED in text
    path.write_text(text)
    return path


def _core() -> int:
    return sorted(os.sched_getaffinity(0))[-1]


def _children_cpu(pid: int) -> float:
    """The CPU time of the ended children ``pid`` has waited for."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def pinned_server() -> Iterator[tuple[str, subprocess.Popen, int]]:
    """A fork server on one core (it starts, and warms up, before
    anything spins there): its address, its process and the core."""
    core = _core()
    folder = tempfile.mkdtemp(prefix="grader-starved-")
    address = os.path.join(folder, "server")
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        process = forkserver.listen(address)
    finally:
        os.sched_setaffinity(0, allowed)
    try:
        yield address, process, core
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _spinners(core: int) -> list[subprocess.Popen]:
    """Three processes spinning on ``core``, each in a session of its
    own: with the kernel's autogroup scheduling, a session shares the
    core as one (the workers have sessions of their own too). Each dies
    with the test's process (a killed test run leaves no spinner)."""
    def pinned() -> None:
        os.sched_setaffinity(0, {core})
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=pinned, start_new_session=True)
            for _ in range(3)]


def test_starved_workers_keep_honest_points_and_waiting_code_is_stopped(
        tmp_path: Path, pinned_server) -> None:
    address, server, core = pinned_server
    assert os.sched_getaffinity(server.pid) == {core}
    path = _submission(tmp_path / "starved.py")
    spinners = _spinners(core)
    try:
        before = _children_cpu(server.pid)
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "grader", "grade", str(path),
             "--assignment", "multi_head_attention", "--format", "json",
             "--seed", "3", "--timeout", f"{TIMEOUT:g}"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, forkserver.SHARED_ADDRESS: address})
        seconds = time.monotonic() - started
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    items = {i["id"]: i for i in report["items"]}
    # The workers were the pinned server's: their CPU time is its
    # children's (task 1's alone computed for most of TIMEOUT + 1 s of a
    # quarter of a core).
    assert _children_cpu(server.pid) - before > 0.5
    # The computing worker kept every point of its checks ...
    for item in ("task1.init", "task1.forward"):
        assert items[item]["score"] == items[item]["max_score"] > 0, \
            items[item]
        assert "did not finish" not in items[item]["message"]
    # ... the sleeping one was stopped at the limit,
    stopped = f"did not finish within {TIMEOUT:g} seconds and was stopped"
    for item in ("task2.scores", "task2.output"):
        assert items[item]["score"] == 0 and stopped in \
            items[item]["message"], items[item]
    # near it, not at WALL_FACTOR times it (start-up included).
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
