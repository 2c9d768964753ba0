"""Running student code in sandboxed child processes (the parent's side).

Details: docs/internals.md, `grader.run.sandbox`.
"""
from __future__ import annotations

import os
import secrets
import selectors
import signal
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from grader.constants import GRADER_DIR, KIT_ROOT
from grader.run import forkserver
from grader.run.tempdirs import make, remove_tree
from grader.wire import (AuthenticatedReader, ChannelError, check_frame,
                         job_frame)

_READ = 65536
# What one worker may send on its result channel in all (a whole plan's
# honest frames take a few megabytes); beyond, the channel is "corrupted".
MAX_CHANNEL_BYTES = 96 * 1024 * 1024
# Bytes the submission writes to the channel cost the grading process
# nothing to skip (they are never kept), but not forever.
MAX_FOREIGN_BYTES = 1024 * 1024 * 1024
MAX_FRAMES = 20000
DRAIN_SECONDS = 2.0
# Files outside the library trees that the interpreter and torch read.
SYSTEM_READABLE = ("/usr/lib", "/usr/lib64", "/lib", "/lib64",
                   "/usr/share/zoneinfo", "/usr/share/fonts",
                   "/etc/ld.so.cache", "/etc/localtime", "/dev/urandom",
                   "/dev/null", "/dev/zero")


# A worker that a busy machine starves (it got less than STARVED of a core)
# may run past its timeout until its own CPU time reaches it, within
# WALL_FACTOR times the timeout of wall-clock time, as long as it keeps
# computing (PROGRESS of a core at least): a batch runs more workers than
# cores, and a slow but honest submission must not time out there when a
# lone grade would not. Code that waits (sleeps, blocks) is stopped at
# the timeout as before.
STARVED = 0.8
PROGRESS = 0.02
WALL_FACTOR = 4.0
# Seconds between two looks at a running worker's scratch folder.
SCRATCH_EVERY = 0.1


@dataclass(frozen=True)
class Limits:
    """What one worker may use."""

    # Seconds for the whole job: wall-clock, or the worker's own CPU time
    # when the machine starves it (STARVED, WALL_FACTOR).
    timeout: float = 20.0
    memory_mb: int = 2048           # address space beyond the parent's
    output_bytes: int = 32 * 1024   # captured stdout + stderr kept
    # What the worker may hold in its scratch folder, in all (each file
    # is also capped at 64 MB): bytes, and files and folders.
    scratch_mb: int = 128
    scratch_files: int = 10_000
    # False: no tmpfs is mounted, the parent measures the folder (as where
    # none can be mounted; for tests of that path).
    scratch_mount: bool = True

    def scratch_words(self) -> str:
        """The scratch folder's bound, as a report says it."""
        return (f"{self.scratch_mb} MB or {self.scratch_files:,} files "
                f"and folders")


@dataclass(frozen=True)
class Job:
    """A submission's source and the probes to run on it.

    ``statements`` is the shape-trace plan (every statement of the
    submission that may need a shape comment); ``forbidden`` the rubric's
    forbidden APIs, ``package`` what the worker may read of the student
    package, and ``sandbox`` its ``[sandbox]`` table (the library
    classes the worker watches and the numbers it reports of them; see
    ``grader.worker.agent``).
    """

    name: str
    source: str
    filename: str
    probes: list[dict]
    statements: list[dict] = field(default_factory=list)
    #: The declared methods whose calls bind the sizes of their input,
    #: as ``[first line, name, index]``
    #: (:func:`grader.judge.attribution.declared_calls`).
    calls: list[list] = field(default_factory=list)
    forbidden: dict[str, Any] = field(default_factory=dict)
    sandbox: dict[str, Any] = field(default_factory=dict)
    #: The files of the student package the worker may read (the graded
    #: assignment's release: :func:`sandbox_paths`); None: all of them.
    package: tuple[str, ...] | None = None


@dataclass
class JobResult:
    """Everything a worker reported, and how it ended."""

    name: str
    frames: list[dict] = field(default_factory=list)
    output: str = ""
    output_truncated: bool = False
    ended: str = "finished"  # finished | exited | signalled | timeout | disk
    detail: str = ""
    seconds: float = 0.0
    channel_error: str | None = None
    foreign_bytes: int = 0          # bytes on the channel the agent never sent
    forged_frames: int = 0          # frames with a wrong authentication code
    scratch_full: str = ""          # the scratch bound it reached, in words

    @property
    def finished(self) -> bool:
        """True when the worker ran its whole plan and said so."""
        return self.ended == "finished"


@cache
def sandbox_paths(package: tuple[str, ...] | None = None
                  ) -> dict[str, list[str]]:
    """What a worker may read: ``readable`` trees minus ``hidden`` ones,
    and the ``library_roots`` whose code counts as library code.

    Readable: the interpreter's standard library and site-packages, the
    system's shared libraries, and the student-facing package
    (``transformer_lm``). Hidden: the grader itself, the kit's reference,
    tests, examples and history, wherever they are installed; and, with
    ``package`` (the file names the graded assignment's release ships of
    the student package: :attr:`grader.plugin.Plugin.package_files`),
    every other file of the package and its compiled copies, so that
    another homework's module (which may hold a given solution) cannot be
    imported or read, as on the student's own machine.
    """
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib",
                                "platlib") if k in paths}
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        roots.add(os.path.join(prefix, "lib"))
    import site

    roots |= set(site.getsitepackages())
    roots = {os.path.realpath(r) for r in roots if os.path.isdir(r)}
    readable = set(roots) | {p for p in SYSTEM_READABLE
                             if os.path.exists(p)}
    import importlib.util

    hidden = {str(GRADER_DIR)}
    spec = importlib.util.find_spec("transformer_lm")
    if spec is not None and spec.submodule_search_locations:
        folders = {os.path.realpath(p)
                   for p in spec.submodule_search_locations}
        readable |= folders
        roots |= folders  # the student-facing package is library code
        if package is not None:
            for folder in folders:
                hidden |= unshipped(Path(folder), package)
    for name in ("solutions", "tests", "examples", "bench", "docs", ".git",
                 "assignment"):
        hidden.add(str(KIT_ROOT / name))
    return {"readable": sorted(readable), "hidden": sorted(hidden),
            "library_roots": sorted(roots)}


#: The optimisation levels whose compiled copies Python may read.
_OPTIMIZATIONS = ("", 1, 2)


def unshipped(folder: Path, shipped: tuple[str, ...]) -> set[str]:
    """The paths of ``folder`` (the student package) that are not among
    the ``shipped`` file names: every other entry, and every compiled copy
    (``__pycache__/<name>.*.pyc``) of a module not shipped, whether or not
    it exists yet (Python would load a module from its copy without ever
    opening its source)."""
    import importlib.util

    stems = {name.split(".")[0] for name in shipped}
    try:
        names = set(os.listdir(folder))
    except OSError:
        names = set()
    hidden = {str(folder / name) for name in names
              if name not in shipped and name != "__pycache__"}
    for name in names:
        if name.endswith(".py") and name not in shipped:
            for level in _OPTIMIZATIONS:
                hidden.add(importlib.util.cache_from_source(
                    str(folder / name), optimization=level))
    cache = folder / "__pycache__"
    try:
        compiled = os.listdir(cache)
    except OSError:
        compiled = []
    hidden |= {str(cache / name) for name in compiled
               if name.split(".")[0] not in stems}
    return hidden


class _Running:
    """A worker being watched."""

    def __init__(self, job: Job, handle: forkserver.WorkerHandle,
                 key: bytes, magic: bytes, scratch: Path,
                 limits: Limits) -> None:
        self.job = job
        self.handle = handle
        self.pid = handle.pid
        self.result = JobResult(job.name)
        self.reader = AuthenticatedReader(key, magic)
        self.result_fd = handle.result_fd
        self.output_fd = handle.output_fd
        self.open_fds = {self.result_fd, self.output_fd}
        self.output = bytearray()
        self.scratch = scratch
        self.started = time.monotonic()
        self.deadline = self.started + limits.timeout
        self.status: int | None = None
        self.limits = limits
        self.checked = (self.started, 0.0)  # (when, CPU seconds then)
        # How its scratch folder is watched once its hello arrives (before
        # the submission runs): "tmpfs" (bounded by construction: looked
        # at to say so) or "walk" (measured, stopped past the bound).
        self.watch = ""
        self.view = ""
        self.next_look = 0.0

    def starved_but_working(self, now: float) -> bool:
        """At the deadline: True when the worker has had less than
        STARVED of a core, is still computing, and has used less CPU time
        than its timeout; the deadline then moves to the earliest moment
        it could have used it all (see WALL_FACTOR)."""
        cpu = _cpu_seconds(self.pid)
        elapsed = now - self.started
        if cpu is None or cpu >= self.limits.timeout or \
                elapsed >= self.limits.timeout * WALL_FACTOR:
            return False
        since, cpu_then = self.checked
        if cpu < STARVED * elapsed and \
                cpu - cpu_then >= PROGRESS * (now - since):
            self.checked = (now, cpu)
            self.deadline = min(
                now + max(self.limits.timeout - cpu, 0.25),
                self.started + self.limits.timeout * WALL_FACTOR)
            return True
        return False

    def on_data(self, fd: int, data: bytes) -> None:
        if fd == self.result_fd:
            if self.result.channel_error is not None:
                return  # keep draining the pipe, discard what comes
            try:
                messages = self.reader.feed(data)
                if self.reader.authentic_bytes > MAX_CHANNEL_BYTES:
                    raise ChannelError(f"the worker sent more than "
                                       f"{MAX_CHANNEL_BYTES >> 20} MB")
                if self.reader.foreign_bytes > MAX_FOREIGN_BYTES:
                    raise ChannelError(f"the code wrote more than "
                                       f"{MAX_FOREIGN_BYTES >> 20} MB to "
                                       f"the channel")
                for message in messages:
                    problem = check_frame(message)
                    if problem:
                        raise ChannelError(f"a frame is malformed: "
                                           f"{problem}")
                    if len(self.result.frames) >= MAX_FRAMES:
                        raise ChannelError(f"the worker sent more than "
                                           f"{MAX_FRAMES} frames")
                    self.result.frames.append(message)
                    if message.get("type") == "hello" and not self.watch:
                        self.start_watch()
            except Exception as exc:  # any bytes may arrive: never crash
                self.result.channel_error = (
                    str(exc) if isinstance(exc, ChannelError) else
                    f"a frame could not be decoded "
                    f"({type(exc).__name__})")
            self.result.foreign_bytes = self.reader.foreign_bytes
            self.result.forged_frames = self.reader.forged_frames
        else:
            room = self.limits.output_bytes - len(self.output)
            if room > 0:
                self.output.extend(data[:room])
            if len(data) > max(room, 0):
                self.result.output_truncated = True

    def kill(self) -> None:
        self.handle.kill()

    def start_watch(self) -> None:
        """Choose how the scratch folder is watched: the worker's own view
        of it (through /proc, in its mount namespace) is another
        filesystem when its tmpfs is mounted."""
        self.view = f"/proc/{self.pid}/root{os.path.realpath(self.scratch)}"
        try:
            mounted = os.stat(self.view).st_dev != os.stat(
                self.scratch).st_dev
        except OSError:
            mounted = False
        self.watch = "tmpfs" if mounted else "walk"

    def scratch_problem(self) -> str:
        """What the worker's scratch folder holds past its bound, in words
        for the report ("" when within it); stops a measured worker past
        it, or whose folder cannot be measured (fails closed)."""
        words = self.limits.scratch_words()
        if self.watch == "tmpfs":
            try:
                room = os.statvfs(self.view)
            except OSError:  # it ended: the bound held without a look
                return ""
            if room.f_bavail and room.f_favail:
                return ""
            return (f"filled its scratch folder to the bound ({words}); "
                    f"what it wrote past it failed (\"No space left on "
                    f"device\")")
        used = scratch_use(self.scratch, self.limits.scratch_files)
        if used is None:
            return (f"left its scratch folder in a state the grader could "
                    f"not measure, and was stopped (the bound: {words})")
        if used[0] <= self.limits.scratch_mb * 1024 * 1024 and \
                used[1] <= self.limits.scratch_files:
            return ""
        return (f"wrote more in its scratch folder than the bound "
                f"({words}) and was stopped")


def _describe_status(status: int) -> tuple[str, str]:
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        return "exited", f"the process exited with code {code}"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name if number in \
            signal.Signals._value2member_map_ else str(number)
        reason = {"SIGXCPU": "it used up its CPU-time limit",
                  "SIGKILL": "it was killed (SIGKILL): by the system "
                             "for exhausting memory, or for running past "
                             "its CPU-time limit",
                  "SIGSEGV": "it crashed (segmentation fault)",
                  "SIGABRT": "it aborted",
                  "SIGXFSZ": "it wrote a file over the size limit"}.get(
                      name, f"it was killed by {name}")
        return "signalled", f"the process ended because {reason}"
    return "exited", "the process ended"


#: Words of a source that make the fork server import matplotlib before
#: its worker starts (a batch's server always does): a submission that
#: plots finds it loaded and its fonts listed, not built in the sandbox.
PLOTTING = ("matplotlib", "pylab")


def _start(job: Job, limits: Limits) -> _Running:
    """Ask the fork server for a worker and hand it the job."""
    key, magic = secrets.token_bytes(32), secrets.token_bytes(16)
    scratch = make("scratch-")
    plan = {"source": job.source, "filename": job.filename,
            "probes": job.probes, "statements": job.statements,
            "calls": job.calls,
            "forbidden": job.forbidden, "sandbox": job.sandbox,
            "timeout": limits.timeout,
            "memory_mb": limits.memory_mb, "scratch": str(scratch),
            "quota": [limits.scratch_mb * 1024 * 1024, limits.scratch_files]
            if limits.scratch_mount else None,
            "key": key.hex(), "magic": magic.hex(),
            **sandbox_paths(job.package)}
    handle = forkserver.spawn(job_frame(plan))
    return _Running(job, handle, key, magic, scratch, limits)


def run_jobs(jobs: list[Job], limits: Limits = Limits(),
             after_fork: Callable[[], None] | None = None
             ) -> dict[str, JobResult]:
    """Run every job in its own worker, all at once; wait for all.

    ``after_fork`` runs once every worker has been started (the place to
    start work of the grading process's own, such as flake8). The jobs
    whose workers died with their fork server (killed from outside: a
    worker cannot signal it) run once more, on the server that replaces
    it (:func:`grader.run.forkserver.spawn`): a student must not lose
    points because something killed the server.
    """
    results, lost = _run_all(jobs, limits, after_fork)
    if lost:
        again, _ = _run_all([job for job in jobs if job.name in lost],
                            limits, None)
        results.update(again)
    return results


def _run_all(jobs: list[Job], limits: Limits,
             after_fork: Callable[[], None] | None
             ) -> tuple[dict[str, JobResult], set[str]]:
    """:func:`run_jobs` once: the results, and the names of the jobs
    whose workers died with the fork server."""
    if any(name in job.source for job in jobs for name in PLOTTING):
        forkserver.warm_plotting()
    running: list[_Running] = []
    try:
        for job in jobs:
            running.append(_start(job, limits))
    except BaseException:
        for entry in running:
            entry.kill()
        raise
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
                entry = key.data
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
            entry.handle.close()
            remove_tree(entry.scratch)
        selector.close()
    return ({entry.job.name: _finish(entry) for entry in running},
            {entry.job.name for entry in running
             if entry.handle.server_gone})


def scratch_use(folder: str | Path, most: int) -> tuple[int, int] | None:
    """The bytes on disk and the entries (files, folders) under
    ``folder``, counted up to ``most`` + 1 entries; None when it cannot be
    walked (a path too long, a folder it cannot list): the caller fails
    closed. What disappears during the walk is not counted."""
    total = count = 0
    pending = [os.fspath(folder)]
    while pending:
        try:
            listing = os.scandir(pending.pop())
        except FileNotFoundError:
            continue
        except OSError:
            return None
        with listing:
            for item in listing:
                count += 1
                if count > most:
                    return total, count
                try:
                    found = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError:
                    return None
                total += getattr(found, "st_blocks", 0) * 512 or \
                    found.st_size
                if item.is_dir(follow_symlinks=False):
                    pending.append(item.path)
    return total, count


def _reap(entry: _Running) -> None:
    entry.status = entry.handle.wait(5.0)


def _poll(entry: _Running, selector: selectors.BaseSelector) -> bool:
    """Update one worker; True when it is done (ended and drained)."""
    if entry.status is None:
        status = entry.handle.poll()
        if status is not None:
            entry.status = status
            entry.result.seconds = time.monotonic() - entry.started
    now = time.monotonic()
    if entry.status is None and entry.watch and now >= entry.next_look:
        entry.next_look = now + SCRATCH_EVERY
        problem = entry.scratch_problem()
        if problem:
            entry.result.scratch_full = problem
        if problem and entry.watch == "walk":
            entry.kill()
            _reap(entry)
            entry.result.ended = "disk"
            entry.result.seconds = time.monotonic() - entry.started
            entry.result.detail = f"it {problem}"
            _drain(entry, selector)
            entry.result.detail += _phase(entry.result)
            return True
    if entry.status is None and now >= entry.deadline and \
            not entry.starved_but_working(now):
        entry.kill()
        _reap(entry)
        entry.result.seconds = time.monotonic() - entry.started
        _timed_out(entry)
        _drain(entry, selector)
        entry.result.detail += _phase(entry.result)
        return True
    if entry.status is not None:
        _drain(entry, selector)
        return True
    return False


def _timed_out(entry: _Running) -> None:
    """Mark the worker as stopped at its timeout. The same words whether
    the grader's deadline stopped it, a busy machine extended that
    deadline, or, past the deadline, the kernel's CPU-time limit (the
    timeout's, a second later: ``agent._apply_limits``) fired first
    while the grader waited for a core: a report does not depend on the
    machine's load."""
    entry.result.ended = "timeout"
    entry.result.detail = (f"it did not finish within "
                           f"{entry.limits.timeout:g} seconds and was "
                           f"stopped")


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time (user and system, every thread) process ``pid`` has
    used so far, from /proc; None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf(
            "SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _drain(entry: _Running, selector: selectors.BaseSelector) -> None:
    """Read what is left in a dead worker's pipes, then close them.

    Bounded in time: a process the worker left behind (which the kernel
    layers forbid, but they may be missing) could keep a pipe open and
    write forever.
    """
    until = time.monotonic() + DRAIN_SECONDS
    for fd in list(entry.open_fds):
        while time.monotonic() < until:
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


def _phase(result: JobResult) -> str:
    """Where the worker was when it stopped, when it matters: loading."""
    if any(m.get("type") == "import" for m in result.frames):
        return ""
    return " while loading the submission (its module-level code)"


def _finish(entry: _Running) -> JobResult:
    """How the worker ended. Only the exit status is trusted: the frames
    (a "done" among them) may have been written by the student's code."""
    result = entry.result
    result.output = entry.output.decode("utf-8", errors="replace")
    if result.ended in ("timeout", "disk"):
        return result
    if entry.reader.leftover and result.channel_error is None:
        result.channel_error = "the channel ended in the middle of a frame"
    said_done = any(m.get("type") == "done" for m in result.frames)
    status = entry.status or 0
    clean = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    if clean and (said_done or result.channel_error is not None):
        # It ran to the end; on a corrupted channel its "done" was lost.
        result.ended = "finished"
        return result
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU \
            and result.seconds >= entry.limits.timeout:
        _timed_out(entry)  # past its deadline: the grader was late
    else:
        result.ended, result.detail = _describe_status(status)
    result.detail += _phase(result)
    return result
