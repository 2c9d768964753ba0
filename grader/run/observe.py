"""What the sandbox observed, decoded and explained, in the trusted process.

:func:`observe` turns a worker's raw frames into a :class:`TaskRun`: one
:class:`ProbeResult` per planned probe, each either a value or a sentence
saying why there is none (the code raised, the import failed, the process
hung or died). The checks read observations only through these classes.
"""
from __future__ import annotations

import re

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from grader.locate.source import SourceFile
from grader.output.text import one_line, quote
from grader.plan import Case, ProbeInfo, state_key, state_words
from grader.run.sandbox import JobResult
from grader.wire import (CHOSEN_BY_DATA, REFUSED_COMPILE, VALUES_OUT,
                         ChannelError, Value, decode_value)


@dataclass(frozen=True)
class ProbeResult:
    """The outcome of one probe."""

    info: ProbeInfo
    value: Value | None = None
    describe: dict | None = None
    trace: dict | None = None
    problem: str | None = None       # why there is no usable result
    error: dict | None = None        # the exception, if the code raised
    seconds: float = 0.0
    # The submission's code that ran during the probe: (fingerprint, first
    # line, name, stage) of each code object, stage "build" (constructing
    # the object) or "call"; and code that ran but is neither the
    # submission's nor a library's: (file, name, line, how it was made).
    ran: tuple[tuple[str, int, str, str], ...] = ()
    foreign: tuple[tuple[str, str, int, str], ...] = ()
    # A probe with a ``fit``: the parameters (by name) training left.
    state: dict[str, Value] | None = None
    # Why the process stopped before this probe ended (its time ran out,
    # it died), when it did: the probe's outcome is then not the code's.
    stopped: str | None = None
    # Names of the probe's weights that answer to the same parameter as a
    # later one (tied weights the probe allowed): name -> the name whose
    # value that parameter holds (docs/internals.md, "Tied parameters").
    aliases: dict[str, str] = field(default_factory=dict)
    # A call that raised: the ids of the planned statements that completed
    # before its error. Words of the shape report only ("ran only in runs
    # that ended in an error"): a call that fails verifies no comment.
    reached: frozenset[int] = frozenset()

    @property
    def ok(self) -> bool:
        """True when the probe ran to the end."""
        return self.problem is None


def format_error(error: dict, source: SourceFile) -> str:
    """One sentence about an exception raised in student code.

    The exception's type name, its message and the line of code are the
    submission's: they are cleaned of control characters and folded to
    one line, and the message is quoted, so that nothing it says can pass
    for a line of the grader's report.
    """
    if not isinstance(error, dict):
        error = {}
    kind = one_line(str(error.get("type", "Exception")), 80)
    if not kind.isidentifier():
        kind = quote(kind, 80)
    message = str(error.get("message", ""))
    text = f"{kind}: {quote(message)}" if message else kind
    line = error.get("line")
    if isinstance(line, int):
        where = source.where(line)
        code = error.get("code")
        text += f" (at {where}" + (f": `{one_line(str(code), 200)}`"
                                   if code else "") + ")"
    return text


def _package_hint(error: dict) -> str:
    """A hint for an import of a module of the student package that the
    sandbox does not hold (a student's own helper module, or another
    homework's): only the graded file and the package files its own
    homework ships are there (docs/rubric-decisions.md)."""
    if not isinstance(error, dict) or \
            error.get("type") != "ModuleNotFoundError":
        return ""
    found = re.search(r"No module named '(transformer_lm\.[\w.]+)'",
                      str(error.get("message", "")))
    if found is None:
        return ""
    return (f" The grader imports only the graded file and the package "
            f"files this homework ships, so {found.group(1)} is not there: "
            f"put the code you need from it into the graded file.")


@dataclass(frozen=True)
class Event:
    """Something the code tried that the sandbox refused or noticed.

    ``kind``: refused (a process, a write, a read outside the allowed
    files), forbidden (a forbidden API, the kit's reference or grader),
    tampered (the grader's frames, tracer, objects) or patched (a library
    function or class replaced). ``verb`` and ``object`` are separate so
    that reports can group attempts ("tried to overwrite a, b, c and 14
    more"); ``line`` is the submission's line, when the act was its own.
    """

    kind: str
    verb: str
    object: str = ""
    line: int | None = None
    phase: str = ""

    @property
    def sentence(self) -> str:
        """'overwrite /kit/x.py (line 45)'."""
        text = self.verb + (f" {self.object}" if self.object else "")
        return text + (f" (line {self.line})" if isinstance(self.line, int)
                       else "")


@dataclass
class TaskRun:
    """Everything observed while running one task's probes."""

    task: str
    source: SourceFile
    results: dict[str, ProbeResult] = field(default_factory=dict)
    import_error: str | None = None
    ended: str = "finished"
    detail: str = ""
    output: str = ""
    output_truncated: bool = False
    refused: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    tampered: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    channel_error: str | None = None
    seconds: float = 0.0
    foreign_bytes: int = 0
    forged_frames: int = 0
    scratch_full: str = ""  # the scratch folder's bound reached, in words
    import_ran: tuple[tuple[str, int, str, str], ...] = ()
    import_foreign: tuple[tuple[str, str, int, str], ...] = ()

    def result(self, probe_id: str) -> ProbeResult:
        """The result of one probe (KeyError for an unplanned id)."""
        return self.results[probe_id]

    def case(self, probe_id: str) -> Case:
        """The trusted case behind a probe."""
        case = self.results[probe_id].info.case
        if case is None:
            raise KeyError(f"probe {probe_id} has no case")
        return case

    def unrecorded(self) -> dict[str, int]:
        """Statement id -> executions the worker's shape records left out
        (past their cap), over every traced probe: those shapes were never
        seen, so no shape comment they touch can be verified."""
        counts: dict[str, int] = {}
        for result in self.results.values():
            left_out = (result.trace or {}).get("left_out") or {}
            for key, count in left_out.items():
                counts[str(key)] = counts.get(str(key), 0) + int(count)
        return counts

    def probe_ids(self, prefix: str) -> list[str]:
        """Ids of the probes whose id starts with ``prefix``, in order."""
        return [p for p in self.results if p.startswith(prefix)]

    @property
    def problems(self) -> list[str]:
        """Sentences about the whole run (import, death, refusals)."""
        found = []
        if self.import_error:
            found.append(self.import_error)
        if self.ended != "finished":
            found.append(f"While running {self.task}, {self.detail}.")
        if self.channel_error:
            found.append(f"The grader's channel from the {self.task} "
                         f"process was corrupted ({self.channel_error}); "
                         f"results after that point were discarded.")
        for what in self.refused:
            found.append(f"The sandbox refused to let the code {what}.")
        for what in self.tampered:
            found.append(f"The sandbox refused to let the code {what}.")
        return found


def coverage_of(message: dict) -> tuple[tuple, tuple]:
    """The (ran, foreign) code of an import or probe frame."""
    coverage = message.get("coverage") or {}
    ran = tuple((str(r[0]), int(r[1]), str(r[2]), str(r[3]))
                for r in coverage.get("ran", []))
    foreign = tuple((str(f[0]), str(f[1]), int(f[2]), str(f[3]))
                    for f in coverage.get("foreign", []))
    return ran, foreign


def _result_from_frame(info: ProbeInfo, message: dict,
                       source: SourceFile) -> ProbeResult:
    seconds = float(message.get("seconds", 0.0) or 0.0)
    ran, foreign = coverage_of(message)
    if not message.get("ok"):
        error = message.get("error") or {}
        return ProbeResult(info=info, error=error, seconds=seconds,
                           problem=format_error(error, source), ran=ran,
                           foreign=foreign, reached=frozenset(
                               int(i) for i in message.get("reached", ())))
    try:
        value = (decode_value(message["value"]) if "value" in message
                 else None)
        state = message.get("state")
        state = ({str(name): decode_value(item) for name, item in
                  state.items()} if isinstance(state, dict) else None)
    except (ChannelError, ValueError, TypeError, OverflowError) as exc:
        return ProbeResult(info=info, seconds=seconds,
                           problem=f"its result could not be read ({exc})")
    describe = message.get("describe")
    trace = message.get("trace")
    aliases = message.get("aliases")
    return ProbeResult(info=info, value=value, seconds=seconds,
                       describe=describe if isinstance(describe, dict)
                       else None,
                       trace=trace if isinstance(trace, dict) else None,
                       ran=ran, foreign=foreign, state=state,
                       aliases={str(k): str(v) for k, v in aliases.items()}
                       if isinstance(aliases, dict) else {})


def observe(task: str, source: SourceFile, plan: list[ProbeInfo],
            job: JobResult) -> TaskRun:
    """Decode a worker's frames against the task's plan."""
    run = TaskRun(task=task, source=source, ended=job.ended,
                  detail=job.detail, output=job.output,
                  output_truncated=job.output_truncated,
                  channel_error=job.channel_error, seconds=job.seconds,
                  foreign_bytes=job.foreign_bytes,
                  forged_frames=job.forged_frames,
                  scratch_full=job.scratch_full)
    # Each probe's case says the state the probe ran in, when it is not
    # the default, so that every failure worded with it says it too.
    plan = [_stated(info) for info in plan]
    by_id: dict[str, dict] = {}
    started: str | None = None
    compiled: list[str] = []
    chosen: list[str] = []
    taken: list[str] = []
    events = {"refused": run.refused, "forbidden": run.forbidden,
              "tampered": run.tampered, "patched": run.patched}
    for message in job.frames:
        kind = message.get("type")
        if kind == "import":
            run.import_ran, run.import_foreign = coverage_of(message)
        if kind == "import" and not message.get("ok"):
            error = message.get("error") or {}
            run.import_error = ("The submission could not be loaded: "
                                + format_error(error, source) + "."
                                + _package_hint(error))
        elif kind == "event" and message.get("kind") in events:
            event = Event(kind=str(message["kind"]),
                          verb=str(message.get("verb", ""))[:200],
                          object=str(message.get("object", ""))[:300],
                          line=message.get("line"),
                          phase=str(message.get("phase", ""))[:100])
            if event not in run.events:
                run.events.append(event)
            listed = events[event.kind]
            # A forbidden API counts against a task when its probes use
            # it; at import or after the plan it is only reported.
            counts = event.kind != "forbidden" or event.phase not in (
                "import", "end", "setup")
            text = event.sentence
            if event.kind == "forbidden" and event.verb == "use":
                text = event.sentence[len("use "):]
            if counts and text not in listed:
                listed.append(text)
        elif kind == "event" and message.get("kind") == "untraceable":
            what = str(message.get("object", ""))[:200]
            if message.get("verb") == CHOSEN_BY_DATA:
                chosen.append(what)
            elif message.get("verb") == VALUES_OUT:
                taken.append(what)
            elif message.get("verb") == REFUSED_COMPILE and \
                    message.get("phase") in OUTSIDE_PROBES:
                # Refused while loading (module-level demo code trying
                # torch.compile): nothing compiled exists, so nothing of
                # it can run in a probe; a refused attempt, reported.
                _refused_compile(run, what, message.get("line"),
                                 str(message.get("phase")))
            else:
                compiled.append(what)
        elif kind == "patched":
            for what in message.get("what", []):
                if str(what) not in run.patched:
                    run.patched.append(str(what)[:200])
        elif kind == "start":
            started = str(message.get("id"))
        elif (kind == "probe" and isinstance(message.get("id"), str)
              and message["id"] == started):
            # Only the answer to the probe just started counts: a frame
            # forged before (e.g. at import) is ignored.
            by_id.setdefault(message["id"], message)
    for info in plan:
        stopped = None
        if info.id in by_id:
            run.results[info.id] = _result_from_frame(info, by_id[info.id],
                                                      source)
            continue
        if run.import_error:
            problem = run.import_error
        elif info.id == started and job.ended != "finished":
            problem = f"while running it, {job.detail}"
            stopped = job.detail
        elif job.ended != "finished":
            problem = (f"it never ran: the process had already stopped "
                       f"({job.detail})")
            stopped = job.detail
        elif job.channel_error:
            problem = "its result was lost on a corrupted channel"
        else:
            problem = "no result was reported"
        run.results[info.id] = ProbeResult(info=info, problem=problem,
                                           stopped=stopped)
    # Read before the twins fold: each twin is a probe of its own.
    if taken and not any(_holds_tensor(r) for r in run.results.values()):
        taken = []
    fold_twins(run)
    if compiled or chosen or taken:
        _charge_compiled(run, compiled, chosen, taken)
    return run


def _holds_tensor(result: ProbeResult) -> bool:
    """Whether a graded call answered with something that can hold
    values computed outside torch: a tensor in what the grader judges of
    its answer (every judge wants tensors, at most one level into a tuple
    or a list; of any other object only its type is sent), or the
    parameters it left.
    Values a task's graded calls took out of torch cost the task only
    when one of its calls did (docs/threat-model.md, principle 4): a
    task none of whose calls answered with a tensor earns nothing from
    any answer (e.g. "should be a tensor"), whatever computed it.
    Across the task, not call by call: values taken out in one call may
    come back in another's answer."""
    if not result.ok:
        return False
    return result.state is not None or (result.value is not None and
                                        result.value.holds_tensor)


def _stated(info: ProbeInfo) -> ProbeInfo:
    """``info`` with its case's ``state`` set to the words of the state
    the probe ran in, unless it ran in the default one."""
    words = state_words(info, default="")
    if info.case is None or not words:
        return info
    return replace(info, case=replace(info.case, state=words))


#: Tolerances of "the same answer" in both modes (float32 round-off).
TWIN_RTOL, TWIN_ATOL = 1e-5, 1e-6


def fold_twins(run: TaskRun) -> None:
    """Fold each probe's twins (the probe in the other autograd mode, on
    its input or on a fresh one, and in its own mode on another fresh
    one: :meth:`grader.plan.Plan.assign_modes`) into the probe, and
    remove them from ``run.results``: no check ever sees a twin. The code
    that ran in any counts (``ran``, ``foreign``); a probe that ran takes
    a twin's problem when the twin did not run to the end (it raised, it
    never ran, its time ran out: that mode was never seen, so it fails
    closed), and a problem of its own when the twin answered otherwise
    (another value or description on the same input; on fresh inputs,
    the trusted answer matched in one mode and missed in the other)."""
    twins: dict[str, list[ProbeResult]] = {}
    for probe_id in [p for p, r in run.results.items()
                     if r.info.twin_of is not None]:
        twin = run.results.pop(probe_id)
        twins.setdefault(str(twin.info.twin_of), []).append(twin)
    for original_id, found in twins.items():
        original = run.results.get(original_id)
        if original is None:
            continue
        merged = original
        for twin in found:
            merged = replace(
                merged,
                ran=merged.ran + tuple(r for r in twin.ran
                                       if r not in merged.ran),
                foreign=merged.foreign + tuple(
                    f for f in twin.foreign if f not in merged.foreign))
        if merged.ok:
            problem = _twins_problem(original, found)
            if problem is not None:
                merged = replace(merged, problem=problem)
        run.results[original_id] = merged


def _twins_problem(original: ProbeResult, twins: list[ProbeResult]
                   ) -> str | None:
    """Why a probe that ran does not count, given its twins; None when
    every twin ran and the answers agree."""
    for twin in twins:
        if not twin.ok:
            said = (f"it raised {twin.problem}" if twin.error
                    else str(twin.problem))
            return f"{state_words(twin.info)}, {said}"
    fresh = [twin for twin in twins if twin.info.other is not None]
    if fresh:
        problem = _fresh_inputs_problem(original, fresh)
        if problem is not None:
            return problem
    for twin in twins:
        if twin.info.other is None:
            problem = _twin_problem(original, twin)
            if problem is not None:
                return problem
    return None


def _twin_problem(original: ProbeResult, twin: ProbeResult) -> str | None:
    """A twin on the probe's own input: the same answer in both modes."""
    on, off = ((twin, original) if twin.info.grad else (original, twin))
    differs = value_difference(on.value, off.value)
    if differs is None and on.describe != off.describe:
        differs = "its description (children, parameters, buffers) differs"
    if differs is None:
        return None
    return (f"it answered differently {state_words(on.info)} than "
            f"{state_words(off.info)}, on the same input, weights and random "
            f"seed ({differs})")


def _fresh_inputs_problem(original: ProbeResult,
                          twins: list[ProbeResult]) -> str | None:
    """Twins on fresh inputs: the code must match the trusted answers (or
    have the plug-in's property, ``TwinInput.judge``) in every state the
    calls ran in or in none (code wrong alike in every state is the
    checks' to judge). An answer remembered from an input seen before
    does not fit a fresh one, so a state right only on what it has seen
    misses there."""
    first = twins[0].info.other
    assert first is not None

    def missed(result: ProbeResult, index: int) -> str | None:
        other = result.info.other or first
        if other.judge is not None:
            return other.judge(result.value, index)
        want = other.reference if index < 0 else other.expected[index]
        return expected_difference(result.value, want, other.rtol,
                                   other.atol)

    calls = [(original, "its own input", missed(original, -1))]
    for twin in twins:
        calls.append((twin, "a fresh input of the same sizes",
                      missed(twin, twin.info.other_index)))
    what = first.asked
    for good, _, miss in calls:
        if miss is not None:
            continue
        for bad, where, found in calls:
            if found is not None and \
                    state_key(good.info) != state_key(bad.info):
                return (f"it {what} {state_words(good.info)} but not "
                        f"{state_words(bad.info)} (on {where}, "
                        f"with the same weights: {found})")
    return None


def expected_difference(value: Value | None, expected: Any, rtol: float,
                        atol: float, where: str = "the value"
                        ) -> str | None:
    """Where ``value`` differs from a trusted answer (a tensor, or a tuple
    of tensors and None, an item not judged), in words; None when it
    matches (allclose at ``rtol``, ``atol``; a tuple or a list of as many
    items, item by item)."""
    import torch

    if expected is None:
        return None
    if value is None:
        return f"{where} is missing"
    if isinstance(expected, tuple):
        if value.kind not in ("tuple", "list") or \
                len(value.items) != len(expected):
            return f"{where} is {value.describe()}"
        for index, (item, want) in enumerate(zip(value.items, expected)):
            found = expected_difference(item, want, rtol, atol,
                                        f"item {index}")
            if found is not None:
                return found
        return None
    if value.kind != "tensor" or value.tensor is None \
            or tuple(value.shape or ()) != tuple(expected.shape):
        return f"{where} is {value.describe()}"
    got = value.tensor.double()
    want = expected.double()
    if torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        return None
    gap = (got - want).abs().nan_to_num(nan=float("inf")).max().item()
    return f"{where} differs from it by {gap:.3g}"


def value_difference(on: Value | None, off: Value | None,
                     where: str = "the value") -> str | None:
    """Where the value with autograd on (``on``) and the value without
    (``off``) differ, in words ("item 0 differs by 0.31"); None when they
    are the same (tensors allclose at rtol 1e-5, atol 1e-6, with NaNs in
    the same places; tuples and lists item by item)."""
    import math

    import torch

    def both(first: str, second: str) -> str:
        return (f"{where} is {first} with autograd on and {second} "
                f"without")

    if on is None or off is None:
        return None if on is off else both(
            on.describe() if on else "missing",
            off.describe() if off else "missing")
    if on.kind != off.kind:
        return both(on.describe(), off.describe())
    if on.kind in ("tuple", "list"):
        if on.length != off.length or len(on.items) != len(off.items):
            return both(f"{on.kind} of {on.length}",
                        f"{off.kind} of {off.length}")
        for index, (a, b) in enumerate(zip(on.items, off.items)):
            inner = (f"item {index}" if where == "the value"
                     else f"{where}'s item {index}")
            found = value_difference(a, b, inner)
            if found is not None:
                return found
        return None
    if on.kind == "number":
        first, second = on.number, off.number
        if first == second or (first is not None and second is not None and (
                (math.isnan(first) and math.isnan(second)) or math.isclose(
                    first, second, rel_tol=TWIN_RTOL,
                    abs_tol=TWIN_ATOL))):
            return None
        return both(repr(first), repr(second))
    if on.kind == "object":
        return (None if on.type_name == off.type_name
                else both(on.describe(), off.describe()))
    if on.kind != "tensor":
        return None
    if on.dtype != off.dtype or on.shape != off.shape:
        return both(on.describe(), off.describe())
    if on.tensor is None or off.tensor is None:
        return None if on.tensor is off.tensor else \
            f"{where} is too large to compare in one mode"
    a, b = on.tensor, off.tensor
    if not a.is_floating_point():
        return None if torch.equal(a, b) else f"{where} differs"
    a, b = a.double(), b.double()
    if torch.allclose(a, b, rtol=TWIN_RTOL, atol=TWIN_ATOL, equal_nan=True):
        return None
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return f"{where} has NaN in other places"
    gap = (a - b).abs().nan_to_num(nan=0.0).max().item()
    return f"{where} differs by {gap:.3g}"


#: Phases outside the plan's probes: loading the module, the worker's own
#: set-up, after the last probe.
OUTSIDE_PROBES = ("import", "setup", "end")


def _refused_compile(run: TaskRun, what: str, line: object,
                     phase: str) -> None:
    """A way into untraceable code refused outside the probes: the
    stand-in raised instead of compiling, so no compiled code exists; it
    is reported as a refused attempt (a flag), as a refused write is."""
    event = Event(kind="refused", verb="compile code with", object=what,
                  line=line if isinstance(line, int) else None,
                  phase=phase[:100])
    if event not in run.events:
        run.events.append(event)
    if event.sentence not in run.refused:
        run.refused.append(event.sentence)


def _charge_compiled(run: TaskRun, compilers: list[str],
                     chosen: Sequence[str] = (),
                     taken: Sequence[str] = ()) -> None:
    """Code compiled where the grader cannot trace it (TorchScript,
    ``torch.compile``), torch operations chosen by data rather than code,
    and tensor values a graded call took out of torch (docs/threat-model.md,
    principle 4), wherever they happened, are foreign code of every run of
    the task: the task's correctness items earn nothing."""
    entries = []
    if compilers:
        names = ", ".join(dict.fromkeys(compilers))
        entries.append(("", f"code compiled by {names}, which runs where "
                            f"the grader cannot trace it", 0, ""))
    if chosen:
        names = "; ".join(dict.fromkeys(chosen))
        entries.append(("", f"torch operations chosen by data, not by a "
                            f"line of the visible source ({names})", 0, ""))
    if taken:
        names = "; ".join(dict.fromkeys(taken))
        entries.append(("", f"tensor values a graded call took out of "
                            f"torch, where the grader cannot judge what "
                            f"computes with them ({names})", 0, ""))
    for probe_id, result in run.results.items():
        run.results[probe_id] = replace(
            result, foreign=result.foreign + tuple(entries))
