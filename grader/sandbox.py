"""Running student code in sandboxed child processes (the parent's side).

:func:`run_jobs` forks one worker per job (normally one per task), all at
once, and collects their result frames and captured output until each has
finished, died or run out of time. The parent never imports student code;
a worker's death, hang or garbage costs only that worker's job.

Forking is cheap because the parent has already imported torch: a worker
starts in milliseconds and sets torch to one thread first, which keeps
forking safe even after the parent has run torch operations.
"""
from __future__ import annotations

import os
import selectors
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.wire import ChannelError, FrameReader

_READ = 65536


@dataclass(frozen=True)
class Limits:
    """What one worker may use."""

    timeout: float = 20.0           # wall-clock seconds for the whole job
    memory_mb: int = 2048           # address space beyond the parent's
    output_bytes: int = 32 * 1024   # captured stdout + stderr kept


@dataclass(frozen=True)
class Job:
    """A submission's source and the probes to run on it."""

    name: str
    source: str
    filename: str
    probes: list[dict]
    protected: tuple[str, ...] = ()


@dataclass
class JobResult:
    """Everything a worker reported, and how it ended."""

    name: str
    frames: list[dict] = field(default_factory=list)
    output: str = ""
    output_truncated: bool = False
    ended: str = "finished"         # finished | exited | signalled | timeout
    detail: str = ""
    seconds: float = 0.0
    channel_error: str | None = None

    @property
    def finished(self) -> bool:
        """True when the worker ran its whole plan and said so."""
        return self.ended == "finished"

    def last_started(self) -> str | None:
        """The id of the last probe the worker started, if any."""
        for message in reversed(self.frames):
            if message.get("type") == "start":
                return str(message.get("id"))
        return None


class _Running:
    """A forked worker being watched."""

    def __init__(self, job: Job, pid: int, result_fd: int, output_fd: int,
                 scratch: Path, limits: Limits) -> None:
        self.job = job
        self.pid = pid
        self.result = JobResult(job.name)
        self.reader = FrameReader()
        self.open_fds = {result_fd, output_fd}
        self.result_fd = result_fd
        self.output_fd = output_fd
        self.output = bytearray()
        self.scratch = scratch
        self.started = time.monotonic()
        self.deadline = self.started + limits.timeout
        self.status: int | None = None
        self.limits = limits

    def on_data(self, fd: int, data: bytes) -> None:
        if fd == self.result_fd:
            if self.result.channel_error is not None:
                return
            try:
                self.result.frames.extend(self.reader.feed(data))
            except Exception as exc:  # any bytes may arrive: never crash
                self.result.channel_error = _safe_reason(exc)
        else:
            room = self.limits.output_bytes - len(self.output)
            if room > 0:
                self.output.extend(data[:room])
            if len(data) > max(room, 0):
                self.result.output_truncated = True

    def kill(self) -> None:
        for target in (lambda: os.killpg(self.pid, signal.SIGKILL),
                       lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass


def _safe_reason(exc: Exception) -> str:
    if isinstance(exc, ChannelError):
        return str(exc)
    return f"a frame could not be decoded ({type(exc).__name__})"


def _describe_status(status: int) -> tuple[str, str]:
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        return "exited", f"the process exited with code {code}"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name if number in \
            signal.Signals._value2member_map_ else str(number)
        reason = {"SIGXCPU": "it used up its CPU-time limit",
                  "SIGKILL": "it was killed (SIGKILL), usually for "
                             "exhausting memory",
                  "SIGSEGV": "it crashed (segmentation fault)",
                  "SIGABRT": "it aborted",
                  "SIGXFSZ": "it wrote a file over the size limit"}.get(
                      name, f"it was killed by {name}")
        return "signalled", f"the process ended because {reason}"
    return "exited", "the process ended"


def _fork(job: Job, limits: Limits, inherited: list[int]) -> _Running:
    from grader import worker

    result_r, result_w = os.pipe()
    output_r, output_w = os.pipe()
    scratch = Path(tempfile.mkdtemp(prefix="grader-scratch-"))
    plan = {"source": job.source, "filename": job.filename,
            "probes": job.probes, "protected": list(job.protected),
            "timeout": limits.timeout, "memory_mb": limits.memory_mb}
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(result_r)
        os.close(output_r)
        worker.main(plan, result_w, output_w, scratch, inherited)
    os.close(result_w)
    os.close(output_w)
    for fd in (result_r, output_r):
        os.set_blocking(fd, False)
    return _Running(job, pid, result_r, output_r, scratch, limits)


def run_jobs(jobs: list[Job], limits: Limits = Limits(),
             after_fork: Callable[[], None] | None = None
             ) -> dict[str, JobResult]:
    """Run every job in its own worker, all at once; wait for all.

    ``after_fork`` runs once every worker has been forked (the place to
    start a thread: no worker is ever forked from a threaded process).
    """
    running: list[_Running] = []
    for job in jobs:
        inherited = [fd for r in running for fd in r.open_fds]
        running.append(_fork(job, limits, inherited))
    if after_fork is not None:
        after_fork()
    selector = selectors.DefaultSelector()
    for entry in running:
        for fd in entry.open_fds:
            selector.register(fd, selectors.EVENT_READ, entry)
    active = list(running)
    try:
        while active:
            now = time.monotonic()
            wait = max(0.0, min(e.deadline for e in active) - now)
            for key, _ in selector.select(timeout=min(wait, 0.05)):
                entry: _Running = key.data
                try:
                    data = os.read(key.fd, _READ)
                except BlockingIOError:
                    continue
                if data:
                    entry.on_data(key.fd, data)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    entry.open_fds.discard(key.fd)
            for entry in list(active):
                if _poll(entry, selector):
                    active.remove(entry)
    finally:
        for entry in running:
            if entry.status is None:
                entry.kill()
                _reap(entry)
            for fd in list(entry.open_fds):
                selector.unregister(fd)
                os.close(fd)
            entry.open_fds.clear()
            shutil.rmtree(entry.scratch, ignore_errors=True)
        selector.close()
    return {entry.job.name: _finish(entry) for entry in running}


def _reap(entry: _Running) -> None:
    try:
        _, status = os.waitpid(entry.pid, 0)
        entry.status = status
    except ChildProcessError:
        entry.status = 0


def _poll(entry: _Running, selector: selectors.BaseSelector) -> bool:
    """Update one worker; True when it is done (ended and drained)."""
    if entry.status is None:
        try:
            pid, status = os.waitpid(entry.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = entry.pid, 0
        if pid:
            entry.status = status
            entry.result.seconds = time.monotonic() - entry.started
    if entry.status is None and time.monotonic() >= entry.deadline:
        entry.kill()
        _reap(entry)
        entry.result.ended = "timeout"
        entry.result.seconds = time.monotonic() - entry.started
        entry.result.detail = (f"it did not finish within "
                               f"{entry.limits.timeout:g} seconds and was "
                               f"stopped")
        _drain(entry, selector)
        return True
    if entry.status is not None:
        _drain(entry, selector)
        return True
    return False


def _drain(entry: _Running, selector: selectors.BaseSelector) -> None:
    """Read what is left in a dead worker's pipes, then close them."""
    for fd in list(entry.open_fds):
        while True:
            try:
                data = os.read(fd, _READ)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            entry.on_data(fd, data)
        selector.unregister(fd)
        os.close(fd)
        entry.open_fds.discard(fd)


def _finish(entry: _Running) -> JobResult:
    result = entry.result
    result.output = entry.output.decode("utf-8", errors="replace")
    said_done = any(m.get("type") == "done" for m in result.frames)
    if result.ended == "timeout":
        return result
    if entry.reader.leftover and result.channel_error is None:
        result.channel_error = "the channel ended in the middle of a frame"
    if said_done and entry.status is not None and os.WIFEXITED(
            entry.status) and os.WEXITSTATUS(entry.status) == 0:
        result.ended = "finished"
        return result
    result.ended, result.detail = _describe_status(entry.status or 0)
    if said_done:
        result.ended = "finished"
    return result
