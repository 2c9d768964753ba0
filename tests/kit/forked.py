"""Child interpreters for tests of what a fork of a warm server sees.

:func:`run_child` runs a script in a new interpreter (the kit on its
path, and this folder, so that the script can ``from forked import
in_fork``) and returns the JSON its last line prints; :func:`in_fork`,
called in that script, runs a function in a fork of it, as a worker
runs in a fork of the fork server, and returns the function's JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

KIT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# Taken now, and kept in a list: the tripwires replace os._exit wherever
# a module binds it, and they do not visit lists.
_EXIT = [os._exit]


def run_child(source: str, *args: str, kit: Path = KIT,
              unset: tuple[str, ...] = ()) -> Any:
    """Run ``source`` as ``python -c`` (with ``args``) from the root of
    ``kit`` (this checkout, or a copy of it), that kit first on its path,
    without the environment variables ``unset``; the JSON of the last
    line it printed (its stderr in the failure otherwise)."""
    path = os.pathsep.join([str(kit), str(HERE)])
    environment = {name: value for name, value in os.environ.items()
                   if name not in unset}
    done = subprocess.run([sys.executable, "-c", source, *args],
                          capture_output=True, text=True, timeout=300,
                          cwd=kit, env={**environment, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def in_fork(function: Callable[[], Any]) -> Any:
    """``function()`` run in a fork of this process: its JSON result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, json.dumps(function()).encode())
        finally:
            _EXIT[0](0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 1 << 16):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    return json.loads(data)
