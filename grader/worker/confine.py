"""Kernel-enforced confinement of a sandbox worker (Linux): Landlock and
seccomp, set up through ctypes before any student code runs.

Details: docs/internals.md, `grader.worker.confine`.
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# --------------------------------------------------------------------------
# Landlock (include/uapi/linux/landlock.h)

_SYS_LANDLOCK_CREATE_RULESET = 444   # the same number on every architecture
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_ALL = sum(1 << bit for bit in range(6, 13))  # char ... sym
_FS_REFER = 1 << 13        # ABI 2
_FS_TRUNCATE = 1 << 14     # ABI 3
_FS_IOCTL_DEV = 1 << 15    # ABI 5
_NET_BIND_TCP = 1 << 0     # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0   # ABI 6
_SCOPE_SIGNAL = 1 << 1                 # ABI 6

_FILE_RIGHTS = (_FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
                | _FS_IOCTL_DEV)

# --------------------------------------------------------------------------
# seccomp (include/uapi/linux/seccomp.h, filter.h, audit.h)

_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MS_REC, _MS_PRIVATE = 1 << 14, 1 << 18
_PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1       # seccomp(2)'s operation
_SECCOMP_FILTER_FLAG_TSYNC = 1     # every thread of the process gets it
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EPERM = 1
_ENOSYS = 38
_CLONE_THREAD = 0x00010000
_X32_BIT = 0x40000000

_LD_W_ABS = 0x20       # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15          # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35          # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45         # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06          # BPF_RET | BPF_K
_OFFSET_NR = 0
_OFFSET_ARCH = 4
_OFFSET_ARG0 = 16      # low 32 bits of args[0] (little-endian)

# Per architecture: the audit arch value and the system call numbers.
_ARCHES = {
    "x86_64": {
        "arch": 0xC000003E, "x32": True,
        "clone": 56, "clone3": 435, "kill": 62, "tgkill": 234,
        "seccomp": 317,
        "denied": {
            "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
            "ptrace": 101, "process_vm_readv": 310,
            "process_vm_writev": 311, "tkill": 200,
            "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
            "pidfd_send_signal": 424, "pidfd_getfd": 438, "mount": 165,
            "umount2": 166, "unshare": 272, "setns": 308,
            "pivot_root": 155, "chroot": 161, "kexec_load": 246,
            "kexec_file_load": 320, "reboot": 169, "init_module": 175,
            "finit_module": 313, "delete_module": 176, "bpf": 321,
            "perf_event_open": 298, "userfaultfd": 323,
            "io_uring_setup": 425, "keyctl": 250, "add_key": 248,
            "request_key": 249, "open_tree": 428, "move_mount": 429,
            "fsopen": 430, "fsmount": 432},
    },
    "aarch64": {
        "arch": 0xC00000B7, "x32": False,
        "clone": 220, "clone3": 435, "kill": 129, "tgkill": 131,
        "seccomp": 277,
        "denied": {
            "execve": 221, "execveat": 281, "ptrace": 117,
            "process_vm_readv": 270, "process_vm_writev": 271,
            "tkill": 130, "rt_sigqueueinfo": 138,
            "rt_tgsigqueueinfo": 240, "pidfd_send_signal": 424,
            "pidfd_getfd": 438, "mount": 40, "umount2": 39,
            "unshare": 97, "setns": 268, "pivot_root": 41, "chroot": 51,
            "kexec_load": 104, "kexec_file_load": 294, "reboot": 142,
            "init_module": 105, "finit_module": 273,
            "delete_module": 106, "bpf": 280, "perf_event_open": 241,
            "userfaultfd": 282, "io_uring_setup": 425, "keyctl": 219,
            "add_key": 217, "request_key": 218, "open_tree": 428,
            "move_mount": 429, "fsopen": 430, "fsmount": 432},
    },
}


@dataclass(frozen=True)
class Confinement:
    """What :func:`confine` applied (for the worker's hello frame)."""

    landlock_abi: int = 0          # 0: Landlock not applied
    seccomp: bool = False
    problems: tuple[str, ...] = ()
    # "tmpfs" (bound_scratch), or why the grader measures it instead.
    scratch_bound: str = ""

    def as_plain(self) -> dict:
        """Plain data for the result channel."""
        return {"landlock_abi": self.landlock_abi, "seccomp": self.seccomp,
                "problems": list(self.problems),
                "scratch_bound": self.scratch_bound}


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 when unavailable)."""
    if platform.system() != "Linux":
        return 0
    try:
        libc = _libc()
    except OSError:
        return 0
    version = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None,
                           ctypes.c_size_t(0),
                           ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def seccomp_supported() -> bool:
    """True when this machine's architecture has a filter here."""
    return (platform.system() == "Linux"
            and platform.machine() in _ARCHES)


def readable_paths(readable: list[str] | tuple[str, ...],
                   hidden: list[str] | tuple[str, ...]) -> list[str]:
    """The trees to grant for reading: ``readable`` without ``hidden``.

    Landlock only grants; to keep a folder inside a granted tree out of
    reach, grant instead each sibling of it and of each of its ancestors up
    to the granted root, and never the path that leads to it.
    """
    hide = {os.path.realpath(p) for p in hidden if os.path.exists(p)}
    granted: list[str] = []
    for root in dict.fromkeys(os.path.realpath(p) for p in readable
                              if os.path.exists(p)):
        if any(root == h or root.startswith(h.rstrip(os.sep) + os.sep)
               for h in hide):
            continue  # the whole root is hidden
        inner = [h for h in hide
                 if h.startswith(root.rstrip(os.sep) + os.sep)]
        if not inner:
            granted.append(root)
            continue
        on_the_way = set(inner)
        for path in inner:
            parent = Path(path).parent
            while str(parent).startswith(root) and str(parent) != root:
                on_the_way.add(str(parent))
                parent = parent.parent
        pending = [root]
        while pending:
            folder = pending.pop()
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                child = os.path.join(folder, name)
                if child in hide:
                    continue
                if child in on_the_way:
                    pending.append(child)
                else:
                    granted.append(child)
    return granted


def listed_paths(readable: list[str] | tuple[str, ...],
                 hidden: list[str] | tuple[str, ...]) -> list[str]:
    """The folders of ``readable`` trees that hold a hidden path: granted
    for listing only (their entries' names, as a student's own copy of the
    package shows them; the import system lists a package's folder), never
    for reading what they hold beyond :func:`readable_paths`."""
    hide = {os.path.realpath(p) for p in hidden if os.path.exists(p)}
    listed: set[str] = set()
    for root in {os.path.realpath(p) for p in readable
                 if os.path.exists(p)}:
        prefix = root.rstrip(os.sep) + os.sep
        if any(root == h or root.startswith(h.rstrip(os.sep) + os.sep)
               for h in hide):
            continue
        for path in hide:
            if not path.startswith(prefix):
                continue
            parent = Path(path).parent
            while str(parent).startswith(prefix) or str(parent) == root:
                listed.add(str(parent))
                if str(parent) == root:
                    break
                parent = parent.parent
    return sorted(p for p in listed if os.path.isdir(p))


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int,
              abi_rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rights &= abi_rights
        if not rights:
            return
        attr = struct.pack("=Qi", rights, fd)  # packed path_beneath_attr
        buffer = ctypes.create_string_buffer(attr, len(attr))
        _check(libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset),
                            ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                            buffer, ctypes.c_uint32(0)),
               f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def _apply_landlock(libc: ctypes.CDLL, abi: int, scratch: str,
                    readable: list[str], hidden: list[str]) -> None:
    handled = (_FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_READ_DIR
               | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_ALL)
    if abi >= 2:
        handled |= _FS_REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    if abi >= 5:
        handled |= _FS_IOCTL_DEV
    net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, net)
    else:
        attr = struct.pack("=Q", handled)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, buffer,
                                  ctypes.c_size_t(len(attr)),
                                  ctypes.c_uint32(0)),
                     "landlock_create_ruleset")
    try:
        for path in readable_paths(readable, hidden):
            _add_rule(libc, ruleset, path, _FS_READ_FILE | _FS_READ_DIR,
                      handled)
        for path in listed_paths(readable, hidden):
            _add_rule(libc, ruleset, path, _FS_READ_DIR, handled)
        writes = handled & ~_FS_EXECUTE
        _add_rule(libc, ruleset, scratch, writes, handled)
        _add_rule(libc, ruleset, os.devnull,
                  _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE, handled)
        _check(libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF,
                            ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    finally:
        os.close(ruleset)


class _Program:
    """A tiny classic-BPF assembler with forward labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: object = 0, jf: object = 0
           ) -> None:
        self.code.append((code, jt, jf, k & 0xFFFFFFFF))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = b""
        for index, (code, jt, jf, k) in enumerate(self.code):
            jumps = []
            for target in (jt, jf):
                if isinstance(target, str):
                    target = self.labels[target] - index - 1
                if not 0 <= int(target) <= 255:
                    raise ValueError("BPF jump out of range")
                jumps.append(int(target))
            out += struct.pack("=HBBI", code, jumps[0], jumps[1], k)
        return out


def seccomp_program(machine: str, pid: int) -> bytes:
    """The worker's seccomp filter for ``machine``, as raw sock_filters."""
    arch = _ARCHES[machine]
    p = _Program()
    p.op(_LD_W_ABS, _OFFSET_ARCH)
    p.op(_JEQ_K, arch["arch"], 0, "deny")   # a foreign ABI: refuse all
    p.op(_LD_W_ABS, _OFFSET_NR)
    if arch["x32"]:
        p.op(_JGE_K, _X32_BIT, "deny", 0)
    for number in sorted(arch["denied"].values()):
        p.op(_JEQ_K, number, "deny", 0)
    p.op(_JEQ_K, arch["clone"], "clone", 0)
    p.op(_JEQ_K, arch["clone3"], "enosys", 0)
    p.op(_JEQ_K, arch["kill"], "kill", 0)
    p.op(_JEQ_K, arch["tgkill"], "tgkill", 0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("clone")            # threads only
    p.op(_LD_W_ABS, _OFFSET_ARG0)
    p.op(_JSET_K, _CLONE_THREAD, "allow", "deny")
    p.label("kill")             # itself, its own process group
    p.op(_LD_W_ABS, _OFFSET_ARG0)
    p.op(_JEQ_K, pid, "allow", 0)
    p.op(_JEQ_K, 0, "allow", 0)
    p.op(_JEQ_K, -pid, "allow", "deny")
    p.label("tgkill")           # its own threads
    p.op(_LD_W_ABS, _OFFSET_ARG0)
    p.op(_JEQ_K, pid, "allow", "deny")
    p.label("allow")
    p.op(_RET_K, _RET_ALLOW)
    p.label("deny")
    p.op(_RET_K, _RET_ERRNO | _EPERM)
    p.label("enosys")
    p.op(_RET_K, _RET_ERRNO | _ENOSYS)
    return p.assemble()


def thread_seal_program(machine: str) -> bytes:
    """The second filter, installed once the worker has every thread it
    needs: ``clone`` and ``clone3`` are refused whatever their flags
    (EPERM), so no thread can start by any route. Stacked on
    :func:`seccomp_program`'s (the kernel runs both; a refusal wins)."""
    arch = _ARCHES[machine]
    p = _Program()
    p.op(_LD_W_ABS, _OFFSET_ARCH)
    p.op(_JEQ_K, arch["arch"], 0, "deny")
    p.op(_LD_W_ABS, _OFFSET_NR)
    p.op(_JEQ_K, arch["clone"], "deny", 0)
    p.op(_JEQ_K, arch["clone3"], "deny", 0)
    p.op(_RET_K, _RET_ALLOW)
    p.label("deny")
    p.op(_RET_K, _RET_ERRNO | _EPERM)
    return p.assemble()


def _filter_buffer(program: bytes) -> tuple[ctypes.Structure, object]:
    """A ``sock_fprog`` for ``program`` and the buffer it points to (keep
    both alive until the system call returns)."""
    filters = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort),
                    ("filter", ctypes.c_void_p)]

    return SockFprog(len(program) // 8, ctypes.addressof(filters)), filters


def _apply_seccomp(libc: ctypes.CDLL) -> None:
    fprog, _filters = _filter_buffer(
        seccomp_program(platform.machine(), os.getpid()))
    _check(libc.prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                      ctypes.byref(fprog), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)), "seccomp")


def seal_threads() -> tuple[str, ...]:
    """Refuse every new thread from now on, in every thread of the
    process: :func:`thread_seal_program` installed with
    ``SECCOMP_FILTER_FLAG_TSYNC``. Call it once the worker's own threads
    run (the submission's thread) and before any code of the submission.
    Returns the problems (empty when sealed), worded as
    :class:`Confinement`'s."""
    if not seccomp_supported():
        return (f"threads not sealed: no seccomp filter for "
                f"{platform.machine() or platform.system()}",)
    machine = platform.machine()
    try:
        libc = _libc()
        # Already set by confine(); a filter needs it (idempotent).
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1),
                          ctypes.c_ulong(0), ctypes.c_ulong(0),
                          ctypes.c_ulong(0)), "no_new_privs")
        fprog, _filters = _filter_buffer(thread_seal_program(machine))
        # TSYNC: 0, or the id of a thread that could not take the filter.
        result = libc.syscall(
            ctypes.c_long(_ARCHES[machine]["seccomp"]),
            ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
            ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
        if result > 0:
            return (f"threads not sealed: thread {result} could not take "
                    f"the filter",)
        _check(result, "seccomp(TSYNC)")
    except OSError as exc:
        return (f"threads not sealed: {exc}",)
    return ()


def refused_thread_starts(start_thread: Callable[..., object]
                          ) -> tuple[Callable[[], int] | None, str]:
    """Return ``count()``, the thread starts the seal refused since the
    last call, and a problem (empty when the count works). Call it just
    after :func:`seal_threads`, with the real ``_thread.start_new_thread``.

    The kernel refuses without telling anyone, and CPython's error is
    that of any failed start; but CPython makes the new thread's state
    (``PyThreadState``, numbered in order) before it asks the kernel, and
    keeps it in the interpreter's list when the start fails (3.11). Once
    the seal holds no thread can start, so every thread state numbered
    after the seal is a refused start, whatever route asked for it (a
    second copy of ``_thread``, ``threading``, C code). The count is
    checked here with a start of the grader's own (refused, so counted):
    where it does not count that one, it says so and returns None."""
    # Function objects of their own (``pythonapi[name]`` makes a new one;
    # ``pythonapi.name`` is cached where the submission could reach it).
    api = ctypes.pythonapi
    try:
        interpreter = api["PyInterpreterState_Get"]
        head = api["PyInterpreterState_ThreadHead"]
        after = api["PyThreadState_Next"]
        number = api["PyThreadState_GetID"]
    except AttributeError as exc:
        return None, f"refused thread starts not counted: {exc}"
    interpreter.restype = head.restype = after.restype = ctypes.c_void_p
    head.argtypes = after.argtypes = number.argtypes = [ctypes.c_void_p]
    number.restype = ctypes.c_uint64
    b_max, b_len = max, len

    def numbers() -> list[int]:
        found, state = [], head(interpreter())
        while state:
            found.append(number(state))
            state = after(state)
        return found

    last = [b_max(numbers())]

    def count() -> int:
        fresh = [n for n in numbers() if n > last[0]]
        if fresh:
            last[0] = b_max(fresh)
        return b_len(fresh)

    try:
        start_thread(int, ())
    except RuntimeError:
        pass
    else:
        return None, "refused thread starts not counted: threads start"
    if count() != 1:
        return None, ("refused thread starts not counted: this Python "
                      "keeps no state of a refused start")
    return count, ""


def bound_scratch(libc: ctypes.CDLL, scratch: str, size: int,
                  files: int) -> None:
    """Make ``scratch`` a filesystem of its own that holds at most
    ``size`` bytes and ``files`` files and folders: a tmpfs mounted on
    it in a mount namespace of this process's own (with a user namespace
    of its own when this process may not mount: an ordinary user). What
    the worker writes past it fails ("No space left on device"); the
    grader's process sees the folder it made, empty, and the tmpfs
    vanishes with the worker. Must run single-threaded, before the
    capabilities are dropped; becomes the working folder again."""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWNS) != 0:
        _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare")
        for name, text in (("setgroups", "deny"),
                           ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w", encoding="ascii") as out:
                out.write(text)
    _check(libc.mount(b"none", b"/", None,
                      ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None),
           "mount (private)")
    options = f"size={size},nr_inodes={files},mode=0700"
    _check(libc.mount(b"tmpfs", os.fsencode(scratch), b"tmpfs",
                      ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC),
                      options.encode()), "mount (tmpfs)")
    os.chdir(scratch)


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Clear every capability (a no-op for an ordinary user). A worker
    forked from a grader running as root keeps uid 0 (the files it needs
    stay readable) but loses what root may do beyond the file modes:
    override them, signal or trace any process, read any process's
    memory or environment."""
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2
    _check(libc.capset(header, data), "capset")


def confine(scratch: str, readable: list[str] | tuple[str, ...],
            hidden: list[str] | tuple[str, ...] = (),
            quota: list[int] | None = None) -> Confinement:
    """Apply Landlock and seccomp to this (single-threaded) process.

    Reading is allowed in the ``readable`` trees (the interpreter, the
    libraries, the student-facing package) except ``hidden`` (the kit's
    grader, reference, tests), writing in ``scratch`` alone; with
    ``quota`` (bytes, files), at most that much (:func:`bound_scratch`;
    where it cannot be set, ``scratch_bound`` says why and the grader
    measures the folder).

    Must run in the worker before student code and before any thread is
    started: both apply to the calling thread and to what it creates.
    Once the worker's own threads run, :func:`seal_threads` refuses every
    new one.
    """
    if platform.system() != "Linux":
        return Confinement(problems=("not Linux",))
    problems: list[str] = []
    scratch = os.path.realpath(scratch)
    bound = "not asked"
    try:
        libc = _libc()
        if quota:
            try:
                bound_scratch(libc, scratch, int(quota[0]), int(quota[1]))
                bound = "tmpfs"
            except OSError as exc:
                bound = f"measured by the grader ({exc})"
        _drop_capabilities(libc)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1),
                          ctypes.c_ulong(0), ctypes.c_ulong(0),
                          ctypes.c_ulong(0)), "no_new_privs")
    except OSError as exc:
        return Confinement(problems=(str(exc),), scratch_bound=bound)
    abi = landlock_abi()
    if abi:
        try:
            _apply_landlock(libc, abi, scratch, list(readable),
                            list(hidden))
        except OSError as exc:
            problems.append(str(exc))
            abi = 0
    else:
        problems.append("Landlock is not available")
    applied = False
    if seccomp_supported():
        try:
            _apply_seccomp(libc)
            applied = True
        except OSError as exc:
            problems.append(str(exc))
    else:
        problems.append(f"no seccomp filter for {platform.machine()}")
    return Confinement(landlock_abi=abi, seccomp=applied,
                       problems=tuple(problems), scratch_bound=bound)


def die_with_parent(parent: int) -> None:
    """Be killed (SIGKILL) when the process that forked this one dies.

    A worker whose grading process is killed from outside (an
    administrator, the OOM killer, a batch that gives up) must not live on,
    hung, as an orphan. Called right after fork, before the sandbox closes
    ctypes; if the parent is already gone, exit at once.
    """
    import signal

    try:
        _libc().prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL),
                      ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(75)
