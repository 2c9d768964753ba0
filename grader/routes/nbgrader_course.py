"""The nbgrader course as the grader sees it: the route of an assignment
(its kit assignment and autograded cells, checked against the rubric), the
submissions in ``submitted/``, their staging, and the verdict each
autograded cell gets. No nbgrader class is defined here (see
:mod:`grader.routes.nbgrader_steps`); docs/nbgrader.md tells the story.
"""
from __future__ import annotations

import base64
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader.errors import GraderError
from grader.locate.loading import load_source
from grader.locate.source import SourceError
from grader.output.files import write_atomic
from grader.output.notebook import (cell_heading, cell_items, cell_points,
                                    cell_text, grade_id, nbgrader_credits)
from grader.output.text import clean, listing, one_line
from grader.routes.classfolder import entry_keys
from grader.routes.rows import RECORD, STATUS_ERROR
from grader.rubric import Assignment, assignments, get_assignment

MAX_FILE_BYTES = 50 * 1024 * 1024
REPORT_INTRO = "The grader's report on this submission:"


class CourseError(GraderError):
    """A course or assignment that cannot be graded: one line, exit 2."""


@dataclass(frozen=True)
class GradedCell:
    """An autograded cell of the source notebook and its rubric item."""

    item: str
    grade_id: str
    points: float
    source: str
    checksum: str


@dataclass(frozen=True)
class Route:
    """What grades an nbgrader assignment: a kit assignment, a notebook,
    and the nbgrader metadata every known cell of it must carry."""

    assignment_id: str
    notebook_id: str
    kit: Assignment
    cells: tuple[GradedCell, ...]
    metadata: dict[str, dict]
    release: Path | None

    @property
    def notebook_name(self) -> str:
        """The graded notebook's file name."""
        return f"{self.notebook_id}.ipynb"

    def as_json(self) -> dict:
        """The route as plain data (the kit assignment by its id)."""
        return {"assignment_id": self.assignment_id,
                "notebook_id": self.notebook_id, "kit": self.kit.id,
                "cells": [vars(c) for c in self.cells],
                "metadata": self.metadata,
                "release": str(self.release) if self.release else None}

    @classmethod
    def from_json(cls, data: dict) -> Route:
        """The route :meth:`as_json` describes."""
        return cls(data["assignment_id"], data["notebook_id"],
                   get_assignment(data["kit"]),
                   tuple(GradedCell(**c) for c in data["cells"]),
                   data["metadata"],
                   Path(data["release"]) if data["release"] else None)


@dataclass
class Verdict:
    """What one student's autograded cells show and earn."""

    credits: dict[str, float]            # grade id -> credit
    texts: dict[str, str]                # grade id -> the cell's message
    images: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # grade id -> extra credit: a bonus, recorded beyond the cell's points
    extra: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict:
        """The verdict as plain data."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        """The verdict :meth:`as_json` describes."""
        return cls({k: float(v) for k, v in data["credits"].items()},
                   dict(data["texts"]), dict(data.get("images", {})),
                   list(data.get("notes", [])),
                   {k: float(v) for k, v in data.get("extra", {}).items()})


def _kit_notebook(notebooks: list[str], kit_id: str | None
                  ) -> tuple[Assignment, str]:
    if kit_id:
        kit = get_assignment(kit_id)
        stem = Path(kit.notebook).stem
        if stem in notebooks:
            return kit, stem
        if len(notebooks) == 1:
            return kit, notebooks[0]
        raise CourseError(f"the assignment has notebooks "
                          f"{', '.join(notebooks)}; none is {kit.notebook}")
    matches = [(kit, Path(kit.notebook).stem) for kit in assignments()
               if Path(kit.notebook).stem in notebooks]
    if len(matches) != 1:
        known = ", ".join(f"{k.notebook} ({k.id})" for k in assignments())
        raise CourseError(f"no notebook of this assignment "
                          f"({', '.join(notebooks) or 'none'}) is a kit "
                          f"notebook ({known}); name the kit assignment "
                          f"with --kit-assignment")
    return matches[0]


def resolve_route(coursedir: Any, assignment_id: str,
                  kit_id: str | None = None) -> Route:
    """The route of ``assignment_id``, checked against the kit's rubric."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(coursedir.db_url, coursedir.course_id) as gradebook:
        try:
            found = gradebook.find_assignment(assignment_id)
        except MissingEntry:
            raise CourseError(
                f"assignment {assignment_id!r} is not in the gradebook "
                f"({coursedir.db_url}): run nbgrader generate_assignment "
                f"{assignment_id} first") from None
        kit, notebook_id = _kit_notebook(
            sorted(n.name for n in found.notebooks), kit_id)
        notebook = gradebook.find_notebook(notebook_id, assignment_id)
        solutions = {c.name for c in notebook.solution_cells}
        grades = {c.name: c for c in notebook.grade_cells}
        tasks = {c.name: c for c in notebook.task_cells}
        autograded = {name: c for name, c in grades.items()
                      if c.cell_type == "code" and name not in solutions}
        wanted = {grade_id(item): item for item in cell_items(kit)}
        extra = sorted(set(autograded) - set(wanted))
        missing = sorted(set(wanted) - set(autograded))
        if extra or missing:
            raise CourseError(
                f"the autograded cells of {notebook_id}.ipynb do not match "
                f"the rubric of {kit.id}: "
                + "; ".join(part for part in (
                    f"not rubric items: {', '.join(extra)}" if extra else "",
                    f"missing: {', '.join(missing)}" if missing else "")
                    if part))
        cells = []
        for name, item in wanted.items():
            points = cell_points(kit, item)
            if float(autograded[name].max_score) != points:
                bonus = (" (a bonus cell is worth 0: nbgrader records the "
                         "bonus as its extra credit)"
                         if kit.item(item).kind == "bonus" else "")
                raise CourseError(
                    f"cell {name} of {notebook_id}.ipynb is worth "
                    f"{autograded[name].max_score:g} points; its cell for "
                    f"{item} is worth {points:g}{bonus}: regenerate the "
                    f"assignment from the kit's source notebook (nbgrader "
                    f"generate_assignment {assignment_id} --force)")
            source = gradebook.find_source_cell(name, notebook_id,
                                                assignment_id)
            cells.append(GradedCell(item, name, points, source.source,
                                    source.checksum))
        metadata = {}
        for source in notebook.source_cells:
            meta = {"grade": source.name in grades,
                    "grade_id": source.name, "locked": source.locked,
                    "schema_version": 3,
                    "solution": source.name in solutions,
                    "task": source.name in tasks,
                    "cell_type": source.cell_type}
            scored = grades.get(source.name) or tasks.get(source.name)
            if scored is not None:
                meta["points"] = float(scored.max_score)
            metadata[source.name] = meta
    release = Path(coursedir.format_path(coursedir.release_directory, ".",
                                         assignment_id)) / \
        f"{notebook_id}.ipynb"
    return Route(assignment_id, notebook_id, kit, tuple(cells), metadata,
                 release if release.is_file() else None)


@dataclass
class Submitted:
    """One student's folder in ``submitted/`` and what is graded of it."""

    student: str
    folder: Path
    notebook: Path
    staged: Path | None = None
    problem: str = ""
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    key: str = ""           # the report folder's name (grader.routes.batch)

    def as_json(self) -> dict:
        """The submission as plain data."""
        return {"student": self.student, "folder": str(self.folder),
                "notebook": str(self.notebook),
                "staged": str(self.staged) if self.staged else None,
                "problem": self.problem, "notes": self.notes,
                "warnings": self.warnings, "key": self.key}

    @classmethod
    def from_json(cls, data: dict) -> Submitted:
        """The submission :meth:`as_json` describes."""
        return cls(data["student"], Path(data["folder"]),
                   Path(data["notebook"]),
                   Path(data["staged"]) if data["staged"] else None,
                   data["problem"], list(data["notes"]),
                   list(data["warnings"]), data.get("key", ""))


def find_submissions(coursedir: Any, route: Route,
                     students: list[str] | None = None) -> list[Submitted]:
    """Every ``submitted/<student>/<assignment>/`` folder, as nbgrader
    finds them (those of ``students`` when given: each must have one)."""
    import glob
    import re

    pattern = coursedir.format_path(coursedir.submitted_directory,
                                    "(?P<student_id>[^/]+)",
                                    re.escape(route.assignment_id),
                                    escape=True)
    excluded = set(filter(None, coursedir.student_id_exclude.split(",")))
    found: dict[str, Path] = {}
    for path in glob.glob(coursedir.format_path(
            coursedir.submitted_directory, "*",
            glob.escape(route.assignment_id))):
        match = re.fullmatch(pattern, path)
        if match and Path(path).is_dir() and \
                match.group("student_id") not in excluded:
            found[match.group("student_id")] = Path(path)
    # Report folders are named for the whole class at once (so that a
    # --student run finds the others' where a full run put them).
    keys = entry_keys(list(found))
    if students:
        unknown = [s for s in students if s not in found]
        if unknown:
            expected = coursedir.format_path(coursedir.submitted_directory,
                                             "<student>",
                                             route.assignment_id)
            raise CourseError(
                f"no submission of {route.assignment_id} for "
                f"{listing([clean(s) for s in unknown], 5)} (expected "
                f"{expected})")
        found = {s: found[s] for s in students}
    return [Submitted(s, folder, folder / route.notebook_name,
                      key=keys[s])
            for s, folder in sorted(found.items())]


# --------------------------------------------------------------------------
# Staging: only the submission's own files are graded


def own_file(folder: Path, relative: str) -> tuple[Path | None, str]:
    """``folder/relative`` if it is a regular file of the submission."""
    path = folder / relative
    if not path.exists() and not path.is_symlink():
        return None, ""
    try:
        resolved = path.resolve(strict=True)
        inside = resolved.is_relative_to(folder.resolve(strict=True))
    except (OSError, RuntimeError):
        return None, f"{relative} is a broken link: not graded"
    if not inside:
        return None, (f"{relative} is a link to a file outside the "
                      f"submission: not graded")
    if not resolved.is_file():
        return None, f"{relative} is not a regular file: not graded"
    if resolved.stat().st_size > MAX_FILE_BYTES:
        return None, (f"{relative} is larger than "
                      f"{MAX_FILE_BYTES // 2 ** 20} MB: not graded")
    return resolved, ""


def stage(submitted: Submitted, route: Route, root: Path,
          stage_root: Path, index: int) -> None:
    """Copy what is graded to ``stage_root/<index>/``, with the course's
    layout, so that the grader sees the submission's files and nothing
    else (no module of a parent folder, no link out of the submission)."""
    folder = submitted.folder
    try:
        relative = folder.relative_to(root)
    except ValueError:
        relative = Path("submitted") / submitted.student / \
            route.assignment_id
    target = stage_root / str(index) / relative
    module = route.kit.module
    names = [route.notebook_name, f"transformer_lm/{module}.py",
             f"{module}.py"]
    for name in names:
        path, problem = own_file(folder, name)
        if problem:
            if name == route.notebook_name:
                submitted.problem = problem
                return
            submitted.notes.append(problem)
            continue
        if path is None:
            if name == route.notebook_name:
                others = sorted(p.name for p in folder.iterdir()) \
                    if folder.is_dir() else []
                submitted.problem = (
                    f"no {name} in the submission (it holds: "
                    f"{listing([clean(o) for o in others], 8) or 'nothing'})")
                return
            continue
        if name == route.notebook_name:
            # The notebook is the submission: one that cannot be read is
            # not graded (its reason shown), never replaced by the module.
            try:
                load_source(path)
            except SourceError as exc:
                # Said to the student: the file by its name in the
                # submission, never the instructor's path.
                submitted.problem = one_line(
                    str(exc).replace(str(path), name), 300)
                return
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)
    submitted.staged = target / route.notebook_name


def timestamp_problem(folder: Path) -> list[str]:
    """nbgrader stops at a ``timestamp.txt`` that is not a date; the route
    records such a submission without a time, and says so."""
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return []
    try:
        if text:
            parse_utc(text)
        return []
    except Exception:
        return [f"timestamp.txt is not a date ({clean(one_line(text, 60))}):"
                f" recorded without a submission time"]


# --------------------------------------------------------------------------
# Verdicts: what each autograded cell shows and earns


def _images(feedback: Path, item_id: str) -> list[str]:
    pictures = sorted(feedback.glob(f"{item_id}__*.png"),
                      key=lambda p: p.name)
    return [base64.b64encode(p.read_bytes()).decode("ascii")
            for p in pictures]


def replaced(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [replaced(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: replaced(v, old, new) for k, v in value.items()}
    return value


def unstage(record: dict | None, reports: Path, key: str, staged: str,
            real: str) -> dict | None:
    """The course's path, not the staging folder's, in the judge's record
    and in the reports it saved (in the report folder ``key``); returns
    the record so mended."""
    for path in (reports / key / RECORD, reports / key / "report.json"):
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        write_atomic(path, json.dumps(replaced(saved, staged, real),
                                      indent=2) + "\n")
    text_report = reports / key / "report.txt"
    try:
        text = text_report.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if staged in text:
        write_atomic(text_report, text.replace(staged, real))
    return replaced(record, staged, real)


def verdict_from(route: Route, row: dict, record: dict | None,
                 feedback: Path) -> Verdict:
    """The verdict of one judged submission; ``feedback`` holds the
    judge's report.txt and figures."""
    if record is None or row["status"] == STATUS_ERROR or \
            "report" not in record:
        return failed_verdict(route, row["errors"] or "could not grade")
    report = record["report"]
    credits = nbgrader_credits(report, route.kit)
    texts, images = {}, {}
    for cell in route.cells:
        texts[cell.grade_id] = cell_text(report, route.kit, cell.item)
        images[cell.grade_id] = _images(feedback, cell.item)
    try:
        full = (feedback / "report.txt").read_text(encoding="utf-8")
    except OSError:
        full = ""
    if full:
        first = route.cells[0].grade_id
        texts[first] += "\n\n" + REPORT_INTRO + "\n" + clean(full).rstrip()
    bonus = {c.grade_id for c in route.cells
             if route.kit.item(c.item).kind == "bonus"}
    return Verdict({c.grade_id: 0.0 if c.grade_id in bonus
                    else float(credits.get(c.item, 0.0))
                    for c in route.cells}, texts, images,
                   extra={c.grade_id: float(credits.get(c.item, 0.0))
                          for c in route.cells if c.grade_id in bonus})


def failed_verdict(route: Route, reason: str) -> Verdict:
    """0 in every autograded cell, each saying why."""
    reason = one_line(reason.removeprefix("could not grade: "), 1000)
    texts = {}
    for cell in route.cells:
        texts[cell.grade_id] = clean(
            f"{cell_heading(route.kit, cell.item, 0.0)}\n"
            f"Not graded: {reason}")
    bonus = {c.grade_id: 0.0 for c in route.cells
             if route.kit.item(c.item).kind == "bonus"}
    return Verdict({c.grade_id: 0.0 for c in route.cells}, texts,
                   extra=bonus)


def course_verdict(route: Route, submitted: Submitted, row: dict,
                   record: dict | None, staged: str, real: str,
                   reports: Path) -> Verdict:
    """What ``submitted``'s cells get: the judge's record (or the reason it
    has none), the staging prefix ``staged`` replaced by the course's
    ``real`` path in every saved report, the staging notes first."""
    if record is None or row["status"] == STATUS_ERROR:
        verdict = failed_verdict(route, row["errors"] or "could not grade")
    else:
        record = unstage(record, reports, submitted.key, staged, real)
        verdict = verdict_from(route, row, record,
                               reports / submitted.key)
    verdict.notes = submitted.notes + submitted.warnings + verdict.notes
    return for_the_student(verdict, submitted, real)


def for_the_student(verdict: Verdict, submitted: Submitted,
                    real: str) -> Verdict:
    """``verdict`` with the instructor's folders left out of what the
    student reads: files named relative to their submission."""
    prefixes = []
    for folder in (submitted.folder, submitted.folder.resolve()):
        prefixes.append(f"{folder}/")
    prefixes.append(f"{real}/")

    def relative(text: str) -> str:
        for prefix in prefixes:
            text = text.replace(prefix, "")
        return text

    verdict.texts = {k: relative(v) for k, v in verdict.texts.items()}
    verdict.notes = [relative(n) for n in verdict.notes]
    return verdict
