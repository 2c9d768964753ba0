"""Finding a submission and the source each task is graded from (trusted).

Details: docs/internals.md, `grader.locate.submission`.
"""
from __future__ import annotations

import ast
import os
import re
import signal
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import GraderError
from grader.locate.loading import load_source
from grader.locate.source import (SourceError, SourceFile, find_class,
                                  find_function)
from grader.output.report import Flag
from grader.output.text import listing, one_line
from grader.rubric import Assignment, assignments, get_assignment
from transformer_lm.notebook import marked_regions_only_raise

# Seconds that locating and reading one submission may take.
LOCATE_TIMEOUT = 20.0
# Entries read from one folder listing; a folder with more is refused.
MAX_LISTING = 5000
# Notebooks, and top-level .py files, considered in one folder.
MAX_NOTEBOOKS = 20
MAX_TOP_LEVEL_PY = 20
# How deep a chain of lone wrapper folders is followed.
MAX_WRAPPERS = 3
# Folders that never hold a student's work (a wrapper of that name is not
# looked into either).
NOT_STUDENT_FOLDERS = frozenset({
    "solutions", "tests", "docs", "examples", "bench", "build", "dist",
    "node_modules", "site-packages", "venv", "env", "__pycache__",
    "__MACOSX"})
# Tool configuration at a folder's top, never a student's work.
NOT_STUDENT_FILES = frozenset({"nbgrader_config.py", "setup.py",
                               "conftest.py", "noxfile.py"})
PACKAGE = "transformer_lm"
RELEASE = "assignment"
WRONG_ASSIGNMENT = "wrong_assignment"
REFUSED_FILE = "refused_file"

_DEFINITION = re.compile(
    r"[ \t\f]*(?:async[ \t\f]+)?(?:class|def)[ \t\f]+(\w+)")
_TOP_ASSIGNMENT = re.compile(r"(\w+)[ \t\f]*(?::[^=\n]*)?=(?!=)")


class SubmissionError(GraderError):
    """The path cannot be graded (missing, unreadable, nothing in it)."""


@dataclass(frozen=True)
class Submission:
    """A located submission: its assignment and each task's source."""

    path: Path
    assignment: Assignment
    sources: dict[str, SourceFile]
    notes: tuple[str, ...] = field(default_factory=tuple)
    flags: tuple[Flag, ...] = field(default_factory=tuple)
    recognised: bool = False


@dataclass(frozen=True)
class Fit:
    """How well a submission fits an assignment: the shares of its graded
    names that the submission implements and defines."""

    implemented: float
    defined: float

    def key(self) -> tuple[float, float]:
        """The ranking key (implemented first)."""
        return (self.implemented, self.defined)


# --------------------------------------------------------------------------
# Recognition: what a source defines, and whether it is the stub


def defined_names(text: str) -> frozenset[str]:
    """The names ``text`` defines with ``class``/``def`` (at any depth) or
    assigns at the top level.

    One pass over the lines, each matched at its start only: linear in
    the text whatever it holds (40,000 blank lines cost nothing). Works on
    text that does not parse, so a broken file is still recognised.
    """
    names = set()
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        match = _DEFINITION.match(line)
        if match is None and line[:1].isidentifier():
            match = _TOP_ASSIGNMENT.match(line)
        if match is not None:
            names.add(match.group(1))
    return frozenset(names)


def _parse(source: SourceFile) -> ast.Module | None:
    try:
        return source.parse()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def is_stub(source: SourceFile, name: str,
            tree: ast.Module | None = None) -> bool | None:
    """Whether ``name`` is the untouched stub.

    True when every student region (between the YOUR CODE markers) of
    ``name`` only raises NotImplementedError; False when the student wrote
    something, or removed every marker; None when ``name`` is not defined
    at the top level or the source does not parse (which counts as the
    student's work). The notebook's
    :func:`transformer_lm.notebook.use_implemented` applies the same rule.
    """
    tree = tree if tree is not None else _parse(source)
    if tree is None:
        return None
    node = find_class(tree, name) or find_function(tree, name)
    if node is None:
        return None
    functions = [node] if isinstance(node, ast.FunctionDef) else [
        n for n in node.body if isinstance(n, ast.FunctionDef)]
    lines = source.lines
    try:
        verdicts = [marked_regions_only_raise(f, lines) for f in functions]
    except (IndexError, RecursionError):
        return None
    verdicts = [v for v in verdicts if v is not None]
    return bool(verdicts) and all(verdicts)


@dataclass
class _Loaded:
    """A candidate source, read, with what it defines."""

    source: SourceFile
    module: str | None          # the assignment module it belongs to
    nearby: bool                # beside the named file, not the file itself
    defined: frozenset[str]
    _tree: ast.Module | None = None
    _parsed: bool = False
    _stubs: dict[str, bool | None] = field(default_factory=dict)

    def eligible(self, assignment: Assignment) -> bool:
        """Whether this candidate may hold ``assignment``'s work."""
        return self.module is None or self.module == assignment.module

    def stub(self, name: str) -> bool | None:
        """:func:`is_stub`, parsing once."""
        if name not in self._stubs:
            if not self._parsed:
                self._tree, self._parsed = _parse(self.source), True
            self._stubs[name] = (is_stub(self.source, name, self._tree)
                                 if self._tree is not None else None)
        return self._stubs[name]

    def implements(self, name: str) -> bool:
        """Defines ``name`` with something other than the stub."""
        return name in self.defined and self.stub(name) is not True


def fit(assignment: Assignment, loaded: list[_Loaded]) -> Fit:
    """How well the candidates fit ``assignment``."""
    names = assignment.signature or tuple(t.target for t in
                                          assignment.tasks)
    mine = [c for c in loaded if c.eligible(assignment)]
    defined = [n for n in names if any(n in c.defined for c in mine)]
    implemented = [n for n in defined if any(c.implements(n)
                                             for c in mine)]
    count = max(len(names), 1)
    return Fit(len(implemented) / count, len(defined) / count)


def best_fit(fits: dict[str, Fit]) -> str | None:
    """The assignment id with the best fit (ties: rubric order), or None
    when the submission defines none of any assignment's graded names."""
    ranked = sorted(fits, key=lambda a: fits[a].key(), reverse=True)
    if not ranked or fits[ranked[0]].defined == 0:
        return None
    return ranked[0]


# --------------------------------------------------------------------------
# The deadline


class _Deadline:
    """A time budget, checked between steps and, in the main thread,
    enforced by a timer that interrupts a step that hangs."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def check(self) -> None:
        """Raise :class:`SubmissionError` once the budget is spent."""
        if time.monotonic() > self.end:
            raise self.error()

    def error(self) -> SubmissionError:
        """The error that says the budget is spent."""
        return SubmissionError(f"locating the submission took longer than "
                               f"{self.seconds:g} s")


class _Expired(BaseException):
    """Raised by the timer's signal handler (a BaseException, so that no
    ``except Exception`` on the way swallows it)."""


@contextmanager
def _enforced(deadline: _Deadline) -> Iterator[None]:
    usable = (threading.current_thread() is threading.main_thread()
              and hasattr(signal, "setitimer")
              and signal.getitimer(signal.ITIMER_REAL)[0] == 0)
    if not usable:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise _Expired()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(deadline.seconds, 0.01))
    try:
        yield
    except _Expired:
        raise deadline.error() from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------
# What may be read


def label(name: str) -> str:
    """An entry name as the CSV and the terminal show it: printable
    characters kept, backslashes doubled, every control or invisible
    character and every undecodable byte escaped (``\\x1b``, ``\\xff``,
    ``\\u202e``), so no name can move the cursor or pass for another."""
    out = []
    for char in name:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:     # an undecodable byte (PEP 383)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char == "\\":
            out.append("\\\\")
        elif not char.isprintable():
            out.append(f"\\x{code:02x}" if code <= 0xFF
                       else f"\\u{code:04x}" if code <= 0xFFFF
                       else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def show(path: Path, root: Path | None = None, limit: int = 160) -> str:
    """``path`` (relative to ``root`` when inside it) in double quotes for
    a report or an error: :func:`label` escapes, quotes escaped, at most
    ``limit`` characters."""
    if root is not None:
        try:
            path = path.relative_to(root)
        except ValueError:
            pass
    text = label(str(path)).replace('"', '\\"')
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return f'"{text}"'


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"),
                       (stat.S_ISDIR, "folder")):
        if test(mode):
            return name
    return "special file"


def refusal(path: Path, inside: Path) -> str | None:
    """Why ``path`` may not be read, or None when it is a regular file
    whose real location lies inside the folder ``inside`` (resolved).

    Nothing is opened: only ``lstat``/``stat`` and link resolution.
    """
    try:
        os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return "is a broken or looping symbolic link"
    if not real.is_relative_to(inside):
        return "is (or lies behind) a symbolic link that leaves the " \
               "submission"
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISREG(mode):
        return f"is a {_kind(mode)}, not a regular file"
    return None


def _listing(folder: Path) -> list[os.DirEntry]:
    """The visible entries of ``folder`` (sorted by name), bounded."""
    entries: list[os.DirEntry[str]] = []
    try:
        with os.scandir(folder) as scan:
            for entry in scan:
                if len(entries) >= MAX_LISTING:
                    raise SubmissionError(
                        f"{show(folder)} holds more than {MAX_LISTING} "
                        f"entries; hand in only your work")
                if not entry.name.startswith((".", "__")):
                    entries.append(entry)
    except OSError as exc:
        raise SubmissionError(f"cannot list {show(folder)}: "
                              f"{exc.strerror}") from exc
    return sorted(entries, key=lambda e: e.name)


def _is_real_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


@dataclass(frozen=True)
class _Candidate:
    path: Path
    module: str | None
    nearby: bool = False


def _owners(wanted: list[Assignment]) -> dict[str, str]:
    """Release notebook name -> its assignment's module (among those
    wanted): a release notebook holds its own homework
    (transformer_block's ships the previous homework's attention whole,
    which must not make it fit that homework)."""
    return {a.notebook: a.module for a in wanted}


def _top_level(root: Path, entries: list[os.DirEntry], modules: set[str],
               owners: dict[str, str]) -> list[_Candidate]:
    files = [e for e in entries if not _is_real_folder(e)
             and e.name not in NOT_STUDENT_FILES]
    notebooks = [e for e in files if e.name.endswith(".ipynb")]
    scripts = [e for e in files if e.name.endswith(".py")]
    # A file named as a module comes before other names.
    scripts.sort(key=lambda e: (e.name[:-3] not in modules, e.name))
    found = [_Candidate(root / e.name, owners.get(e.name))
             for e in notebooks[:MAX_NOTEBOOKS]]
    found += [_Candidate(root / e.name, None)
              for e in scripts[:MAX_TOP_LEVEL_PY]]
    return found


def _package_modules(folder: Path, modules: set[str]) -> list[_Candidate]:
    return [_Candidate(folder / PACKAGE / f"{module}.py", module)
            for module in sorted(modules)
            if os.path.lexists(folder / PACKAGE / f"{module}.py")]


def folder_candidates(root: Path, wanted: list[Assignment]
                      ) -> tuple[Path, list[_Candidate]]:
    """Where a student's work may be in the folder ``root``.

    Returns the folder actually searched (``root``, or the lone wrapper
    folder inside it) and the candidate paths, in grading order.
    """
    modules = {a.module for a in wanted}
    owners = _owners(wanted)
    for _ in range(MAX_WRAPPERS + 1):
        entries = _listing(root)
        found = _top_level(root, entries, modules, owners)
        found += _package_modules(root, modules)
        release = root / RELEASE
        if os.path.isdir(release) and not os.path.islink(release):
            for assignment in wanted:
                folder = release / assignment.id
                if not os.path.isdir(folder) or os.path.islink(folder):
                    continue
                found += [c for c in _top_level(
                    folder, _listing(folder), modules, owners)
                    if c.path.suffix == ".ipynb"]
                found += _package_modules(folder, {assignment.module})
        if found:
            return root, found
        folders = [e for e in entries if _is_real_folder(e)]
        if len(folders) != 1 or folders[0].name in NOT_STUDENT_FOLDERS:
            return root, []
        root = root / folders[0].name
    return root, []


def what_is_there(root: Path, limit: int = 10) -> str:
    """The top-level entries of ``root``, quoted, for an error message."""
    try:
        with os.scandir(root) as scan:
            names = []
            for entry in scan:
                names.append(entry.name + ("/" if _is_real_folder(entry)
                                           else ""))
                if len(names) > MAX_LISTING:
                    break
    except OSError:
        return "nothing readable"
    if not names:
        return "nothing (the folder is empty)"
    return listing([show(Path(n), limit=80) for n in sorted(names)], limit)


# --------------------------------------------------------------------------
# Gathering


@dataclass
class _Gathered:
    root: Path                  # the folder paths are shown relative to
    named: Path                 # the path the user named
    loaded: list[_Loaded]
    notes: list[str]
    flags: list[Flag]
    problems: list[str]         # why candidates were not used


def _load(candidate: _Candidate, inside: Path, root: Path, named: bool,
          gathered: _Gathered) -> None:
    why = refusal(candidate.path, inside)
    if why is not None:
        message = f"{show(candidate.path, root)} {why}: it was not read"
        if named:
            raise SubmissionError(message)
        gathered.flags.append(Flag(REFUSED_FILE, message))
        gathered.problems.append(message)
        return
    try:
        # A link that stays inside the submission (checked above) is read
        # through its target: the reader opens no symbolic link itself.
        source = load_source(candidate.path.resolve()
                             if candidate.path.is_symlink()
                             else candidate.path)
    except SourceError as exc:
        if named:
            raise SubmissionError(one_line(str(exc))) from exc
        gathered.notes.append(f"{show(candidate.path, root)} was not "
                              f"graded: {one_line(str(exc), 200)}")
        gathered.problems.append(f"{show(candidate.path, root)}: "
                                 f"{one_line(str(exc), 200)}")
        return
    except (RecursionError, MemoryError) as exc:
        message = (f"{show(candidate.path, root)} is too deeply nested or "
                   f"too large to read ({type(exc).__name__})")
        if named:
            raise SubmissionError(message) from None
        gathered.notes.append(message)
        gathered.problems.append(message)
        return
    gathered.loaded.append(_Loaded(source, candidate.module,
                                   candidate.nearby,
                                   defined_names(source.text)))
    for error in source.cell_errors[:5]:
        # Each error says what of its cell the kernel runs.
        gathered.notes.append(f"{show(candidate.path, root)}, {error}")
    for note in source.notes[:5]:
        # What the grader cannot know of the kernel's run (principle 7).
        gathered.notes.append(f"{show(candidate.path, root)}, {note}")


def _gather(path: Path, wanted: list[Assignment], nearby: bool,
            deadline: _Deadline) -> _Gathered:
    named = Path(path)
    if not os.path.lexists(named):
        raise SubmissionError(f"no such file or folder: {show(named)}")
    try:
        real = named.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise SubmissionError(f"{show(named)} is a broken or looping "
                              f"symbolic link") from exc
    if real.is_file() and named.suffix.lower() == ".zip":
        from grader.locate.archive import ArchiveError, extracted

        try:
            folder = extracted(real)
        except (ArchiveError, OSError) as exc:
            raise SubmissionError(f"{show(named)} cannot be graded: {exc}; "
                                  f"hand in the files themselves or a "
                                  f"plain zip of them") from exc
        return _gather(folder, wanted, False, deadline)
    if real.is_dir():
        searched, candidates = folder_candidates(named, wanted)
        gathered = _Gathered(searched, named, [], [], [], [])
        if not candidates:
            expected = " or ".join(f"{PACKAGE}/{a.module}.py"
                                   for a in wanted)
            raise SubmissionError(
                f"no submission found in {show(named)}: expected a "
                f"notebook, a .py file or {expected}; it holds "
                f"{what_is_there(named)}")
        for candidate in candidates:
            deadline.check()
            _load(candidate, real, searched, False, gathered)
        return gathered
    why = refusal(named, real.parent)
    if why is not None:
        raise SubmissionError(f"{show(named)} {why}")
    base = named.parent
    gathered = _Gathered(base, named, [], [], [], [])
    _load(_Candidate(named, _owners(wanted).get(named.name)), real.parent,
          base, True, gathered)
    if nearby and named.suffix == ".ipynb":
        modules = {a.module for a in wanted}
        extra = _package_modules(base, modules) + [
            _Candidate(base / f"{m}.py", m) for m in sorted(modules)
            if os.path.lexists(base / f"{m}.py")]
        inside = base.resolve()
        for candidate in extra:
            deadline.check()
            _load(_Candidate(candidate.path, candidate.module, True),
                  inside, base, False, gathered)
    return gathered


def _fits(gathered: _Gathered, own_only: bool) -> dict[str, Fit]:
    loaded = [c for c in gathered.loaded if not (own_only and c.nearby)]
    return {a.id: fit(a, loaded) for a in assignments()}


def _nothing_defined(gathered: _Gathered, names: list[str]) -> str:
    if gathered.problems and not gathered.loaded:
        # Nothing could be read: why is the message, not what is missing.
        return (f"{show(gathered.named)} cannot be graded: "
                f"{listing(gathered.problems, 3)}")
    shown = listing([show(c.source.path, gathered.root)
                     for c in gathered.loaded], 10)
    message = (f"nothing in {show(gathered.named)} defines "
               f"{listing(names, 4)}")
    if gathered.loaded:
        message += f" (read: {shown})"
    if gathered.problems:
        message += f"; not used: {listing(gathered.problems, 3)}"
    if gathered.named.is_dir():
        message += f"; it holds {what_is_there(gathered.named)}"
    return message


# --------------------------------------------------------------------------
# Locating


def assess(path: Path, nearby: bool = False,
           timeout: float = LOCATE_TIMEOUT) -> dict[str, Fit]:
    """How well the submission at ``path`` fits each assignment.

    ``batch`` uses it to find the assignment the class as a whole fits.
    Raises :class:`SubmissionError` when the path cannot be read.
    """
    deadline = _Deadline(timeout)
    with _enforced(deadline):
        gathered = _gather(Path(path), list(assignments()), nearby,
                           deadline)
        fits = _fits(gathered, own_only=True)
        if best_fit(fits) is None and nearby:
            fits = _fits(gathered, own_only=False)
    return fits


def locate(path: Path, assignment_id: str | None = None, *,
           nearby: bool = True,
           timeout: float = LOCATE_TIMEOUT) -> Submission:
    """Find the submission at ``path`` and the source of each task.

    ``assignment_id``: the assignment the route grades (``--assignment``,
    the bundle's, the class's); None lets the submission's own files
    decide. ``nearby``: whether a notebook's module beside it may be
    graded (False in a batch, where the files beside an entry are
    classmates'). Locating stops after ``timeout`` seconds.
    """
    named = get_assignment(assignment_id) if assignment_id else None
    deadline = _Deadline(timeout)
    with _enforced(deadline):
        gathered = _gather(Path(path), list(assignments()), nearby,
                           deadline)
        fits = _fits(gathered, own_only=True)
        if best_fit(fits) is None:
            fits = _fits(gathered, own_only=False)
        best = best_fit(fits)
        if best is None and named is not None and gathered.loaded \
                and not gathered.named.is_dir():
            # A file named for a named assignment is graded even when it
            # defines none of the graded names (a class may sit in a cell
            # that does not parse): every task earns 0 and says why.
            best = named.id
        if best is None:
            names = [n for a in ([named] if named else assignments())
                     for n in a.signature]
            raise SubmissionError(_nothing_defined(gathered, names))
        notes: list[str] = []
        flags = list(gathered.flags)
        if named is None:
            assignment = get_assignment(best)
            tied = [a for a in fits if a != best
                    and fits[a].key() == fits[best].key()]
            why = (f"; it fits {', '.join(tied)} equally (nothing tells "
                   f"them apart)" if tied else "")
            notes.append(f"Assignment {assignment.id}: recognised from "
                         f"what the submission defines{why}; "
                         f"--assignment chooses another")
        else:
            assignment = named
            # Wrong work, not more work: a kit folder with the warm-up
            # done and the homework begun is the homework's.
            if (fits[best].key() > fits[named.id].key()
                    and fits[named.id].implemented == 0):
                flags.insert(0, _wrong_assignment(named, get_assignment(
                    best), fits))
        sources = _choose_sources(assignment, gathered)
        notes += _graded_from(assignment, sources, gathered)
        notes += gathered.notes
    return Submission(path=Path(path), assignment=assignment,
                      sources=sources, notes=tuple(notes),
                      flags=tuple(flags), recognised=named is None)


def _wrong_assignment(named: Assignment, better: Assignment,
                      fits: dict[str, Fit]) -> Flag:
    def share(assignment: Assignment) -> str:
        f = fits[assignment.id]
        count = len(assignment.signature)
        return (f"{round(f.implemented * count)} of {count} graded names "
                f"implemented, {round(f.defined * count)} defined")

    return Flag(WRONG_ASSIGNMENT,
                f"wrong assignment: this submission fits {better.id} "
                f"({share(better)}) better than {named.id} "
                f"({share(named)}), the assignment it was handed in for; "
                f"it was graded as {named.id}")


def _choose_sources(assignment: Assignment, gathered: _Gathered
                    ) -> dict[str, SourceFile]:
    mine = [c for c in gathered.loaded if c.eligible(assignment)]
    if not mine:
        mine = gathered.loaded
    sources = {}
    for task in assignment.tasks:
        defining = [c for c in mine if task.target in c.defined]
        chosen = next((c for c in defining if c.implements(task.target)),
                      defining[0] if defining else mine[0])
        sources[task.id] = chosen.source
    return sources


def _graded_from(assignment: Assignment, sources: dict[str, SourceFile],
                 gathered: _Gathered) -> list[str]:
    """The notes that say which file each task was graded from (and which
    other files hold work of the same names, not graded)."""
    groups: dict[Path, list[str]] = {}
    missing, others = [], []
    for task in assignment.tasks:
        source = sources[task.id]
        if task.target in defined_names(source.text):
            groups.setdefault(source.path, []).append(task.target)
        else:
            missing.append(task.target)
        others += [c.source.path for c in gathered.loaded
                   if c.source is not source and c.eligible(assignment)
                   and c.implements(task.target)]
    notes = [f"Graded from {show(path, gathered.root)}: "
             f"{', '.join(targets)}" for path, targets in groups.items()]
    if missing:
        notes.append(f"Defined nowhere in the submission: "
                     f"{', '.join(missing)}")
    if others:
        shown = listing([show(p, gathered.root) for p in others], 3)
        notes.append(f"Also written in {shown}, not graded (the first "
                     f"file that implements a task is graded)")
    return notes
