"""Shape comments, part 3: verification (trusted grader process).

:func:`verify` compares each statement's claims with the shapes the
sandbox's tracer recorded under every size set and returns
:class:`Finding` records; :func:`format_findings` turns them into a report
a student can act on; :func:`size_set_collisions` checks that a rubric's
size sets can tell every dimension apart.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, replace
from itertools import combinations_with_replacement
from typing import TYPE_CHECKING, Any, Iterable, TypedDict

from grader.errors import GraderError
from grader.shapes.calls import CallInputs, Marker
from grader.shapes.grammar import (DimensionTable, DimParser, ShapeClaim,
                                   ShapeEvalError, ShapeSyntaxError, brief,
                                   ignored_brackets, is_index, is_tuple,
                                   notation_of, parse_shapes, shape_groups)
from grader.shapes.statements import SPAN_KIND, UNWATCHABLE, Statement
from grader.wire import IRREGULAR_RECORD, UNREAD_RECORD

if TYPE_CHECKING:
    from grader.locate.source import SourceFile

#: Finding kinds that cost the task's point.
PENALISED_KINDS = ("missing", "no_shape", "unknown_name", "wrong_shape",
                   "not_verified")
#: Finding kinds that are reported as notes and cost nothing.
NOTE_KINDS = ("never_ran", "raised_first", "not_traced")

_ABOVE_HINT = ("a comment above a statement belongs to the statement before "
               "it; put each shape on the same line as its statement or "
               "directly below it")


# ---------------------------------------------------------------------------
# Verification (trusted grader process; pure functions)
# ---------------------------------------------------------------------------

class ShapeRecordError(GraderError, ValueError):
    """Tracer records that are not the documented plain data."""


Shape = tuple[int, ...]
#: Stands for the values of a container the tracer did not read (it held
#: more than it reads): no claim matches it, so the comment fails closed.
UNREAD: Shape = (-1,)


@dataclass(frozen=True)
class Held:
    """The tensors a list, tuple or dict held after a statement ran: their
    shapes in order, and whether it held more than the tracer reads."""

    shapes: tuple[Shape, ...]
    unread: bool = False


#: A recorded value the tracer could not read (UNREAD_RECORD): the
#: statement's comment is not verified, never "no tensor".
NOT_READ = UNREAD_RECORD
#: A tensor with no fixed shape (IRREGULAR_RECORD: a nested tensor whose
#: parts differ in size): no bracketed shape claims it, so the statement's
#: comment is not verified.
NO_FIXED_SHAPE = IRREGULAR_RECORD
Execution = tuple[Shape | Held | str | None, ...]


def _entry(value: Any) -> Shape | Held | str | None:
    """One recorded value: None, a tensor's shape, a container's, or
    NOT_READ."""
    if value is None:
        return None
    if value == NOT_READ or value == NO_FIXED_SHAPE:
        return value
    if isinstance(value, list) and all(
            type(size) is int and size >= 0 for size in value):
        return tuple(value)
    if isinstance(value, list) and value:
        unread = value[-1] is None
        shapes = value[:-1] if unread else value
        if all(isinstance(shape, list) and all(
                type(size) is int and size >= 0 for size in shape)
               for shape in shapes):
            return Held(tuple(tuple(shape) for shape in shapes), unread)
    raise ShapeRecordError(f"not a shape: {value!r}")


def _marker(value: Any) -> Marker:
    """An execution's last entry when it ran inside a declared call."""
    if set(value) != {"call", "input"} or type(value["call"]) is not int:
        raise ShapeRecordError(f"not a call's marker: {value!r}")
    shape = value["input"]
    if shape is None:
        return value["call"], None
    found = _entry(shape)
    if not isinstance(found, tuple):
        raise ShapeRecordError(f"not a call's input: {shape!r}")
    return value["call"], found


def _marked(records: Any, statement_id: int
            ) -> list[tuple[Execution, Marker | None]]:
    """The validated executions of one statement in one run's records,
    each with the marker of the declared call it ran in (or None)."""
    if not isinstance(records, dict):
        raise ShapeRecordError("records must be a dict")
    raw = records.get(str(statement_id), records.get(statement_id, []))
    if not isinstance(raw, list):
        raise ShapeRecordError(f"records of statement {statement_id} "
                               f"must be a list")
    executions: list[tuple[Execution, Marker | None]] = []
    for execution in raw:
        if not isinstance(execution, list):
            raise ShapeRecordError("an execution must be a list")
        marker = None
        if execution and isinstance(execution[-1], dict):
            marker = _marker(execution[-1])
            execution = execution[:-1]
        executions.append((tuple(_entry(value) for value in execution),
                           marker))
    return executions


def _executions(records: Any, statement_id: int) -> list[Execution]:
    """The validated executions of one statement in one run's records."""
    return [execution for execution, _ in _marked(records, statement_id)]


#: Where a statement's executions were judged: the run's index and, for
#: a declared call whose input had other sizes, how the report names it.
Place = tuple[int, str]


def _by_call(index: int, sizes: dict[str, int],
             marked: list[tuple[Execution, Marker | None]],
             calls: CallInputs | None
             ) -> list[tuple[dict[str, int], list[Execution], Place]]:
    """One run's executions of a statement, grouped by the sizes they are
    judged at: those of the run, and those of each declared call whose
    input had other sizes (:class:`~grader.shapes.calls.CallInputs`).

    A call's own sizes apply only when the statement also ran at the
    run's sizes in that run: a line that ran only in calls on another
    input is judged at the run's sizes, as if nothing bound them (so
    code that calls a method on an input it chose cannot have a line
    judged only at sizes it chose)."""
    home: list[Execution] = []
    away: dict[tuple, tuple[dict[str, int], str, list[Execution]]] = {}
    for execution, marker in marked:
        bound = calls.bind(sizes, marker) if calls is not None else None
        if calls is None or bound is None or bound == sizes or \
                marker is None:
            home.append(execution)
            continue
        words = calls.describe(marker)
        key = (tuple(sorted(bound.items())), words)
        away.setdefault(key, (bound, words, []))[2].append(execution)
    if not home or not away:
        return [(sizes, [execution for execution, _ in marked],
                 (index, ""))]
    return [(sizes, home, (index, ""))] + [
        (bound, executions, (index, words))
        for bound, words, executions in away.values()]


@dataclass(frozen=True)
class RealShapes:
    """What one statement did under one size set.

    ``shapes`` are the distinct tensor shapes of its executions, formatted
    (a tuple of tensors as ``[2, 5, 33] and [6, 5, 5]``); ``expected`` is
    what the claim means under these sizes (or why it has no value);
    ``wrong`` counts the executions that disagree with the claim.
    """

    index: int
    sizes: dict[str, int]
    shapes: tuple[str, ...]
    expected: str | None
    executions: int
    wrong: int
    # What the report calls these sizes when they are not one of the
    # shape checks' size sets (a graded case's: "the sizes of hidden case
    # 'hidden-0'"); empty for a size set, shown as "size set N".
    label: str = ""
    # The declared call whose input had other sizes than the run's ("in
    # the calls of loss on an input of shape [2, 4]"); empty for the run's.
    call: str = ""

    @property
    def name(self) -> str:
        """How the report names these sizes."""
        name = self.label or f"size set {self.index}"
        return f"{name}, {self.call}" if self.call else name


@dataclass(frozen=True)
class Finding:
    """One problem (or note) about one statement's shape comment."""

    line: int
    statement: str
    kind: str
    claimed: str | None
    real: tuple[RealShapes, ...]
    message: str
    hint: str | None = None

    @property
    def penalised(self) -> bool:
        """True when this finding costs the task's point."""
        return self.kind in PENALISED_KINDS


class _Place(TypedDict):
    """A finding's statement (line and text) and its real shapes."""

    line: int
    statement: str
    real: tuple[RealShapes, ...]


def penalised(findings: Iterable[Finding]) -> bool:
    """True when any finding costs the task's point (notes do not)."""
    return any(finding.penalised for finding in findings)


def _show(shape: Iterable[int]) -> str:
    if tuple(shape) == UNREAD:
        return "more values than the grader reads"
    return brief("[" + ", ".join(str(size) for size in shape) + "]")


def _claims_match(tensors: list[Shape], claims: list[ShapeClaim],
                  sizes: dict[str, int], table: DimensionTable,
                  either_end: bool = False) -> bool:
    """Whether an execution's tensors agree with the comment's claims.

    One claim (the last shape) is enough when every tensor has it; tensors
    of different shapes are matched in order to the last ``len(tensors)``
    shapes of the comment. ``either_end`` (a conditional expression, whose
    branches give different numbers of tensors): the first
    ``len(tensors)`` shapes may match instead.
    """
    def value(claim: ShapeClaim) -> Shape | None:
        try:
            return claim.evaluate(sizes, table)
        except ShapeEvalError:
            return None

    last = value(claims[-1])
    if last is not None and all(shape == last for shape in tensors):
        return True
    if len(claims) < len(tensors):
        return False
    ends = [claims[-len(tensors):]] if len(tensors) > 1 else []
    if either_end and len(tensors) < len(claims):
        ends.append(claims[:len(tensors)])
    return any(all(w is not None and w == t for w, t in
                   zip([value(claim) for claim in end], tensors))
               for end in ends)


def _tensors(execution: Execution) -> list[Shape]:
    """The shapes of the tensors an execution produced, those a list,
    tuple or dict holds included (in order)."""
    found: list[Shape] = []
    for value in execution:
        if isinstance(value, Held):
            found += list(value.shapes) + ([UNREAD] if value.unread else [])
        elif isinstance(value, tuple):
            found.append(value)
    return found


def _show_all(tensors: list[Shape]) -> str:
    """The shapes of an execution's tensors, runs of one shape counted
    (``3 x [6, 5, 11] and [2, 5, 33]``)."""
    runs: list[list] = []
    for shape in tensors:
        if runs and runs[-1][0] == shape:
            runs[-1][1] += 1
        else:
            runs.append([shape, 1])
    return " and ".join(_show(shape) if count == 1
                        else f"{count} x {_show(shape)}"
                        for shape, count in runs)


def _holds(runs: list[tuple[dict[str, int], list[Execution]]]) -> bool:
    """Whether a statement kept tensors in a list, tuple or dict."""
    return any(isinstance(value, Held) for _, executions in runs
               for execution in executions for value in execution)


def _expected(claims: list[ShapeClaim], count: int, sizes: dict[str, int],
              table: DimensionTable) -> str:
    used = claims[-count:] if 1 < count <= len(claims) else claims[-1:]
    shown = []
    for claim in used:
        try:
            shown.append(_show(claim.evaluate(sizes, table)))
        except ShapeEvalError as exc:
            shown.append(f"no value ({exc})")
    return " and ".join(shown)


def _real(index: int, sizes: dict[str, int], executions: list[Execution],
          claims: list[ShapeClaim], table: DimensionTable,
          either_end: bool = False, call: str = "") -> RealShapes:
    seen: list[str] = []
    wrong = 0
    count = 1
    for execution in executions:
        tensors = _tensors(execution)
        if not tensors:
            continue
        count = max(count, len(tensors))
        shown = _show_all(tensors)
        if shown not in seen:
            seen.append(shown)
        if claims and not _claims_match(tensors, claims, sizes, table,
                                        either_end):
            wrong += 1
    expected = _expected(claims, count, sizes, table) if claims else None
    return RealShapes(index=index, sizes=dict(sizes), shapes=tuple(seen),
                      expected=expected, executions=len(executions),
                      wrong=wrong, call=call)


def _unknown_finding(statement: Statement, claim: ShapeClaim,
                     unknown: list[str], table: DimensionTable,
                     real: tuple[RealShapes, ...] = ()) -> Finding:
    names = brief(", ".join(unknown))
    plural = "s" if len(unknown) > 1 else ""
    return Finding(
        line=statement.first_line, statement=statement.text,
        kind="unknown_name", claimed=claim.text, real=real,
        message=f"unknown dimension name{plural} {names} in {claim.text}",
        hint=f"known names (aliases): {table.describe()}; integers and "
             f"products or quotients of them (*, /, //) are allowed too")


def _fits(comment: str | None,
          runs: list[tuple[dict[str, int], list[Execution]]],
          table: DimensionTable) -> bool:
    """Whether ``comment``'s claim holds for every tensor execution."""
    claims = parse_shapes(comment or "", table)
    checked = [(sizes, _tensors(e)) for sizes, executions in runs
               for e in executions if _tensors(e)]
    return bool(claims and checked) and all(
        _claims_match(tensors, claims, sizes, table)
        for sizes, tensors in checked)


_BRACKET_FIX = re.compile(r"\(([^()\[\]]*,[^()\[\]]*)\)")
_SELF = re.compile(r"\bself\s*\.\s*")


def _parses(text: str) -> bool:
    try:
        return bool(DimParser(text).shape())
    except ShapeSyntaxError:
        return False


def shape_fix(comment: str | None,
              table: DimensionTable | None = None) -> str | None:
    """What to change in a comment whose shape is not understood.

    ``# (bs, seq, hidden)`` -> "use square brackets: [bs, seq, hidden]"
    (and, when the notation reads round brackets after a label, "or write
    Shape: (bs, seq, hidden)"); ``# [bs * self.num_heads, seq]`` -> "write
    num_heads, not self.num_heads: [bs * num_heads, seq]"; ``# Shape:
    (num_tokens)`` -> a one-dimensional tuple needs its comma. None when
    none applies.
    """
    if not comment:
        return None
    notation = notation_of(table)
    for start, end, inside, _ in shape_groups(comment, notation):
        if _SELF.search(inside) and _parses(_SELF.sub("", inside)):
            names = sorted(set(re.findall(r"\bself\s*\.\s*(\w+)",
                                          inside)))
            fixed = brief(" ".join(_SELF.sub(
                "", comment[start:end]).split()))
            return (brief(f"write {', '.join(names)}, not "
                          f"{', '.join('self.' + n for n in names)}")
                    + f": {fixed}")
    read = {(start, end)
            for start, end, _, _ in shape_groups(comment, notation)}
    labelled = next((rule.label for rule in notation
                     if rule.brackets == "()" and rule.label), None)
    for match in _BRACKET_FIX.finditer(comment):
        before = comment[match.start() - 1] if match.start() else " "
        if before.isalnum() or before == "_":
            continue  # a call, f(x, y), not a shape
        if (match.start(), match.end()) in read:
            continue  # read as the notation says, and still no shape
        inside = _SELF.sub("", match.group(1))
        if _parses(inside):
            fixed = brief("[" + " ".join(inside.split()) + "]")
            if labelled:
                return (f"use square brackets: {fixed}, or write "
                        f"{labelled} before the round brackets: "
                        f"{labelled} ({' '.join(inside.split())})")
            return f"use square brackets: {fixed}"
    if labelled:
        for start, end, inside, rule in shape_groups(comment, notation):
            if (rule.brackets == "()" and not is_tuple(inside)
                    and not is_index(comment, start) and _parses(inside)):
                shown = " ".join(inside.split())
                return (f"a shape in round brackets is a tuple: write "
                        f"({shown},) or [{shown}]")
    return None


def observed_tensors(statements: list[Statement],
                     per_statement: list[list[tuple[dict[str, int],
                                                    list[Execution]]]]
                     ) -> frozenset[str]:
    """Names the grader saw hold a tensor every time it read them.

    A plain name watched by a statement that ran, whose recorded value was
    a tensor in every execution of every statement that watches it.
    """
    tensor: set[str] = set()
    other: set[str] = set()
    for statement, runs in zip(statements, per_statement):
        if statement.kind == "return":
            continue
        for index, chain in enumerate(statement.watch):
            if len(chain) != 1:
                continue
            for _, executions in runs:
                for execution in executions:
                    if index >= len(execution):
                        continue
                    value = execution[index]
                    (tensor if isinstance(value, tuple)
                     else other).add(chain[0])
    return frozenset(tensor - other)


def _unverified(statement: Statement, claims: list[ShapeClaim],
                table: DimensionTable, tensors: frozenset[str],
                reached: frozenset[int] = frozenset()
                ) -> Finding | None:
    """The finding for a statement that never ran in a run that
    completed (or cannot be told to have run): its names are checked,
    and a tensor statement without a shape in its comment is penalised
    all the same. ``reached``: the statements that completed in runs
    that then raised (they ran, but such a run verifies nothing)."""
    if claims and claims[-1].unknown_names(table):
        finding = _unknown_finding(statement, claims[-1],
                                   claims[-1].unknown_names(table), table)
        return replace(finding, message=finding.message + " (a "
                       "comment's names are checked whether or not its "
                       "statement ran)")
    raised_first = statement.traceable and statement.id in reached
    if raised_first:
        why = ("ran only in runs that then stopped with an error, and a "
               "run that does not complete verifies no comment")
    elif statement.traceable:
        why = "did not run in any of the grader's runs"
    else:
        why = ("shares its line with an if/for/while/with header, so the "
               "grader cannot tell whether it ran")
    hint = None if statement.traceable else "put the statement on its own line"
    is_tensor = statement.tensor or bool(set(statement.operands) & tensors)
    base = _Place(line=statement.first_line, statement=statement.text,
                  real=())
    if is_tensor and statement.comment is None:
        return Finding(kind="missing", claimed=None,
                       message=f"this statement produces a tensor but has "
                               f"no shape comment (it {why}; a tensor "
                               f"statement needs its comment all the same)",
                       hint=hint, **base)
    if is_tensor and not claims:
        fix = shape_fix(statement.comment, table)
        return Finding(kind="no_shape", claimed=None,
                       message=f"this statement produces a tensor but its "
                               f"comment has no shape such as "
                               f"{table.example} (it {why})",
                       hint=fix or hint, **base)
    kind = ("raised_first" if raised_first else
            "never_ran" if statement.traceable else "not_traced")
    return Finding(kind=kind, claimed=claims[-1].text if claims else None,
                   message=f"{why}, so its comment could not be checked",
                   hint=hint, **base)


def _not_read(statement: Statement,
              runs: list[tuple[dict[str, int], list[Execution]]]
              ) -> Finding | None:
    """The finding for a statement one of whose targets the tracer could
    not read after it ran (principle 6 fails closed: an unread value is
    never "no tensor")."""
    def indexes(marker: str) -> list[int]:
        return sorted({index for _, executions in runs
                       for execution in executions
                       for index, value in enumerate(execution)
                       if value == marker and index < len(statement.watch)})

    unread = indexes(NOT_READ)
    irregular = indexes(NO_FIXED_SHAPE)
    if irregular and not unread:
        return _no_fixed_shape(statement, irregular)
    if not unread:
        return None
    chains = [statement.watch[index] for index in unread]
    named = [chain for chain in chains if chain[0] != UNWATCHABLE]
    why = []
    if named:
        why.append(", ".join("`" + ".".join(chain) + "`" for chain in named)
                   + " (only its holder's own code could: a property, a "
                     "__getattribute__ of its own)")
    if len(named) < len(chains):
        why.append("what it writes (its target is no name or attribute "
                   "chain)")
    return Finding(
        line=statement.first_line, statement=statement.text,
        kind="not_verified", claimed=None, real=(),
        message=brief(f"the grader cannot read {' or '.join(why)} after "
                      f"this statement runs, so its shape comment is not "
                      f"verified", 400),
        hint="keep tensors in local names, in attributes of self or of a "
             "plain object, or in a list, tuple or dict")


def _no_fixed_shape(statement: Statement, indexes: list[int]) -> Finding:
    """The finding for a statement that wrote a tensor with no fixed
    shape (a nested tensor whose parts differ in size): a comment's
    bracketed shape cannot claim it, so the comment is not verified."""
    names = ", ".join("`" + ".".join(statement.watch[index]) + "`"
                      for index in indexes
                      if not statement.watch[index][0].startswith("<"))
    what = f"{names} holds" if names else "its value is"
    return Finding(
        line=statement.first_line, statement=statement.text,
        kind="not_verified", claimed=None, real=(),
        message=brief(f"{what} a nested tensor whose parts differ in size "
                      f"(it has no fixed shape), so no bracketed shape can "
                      f"claim it and its shape comment is not verified",
                      400),
        hint="keep the tensors as ordinary (padded) tensors: "
             "every shape comment must name a fixed shape")


def _verify_statement(statement: Statement,
                      runs: list[tuple[dict[str, int], list[Execution]]],
                      following: list[tuple[dict[str, int], list[Execution]]],
                      table: DimensionTable,
                      tensors: frozenset[str] = frozenset(),
                      places: list[Place] | None = None,
                      reached: frozenset[int] = frozenset()
                      ) -> Finding | None:
    """The finding for one statement; ``following`` is the next one's;
    ``tensors`` the names seen to hold tensors (for statements that never
    ran); ``places`` where each of ``runs`` belongs (:func:`_by_call`;
    default: run N is size set N); ``reached`` as :func:`verify`."""
    claims = parse_shapes(statement.comment or "", table)
    ran = any(executions for _, executions in runs)
    if not ran:
        return _unverified(statement, claims, table, tensors, reached)
    unread = _not_read(statement, runs)
    if unread is not None:
        return unread
    if not any(_tensors(execution) for _, executions in runs
               for execution in executions):
        return None  # ran and produced no tensor: nothing to claim
    places = places or [(index, "") for index in range(1, len(runs) + 1)]
    real = tuple(_real(index, sizes, executions, claims, table,
                       statement.alternatives, call)
                 for (index, call), (sizes, executions) in zip(places, runs))
    base = _Place(line=statement.first_line, statement=statement.text,
                  real=real)
    if statement.comment is None:
        hint = None
        if _fits(statement.above, runs, table):
            hint = ("the comment above fits this statement, but "
                    + _ABOVE_HINT)
        elif _fits(statement.detached, runs, table):
            hint = ("a blank line separates this statement from the comment "
                    "below it; remove the blank line")
        what = ("keeps tensors in a list, tuple or dict" if _holds(runs)
                else "produces a tensor")
        return Finding(kind="missing", claimed=None,
                       message=f"this statement {what} but has no shape "
                               f"comment", hint=hint, **base)
    if not claims:
        fix = shape_fix(statement.comment, table)
        ignored = ignored_brackets(statement.comment, table)
        if fix:
            message = f"the comment's shape is not understood: {fix}"
        else:
            message = (f"the comment has no bracketed shape such as "
                       f"{table.example}")
            if ignored:
                message += "; not a shape: " + ", ".join(ignored)
        hint = None
        if statement.below and parse_shapes(statement.below, table):
            hint = ("the comment below is not used because this statement "
                    "has a trailing comment; put the shape in the trailing "
                    "comment")
        return Finding(kind="no_shape", claimed=None, message=message,
                       hint=hint, **base)
    unknown = claims[-1].unknown_names(table)
    if unknown:
        return _unknown_finding(statement, claims[-1], unknown, table, real)
    if not any(one.wrong for one in real):
        return None
    count = max((len(_tensors(e)) for _, executions in runs
                 for e in executions), default=1)
    used = claims[-count:] if 1 < count <= len(claims) else claims[-1:]
    claimed = ", ".join(claim.text for claim in used)
    executions = sum(one.executions for one in real)
    wrong = sum(one.wrong for one in real)
    message = f"the comment claims {claimed}, the real shape differs"
    if any(UNREAD in _tensors(e) for _, executions in runs
           for e in executions):
        message += (" (it keeps more values in a list, tuple or dict than "
                    "the grader reads, so its comment cannot be verified)")
    if wrong < executions:
        message += (f" (wrong in {wrong} of the {executions} times this "
                    f"line ran, right in the others)")
    hint = None
    if statement.comment_where == "below" and _fits(statement.comment,
                                                    following, table):
        hint = ("this comment fits the next statement: " + _ABOVE_HINT)
    return Finding(kind="wrong_shape", claimed=claimed, message=message,
                   hint=hint, **base)


def _made_findings(statements: list[Statement],
                   per_statement: list[list[tuple[dict[str, int],
                                                  list[Execution]]]],
                   made: frozenset[int], found: set[int]) -> list[Finding]:
    """The findings of statements on whose lines a torch operation made a
    tensor that outlived them (``made``, the tracer's lines), when the
    grader read no tensor for them: whatever their syntax, a statement
    that computes a tensor the reader did not read fails closed. A
    statement that read a tensor accounts for its line; ``found`` (ids of
    statements that already have a finding) is not judged twice."""
    findings: list[Finding] = []
    for line in sorted(made):
        covering = [(s, runs) for s, runs in zip(statements, per_statement)
                    if s.first_line <= line <= s.last_line]
        if not covering or any(
                s.kind != SPAN_KIND and s.traceable and any(
                    _tensors(execution) or NOT_READ in execution
                    for _, executions in runs for execution in executions)
                for s, runs in covering):
            continue
        statement = next((s for s, _ in covering if s.kind != SPAN_KIND),
                         covering[0][0])
        if statement.id in found:
            continue
        found.add(statement.id)
        base = _Place(line=statement.first_line, statement=statement.text,
                      real=())
        hint = ("keep the tensor in a name (or an attribute, list, tuple "
                "or dict) that an assignment on its own line writes, and "
                "put the shape comment there")
        if statement.comment is None:
            findings.append(Finding(
                kind="missing", claimed=None, hint=hint,
                message="this statement computes a tensor (a torch "
                        "operation on it made one that outlived it) but has "
                        "no shape comment", **base))
            continue
        findings.append(Finding(
            kind="not_verified", claimed=None, hint=hint,
            message="this statement computes a tensor (a torch operation on "
                    "it made one that outlived it) that the grader cannot "
                    "read after it runs, so its shape comment is not "
                    "verified", **base))
    return findings


def verify(statements: list[Statement],
           runs: list[tuple[dict[str, int], dict[str, Any]]],
           dims: DimensionTable,
           made: frozenset[int] = frozenset(),
           calls: CallInputs | None = None,
           reached: frozenset[int] = frozenset()) -> list[Finding]:
    """Compare every statement's claimed shape with what really ran.

    ``runs`` holds one ``(sizes, records)`` pair per size set: ``sizes`` maps
    canonical dimension names to ints, ``records`` is the merged
    :attr:`ShapeTracer.records` of every forward call made with those sizes. A
    statement needs a comment when any execution produced a tensor; its claim
    must hold under every size set and every execution. A statement that never
    ran gives a note, unless it is a tensor statement (decided statically,
    completed by the names the trace saw hold tensors; see
    :mod:`grader.shapes.tensor_facts`) without a shape comment, or its comment
    names an unknown dimension: those are findings. Raises
    :class:`ShapeRecordError` for records that are not the documented plain
    data. ``calls``: the task's declared inputs; an execution inside a
    declared call is judged at the sizes of that call's input
    (:func:`_by_call`). ``reached``: the ids of statements that completed
    only in calls that then raised; they verify nothing, and the note of
    such a statement says so instead of "not run".
    """
    every = statements
    statements = [s for s in every if s.kind != SPAN_KIND]
    per_statement, places = [], []
    for statement in statements:
        groups = [group for index, (sizes, records) in enumerate(runs, 1)
                  for group in _by_call(index, sizes,
                                        _marked(records, statement.id),
                                        calls)]
        per_statement.append([(sizes, executions)
                              for sizes, executions, _ in groups])
        places.append([place for _, _, place in groups])
    tensors = observed_tensors(statements, per_statement)
    findings = []
    for index, statement in enumerate(statements):
        following = (per_statement[index + 1]
                     if index + 1 < len(statements) else [])
        finding = _verify_statement(statement, per_statement[index],
                                    following, dims, tensors,
                                    places[index], reached)
        if finding is not None:
            findings.append(finding)
    if made:
        spans = [s for s in every if s.kind == SPAN_KIND]
        findings += _made_findings(statements + spans, per_statement
                                   + [[] for _ in spans], made,
                                   _penalised_ids(statements, findings))
        findings.sort(key=lambda f: f.line)
    return findings


def _penalised_ids(statements: list[Statement],
                   findings: list[Finding]) -> set[int]:
    """The ids of the statements that already have a penalised finding."""
    return {s.id for s in statements for f in findings
            if f.penalised and f.line == s.first_line}


def made_findings(statements: list[Statement],
                  runs: list[tuple[dict[str, int], dict[str, Any]]],
                  made: frozenset[int],
                  findings: list[Finding]) -> list[Finding]:
    """The catch-all's findings (the lines in ``made`` for which no run of
    ``runs`` read a tensor), of statements ``findings`` does not already
    penalise: as :func:`verify` judges ``made``, over any runs."""
    planned = [s for s in statements if s.kind != SPAN_KIND]
    spans = [s for s in statements if s.kind == SPAN_KIND]
    per_statement = [[(sizes, _executions(records, statement.id))
                      for sizes, records in runs]
                     for statement in planned]
    return _made_findings(planned + spans,
                          per_statement + [[] for _ in spans], made,
                          _penalised_ids(planned, findings))


_TITLES = {
    "missing": "missing shape comment",
    "no_shape": "comment without a shape",
    "unknown_name": "unknown dimension name",
    "wrong_shape": "wrong shape",
    "not_verified": "shape comment not verifiable",
    "never_ran": "note: not run in any of the grader's runs",
    "raised_first": "note: ran only in runs that ended in an error",
    "not_traced": "note: not checked",
}


def _wrap(text: str, first: str) -> str:
    return textwrap.fill(text, width=79, initial_indent=first,
                         subsequent_indent=" " * len(first),
                         break_on_hyphens=False)


def _labelled(text: str, name: str, call: bool = False) -> str:
    """``text`` after a label (``  size set 1: ...``); a call's label
    stands on a line of its own, the text indented below it."""
    if not call:
        return _wrap(text, f"  {name}: ")
    return _wrap(f"{name}:", "  ") + "\n" + _wrap(text, "      ")


def _sizes_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"{name}={size}" for name, size in sizes.items())


def format_findings(findings: list[Finding], source: SourceFile) -> str:
    """A report with one block per finding, problems first, then notes.

    The size sets are listed once at the top. Each block gives where the
    statement is (``line 12`` or ``cell 7, line 3``), the statement, what is
    wrong, the claimed and the real shape under each size set, and a hint
    when one applies.
    """
    if not findings:
        return "Shape comments: no problems found."
    problems = [f for f in findings if f.penalised]
    notes = [f for f in findings if not f.penalised]
    counts = []
    if problems:
        counts.append(f"{len(problems)} problem"
                      f"{'s' if len(problems) > 1 else ''}")
    if notes:
        counts.append(f"{len(notes)} note{'s' if len(notes) > 1 else ''}")
    header = [f"Shape comments: {', '.join(counts)}."]
    size_sets = {(one.index, one.name): (one.sizes, bool(one.call))
                 for f in findings for one in f.real}
    if size_sets:
        header.append("Your forward ran under these sizes:")
        header += [_labelled(_sizes_text(sizes), name, call)
                   for (_, name), (sizes, call) in sorted(size_sets.items())]
    blocks = ["\n".join(header)]
    for finding in problems + notes:
        shown = finding.statement.split("\n")
        if len(shown) > 12 or len(finding.statement) > 1200:
            shown = [brief(line, 200) for line in shown[:12]] + ["..."]
        statement = textwrap.indent("\n".join(shown), "    ")
        lines = [f"{source.where(finding.line)}: {_TITLES[finding.kind]}",
                 statement, _wrap(finding.message, "  ")]
        for one in finding.real:
            real = ", ".join(one.shapes) or "no tensor"
            if not one.executions:
                seen = "did not run"
            elif finding.kind == "wrong_shape":
                seen = f"claimed {one.expected}, real {real}"
                if not one.wrong:
                    seen += " (right under these sizes)"
            else:
                seen = f"real {real}"
            lines.append(_labelled(seen, one.name, bool(one.call)))
        if finding.hint:
            lines.append(_wrap(finding.hint, "  hint: "))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# ---------------------------------------------------------------------------
# Size sets
# ---------------------------------------------------------------------------

def size_set_collisions(sizes: dict[str, int],
                        identities: Iterable[tuple[str, str, str]] = ()
                        ) -> list[str]:
    """Equal values among the dimensions and products of two dimensions.

    A size set can only catch a comment that names the wrong dimension if
    every dimension and every product of two (squares included) has its
    own value. ``identities`` lists the equalities that hold by definition,
    as ``(name, a, b)`` for ``name = a * b`` (e.g. ``("hidden",
    "num_heads", "head_size")``). Returns one description per collision;
    an empty list means the size set is good.
    """
    by_value: dict[int, list[tuple[str, ...]]] = {}
    for name in sizes:
        by_value.setdefault(sizes[name], []).append((name,))
    for a, b in combinations_with_replacement(sorted(sizes), 2):
        by_value.setdefault(sizes[a] * sizes[b], []).append((a, b))
    allowed = {frozenset([(name,), tuple(sorted((a, b)))])
               for name, a, b in identities}
    collisions = []
    for value, expressions in sorted(by_value.items()):
        for i, first in enumerate(expressions):
            for second in expressions[i + 1:]:
                if frozenset([first, second]) in allowed:
                    continue
                collisions.append(f"{' * '.join(first)} = "
                                  f"{' * '.join(second)} = {value}")
    return collisions
