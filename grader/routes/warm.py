"""Warm commands: a listening process that has imported the grader (torch
and every plug-in) forks each ``python -m grader`` that names it, so a
command costs a fork instead of an interpreter that imports torch.

Details: docs/internals.md, `grader.routes.warm`.
"""
from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from typing import Any, NoReturn

from grader.errors import GraderError
from grader.run import forkserver

#: The path of a listening command server (``python -m grader.routes.warm
#: --listen PATH``) that ``python -m grader`` hands its run to, when the
#: server is this kit's and this interpreter's, started the same way
#: (:func:`identity`); otherwise the command runs in its own process.
ADDRESS = "GRADER_COMMAND_SERVER"
#: The signals a client passes on to the command it handed its run to.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2)
#: A request's largest size (argv, environment, import path).
MAX_REQUEST = 1 << 20
_READY = b"ready"
START_SECONDS = 120.0
# The fork server this command server started, and its address.
_WORKERS: list[tuple[subprocess.Popen, str]] = []


class WarmServerError(GraderError, RuntimeError):
    """The command server could not be started."""


def identity() -> bytes:
    """What a command forked by the server depends on beyond the fork
    server's :func:`grader.run.forkserver.identity` (the interpreter,
    the import path, the kit's files): what the interpreter fixed when it
    started (its flags, ``-W`` and ``-X`` options, the hash seed)."""
    extra = repr((tuple(sys.flags), sys.warnoptions,
                  sorted(sys._xoptions.items()),
                  os.environ.get("PYTHONHASHSEED", "")))
    return forkserver.identity() + b"-" + \
        hashlib.sha256(extra.encode()).hexdigest()[:16].encode()


# --------------------------------------------------------------------------
# The client: ``python -m grader`` with GRADER_COMMAND_SERVER set


def _streams() -> list[dict[str, Any]] | None:
    """How this interpreter set up stdin, stdout and stderr (None when one
    is closed or not a plain text stream: the command then runs here)."""
    found = []
    for stream, fd in ((sys.stdin, 0), (sys.stdout, 1), (sys.stderr, 2)):
        try:
            os.fstat(fd)
        except OSError:
            return None
        if not isinstance(stream, io.TextIOWrapper):
            return None
        found.append({"encoding": stream.encoding, "errors": stream.errors,
                      "line_buffering": stream.line_buffering,
                      "write_through": stream.write_through,
                      "raw": isinstance(stream.buffer, io.FileIO)})
    return found


def _request() -> dict[str, Any] | None:
    """Everything of this process a command's run depends on."""
    streams = _streams()
    try:
        folder = os.getcwd()
    except OSError:
        return None
    if streams is None:
        return None
    mask = os.umask(0)
    os.umask(mask)
    limits = {name: resource.getrlimit(getattr(resource, name))
              for name in dir(resource) if name.startswith("RLIMIT_")}
    # What a process inherits across exec besides: the signals it
    # ignores (before this client installs its own handlers) and blocks.
    ignored = [int(number) for number in signal.valid_signals()
               if signal.getsignal(number) is signal.SIG_IGN]
    blocked = [int(number) for number in
               signal.pthread_sigmask(signal.SIG_BLOCK, [])]
    return {"argv": sys.argv, "folder": folder,
            "environment": dict(os.environ), "path": sys.path,
            "umask": mask, "limits": limits, "streams": streams,
            "ignored": ignored, "blocked": blocked}


def delegate(address: str) -> int | None:
    """Hand this command's run to the command server at ``address`` and
    return its exit status (a command killed by a signal kills this
    process with the same signal). None when the server is gone, foreign
    or refuses: the command then runs in this process, as without a
    server."""
    request = _request()
    if request is None:
        return None
    data = json.dumps(request).encode()
    if len(data) > MAX_REQUEST:
        return None
    # From the first byte sent, the signals this process gets are the
    # command's: kept until its pid is known, then passed on.
    target: list[int] = []
    pending: list[int] = []

    def forward(number: int, _: Any) -> None:
        if target:
            _forward(target[0], number)
        else:
            pending.append(number)

    previous = {number: signal.signal(number, forward)
                for number in FORWARDED}
    pid = _hand_over(address, data)
    if pid is None:
        # The command runs here: the signals are its own again, and
        # those that came meanwhile are delivered now.
        for number, handler in previous.items():
            signal.signal(number, handler)
        for waiting in pending:
            os.kill(os.getpid(), waiting)
        return None
    connection, command = pid
    target.append(command)
    for waiting in pending:
        _forward(command, waiting)
    while True:
        try:
            answer = connection.recv(64).split()
            break
        except InterruptedError:
            continue
    connection.close()
    if len(answer) != 2 or answer[0] != b"status":
        # The server died before the command ended: it ends too.
        forkserver.kill_group(command)
        sys.stderr.write("python -m grader: the command server ended "
                         "while the command ran\n")
        return 70
    return _status(int(answer[1]))


def _hand_over(address: str, data: bytes
               ) -> tuple[socket.socket, int] | None:
    """Send the request and the standard streams to the server at
    ``address``; the connection and the command's pid, or None when the
    server is gone, foreign or answers ``cold``."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        connection.settimeout(START_SECONDS)
        connection.connect(address)
        words = connection.recv(256).split()
        if len(words) != 3 or words[0] != _READY or words[2] != identity():
            connection.close()
            return None
        socket.send_fds(connection, [data], [0, 1, 2])
        answer = connection.recv(64).split()
        if len(answer) != 2 or answer[0] != b"pid":
            connection.close()
            return None
        connection.settimeout(None)
        return connection, int(answer[1])
    except (OSError, ValueError):
        connection.close()
        return None


def _forward(pid: int, number: int) -> None:
    """Pass a signal this process got on to the command."""
    try:
        os.kill(pid, number)
    except OSError:
        pass


def _status(wait_status: int) -> int:
    """The exit status of the command; a command a signal killed kills
    this process with the same signal (its parent sees what it would
    have seen)."""
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return 128 + number
    return os.waitstatus_to_exitcode(wait_status)


# --------------------------------------------------------------------------
# The server


def _warm() -> None:
    """Import what every command imports at its start: the command line,
    the plug-in API (torch, numpy, pytest) and every plug-in; and what a
    batch imports for its pictures (matplotlib, PIL), which reads no
    setting until a picture is drawn. Nothing is prepared or cached
    beyond the modules: a command's caches start empty
    (:func:`_become`)."""
    gc.disable()
    try:
        import matplotlib  # noqa: F401 - imported to be warm
        import matplotlib.font_manager  # noqa: F401
        import PIL.Image
        import PIL.ImageDraw  # noqa: F401

        import grader.output.figures  # noqa: F401
        import grader.shapes.tensor_facts  # noqa: F401
        from grader.plugin import plugins
        from grader.routes import cli  # noqa: F401

        plugins()
    finally:
        gc.freeze()
        gc.enable()


def _refusal(request: dict[str, Any]) -> str | None:
    """Why this server cannot run ``request`` as its own process would
    (None when it can): a resource limit it cannot lower to."""
    for name, wanted in request["limits"].items():
        number = getattr(resource, name, None)
        if number is None:
            continue
        hard = resource.getrlimit(number)[1]
        if not _within(wanted[1], hard) or not _within(wanted[0], hard):
            return f"{name} above this server's"
    return None


def _within(value: int, hard: int) -> bool:
    return hard == resource.RLIM_INFINITY or (
        value != resource.RLIM_INFINITY and value <= hard)


def _stream(fd: int, spec: dict[str, Any], reading: bool) -> io.TextIOWrapper:
    """A standard stream as the client's interpreter made it."""
    mode = "rb" if reading else "wb"
    buffered = -1 if reading or not spec["raw"] else 0
    binary = io.open(fd, mode, buffering=buffered, closefd=False)
    return io.TextIOWrapper(binary, encoding=spec["encoding"],
                            errors=spec["errors"], newline="\n",
                            line_buffering=spec["line_buffering"],
                            write_through=spec["write_through"])


def _become(request: dict[str, Any], fds: list[int],
            private: list[int], sockets: list[socket.socket]) -> None:
    """Turn this fork of the server into the client's command: its own
    process group, the client's streams, folder, umask, limits,
    environment, import path and argv; the server's descriptors closed,
    its exit handlers and signal handlers gone, the plug-ins' caches
    emptied (each command reads its rubric and catalog files again)."""
    import atexit
    import tempfile

    os.setpgid(0, 0)
    signal.set_wakeup_fd(-1)
    _dispose(set(request["ignored"]), request["blocked"])
    # The server's sockets are let go of without closing their numbers
    # twice (a socket object that dies later would close whatever file
    # reuses its number).
    for fd in [*private, *(each.detach() for each in sockets)]:
        try:
            os.close(fd)
        except OSError:
            pass
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["folder"])
    os.umask(request["umask"])
    for name, (soft, hard) in request["limits"].items():
        number = getattr(resource, name, None)
        if number is not None and (soft, hard) != resource.getrlimit(number):
            resource.setrlimit(number, (soft, hard))
    os.environ.clear()
    os.environ.update(request["environment"])
    if _WORKERS and not os.environ.get(forkserver.SHARED_ADDRESS):
        # A command that names no fork server of its own forks its
        # workers from the one this server started.
        os.environ[forkserver.SHARED_ADDRESS] = _WORKERS[0][1]
    sys.path[:] = request["path"]
    sys.argv[:] = request["argv"]
    tempfile.tempdir = None
    streams = request["streams"]
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        stream = _stream(fd, streams[fd], fd == 0)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    atexit._clear()
    from grader import plugin, rubric

    for cached in (plugin._load, plugin._rubric, plugin._catalog,
                   rubric.assignments):
        cached.cache_clear()


def _dispose(ignored: set[int], blocked: list[int]) -> None:
    """Every signal as the client's interpreter has it at its start:
    ignored where it was ignored, otherwise the default (SIGINT: the
    interpreter's KeyboardInterrupt); blocked where it was blocked."""
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        handler: Any = signal.SIG_DFL
        if number in ignored:
            handler = signal.SIG_IGN
        elif number == signal.SIGINT:
            handler = signal.default_int_handler
        try:
            signal.signal(number, handler)
        except (OSError, ValueError):
            pass  # one the platform does not let a process set
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _run_command() -> NoReturn:
    """The command, then the end a ``python -m grader`` process has
    (grader/__main__.py): its exit handlers, its output flushed, its
    status; an uncaught exception or interrupt ends it as the
    interpreter would."""
    import atexit
    import threading
    import traceback

    from grader.routes.cli import main

    interrupted = False
    try:
        status: Any = main()
    except SystemExit as exc:
        status = exc.code
    except KeyboardInterrupt:
        # As the interpreter ends on an uncaught interrupt: the traceback,
        # the exit handlers (a run's temporary folders go), then death by
        # SIGINT.
        traceback.print_exc()
        interrupted, status = True, 130
    except BaseException:  # noqa: BLE001 - printed as the interpreter does
        traceback.print_exc()
        status = 1
    if status is not None and not isinstance(status, int):
        sys.stderr.write(f"{status}\n")
        status = 1
    if threading.active_count() > 1:
        threading._shutdown()  # type: ignore[attr-defined]
    # The end finish() gives a command's own process once it is alone
    # (daemon threads may still run here): the exit handlers, the output
    # flushed, the status, without the interpreter's teardown.
    atexit._run_exitfuncs()
    _flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status or 0)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _spawn(request: dict[str, Any], fds: list[int], private: list[int],
           sockets: list[socket.socket]) -> int | None:
    """Fork the command; its pid (None when it could not be forked)."""
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:
        try:
            _become(request, fds, private, sockets)
            _run_command()
        except BaseException:  # noqa: BLE001 - nothing escapes a fork
            try:
                import traceback

                traceback.print_exc()
                _flush()
            finally:
                os._exit(70)
    return pid


def serve(listener: socket.socket, greeting: bytes) -> None:
    """The server's loop: a command per connection; a client that hangs
    up before its command ended takes the command's process group with
    it; each ended command's wait status goes to its client."""
    from grader.worker.confine import die_with_parent

    die_with_parent(os.getppid())
    wake_r, wake_w = forkserver.child_wakeups()
    listener.setblocking(False)
    connections: dict[int, socket.socket] = {}
    running: dict[int, int] = {}   # connection fd -> the command's pid
    while True:
        ready = forkserver.wait_woken(
            [listener.fileno(), wake_r, *connections], wake_r)
        _reap(connections, running)
        if listener.fileno() in ready:
            forkserver.greet(listener, greeting, connections)
        for fd in [fd for fd in ready if fd in connections]:
            _answer(fd, connections, running, listener, (wake_r, wake_w))


def _answer(fd: int, connections: dict[int, socket.socket],
            running: dict[int, int], listener: socket.socket,
            wake: tuple[int, int]) -> None:
    """Read a client's request and fork its command, or, when the client
    hung up, end what it left running."""
    connection = connections[fd]
    try:
        data, fds, _, _ = socket.recv_fds(connection, MAX_REQUEST, 3)
    except OSError:
        data, fds = b"", []
    if not data:
        for extra in fds:
            os.close(extra)
        pid = running.pop(fd, None)
        if pid is not None:
            forkserver.kill_group(pid)
        connections.pop(fd).close()
        return
    if fd in running or len(fds) != 3:
        for extra in fds:
            os.close(extra)
        return
    try:
        request = json.loads(data)
        refusal = _refusal(request)
    except (ValueError, KeyError, TypeError, AttributeError):
        refusal = "an unreadable request"
    pid = None
    if refusal is None:
        pid = _spawn(request, fds, list(wake),
                     [listener, *connections.values()])
    for extra in fds:
        os.close(extra)
    try:
        if pid is None:
            connection.send(b"cold " + (refusal or "no fork").encode()[:50])
        else:
            connection.send(b"pid %d" % pid)
            running[fd] = pid
    except OSError:
        if pid is not None:
            forkserver.kill_group(pid)
            running[fd] = pid


def _reap(connections: dict[int, socket.socket],
          running: dict[int, int]) -> None:
    """Collect ended commands; send each client its command's status."""
    for pid, status in forkserver.ended_children():
        for fd, command in list(running.items()):
            if command != pid:
                continue
            del running[fd]
            connection = connections.pop(fd)
            try:
                connection.send(b"status %d" % status)
            except OSError:
                pass
            connection.close()


def listen(address: str) -> subprocess.Popen:
    """Start a listening command server at ``address`` (a socket path in
    a private folder) with this process's environment; returns once it
    answers. It runs until the calling process ends or kills it; set
    ``GRADER_COMMAND_SERVER`` to ``address`` in the commands'
    environment (tests/kit/conftest.py runs one per test session)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "grader.routes.warm", address],
        stdin=subprocess.DEVNULL, cwd="/", close_fds=True)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise WarmServerError("the command server ended while starting")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            probe.connect(address)
            if probe.recv(256).startswith(_READY):
                return process
        except OSError:
            time.sleep(0.1)
        finally:
            probe.close()
    process.kill()
    raise WarmServerError(f"the command server at {address} did not start "
                          f"within {START_SECONDS:g} s")


USAGE = """usage: python -m grader.routes.warm PATH

Start a command server listening at PATH (a Unix socket; put it in a
folder only you can enter) and serve until killed. Every python -m grader
whose environment has GRADER_COMMAND_SERVER=PATH runs in a fork of it;
one that names no fork server (GRADER_FORK_SERVER) forks its workers from
the server's own, listening at PATH-workers.
"""


def _main(arguments: list[str]) -> None:
    """``PATH``: warm up, then listen at PATH, greeting each client with
    this process's pid and identity (what its forks inherit)."""
    if len(arguments) != 1 or arguments[0].startswith("-"):
        sys.stderr.write(USAGE)
        sys.stderr.flush()
        os._exit(0 if arguments[:1] in (["-h"], ["--help"]) else 2)
    _warm()
    # A fork server of this server's own (it ends with this process),
    # beside its socket: a command whose environment names none forks
    # its workers from it instead of starting one.
    workers = arguments[0] + "-workers"
    try:
        _WORKERS.append((forkserver.listen(workers), workers))
    except forkserver.ForkServerError:
        pass  # each command starts its own, as without this server
    greeting = b" ".join([_READY, str(os.getpid()).encode(), identity()])
    serve(forkserver.listening(arguments[0]), greeting)


if __name__ == "__main__":
    forkserver.run_server(_main)
