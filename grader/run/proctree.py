"""Run a command and leave nothing of it running (trusted side).

Details: docs/internals.md, `grader.run.proctree`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from grader.run.forkserver import ended_children, kill_group
from grader.run.tempdirs import release

__all__ = ["TreeRun", "descendants", "fork_with_pipe", "kill_group",
           "run_tree", "stop_descendants"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_PROC = Path("/proc")
_POLL = 0.05
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_MAX_ROUNDS = 200


@dataclass(frozen=True)
class TreeRun:
    """How a command run by :func:`run_tree` ended."""

    returncode: int        # the command's exit status (or 128 + signal)
    timed_out: bool        # stopped at the deadline
    stopped_by: str | None  # the signal that stopped it ("SIGTERM"), or None
    leftovers: int         # processes still running when it ended, stopped
    seconds: float         # wall time

    @property
    def stopped(self) -> bool:
        """Whether it was stopped (deadline or signal) before it ended."""
        return self.timed_out or self.stopped_by is not None


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where it is unavailable."""
    libc = _libc()
    try:
        return libc is not None and libc.prctl(
            option, ctypes.c_ulong(value), 0, 0, 0) == 0
    except AttributeError:
        return False


def _subreaper() -> int:
    """This process's child-subreaper flag (0 where unknown)."""
    libc, flag = _libc(), ctypes.c_int(0)
    try:
        if libc is not None:
            libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    except AttributeError:
        pass
    return flag.value


def descendants(root: int | None = None) -> list[int]:
    """Live (not zombie) descendants of ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and ")".
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) < 2 or fields[0] in ("Z", "X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _reap(child: int, status: dict[int, int]) -> None:
    """Reap every finished child; record the command's status."""
    for pid, code in ended_children():
        if pid == child:
            status[child] = os.waitstatus_to_exitcode(code)


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


#: The exit status of a forked child whose function raised.
CHILD_FAILED = 70


def fork_with_pipe(child: Callable[[int], None], *,
                   close: Iterable[int] = (), new_group: bool = False,
                   show_errors: bool = False) -> tuple[int, int]:
    """Fork a copy of this process that runs ``child(write_fd)`` and exits.

    The child closes the pipe's read end and the descriptors ``close``;
    with ``new_group`` it leads a process group of its own (so that
    :func:`kill_group` stops it and what it started). It exits 0 when
    ``child`` returns, :data:`CHILD_FAILED` when it raises (printing the
    traceback when ``show_errors``), never running the parent's code after
    the fork, after removing the temporary folders it made
    (``grader.run.tempdirs``). Returns (pid, the pipe's read end) to the
    parent.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            for fd in close:
                os.close(fd)
            if new_group:
                os.setpgid(0, 0)
            child(write_fd)
        except BaseException:
            code = CHILD_FAILED
            if show_errors:
                traceback.print_exc()
        finally:
            try:
                release()  # its own temporary folders (no atexit here)
            finally:
                os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def stop_descendants(child: int, status: dict[int, int],
                     grace: float) -> set[int]:
    """Stop every descendant of this process; return their ids.

    SIGTERM first (and to ``child``'s process group, for systems without
    ``/proc``), up to ``grace`` seconds to exit, then rounds of SIGSTOP
    (frozen processes cannot fork) and SIGKILL until none is left.
    Finished children are reaped; ``child``'s status lands in ``status``.
    """
    _reap(child, status)
    seen = set(descendants())
    _signal_group(child, signal.SIGTERM)
    _signal_all(sorted(seen), signal.SIGTERM)
    end = time.monotonic() + grace
    while seen and time.monotonic() < end:
        _reap(child, status)
        if not descendants():
            break
        time.sleep(_POLL)
    for _ in range(_MAX_ROUNDS):
        _signal_group(child, signal.SIGKILL)
        alive = descendants()
        if not alive:
            break
        seen.update(alive)
        _signal_all(alive, signal.SIGSTOP)
        _signal_all(descendants(), signal.SIGKILL)
        time.sleep(0.01)
        _reap(child, status)
    _reap(child, status)
    return seen


def run_tree(argv: list[str], deadline: float, grace: float = 2.0,
             cwd: Path | None = None,
             env: dict[str, str] | None = None) -> TreeRun:
    """Run ``argv``; stop it at ``deadline`` s; leave nothing running.

    Output goes where this process's goes. SIGTERM, SIGINT or SIGHUP to
    this process, or the death of its parent, stop the command too.
    Raises ``OSError`` when the command cannot be started.
    """
    start = time.monotonic()
    parent = os.getppid()
    was_subreaper = _subreaper()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    received: list[int] = []
    previous = {signum: signal.signal(signum, lambda s, _: received.append(s))
                for signum in _STOP_SIGNALS}
    status: dict[int, int] = {}
    try:
        if os.getppid() != parent:        # the parent died before prctl
            received.append(signal.SIGTERM)
        process = subprocess.Popen(argv, cwd=cwd, env=env,
                                   start_new_session=True)
        child = process.pid
        # From here on _reap reaps every child (the command and every
        # orphan re-parented to us), never Popen.
        timed_out = False
        while child not in status and not received:
            if time.monotonic() - start >= deadline:
                timed_out = True
                break
            time.sleep(_POLL)
            _reap(child, status)
        stopped = stop_descendants(child, status, grace)
        process.returncode = status.get(child, -signal.SIGKILL)
    finally:
        _prctl(_PR_SET_PDEATHSIG, 0)
        _prctl(_PR_SET_CHILD_SUBREAPER, was_subreaper)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    code = process.returncode
    return TreeRun(returncode=128 - code if code < 0 else code,
                   timed_out=timed_out and not received,
                   stopped_by=(signal.Signals(received[0]).name
                               if received else None),
                   leftovers=len(stopped - {child}),
                   seconds=time.monotonic() - start)
