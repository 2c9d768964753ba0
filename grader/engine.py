"""Grading one submission, start to finish.

The data flow, one module per stage: :mod:`grader.submission` locates and
reads the submission; :mod:`grader.analysis` reads it statically;
:mod:`grader.sandbox` runs it in child processes on the probes of the
assignment's cases (:mod:`grader.plan`), again on its loadable part
(:mod:`grader.loadable`) when its module-level code raised;
:mod:`grader.observe` decodes what they saw; :mod:`grader.checking` runs
the pytest checks on those observations; this module turns outcomes into
points as the rubric says; :mod:`grader.report` renders the result.
"""
from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from grader import attribution, loadable, pep8, shapes
from grader.analysis import (TaskAnalysis, analyse, count_statements,
                             forbidden_uses, stub_of)
from grader.attribution import SourceMap, TaskCode
from grader.checking import CheckOutcome, item_messages, run_checks
from grader.observe import ProbeResult, TaskRun, format_error, observe
from grader.plan import Plan
from grader.report import Flag, ItemReport, Report, TaskReport
from grader.rubric import Assignment, Item, Task
from grader.sandbox import Job, JobResult, Limits, run_jobs, sandbox_paths
from grader.source import SourceFile
from grader.submission import Submission, locate

DEFAULT_SEED = 2024
SEED_ENV = "GRADER_SEED"
KIT_ROOT = Path(__file__).resolve().parent.parent
FLAKE8_CONFIG = Path(__file__).resolve().parent / "flake8.cfg"


@dataclass(frozen=True)
class Options:
    """How to grade."""

    seed: int | None = None      # None: $GRADER_SEED, else DEFAULT_SEED
    public_only: bool = False
    limits: Limits = field(default_factory=Limits)
    # True in a batch's judge: a disposable process forked from a warm
    # coordinator (flake8 run once there, see grader.batch): flake8 runs
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
            return (int.from_bytes(secret.encode(), "big") % (2 ** 31),
                    f"secret (${SEED_ENV})")
    return DEFAULT_SEED, str(DEFAULT_SEED)


def build_plan(assignment: Assignment, seed: int,
               public_only: bool = False) -> Plan:
    """The probes and cases of ``assignment`` under ``seed`` (a pure
    function of its arguments: a batch builds it once)."""
    cases = importlib.import_module(
        f"grader.assignments.{assignment.id}.cases")
    plan = cases.build(seed, public_only, assignment.size_sets)
    if public_only:
        plan.public_only()
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
        run.results[info.id] = ProbeResult(info=info, problem=reason)
    return run


class _Linter:
    """flake8 over each distinct source, in processes of their own that
    run while the workers do (started by :meth:`start`, collected by
    :meth:`join`). ``fork``: fork this warm process for each (a batch's
    judge, see :attr:`Options.judge`) rather than start an interpreter."""

    def __init__(self, sources: list[SourceFile], fork: bool = False
                 ) -> None:
        self.sources = sources
        self.fork = fork
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
                        forbidden=assignment.forbidden))
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
    at = len(submission.notes)
    report.notes[at:at] = load_notes
    report.errors = check_errors + report.errors
    report.figures = _figures(assignment, report, runs)
    report.seed_label = seed_label
    report.public_only = options.public_only
    report.seconds = time.perf_counter() - started
    return report


def _import_failure(result: JobResult, source: SourceFile) -> str | None:
    """The exception the submission's module-level code raised while the
    worker loaded it, as a sentence; None when it loaded, and when the
    worker died or hung while loading (that is no exception)."""
    for frame in result.frames:
        if frame.get("type") == "import":
            return (None if frame.get("ok")
                    else format_error(frame.get("error") or {}, source))
    return None


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
    (:mod:`grader.loadable`).

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
        reduction = loadable.reduce_module(source, graded, sandbox_paths())
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
    class as written and what ran for it (:mod:`grader.attribution`)."""
    codes = {}
    for task in assignment.tasks:
        analysis = analyses[task.id]
        source = submission.sources[task.id]
        run = runs[task.id]
        method = next((i.method for i in assignment.items_of(task.id)
                       if i.method), None)
        static_method = attribution.static_function(source, task.target,
                                                    method)
        others = []
        for other in assignment.tasks:
            if other.id == task.id or submission.sources[other.id].path \
                    != source.path or analyses[other.id].span is None:
                continue
            others.append(analyses[other.id].span)
        executed = None
        if not analysis.syntax_error and run.results and \
                maps[source.path].error is None:
            executed = attribution.ran(run, maps[source.path])
        codes[task.id] = attribution.task_code(
            static_span=analysis.span, static_method=static_method,
            stub=analysis.stub, executed=executed,
            plan=statement_plans.get(source.path, {}), other_spans=others,
            count=count_statements)
    return codes


def integrity_flags(runs: dict[str, TaskRun],
                    codes: dict[str, TaskCode]) -> list[Flag]:
    """The integrity flags of a grade: what the code tried (grouped by
    verb, at most three objects each), code that ran but is not the
    submission's, foreign bytes on the result channel, replaced library
    functions."""
    from grader.text import listing, one_line, quote

    flags: list[Flag] = []
    words = {"refused": "tried to", "forbidden": "tried to",
             "tampered": "tried to", "patched": "tried to"}
    grouped: dict[tuple[str, str], list[str]] = {}
    for run in runs.values():
        for event in run.events:
            where = (f" (line {event.line})" if isinstance(event.line, int)
                     else "")
            # The object is the submission's (a path, a module name).
            thing = quote(event.object, 200) if event.object else ""
            grouped.setdefault((event.kind, event.verb), []).append(
                (thing + where).strip())
    for (kind, verb), objects in grouped.items():
        objects = [o for o in dict.fromkeys(objects) if o]
        text = f"The code {words.get(kind, 'tried to')} {one_line(verb, 200)}"
        if objects:
            text += " " + listing(objects)
        label = {"refused": "the sandbox refused it",
                 "forbidden": "this homework forbids it",
                 "tampered": "the sandbox refused it; the grader's "
                             "instruments were not reached",
                 "patched": "noticed"}.get(kind, "")
        flags.append(Flag(kind, f"{text} ({label})."))
    patched = [p for run in runs.values() for p in run.patched]
    if patched:
        flags.append(Flag("patched", f"The code replaced "
                                     f"{listing(list(dict.fromkeys(patched)))}"
                                     f" at run time (what ran instead is "
                                     f"graded as the submission's code)."))
    for task_id, run in runs.items():
        if run.foreign_bytes or run.forged_frames:
            flags.append(Flag(
                "channel", f"The code wrote {run.foreign_bytes} byte(s) to "
                           f"the grader's result channel ({run.forged_frames}"
                           f" forged frame(s)); they were recognised and "
                           f"ignored.", task_id))
    for task_id, code in codes.items():
        if code.untraceable:
            flags.append(Flag(
                "untraceable", f"{task_id}: code that is not in the "
                               f"submission's source ran: "
                               f"{listing(list(code.untraceable))}; the "
                               f"task's correctness items earn nothing.",
                task_id))
    unique: dict[str, Flag] = {}
    for flag in flags:
        unique.setdefault(flag.message, flag)
    return list(unique.values())


def _figures(assignment: Assignment, report: Report,
             runs: dict[str, TaskRun]) -> list:
    """The assignment's pictures of its failing items, if it has any."""
    try:
        module = importlib.import_module(
            f"grader.assignments.{assignment.id}.figures")
    except ModuleNotFoundError:
        return []
    failed = {item.id for item in report.items
              if not item.passed and item.max_score > 0}
    return module.figures(failed, runs)


# --------------------------------------------------------------------------
# Scoring: pure functions of observations, outcomes and the rubric


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def score_checks_item(item: Item, outcomes: list[CheckOutcome],
                      forbidden: list[str],
                      untraceable: tuple[str, ...] = ()
                      ) -> tuple[ItemReport, list[str]]:
    """Points of a checks item from its checks' outcomes."""
    errors = []
    mine = [o for o in outcomes if o.item == item.id]
    if untraceable:
        from grader.text import listing

        return ItemReport(item.id, item.task, item.title, 0.0, item.points,
                          False, f"0 points: code that is not in the "
                                 f"submission's own source ran for this "
                                 f"task ({listing(list(untraceable))}); "
                                 f"only the visible source can earn "
                                 f"points."), errors
    if forbidden:
        uses = ", ".join(_unique(forbidden))
        return ItemReport(item.id, item.task, item.title, 0.0, item.points,
                          False, f"0 points: the code uses {uses}, which "
                                 f"this homework forbids.",
                          ["forbidden_api"]), errors
    for outcome in mine:
        if outcome.part not in item.parts:
            errors.append(f"check {outcome.nodeid} names unknown part "
                          f"{outcome.part!r} of {item.id}")
    earned = {}
    for part, points in item.parts.items():
        checks = [o for o in mine if o.part == part]
        if not checks:
            errors.append(f"no check decides part {part!r} of {item.id}")
        earned[part] = points if checks and all(
            o.passed for o in checks) else 0.0
    total = (max(earned.values()) if item.combine == "max"
             else sum(earned.values()))
    passed = total == item.points
    if passed:
        return ItemReport(item.id, item.task, item.title, total,
                          item.points, True, "ok"), errors
    # Explain what was missed: for "max", the best part that failed only.
    missed = [part for part, points in item.parts.items()
              if earned[part] < points]
    if item.combine == "max":
        missed = [max(missed, key=lambda part: item.parts[part])]
    failing = [o for o in mine if o.part in missed and not o.passed]
    # One sentence per way of failing, with the cases it happened on.
    messages = item_messages(failing)[:3]
    diagnosis = _unique([d for o in failing for d in o.diagnoses])
    if item.combine == "max" and total > 0:
        best = max((p for p in item.parts if earned[p] == total),
                   key=lambda part: item.parts[part])
        messages.insert(0, f"{total:g} of {item.points:g} points: the "
                           f"'{best}' credit.")
    elif item.combine == "sum" and total > 0:
        good = [p for p in item.parts if earned[p]]
        messages.insert(0, f"{total:g} of {item.points:g} points (earned: "
                           f"{', '.join(good)}; missed: "
                           f"{', '.join(missed)}).")
    return ItemReport(item.id, item.task, item.title, total, item.points,
                      False, " ".join(messages), diagnosis), errors


def score_pep8_item(item: Item, analysis: TaskAnalysis,
                    findings: list[pep8.Pep8Finding] | str,
                    code: TaskCode | None = None) -> ItemReport:
    """The PEP-8 penalty: any flake8 finding inside the task's class (and
    in the code that ran for it, see :mod:`grader.attribution`).

    ``findings`` is the reason flake8 could not check the code when it is
    a string: code flake8 cannot check is not PEP-8 clean, so the item
    costs its point (RUBRIC.md, "Penalties cannot be dodged").
    """
    target = analysis.task.target
    if analysis.syntax_error or analysis.span is None:
        why = ("the code does not parse" if analysis.syntax_error
               else f"{target} is not defined")
        return ItemReport(item.id, item.task, item.title, 0.0, 0.0, True,
                          f"not checked: {why}")
    if isinstance(findings, str):
        return ItemReport(
            item.id, item.task, item.title, item.points, 0.0, False,
            f"flake8 could not check the code ({findings.rstrip('.')}), "
            f"so {target} cannot be shown to be PEP-8 clean: code flake8 "
            f"cannot check counts as not clean.")
    spans = list(code.spans) if code else [analysis.span]
    inside = sorted({f for span in spans for f in pep8.attribute(
        findings, {item.task: span}).get(item.task, [])},
        key=lambda f: (f.line, f.col, f.code))
    if code and code.outside:
        from grader.text import listing

        ran = listing(list(code.outside))
        target = f"{target} and the code it ran ({ran})"
    if not inside:
        return ItemReport(item.id, item.task, item.title, 0.0, 0.0, True,
                          f"flake8 finds nothing inside {target}")
    return ItemReport(
        item.id, item.task, item.title, item.points, 0.0, False,
        f"flake8 reports {len(inside)} finding(s) inside {target}.",
        details=pep8.format_pep8(inside, analysis.source))


def _trace_runs(run: TaskRun, size_sets: tuple[dict[str, int], ...],
                dimensions: tuple[str, ...] = ()
                ) -> tuple[list[tuple[dict, dict]], list[str]]:
    runs, problems = [], []
    for index, all_sizes in enumerate(size_sets):
        sizes = {k: v for k, v in all_sizes.items()
                 if not dimensions or k in dimensions}
        records = []
        for probe_id in run.probe_ids(f"trace:{index}"):
            result = run.result(probe_id)
            if result.trace is None:
                continue
            if not result.trace.get("intact", True):
                problems.append("the code removed or replaced the "
                                "grader's trace function (sys.settrace), "
                                "so its shape comments could not be "
                                "verified")
            records.append(result.trace.get("records") or {})
        runs.append((sizes, shapes.merge_records(*records)))
    return runs, _unique(problems)


def _never_completed(run: TaskRun, method: str | None) -> str | None:
    """Why ``method`` ran to the end in every graded case but in none of
    the grader's shape checks (None when that is not so).

    Such a forward refuses to be checked (it tells the traced calls from
    the graded ones), so its comments cannot be verified and the shapes
    item is not earned. A forward that fails in a graded case too is
    judged by the correctness items, and its comments statically (see
    docs/rubric-decisions.md).
    """
    traced = [result for result in run.results.values()
              if result.info.trace == method]
    if not traced or any(r.ok and r.trace is not None for r in traced):
        return None
    graded = [result for result in run.results.values()
              if result.info.trace is None and result.info.case is not None]
    if not graded or not all(result.ok for result in graded):
        return None
    first = next((r.problem for r in traced if r.problem),
                 "it returned no shape trace").rstrip(".")
    count = len(traced)
    return (f"it ran to the end in every graded case, but in none of the "
            f"{count} runs that check the shapes: {first}")


def score_shapes_item(item: Item, analysis: TaskAnalysis, run: TaskRun,
                      assignment: Assignment,
                      code: TaskCode | None = None) -> ItemReport:
    """The shape-comment penalty: verified by running forward (the graded
    method and whatever code of the submission ran for it)."""
    where = f"{analysis.task.target}.{item.method}"
    statements = (list(code.statements) if code is not None
                  else analysis.statements.get(item.method, []))
    if analysis.syntax_error:
        return ItemReport(item.id, item.task, item.title, 0.0, 0.0, True,
                          "not checked: the code does not parse")
    if analysis.span is None:
        return ItemReport(item.id, item.task, item.title, 0.0, 0.0, True,
                          f"not checked: {analysis.task.target} is not "
                          f"defined")
    if (analysis.stub and not (code and code.outside)) or not statements:
        return ItemReport(item.id, item.task, item.title, 0.0, 0.0, True,
                          f"not checked: {where} has no code of yours yet")
    if run.import_error:
        return ItemReport(item.id, item.task, item.title, 0.0, 0.0, True,
                          "not checked: the code could not be loaded")
    trace_runs, problems = _trace_runs(run, assignment.size_sets,
                                       analysis.task.dimensions)
    if problems:
        return ItemReport(item.id, item.task, item.title, item.points, 0.0,
                          False, "; ".join(problems) + ".")
    table = shapes.DimensionTable.of(assignment)
    try:
        findings = shapes.verify(statements, trace_runs, table)
    except shapes.ShapeRecordError as exc:
        return ItemReport(item.id, item.task, item.title, item.points, 0.0,
                          False, f"the shape traces could not be read "
                                 f"({exc}); the comments are unverified.")
    details = (shapes.format_findings(findings, analysis.source)
               if findings else "")
    never = _never_completed(run, item.method)
    if never is not None:
        return ItemReport(
            item.id, item.task, item.title, item.points, 0.0, False,
            f"{where} never ran to the end under the grader's shape "
            f"checks ({never}), so its shape comments could not be "
            f"checked; a forward that refuses the shape checks cannot "
            f"pass this item.", details=details)
    bad = [f for f in findings if f.penalised]
    if bad:
        return ItemReport(item.id, item.task, item.title, item.points, 0.0,
                          False, f"{len(bad)} statement(s) in {where} have "
                                 f"a missing or wrong shape comment.",
                          details=details)
    return ItemReport(item.id, item.task, item.title, 0.0, 0.0, True,
                      f"every tensor statement in {where} has a correct "
                      f"shape comment", details=details)


def score_bonus_item(item: Item, analysis: TaskAnalysis,
                     earned: dict[str, ItemReport],
                     assignment: Assignment,
                     code: TaskCode | None = None) -> ItemReport:
    """The bonus: a short method that is also fully correct. The
    statements of every helper the method ran count as its own."""
    count = (code.statement_count if code is not None
             else analysis.statement_counts.get(item.method))
    required = assignment.item(item.requires)
    full = (item.requires in earned
            and earned[item.requires].score == required.points)
    where = f"{analysis.task.target}.{item.method}"
    if count is None:
        return ItemReport(item.id, item.task, item.title, 0.0, 0.0, False,
                          f"no bonus: {where} is not defined",
                          optional=True)
    short = count <= item.max_statements
    if short and full:
        return ItemReport(item.id, item.task, item.title, item.points, 0.0,
                          True, f"{where} has {count} statement(s) and is "
                                f"correct: +{item.points:g}", optional=True)
    why = (f"{where} has {count} statements (at most "
           f"{item.max_statements} earn the bonus)" if not short else
           f"{item.requires} did not earn full points")
    return ItemReport(item.id, item.task, item.title, 0.0, 0.0, False,
                      f"no bonus (optional): {why}", optional=True)


def _pointed(report: ItemReport, analysis: TaskAnalysis,
             assignment: Assignment) -> ItemReport:
    """An item of a task whose graded name is missing, pointing at the
    definition that is most likely meant (the score stays: the
    contract's names are fixed)."""
    target = analysis.task.target
    found = analysis.near_miss.sentence(analysis.source, target)
    if assignment.item(report.id).kind == "checks":
        message = (f"0 points: `{target}` is not defined; {found} (the "
                   f"grader imports the contract's names only).")
        return replace(report, message=message, diagnosis=[], details="")
    return replace(report, message=f"{report.message}; {found}")


def score(assignment: Assignment, submission: Submission,
          analyses: dict[str, TaskAnalysis], runs: dict[str, TaskRun],
          outcomes: list[CheckOutcome],
          lint: dict[Path, list[pep8.Pep8Finding] | str],
          codes: dict[str, TaskCode] | None = None) -> Report:
    """Every item's points, the clamped task totals and the report."""
    codes = codes or {}
    items: list[ItemReport] = []
    tasks: list[TaskReport] = []
    errors: list[str] = []
    notes = list(submission.notes)
    for task in assignment.tasks:
        analysis, run = analyses[task.id], runs[task.id]
        code = codes.get(task.id)
        static = [f for node in (code.nodes if code else ())
                  for f in forbidden_uses(node, assignment.forbidden_names)]
        forbidden = _unique(analysis.forbidden + static + run.forbidden)
        untraceable = code.untraceable if code else ()
        earned: dict[str, ItemReport] = {}
        for item in assignment.items_of(task.id):
            if item.kind == "checks":
                report, problems = score_checks_item(item, outcomes,
                                                     forbidden, untraceable)
                errors += problems
            elif item.kind == "pep8":
                report = score_pep8_item(
                    item, analysis, lint.get(analysis.source.path, []),
                    code)
            elif item.kind == "shapes":
                report = score_shapes_item(item, analysis, run, assignment,
                                           code)
            else:
                continue
            earned[item.id] = report
        for item in assignment.items_of(task.id):
            if item.kind == "bonus":
                earned[item.id] = score_bonus_item(item, analysis, earned,
                                                   assignment, code)
        ordered = [earned[i.id] for i in assignment.items_of(task.id)]
        if analysis.near_miss is not None:
            ordered = [_pointed(report, analysis, assignment)
                       for report in ordered]
        items += ordered
        raw = sum(r.score for r in ordered
                  if assignment.item(r.id).kind != "bonus")
        bonus = sum(r.score for r in ordered
                    if assignment.item(r.id).kind == "bonus")
        clamped = min(max(raw, 0.0), task.max_score)
        # An untouched stub is not an error of the grading: it is a note
        # of its task (the report's header lists errors only).
        notes_of_task = [f"{task.target} is still the untouched stub: "
                         f"write your code between the YOUR CODE "
                         f"markers."] if analysis.stub else []
        tasks.append(TaskReport(
            id=task.id, title=task.title, score=clamped + bonus,
            max_score=task.max_score, bonus=bonus, raw=raw,
            source=str(analysis.source.path), output=run.output,
            problems=list(run.problems), notes=notes_of_task))
    penalised_tasks = {i.task for i in assignment.items if i.kind == "pep8"}
    for path, findings in lint.items():
        if isinstance(findings, str):
            continue
        spans = {t: a.span for t, a in analyses.items()
                 if a.span and a.source.path == path}
        for task_id, code in codes.items():
            if analyses[task_id].source.path != path:
                continue
            for number, span in enumerate(code.spans):
                spans.setdefault(f"{task_id}#{number}", span)
        attributed = pep8.attribute(findings, spans)
        for name in [n for n in attributed if n and "#" in n]:
            attributed.setdefault(name.split("#")[0], []).extend(
                attributed.pop(name))
        source = next(a.source for a in analyses.values()
                      if a.source.path == path)
        outside = attributed.get(None, [])
        if outside:
            notes.append(f"flake8 findings outside the graded classes "
                         f"(reported, never penalised):\n"
                         f"{pep8.format_pep8(outside, source)}")
        for task_id, found in attributed.items():
            if task_id is None or task_id in penalised_tasks or not found:
                continue
            target = assignment.task(task_id).target
            notes.append(f"flake8 findings in {target} (this task has no "
                         f"PEP-8 item: reported, never penalised):\n"
                         f"{pep8.format_pep8(found, source)}")
    task_errors = _unique([p for t in tasks for p in t.problems
                           if not p.startswith(("The sandbox refused",))])
    return Report(
        assignment=assignment.id, title=assignment.title,
        path=str(submission.path),
        score=sum(t.score for t in tasks), max_score=assignment.max_score,
        items=items, tasks=tasks, errors=_unique(errors) + task_errors,
        notes=notes, diagnoses=dict(assignment.diagnoses),
        flags=integrity_flags(runs, codes))


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
