"""The trusted grading process stays bounded, whatever a submission is.

Issue 18: ``python -m grader grade`` never prints a traceback, and the
grading process stays under 1 GB and 30 s, on the nastiest submissions of
the hostile corpora: result-channel floods, memory bombs, hangs, code too
deep for the parser, forged report lines. Each is graded by the real
command line in a fresh process whose peak memory is measured by a small
wrapper (the workers' memory is their own: they are children of the fork
server, capped by their own limits, and not counted here).

Time is a bound, not a benchmark: 30 s, or 8 times the grade of the kit's
honest example measured in the same run when the machine is so busy that
the honest grade alone takes more than 3.75 s (a loaded CI runner).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).resolve().parent / "hostile"
LIMIT_KB = 1024 * 1024
LIMIT_SECONDS = 30.0
BASELINE_FACTOR = 8.0
EXAMPLE = KIT / "examples" / "submission"
WRAPPER = ("import resource, subprocess, sys, json; "
           "done = subprocess.run(sys.argv[1:], capture_output=True, "
           "text=True); "
           "print(json.dumps({'code': done.returncode, "
           "'stdout': done.stdout, 'stderr': done.stderr, 'kb': resource."
           "getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
CASES = ("bounds/frame_bomb.py", "t2_memory_python.py", "t2_memory_torch.py",
         "import_infinite_loop.py", "forge_malformed.py",
         "linted/pyflakes_crash.py", "integrity/report_spoof.py",
         "t2_garbage_fds.py")
pytestmark = pytest.mark.slow


def _grade(path: Path, *options: str) -> tuple[dict, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, sys.executable, "-m", "grader",
         "grade", str(path), "--timeout", "5", *options],
        capture_output=True, text=True, cwd=KIT, timeout=120)
    return json.loads(done.stdout), time.monotonic() - started


@pytest.fixture(scope="module")
def time_limit() -> float:
    """30 s, scaled up on a machine too busy to grade honest work fast."""
    result, seconds = _grade(EXAMPLE, "--format", "json")
    assert json.loads(result["stdout"])["score"] == 9.0
    return max(LIMIT_SECONDS, BASELINE_FACTOR * seconds)


@pytest.mark.parametrize("name", CASES)
def test_grading_is_bounded_and_never_a_traceback(name: str,
                                                  time_limit: float) -> None:
    """Exit 0 (a grade), no traceback, < 1 GB, < 30 s."""
    result, seconds = _grade(HOSTILE / name, "--format", "json")
    assert result["code"] == 0, result["stderr"][-2000:]
    assert "Traceback" not in result["stdout"] + result["stderr"]
    assert result["kb"] < LIMIT_KB, result["kb"]
    assert seconds < time_limit, (seconds, time_limit)
    assert json.loads(result["stdout"])["max_score"] == 10.0


def test_a_channel_flood_is_skipped_not_parsed() -> None:
    """256 MB of forged frames of empty lists: recognised as foreign,
    never decoded; the honest code keeps its full marks."""
    result, _ = _grade(HOSTILE / "bounds" / "frame_bomb.py", "--format",
                       "json")
    report = json.loads(result["stdout"])
    assert report["score"] == 11.0
    assert [flag["kind"] for flag in report["flags"]] == ["channel"]
    assert result["kb"] < 512 * 1024
