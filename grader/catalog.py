"""An assignment's audit catalog: its known mistakes and its correct
variants, as small named edits of the reference solution
(docs/adding-an-assignment.md, "The audit").

Details: docs/internals.md, `grader.catalog`.
"""
from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from grader.errors import RubricError
from grader.rubric import Assignment

#: The catalog's file name in a plug-in's folder.
CATALOG_FILE = "audit.toml"
#: What a mutant or variant id may look like.
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_]*\Z")
#: Lines of the reference that are markers, never code.
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


class CatalogError(RubricError):
    """A catalog that is malformed, names what the rubric lacks, or whose
    edits do not apply to the reference; the message says which entry."""


@dataclass(frozen=True)
class Edit:
    """Replace ``find`` by ``replace``, found exactly ``count`` times; with
    ``after`` (text found exactly once), the first ``count`` occurrences
    that follow it (to tell apart lines two classes share)."""

    find: str
    replace: str
    count: int = 1
    after: str = ""


@dataclass(frozen=True)
class Mutant:
    """A known mistake: edits that must cost ``costs`` and be named
    ``diagnosis`` on one of them."""

    id: str
    diagnosis: str
    costs: tuple[str, ...]
    edits: tuple[Edit, ...]
    title: str = ""
    #: False for a mistake that forfeits its task's items without judging
    #: them (a forbidden API): a second mistake there cannot be seen, so
    #: ``--pairs`` never pairs it.
    pairs: bool = True


@dataclass(frozen=True)
class Variant:
    """Another right way to write the solution: it must earn every point
    the reference earns."""

    id: str
    edits: tuple[Edit, ...]
    title: str = ""


#: The kinds of a declared pair exception (docs/adding-an-assignment.md,
#: "The audit"): ``masked``, one mistake hides the other by construction
#: (the pair must grade exactly as the other mistake alone, which the
#: audit verifies); ``gap``, a known limit of the diagnosis, kept visible.
EXCEPTION_KINDS = ("masked", "gap")


@dataclass(frozen=True)
class PairException:
    """A mistake pair in which ``unnamed`` need not be named, and why."""

    pair: tuple[str, str]
    unnamed: str
    kind: str
    reason: str

    @property
    def other(self) -> str:
        """The mistake of the pair that must still be named."""
        return self.pair[1] if self.pair[0] == self.unnamed else self.pair[0]


@dataclass(frozen=True)
class Catalog:
    """An assignment's mutants and variants, and where its reference is."""

    source: str
    mutants: tuple[Mutant, ...]
    variants: tuple[Variant, ...]
    path: Path = Path()
    exceptions: tuple[PairException, ...] = ()

    def exception(self, first: str, second: str) -> PairException | None:
        """The declared exception of the pair ``first`` + ``second``."""
        for entry in self.exceptions:
            if set(entry.pair) == {first, second}:
                return entry
        return None

    def mutant(self, mutant_id: str) -> Mutant:
        """The mutant named ``mutant_id``."""
        for mutant in self.mutants:
            if mutant.id == mutant_id:
                return mutant
        raise KeyError(mutant_id)


def _fail(path: Path, message: str) -> CatalogError:
    return CatalogError(f"{path.parent.name}/{path.name}: {message}")


def _edits(raw: object, where: str, path: Path) -> tuple[Edit, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail(path, f"{where}: edits must be a non-empty list of "
                          f"{{find = ..., replace = ...}} tables")
    edits = []
    for number, entry in enumerate(raw, 1):
        if (not isinstance(entry, dict)
                or set(entry) - {"find", "replace", "count", "after"}
                or not isinstance(entry.get("find"), str)
                or not entry["find"]
                or not isinstance(entry.get("replace"), str)
                or not isinstance(entry.get("after", ""), str)):
            raise _fail(path, f"{where}: edit {number} needs a non-empty "
                              f"string find and a string replace (and "
                              f"optionally an integer count and a string "
                              f"after)")
        count = entry.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) \
                or count < 1:
            raise _fail(path, f"{where}: edit {number}: count must be a "
                              f"positive integer")
        edits.append(Edit(entry["find"], entry["replace"], count,
                          entry.get("after", "")))
    return tuple(edits)


def _entry_id(raw: dict, kind: str, number: int, path: Path) -> str:
    entry_id = raw.get("id")
    if not isinstance(entry_id, str) or not ID_PATTERN.match(entry_id):
        raise _fail(path, f"{kind} {number}: id must be a lower-case name "
                          f"([a-z0-9_]), not {entry_id!r}")
    return entry_id


def _mutant(raw: dict, number: int, rubric: Assignment,
            path: Path) -> Mutant:
    entry_id = _entry_id(raw, "mutant", number, path)
    where = f"mutant {entry_id!r}"
    unknown = set(raw) - {"id", "diagnosis", "costs", "edits", "title",
                          "pairs"}
    if unknown:
        raise _fail(path, f"{where}: unknown key(s) {sorted(unknown)}")
    diagnosis = raw.get("diagnosis")
    if diagnosis not in rubric.diagnoses:
        raise _fail(path, f"{where}: diagnosis {diagnosis!r} is not in "
                          f"the rubric's [diagnoses]")
    costs = raw.get("costs")
    items = {item.id for item in rubric.items}
    if not isinstance(costs, list) or not costs or any(
            cost not in items for cost in costs):
        raise _fail(path, f"{where}: costs must list the rubric items it "
                          f"costs (of {sorted(items)}), not {costs!r}")
    pairs = raw.get("pairs", True)
    if not isinstance(pairs, bool):
        raise _fail(path, f"{where}: pairs must be true or false")
    return Mutant(entry_id, diagnosis, tuple(costs),
                  _edits(raw.get("edits"), where, path),
                  str(raw.get("title", "")), pairs)


def _variant(raw: dict, number: int, path: Path) -> Variant:
    entry_id = _entry_id(raw, "variant", number, path)
    unknown = set(raw) - {"id", "edits", "title"}
    if unknown:
        raise _fail(path, f"variant {entry_id!r}: unknown key(s) "
                          f"{sorted(unknown)}")
    return Variant(entry_id, _edits(raw.get("edits"),
                                    f"variant {entry_id!r}", path),
                   str(raw.get("title", "")))


def _exception(raw: dict, number: int, mutants: set[str],
               path: Path) -> PairException:
    where = f"exception {number}"
    unknown = set(raw) - {"pair", "unnamed", "kind", "reason"}
    if unknown:
        raise _fail(path, f"{where}: unknown key(s) {sorted(unknown)}")
    pair = raw.get("pair")
    if not isinstance(pair, list) or len(pair) != 2 \
            or len(set(pair)) != 2 or not set(pair) <= mutants:
        raise _fail(path, f"{where}: pair must name two different mutants "
                          f"of the catalog, not {pair!r}")
    if raw.get("unnamed") not in pair:
        raise _fail(path, f"{where}: unnamed must be one of the pair "
                          f"{pair}, the mistake that cannot be named")
    if raw.get("kind") not in EXCEPTION_KINDS:
        raise _fail(path, f"{where}: kind must be one of "
                          f"{', '.join(EXCEPTION_KINDS)}")
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise _fail(path, f"{where}: say why in reason (the audit prints "
                          f"it)")
    return PairException((pair[0], pair[1]), raw["unnamed"], raw["kind"],
                         " ".join(reason.split()))


def load(path: Path, rubric: Assignment, complete: bool = True) -> Catalog:
    """Read and validate the catalog ``path`` against ``rubric``: known
    keys, unique ids, diagnoses and items of the rubric, and (when
    ``complete``; a draft need not) every diagnosis of the rubric
    exercised by at least one mutant."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _fail(path, f"cannot be read: {exc}") from exc
    unknown = set(raw) - {"source", "mutants", "variants", "exceptions"}
    if unknown:
        raise _fail(path, f"unknown key(s) {sorted(unknown)}")
    source = raw.get("source")
    if not isinstance(source, str) or not source.endswith(".py"):
        raise _fail(path, "source must name the reference solution's "
                          ".py file, relative to the kit root")
    mutants = tuple(_mutant(entry, number, rubric, path) for number, entry
                    in enumerate(_tables(raw, "mutants", path), 1))
    variants = tuple(_variant(entry, number, path) for number, entry
                     in enumerate(_tables(raw, "variants", path), 1))
    ids = [entry.id for entry in mutants + variants]
    twice = sorted({entry_id for entry_id in ids if ids.count(entry_id) > 1})
    if twice:
        raise _fail(path, f"ids used twice: {', '.join(twice)}")
    covered = {mutant.diagnosis for mutant in mutants}
    missing = [name for name in rubric.diagnoses if name not in covered]
    if missing and complete:
        raise _fail(path, f"no mutant exercises the diagnosis(es) "
                          f"{', '.join(missing)}: add one per diagnosis "
                          f"of rubric.toml")
    known = {mutant.id for mutant in mutants}
    exceptions = tuple(
        _exception(entry, number, known, path) for number, entry
        in enumerate(_tables(raw, "exceptions", path), 1))
    pairs = [frozenset(entry.pair) for entry in exceptions]
    if len(set(pairs)) != len(pairs):
        raise _fail(path, "a pair has two exceptions")
    return Catalog(source, mutants, variants, path, exceptions)


def _tables(raw: dict, key: str, path: Path) -> list[dict]:
    tables = raw.get(key, [])
    if not isinstance(tables, list) or not all(
            isinstance(entry, dict) for entry in tables):
        raise _fail(path, f"{key} must be an array of tables ([[{key}]])")
    if key == "mutants" and not tables:
        raise _fail(path, "it declares no [[mutants]]")
    return tables


def reference_text(text: str) -> str:
    """The reference solution as a submission: marker lines dropped."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if line.strip() not in MARKERS)


def spans(text: str, edit: Edit, what: str) -> list[int]:
    """Where ``edit`` applies in ``text`` (the start of each occurrence
    it replaces); a :class:`CatalogError` naming ``what`` when it does not
    find its text as it must."""
    snippet = edit.find.strip().splitlines()[0][:60]
    start = 0
    if edit.after:
        if text.count(edit.after) != 1:
            raise CatalogError(f"{what}: the anchor {edit.after!r} occurs "
                               f"{text.count(edit.after)} time(s), "
                               f"expected 1")
        start = text.index(edit.after)
    found = []
    position = text.find(edit.find, start)
    while position >= 0:
        found.append(position)
        position = text.find(edit.find, position + len(edit.find))
    if len(found) != edit.count and not (edit.after
                                         and len(found) > edit.count):
        where = " after the anchor" if edit.after else ""
        raise CatalogError(f"{what}: an edit finds {snippet!r}{where} "
                           f"{len(found)} time(s), expected {edit.count}")
    return found[:edit.count]


def touched_lines(reference: str, edits: tuple[Edit, ...]) -> frozenset[int]:
    """The line numbers of ``reference`` that ``edits`` rewrite (each
    edit's occurrences, found in the reference as it stands)."""
    lines: set[int] = set()
    for edit in edits:
        for start in spans(reference, edit, "an edit"):
            first = reference.count("\n", 0, start) + 1
            last = first + edit.find.count("\n")
            lines.update(range(first, last + 1))
    return frozenset(lines)


def apply(text: str, edits: tuple[Edit, ...], what: str) -> str:
    """``text`` with ``edits`` applied in order; a :class:`CatalogError`
    naming ``what`` when an edit does not find its text as it must or the
    result does not parse."""
    for edit in edits:
        for start in reversed(spans(text, edit, what)):
            text = (text[:start] + edit.replace
                    + text[start + len(edit.find):])
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise CatalogError(f"{what}: the edited source does not parse "
                           f"(line {exc.lineno}: {exc.msg})") from exc
    return text
