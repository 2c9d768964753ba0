"""Clean worker processes: a fork server that holds nothing of a grading.

Details: docs/internals.md, `grader.run.forkserver`.
"""
from __future__ import annotations

import errno
import gc
import hashlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

from grader.constants import GRADER_DIR, KIT_ROOT
from grader.errors import GraderError

# Modules the server imports once, so that every worker starts warm.
# A worker's own imports are among them (faulthandler, resource): a worker
# that loads no module before the submission runs takes the server's
# walks of the loaded modules (``agent._indexed``).
PRELOAD = ("torch", "numpy", "grader.worker.agent", "grader.worker.confine",
           "grader.wire", "faulthandler", "resource")
# What the server's environment keeps (the grader's own, e.g. GRADER_SEED,
# never reaches it).
KEPT_ENVIRONMENT = ("PATH", "LANG", "LANGUAGE", "TZ", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
                    "PYTHONHASHSEED")
_PID = struct.Struct(">q")
_STATUS = struct.Struct(">i")
_READY = b"ready"
# The one other request a client may make: warm matplotlib (it holds no
# data of a grading).
_WARM = b"warm"
START_SECONDS = 120.0
KILL_SIGNAL = signal.SIGKILL
#: The path of a listening fork server (``python -m grader.run.forkserver
#: --listen PATH``) that this command uses instead of starting its own,
#: when the server runs the same Python and the same kit (its identity);
#: otherwise, or when it is gone, the command starts its own as usual.
SHARED_ADDRESS = "GRADER_FORK_SERVER"


class ForkServerError(GraderError, RuntimeError):
    """The fork server could not be started or asked for a worker."""


def identity() -> bytes:
    """What a worker forked by a server depends on: the interpreter, the
    import path, and every file of the kit's grader (name, size, time).
    A client uses a listening server only when this is its own."""
    digest = hashlib.sha256()
    digest.update(os.fsencode(sys.executable))
    digest.update(os.fsencode(os.pathsep.join(_import_path())))
    for path in sorted(GRADER_DIR.rglob("*")):
        if path.suffix in (".py", ".toml", ".cfg"):
            status = path.stat()
            digest.update(os.fsencode(str(path)))
            digest.update(b"%d %d" % (status.st_size, status.st_mtime_ns))
    return digest.hexdigest().encode()


def _import_path() -> list[str]:
    """The folders a server's workers import from, before the
    interpreter's own: the kit, then this process's PYTHONPATH (see
    :func:`_server_environment`), each once. So a command run with the
    kit on PYTHONPATH and one run without it share a server: their
    workers would import the same files."""
    pythonpath = os.environ.get("PYTHONPATH")
    entries = [str(KIT_ROOT),
               *(pythonpath.split(os.pathsep) if pythonpath else [])]
    found: dict[str, None] = {}
    for entry in entries:
        if entry:  # an empty entry means the working folder: not the kit's
            found.setdefault(os.path.realpath(entry), None)
        else:
            found.setdefault(entry, None)
    return list(found)


def _server_environment() -> dict[str, str]:
    """A fork server's environment: only what KEPT_ENVIRONMENT names (and
    the locale), the kit first on the import path, one thread, Agg."""
    environment = {k: v for k, v in os.environ.items()
                   if k in KEPT_ENVIRONMENT or k.startswith("LC_")}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(KIT_ROOT)]
        + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH")
           else []))
    environment.setdefault("OMP_NUM_THREADS", "1")
    environment.setdefault("MKL_NUM_THREADS", "1")
    environment["MPLBACKEND"] = "Agg"
    return environment


def kill_group(pid: int, sig: int = KILL_SIGNAL) -> None:
    """Kill a process and its process group (a worker leads its own)."""
    for target in (lambda: os.killpg(pid, sig), lambda: os.kill(pid, sig)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


class WorkerHandle:
    """A worker the server forked for this process: its pipes and pid."""

    def __init__(self, pid: int, result_fd: int, output_fd: int,
                 status_fd: int) -> None:
        """Keep the worker's pid and the read ends of its pipes."""
        self.pid = pid
        self.result_fd = result_fd
        self.output_fd = output_fd
        self.status_fd = status_fd
        self.status: int | None = None
        # True when the server died before it could report the status:
        # the worker died with it, whatever its code did.
        self.server_gone = False

    def kill(self) -> None:
        """SIGKILL the worker's whole process group."""
        kill_group(self.pid)

    def poll(self, timeout: float = 0.0) -> int | None:
        """The worker's wait status once the server reaped it, else None."""
        if self.status is not None:
            return self.status
        ready, _, _ = select.select([self.status_fd], [], [], timeout)
        if not ready:
            return None
        data = _read_exactly(self.status_fd, _STATUS.size)
        # No status (the server died): the worker died with it.
        self.server_gone = data is None
        self.status = (_STATUS.unpack(data)[0] if data is not None
                       else signal.SIGKILL)
        os.close(self.status_fd)
        self.status_fd = -1
        return self.status

    def wait(self, timeout: float) -> int:
        """Wait for the status (killing the worker when it takes too long)."""
        status = self.poll(timeout)
        if status is None:
            self.kill()
            status = self.poll(timeout)
        return status if status is not None else signal.SIGKILL

    def close(self) -> None:
        """Close what is still open of the status pipe."""
        if self.status_fd >= 0:
            os.close(self.status_fd)
            self.status_fd = -1


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        try:
            chunk = os.read(fd, size - len(data))
        except InterruptedError:
            continue
        if not chunk:
            return None
        data += chunk
    return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def ended_children() -> Iterator[tuple[int, int]]:
    """``(pid, wait status)`` of each child of this process that has
    ended, reaped as it is given."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def child_wakeups() -> tuple[int, int]:
    """A pipe CPython writes to whenever a signal (SIGCHLD: a child
    ended) arrives, both ends non-blocking, so that :func:`wait_woken`
    wakes for it: ``(read end, write end)``."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return wake_r, wake_w


def wait_woken(waiting: list[int], wake_r: int,
               timeout: float = 1.0) -> list[int]:
    """The descriptors of ``waiting`` ready within ``timeout`` (``wake_r``
    among them when a signal came: the pipe is emptied)."""
    try:
        ready, _, _ = select.select(waiting, [], [], timeout)
    except InterruptedError:
        return []
    if wake_r in ready:
        try:
            while os.read(wake_r, 512):
                pass
        except BlockingIOError:
            pass
    return ready


class ForkServer:
    """The client: start the server, ask it for workers.

    One server per grading command (see :func:`shared`): processes forked
    from the one that started it (a batch's judges) share it; each asks
    over the same socket (one message per request, which a ``SEQPACKET``
    socket never interleaves) and gets its answers on pipes of its own.
    """

    def __init__(self, address: str | None = None) -> None:
        """Start the server process (it warms up in the background), or,
        given a listening server's ``address``, connect to it and check
        that it forks workers of this kit (:func:`identity`)."""
        self.owner = os.getpid()            # the process that started it
        self.plotting = False              # asked to warm matplotlib
        self._alive: dict[int, int] = {}   # client pid -> alive pipe read
        self._lock = threading.Lock()
        self._ready = False
        self.process: subprocess.Popen | None = None
        if address is not None:
            self._connect(address)
            return
        parent_end, server_end = socket.socketpair(socket.AF_UNIX,
                                                   socket.SOCK_SEQPACKET)
        environment = _server_environment()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "grader.run.forkserver",
                 str(server_end.fileno())],
                pass_fds=[server_end.fileno()], env=environment,
                stdin=subprocess.DEVNULL, cwd="/", close_fds=True)
        except OSError as exc:
            raise ForkServerError(f"cannot start the fork server: "
                                  f"{exc}") from exc
        server_end.close()
        self.socket = parent_end
        self.pid = self.process.pid

    def _connect(self, address: str) -> None:
        """Use the listening server at ``address`` (it answers at once
        with its pid and identity)."""
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.socket.connect(address)
            self.socket.settimeout(START_SECONDS)
            message = self.socket.recv(256)
        except OSError as exc:
            self.socket.close()
            raise ForkServerError(f"no fork server at {address}: "
                                  f"{exc}") from exc
        finally:
            if self.socket.fileno() >= 0:
                self.socket.settimeout(None)
        words = message.split()
        if len(words) != 3 or words[0] != _READY or words[2] != identity():
            self.socket.close()
            raise ForkServerError(f"the fork server at {address} forks "
                                  "another kit's workers")
        self.pid = int(words[1])
        self._ready = True

    def alive(self) -> bool:
        """Whether the server still serves.

        Only the process that started it can wait for it: in a process
        forked from that one (a batch's judge), ``Popen.poll`` meets
        ECHILD and calls a running server ended, and every judge would
        start a server of its own. There, a server that ended is told by
        its end of the socket, which hangs up.
        """
        if os.getpid() == self.owner and self.process is not None:
            return self.process.poll() is None
        poller = select.poll()
        poller.register(self.socket, select.POLLHUP)
        return not any(events & (select.POLLHUP | select.POLLERR |
                                 select.POLLNVAL)
                       for _, events in poller.poll(0))

    def wait_ready(self) -> None:
        """Wait until the server has warmed up (at most START_SECONDS).

        A process that forks clients (a batch's coordinator) waits first,
        so that the server's one "ready" message is read by it and not
        by one of its clients while the others wait for it.
        """
        self._wait_ready()

    def _wait_ready(self) -> None:
        if self._ready:
            return
        deadline = time.monotonic() + START_SECONDS
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.socket], [], [], max(left, 0))
            if not ready:
                raise ForkServerError("the fork server did not start within "
                                      f"{START_SECONDS:g} s")
            message = self.socket.recv(64)
            if message == _READY:
                self._ready = True
                return
            if not message:
                raise ForkServerError("the fork server ended while "
                                      "starting (is torch installed?)")

    def _alive_fd(self) -> int:
        """The read end of a pipe only this process writes: when this
        process dies, the server kills the workers it asked for."""
        pid = os.getpid()
        if pid not in self._alive:
            read_end, write_end = os.pipe()
            self._alive[pid] = read_end
            # The write end stays open for this process's lifetime.
            self._alive_write = write_end
        return self._alive[pid]

    def spawn(self, job: bytes) -> WorkerHandle:
        """Fork a worker that reads ``job`` (a :func:`grader.wire.job_frame`);
        return its handle."""
        with self._lock:
            self._wait_ready()
            job_r, job_w = os.pipe()
            result_r, result_w = os.pipe()
            output_r, output_w = os.pipe()
            status_r, status_w = os.pipe()
            fds = [job_r, result_w, output_w, status_w, self._alive_fd()]
            try:
                socket.send_fds(self.socket, [b"spawn"], fds)
            except OSError as exc:
                for fd in (job_r, job_w, result_r, result_w, output_r,
                           output_w, status_r, status_w):
                    os.close(fd)
                raise ForkServerError(f"the fork server is gone: "
                                      f"{exc}") from exc
            for fd in (job_r, result_w, output_w, status_w):
                os.close(fd)
            data = _read_exactly(status_r, _PID.size)
            if data is None:
                for fd in (job_w, result_r, output_r, status_r):
                    os.close(fd)
                raise ForkServerError("the fork server could not fork a "
                                      "worker")
            pid = _PID.unpack(data)[0]
        try:
            _write_all(job_w, job)
        except OSError:
            pass  # the worker died before reading: its status says how
        finally:
            os.close(job_w)
        for fd in (result_r, output_r):
            os.set_blocking(fd, False)
        return WorkerHandle(pid, result_r, output_r, status_r)

    def warm_plotting(self) -> None:
        """Ask the server to import matplotlib before it forks the next
        worker (once per server; a request carries no data)."""
        with self._lock:
            if self.plotting:
                return
            try:
                self.socket.send(_WARM)
                self.plotting = True
            except OSError:
                pass  # a server that is gone is replaced at the next spawn

    def close(self) -> None:
        """Stop the server (its workers are killed with it); a shared
        server is only let go (its owner stops it)."""
        try:
            self.socket.close()
        except OSError:
            pass
        if self.process is None:
            return
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_SHARED: ForkServer | None = None
# Addresses of listening servers this process found gone or foreign.
_REFUSED: set[str] = set()


def shared() -> ForkServer:
    """The fork server of this grading command, started on first use (or
    the listening server ``GRADER_FORK_SERVER`` names, when it is this
    kit's: see :data:`SHARED_ADDRESS`).

    Start it early (:func:`start`) so that it imports torch while the
    grading process does its own work.
    """
    global _SHARED
    if _SHARED is None or not _SHARED.alive():
        _SHARED = None
        address = os.environ.get(SHARED_ADDRESS)
        if address and address not in _REFUSED:
            try:
                _SHARED = ForkServer(address)
            except ForkServerError:
                _REFUSED.add(address)
        if _SHARED is None:
            _SHARED = ForkServer()
    return _SHARED


def spawn(job: bytes) -> WorkerHandle:
    """Fork a worker from the shared server. A server that is gone (killed
    from outside, or ended) is replaced once, here: a batch's judges share
    the coordinator's server, and a student must not lose a grade because
    something killed it."""
    global _SHARED
    try:
        return shared().spawn(job)
    except ForkServerError:
        if _SHARED is not None and _SHARED.process is None:
            _REFUSED.add(os.environ.get(SHARED_ADDRESS, ""))
        _SHARED = None
        return shared().spawn(job)


def start() -> None:
    """Start the shared fork server now (it warms up in the background)."""
    try:
        shared()
    except ForkServerError:
        pass  # reported when a worker is asked for


def warm_plotting() -> None:
    """Ask the shared fork server to import matplotlib (see
    :meth:`ForkServer.warm_plotting`)."""
    try:
        shared().warm_plotting()
    except ForkServerError:
        pass  # reported when a worker is asked for


def stop() -> None:
    """Stop the shared fork server, if this process started one (its
    workers are killed with it); the next :func:`shared` starts another."""
    global _SHARED
    server, _SHARED = _SHARED, None
    if server is not None and server.owner == os.getpid():
        server.close()


# --------------------------------------------------------------------------
# The server process (no classes, no grading data)


def _receive(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    try:
        message, fds, _, _ = socket.recv_fds(sock, 64, 8)
    except InterruptedError:
        return b"", []
    if not message and not fds:
        return None
    return message, list(fds)


def _spawn(fds: list[int], children: dict[int, tuple[int, int]],
           private: list[int]) -> None:
    """Fork one worker on the received descriptors.

    ``children`` maps each worker's pid to its status pipe and its client's
    alive pipe; ``private`` lists the server's own descriptors (its
    sockets, its wake-up pipe), which a worker closes at once.
    """
    if len(fds) != 5:
        for fd in fds:
            os.close(fd)
        return
    job_r, result_w, output_w, status_w, alive_r = fds
    pid = os.fork()
    if pid == 0:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in [status_w, alive_r, *private,
                       *(fd for entry in children.values() for fd in entry)]:
                try:
                    os.close(fd)
                except OSError:
                    pass
            from grader.worker import agent

            agent.main(job_r, result_w, output_w, os.getppid())
        finally:
            os._exit(70)
    for fd in (job_r, result_w, output_w):
        os.close(fd)
    try:
        _write_all(status_w, _PID.pack(pid))
    except OSError:
        pass
    children[pid] = (status_w, alive_r)


def _reap(children: dict[int, tuple[int, int]]) -> None:
    """Collect ended workers; send each client its worker's status."""
    for pid, status in ended_children():
        entry = children.pop(pid, None)
        if entry is None:
            continue
        status_w, alive_r = entry
        try:
            _write_all(status_w, _STATUS.pack(status))
        except OSError:
            pass
        os.close(status_w)
        os.close(alive_r)


def _warm_up() -> None:
    """Run torch's usual operations once, so that what they initialise
    lazily (CPU detection, kernels) is done here, not in a confined
    worker that may not read /proc (matplotlib's fonts: _warm_plotting)."""
    import torch

    torch.set_num_threads(1)
    # The operations one by one, on unrelated values: nothing shipped
    # spells out an attention computation (docs/threat-model.md, 10).
    x = torch.randn(2, 3, 4)
    product = torch.nn.Linear(4, 4)(x) @ torch.randn(2, 4, 3) / 2.0
    upper = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)
    filled = torch.randn(3, 3).masked_fill(upper, float("-inf"))
    exps = torch.randn(2, 3, 3).exp()
    normalised = exps / exps.sum(dim=0, keepdim=True)
    torch.nn.functional.dropout(normalised, 0.5, training=True)
    torch.nn.functional.cross_entropy(torch.randn(4, 5),
                                      torch.tensor([0, 1, 2, 3]))
    product.view(-1).reshape(2, 9).permute(1, 0).contiguous().sum().item()
    filled.exp().sum().item()
    # torch.vmap registers its decompositions at its first call, through a
    # torch.library.Library, whose constructor looks up its caller's frame
    # (sys._getframe): a worker refuses that to a submission's call
    # (docs/threat-model.md, principle 1, "Torch's lazy state is built
    # before the seal"), so it is built here, once.
    torch.vmap(torch.exp)(exps)
    # The interpreter's extension folder, which every worker's audit hook
    # reads (grader.worker.agent._interpreter_natives): sysconfig imports
    # its build data at the first question (a module, a file read and a
    # dict of a thousand entries, in each worker); asked here, workers
    # find the answer cached, and the same modules loaded.
    import sysconfig

    sysconfig.get_config_var("DESTSHARED")


def _warm_plotting() -> None:
    """Import matplotlib and build its font list, once asked (``warm``):
    a third of the server's start-up, which a grade whose submission
    never names matplotlib does not wait for (docs/internals.md)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot

        figure = pyplot.figure()
        pyplot.close(figure)
    except Exception:  # matplotlib is optional for workers
        pass


def _warm_server() -> None:
    """What every worker starts with: torch, the agent, the tripwires'
    preparation, the forbidden operators' tripwires and the alias
    index. The collector pauses until everything is frozen (the imports
    make no garbage worth the tenth of their CPU its collections cost)."""
    gc.disable()
    for name in PRELOAD:
        __import__(name)
    _warm_up()
    from grader.rubric import assignments
    from grader.worker import agent

    patterns = set()
    for assignment in assignments():
        agent.prepare(assignment.forbidden)
        patterns.add(assignment.forbidden.get("aten"))
    # The forbidden operators' tripwires, registered once for every
    # worker when every assignment forbids the same (a worker of other
    # rules removes them and registers its own).
    if len(patterns) == 1 and (pattern := patterns.pop()):
        agent.preinstall_aten(pattern)
    agent.index_aliases(agent.KIT_PACKAGES)
    agent.index_loaded_files()
    _freeze()


def _freeze() -> None:
    """Move every object the server holds now out of the collector's
    sight: a worker's collections then walk only what it made (its first,
    before the submission runs, frees the set-up's garbage in
    milliseconds instead of walking torch's heap), and let the collector
    run again (the warm-up paused it)."""
    gc.freeze()
    gc.enable()


def serve(client: socket.socket | None = None,
          listener: socket.socket | None = None,
          greeting: bytes = _READY) -> None:
    """The server's loop: fork on request, report statuses, clean up.

    Its clients: ``client`` (the one grading command that started it; the
    server ends when it hangs up), or every connection ``listener``
    accepts (a listening server, shared by the commands that name it in
    ``GRADER_FORK_SERVER``: it ends with the process that started it).
    Call :func:`_warm_server` first.
    """
    from grader.worker import agent
    from grader.worker.confine import die_with_parent

    die_with_parent(os.getppid())
    wake_r, wake_w = child_wakeups()
    children: dict[int, tuple[int, int]] = {}
    clients = {} if client is None else {client.fileno(): client}
    plotting = False
    if client is not None:
        client.send(greeting)
    if listener is not None:
        listener.setblocking(False)
    while clients or listener is not None:
        alive = {entry[1]: pid for pid, entry in children.items()}
        waiting = [*clients, wake_r, *alive]
        if listener is not None:
            waiting.append(listener.fileno())
        ready = wait_woken(waiting, wake_r)
        _reap(children)
        for alive_r, pid in alive.items():
            if alive_r not in ready or pid not in children:
                continue
            try:
                gone = os.read(alive_r, 1) == b""
            except OSError:
                gone = True
            if gone:  # the client died: its worker goes with it
                kill_group(pid)
        if listener is not None and listener.fileno() in ready:
            greet(listener, greeting, clients)
        for fd in [fd for fd in ready if fd in clients]:
            received = _receive(clients[fd])
            if received is None:  # this client is gone
                clients.pop(fd).close()
                continue
            message, fds = received
            if message == b"spawn":
                # The server's own descriptors as they are now: a number
                # a client just freed may be one of the received ones.
                private = [wake_r, wake_w, *clients]
                if listener is not None:
                    private.append(listener.fileno())
                _spawn(fds, children, private)
            elif message == _WARM and not plotting:
                gc.disable()  # until _freeze, as in _warm_server
                _warm_plotting()
                # What matplotlib loaded is indexed too, as if it had
                # been there from the start (each worker scans in full
                # only the modules loaded after the index).
                agent.index_aliases(agent.KIT_PACKAGES)
                agent.index_loaded_files()
                _freeze()
                plotting = True
            else:
                for extra in fds:
                    os.close(extra)
    for pid in list(children):
        kill_group(pid)
    deadline = time.monotonic() + 5
    while children and time.monotonic() < deadline:
        _reap(children)
        time.sleep(0.01)


def listen(address: str) -> subprocess.Popen:
    """Start a listening fork server at ``address`` (a socket path in a
    private folder) for commands to share; returns once it is ready.

    It runs until the calling process ends or kills it; set
    ``GRADER_FORK_SERVER`` to ``address`` in the commands' environment.
    The test suite runs one per session (tests/kit/conftest.py).
    """
    greeting = b" ".join([_READY, b"%d", identity()])
    environment = _server_environment()
    process = subprocess.Popen(
        [sys.executable, "-m", "grader.run.forkserver", "--listen", address,
         greeting.decode()], env=environment, stdin=subprocess.DEVNULL,
        cwd="/", close_fds=True)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ForkServerError("the listening fork server ended while "
                                  "starting")
        try:
            probe = ForkServer(address)
        except ForkServerError:
            time.sleep(0.1)
            continue
        probe.close()
        return process
    process.kill()
    raise ForkServerError(f"the fork server at {address} did not start "
                          f"within {START_SECONDS:g} s")


def listening(address: str) -> socket.socket:
    """A Unix ``SEQPACKET`` socket listening at ``address`` (a socket
    left there by a server before is replaced)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if os.path.exists(address):
        os.unlink(address)
    listener.bind(address)
    listener.listen(64)
    return listener


def greet(listener: socket.socket, greeting: bytes,
          clients: dict[int, socket.socket]) -> None:
    """Accept a client waiting at ``listener``, greet it and add it to
    ``clients`` (by descriptor); a client that left first is let go."""
    try:
        connection, _ = listener.accept()
        connection.setblocking(True)
        connection.send(greeting)
        clients[connection.fileno()] = connection
    except OSError:
        pass


def run_server(main: Callable[[list[str]], None]) -> NoReturn:
    """Run a server process's ``main`` on its arguments: an interrupt or
    a client gone (a closed pipe) ends it quietly, and it always ends
    with status 0 without the interpreter's teardown."""
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
    finally:
        sys.stdout.flush()
        os._exit(0)


def _main(arguments: list[str]) -> None:
    """``FD`` (a client's socket) or ``--listen PATH GREETING``."""
    if arguments[0] == "--listen":
        greeting = arguments[2].replace("%d", str(os.getpid())).encode()
        # Warm first: a client that connects finds a ready server.
        _warm_server()
        serve(listener=listening(arguments[1]), greeting=greeting)
    else:
        client = socket.socket(fileno=int(arguments[0]))
        _warm_server()
        serve(client=client)


if __name__ == "__main__":
    run_server(_main)
