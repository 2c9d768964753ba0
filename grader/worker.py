"""The sandbox worker: the only place where student code ever runs.

A worker is a child process forked by :mod:`grader.sandbox`. It isolates
itself (own session, resource limits, captured output, a scratch working
folder, tripwires on the forbidden attention APIs and an audit hook that
refuses process control, network, writes outside the scratch folder and
imports of the kit's grader or reference), executes the submission's source,
runs the probes of its plan one by one, and reports each result as a frame
on its result pipe. It never returns: it ends with ``os._exit``.

Everything it reports is an observation (a tensor, a shape, an error
message); the parent process judges.
"""
from __future__ import annotations

import builtins
import os
import resource
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any, NoReturn

from grader.wire import decode_tensor, encode_value, frame

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
}
# Audit events that change the file system: allowed inside the scratch
# folder only. The value is the index of the path argument(s).
PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,),
    "os.rename": (0, 1), "os.replace": (0, 1), "os.link": (0, 1),
    "os.symlink": (0, 1), "os.chmod": (0,), "os.chown": (0,),
    "os.truncate": (0,), "os.utime": (0,), "os.setxattr": (0,),
    "os.removexattr": (0,), "shutil.rmtree": (0,), "shutil.move": (0, 1),
    "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.chown": (0,),
}
_WRITE_FLAGS = (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT
                | os.O_TRUNC)
FORBIDDEN_MODULES = ("grader", "solutions")
FORBIDDEN_CALLS = (
    ("torch.nn.functional", "scaled_dot_product_attention"),
    ("torch._C._nn", "scaled_dot_product_attention"),
    ("torch.nn.functional", "multi_head_attention_forward"),
    ("torch.nn", "MultiheadAttention"),
    ("torch.nn.modules.activation", "MultiheadAttention"),
)


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
            written = os.write(self.fd, view)
            view = view[written:]


def _safe_str(value: object, limit: int = 400) -> str:
    try:
        text = str(value)
    except BaseException:  # a hostile __str__
        text = f"<{type(value).__name__} with an unprintable message>"
    return text if len(text) <= limit else text[:limit] + "..."


def describe_error(exc: BaseException, filename: str,
                   lines: list[str]) -> dict:
    """Plain data about an exception raised by (or through) student code."""
    student = [f for f in traceback.extract_tb(exc.__traceback__)
               if f.filename == filename]
    info: dict[str, Any] = {"type": type(exc).__name__,
                            "message": _safe_str(exc)}
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        info["line"] = exc.lineno
    elif student:
        info["line"] = student[-1].lineno
        info["function"] = student[-1].name
    line = info.get("line")
    if isinstance(line, int) and 1 <= line <= len(lines):
        info["code"] = lines[line - 1].strip()[:200]
    return info


class Sandbox:
    """The worker's isolation: limits, audit hook, tripwires, import block."""

    def __init__(self, channel: _Channel, scratch: Path,
                 protected: tuple[str, ...]) -> None:
        self.channel = channel
        self.scratch = os.path.realpath(scratch)
        self.protected = tuple(os.path.realpath(p) for p in protected)
        self.armed = False
        self.reported: set[str] = set()

    # -- reporting ---------------------------------------------------------

    def report(self, kind: str, what: str) -> None:
        """Tell the parent, once per distinct event, what was refused."""
        key = f"{kind}:{what}"
        if key in self.reported:
            return
        self.reported.add(key)
        self.channel.send({"type": kind, "what": what})

    # -- the audit hook ----------------------------------------------------

    def _inside_scratch(self, path: object) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real == self.scratch or real.startswith(self.scratch + os.sep)

    def _protected(self, path: object) -> bool:
        if isinstance(path, int):
            return False
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return any(real == p or real.startswith(p + os.sep)
                   for p in self.protected)

    def audit(self, event: str, args: tuple) -> None:
        """The audit hook (see ``sys.addaudithook``)."""
        if not self.armed:
            return
        if event in REFUSED_EVENTS:
            self.report("refused", REFUSED_EVENTS[event])
            raise Refused(f"the grader's sandbox refuses to "
                          f"{REFUSED_EVENTS[event]}")
        if event == "open":
            path, mode, flags = (list(args) + [None, None, None])[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in
                                                     "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if self._protected(path):
                self.report("forbidden", "reading the kit's reference "
                                         "solution")
                raise Refused("the grader's sandbox refuses to read the "
                              "reference solution")
            if writing and not self._inside_scratch(path):
                self.report("refused", f"write to {os.fsdecode(path)}")
                raise Refused("the grader's sandbox refuses writes outside "
                              "its scratch folder")
        elif event in PATH_EVENTS:
            for index in PATH_EVENTS[event]:
                if index < len(args) and not self._inside_scratch(
                        args[index]):
                    self.report("refused", f"{event} outside the scratch "
                                           f"folder")
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

    # -- tripwires ---------------------------------------------------------

    def arm_tripwires(self) -> None:
        """Replace the forbidden attention APIs with tripwires."""
        import importlib

        for module_name, attribute in FORBIDDEN_CALLS:
            try:
                module = importlib.import_module(module_name)
                original = getattr(module, attribute)
            except (ImportError, AttributeError):
                continue
            setattr(module, attribute, self._tripwire(
                f"{module_name}.{attribute}", original))

    def _tripwire(self, name: str, original: Any) -> Any:
        sandbox = self

        def tripped(*args: Any, **kwargs: Any) -> NoReturn:
            sandbox.report("forbidden", name)
            raise RuntimeError(f"{name} is not allowed in this homework: "
                               f"write the attention yourself")

        if isinstance(original, type):
            return type(original.__name__, (), {
                "__init__": lambda self, *a, **k: tripped(),
                "__module__": original.__module__})
        return tripped

    def block_kit_imports(self) -> None:
        """Forget the grader's modules so that importing them goes through
        the import system, where the audit hook refuses it."""
        for name in list(sys.modules):
            if name.split(".")[0] in FORBIDDEN_MODULES:
                del sys.modules[name]


def _limit(kind: int, soft: int) -> None:
    try:
        resource.setrlimit(kind, (soft, soft))
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
    """CPU seconds, address space (on top of what is mapped now), files."""
    _limit(resource.RLIMIT_CPU, int(timeout) + 2)
    if memory_mb > 0:
        _limit(resource.RLIMIT_AS,
               _current_vm_bytes() + memory_mb * 1024 * 1024)
    _limit(resource.RLIMIT_FSIZE, 64 * 1024 * 1024)
    _limit(resource.RLIMIT_CORE, 0)


# --------------------------------------------------------------------------
# Running the plan


def _build_object(namespace: dict, probe: dict) -> Any:
    import torch

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
        if not isinstance(obj, torch.nn.Module):
            raise TypeError(f"{target_name}(...) did not build an "
                            f"nn.Module, so its weights cannot be set")
        parameters = dict(obj.named_parameters())
        for name, data in state.items():
            if name not in parameters:
                known = ", ".join(sorted(parameters)) or "none"
                raise LookupError(f"{target_name} has no parameter {name} "
                                  f"(its parameters: {known})")
            parameters[name].data = decode_tensor(data)
    if isinstance(obj, torch.nn.Module):
        obj.train(bool(probe.get("train", False)))
    return obj


def _describe(obj: Any) -> dict:
    import torch

    info: dict[str, Any] = {"type": type(obj).__name__,
                            "is_module": isinstance(obj, torch.nn.Module)}
    if not isinstance(obj, torch.nn.Module):
        return info
    children = {}
    for name, child in list(obj.named_children())[:32]:
        entry: dict[str, Any] = {"type": type(child).__name__,
                                 "is_linear": isinstance(child,
                                                         torch.nn.Linear)}
        if isinstance(child, torch.nn.Linear):
            entry.update(in_features=child.in_features,
                         out_features=child.out_features,
                         bias=child.bias is not None)
        if isinstance(child, torch.nn.Dropout):
            entry["p"] = float(child.p)
        children[name] = entry
    info["children"] = children
    info["parameters"] = {n: list(p.shape) for n, p in
                          list(obj.named_parameters())[:64]}
    info["buffers"] = {n: list(b.shape) for n, b in
                       list(obj.named_buffers())[:64]}
    return info


def run_probe(namespace: dict, probe: dict, filename: str,
              tracer_class: Any = None) -> dict:
    """Run one probe; return its result as plain data (may raise).

    ``tracer_class`` is :class:`grader.shapes.ShapeTracer`, imported before
    the sandbox closed imports of the grader's modules.
    """
    import torch

    obj = _build_object(namespace, probe)
    result: dict[str, Any] = {}
    if probe.get("describe"):
        result["describe"] = _describe(obj)
    call = probe.get("call")
    if call is None:
        return result
    args = [decode_tensor(a) if isinstance(a, dict) else a
            for a in call.get("args", [])]
    kwargs = dict(call.get("kwargs", {}))
    torch.manual_seed(int(probe.get("seed", 0)))
    trace = probe.get("trace")
    with torch.no_grad():
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
         inherited: list[int]) -> NoReturn:
    """The worker's whole life; called in the child right after fork."""
    code = 0
    try:
        os.setsid()
        for fd in inherited:
            try:
                os.close(fd)
            except OSError:
                pass
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        os.close(devnull)
        os.close(output_fd)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
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
        os._exit(code)


def _run(job: dict, channel: _Channel, scratch: Path) -> None:
    import torch

    torch.set_num_threads(1)
    tracer_class = None
    if any(p.get("trace") for p in job["probes"]):
        from grader.shapes import ShapeTracer as tracer_class
    sandbox = Sandbox(channel, scratch, tuple(job.get("protected", ())))
    sandbox.arm_tripwires()
    sandbox.block_kit_imports()
    apply_limits(job["timeout"], job["memory_mb"])
    sys.addaudithook(sandbox.audit)
    filename = job["filename"]
    lines = job["source"].splitlines()
    channel.send({"type": "hello", "pid": os.getpid()})

    sandbox.armed = True
    module = types.ModuleType("submission")
    module.__file__ = filename
    module.__dict__["__builtins__"] = builtins
    sys.modules["submission"] = module
    started = time.perf_counter()
    try:
        code = compile(job["source"], filename, "exec")
        exec(code, module.__dict__)
    except BaseException as exc:  # SystemExit included: import failed
        error = describe_error(exc, filename, lines)
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
                               tracer_class)
            message = {"type": "probe", "id": probe["id"], "ok": True}
            message.update(result)
        except BaseException as exc:
            message = {"type": "probe", "id": probe["id"], "ok": False,
                       "error": describe_error(exc, filename, lines)}
        message["seconds"] = time.perf_counter() - started
        channel.send(message)
    channel.send({"type": "done"})
