"""Shape comments, part 4: verified at every run whose sizes are known
(trusted grader process; docs/threat-model.md, principle 6).

The worker records the shapes of the planned statements in every probe,
the same way whatever the probe is (a shape check or a graded case), so
nothing a submission observes tells the two apart. :func:`verify_everywhere`
verifies the comments at the shape checks' size sets first (the report
speaks of those as before), then, for every statement those left without a
problem, at the sizes of every graded run it ran in: a statement that ran
there is verified there, whatever the shape checks saw.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from grader.shapes.calls import CallInputs
from grader.shapes.grammar import (DimensionTable, ShapeClaim,
                                   ShapeEvalError, parse_shapes)
from grader.shapes.statements import Statement
from grader.shapes.verify import (Finding, RealShapes, made_findings,
                                  verify)

#: A graded run: what the report calls its sizes, the sizes, the records.
GradedRun = tuple[str, dict[str, int], dict[str, Any]]
#: At most this many graded runs are shown for one finding.
SHOWN = 3


def known_sizes(sizes: dict[str, int], names: tuple[str, ...],
                identities: tuple[tuple[str, str, str], ...] = (),
                fixed: dict[str, int] | None = None) -> dict[str, int]:
    """``sizes`` restricted to the dimension ``names``, completed by the
    rubric's identities (``(c, a, b)``: c = a * b) where one member is
    missing and the others determine it exactly. ``fixed``: sizes the
    task always has (a task's ``sizes`` in rubric.toml); they replace
    the run's, and an identity's other factor follows from them."""
    found = {k: int(v) for k, v in sizes.items()
             if isinstance(v, int) and not isinstance(v, bool)}
    fixed = fixed or {}
    for name, size in fixed.items():
        found[name] = size
        for c, a, b in identities:
            other = b if name == a else a if name == b else None
            if other is not None and other not in fixed:
                found.pop(other, None)  # it follows from the fixed size
    names = names + tuple(k for k in fixed if k not in names)
    for c, a, b in identities:
        if c in names and (a in fixed or b in fixed):
            names += tuple(k for k in (a, b) if k not in names)
    for c, a, b in identities:
        if c not in found and a in found and b in found:
            found[c] = found[a] * found[b]
        for one, other in ((a, b), (b, a)):
            if one not in found and c in found and found.get(other):
                if found[c] % found[other] == 0:
                    found[one] = found[c] // found[other]
    return {k: found[k] for k in names if k in found}


def _evaluates(claims: list[ShapeClaim], sizes: dict[str, int],
               table: DimensionTable) -> bool:
    """Whether every claim of a comment has a value at ``sizes`` (a run
    whose sizes lack a name the comment uses cannot judge it)."""
    try:
        for claim in claims:
            claim.evaluate(sizes, table)
    except ShapeEvalError:
        return False
    return True


def _ran_in(statement: Statement, runs: list[GradedRun]) -> bool:
    """Whether any of ``runs`` recorded an execution of ``statement``."""
    keys: tuple[Any, ...] = (str(statement.id), statement.id)
    return any(records.get(key) for _, _, records in runs
               if isinstance(records, dict) for key in keys)


def _shown(finding: Finding, traced: int, labels: list[str]) -> Finding:
    """``finding`` with the shape checks' size sets as before and, of the
    graded runs, those that show the problem (named by their labels)."""
    kept = [one for one in finding.real if one.index <= traced]
    graded: list[RealShapes] = []
    for one in [one for one in finding.real if one.index > traced]:
        telling = (one.wrong if finding.kind == "wrong_shape"
                   else one.executions and one.shapes)
        if telling and len(graded) < SHOWN:
            graded.append(replace(one, label=labels[one.index - traced - 1]))
    return replace(finding, real=tuple(kept + graded))


def verify_everywhere(statements: list[Statement],
                      traced: list[tuple[dict[str, int], dict[str, Any]]],
                      graded: list[GradedRun],
                      table: DimensionTable,
                      made: frozenset[int] = frozenset(),
                      unsized: list[dict[str, Any]] | None = None,
                      calls: CallInputs | None = None,
                      reached: frozenset[int] = frozenset()
                      ) -> list[Finding]:
    """:func:`~grader.shapes.verify.verify` at the shape checks' size sets
    (``traced``), then at the graded runs' sizes (``graded``) for each
    statement without a problem there: one that ran in a graded run is
    verified at the sizes of that run too (its finding then shows the
    graded runs where it is wrong). A run whose sizes lack a name the
    comment uses does not judge it. Raises
    :class:`~grader.shapes.verify.ShapeRecordError` for records that are
    not plain data. ``made``: the lines whose tensors outlived their
    statement (the catch-all, which every probe's records answer: a line
    is accounted for when any run, a shape check or a graded one, read a
    tensor of its statement; ``unsized``: the records of runs whose sizes
    are unknown, which answer only that). ``calls``: the task's declared
    inputs (:mod:`grader.shapes.calls`); ``reached``: the statements that
    completed only in calls that then raised (words of their notes)."""
    if not graded and not unsized:
        return verify(statements, traced, table, made, calls, reached)
    findings = _verified_everywhere(statements, traced, graded, table,
                                    calls, reached)
    if not made:
        return findings
    runs = traced + [(sizes, records) for _, sizes, records in graded]
    runs += [({}, records) for records in unsized or ()]
    findings += made_findings(statements, runs, made, findings)
    findings.sort(key=lambda f: f.line)
    return findings


def _verified_everywhere(statements: list[Statement],
                         traced: list[tuple[dict[str, int], dict[str, Any]]],
                         graded: list[GradedRun],
                         table: DimensionTable,
                         calls: CallInputs | None = None,
                         reached: frozenset[int] = frozenset()
                         ) -> list[Finding]:
    """The comments verified at the size sets, then each statement
    without a problem there at the graded runs it ran in."""
    findings = verify(statements, traced, table, calls=calls,
                      reached=reached)
    place = {(f.line, f.statement): index
             for index, f in enumerate(findings)}
    found = list(findings)
    added: list[tuple[int, Finding]] = []
    dropped: set[int] = set()
    for order, statement in enumerate(statements):
        at = place.get((statement.first_line, statement.text))
        if at is not None and found[at].penalised and (
                found[at].kind != "missing" or found[at].real):
            continue  # a missing comment that ran nowhere is looked at
        claims = parse_shapes(statement.comment or "", table)
        numbered = [(number, run) for number, run in enumerate(graded, 1)
                    if _evaluates(claims, run[1], table)]
        if not _ran_in(statement, [run for _, run in numbered]):
            continue
        # Every graded run keeps its number (its index after the size
        # sets), so a run is named alike in every finding.
        runs = traced + [({}, {})] * len(graded)
        for number, (_, sizes, records) in numbered:
            runs[len(traced) + number - 1] = (sizes, records)
        combined = verify([statement], runs, table, calls=calls)
        if not combined or not combined[0].penalised:
            if at is not None and found[at].kind in ("never_ran",
                                                     "raised_first"):
                dropped.add(at)  # it ran, at a graded run's sizes: checked
            continue
        finding = _shown(combined[0], len(traced),
                         [label for label, _, _ in graded])
        if at is not None:
            found[at] = finding
        else:
            added.append((order, finding))
    found = [f for index, f in enumerate(found) if index not in dropped]
    if not added:
        return found
    order_of = {(s.first_line, s.text): n for n, s in enumerate(statements)}
    everything = [(order_of.get((f.line, f.statement), len(statements)), f)
                  for f in found] + added
    return [f for _, f in sorted(everything, key=lambda pair: pair[0])]
