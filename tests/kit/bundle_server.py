"""A listening fork server for an unpacked Gradescope bundle's own grader.

The suite's shared fork server (conftest.py) forks the kit's workers; a
bundle's ``run_autograder`` grades with the bundle's copy of the grader,
which refuses a server of another kit (:func:`grader.run.forkserver.
identity`) and starts one of its own, a torch import each run. Tests that
run many uploads through one unpacked bundle start this server once, with
the bundle's grader, and hand its address to the runs
(``GRADER_FORK_SERVER``): every run still goes through the real
``run_autograder``, driver and ``grade`` of the bundle. The path of a run
that starts its own server stays tested by test_bundle.py and
test_transformer_block_routes.py.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Run with the bundle's grader first on the import path: start the
# server (it computes the bundle's identity), say its pid, wait for stdin
# to close, stop it.
_LISTEN = """\
import sys
from grader.run import forkserver
process = forkserver.listen(sys.argv[1])
print(process.pid, flush=True)
sys.stdin.read()
process.kill()
process.wait()
"""


def children_cpu(pid: int) -> float:
    """The CPU seconds of the ended children ``pid`` has waited for."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def bundle_fork_server(source: Path, pythonpath: str
                       ) -> Iterator[tuple[str, int]]:
    """A fork server of the grader in ``source`` (an unpacked bundle),
    for ``grade`` commands whose PYTHONPATH is ``pythonpath`` (the
    identity covers the import path): its address and pid."""
    folder = tempfile.mkdtemp(prefix="grader-bundle-server-")
    address = os.path.join(folder, "server")
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("GRADER_FORK_SERVER", "GRADER_SEED")}
    environment["PYTHONPATH"] = pythonpath
    helper = subprocess.Popen(
        [sys.executable, "-c", _LISTEN, address], cwd=source,
        env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
        assert helper.stdout is not None and helper.stdin is not None
        line = helper.stdout.readline()
        assert line.strip().isdigit(), f"no bundle fork server: {line!r}"
        yield address, int(line)
    finally:
        if helper.stdin is not None:
            helper.stdin.close()
        try:
            helper.wait(timeout=30)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()
        shutil.rmtree(folder, ignore_errors=True)
