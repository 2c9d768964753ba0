"""A class folder read as entries, one a student (see
:mod:`grader.routes.batch` for the rules): discovery, report keys and the
assignment the class as a whole fits."""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import BatchError
from grader.locate.submission import label

SUBMISSION_SUFFIXES = (".py", ".ipynb", ".zip")


COURSE_CONFIG = "nbgrader_config.py"


SUBMITTED = "submitted"


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Folders tools leave beside the students' (macOS's zip metadata,
# Python's bytecode cache), never a student's: with hidden entries, all
# a listing leaves out. Any other entry is one (``__carol.py`` too).
TOOL_FOLDERS = frozenset({"__MACOSX", "__pycache__"})


@dataclass(frozen=True)
class Entry:
    """One student's submission in the batch folder.

    ``student`` is what the CSV and the terminal show (escaped); ``key``
    names the student's report folder (safe and unique); ``problem``, when
    set, is why the entry cannot be graded (it gets an error row without
    a judge).
    """

    student: str
    path: Path
    key: str = ""
    problem: str = ""

    def __post_init__(self) -> None:
        if not self.key:  # a caller that names no key gets a safe one
            name = Path(self.path).name
            object.__setattr__(self, "key", entry_keys([name])[name])


@dataclass
class ClassFolder:
    """What ``batch`` found in DIR."""

    entries: list[Entry]
    layout: str                          # "nbgrader" or "flat"
    assignment: str | None = None        # named by the layout, if any
    notes: list[str] = field(default_factory=list)


def entry_keys(names: list[str]) -> dict[str, str]:
    """A safe, unique report-folder name for each entry name.

    ASCII letters, digits, ``_``, ``.`` and ``-`` only, never starting
    with a dot or a dash; a name that had to change, or that shares its
    lower-case form with another (a case-insensitive disk would merge
    them), gets a short hash of its bytes.
    """
    bases = {name: _UNSAFE.sub("_", name).lstrip(".-")[:80] or "entry"
             for name in names}
    lower = [base.lower() for base in bases.values()]
    keys: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(names):
        base = bases[name]
        if base != name or lower.count(base.lower()) > 1:
            digest = hashlib.sha256(os.fsencode(name)).hexdigest()
            base = f"{base}-{digest[:10]}"
        key, number = base, 1
        while key.lower() in taken:
            number += 1
            key = f"{base}-{number}"
        taken.add(key.lower())
        keys[name] = key
    return keys


def _entry_problem(path: Path) -> str:
    """Why an entry of a flat folder cannot be graded ('' if it can)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(mode):
        return ("is a symbolic link; the batch follows no links (copy the "
                "submission into the class folder)")
    if stat.S_ISDIR(mode):
        return ""
    if not stat.S_ISREG(mode):
        from grader.locate.submission import refusal

        return refusal(path, path.parent.resolve()) or "is not a file"
    if path.suffix not in SUBMISSION_SUFFIXES:
        return (f"not a submission: a {path.suffix or 'suffix-less'} file "
                f"(hand in a .py file, a notebook, a folder or a .zip)")
    return ""


def _visible(folder: Path) -> list[Path]:
    from grader.locate.submission import MAX_LISTING

    found: list[Path] = []
    try:
        with os.scandir(folder) as scan:
            for item in scan:
                if len(found) >= 4 * MAX_LISTING:
                    raise BatchError(f"{label(str(folder))} holds more "
                                     f"than {4 * MAX_LISTING} entries")
                if item.name.startswith(".") or (
                        item.name in TOOL_FOLDERS and
                        item.is_dir(follow_symlinks=False)):
                    continue
                found.append(folder / item.name)
    except OSError as exc:
        raise BatchError(f"cannot list {label(str(folder))}: "
                         f"{exc.strerror}") from exc
    return sorted(found, key=lambda p: os.fsencode(p.name))


def _name_entries(found: list[tuple[str, Path, str]]) -> list[Entry]:
    """Entries from (name, path, problem): students are file stems unless
    two entries share a stem (then the full names)."""
    def stem(name: str, path: Path) -> str:
        return (name[:-len(path.suffix)] if path.suffix in
                SUBMISSION_SUFFIXES and not path.is_dir() and
                len(name) > len(path.suffix) else name)

    stems = [stem(n, p) for n, p, _ in found]
    keys = entry_keys([n for n, _, _ in found])
    entries = []
    for (name, path, problem), short in zip(found, stems):
        shown = short if stems.count(short) == 1 else name
        entries.append(Entry(label(shown), path, keys[name], problem))
    return entries


def _real_folder(path: Path) -> bool:
    """A folder that is not a link (never raises)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _assignment_folders(student: Path) -> set[str]:
    """The assignment folders one student's folder holds (none when it
    cannot be listed: that student's row says so, nobody else's)."""
    try:
        return {p.name for p in _visible(student) if _real_folder(p)}
    except BatchError:
        return set()


def _course_assignment(submitted: Path, counts: dict[str, int],
                       assignment: str | None) -> str:
    """The assignment folder graded: ``assignment`` if some student holds
    it, else the one most students hold. One student cannot decide it:
    a folder only one student holds never outvotes one that several
    hold, and a tie is settled by the kit's own assignment ids, then by
    the course's ``source/`` and ``release/`` folders."""
    if assignment and assignment in counts:
        return assignment
    if not counts:
        raise BatchError(f"{label(str(submitted))} holds no "
                         f"submitted/<student>/<assignment>/ folder: "
                         f"collect the submissions first")
    top = max(counts.values())
    tied = sorted(n for n, c in counts.items() if c == top)
    if len(tied) > 1:
        from grader.rubric import assignments

        known = {a.id for a in assignments()}
        root = submitted.parent
        released = {p.name for name in ("source", "release")
                    if _real_folder(root / name)
                    for p in _visible(root / name) if _real_folder(p)}
        for narrowing in (known, released):
            if len(set(tied) & narrowing) >= 1:
                tied = sorted(set(tied) & narrowing)
    if len(tied) > 1:
        shown = ", ".join(label(n) for n in tied[:10])
        raise BatchError(f"{label(str(submitted))} holds several "
                         f"assignments ({shown}): choose one with "
                         f"--assignment")
    return tied[0]


def _course(submitted: Path, assignment: str | None) -> ClassFolder:
    """The students of an nbgrader ``submitted/`` folder."""
    students = [p for p in _visible(submitted) if _real_folder(p)]
    counts: dict[str, int] = {}
    for student in students:
        for name in _assignment_folders(student):
            counts[name] = counts.get(name, 0) + 1
    folder = _course_assignment(submitted, counts, assignment)
    found = []
    for path in _visible(submitted):
        problem = "" if path in students else (
            "not a student folder of the nbgrader course")
        where = path / folder
        if not problem and not _real_folder(where):
            problem = f"has no submission of {label(folder)}"
        found.append((path.name, where if not problem else path, problem))
    from grader.rubric import assignments

    known = {a.id for a in assignments()}
    return ClassFolder(_name_entries(found), "nbgrader",
                       folder if folder in known else None,
                       [f"nbgrader course: {len(found)} students, "
                        f"assignment folder {label(folder)}"])


def _one_submission(folder: Path) -> tuple[Path, str] | None:
    """The entry of ``folder`` that makes it one submission, and what it
    holds (None when nothing does)."""
    from grader.rubric import assignments

    for assignment in assignments():
        for inside in (Path("transformer_lm") / f"{assignment.module}.py",
                       Path("assignment") / assignment.id):
            if os.path.lexists(folder / inside):
                return folder / inside.parts[0], str(inside)
    return None


def _student_like(path: Path) -> bool:
    """Whether the entry ``path`` is, on its own, a submission that
    defines some assignment's graded names (never raises)."""
    from grader.locate.submission import assess, best_fit

    try:
        if os.path.islink(path):
            return False
        return best_fit(assess(path, timeout=5.0)) is not None
    except Exception:  # an entry that cannot be read is no evidence
        return False


# Folders of an nbgrader course root beside submitted/ (not students).
COURSE_FOLDERS = frozenset({"source", "release", "autograded", "feedback",
                            SUBMITTED})


def _is_course(folder: Path, visible: list[Path]) -> bool:
    """Whether ``folder`` is an nbgrader course root: it holds
    ``nbgrader_config.py`` and ``submitted/``, and nothing beside them is
    itself a student's submission (in a flat class, entries named
    ``nbgrader_config.py`` and ``submitted/`` are two students' entries,
    and every other student keeps a row)."""
    config, submitted = folder / COURSE_CONFIG, folder / SUBMITTED
    if not (os.path.isfile(config) and not os.path.islink(config)
            and _real_folder(submitted)):
        return False
    return not any(_student_like(p) for p in visible
                   if p.name not in COURSE_FOLDERS | {COURSE_CONFIG})


def _refusal(folder: Path, visible: list[Path]) -> str:
    """Why ``folder`` is not a class folder ('' when it is one).

    No single entry decides it: a reason that one entry gives (a file
    named ``nbgrader_config.py``, a folder named ``transformer_lm/`` or
    ``assignment/``) refuses the folder only when the rest of it holds no
    student's submission, or when another entry gives a reason too.
    """
    reasons: list[tuple[Path, str]] = []
    config = folder / COURSE_CONFIG
    if os.path.isfile(config) and not os.path.islink(config) \
            and not _real_folder(folder / SUBMITTED):
        reasons.append((config, (
            f"{label(str(folder))} is an nbgrader course ({COURSE_CONFIG}) "
            f"without a {SUBMITTED}/ folder: collect the submissions "
            f"first")))
    marker = _one_submission(folder)
    if marker:
        reasons.append((marker[0], (
            f"{label(str(folder))} is one submission (it holds "
            f"{marker[1]}), not a class folder: grade it with python -m "
            f"grader grade, or give the folder that holds one entry per "
            f"student")))
    gradable = [p for p in visible if not _entry_problem(p)]
    if not gradable:
        from grader.locate.submission import what_is_there

        return (f"{label(str(folder))} is neither a class folder nor a "
                f"submission: no entry is a folder, a .py file or a "
                f"notebook (it holds {what_is_there(folder)})")
    if not reasons:
        return ""
    causes = {cause for cause, _ in reasons}
    if len(causes) == 1 and any(_student_like(p) for p in gradable
                                if p not in causes):
        return ""
    return reasons[0][1]


def discover(folder: Path, assignment: str | None = None,
             exclude: tuple[Path, ...] = ()) -> ClassFolder:
    """The students of the class folder ``folder`` (see the module
    docstring). ``exclude``: the batch's own outputs, if they lie inside.
    Raises :class:`BatchError` for a folder that is not a class folder;
    never for what one student's entry is named or holds."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BatchError(f"{label(str(folder))} is not a folder")
    # realpath, unlike Path.resolve, never raises on a symlink loop.
    excluded = {os.path.realpath(p) for p in exclude}
    visible = [path for path in _visible(folder)
               if os.path.realpath(path) not in excluded]
    if _is_course(folder, visible):
        return _course(folder / SUBMITTED, assignment)
    real = Path(os.path.realpath(folder))
    if real.name == SUBMITTED and (real.parent / COURSE_CONFIG).is_file():
        return _course(folder, assignment)
    why = _refusal(folder, visible)
    if why:
        raise BatchError(why)
    return ClassFolder(_name_entries([(path.name, path, _entry_problem(path))
                                      for path in visible]), "flat")


def class_assignment(entries: list[Entry]) -> tuple[str, str]:
    """The assignment the class as a whole fits, and a sentence saying
    how it was chosen: each gradable entry votes for the assignment it
    fits best; most votes win (ties: the larger total share implemented,
    then rubric order). Raises :class:`BatchError` when no entry defines
    any graded name."""
    from grader.locate.submission import assess, best_fit
    from grader.rubric import assignments

    order = [a.id for a in assignments()]
    votes = {a: 0 for a in order}
    shares = {a: 0.0 for a in order}
    for entry in entries:
        if entry.problem:
            continue
        try:
            fits = assess(entry.path)
        except Exception:  # that entry's own judge says why
            continue
        best = best_fit(fits)
        if best is not None:
            votes[best] += 1
            for assignment, fit in fits.items():
                shares[assignment] += fit.implemented
    if not any(votes.values()):
        raise BatchError("no entry of the class folder defines any "
                         "assignment's graded classes or functions: it is "
                         "neither a class folder nor a submission "
                         "(--assignment names the assignment)")
    chosen = max(order, key=lambda a: (votes[a], shares[a],
                                       -order.index(a)))
    total = sum(votes.values())
    return chosen, (f"assignment {chosen}: the one {votes[chosen]} of "
                    f"{total} recognised submissions fit best "
                    f"(--assignment chooses)")
