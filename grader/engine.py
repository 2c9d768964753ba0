"""Grading one submission, start to finish.

The data flow, one module per stage: :mod:`grader.locate.submission` locates
and reads the submission; :mod:`grader.analyse.static` reads it statically;
:mod:`grader.run.sandbox` runs it in child processes on the probes of the
assignment's cases (:mod:`grader.plan`), again on its loadable part
(:mod:`grader.run.loadable`) when its module-level code raised;
:mod:`grader.run.observe` decodes what they saw; :mod:`grader.judge.checking`
runs the pytest checks on those observations; :mod:`grader.judge.scoring` turns
outcomes into points as the rubric says; :mod:`grader.output.report` renders
the result. This module runs the stages in order.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from grader import plugin
from grader.analyse.static import (TaskAnalysis, analyse, count_statements,
                                   stub_of)
from grader.constants import DEFAULT_SEED, GRADER_DIR, SEED_ENV
from grader.judge import attribution, pep8
from grader.judge.attribution import SourceMap, TaskCode
from grader.judge.checking import run_checks
from grader.judge.scoring import score
from grader.locate.source import SourceFile
from grader.locate.submission import Submission, locate
from grader.output.report import Report
from grader.plan import Plan, derive_seed
from grader.rubric import Assignment, Task
from grader.run import loadable
from grader.run.observe import ProbeResult, TaskRun, format_error, observe
from grader.run.sandbox import Job, JobResult, Limits, run_jobs, sandbox_paths
from grader.shapes.sizes import all_size_sets

FLAKE8_CONFIG = GRADER_DIR / "flake8.cfg"


@dataclass(frozen=True)
class Options:
    """How to grade."""

    seed: int | None = None      # None: $GRADER_SEED, else DEFAULT_SEED
    public_only: bool = False
    limits: Limits = field(default_factory=Limits)
    # True in a batch's judge: a disposable process forked from a warm
    # coordinator (flake8 run once there, see grader.routes.batch): flake8 runs
    # in forks of it, and the checks in it, without a process of their
    # own (nothing of the judge outlives its one submission).
    judge: bool = False
    # The cases' plan, when the caller built it already with build_plan
    # (a batch's coordinator, once for every judge); used only when it
    # was built for this assignment, seed and public_only.
    plan: Plan | None = None


def resolve_seed(seed: int | None) -> tuple[int, str]:
    """The seed to use and how to show it (a secret seed is not shown)."""
    if seed is not None:
        return seed, str(seed)
    secret = os.environ.get(SEED_ENV, "").strip()
    if secret:
        try:
            return int(secret), f"secret (${SEED_ENV})"
        except ValueError:
            return text_seed(secret), f"secret (${SEED_ENV})"
    return DEFAULT_SEED, str(DEFAULT_SEED)


def text_seed(secret: str) -> int:
    """The seed a text secret stands for: every character counts (a
    digest, not the text's last bytes)."""
    import hashlib

    digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass"))
    return int.from_bytes(digest.digest()[:8], "big") % (2 ** 31)


def build_plan(assignment: Assignment, seed: int,
               public_only: bool = False) -> Plan:
    """The probes and cases of ``assignment`` under ``seed`` (a pure
    function of its arguments: a batch builds it once)."""
    # Shapes are traced at the rubric's sizes and at secret ones drawn
    # from the seed (docs/threat-model.md, principle 6).
    own = plugin.of(assignment)
    plan: Plan = own.build_plan(
        seed, public_only, all_size_sets(assignment.size_sets, seed,
                                         assignment.id))
    if public_only:
        plan.public_only()
    # Every family of probes in both autograd modes (docs/threat-model.md,
    # "Right only in the state the grader probes").
    # A public-only grade judges the public values alone: its twins
    # repeat their probe's input (no fresh inputs, which are not public).
    twin_input = None if public_only else own.twin_input
    plan.assign_modes(seed, twin_input)
    plan.assign_states(seed, twin_input)
    # What torch.initial_seed() reads at every probe: one value per
    # grading, as in a process seeded once (grader.worker.agent.
    # torch_seeder; docs/threat-model.md, "Right only in the state the
    # grader probes").
    initial = derive_seed(seed, "torch-initial-seed") % 2 ** 31
    for wires in plan.probes.values():
        for wire in wires:
            wire["initial_seed"] = initial
            # The state of its call: words no seeding wrote, from a
            # stream only the grader can derive; a ``seeding`` probe (the
            # state a seeded construction is built from) keeps the exact
            # stream of torch.manual_seed(wire["seed"]) (torch_seeder).
            if not wire.get("seeding"):
                wire["stream"] = derive_seed(
                    seed, "torch-stream", int(wire.get("seed", 0)))
    plan.origin = (assignment.id, seed, public_only)
    return plan


def grade(path: Path, assignment: str | None = None,
          options: Options = Options()) -> Report:
    """Grade the submission at ``path`` (file, notebook or folder)."""
    return grade_submission(locate(Path(path), assignment), options)


# --------------------------------------------------------------------------
# Running


def _unrunnable(task: Task, source: SourceFile, plan: Plan,
                reason: str) -> TaskRun:
    run = TaskRun(task=task.id, source=source, import_error=reason,
                  ended="finished")
    for info in plan.of_task(task.id):
        if info.twin_of is None:
            run.results[info.id] = ProbeResult(info=info, problem=reason)
    return run


class _Linter:
    """flake8 over each distinct source, in processes of their own that
    run while the workers do (started by :meth:`start`, collected by
    :meth:`join`). ``fork``: fork this warm process for each (a batch's
    judge, see :attr:`Options.judge`) rather than start an interpreter;
    so does a process that warmed flake8 up itself (:func:`pep8.warm`)."""

    def __init__(self, sources: list[SourceFile], fork: bool = False
                 ) -> None:
        self.sources = sources
        self.fork = fork or pep8.warm()
        self.pending: dict[Path, pep8.PendingLint] = {}
        self.findings: dict[Path, list[pep8.Pep8Finding] | str] = {}

    def start(self) -> None:
        for source in self.sources:
            if source.path not in self.pending:
                self.pending[source.path] = pep8.start_flake8(
                    source, FLAKE8_CONFIG, self.fork)

    def join(self) -> None:
        self.start()  # when no worker was started
        for path, pending in self.pending.items():
            if path in self.findings:
                continue
            try:
                self.findings[path] = pending.findings()
            except pep8.Flake8Error as exc:
                self.findings[path] = str(exc)


def grade_submission(submission: Submission,
                     options: Options = Options()) -> Report:
    """Grade a located submission."""
    started = time.perf_counter()
    torch.set_num_threads(1)
    assignment = submission.assignment
    seed, seed_label = resolve_seed(options.seed)
    plan = options.plan
    if plan is None or plan.origin != (assignment.id, seed,
                                       options.public_only):
        plan = build_plan(assignment, seed, options.public_only)
    analyses = {task.id: analyse(assignment, task,
                                 submission.sources[task.id])
                for task in assignment.tasks}
    sources = {submission.sources[t.id].path: submission.sources[t.id]
               for t in assignment.tasks}
    stub = stub_of(assignment)
    statement_plans = {path: attribution.statement_plan(source, stub)
                       for path, source in sources.items()}

    jobs, runs = [], {}
    for task in assignment.tasks:
        source = submission.sources[task.id]
        analysis = analyses[task.id]
        if analysis.syntax_error:
            runs[task.id] = _unrunnable(
                task, source, plan, f"The code could not be loaded: "
                                    f"{analysis.syntax_error}.")
            continue
        statements = [s.to_plain() for found in
                      statement_plans[source.path].values() for s in found]
        jobs.append(Job(task.id, source.text,
                        attribution.code_filename(source),
                        plan.probes.get(task.id, []),
                        statements=statements,
                        calls=attribution.declared_calls(
                            source, task.target,
                            tuple(name for name, _ in task.inputs)),
                        forbidden=assignment.forbidden,
                        sandbox=assignment.sandbox,
                        package=plugin.of(assignment).package_files))
    linter = _Linter([submission.sources[t.id] for t in assignment.tasks],
                     fork=options.judge)
    results = run_jobs(jobs, options.limits, after_fork=linter.start)
    linter.join()
    for job in jobs:
        runs[job.name] = observe(job.name, submission.sources[job.name],
                                 plan.of_task(job.name), results[job.name])
    loaded, load_notes = load_what_can_be_loaded(
        assignment, submission, jobs, results, runs, plan, options.limits)

    maps = {path: SourceMap.build(loaded.get(path, source))
            for path, source in sources.items()}
    codes = task_codes(assignment, submission, analyses, runs,
                       statement_plans, maps)
    outcomes, check_errors = run_checks(assignment.checks_dir, {
        "runs": runs, "plan": plan, "public_only": options.public_only,
        "assignment": assignment}, fork=not options.judge)
    report = score(assignment, submission, analyses, runs, outcomes,
                   linter.findings, codes)
    report.flags[:0] = submission.flags  # what locating refused or found
    for task_report in report.tasks:
        task_report.syntax_error = analyses[task_report.id].syntax_error \
            or ""
    at = len(submission.notes)
    report.notes[at:at] = load_notes
    report.errors = check_errors + report.errors
    report.figures = _figures(assignment, report, runs)
    report.seed_label = seed_label
    report.public_only = options.public_only
    report.seconds = time.perf_counter() - started
    return report


def _import_error(result: JobResult) -> dict | None:
    """The error the worker's import frame reports (``{}`` when it gives
    none); None when the submission loaded, and when the worker died or
    hung while loading (that is no exception)."""
    for frame in result.frames:
        if frame.get("type") == "import":
            return None if frame.get("ok") else frame.get("error") or {}
    return None


def _import_failure(result: JobResult, source: SourceFile) -> str | None:
    """The exception the submission's module-level code raised while the
    worker loaded it, as a sentence (None as :func:`_import_error`)."""
    error = _import_error(result)
    return None if error is None else format_error(error, source)


def _import_line(result: JobResult) -> int | None:
    """The submission's module-level line at which loading it raised: the
    top-level statement that was running (``outer``, when the error's own
    line is in a function it called), else the error's line; None when
    it loaded, or when no line is known."""
    error = _import_error(result) or {}
    line = error.get("outer", error.get("line"))
    return line if isinstance(line, int) and line > 0 else None


def _loaded_fine(result: JobResult) -> bool:
    return any(frame.get("type") == "import" and frame.get("ok")
               for frame in result.frames)


def _merged(first: TaskRun, second: TaskRun,
            reduction: loadable.Reduction) -> TaskRun:
    """The run on the loadable part of a file, with what the first run
    (on the file as it is) tried and the sandbox refused, so that no
    integrity event is lost; a NameError on a skipped name says why the
    name is missing."""
    for name in ("refused", "tampered", "patched", "forbidden"):
        setattr(second, name, list(dict.fromkeys(
            getattr(first, name) + getattr(second, name))))
    second.events = list(dict.fromkeys(first.events + second.events))
    second.foreign_bytes += first.foreign_bytes
    second.forged_frames += first.forged_frames
    second.scratch_full = second.scratch_full or first.scratch_full
    for probe_id, result in second.results.items():
        if result.problem and result.error:
            second.results[probe_id] = replace(
                result, problem=loadable.explain_missing_name(
                    result.problem, result.error, reduction))
    return second


def load_what_can_be_loaded(assignment: Assignment, submission: Submission,
                            jobs: list[Job], results: dict[str, JobResult],
                            runs: dict[str, TaskRun], plan: Plan,
                            limits: Limits
                            ) -> tuple[dict[Path, SourceFile], list[str]]:
    """Grade what can be loaded of a file whose module-level code raised
    (:mod:`grader.run.loadable`).

    For each source whose loading raised in the sandbox, the tasks run
    again on its loadable part (same lines, the rest blanked out); when
    that loads, its runs replace the first ones in ``runs`` (keeping the
    first runs' integrity events) and a note lists what was not run. When
    it does not load either, the first runs stand (the file earns what it
    earned as it is) and the note says both errors. Returns the sources
    that were run instead of the submission's, by path, and the notes.
    """
    failed: dict[Path, list[Job]] = {}
    failures: dict[Path, str] = {}
    for job in jobs:
        source = submission.sources[job.name]
        why = _import_failure(results[job.name], source)
        if why is not None:
            failed.setdefault(source.path, []).append(job)
            failures.setdefault(source.path, why)
    loaded: dict[Path, SourceFile] = {}
    notes: list[str] = []
    for path, retry in failed.items():
        source = submission.sources[retry[0].name]
        graded = tuple(t.target for t in assignment.tasks
                       if submission.sources[t.id].path == path)
        reduction = loadable.reduce_module(
            source, graded,
            sandbox_paths(plugin.of(assignment).package_files),
            frozenset(line for job in retry
                      if (line := _import_line(results[job.name]))))
        if reduction is None:
            continue
        again = [replace(job, source=reduction.source.text)
                 for job in retry]
        found = run_jobs(again, limits)
        if not all(_loaded_fine(found[job.name]) for job in again):
            still = next((w for w in (_import_failure(found[job.name],
                                                      source)
                                      for job in again) if w),
                         "its worker stopped while loading it")
            notes.append(f"{loadable.shown_name(source)} could not be "
                         f"loaded as it is "
                         f"({failures[path].rstrip('.')}); without its "
                         f"module-level code it could not be loaded "
                         f"either ({still.rstrip('.')}), so it is graded "
                         f"as it is.")
            continue
        for job in again:
            run = observe(job.name, reduction.source,
                          plan.of_task(job.name), found[job.name])
            runs[job.name] = _merged(runs[job.name], run, reduction)
        loaded[path] = reduction.source
        notes.append(reduction.report(source, failures[path]))
    return loaded, notes


def task_codes(assignment: Assignment, submission: Submission,
               analyses: dict[str, TaskAnalysis], runs: dict[str, TaskRun],
               statement_plans: dict[Path, dict],
               maps: dict[Path, SourceMap]) -> dict[str, TaskCode]:
    """Per task, the code its penalty and bonus items judge: the graded
    class as written and what ran for it (:mod:`grader.judge.attribution`)."""
    executed: dict[str, attribution.Ran | None] = {}
    for task in assignment.tasks:
        source, run = submission.sources[task.id], runs[task.id]
        executed[task.id] = (
            attribution.ran(run, maps[source.path])
            if not analyses[task.id].syntax_error and run.results
            and maps[source.path].error is None else None)
    codes = {}
    for task in assignment.tasks:
        analysis = analyses[task.id]
        source = submission.sources[task.id]
        method = next((i.method for i in assignment.items_of(task.id)
                       if i.method), None)
        static_method = attribution.static_function(source, task.target,
                                                    method)
        others: dict[tuple[int, int], frozenset[int]] = {}
        elsewhere: set[int] = set()
        for other in assignment.tasks:
            span = analyses[other.id].span
            if other.id == task.id or submission.sources[other.id].path \
                    != source.path:
                continue
            ran = executed[other.id]
            if span is not None:
                graded = _graded_keys(assignment, other, source)
                others[span] = frozenset(
                    id(d.node) for d in (ran.all if ran else ())
                    if d.function is not None
                    and attribution.definition_key(d.function) in graded)
            elsewhere.update(_companions(other, ran))
        codes[task.id] = attribution.task_code(
            static_span=analysis.span, static_method=static_method,
            stub=analysis.stub, executed=executed[task.id],
            plan=statement_plans.get(source.path, {}), other_spans=others,
            count=count_statements, elsewhere=frozenset(elsewhere))
    return codes


def _graded_keys(assignment: Assignment, task: Task,
                 source: SourceFile) -> set[tuple[int, str]]:
    """The code keys of the methods ``task`` grades as its own: its
    target's ``__init__``, the methods its items and ``inputs`` name (or
    the target itself when it is a function). Only these are left out of
    another task that runs them (docs/internals.md,
    ``grader.judge.attribution``)."""
    methods = {"__init__"} | {i.method for i in assignment.items_of(task.id)
                              if i.method} | {m for m, _ in task.inputs}
    nodes = [attribution.static_function(source, task.target, m)
             for m in sorted(methods)]
    nodes.append(attribution.static_function(source, task.target, None))
    return {attribution.definition_key(n) for n in nodes if n is not None}


def _companions(task: Task, executed: attribution.Ran | None) -> set[int]:
    """The definition nodes ``task`` judges as its companions' code: those
    of its ``companions`` classes that ran for it."""
    if executed is None or not task.companions:
        return set()
    return {id(d.node) for d in executed.all if d.owner in task.companions}


def _figures(assignment: Assignment, report: Report,
             runs: dict[str, TaskRun]) -> list:
    """The assignment's pictures of its failing items, if it has any."""
    make = plugin.of(assignment).figures
    if make is None:
        return []
    failed = {item.id for item in report.items
              if not item.passed and item.max_score > 0}
    return make(failed, runs)


class ShapesUnparsable(Exception):
    """``python -m grader shapes`` on code that does not parse: one line
    that names where (exit 1)."""


def shape_report(path: Path, assignment: str | None = None,
                 options: Options = Options()) -> tuple[str, Report]:
    """The shape-comment findings of a submission, as ``grade`` sees them.

    It grades on the public values (the shape traces do not depend on the
    cases) and prints only the shapes items, so its findings are the very
    ones a full grade penalises. Raises :class:`ShapesUnparsable` when a
    graded source does not parse (nothing can be checked then), naming the
    file and line.
    """
    submission = locate(Path(path), assignment)
    for task in submission.assignment.tasks:
        source = submission.sources[task.id]
        analysis = analyse(submission.assignment, task, source)
        if analysis.syntax_error:
            raise ShapesUnparsable(
                f"{source.path}: {analysis.syntax_error}; fix it first, "
                f"then check the shape comments again")
    report = grade_submission(submission,
                              Options(seed=options.seed, public_only=True,
                                      limits=options.limits))
    lines = [f"Shape comments of {report.path} ({report.assignment})"]
    rubric = {i.id: i for i in submission.assignment.items}
    for item in report.items:
        if rubric[item.id].kind != "shapes":
            continue
        verdict = ("OK" if item.passed else
                   f"{item.score:+g} point in the grade")
        lines += ["", f"{item.id}: {verdict}: {item.message}"]
        if item.details:
            lines += ["  " + line if line else "" for line in
                      item.details.split("\n")]
    return "\n".join(lines) + "\n", report
