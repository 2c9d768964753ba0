"""The sandbox worker: the only place where student code ever runs.

A worker is a child process forked by :mod:`grader.sandbox`. It isolates
itself before the submission's first line runs, in layers:

* process: its own session, only its two pipes open (every descriptor it
  inherited from the grader is closed), a scrubbed environment, a scratch
  working folder, resource limits (CPU time, address space, file size,
  open files);
* kernel (:mod:`grader.confine`, where Linux offers it): no capabilities,
  Landlock (writes only in the scratch folder, no exec, the reference
  unreadable, no signal or trace reaching outside the worker) and seccomp
  (no new process, no exec, no ptrace, no mounts);
* Python: an audit hook that refuses process control, network, writes
  outside the scratch folder, reading the kit's reference and importing the
  grader or the reference; tripwires on the forbidden attention APIs (their
  Python names, the ``nn.MultiheadAttention`` class itself, and every aten
  attention kernel in torch's dispatcher, whatever alias reaches it) and on
  the unaudited calls that end the process, start one, signal one or open a
  file from C.

The Python layer names what it refused in the report; the kernel layers
enforce the same rules for code that goes around Python. Then the worker
executes the submission's source, runs the probes of its plan one by one,
and reports each result as a frame on its result pipe. It never returns: it
ends with ``os._exit``.

Everything it reports is an observation (a tensor, a shape, an error
message); the parent process judges.
"""
from __future__ import annotations

import builtins
import ctypes
import faulthandler
import fcntl
import linecache
import os
import re
import resource
import sys
import tempfile
import time
import traceback
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn

from grader.confine import confine, die_with_parent
from grader.wire import decode_tensor, encode_value, frame

# The worker's own exit and write, kept before student code could replace
# the functions in the os module.
_exit = os._exit
_write = os.write

# Audit events refused outright, with the words used in the report.
REFUSED_EVENTS = {
    "os.system": "run a shell command",
    "os.exec": "replace the process (exec)",
    "os.posix_spawn": "start a process",
    "os.spawn": "start a process",
    "os.fork": "fork a process",
    "os.forkpty": "fork a process",
    "subprocess.Popen": "start a subprocess",
    "pty.spawn": "start a process",
    "os.kill": "send a signal to a process",
    "os.killpg": "send a signal to a process group",
    "signal.pthread_kill": "send a signal to a thread",
    "socket.__new__": "open a network socket",
    "socket.connect": "connect to the network",
    "socket.bind": "open a network port",
    "socket.getaddrinfo": "look up a network address",
    "urllib.Request": "open a URL",
    "ctypes.dlopen": "load a native library (ctypes)",
    "ctypes.dlsym": "call into a native library (ctypes)",
    "ctypes.cdata": "read raw memory (ctypes)",
    "ctypes.call_function": "call a native function (ctypes)",
    "resource.setrlimit": "change the sandbox's resource limits",
    "resource.prlimit": "change the sandbox's resource limits",
    "gc.get_objects": "inspect the grader's objects (gc)",
    "gc.get_referrers": "inspect the grader's objects (gc)",
    "os.setuid": "change the user id",
    "os.chroot": "change the root folder",
    # A link is a way to make a path in the scratch folder name a file
    # outside it; no homework needs one.
    "os.symlink": "create a symbolic link",
    "os.link": "create a hard link",
}
# Audit events that change the file system: allowed inside the scratch
# folder only. The value is the index of the path argument(s).
PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,),
    "os.rename": (0, 1), "os.replace": (0, 1), "os.chmod": (0,),
    "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,),
    "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,),
    "shutil.move": (0, 1), "shutil.copyfile": (1,), "shutil.copytree": (1,),
    "shutil.chown": (0,),
}
_WRITE_FLAGS = (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT
                | os.O_TRUNC)
FORBIDDEN_MODULES = ("grader", "solutions")
# The grader's own reference and checks: never readable by student code
# (the parent adds the kit's solutions folder).
GRADER_PRIVATE = (str(Path(__file__).resolve().parent / "assignments"),)
FORBIDDEN_CALLS = (
    ("torch.nn.functional", "scaled_dot_product_attention"),
    ("torch._C._nn", "scaled_dot_product_attention"),
    ("torch.nn.functional", "multi_head_attention_forward"),
)
FORBIDDEN_CLASSES = (("torch.nn", "MultiheadAttention"),)
# aten operators that compute attention: refused whichever Python name
# (torch.ops.aten.*, torch._*, F.*) reaches them.
FORBIDDEN_OPS = re.compile(r"attention|multi_head|transformer_encoder"
                           r"|_fused_sdp")
# Unaudited calls that end the process, start or signal one: refused.
REFUSED_CALLS = (
    ("os", "_exit", "end the process (os._exit)"),
    ("os", "abort", "abort the process (os.abort)"),
    ("signal", "pidfd_send_signal", "send a signal to a process"),
    ("_posixsubprocess", "fork_exec", "start a process"),
)
# Environment variables a worker keeps; every other one (secrets of a CI
# job, the grading seed) is removed before student code runs.
KEPT_ENVIRONMENT = ("PATH", "LANG", "LANGUAGE", "TZ", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS")
OPEN_FILES = 256
MAX_REPORTS = 16


class Refused(PermissionError):
    """Raised into student code when the sandbox refuses an action."""


class _Channel:
    """Writes frames to the result pipe, whole or not at all."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, message: dict) -> None:
        data = frame(message)
        view = memoryview(data)
        while view:
            written = _write(self.fd, view)
            view = view[written:]


def _safe_str(value: object, limit: int = 400) -> str:
    try:
        text = str(value)
    except BaseException:  # a hostile __str__
        text = f"<{type(value).__name__} with an unprintable message>"
    return text if len(text) <= limit else text[:limit] + "..."


def _message(exc: BaseException, memory_mb: int) -> str:
    """Words for an exception; exits and memory get a sentence."""
    if isinstance(exc, SystemExit):
        try:
            code = repr(exc.code)[:40]
        except BaseException:
            code = "..."
        return f"the code called sys.exit({code})"
    if isinstance(exc, MemoryError):
        return (f"the code ran out of memory (the sandbox allows "
                f"{memory_mb} MB)")
    return _safe_str(exc)


def describe_error(exc: BaseException, filename: str, lines: list[str],
                   memory_mb: int = 0) -> dict:
    """Plain data about an exception raised by (or through) student code.

    Never raises, and reads no file: source lines come from ``lines``.
    """
    try:
        traceback.clear_frames(exc.__traceback__)  # free a memory bomb
        summary = traceback.StackSummary.extract(
            traceback.walk_tb(exc.__traceback__), lookup_lines=False)
        student = [f for f in summary if f.filename == filename]
        info: dict[str, Any] = {"type": type(exc).__name__[:80],
                                "message": _message(exc, memory_mb)}
        if isinstance(exc, SyntaxError) and exc.filename == filename:
            info["line"] = exc.lineno
        elif student:
            info["line"] = student[-1].lineno
            info["function"] = _safe_str(student[-1].name, 80)
        line = info.get("line")
        if isinstance(line, int) and 1 <= line <= len(lines):
            info["code"] = lines[line - 1].strip()[:200]
        return info
    except BaseException:
        return {"type": "Exception",
                "message": "an exception that could not be described"}


@dataclass(frozen=True)
class Trusted:
    """torch's classes and functions as they were before student code ran
    (the code may replace ``torch.nn.Linear`` and the like)."""

    module: type
    linear: type
    dropout: type
    no_grad: Callable[[], Any]
    manual_seed: Callable[[int], Any]

    @classmethod
    def capture(cls) -> Trusted:
        """Take the references now."""
        import torch

        return cls(torch.nn.Module, torch.nn.Linear, torch.nn.Dropout,
                   torch.no_grad, torch.manual_seed)


class Sandbox:
    """The worker's Python-level isolation: audit hook, tripwires, import
    block. The hook is installed by :meth:`arm`, just before the
    submission runs, and can never be removed."""

    def __init__(self, channel: _Channel, scratch: Path,
                 protected: tuple[str, ...]) -> None:
        self.channel = channel
        self.scratch = os.path.realpath(scratch)
        self.protected = tuple(os.path.realpath(p)
                               for p in protected + GRADER_PRIVATE)
        self.reported: set[str] = set()
        self.library: Any = None  # keeps the dispatcher tripwires alive

    # -- reporting ---------------------------------------------------------

    def report(self, kind: str, what: str) -> None:
        """Tell the parent, once per distinct event, what was refused (at
        most MAX_REPORTS distinct events: a loop over many paths must not
        flood the report)."""
        key = f"{kind}:{what}"
        if key in self.reported:
            return
        self.reported.add(key)
        count = sum(1 for k in self.reported if k.startswith(kind + ":"))
        if count <= MAX_REPORTS:
            self.channel.send({"type": kind, "what": what})
        elif count == MAX_REPORTS + 1:
            self.channel.send({"type": kind, "what": "do more of the same "
                                                     "(not listed)"})

    def refuse(self, what: str) -> NoReturn:
        """Report a refusal and raise it into the code."""
        self.report("refused", what)
        raise Refused(f"the grader's sandbox refuses to {what}")

    # -- paths -------------------------------------------------------------

    @staticmethod
    def _real(path: object) -> str | None:
        try:
            return os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return None

    def _inside_scratch(self, path: object) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        real = self._real(path)
        return real is not None and (
            real in (self.scratch, os.devnull)
            or real.startswith(self.scratch + os.sep))

    def _protected(self, path: object) -> bool:
        if isinstance(path, int):
            return False
        real = self._real(path)
        return real is not None and any(
            real == p or real.startswith(p + os.sep)
            for p in self.protected)

    def check_open(self, path: object, writing: bool) -> None:
        """Refuse reading the reference, or writing outside scratch."""
        if self._protected(path):
            self.report("forbidden", f"the kit's reference (by reading "
                                     f"{_safe_str(path, 200)})")
            raise Refused("the grader's sandbox refuses to read the "
                          "reference solution")
        if writing and not self._inside_scratch(path):
            self.report("refused", f"write to {_safe_str(path, 200)}")
            raise Refused("the grader's sandbox refuses writes outside "
                          "its scratch folder")

    # -- the audit hook ----------------------------------------------------

    def audit(self, event: str, args: tuple) -> None:
        """The audit hook (see ``sys.addaudithook``)."""
        if event in REFUSED_EVENTS:
            self.refuse(REFUSED_EVENTS[event])
        if event == "open":
            path, mode, flags = (list(args) + [None, None, None])[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in
                                                     "wax+")) or (
                isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
            self.check_open(path, writing)
        elif event in PATH_EVENTS:
            for index in PATH_EVENTS[event]:
                if index < len(args) and not self._inside_scratch(
                        args[index]):
                    self.report("refused", f"call {event} on "
                                           f"{_safe_str(args[index], 200)}")
                    raise Refused(f"the grader's sandbox refuses {event} "
                                  f"outside its scratch folder")
        elif event == "import":
            name = args[0] if args else ""
            if isinstance(name, str) and name.split(".")[0] in \
                    FORBIDDEN_MODULES:
                self.report("forbidden", f"import {name}")
                raise ImportError(f"the grader's sandbox refuses to import "
                                  f"{name}: submissions may not use the "
                                  f"kit's grader or reference solution")

    def arm(self) -> None:
        """Install the audit hook: from now on every event is checked."""
        sys.addaudithook(self.audit)

    # -- tripwires ---------------------------------------------------------

    def arm_tripwires(self) -> None:
        """Replace the forbidden and the unaudited dangerous calls."""
        import importlib

        replacements: dict[int, Any] = {}
        for module_name, attribute in FORBIDDEN_CALLS:
            original = _lookup(importlib, module_name, attribute)
            if original is not None:  # aliases keep the first name
                replacements.setdefault(id(original), self._forbidden_call(
                    f"{module_name}.{attribute}"))
        for module_name, attribute, what in REFUSED_CALLS:
            original = _lookup(importlib, module_name, attribute)
            if original is not None:
                replacements[id(original)] = self._refused_call(what)
        _replace_everywhere(replacements)
        for module_name, attribute in FORBIDDEN_CLASSES:
            cls = _lookup(importlib, module_name, attribute)
            if isinstance(cls, type):
                # In place: every alias, subclass and __subclasses__() hit
                # is this very class.
                tripped = self._forbidden_call(f"{module_name}.{attribute}")
                cls.__init__ = tripped
                cls.forward = tripped
        self._guard_torch_files()
        self._trip_dispatcher()

    def _forbidden_call(self, name: str) -> Callable[..., NoReturn]:
        sandbox = self

        def tripped(*args: Any, **kwargs: Any) -> NoReturn:
            sandbox.report("forbidden", name)
            raise RuntimeError(f"{name} is not allowed in this homework: "
                               f"write the attention yourself")
        return tripped

    def _refused_call(self, what: str) -> Callable[..., NoReturn]:
        sandbox = self

        def refused(*args: Any, **kwargs: Any) -> NoReturn:
            sandbox.refuse(what)
        return refused

    def _guard_torch_files(self) -> None:
        """torch opens these files in C++, where no audit event is raised:
        check their paths as the hook checks ``open``."""
        import torch

        sandbox = self

        def guarded(original: Any, path_arg: int, write: bool | None
                    ) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                path = args[path_arg] if len(args) > path_arg else \
                    kwargs.get("filename", kwargs.get("name"))
                if isinstance(path, (str, bytes, os.PathLike)):
                    writing = write if write is not None else bool(
                        kwargs.get("shared", args[path_arg + 1]
                                   if len(args) > path_arg + 1 else False))
                    sandbox.check_open(path, writing)
                return original(*args, **kwargs)
            return call

        for owner, name, path_arg, write in (
                (torch._C, "PyTorchFileWriter", 0, True),
                (torch._C, "PyTorchFileReader", 0, False),
                (torch, "from_file", 0, None),
                (torch.UntypedStorage, "from_file", 0, None)):
            original = getattr(owner, name, None)
            if original is not None:
                setattr(owner, name, guarded(original, path_arg, write))

    def _trip_dispatcher(self) -> None:
        """Override every aten attention kernel with a tripwire."""
        import torch

        names = sorted({
            op.split("::", 1)[1].split(".")[0]
            for op in torch._C._dispatch_get_all_op_names()
            if op.startswith("aten::") and FORBIDDEN_OPS.search(op)})
        library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in names:
                tripped = self._forbidden_call(f"torch.ops.aten.{name}")
                for key in ("CompositeImplicitAutograd", "CPU"):
                    try:
                        library.impl(name, tripped, key)
                    except (RuntimeError, ValueError):
                        pass
        self.library = library

    def block_kit_imports(self) -> None:
        """Forget the grader's modules so that importing them goes through
        the import system, where the audit hook refuses it."""
        for name in list(sys.modules):
            if name.split(".")[0] in FORBIDDEN_MODULES:
                del sys.modules[name]


def _lookup(importlib: Any, module_name: str, attribute: str) -> Any:
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError):
        return None


def _replace_everywhere(replacements: dict[int, Any]) -> None:
    """Replace objects (by identity) in every loaded module but the
    grader's, so that no alias (``posix._exit``, ``F.*``) escapes."""
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "grader" or module is None:
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            replacement = replacements.get(id(value))
            if replacement is not None:
                namespace[key] = replacement


def _limit(kind: int, soft: int, hard: int | None = None) -> None:
    try:
        resource.setrlimit(kind, (soft, soft if hard is None else hard))
    except (ValueError, OSError):
        pass


def _current_vm_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def apply_limits(timeout: float, memory_mb: int) -> None:
    """CPU seconds, address space (on top of what is mapped now), files.

    The CPU limit matters when threads burn CPU faster than the wall clock
    runs out: SIGXCPU at the soft limit, SIGKILL a second later.
    """
    _limit(resource.RLIMIT_CPU, int(timeout) + 1, int(timeout) + 2)
    if memory_mb > 0:
        _limit(resource.RLIMIT_AS,
               _current_vm_bytes() + memory_mb * 1024 * 1024)
    _limit(resource.RLIMIT_FSIZE, 64 * 1024 * 1024)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_NOFILE, OPEN_FILES)


def scrub_environment(scratch: Path) -> None:
    """Keep only harmless variables; point HOME and TMPDIR at scratch.

    The removed variables are also overwritten in the process's original
    environment block, which ``/proc/self/environ`` shows.
    """
    removed = [name for name in os.environ if name not in KEPT_ENVIRONMENT
               and not name.startswith("LC_")]
    for name in removed:
        del os.environ[name]
    os.environ["HOME"] = os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = str(scratch)
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end
        block = Path("/proc/self/environ").read_bytes()[:end - start]
    except (OSError, ValueError, IndexError):
        return
    offset = 0
    for entry in block.split(b"\0"):
        name = entry.split(b"=", 1)[0].decode("utf-8", "replace")
        if entry and name in removed:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1


def isolate_descriptors(result_fd: int, output_fd: int) -> int:
    """Keep only stdin (/dev/null), stdout and stderr (the output pipe)
    and the result pipe; close every descriptor inherited from the grader
    (its terminal, its log and CSV files, the other workers' pipes).
    Returns the result pipe's new descriptor."""
    result = fcntl.fcntl(result_fd, fcntl.F_DUPFD, 3)
    output = fcntl.fcntl(output_fd, fcntl.F_DUPFD, 3)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    for fd in (devnull, output):
        if fd > 2:
            os.close(fd)
    os.closerange(3, result)
    os.closerange(result + 1, max(result + 1, os.sysconf("SC_OPEN_MAX")))
    return result


# --------------------------------------------------------------------------
# Running the plan


def _build_object(namespace: dict, probe: dict, trusted: Trusted) -> Any:
    target_name = probe["target"]
    target = namespace.get(target_name)
    if target is None:
        raise LookupError(f"{target_name} is not defined in the submission")
    init = probe.get("init")
    if init is None:
        return target
    args = [decode_tensor(a) if isinstance(a, dict) else a
            for a in init.get("args", [])]
    obj = target(*args, **init.get("kwargs", {}))
    state = probe.get("state") or {}
    if state:
        if not isinstance(obj, trusted.module):
            raise TypeError(f"{target_name}(...) did not build an "
                            f"nn.Module, so its weights cannot be set")
        parameters = dict(obj.named_parameters())
        for name, data in state.items():
            if name not in parameters:
                known = ", ".join(sorted(parameters)) or "none"
                raise LookupError(f"{target_name} has no parameter {name} "
                                  f"(its parameters: {known})")
            parameters[name].data = decode_tensor(data)
    if isinstance(obj, trusted.module):
        obj.train(bool(probe.get("train", False)))
    return obj


def _describe(obj: Any, trusted: Trusted) -> dict:
    info: dict[str, Any] = {"type": type(obj).__name__,
                            "is_module": isinstance(obj, trusted.module)}
    if not isinstance(obj, trusted.module):
        return info
    children = {}
    for name, child in list(obj.named_children())[:32]:
        entry: dict[str, Any] = {"type": type(child).__name__,
                                 "is_linear": isinstance(child,
                                                         trusted.linear)}
        if isinstance(child, trusted.linear):
            entry.update(in_features=child.in_features,
                         out_features=child.out_features,
                         bias=child.bias is not None)
        if isinstance(child, trusted.dropout):
            entry["p"] = float(child.p)
        children[name] = entry
    info["children"] = children
    info["parameters"] = {n: list(p.shape) for n, p in
                          list(obj.named_parameters())[:64]}
    info["buffers"] = {n: list(b.shape) for n, b in
                       list(obj.named_buffers())[:64]}
    return info


def run_probe(namespace: dict, probe: dict, filename: str,
              tracer_class: Any = None, trusted: Trusted | None = None
              ) -> dict:
    """Run one probe; return its result as plain data (may raise).

    ``tracer_class`` is :class:`grader.shapes.ShapeTracer`, imported before
    the sandbox closed imports of the grader's modules; ``trusted`` holds
    torch's classes as they were before the submission ran.
    """
    trusted = trusted or Trusted.capture()
    obj = _build_object(namespace, probe, trusted)
    result: dict[str, Any] = {}
    if probe.get("describe"):
        result["describe"] = _describe(obj, trusted)
    call = probe.get("call")
    if call is None:
        return result
    args = [decode_tensor(a) if isinstance(a, dict) else a
            for a in call.get("args", [])]
    kwargs = dict(call.get("kwargs", {}))
    trusted.manual_seed(int(probe.get("seed", 0)))
    trace = probe.get("trace")
    with trusted.no_grad():
        if trace and tracer_class is not None:
            tracer = tracer_class(filename, trace["method"],
                                  trace["statements"])
            with tracer:
                value = obj(*args, **kwargs)
            result["trace"] = {"records": tracer.records,
                               "intact": tracer.intact}
        else:
            value = obj(*args, **kwargs)
    result["value"] = encode_value(value)
    return result


def main(job: dict, result_fd: int, output_fd: int, scratch: Path,
         inherited: list[int], parent: int | None = None) -> NoReturn:
    """The worker's whole life; called in the child right after fork.

    ``inherited`` (the other workers' pipe ends) is kept for callers; every
    descriptor but the worker's own two pipes is closed anyway.
    """
    code = 0
    try:
        os.setsid()
        die_with_parent(parent)
        result_fd = isolate_descriptors(result_fd, output_fd)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        # A crash's traceback goes to the captured output (the grader's
        # own faulthandler file, if any, was closed with the rest).
        faulthandler.enable(sys.stderr)
        os.chdir(scratch)
        channel = _Channel(result_fd)
        _run(job, channel, scratch)
    except BaseException:  # nothing may escape a forked child
        code = 70
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        _exit(code)


def _run(job: dict, channel: _Channel, scratch: Path) -> None:
    import torch

    torch.set_num_threads(1)
    tracer_class = None
    if any(p.get("trace") for p in job["probes"]):
        from grader.shapes import ShapeTracer as tracer_class
    filename = job["filename"]
    lines = job["source"].splitlines()
    memory_mb = int(job["memory_mb"])
    # Tracebacks and warnings show the submission's lines without reading
    # its file (which may sit in a folder the sandbox protects).
    linecache.cache[filename] = (len(job["source"]), None,
                                 [line + "\n" for line in lines], filename)
    trusted = Trusted.capture()
    sandbox = Sandbox(channel, scratch, tuple(job.get("protected", ())))
    sandbox.arm_tripwires()
    sandbox.block_kit_imports()
    scrub_environment(scratch)
    apply_limits(job["timeout"], memory_mb)
    confinement = confine(str(scratch), sandbox.protected)
    sandbox.arm()
    channel.send({"type": "hello", "pid": os.getpid(),
                  "confinement": confinement.as_plain()})

    module = types.ModuleType("submission")
    module.__file__ = filename
    module.__dict__["__builtins__"] = builtins
    sys.modules["submission"] = module
    started = time.perf_counter()
    try:
        code = compile(job["source"], filename, "exec")
        exec(code, module.__dict__)
    except BaseException as exc:  # SystemExit included: import failed
        error = describe_error(exc, filename, lines, memory_mb)
        channel.send({"type": "import", "ok": False, "error": error,
                      "seconds": time.perf_counter() - started})
        channel.send({"type": "done"})
        return
    channel.send({"type": "import", "ok": True,
                  "seconds": time.perf_counter() - started})

    for probe in job["probes"]:
        channel.send({"type": "start", "id": probe["id"]})
        started = time.perf_counter()
        try:
            result = run_probe(module.__dict__, probe, filename,
                               tracer_class, trusted)
            message = {"type": "probe", "id": probe["id"], "ok": True}
            message.update(result)
        except BaseException as exc:
            message = {"type": "probe", "id": probe["id"], "ok": False,
                       "error": describe_error(exc, filename, lines,
                                               memory_mb)}
        message["seconds"] = time.perf_counter() - started
        channel.send(message)
    channel.send({"type": "done"})
