"""nbgrader's own classes, extended for the kit (docs/nbgrader.md, "What
is recorded"): the preprocessors that replace its kernel, and the
``Autograde`` converter the route records with. Imported only where
nbgrader runs (the route's recording process).
"""
from __future__ import annotations

import logging
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import nbformat
import nbgrader.api
from nbconvert.writers import FilesWriter
from nbformat.v4 import new_code_cell, new_output
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.apps.baseapp import NbGrader
from nbgrader.converters import Autograde, BaseConverter
from nbgrader.preprocessors import (AssignLatePenalties, Execute,
                                    NbGraderPreprocessor, SaveAutoGrades)
from nbgrader.utils import find_all_files
from sqlalchemy.exc import SAWarning

from grader.output.text import one_line
from grader.routes.nbgrader_course import (CourseError, Route, Submitted,
                                           Verdict, own_file)


class CourseApp(NbGrader):
    """nbgrader's application, loading a course's configuration for the
    route (:func:`open_course`)."""

    name = "python -m grader nbgrader"


def open_course(root: Path) -> Any:
    """nbgrader's configuration of the course at ``root`` (an app whose
    ``coursedir`` is the course directory), as ``nbgrader`` loads it."""
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


# --------------------------------------------------------------------------
# The preprocessors: what runs instead of a kernel


class TrustGradebookCells(NbGraderPreprocessor):
    """The gradebook, not the submission, says which cells are graded:
    nbgrader metadata naming no cell of the source notebook is dropped
    and the metadata of a known cell is the source's."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        known: dict[str, dict] = resources["grader"]["metadata"]
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader")
            if meta is None:
                continue
            name = meta.get("grade_id") if isinstance(meta, dict) else None
            if not isinstance(name, str) or name not in known:
                del cell.metadata["nbgrader"]
                continue
            cell.metadata["nbgrader"] = dict(
                known[name], checksum=meta.get("checksum", ""))
        return nb, resources


class GraderOutputs(NbGraderPreprocessor):
    """In place of running a kernel: each autograded cell shows the
    grader's message and ends with its credit (nbgrader's partial
    credit); an autograded cell missing from the submission is put back
    at the end."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        route: Route = resources["grader"]["route"]
        verdict: Verdict = resources["grader"]["verdict"]
        present = set()
        for cell in nb.cells:
            name = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type == "code" and name in verdict.credits \
                    and utils.is_grade(cell):
                present.add(name)
                fill_cell(cell, verdict, name)
        for spec in route.cells:
            if spec.grade_id in present:
                continue
            cell = new_code_cell(source=spec.source, metadata={
                "deletable": False, "editable": False,
                "nbgrader": dict(route.metadata[spec.grade_id],
                                 checksum=spec.checksum)})
            fill_cell(cell, verdict, spec.grade_id,
                      "This graded cell was missing from the "
                      "submission; the grader put it back.\n")
            nb.cells.append(cell)
        return nb, resources


def fill_cell(cell: Any, verdict: Verdict, name: str, note: str = "") -> None:
    """Cell ``name``'s outputs: the grader's message (stdout, never
    stderr: nbgrader would score it 0), its figures, then its credit as
    the cell's value (nbgrader's partial credit)."""
    text = note + "".join(f"Note: {n}\n" for n in verdict.notes)
    text += verdict.texts[name] + "\n"
    outputs = [new_output("stream", name="stdout", text=text)]
    for png in verdict.images.get(name, []):
        outputs.append(new_output("display_data", data={"image/png": png}))
    outputs.append(new_output(
        "execute_result", execution_count=None,
        data={"text/plain": repr(float(verdict.credits[name]))}))
    cell.outputs = outputs
    cell.execution_count = None


class SaveGraderScores(NbGraderPreprocessor):
    """Each autograded cell's automatic score is the grader's credit,
    whatever the notebook holds; a manual override stays and is flagged
    for review, as nbgrader's SaveAutoGrades does."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        ids = resources["nbgrader"]
        verdict: Verdict = resources["grader"]["verdict"]
        with Gradebook(ids["db_url"]) as gradebook:
            for name, credit in verdict.credits.items():
                grade = gradebook.find_grade(
                    name, ids["notebook"], ids["assignment"], ids["student"])
                grade.auto_score = credit
                grade.needs_manual_grade = grade.manual_score is not None
            gradebook.db.commit()
        return nb, resources


# --------------------------------------------------------------------------
# The converter the route records with


class OwnFilesOnly(BaseConverter):
    """Copies the submission's files to ``autograded/`` as nbgrader does,
    except links that leave the submission."""

    def init_assignment(self, assignment_id: str, student_id: str) -> None:
        source = Path(self._format_source(assignment_id, student_id))
        dest = Path(self._format_dest(assignment_id, student_id))
        ignore = self.coursedir.ignore + ["*.ipynb"]
        for name in find_all_files(str(source), ignore):
            relative = Path(name).relative_to(source)
            path, _ = own_file(source, str(relative))
            if path is None:
                continue
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                target.unlink()
            shutil.copyfile(path, target)


class OutsideKernel(Autograde, OwnFilesOnly):
    """``nbgrader autograde --create --force`` without a kernel: the
    sanitizing and autograding steps in one pass, with ``Execute``
    replaced by :class:`GraderOutputs`; :meth:`record` records one
    student's verdict for the route ``route``."""

    def __init__(self, route: Route, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.route = route

    def _init_preprocessors(self) -> None:
        self.exporter._preprocessors = []
        steps = [TrustGradebookCells, *self.sanitize_preprocessors]
        later = [GraderOutputs if p is Execute else p
                 for p in self.autograde_preprocessors]
        if GraderOutputs not in later:
            later.insert(0, GraderOutputs)
        if SaveAutoGrades in later:
            later.insert(later.index(SaveAutoGrades) + 1, SaveGraderScores)
        elif AssignLatePenalties in later:
            later.insert(later.index(AssignLatePenalties), SaveGraderScores)
        else:
            later.append(SaveGraderScores)
        for step in dict.fromkeys(steps + later):  # each step once
            self.exporter.register_preprocessor(step)

    def record(self, submitted: Submitted, verdict: Verdict) -> str:
        """Write the student's gradebook entries and autograded notebook;
        return a problem to report (empty when none)."""
        route, student = self.route, submitted.student
        self.notebooks = [str(submitted.notebook)]
        self.init_destination(route.assignment_id, student)
        self.init_assignment(route.assignment_id, student)
        resources = self.init_single_notebook_resources(
            str(submitted.notebook))
        resources["grader"] = {"route": route, "verdict": verdict,
                               "metadata": route.metadata}
        bases: list[Path | None] = []
        if submitted.staged is not None:
            bases.append(submitted.staged)
        elif route.release is not None:
            verdict.notes.append("the submitted notebook could not be "
                                 "used; shown here instead: the released "
                                 "notebook")
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
                    verdict.notes.append(f"{problem}; shown here instead: "
                                         f"{names[bases[position + 1]]}")
                continue
            problem = ""
            break
        self.set_permissions(route.assignment_id, student)
        return problem


def lenient_timestamps(coursedir: Any) -> None:
    """Patch ``coursedir`` (an instance, nothing shared): a
    ``timestamp.txt`` that is not a date reads as no time instead of
    stopping nbgrader (the route warns about it when it stages)."""
    timestamp = coursedir.get_existing_timestamp

    def lenient_timestamp(path: str) -> Any:
        try:
            return timestamp(path)
        except Exception:  # not a date: warned about when staged
            return None

    coursedir.get_existing_timestamp = lenient_timestamp


def recorder(app: Any, route: Route) -> OutsideKernel:
    """nbgrader's Autograde converter with its kernel replaced by the
    grader's verdicts: ``recorder(...).record(submitted, verdict)``."""
    # nbgrader's own gradebook code warns when it creates a submission.
    warnings.filterwarnings("ignore", category=SAWarning)
    lenient_timestamps(app.coursedir)
    converter = OutsideKernel(route, coursedir=app.coursedir, parent=app)
    converter.force = True
    converter.writer = FilesWriter(parent=converter, config=converter.config)
    converter.exporter = converter.exporter_class(parent=converter,
                                                  config=converter.config)
    # Validate the notebook once, after every step, not after each one.
    converter.exporter.optimistic_validation = True
    converter._init_preprocessors()
    return converter


@contextmanager
def one_engine_per_database() -> Iterator[None]:
    """nbgrader opens a new database engine for every ``Gradebook`` (a
    dozen per notebook), each recompiling its queries: share one engine
    per database URL while the route records (a patch of
    ``nbgrader.api.create_engine``, undone on leaving)."""
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
