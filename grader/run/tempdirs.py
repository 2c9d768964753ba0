"""The grader's temporary folders: one per process, removed at its end,
swept by the next run when its process was killed (trusted side).

Details: docs/internals.md, `grader.run.tempdirs`.
"""
from __future__ import annotations

import atexit
import os
import stat
import tempfile
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no lock, no sweep (the kit grades nothing)
    fcntl = None  # type: ignore[assignment]

__all__ = ["PREFIX", "make", "release", "remove_tree", "run_folder",
           "sweep"]

#: The name of a process's run folder in the temporary folder:
#: ``grader-run-<pid>-<random>``; its process holds a lock on it.
PREFIX = "grader-run-"
_FRESH = ".grader-new-"   # before its lock is taken: never swept
#: Folders of the kit before run folders existed, and fresh ones whose
#: process died before it locked them: swept when older than LEGACY_AGE
#: seconds (a grader of an older version may still use a newer one).
LEGACY = ("grader-scratch-", "grader-zip-", "grader-nbgrader-",
          "grader-verdicts-", _FRESH)
LEGACY_AGE = 3600.0
#: (pid of the process that made it, its path, the locked descriptor).
_held: list[tuple[int, Path, int]] = []


def run_folder() -> Path:
    """This process's run folder, made (and the dead runs' swept) on the
    first call. A forked child makes its own: its parent's is removed when
    the parent ends, whatever the child still does."""
    if _held and _held[-1][0] == os.getpid():
        return _held[-1][1]
    if not _held:
        sweep()  # once per process tree: a forked child inherits _held
    base = tempfile.gettempdir()
    fresh = tempfile.mkdtemp(prefix=_FRESH, dir=base)
    fd = os.open(fresh, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        folder = Path(base, f"{PREFIX}{os.getpid()}-"
                      f"{Path(fresh).name[len(_FRESH):]}")
        os.rename(fresh, folder)
    except BaseException:
        os.close(fd)
        os.rmdir(fresh)
        raise
    _held.append((os.getpid(), folder, fd))
    atexit.register(release)
    return folder


def make(prefix: str) -> Path:
    """A fresh private folder named ``prefix...`` in the run folder."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=run_folder()))


def release() -> None:
    """Remove this process's run folder and all it holds (at its end;
    a forked child that ends with ``os._exit`` calls it itself). A
    folder made by another process (the parent of a fork) is left."""
    while _held and _held[-1][0] == os.getpid():
        _, folder, fd = _held.pop()
        remove_tree(folder)
        os.close(fd)


def sweep(base: str | Path | None = None) -> int:
    """Remove the run folders of processes that ended without removing
    theirs (killed with SIGKILL): a folder whose lock nobody holds. The
    count removed. Never fails: what cannot be removed stays."""
    base = Path(base or tempfile.gettempdir())
    removed = 0
    try:
        names = os.listdir(base)
    except OSError:
        return 0
    now = time.time()
    for name in names:
        path = base / name
        if name.startswith(PREFIX):
            removed += _sweep_run(path)
        elif name.startswith(LEGACY):
            removed += _sweep_legacy(path, now)
    return removed


def _sweep_run(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        if fcntl is None or os.fstat(fd).st_uid != os.geteuid():
            return 0
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # its process (or a child of it) still runs
        os.close(fd)
        return 0
    try:
        remove_tree(path)
    finally:
        os.close(fd)
    return 1


def _sweep_legacy(path: Path, now: float) -> int:
    try:
        found = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() \
            or now - found.st_mtime < LEGACY_AGE:
        return 0
    remove_tree(path)
    return 0 if os.path.lexists(path) else 1


def remove_tree(path: str | Path) -> None:
    """Delete the folder ``path`` and all it holds, however deep, with
    nothing that grows with its depth: no recursion (``shutil.rmtree``
    recurses, and a worker's scratch folder 3,000 folders deep made it
    raise RecursionError, which ``ignore_errors`` does not catch), no
    path longer than two names, at most two descriptors open. The
    children of each sub-folder of ``path`` are moved up into ``path``
    until every entry is a file or an empty folder; no link is followed.
    What cannot be deleted stays, silently."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    moved = 0
    try:
        while True:
            with os.scandir(top) as listing:
                entries = [(e.name, e.is_dir(follow_symlinks=False))
                           for e in listing]
            progress = False
            for name, is_folder in entries:
                try:
                    if not is_folder:
                        os.unlink(name, dir_fd=top)
                    elif not _removed_folder(top, name):
                        moved = _lift(top, name, moved)
                    progress = True
                except OSError:
                    continue
            if not entries or not progress:
                break
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _removed_folder(top: int, name: str) -> bool:
    try:
        os.rmdir(name, dir_fd=top)
    except OSError:
        return False
    return True


def _lift(top: int, name: str, moved: int) -> int:
    """Move the children of the folder ``name`` (in ``top``) up into
    ``top`` under fresh names; the count of names used so far."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        folder = os.open(name, flags, dir_fd=top)
    except PermissionError:  # a folder the worker made unreadable
        os.chmod(name, 0o700, dir_fd=top)
        folder = os.open(name, flags, dir_fd=top)
    try:
        with os.scandir(folder) as listing:
            children = [entry.name for entry in listing]
        for child in children:
            moved += 1
            try:
                os.rename(child, f".grader-removing-{moved}",
                          src_dir_fd=folder, dst_dir_fd=top)
            except OSError:  # that name is a folder already: next name
                continue
    finally:
        os.close(folder)
    return moved
