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

    found = []
    try:
        with os.scandir(folder) as scan:
            for item in scan:
                if len(found) >= 4 * MAX_LISTING:
                    raise BatchError(f"{label(str(folder))} holds more "
                                     f"than {4 * MAX_LISTING} entries")
                if not item.name.startswith((".", "__")):
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


def _course(submitted: Path, assignment: str | None) -> ClassFolder:
    """The students of an nbgrader ``submitted/`` folder."""
    students = [p for p in _visible(submitted)
                if p.is_dir() and not p.is_symlink()]
    names: set[str] = set()
    for student in students:
        names |= {p.name for p in _visible(student)
                  if p.is_dir() and not p.is_symlink()}
    if assignment and assignment in names:
        folder = assignment
    elif len(names) == 1:
        folder = next(iter(names))
    elif not names:
        raise BatchError(f"{label(str(submitted))} holds no "
                         f"submitted/<student>/<assignment>/ folder: "
                         f"collect the submissions first")
    else:
        shown = ", ".join(label(n) for n in sorted(names)[:10])
        raise BatchError(f"{label(str(submitted))} holds several "
                         f"assignments ({shown}): choose one with "
                         f"--assignment")
    found = []
    for path in _visible(submitted):
        problem = "" if path in students else (
            "not a student folder of the nbgrader course")
        where = path / folder
        if not problem and not (where.is_dir() and not where.is_symlink()):
            problem = f"has no submission of {label(folder)}"
        found.append((path.name, where if not problem else path, problem))
    from grader.rubric import assignments

    known = {a.id for a in assignments()}
    return ClassFolder(_name_entries(found), "nbgrader",
                       folder if folder in known else None,
                       [f"nbgrader course: {len(found)} students, "
                        f"assignment folder {label(folder)}"])


def _one_submission(folder: Path) -> str:
    """What makes ``folder`` one submission ('' when nothing does)."""
    from grader.rubric import assignments

    for assignment in assignments():
        for inside in (Path("transformer_lm") / f"{assignment.module}.py",
                       Path("assignment") / assignment.id):
            if os.path.lexists(folder / inside):
                return str(inside)
    return ""


def discover(folder: Path, assignment: str | None = None,
             exclude: tuple[Path, ...] = ()) -> ClassFolder:
    """The students of the class folder ``folder`` (see the module
    docstring). ``exclude``: the batch's own outputs, if they lie inside.
    Raises :class:`BatchError` for a folder that is not a class folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BatchError(f"{label(str(folder))} is not a folder")
    config = folder / COURSE_CONFIG
    if config.is_file() and not config.is_symlink():
        submitted = folder / SUBMITTED
        if not (submitted.is_dir() and not submitted.is_symlink()):
            raise BatchError(f"{label(str(folder))} is an nbgrader course "
                             f"({COURSE_CONFIG}) without a {SUBMITTED}/ "
                             f"folder: collect the submissions first")
        return _course(submitted, assignment)
    real = Path(os.path.realpath(folder))
    if real.name == SUBMITTED and (real.parent / COURSE_CONFIG).is_file():
        return _course(folder, assignment)
    inside = _one_submission(folder)
    if inside:
        raise BatchError(f"{label(str(folder))} is one submission (it "
                         f"holds {inside}), not a class folder: grade it "
                         f"with python -m grader grade, or give the "
                         f"folder that holds one entry per student")
    # realpath, unlike Path.resolve, never raises on a symlink loop.
    excluded = {os.path.realpath(p) for p in exclude}
    found = [(path.name, path, _entry_problem(path))
             for path in _visible(folder)
             if os.path.realpath(path) not in excluded]
    if not any(not problem for _, _, problem in found):
        from grader.locate.submission import what_is_there

        raise BatchError(f"{label(str(folder))} is neither a class folder "
                         f"nor a submission: no entry is a folder, a .py "
                         f"file or a notebook (it holds "
                         f"{what_is_there(folder)})")
    return ClassFolder(_name_entries(found), "flat")


def class_assignment(entries: list[Entry]) -> tuple[str, str]:
    """The assignment the class as a whole fits, and a sentence saying
    how it was chosen: each gradable entry votes for the assignment it
    fits best; most votes win (ties: the larger total share implemented,
    then rubric order). Raises :class:`BatchError` when no entry defines
    any graded name."""
    from grader.locate.submission import SubmissionError, assess, best_fit
    from grader.rubric import assignments

    order = [a.id for a in assignments()]
    votes = {a: 0 for a in order}
    shares = {a: 0.0 for a in order}
    for entry in entries:
        if entry.problem:
            continue
        try:
            fits = assess(entry.path)
        except (SubmissionError, OSError, RecursionError, MemoryError):
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
