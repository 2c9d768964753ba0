"""nbgrader's own classes, extended for the kit (docs/nbgrader.md, "What
is recorded"): the steps that replace its kernel, which the kit's
``nbgrader_config.py`` puts in ``Autograde``'s preprocessor lists (so a
plain ``nbgrader autograde``, formgrader's button and ``NbGraderAPI``
grade outside the kernel too), the converter ``python -m grader
nbgrader`` records with, the step that keeps ``nbgrader validate`` out of
a kernel and ``zip_collect``'s collector. Imported only where nbgrader
runs.
"""
from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
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
from nbgrader.plugins.zipcollect import FileNameCollectorPlugin
from nbgrader.preprocessors import (AssignLatePenalties, Execute,
                                    NbGraderPreprocessor, SaveAutoGrades)
from nbgrader.utils import find_all_files
from sqlalchemy.exc import SAWarning
from traitlets import Dict
from traitlets.utils.importstring import import_item

from grader.output.text import one_line
from grader.routes.nbgrader_course import (CourseError, Route, Submitted,
                                           Verdict, own_file, resolve_route)
from grader.run.tempdirs import run_folder


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


class KitStep(NbGraderPreprocessor):
    """What the kit's steps share: the route of the assignment being
    converted and, in a plain nbgrader command (``nbgrader autograde``,
    formgrader, ``NbGraderAPI``), the grader's verdicts, which
    ``python -m grader nbgrader`` hands them in ``resources["grader"]``.
    """

    kit_assignments = Dict(
        {}, help="nbgrader assignment id -> the kit assignment that grades "
                 "it (default: the one whose notebook it has, by name)"
    ).tag(config=True)

    def converter(self) -> Any:
        """The nbgrader converter running this step (the exporter's
        parent); its ``coursedir`` is the course."""
        owner = self.parent
        while owner is not None and \
                getattr(owner, "coursedir", None) is None:
            owner = getattr(owner, "parent", None)
        if owner is None:
            raise CourseError("the kit's grading steps run only inside "
                              "nbgrader's Autograde (nbgrader autograde)")
        return owner

    def context(self, resources: dict) -> dict:
        """``resources["grader"]``: the route (and the verdict, once
        :class:`GraderOutputs` has it), found when not given."""
        if "grader" not in resources:
            assignment = resources["nbgrader"]["assignment"]
            converter = self.converter()
            routes = converter.__dict__.setdefault("_kit_routes", {})
            if assignment not in routes:
                routes[assignment] = resolve_route(
                    converter.coursedir, assignment,
                    self.kit_assignments.get(assignment))
            route = routes[assignment]
            resources["grader"] = {"route": route,
                                   "metadata": route.metadata}
        return resources["grader"]

    def verdict(self, resources: dict) -> Verdict:
        """The grader's verdict on this student's submission (graded now,
        with every other student this command will convert, when the
        route did not hand it in)."""
        context = self.context(resources)
        if "verdict" in context:
            return context["verdict"]
        ids = resources["nbgrader"]
        converter = self.converter()
        cache = converter.__dict__.setdefault("_kit_verdicts", {})
        key = (ids["assignment"], ids["student"])
        if key not in cache:
            students = pending_students(converter, ids["assignment"],
                                        ids["notebook"])
            students = sorted(set(students) | {ids["student"]})
            graded = grade_outside(
                Path(converter.coursedir.root), ids["assignment"],
                students, context["route"].kit.id)
            for student, verdict in graded.items():
                cache[(ids["assignment"], student)] = verdict
        if key not in cache:
            raise CourseError(f"the grader gave no verdict for "
                              f"{ids['student']}")
        context["verdict"] = cache.pop(key)
        return context["verdict"]


def pending_students(converter: Any, assignment: str,
                     notebook: str) -> list[str]:
    """The students whose ``assignment`` this converter will still
    convert (all it found with ``--force``, else those not autograded
    yet), so that one grading run serves them all."""
    # The folders the converter found are in submitted/: its own
    # _format_source names autograded/ while it autogrades (where the
    # grader's verdicts are asked for), which matched none of them and
    # graded each student in a command of its own.
    coursedir = converter.coursedir
    pattern = coursedir.format_path(coursedir.submitted_directory,
                                    "(?P<student_id>[^/]+)",
                                    re.escape(assignment), escape=True)
    students = []
    for folder in getattr(converter, "assignments", {}) or {}:
        match = re.fullmatch(pattern, folder)
        if not match:
            continue
        student = match.group("student_id")
        done = Path(converter._format_dest(assignment, student)) / \
            f"{notebook}.ipynb"
        if converter.force or not done.exists():
            students.append(student)
    return students


def grade_outside(root: Path, assignment: str, students: list[str],
                  kit: str) -> dict[str, Verdict]:
    """Grade ``students``' submissions of ``assignment`` as ``python -m
    grader nbgrader`` does (the same command, in a process of its own, so
    that a Jupyter server's threads are never forked), recording nothing:
    their verdicts."""
    with tempfile.TemporaryDirectory(prefix="verdicts-",
                                     dir=run_folder()) as folder:
        out = Path(folder) / "verdicts.json"
        command = [sys.executable, "-m", "grader", "nbgrader", assignment,
                   "--course", str(root), "--kit-assignment", kit,
                   "--verdicts", str(out)]
        command += [f"--student={student}" for student in students]
        done = subprocess.run(command, cwd=root, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
        if not out.is_file():
            said = (done.stderr.strip() or done.stdout.strip()
                    or f"exit status {done.returncode}")
            raise CourseError(f"python -m grader nbgrader could not grade "
                              f"{assignment}: "
                              f"{one_line(said.splitlines()[-1], 300)}")
        data = json.loads(out.read_text(encoding="utf-8"))
    return {student: Verdict.from_json(value)
            for student, value in data.items()}


class TrustGradebookCells(KitStep):
    """The gradebook, not the submission, says which cells are graded:
    nbgrader metadata naming no cell of the source notebook is dropped,
    and so is that of all but the last cell naming the same one (as
    nbgrader's DeduplicateIds keeps the last, but without the empty
    metadata it leaves, which nbgrader's next pass refuses); the metadata
    of a known cell is the source's."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        known: dict[str, dict] = self.context(resources)["metadata"]
        seen: set[str] = set()
        for cell in reversed(nb.cells):
            meta = cell.metadata.get("nbgrader")
            if meta is None:
                continue
            name = meta.get("grade_id") if isinstance(meta, dict) else None
            if not isinstance(name, str) or name not in known \
                    or name in seen:
                del cell.metadata["nbgrader"]
                continue
            seen.add(name)
            cell.metadata["nbgrader"] = dict(
                known[name], checksum=meta.get("checksum", ""))
        return nb, resources


class GraderOutputs(KitStep):
    """In place of running a kernel: each autograded cell shows the
    grader's message and ends with its credit (nbgrader's partial
    credit); an autograded cell missing from the submission is put back
    at the end."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        verdict = self.verdict(resources)
        route: Route = resources["grader"]["route"]
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


class SaveGraderScores(KitStep):
    """Each autograded cell's automatic score is the grader's credit,
    whatever the notebook holds, and a bonus cell's extra credit the
    bonus the grader gave (the cell is worth 0: nbgrader's maximum is the
    rubric's); a manual override stays and is flagged for review, as
    nbgrader's SaveAutoGrades does."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        ids = resources["nbgrader"]
        verdict = self.verdict(resources)
        with Gradebook(ids["db_url"]) as gradebook:
            for name, credit in verdict.credits.items():
                grade = gradebook.find_grade(
                    name, ids["notebook"], ids["assignment"], ids["student"])
                grade.auto_score = credit
                if name in verdict.extra:
                    grade.extra_credit = verdict.extra[name]
                grade.needs_manual_grade = grade.manual_score is not None
            gradebook.db.commit()
        return nb, resources


def kit_steps(sanitize: list | None = None, autograde: list | None = None
              ) -> tuple[list, list]:
    """``Autograde``'s two preprocessor lists (nbgrader's defaults when
    not given) with its kernel replaced: :class:`TrustGradebookCells`
    first, :class:`GraderOutputs` instead of ``Execute`` and
    :class:`SaveGraderScores` after ``SaveAutoGrades``. The kit's
    ``nbgrader_config.py`` sets them; the route applies it to whatever a
    course's configuration holds."""
    defaults = Autograde.class_traits()
    if sanitize is None:
        sanitize = defaults["sanitize_preprocessors"].default()
    if autograde is None:
        autograde = defaults["autograde_preprocessors"].default()
    first = [import_item(p) if isinstance(p, str) else p for p in sanitize]
    later = [import_item(p) if isinstance(p, str) else p for p in autograde]
    if TrustGradebookCells not in first:
        first.insert(0, TrustGradebookCells)
    later = [GraderOutputs if p is Execute else p for p in later]
    if GraderOutputs not in later:
        later.insert(0, GraderOutputs)
    if SaveGraderScores not in later:
        if SaveAutoGrades in later:
            later.insert(later.index(SaveAutoGrades) + 1, SaveGraderScores)
        elif AssignLatePenalties in later:
            later.insert(later.index(AssignLatePenalties),
                         SaveGraderScores)
        else:
            later.append(SaveGraderScores)
    return first, later


def validate_instead(folder: Path) -> str:
    """The one line ``nbgrader validate`` says in a kit course: what to
    run instead, for the notebook in ``folder``."""
    return (f"nbgrader validate runs no kernel here: the kit's notebooks "
            f"are graded outside the notebook; check this one with "
            f"`python -m grader grade {folder} --public-only` (a class: "
            f"`python -m grader nbgrader ASSIGNMENT`)")


class GradedOutsideKernel(NbGraderPreprocessor):
    """``nbgrader validate``'s step in place of ``Execute``: it runs
    nothing and stops the validation with :func:`validate_instead`'s
    line (exit status 1), so that no kernel runs the notebook and no
    "Success! Your notebook passes all the tests." is printed for graded
    cells that only the kit's grader fills in."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        # nbgrader's Validator runs its steps in the notebook's folder.
        raise SystemExit(validate_instead(Path.cwd()))


def kernel_free_validation() -> None:
    """Put :class:`GradedOutsideKernel` in place of ``Execute`` in
    nbgrader's ``Validator`` (``nbgrader validate`` and the notebook's
    Validate button, wherever the course's ``nbgrader_config.py`` is
    loaded). nbgrader 0.9 does not make that list configurable, so the
    kit's ``nbgrader_config.py`` calls this to change its default."""
    from nbgrader.validator import Validator

    trait = Validator.class_traits()["preprocessors"]
    steps = [GradedOutsideKernel if p is Execute else p
             for p in trait.make_dynamic_default()]
    trait.default_args = (steps,)


class LmsFileNames(FileNameCollectorPlugin):
    """``nbgrader zip_collect``'s collector for an LMS download (the kit's
    ``nbgrader_config.py`` names it): nbgrader's file-name collector,
    with a timestamp written ``YYYY-MM-DD-HH-MM-SS`` (a file name holds no
    colon) read as that time. nbgrader's date parser would take the
    ``-MM-SS`` for something else and write 17:00:00 for 17:05:00, which
    moves late penalties."""

    def collect(self, submitted_file: str) -> dict | None:
        found = super().collect(submitted_file)
        stamp = found.get("timestamp") if found else None
        if isinstance(stamp, str):
            parts = re.fullmatch(
                r"(\d{4}-\d\d-\d\d)[-_ T](\d\d)-(\d\d)-(\d\d)", stamp)
            if parts:
                day, hour, minute, second = parts.groups()
                found["timestamp"] = f"{day} {hour}:{minute}:{second}"
        return found


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
        steps, later = kit_steps(self.sanitize_preprocessors,
                                 self.autograde_preprocessors)
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
