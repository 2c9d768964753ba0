"""Scoring: points from observations, check outcomes and the rubric.

Pure functions of what the earlier stages produced (trusted side): each
item kind has its function (:func:`score_checks_item`,
:func:`score_pep8_item`, :func:`score_shapes_item`,
:func:`score_bonus_item`), and :func:`score` adds them up per task as the
rubric says (clamped to the task's points before its bonus) into a
:class:`~grader.output.report.Report`, with the integrity flags of the run
(:func:`integrity_flags`). :mod:`grader.engine` runs the stages and calls
:func:`score`; nothing here runs or reads a submission.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from grader import shapes
from grader.analyse.static import TaskAnalysis, forbidden_uses
from grader.judge import pep8
from grader.judge.attribution import TaskCode
from grader.judge.checking import CheckOutcome, item_messages
from grader.locate.source import SourceFile
from grader.locate.submission import Submission
from grader.output.report import Flag, ItemReport, Report, TaskReport
from grader.plan import Case
from grader.wire import REFUSED_THREAD
from grader.rubric import Assignment, Item, Task
from grader.run.observe import ProbeResult, TaskRun


def integrity_flags(runs: dict[str, TaskRun],
                    codes: dict[str, TaskCode]) -> list[Flag]:
    """The integrity flags of a grade: what the code tried (grouped by
    verb, at most three objects each), code that ran but is not the
    submission's, foreign bytes on the result channel, replaced library
    functions."""
    from grader.output.text import listing, one_line, quote

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
        if (kind, verb) == ("refused", REFUSED_THREAD):
            label += ("; libraries start threads of their own, e.g. a "
                      "progress bar's monitor, and the refusal by itself "
                      "costs no point")
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
    for task_id, run in runs.items():
        if run.scratch_full:
            flags.append(Flag(
                "disk", f"{task_id}: the code {run.scratch_full}; what "
                        f"failed or never ran because of it earns "
                        f"nothing.", task_id))
    for task_id, run in runs.items():
        unrecorded = sum(run.unrecorded().values())
        if unrecorded:
            flags.append(Flag(
                "capped", f"{task_id}: {unrecorded} execution(s) of "
                          f"shape-commented statements ran past the "
                          f"grader's caps on what it records per "
                          f"statement (distinct shapes, reading a call) "
                          f"and were not recorded; the shapes item is not "
                          f"earned.", task_id))
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


# --------------------------------------------------------------------------
# Items


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
        from grader.output.text import listing

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
        messages.insert(0, f"{total:g} of {item.points:g} points: "
                           f"{_part_words(item, best)}.")
    elif item.combine == "sum" and total > 0:
        good = [_part_words(item, p) for p in item.parts if earned[p]]
        lost = [_part_words(item, p) for p in missed]
        messages.insert(0, f"{total:g} of {item.points:g} points (earned: "
                           f"{', '.join(good)}; missed: "
                           f"{', '.join(lost)}).")
    return ItemReport(item.id, item.task, item.title, total, item.points,
                      False, " ".join(messages), diagnosis), errors


def _part_words(item: Item, part: str) -> str:
    """A part of an item in plain words (the rubric's ``part_words``),
    else its name."""
    return item.part_words.get(part, part)


def not_checked(item: Item, why: str) -> ItemReport:
    """A penalty item the grader could not check (``why``): it costs
    nothing and is no pass either (docs/rubric.md, "Not checked")."""
    return ItemReport(item.id, item.task, item.title, 0.0, 0.0, False,
                      f"not checked: {why}", checked=False)


def score_pep8_item(item: Item, analysis: TaskAnalysis,
                    findings: list[pep8.Pep8Finding] | str,
                    code: TaskCode | None = None) -> ItemReport:
    """The PEP-8 penalty: any flake8 finding inside the task's class (and
    in the code that ran for it, see :mod:`grader.judge.attribution`).

    ``findings`` is the reason flake8 could not check the code when it is
    a string: code flake8 cannot check is not PEP-8 clean, so the item
    costs its point (docs/rubric.md, "Penalties cannot be dodged").
    """
    target = analysis.task.target
    if analysis.syntax_error or analysis.span is None:
        why = ("the code does not parse" if analysis.syntax_error
               else f"{target} is not defined")
        return not_checked(item, why)
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
        from grader.output.text import listing

        ran = listing(list(code.outside))
        target = f"{target} and the code it ran ({ran})"
    if not inside:
        return ItemReport(item.id, item.task, item.title, 0.0, 0.0, True,
                          f"flake8 finds nothing inside {target}")
    return ItemReport(
        item.id, item.task, item.title, item.points, 0.0, False,
        f"flake8 reports {len(inside)} finding(s) inside {target}.",
        details=pep8.format_pep8(inside, analysis.source))


def _size_sets(run: TaskRun) -> list[dict[str, int]]:
    """The size sets the plan traced (the rubric's and the secret ones),
    by index, read from the trace probes themselves."""
    found: dict[int, dict[str, int]] = {}
    for probe_id in run.probe_ids("trace:"):
        index = probe_id.split(":")[1]
        sizes = run.result(probe_id).info.sizes
        if index.isdigit() and sizes:
            found.setdefault(int(index), dict(sizes))
    return [found[i] for i in sorted(found)]


def _trace_runs(run: TaskRun, assignment: Assignment, task: Task
                ) -> tuple[list[tuple[dict, dict]], list[str]]:
    runs, problems = [], []
    stopped: dict[int, str] = {}
    traced = _size_sets(run)
    size_sets, dimensions = assignment.size_sets, task.dimensions
    for index, all_sizes in enumerate(traced if len(traced) > len(
            size_sets) else size_sets):
        sizes = {k: v for k, v in all_sizes.items()
                 if not dimensions or k in dimensions}
        if task.sizes:
            sizes = shapes.known_sizes(
                dict(all_sizes), tuple(sizes), assignment.identities,
                dict(task.sizes))
        records = []
        for probe_id in run.probe_ids(f"trace:{index}"):
            if probe_id.split(":")[1] != str(index):
                continue
            result = run.result(probe_id)
            if result.stopped is not None and result.trace is None:
                # Fail closed: the runs at these sizes were never seen.
                stopped.setdefault(index + 1, result.stopped)
                continue
            if result.trace is None:
                continue
            if not result.trace.get("intact", True):
                problems.append("the code removed or replaced the "
                                "grader's trace function (sys.settrace), "
                                "so its shape comments could not be "
                                "verified")
            records.append(result.trace.get("records") or {})
        runs.append((sizes, shapes.merge_records(*records)))
    if stopped and any(r.ok for r in _graded_calls(run)):
        # (Only when the code ran to the end in a graded call: a forward
        # that never completes anywhere has earned nothing, and its
        # comments are judged as written.)
        numbers = ", ".join(map(str, stopped))
        problems.append(f"the shape checks under size set(s) {numbers} "
                        f"did not run to the end "
                        f"({next(iter(stopped.values()))}), so the comments "
                        f"could not be verified at those sizes")
    return runs, _unique(problems)


def _reached(run: TaskRun, statements: list[shapes.Statement]
             ) -> frozenset[int]:
    """The ids of the statements that ran in a call that then raised
    (any probe's): those that completed before the error, and the one
    whose lines hold the line it was raised at. Words of the shape report
    only, never a verified run."""
    reached: set[int] = set()
    for result in run.results.values():
        reached |= result.reached
        line = (result.error or {}).get("line")
        if isinstance(line, int):
            reached.update(s.id for s in statements
                           if s.first_line <= line <= s.last_line)
    return frozenset(reached)


def _made_lines(run: TaskRun) -> frozenset[int]:
    """The lines on which a traced run's torch operations made a tensor
    that outlived its statement (the worker's ``made``, every trace)."""
    return frozenset(line for result in run.results.values()
                     for line in (result.trace or {}).get("made") or ())


def _sizes_of(case: Case | None) -> str:
    """What a report calls the sizes of a graded case ("the sizes of
    hidden case 'hidden-0'")."""
    if case is None:
        return "the sizes of a graded case"
    name = f"'{case.shown or case.name}'"
    if case.public:
        return f"the sizes of the public test values {name}"
    if case.hidden:
        return f"the sizes of hidden case {name}"
    return f"the sizes of the grader's own case {name}"


def _graded_runs(run: TaskRun, assignment: Assignment, task: Task
                 ) -> tuple[list[shapes.GradedRun], list[str], list[dict]]:
    """The shape records of every probe that is not a shape check and whose
    sizes the plan knows (its case's, completed by the rubric's
    identities), one run per distinct set of sizes, named by the first
    case that has them (docs/threat-model.md, principle 6); and the
    records of the probes whose sizes it does not know (they answer only
    the catch-all: was a tensor of the statement read). A probe that
    calls an object again (``again``) is one of those: what the object
    kept from its earlier calls (a cache of masks by length) holds
    tensors of another case's sizes."""
    names = tuple(k for k in assignment.dimensions
                  if not task.dimensions or k in task.dimensions)
    groups: dict[tuple, tuple[str, dict[str, int], list[dict]]] = {}
    problems, unsized = [], []
    for result in run.results.values():
        info = result.info
        if info.trace is not None or result.trace is None:
            continue
        plain = info.sizes or (info.case.sizes if info.case else None)
        sizes = shapes.known_sizes(dict(plain or {}), names,
                                   assignment.identities,
                                   dict(task.sizes))
        if not sizes or info.again:
            unsized.append(result.trace.get("records") or {})
            continue
        if not result.trace.get("intact", True):
            problems.append("the code removed or replaced the grader's "
                            "trace function (sys.settrace), so its shape "
                            "comments could not be verified")
        key = tuple(sorted(sizes.items()))
        if key not in groups:
            groups[key] = (_sizes_of(info.case), sizes, [])
        groups[key][2].append(result.trace.get("records") or {})
    return ([(label, sizes, shapes.merge_records(*records))
             for label, sizes, records in groups.values()],
            _unique(problems), unsized)


def _graded_calls(run: TaskRun) -> list[ProbeResult]:
    """The probes that call the task's code on a case (not a shape
    check, not a construction alone)."""
    return [result for result in run.results.values()
            if result.info.trace is None and result.info.case is not None]


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
    graded = _graded_calls(run)
    if not graded or not all(result.ok for result in graded):
        return None
    first = next((r.problem for r in traced if r.problem),
                 "it returned no shape trace").rstrip(".")
    count = len(traced)
    return (f"it ran to the end in every graded case, but in none of the "
            f"{count} runs that check the shapes: {first}")


def _unrecorded_words(unrecorded: dict[str, int],
                      statements: list[shapes.Statement],
                      source: SourceFile) -> str:
    """The shapes item's sentence about executions the worker's records
    left out past their cap (fail closed: not seen, not verified)."""
    from grader.output.text import listing

    lines = {str(s.id): s.first_line for s in statements}
    where = [source.where(lines[key]) for key in sorted(
        unrecorded, key=lambda k: lines.get(k, 0)) if key in lines]
    total = sum(unrecorded.values())
    text = (f"{total} execution(s) ran with more distinct shapes than the "
            f"grader records per statement, or past what it reads of a "
            f"statement in one call")
    if where:
        text += f" (at {listing(where)})"
    return (text + ", so they were not recorded and the shape comments "
                   "could not be verified")


def _helper_hints(findings: list[shapes.Finding],
                  analysis: TaskAnalysis) -> list[shapes.Finding]:
    """A wrong shape on a line outside the graded class (a helper it
    runs) gets the hint of per-class comment lines
    (docs/shape-comments.md, "A helper several classes call")."""
    span, target = analysis.span, analysis.task.target
    if span is None:
        return findings
    return [replace(f, hint=(
        f"this line is outside {target} (code it runs); when several "
        f"graded classes run it with different shapes, give each class's "
        f"shape on a comment line of its own that names the class, e.g. "
        f"# [...] in {target}"))
        if f.kind == "wrong_shape" and f.hint is None
        and not span[0] <= f.line <= span[1] else f for f in findings]


def score_shapes_item(item: Item, analysis: TaskAnalysis, run: TaskRun,
                      assignment: Assignment,
                      code: TaskCode | None = None) -> ItemReport:
    """The shape-comment penalty: verified by running forward (the graded
    method and whatever code of the submission ran for it)."""
    where = f"{analysis.task.target}.{item.method}"
    statements = (list(code.statements) if code is not None
                  else analysis.statements.get(item.method, []))
    if analysis.syntax_error:
        return not_checked(item, "the code does not parse")
    if analysis.span is None:
        return not_checked(item, f"{analysis.task.target} is not defined")
    if (analysis.stub and not (code and code.outside)) or not [
            s for s in statements if s.kind != shapes.SPAN_KIND]:
        if code is not None and code.unstated:
            # Submission code computed the call's answer on lines no shape
            # comment can sit on (a lambda): fail closed, as a missing
            # comment on a line that computes a tensor.
            from grader.output.text import listing

            return ItemReport(
                item.id, item.task, item.title, item.points, 0.0, False,
                f"{where} ran code of yours written as a lambda "
                f"({listing(list(code.unstated))}) that is not part of a "
                f"statement with a shape comment: a lambda's tensors have no "
                f"line of their own for a shape comment, so they count as "
                f"missing comments; write it as a def (or inline it in a "
                f"commented statement).")
        return not_checked(item, f"{where} has no code of yours yet")
    if run.import_error:
        return not_checked(item, "the code could not be loaded")
    trace_runs, problems = _trace_runs(run, assignment, analysis.task)
    graded_runs, graded_problems, unsized = _graded_runs(
        run, assignment, analysis.task)
    problems = _unique(problems + graded_problems)
    unrecorded = run.unrecorded()
    if unrecorded:
        problems.append(_unrecorded_words(unrecorded, statements,
                                          analysis.source))
    if problems:
        return ItemReport(item.id, item.task, item.title, item.points, 0.0,
                          False, "; ".join(problems) + ".")
    table = shapes.DimensionTable.of(assignment)
    statements = shapes.for_caller(statements, analysis.task.target, table)
    try:
        calls = shapes.CallInputs(analysis.task.inputs,
                                  assignment.identities)
        findings = shapes.verify_everywhere(statements, trace_runs,
                                            graded_runs, table,
                                            _made_lines(run), unsized,
                                            calls,
                                            _reached(run, statements))
    except shapes.ShapeRecordError as exc:
        return ItemReport(item.id, item.task, item.title, item.points, 0.0,
                          False, f"the shape traces could not be read "
                                 f"({exc}); the comments are unverified.")
    findings = _helper_hints(findings, analysis)
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
    unchecked = sum(1 for f in findings if f.kind in shapes.NOTE_KINDS)
    if unchecked:
        # Nothing was found wrong, but not everything could be checked:
        # the words say so rather than call every comment correct.
        return ItemReport(
            item.id, item.task, item.title, 0.0, 0.0, True,
            f"no shape comment in {where} was found missing or wrong, "
            f"but {unchecked} statement(s) could not be checked (see the "
            f"notes)", details=details)
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


def _unlocated(assignment: Assignment, analysis: TaskAnalysis,
               earned: dict[str, ItemReport]) -> None:
    """The graded name earned points, yet no ``class`` statement of that
    name stands at the top level of the file (it is bound another way: an
    alias of another class, ``type(...)``, a factory's return): which
    code is the class's cannot be told, so its penalty items cannot be
    shown clean and cost their points, as code flake8 cannot check does
    (docs/rubric-decisions.md), and the bonus is not earned."""
    target = analysis.task.target
    bound = (f"{target} earned points, but no `class {target}` statement "
             f"stands at the top level of the file (it is bound another "
             f"way: an alias, type(...), a factory)")
    for item_id, report in earned.items():
        item = assignment.item(item_id)
        if item.kind in ("pep8", "shapes"):
            what = ("PEP-8 (flake8)" if item.kind == "pep8"
                    else "its shape comments")
            earned[item_id] = ItemReport(
                item.id, item.task, item.title, item.points, 0.0, False,
                f"{bound}: the grader cannot tell which code is the "
                f"class's, so {what} cannot be checked, and code the "
                f"grader cannot check counts as not clean. Define "
                f"`class {target}` at the top level.")
        elif item.kind == "bonus":
            earned[item_id] = ItemReport(
                item.id, item.task, item.title, 0.0, 0.0, False,
                f"no bonus (optional): {bound}.", optional=True)


def _pointed(report: ItemReport, analysis: TaskAnalysis,
             assignment: Assignment) -> ItemReport:
    """An item of a task whose graded name is missing, pointing at the
    definition that is most likely meant (the score stays: the
    contract's names are fixed)."""
    target = analysis.task.target
    found = analysis.near_miss.sentence(analysis.source, target)
    if assignment.item(report.id).kind == "checks" and report.score <= 0:
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
                  for f in forbidden_uses(node, assignment.forbidden_names,
                                          analysis.own)]
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
        if analysis.span is None and not analysis.syntax_error and any(
                report.score > 0 for report in earned.values()
                if assignment.item(report.id).kind == "checks"):
            _unlocated(assignment, analysis, earned)
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
