"""``python -m grader audit ID``: mutation testing of an assignment's rubric.

Every known mistake of the plug-in's catalog (:mod:`grader.catalog`), every
correct variant and (with ``--pairs``) every pair of mistakes on different
lines is applied to the reference and graded through the real pipeline, in
parallel as a batch grades a class; a mutant must lose exactly its items
and be named, a variant must lose nothing, a pair must have both mistakes
named unless the catalog declares it an exception (verified). What it
checks and how to read its table: docs/adding-an-assignment.md, "The
audit".
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.catalog import (Catalog, CatalogError, Mutant,
                            PairException, apply)
from grader.catalog import load as load_catalog
from grader.catalog import reference_text, touched_lines
from grader.constants import KIT_ROOT
from grader.errors import CliError
from grader.output.files import write_atomic
from grader.plugin import Plugin, load
from grader.routes.classfolder import Entry
from grader.routes.judges import JudgeOptions, judge_all

#: Points below the baseline that count as lost (scores are floats).
EPSILON = 1e-6
REFERENCE = "reference"


@dataclass(frozen=True)
class Built:
    """One submission the audit grades: the reference, a variant, a
    mutant or a pair of mutants, as source text."""

    kind: str                      # reference, variant, mutant or pair
    id: str
    text: str
    mutants: tuple[Mutant, ...] = ()
    title: str = ""
    #: The catalog's declared exception for a pair, if any.
    exception: PairException | None = None

    @property
    def file_name(self) -> str:
        """Its submission file's name (unique in the audit)."""
        return f"{self.kind}__{self.id}.py"


@dataclass
class Outcome:
    """What grading one built submission showed, against the baseline."""

    built: Built
    lost: dict[str, float] = field(default_factory=dict)
    named: dict[str, list[str]] = field(default_factory=dict)
    score: float | None = None
    problems: list[str] = field(default_factory=list)
    #: A pair whose declared exception was used (its ``unnamed`` mistake
    #: was indeed not named): "masked" or "gap"; "" otherwise.
    excused: str = ""
    #: A declared exception the grading did not need (both were named).
    stale: bool = False

    @property
    def ok(self) -> bool:
        """True when the entry holds (nothing in :attr:`problems`)."""
        return not self.problems

    def as_json(self) -> dict:
        """Its record in ``audit.json``."""
        built = self.built
        return {"kind": built.kind, "id": built.id, "title": built.title,
                "mutants": [m.id for m in built.mutants],
                "expected_diagnoses": [m.diagnosis for m in built.mutants],
                "expected_costs": expected_costs(built),
                "score": self.score, "lost": self.lost,
                "named": self.named, "ok": self.ok,
                "excused": self.excused or None,
                "exception": (None if built.exception is None else {
                    "unnamed": built.exception.unnamed,
                    "kind": built.exception.kind,
                    "reason": built.exception.reason}),
                "problems": self.problems}


def expected_costs(built: Built) -> list[str]:
    """The items a built submission must lose (none for a variant)."""
    return list(dict.fromkeys(cost for mutant in built.mutants
                              for cost in mutant.costs))


# --------------------------------------------------------------------------
# Building the submissions


def reference_source(catalog: Catalog, root: Path = KIT_ROOT) -> str:
    """The reference solution the catalog edits, as a submission."""
    path = root / catalog.source
    try:
        return reference_text(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"the reference solution {catalog.source} cannot be "
                       f"read ({exc.strerror}): the audit runs in the "
                       f"instructor's kit, which has solutions/") from exc


def composable_pairs(catalog: Catalog, reference: str
                     ) -> list[tuple[Mutant, Mutant]]:
    """Every pair of mutants whose edits touch different lines (a mutant
    with ``pairs = false`` is never paired)."""
    lines = {m.id: touched_lines(reference, m.edits)
             for m in catalog.mutants}
    paired = [mutant for mutant in catalog.mutants if mutant.pairs]
    return [(a, b) for a, b in itertools.combinations(paired, 2)
            if not lines[a.id] & lines[b.id]]


def build(catalog: Catalog, reference: str, pairs: bool
          ) -> tuple[list[Built], list[str]]:
    """The submissions to grade, and notes on pairs that do not compose
    (one's edit destroys the other's text). A single mutant or variant
    whose edits do not apply is a :class:`CatalogError`."""
    built = [Built(REFERENCE, REFERENCE, reference,
                   title="the reference solution")]
    for variant in catalog.variants:
        built.append(Built("variant", variant.id, apply(
            reference, variant.edits, f"variant {variant.id!r}"),
            title=variant.title))
    for mutant in catalog.mutants:
        built.append(Built("mutant", mutant.id, apply(
            reference, mutant.edits, f"mutant {mutant.id!r}"), (mutant,),
            title=mutant.title))
    notes = []
    for a, b in composable_pairs(catalog, reference) if pairs else ():
        try:
            text = apply(reference, a.edits + b.edits,
                         f"pair {a.id} + {b.id}")
        except CatalogError as exc:
            notes.append(f"not graded: {exc}")
            continue
        built.append(Built("pair", f"{a.id}__{b.id}", text, (a, b),
                           title=f"{a.title}; {b.title}",
                           exception=catalog.exception(a.id, b.id)))
    graded = {entry.exception for entry in built if entry.exception}
    notes += [f"the exception of pair {' + '.join(unused.pair)} is never "
              f"graded (its mistakes touch the same line, or one is never "
              f"paired): remove it" for unused in catalog.exceptions
              if pairs and unused not in graded]
    return built, notes


# --------------------------------------------------------------------------
# Grading and judging


def grade_all(built: list[Built], assignment_id: str, out: Path,
              jobs: int | None, seed: int | None) -> dict[str, dict] | None:
    """Grade every built submission in parallel judges; the JSON report
    of each (by file name), or ``{"error": why}``; None when a signal
    (Ctrl-C) stopped the judges."""
    folder = out / "submissions"
    reports = out / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    reports.mkdir(parents=True, exist_ok=True)
    entries = []
    for entry in built:
        path = folder / entry.file_name
        write_atomic(path, entry.text)
        entries.append(Entry(entry.file_name, path))
    results: dict[str, dict] = {}

    def done(entry: Entry, row: dict, record: dict | None,
             seconds: float) -> None:
        if record and record.get("status") == "graded":
            results[entry.student] = record["report"]
        else:
            results[entry.student] = {"error": row.get("errors")
                                      or "not graded"}

    options = JudgeOptions(assignment=assignment_id, seed=seed,
                           no_feedback=True, jobs=jobs)
    stopped = judge_all(entries, reports, options, done)
    return None if stopped else results


def item_scores(report: dict) -> dict[str, float]:
    """Score by item id."""
    return {item["id"]: float(item["score"]) for item in report["items"]}


def judge(entry: Built, report: dict, baseline: dict[str, float],
          singles: dict[str, dict[str, float]] | None = None) -> Outcome:
    """Compare one graded submission with the reference's scores
    (``singles``: each mutant's item scores, for a pair whose exception
    says one mistake masks the other)."""
    outcome = Outcome(entry)
    if "error" in report:
        outcome.problems.append(f"not graded: {report['error']}")
        return outcome
    scores = item_scores(report)
    outcome.score = float(report["score"])
    outcome.lost = {item: round(baseline[item] - got, 6)
                    for item, got in scores.items()
                    if item in baseline and got < baseline[item] - EPSILON}
    outcome.named = {item["id"]: list(item.get("diagnosis", []))
                     for item in report["items"] if item.get("diagnosis")}
    if entry.kind == "variant" and outcome.lost:
        outcome.problems.append(
            "a correct variant loses points: " + _items(outcome.lost))
    if entry.kind in ("mutant", "pair") and not outcome.lost:
        outcome.problems.append("hole: it passes every item")
    if entry.kind == "mutant" and outcome.lost:
        expected = set(expected_costs(entry))
        missed = sorted(expected - set(outcome.lost))
        extra = sorted(set(outcome.lost) - expected)
        if missed:
            outcome.problems.append(f"hole: it costs nothing on "
                                    f"{', '.join(missed)}")
        if extra:
            outcome.problems.append(f"it also costs {', '.join(extra)} "
                                    f"(not declared)")
    exception = entry.exception
    for mutant in entry.mutants if outcome.lost else ():
        named = any(mutant.diagnosis in outcome.named.get(item, [])
                    for item in mutant.costs)
        if exception is not None and mutant.id == exception.unnamed:
            outcome.stale = named
            outcome.excused = "" if named else exception.kind
        elif not named:
            outcome.problems.append(
                f"{mutant.diagnosis} ({mutant.id}) is not named on "
                f"{' or '.join(mutant.costs)}")
    if exception is not None and exception.kind == "masked" \
            and outcome.lost:
        check_masked(outcome, exception, report, singles or {})
    return outcome


def check_masked(outcome: Outcome, exception: PairException, report: dict,
                 singles: dict[str, dict[str, float]]) -> None:
    """A pair declared masked must grade item by item exactly as the
    mistake that masks its partner does alone (else the declaration is
    wrong: the partner does act, and must be named), whether or not the
    partner happens to be named."""
    alone = singles.get(exception.other)
    if alone is None:
        outcome.problems.append(f"declared masked by {exception.other}, "
                                f"which was not graded alone")
        return
    scores = item_scores(report)
    differ = sorted(item for item in alone
                    if abs(alone[item] - scores.get(item, 0.0)) > EPSILON)
    if differ:
        outcome.problems.append(
            f"declared masked by {exception.other}, but it grades "
            f"differently from {exception.other} alone on "
            f"{', '.join(differ)}: {exception.unnamed} acts and must be "
            f"named")


def _items(lost: dict[str, float]) -> str:
    return ", ".join(f"{item} -{points:g}" for item, points in lost.items())


def judge_all_built(built: list[Built], reports: dict[str, dict],
                    max_score: float) -> list[Outcome]:
    """Every outcome, the reference's first (it must earn full marks)."""
    reference = reports[built[0].file_name]
    first = Outcome(built[0])
    if "error" in reference:
        first.problems.append(f"not graded: {reference['error']}")
        why = "not judged: the reference was not graded"
        return [first] + [Outcome(b, problems=[why]) for b in built[1:]]
    first.score = float(reference["score"])
    first.named = {item["id"]: list(item["diagnosis"])
                   for item in reference["items"] if item.get("diagnosis")}
    if first.score < max_score - EPSILON:
        first.problems.append(f"the reference earns {first.score:g} of "
                              f"{max_score:g}")
    baseline = item_scores(reference)
    singles = {entry.id: item_scores(reports[entry.file_name])
               for entry in built if entry.kind == "mutant"
               and "error" not in reports[entry.file_name]}
    return [first] + [judge(entry, reports[entry.file_name], baseline,
                            singles) for entry in built[1:]]


# --------------------------------------------------------------------------
# The table, audit.json and audit.md


def _row(outcome: Outcome) -> list[str]:
    built = outcome.built
    expected = ", ".join(expected_costs(built)) or "-"
    got = _items(outcome.lost) or "-"
    diagnoses = ", ".join(m.diagnosis for m in built.mutants) or "-"
    named = sorted({name for names in outcome.named.values()
                    for name in names})
    verdict = "ok" if outcome.ok else "FAIL: " + "; ".join(
        outcome.problems)
    exception = built.exception
    if outcome.ok and outcome.excused and exception is not None:
        what = ("masked by construction" if outcome.excused == "masked"
                else "known gap")
        verdict = (f"ok, {what}: {exception.unnamed} not named "
                   f"({exception.reason})")
    return [built.kind, built.id, expected, got, diagnoses,
            ", ".join(named) or "-", verdict]


HEADER = ["kind", "entry", "expected lost", "got lost", "diagnosis",
          "named", "result"]


def table(outcomes: list[Outcome]) -> str:
    """The plain-text table an instructor reads at a glance."""
    rows = [HEADER] + [_row(o) for o in outcomes]
    widths = [min(28, max(len(r[i]) for r in rows))
              for i in range(len(HEADER) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    return "\n".join(lines) + "\n"


def markdown(outcomes: list[Outcome], summary: dict) -> str:
    """``audit.md``: the summary and the table in Markdown."""
    lines = [f"# Audit of {summary['assignment']}", "",
             _summary_line(summary), "",
             "| " + " | ".join(HEADER) + " |",
             "|" + "---|" * len(HEADER)]
    for outcome in outcomes:
        cells = [cell.replace("|", "\\|") for cell in _row(outcome)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"- {note}" for note in summary["notes"]]
    return "\n".join(lines) + "\n"


def summarise(assignment_id: str, outcomes: list[Outcome],
              notes: list[str], seconds: float, seed: object) -> dict:
    """The counts ``audit.json`` opens with."""
    def count(kind: str, ok: bool | None = None) -> int:
        return sum(1 for o in outcomes if o.built.kind == kind
                   and (ok is None or o.ok == ok))

    pairs = count("pair")

    def excused(kind: str) -> int:
        return sum(1 for o in outcomes if o.built.kind == "pair" and o.ok
                   and o.excused == kind)

    named = count("pair", True) - excused("masked") - excused("gap")
    stale = [f"the exception of pair {o.built.id} is not needed: both "
             f"mistakes are named (remove it from the catalog)"
             for o in outcomes if o.stale]
    return {"assignment": assignment_id, "seed": seed,
            "seconds": round(seconds, 1),
            "mutants": count("mutant"),
            "mutants_caught_and_named": count("mutant", True),
            "variants": count("variant"),
            "variants_full_marks": count("variant", True),
            "pairs": pairs, "pairs_named": named,
            "pairs_masked": excused("masked"),
            "pairs_known_gaps": excused("gap"),
            "pairs_failed": count("pair", False),
            "pairs_named_share": (round(named / pairs, 4)
                                  if pairs else None),
            "ok": all(o.ok for o in outcomes), "notes": notes + stale}


def _summary_line(summary: dict) -> str:
    text = (f"{summary['mutants_caught_and_named']} of "
            f"{summary['mutants']} mutants caught and named, "
            f"{summary['variants_full_marks']} of {summary['variants']} "
            f"correct variants at full marks")
    if summary["pairs"]:
        text += (f", {summary['pairs_named']} of {summary['pairs']} pairs "
                 f"fully named ({100 * summary['pairs_named_share']:.0f} %)"
                 f", {summary['pairs_masked']} masked by construction and "
                 f"{summary['pairs_known_gaps']} known gaps (declared), "
                 f"{summary['pairs_failed']} failed")
    return text + f"; {summary['seconds']:g} s (seed {summary['seed']})."


# --------------------------------------------------------------------------
# The command


def catalog_of(plugin: Plugin, path: Path | None,
               only: Sequence[str] | None = None) -> Catalog | None:
    """The plug-in's catalog, or the draft catalog ``path`` (validated
    against the same rubric; it need not cover every diagnosis); with
    ``only``, just those mutants (and every variant)."""
    if path is None:
        catalog = plugin.catalog
    else:
        try:
            catalog = load_catalog(path, plugin.rubric, complete=False)
        except CatalogError as exc:
            raise CliError(str(exc)) from exc
    if catalog is None or not only:
        return catalog
    known = {mutant.id for mutant in catalog.mutants}
    unknown = [mutant_id for mutant_id in only if mutant_id not in known]
    if unknown:
        raise CliError(f"--only: no mutant {', '.join(unknown)} in the "
                       f"catalog of {plugin.id}")
    return replace(
        catalog,
        mutants=tuple(m for m in catalog.mutants if m.id in only),
        exceptions=tuple(e for e in catalog.exceptions
                         if set(e.pair) <= set(only)))


@dataclass(frozen=True)
class AuditOptions:
    """What ``python -m grader audit`` is asked: the typed options of
    :func:`run_audit`."""

    assignment: str
    pairs: bool = False
    jobs: int | None = None
    out: Path | None = None
    catalog: Path | None = None
    only: tuple[str, ...] = ()
    seed: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AuditOptions:
        """The options of a parsed ``audit`` command line."""
        return cls(assignment=args.assignment, pairs=bool(args.pairs),
                   jobs=args.jobs,
                   out=Path(args.out) if args.out else None,
                   catalog=Path(args.catalog) if args.catalog else None,
                   only=tuple(args.only or ()), seed=args.seed)


def run_audit(args: AuditOptions) -> int:
    """``python -m grader audit ID``: 0 when every entry holds, 1 when
    one does not (or the plug-in has no catalog), 130 when interrupted."""
    from grader.engine import resolve_seed

    plugin = load(args.assignment)
    catalog = catalog_of(plugin, args.catalog, args.only)
    if catalog is None:
        sys.stderr.write(
            f"python -m grader audit: {plugin.id} has no audit catalog "
            f"({plugin.catalog_file}): nothing "
            f"proves what its checks catch. Declare its known mistakes "
            f"and correct variants there (docs/adding-an-assignment.md, "
            f"\"The audit\").\n")
        return 1
    started = time.monotonic()
    reference = reference_source(catalog)
    try:
        built, notes = build(catalog, reference, args.pairs)
    except CatalogError as exc:
        raise CliError(str(exc)) from exc
    out = args.out or Path(f"audit-{plugin.id}")
    reports = grade_all(built, plugin.id, out, args.jobs, args.seed)
    if reports is None:
        sys.stderr.write("python -m grader audit: interrupted; nothing "
                         "was judged\n")
        return 130
    outcomes = judge_all_built(built, reports, plugin.rubric.max_score)
    seed = resolve_seed(args.seed)[0]
    summary = summarise(plugin.id, outcomes, notes,
                        time.monotonic() - started, seed)
    write_atomic(out / "audit.json", json.dumps(
        {"summary": summary,
         "entries": [o.as_json() for o in outcomes]}, indent=2) + "\n")
    write_atomic(out / "audit.md", markdown(outcomes, summary))
    shown = [o for o in outcomes
             if o.built.kind != "pair" or not o.ok or o.excused]
    sys.stdout.write(f"audit of {plugin.id}\n{table(shown)}")
    for note in summary["notes"]:
        sys.stdout.write(f"note: {note}\n")
    sys.stdout.write(f"{_summary_line(summary)}\n"
                     f"written: {out / 'audit.json'}, {out / 'audit.md'}\n")
    return 0 if summary["ok"] else 1
