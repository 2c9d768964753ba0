"""``python -m grader nbgrader ASSIGNMENT_ID``: an nbgrader course, graded
outside the kernel.

Run in an nbgrader course root (where ``nbgrader_config.py`` and
``gradebook.db`` live), after ``nbgrader generate_assignment``, with the
students' work collected in ``submitted/<student>/<ASSIGNMENT_ID>/``. For
every submission it does what ``nbgrader autograde --create`` does, except
that no student code runs in a kernel:

1. **Grade.** The submitted notebook and the student module beside it
   (``transformer_lm/<module>.py`` or ``<module>.py``; regular files of the
   submission folder only, never a link that leaves it) are copied to a
   private staging folder and graded there by the batch engine
   (:func:`grader.routes.judges.judge_all`: a warm parent, one forked judge per
   submission, the sandboxed workers), exactly as ``python -m grader grade
   NOTEBOOK --assignment KIT_ID`` grades them.
2. **Record.** In a recording process of its own (:class:`Recorder`, fed
   as the judges finish, so that grading never waits for it), nbgrader's
   own ``Autograde`` converter writes the student and the submission into
   the gradebook (timestamp, late penalty), copies the submission to
   ``autograded/``, and runs its sanitizing preprocessors on the notebook
   (outputs cleared, graded cells restored from the source; before them,
   ``TrustGradebookCells`` makes the gradebook, not the submission, say
   which cells are graded), with its ``Execute`` step replaced by
   ``GraderOutputs``: each autograded cell's output is the grader's
   message for its rubric item and its value the item's credit (penalties
   absorbed per task, :func:`grader.output.notebook.nbgrader_credits`).
   ``SaveGraderScores`` then sets each autograded cell's automatic
   score from the grader's report, whatever the notebook holds. Manual
   grades (Q1-Q5, or an override of an automatic score) are never erased.

The kit assignment is the one whose notebook (``<kit id>.ipynb``) is a
notebook of the nbgrader assignment in the gradebook, or ``--kit-assignment
KIT_ID``; it is never detected from a submission. The source notebook must
have one autograded cell per checks and bonus item of the kit's rubric
(grade id ``task1_forward`` for ``task1.forward``), worth the item's points,
and no other autograded cell: a cell that only a kernel could grade cannot
be graded here.

A submission that cannot be graded (no notebook, an unreadable one, a
grader error) gets 0 in every autograded cell with the reason in the
cells' outputs, so ``nbgrader generate_feedback`` shows it; nobody
vanishes. The grader's rows also go to ``--out`` (default
``grader_results/<ASSIGNMENT_ID>.csv``), its JSON reports and feedback
files beside it.
"""
from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from grader.errors import BatchError, GraderError
from grader.locate.loading import load_source
from grader.locate.source import SourceError
from grader.output.files import write_atomic
from grader.output.notebook import (cell_items, cell_text, grade_id,
                                    nbgrader_credits)
from grader.output.text import clean, listing, one_line
from grader.routes.batch import Progress, check_writable, summarise
from grader.routes.classfolder import Entry, entry_keys
from grader.routes.judges import JudgeOptions, judge_all, prewarm
from grader.routes.rows import (RECORD, STATUS_ERROR, error_row,
                                row_from_report, write_csv)
from grader.rubric import Assignment, RubricError, assignments, get_assignment
from grader.run.proctree import fork_with_pipe

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


# --------------------------------------------------------------------------
# The course and the route


def open_course(root: Path) -> Any:
    """nbgrader's configuration of the course at ``root`` (an app whose
    ``coursedir`` is the course directory), as ``nbgrader`` loads it."""
    try:
        from nbgrader.apps.baseapp import NbGrader
    except ImportError as exc:
        raise CourseError("nbgrader is not installed: pip install -e "
                          "'.[dev]'") from exc

    class CourseApp(NbGrader):
        name = "python -m grader nbgrader"

    if not any((root / name).exists() for name in
               ("nbgrader_config.py", "gradebook.db", "submitted")):
        raise CourseError(f"{root} is not an nbgrader course root (no "
                          f"nbgrader_config.py, gradebook.db or "
                          f"submitted/)")
    app = CourseApp()
    try:
        app.initialize(["--log-level=ERROR"], root=str(root.resolve()))
    except SystemExit as exc:
        raise CourseError(f"nbgrader could not load {root}/"
                          f"nbgrader_config.py") from exc
    logging.getLogger("traitlets").setLevel(logging.ERROR)
    return app


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
            points = kit.item(item).points
            if float(autograded[name].max_score) != points:
                raise CourseError(
                    f"cell {name} of {notebook_id}.ipynb is worth "
                    f"{autograded[name].max_score:g} points; {item} is "
                    f"worth {points:g}")
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


def _own_file(folder: Path, relative: str) -> tuple[Path | None, str]:
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
        path, problem = _own_file(folder, name)
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
                submitted.problem = one_line(str(exc), 300)
                return
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)
    submitted.staged = target / route.notebook_name


def _timestamp_problem(folder: Path) -> list[str]:
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


def _replaced(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replaced(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replaced(v, old, new) for k, v in value.items()}
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
        write_atomic(path, json.dumps(_replaced(saved, staged, real),
                                      indent=2) + "\n")
    text_report = reports / key / "report.txt"
    try:
        text = text_report.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if staged in text:
        write_atomic(text_report, text.replace(staged, real))
    return _replaced(record, staged, real)


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
    return Verdict({c.grade_id: float(credits.get(c.item, 0.0))
                    for c in route.cells}, texts, images)


def failed_verdict(route: Route, reason: str) -> Verdict:
    """0 in every autograded cell, each saying why."""
    reason = one_line(reason.removeprefix("could not grade: "), 1000)
    texts = {}
    for cell in route.cells:
        title = route.kit.item(cell.item).title
        texts[cell.grade_id] = clean(
            f"{cell.item}: 0 / {cell.points:g}  ({title})\n"
            f"Not graded: {reason}")
    return Verdict({c.grade_id: 0.0 for c in route.cells}, texts)


# --------------------------------------------------------------------------
# Recording, through nbgrader's own converter


def _preprocessors() -> tuple[type, type, type]:
    """The three preprocessors of this route (nbgrader imported late)."""
    from nbformat.v4 import new_code_cell, new_output
    from nbgrader import utils
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import NbGraderPreprocessor

    class TrustGradebookCells(NbGraderPreprocessor):
        """The gradebook, not the submission, says which cells are graded:
        nbgrader metadata naming no cell of the source notebook is dropped
        and the metadata of a known cell is the source's."""

        def preprocess(self, nb, resources):
            known: dict[str, dict] = resources["grader"]["metadata"]
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader")
                if meta is None:
                    continue
                name = meta.get("grade_id") if isinstance(meta, dict) \
                    else None
                if not isinstance(name, str) or name not in known:
                    del cell.metadata["nbgrader"]
                    continue
                cell.metadata["nbgrader"] = dict(
                    known[name], checksum=meta.get("checksum", ""))
            return nb, resources

    class GraderOutputs(NbGraderPreprocessor):
        """In place of running a kernel: each autograded cell shows the
        grader's message and ends with its credit (nbgrader's partial
        credit); an autograded cell missing from the submission is put
        back at the end."""

        def preprocess(self, nb, resources):
            route: Route = resources["grader"]["route"]
            verdict: Verdict = resources["grader"]["verdict"]
            present = set()
            for cell in nb.cells:
                name = cell.metadata.get("nbgrader", {}).get("grade_id")
                if cell.cell_type == "code" and name in verdict.credits \
                        and utils.is_grade(cell):
                    present.add(name)
                    self._fill(cell, verdict, name)
            for spec in route.cells:
                if spec.grade_id in present:
                    continue
                cell = new_code_cell(source=spec.source, metadata={
                    "deletable": False, "editable": False,
                    "nbgrader": dict(route.metadata[spec.grade_id],
                                     checksum=spec.checksum)})
                self._fill(cell, verdict, spec.grade_id,
                           "This graded cell was missing from the "
                           "submission; the grader put it back.\n")
                nb.cells.append(cell)
            return nb, resources

        @staticmethod
        def _fill(cell, verdict: Verdict, name: str, note: str = "") -> None:
            text = note + "".join(f"Note: {n}\n" for n in verdict.notes)
            text += verdict.texts[name] + "\n"
            outputs = [new_output("stream", name="stdout", text=text)]
            for png in verdict.images.get(name, []):
                outputs.append(new_output("display_data",
                                          data={"image/png": png}))
            outputs.append(new_output(
                "execute_result", execution_count=None,
                data={"text/plain": repr(float(verdict.credits[name]))}))
            cell.outputs = outputs
            cell.execution_count = None

    class SaveGraderScores(NbGraderPreprocessor):
        """Each autograded cell's automatic score is the grader's credit,
        whatever the notebook holds; a manual override stays and is
        flagged for review, as nbgrader's SaveAutoGrades does."""

        def preprocess(self, nb, resources):
            ids = resources["nbgrader"]
            verdict: Verdict = resources["grader"]["verdict"]
            with Gradebook(ids["db_url"]) as gradebook:
                for name, credit in verdict.credits.items():
                    grade = gradebook.find_grade(
                        name, ids["notebook"], ids["assignment"],
                        ids["student"])
                    grade.auto_score = credit
                    grade.needs_manual_grade = \
                        grade.manual_score is not None
                gradebook.db.commit()
            return nb, resources

    return TrustGradebookCells, GraderOutputs, SaveGraderScores


def recorder(app: Any, route: Route) -> Any:
    """nbgrader's Autograde converter with its kernel replaced by the
    grader's verdicts: ``recorder(...).record(submitted, verdict)``."""
    import nbformat
    from nbconvert.writers import FilesWriter
    from nbgrader.converters import Autograde, BaseConverter
    from nbgrader.preprocessors import (AssignLatePenalties, Execute,
                                        SaveAutoGrades)
    from nbgrader.utils import find_all_files
    from sqlalchemy.exc import SAWarning

    # nbgrader's own gradebook code warns when it creates a submission.
    warnings.filterwarnings("ignore", category=SAWarning)
    trust, outputs, save = _preprocessors()

    class OwnFilesOnly(BaseConverter):
        """Copies the submission's files to ``autograded/`` as nbgrader
        does, except links that leave the submission."""

        def init_assignment(self, assignment_id: str,
                            student_id: str) -> None:
            source = Path(self._format_source(assignment_id, student_id))
            dest = Path(self._format_dest(assignment_id, student_id))
            ignore = self.coursedir.ignore + ["*.ipynb"]
            for name in find_all_files(str(source), ignore):
                relative = Path(name).relative_to(source)
                path, _ = _own_file(source, str(relative))
                if path is None:
                    continue
                target = dest / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists():
                    target.unlink()
                shutil.copyfile(path, target)

    class OutsideKernel(Autograde, OwnFilesOnly):
        """``nbgrader autograde --create --force`` without a kernel."""

        def _init_preprocessors(self) -> None:
            self.exporter._preprocessors = []
            steps = [trust, *self.sanitize_preprocessors]
            later = [outputs if p is Execute else p
                     for p in self.autograde_preprocessors]
            if outputs not in later:
                later.insert(0, outputs)
            if SaveAutoGrades in later:
                later.insert(later.index(SaveAutoGrades) + 1, save)
            elif AssignLatePenalties in later:
                later.insert(later.index(AssignLatePenalties), save)
            else:
                later.append(save)
            for step in dict.fromkeys(steps + later):  # each step once
                self.exporter.register_preprocessor(step)

        def record(self, submitted: Submitted, verdict: Verdict) -> str:
            """Write the student's gradebook entries and autograded
            notebook; return a problem to report (empty when none)."""
            student = submitted.student
            self.notebooks = [str(submitted.notebook)]
            self.init_destination(route.assignment_id, student)
            self.init_assignment(route.assignment_id, student)
            resources = self.init_single_notebook_resources(
                str(submitted.notebook))
            resources["grader"] = {"route": route, "verdict": verdict,
                                   "metadata": route.metadata}
            bases = []
            if submitted.staged is not None:
                bases.append(submitted.staged)
            elif route.release is not None:
                verdict.notes.append("the submitted notebook could not be "
                                     "used; shown here instead: the "
                                     "released notebook")
            if route.release is not None:
                bases.append(route.release)
            bases.append(None)
            names = {submitted.staged: "the submitted notebook",
                     route.release: "the released notebook",
                     None: "an empty notebook with the graded cells"}
            problem = ""
            for position, base in enumerate(bases):
                try:
                    if base is None:
                        node = nbformat.v4.new_notebook()
                    else:
                        node = nbformat.reads(base.read_text("utf-8"),
                                              as_version=4)
                    output, done = self.exporter.from_notebook_node(
                        node, resources=_copy(resources))
                    self.write_single_notebook(output, done)
                except Exception as exc:
                    problem = (f"nbgrader could not process {names[base]} "
                               f"({type(exc).__name__}: "
                               f"{one_line(str(exc), 200)})")
                    if position + 1 < len(bases):
                        verdict.notes.append(
                            f"{problem}; shown here instead: "
                            f"{names[bases[position + 1]]}")
                    continue
                problem = ""
                break
            self.set_permissions(route.assignment_id, student)
            return problem

    timestamp = app.coursedir.get_existing_timestamp

    def lenient_timestamp(path: str) -> Any:
        try:
            return timestamp(path)
        except Exception:  # not a date: warned about when staged
            return None

    app.coursedir.get_existing_timestamp = lenient_timestamp
    converter = OutsideKernel(coursedir=app.coursedir, parent=app)
    converter.force = True
    converter.writer = FilesWriter(parent=converter,
                                   config=converter.config)
    converter.exporter = converter.exporter_class(parent=converter,
                                                  config=converter.config)
    # Validate the notebook once, after every step, not after each one.
    converter.exporter.optimistic_validation = True
    converter._init_preprocessors()
    return converter


def _kept_rows(everyone: list[Submitted], chosen: set[str],
               reports: Path) -> dict[str, dict]:
    """The CSV rows of the students not graded by this run, from their
    saved reports (a ``--student`` run keeps the others' rows)."""
    rows = {}
    for other in everyone:
        if other.student in chosen:
            continue
        try:
            record = json.loads((reports / other.key / RECORD)
                                .read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if "report" in record:
            rows[other.student] = row_from_report(
                other.student, other.notebook, record["report"])
        elif record.get("errors") or record.get("error"):
            rows[other.student] = error_row(
                other.student, other.notebook,
                record.get("error") or record["errors"])
    return rows


@contextmanager
def one_engine_per_database() -> Iterator[None]:
    """nbgrader opens a new database engine for every ``Gradebook`` (a
    dozen per notebook), each recompiling its queries: share one engine
    per database URL while the route records."""
    import nbgrader.api

    create = nbgrader.api.create_engine
    engines: dict[str, Any] = {}

    def shared(url: str, **options: Any) -> Any:
        key = f"{url} {sorted(options.items())}"
        if key not in engines:
            engines[key] = create(url, **options)
        return engines[key]

    nbgrader.api.create_engine = shared
    try:
        yield
    finally:
        nbgrader.api.create_engine = create
        for engine in engines.values():
            engine.dispose()


def _copy(resources: dict) -> dict:
    copied = dict(resources)
    copied["nbgrader"] = dict(resources["nbgrader"])
    return copied


# --------------------------------------------------------------------------
# The command


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
    return verdict


class Recorder:
    """The nbgrader side of the route, in a process of its own, forked from
    the grader (so trusted) before anything heavy is imported: it opens the
    course and resolves the route (while the grader imports torch), then
    records the students one by one as their judges finish, fed through a
    pipe, so that the judges' loop never waits for nbgrader and nothing
    nbgrader does can stop the grading.

    ``plan()`` returns the route and the submissions (or raises
    :class:`CourseError`); ``send()`` queues a student; ``close()`` waits
    for the queue to drain and returns each student's recording problem.
    """

    END = b"end\n"

    def __init__(self, args: argparse.Namespace, root: Path,
                 stage_root: Path, reports: Path) -> None:
        self.stage_root, self.reports = stage_root, reports
        self.results = stage_root / "recorded.jsonl"
        self.sent: dict[str, str] = {}
        queue_read, self.send_fd = os.pipe()

        def serve(plan_write: int) -> None:
            # Ctrl-C reaches the whole process group: finish the queue.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self._serve(args, root, plan_write, queue_read)

        self.pid, plan_read = fork_with_pipe(serve, close=[self.send_fd])
        os.close(queue_read)
        self.plan_fd: int | None = plan_read

    # -- in the recording process ----------------------------------------

    def _serve(self, args: argparse.Namespace, root: Path, plan_fd: int,
               queue_fd: int) -> None:
        # jsonschema (under nbformat) would build the grammars of its
        # optional "iri" format checker at import, a second of the wait for
        # the plan; no notebook or nbgrader schema uses that format.
        sys.modules.setdefault("rfc3987_syntax", None)
        try:
            app = open_course(root)
            route = resolve_route(app.coursedir, args.assignment_id,
                                  args.kit_assignment)
            chosen = find_submissions(app.coursedir, route, args.student)
            for submitted in chosen:
                submitted.warnings = _timestamp_problem(submitted.folder)
            everyone = (find_submissions(app.coursedir, route)
                        if args.student else chosen)
            plan = {"route": route.as_json(),
                    "chosen": [s.as_json() for s in chosen],
                    "everyone": [s.as_json() for s in everyone],
                    "db_url": app.coursedir.db_url,
                    "root": str(Path(app.coursedir.root).resolve()),
                    "autograded": app.coursedir.autograded_directory}
        except (CourseError, RubricError) as exc:
            plan = {"error": str(exc)}
        except Exception as exc:
            plan = {"error": f"nbgrader could not open the course: "
                             f"{type(exc).__name__}: {one_line(str(exc))}"}
        with os.fdopen(plan_fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(plan))
        if "error" in plan:
            return
        real = str(Path(app.coursedir.root).resolve())
        with one_engine_per_database(), os.fdopen(queue_fd, "rb") as queue:
            converter = recorder(app, route)
            for line in queue:
                if line == self.END:
                    return
                index = int(line)
                message = json.loads((self.stage_root / f"{index}.json")
                                     .read_text(encoding="utf-8"))
                submitted = Submitted.from_json(message["submitted"])
                try:
                    verdict = course_verdict(
                        route, submitted, message["row"],
                        message["record"], str(self.stage_root / str(index)),
                        real, self.reports)
                    problem = converter.record(submitted, verdict)
                except (Exception, SystemExit) as exc:
                    problem = (f"could not record in the gradebook: "
                               f"{type(exc).__name__}: "
                               f"{one_line(str(exc), 300)}")
                with self.results.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"student": submitted.student,
                                          "problem": problem}) + "\n")

    # -- in the grader ------------------------------------------------------

    def plan(self) -> dict:
        """The route and the submissions; CourseError if there are none."""
        with os.fdopen(self.plan_fd, "r", encoding="utf-8") as stream:
            self.plan_fd = None
            text = stream.read()
        try:
            plan = json.loads(text)
        except json.JSONDecodeError:
            raise CourseError("the nbgrader process ended before it read "
                              "the course") from None
        if "error" in plan:
            raise CourseError(plan["error"])
        return plan

    def send(self, index: int, submitted: Submitted, row: dict,
             record: dict | None) -> None:
        """Queue student ``index`` with the judge's row and record."""
        write_atomic(self.stage_root / f"{index}.json", json.dumps(
            {"submitted": submitted.as_json(), "row": row,
             "record": record}))
        self.sent[submitted.student] = str(index)
        try:
            os.write(self.send_fd, f"{index}\n".encode())
        except BrokenPipeError:
            pass  # reported by close(): never recorded

    def close(self) -> dict[str, str]:
        """Wait for everything sent; student -> problem (none: absent)."""
        if self.plan_fd is not None:
            os.close(self.plan_fd)  # it may be blocked writing the plan
            self.plan_fd = None
        try:
            os.write(self.send_fd, self.END)
        except BrokenPipeError:
            pass
        os.close(self.send_fd)
        os.waitpid(self.pid, 0)
        problems = {student: "the recording process ended before "
                    "recording it" for student in self.sent}
        try:
            lines = self.results.read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        for line in lines:
            result = json.loads(line)
            problems[result["student"]] = result["problem"]
        return {s: p for s, p in problems.items() if p}


class ClassRun:
    """One run of the route over a class: grade, queue for recording, keep
    the grader's rows."""

    def __init__(self, route: Route, submissions: list[Submitted],
                 root: Path, out: Path, recorder: Recorder,
                 judges: JudgeOptions) -> None:
        self.route, self.submissions, self.judges = route, submissions, judges
        self.root, self.out = root, out
        self.recorder = recorder
        self.real = str(root.resolve())
        self.rows: dict[str, dict] = {}
        self.index = {s.student: i for i, s in enumerate(submissions)}
        self.progress = Progress(len(submissions), 0)

    def run(self) -> list[int]:
        """Grade everyone; the signals that interrupted it."""
        todo = []
        for index, submitted in enumerate(self.submissions):
            stage(submitted, self.route, self.root,
                  self.recorder.stage_root, index)
            if submitted.problem:
                self.not_graded(submitted)
            else:
                # The staged folder holds the submission's own notebook
                # and module only: the judge grades the folder, so that a
                # module beside the notebook is graded as `grade` does.
                todo.append(Entry(submitted.student, submitted.staged.parent,
                                  key=submitted.key))
        return judge_all(todo, self.recorder.reports, self.judges,
                         self.judged)

    def not_graded(self, submitted: Submitted) -> None:
        """A submission the grader cannot even start on: 0, and why."""
        row = error_row(submitted.student, submitted.notebook,
                        f"could not grade: {submitted.problem}")
        write_atomic(self.recorder.reports / submitted.key / RECORD,
                     json.dumps({**row, "error": row["errors"]},
                                indent=2) + "\n")
        self.finish(submitted, row, None, 0.0)

    def judged(self, entry: Entry, row: dict, record: dict | None,
               seconds: float) -> None:
        """A judge finished (the callback of
        :func:`grader.routes.judges.judge_all`)."""
        index = self.index[entry.student]
        staged = str(self.recorder.stage_root / str(index))
        self.finish(self.submissions[index],
                    _replaced(row, staged, self.real), record, seconds)

    def finish(self, submitted: Submitted, row: dict, record: dict | None,
               seconds: float) -> None:
        """Keep the row; queue the student for recording."""
        row["path"] = str(submitted.notebook)
        self.rows[submitted.student] = row
        write_csv(self.out, list(self.rows.values()))
        self.recorder.send(self.index[submitted.student], submitted, row,
                           record)
        self.progress.update(row, seconds)


def run_nbgrader(args: argparse.Namespace) -> int:
    """Grade and record every submission of ``args.assignment_id``."""
    from grader.errors import CliError

    root = Path(args.course)
    if not any((root / name).exists() for name in
               ("nbgrader_config.py", "gradebook.db", "submitted")):
        raise CliError(f"{root} is not an nbgrader course root (no "
                       f"nbgrader_config.py, gradebook.db or submitted/)")
    out = Path(args.out) if args.out else \
        root / "grader_results" / f"{args.assignment_id}.csv"
    reports = out.with_name(out.name + ".reports")
    try:
        check_writable(out.parent)
        check_writable(reports)
    except BatchError as exc:
        raise CliError(str(exc)) from exc
    stage_root = Path(tempfile.mkdtemp(prefix="grader-nbgrader-"))
    nbgrader = Recorder(args, root, stage_root, reports)
    unrecorded: dict[str, str] = {}
    try:
        judges = JudgeOptions(seed=args.seed, timeout=args.timeout,
                              memory=args.memory, jobs=args.jobs)
        prewarm(judges)  # while nbgrader reads the course
        try:
            plan = nbgrader.plan()
        except CourseError as exc:
            raise CliError(str(exc)) from exc
        route = Route.from_json(plan["route"])
        judges.assignment = route.kit.id
        submissions = [Submitted.from_json(s) for s in plan["chosen"]]
        if not submissions:
            raise CliError(f"no submissions of {args.assignment_id} in "
                           f"{root / 'submitted'}")
        run = ClassRun(route, submissions, Path(plan["root"]), out,
                       nbgrader, judges)
        if args.student:
            run.rows = _kept_rows(
                [Submitted.from_json(s) for s in plan["everyone"]],
                set(run.index), reports)
        stop = run.run()
    finally:
        unrecorded = nbgrader.close()
        shutil.rmtree(stage_root, ignore_errors=True)
    write_csv(out, list(run.rows.values()))
    ran = [run.rows[s.student] for s in submissions
           if s.student in run.rows]
    errors = [r for r in ran if r["status"] == STATUS_ERROR]
    if stop:
        sys.stderr.write(f"\ninterrupted: {len(ran)} of "
                         f"{len(submissions)} submissions graded and "
                         f"recorded; run the command again to grade "
                         f"them all\n")
        return 130
    sys.stdout.write(
        f"graded {len(ran) - len(errors)} of {len(submissions)} "
        f"submissions of {args.assignment_id} ({route.kit.id}, "
        f"{route.notebook_name}) outside the kernel -> {plan['db_url']} "
        f"and {plan['autograded']}/; grader rows in {out}\n")
    for row in errors:
        sys.stdout.write(f"  0 points, not graded: {clean(row['student'])}:"
                         f" {row['errors']}\n")
    for submitted in submissions:
        for warning in submitted.warnings:
            sys.stdout.write(f"  note: {clean(submitted.student)}: "
                             f"{warning}\n")
    for student, problem in unrecorded.items():
        sys.stdout.write(f"  not recorded: {clean(student)}: {problem}\n")
    summarise(out, list(run.rows.values()), reports)
    return 0 if not (errors or unrecorded) else 1
