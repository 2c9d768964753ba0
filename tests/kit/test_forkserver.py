"""The fork server: workers start clean, and nothing outlives its grader.

Workers are forked by a separate, freshly started process that holds
nothing of any grading (``grader/run/forkserver.py``). These tests check what a
worker can see of its parent (no seed, no command line, no environment of
the grading process), that a worker dies when the process that asked for it
dies, and that the server itself ends with its client.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from grader.run.sandbox import Job, Limits, run_jobs
from grader.wire import MAGIC_SIZE, AuthenticatedReader, ChannelError

ROOT = Path(__file__).resolve().parents[2]

PEEK = textwrap.dedent('''
    import os, sys
    print("ARGV", sys.argv)
    print("ENV", sorted(os.environ))
    print("SECRET" if "s3cret-grading-seed" in repr(dict(os.environ))
          else "clean")
''')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_a_worker_sees_nothing_of_the_grading_process(monkeypatch) -> None:
    """Not the grading process's environment (its secret seed), nor its
    command line: the worker comes from the fork server."""
    monkeypatch.setenv("GRADER_SEED", "s3cret-grading-seed")
    result = run_jobs([Job("peek", PEEK, "/nowhere/peek.py", [])],
                      Limits(timeout=20))["peek"]
    assert "clean" in result.output and "SECRET" not in result.output
    assert "GRADER_SEED" not in result.output
    assert "forkserver.py" in result.output  # the server's own argv
    assert "pytest" not in result.output
    assert result.finished


def test_a_worker_dies_with_the_process_that_asked_for_it(
        tmp_path: Path) -> None:
    """A client killed while its worker loops forever takes the worker
    with it (the server watches each client's pipe)."""
    script = textwrap.dedent(f'''
        import json, os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from grader.run import forkserver
        from grader.run.sandbox import Job, Limits, _start
        running = _start(Job("loop", "while True:\\n    pass\\n",
                             "/nowhere/loop.py", []), Limits(timeout=600))
        print(json.dumps({{"worker": running.pid,
                          "server": forkserver.shared().pid}}), flush=True)
        time.sleep(600)
    ''')
    client = subprocess.Popen([sys.executable, "-c", script],
                              stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(client.stdout.readline())
        assert _alive(pids["worker"]) and _alive(pids["server"])
        client.kill()
        client.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (
                _alive(pids["worker"]) or _alive(pids["server"])):
            time.sleep(0.1)
        assert not _alive(pids["worker"])
        assert not _alive(pids["server"])
    finally:
        if client.poll() is None:
            client.kill()


def test_a_hung_worker_is_stopped_at_its_deadline() -> None:
    """The grading process's deadline kills the whole worker."""
    started = time.monotonic()
    result = run_jobs([Job("loop", "while True:\n    pass\n",
                           "/nowhere/loop.py", [])],
                      Limits(timeout=1.5))["loop"]
    assert result.ended == "timeout"
    assert time.monotonic() - started < 15


# --------------------------------------------------------------------------
# The authenticated channel


def _frame(key: bytes, magic: bytes, message: dict) -> bytes:
    import hashlib
    import hmac
    import struct

    body = json.dumps(message).encode()
    header = struct.pack(">I", len(body))
    return magic + header + body + hmac.new(key, header + body,
                                            hashlib.sha256).digest()


def test_foreign_bytes_and_forged_frames_are_skipped() -> None:
    """Bytes before, between and inside frames that the agent did not send
    are counted and skipped; authentic frames all arrive, in order, even
    when fed one byte at a time."""
    key, magic = b"k" * 32, b"m" * MAGIC_SIZE
    stream = (b"garbage" + _frame(key, magic, {"type": "hello"})
              + _frame(b"x" * 32, magic, {"type": "probe", "forged": 1})
              + b"\x00\xff" * 10 + _frame(key, magic, {"type": "done"}))
    reader = AuthenticatedReader(key, magic)
    messages = []
    for index in range(len(stream)):
        messages += reader.feed(stream[index:index + 1])
    assert [m["type"] for m in messages] == ["hello", "done"]
    assert reader.forged_frames == 1
    assert reader.foreign_bytes >= len(b"garbage") + 20


def test_an_authentic_frame_is_parsed_within_bounds() -> None:
    """Even an authentic frame (a compromised agent) cannot make the grading
    process build millions of objects."""
    key, magic = b"k" * 32, b"m" * MAGIC_SIZE
    reader = AuthenticatedReader(key, magic)
    bomb = {"type": "probe", "value": [[] for _ in range(300_000)]}
    try:
        reader.feed(_frame(key, magic, bomb))
    except ChannelError as exc:
        assert "arrays and objects" in str(exc)
    else:
        raise AssertionError("a frame of 300,000 lists was parsed")
