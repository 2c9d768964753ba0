"""``python -m grader similarity DIR --out similarity.html``: the most
similar pairs of a class's solutions, ranked, never judged.

Details: docs/internals.md, `grader.routes.similarity`.
"""
from __future__ import annotations

import argparse
import ast
import copy
import html
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grader.output.files import write_atomic
from grader.output.text import clean

if TYPE_CHECKING:
    from grader.locate.source import SourceFile, StudentCode
    from grader.rubric import Assignment

#: Fingerprints are runs of this many normalised tokens of one statement
#: (a shorter statement is one fingerprint).
GRAM = 5


@dataclass
class OwnCode:
    """A student's own code: the lines shown and, for each, where it came
    from (task id, line in the submission); and what is compared: one
    unit per executed statement (normalised tokens, the indexes of its
    lines)."""

    student: str
    lines: list[str] = field(default_factory=list)
    origin: list[tuple[str, int]] = field(default_factory=list)
    # Why a task's code could not be read (it does not parse, the class
    # is missing): the true reason a student was not compared.
    problems: list[str] = field(default_factory=list)
    units: list[tuple[tuple[str, ...], tuple[int, ...]]] = field(
        default_factory=list)
    # The statements the units were made of (a unit puts in place the
    # temporaries it reads): what the report marks, line by line.
    statements: list[tuple[tuple[str, ...], tuple[int, ...]]] = field(
        default_factory=list)


def _graded_functions(node: ast.ClassDef | ast.FunctionDef,
                      stub_tree: ast.Module | None, tree: ast.Module
                      ) -> list[tuple[str | None, str, ast.FunctionDef]]:
    """The functions of a target that are graded, each with its owner and
    the name it is graded under: a function itself; of a class, the
    methods the stub's class defines (all methods when the stub has no
    such class), in the stub's order. A method is the function the class
    holds under its name (``grader.analyse.executed.bound_method``): a
    ``def`` of its body, or a module-level function bound to the name by
    a plain name (``forward = _forward``), whatever that function is
    called."""
    if not isinstance(node, ast.ClassDef):
        return [(None, node.name, node)]
    from grader.analyse.executed import bound_method, class_namespaces
    from grader.locate.source import find_class

    namespaces = class_namespaces(tree)
    methods = [f for f in node.body if isinstance(f, ast.FunctionDef)]
    stub_class = find_class(stub_tree, node.name) if stub_tree else None
    if stub_class is None:
        inside = {id(f) for f in methods}
        own: list[tuple[str | None, str, ast.FunctionDef]] = [
            (node.name, f.name, f) for f in methods]
        return own + [
            (node.name, name, f)
            for name, f in namespaces.get(id(node), {}).items()
            if isinstance(f, ast.FunctionDef) and id(f) not in inside]
    names = [f.name for f in stub_class.body
             if isinstance(f, ast.FunctionDef)]
    found = [(node.name, name, bound_method(node, name, namespaces))
             for name in names]
    return [(owner, name, f) for owner, name, f in found
            if isinstance(f, ast.FunctionDef)]


def own_code(student: str, assignment: Assignment,
             sources: Mapping[str, SourceFile]) -> OwnCode:
    """The student's own code of every task of ``assignment``, in each
    task's source (``sources``, a located submission's): what each graded
    function executes, the file's helpers inlined
    (:mod:`grader.analyse.executed`), and the lines it comes from."""
    from grader.analyse.executed import (Expander, canonical_tree,
                                         file_scope, stub_vocabulary)
    from grader.analyse.static import stub_of
    from grader.judge.pep8 import NBGRADER_MARKERS
    from grader.locate.source import (find_class, find_function,
                                      given_statements, node_span,
                                      split_lines, student_code)

    stub = stub_of(assignment)
    stub_tree = _stub_tree(stub)
    keep = stub_vocabulary(stub.text) if stub is not None else frozenset()
    targets = frozenset(task.target for task in
                        assignment.tasks)
    code = OwnCode(student)
    index_of: dict[int, int] = {}
    trees: dict[int, ast.Module] = {}
    for task in assignment.tasks:
        source = sources.get(task.id)
        if source is None:
            continue
        try:
            if id(source) not in trees:
                trees[id(source)] = canonical_tree(
                    source.parse())
            tree = trees[id(source)]
        except SyntaxError as exc:
            code.problems.append(f"{task.target}: the code does not parse "
                                 f"(SyntaxError at line {exc.lineno}: "
                                 f"{exc.msg})")
            continue
        except (ValueError, RecursionError, MemoryError) as exc:
            code.problems.append(f"{task.target}: the code cannot be read "
                                 f"({type(exc).__name__})")
            continue
        lines = split_lines(source.text)
        node = find_class(tree, task.target) or find_function(
            tree, task.target)
        if node is None:
            code.problems.append(f"{task.target} is not defined")
            continue
        functions = _graded_functions(node, stub_tree, tree)
        owners = {}
        owned: set[int] = set()
        for class_name, name, func in functions:
            # The stub's given code of the method it is graded as, not
            # of the name the function was defined under.
            given = given_statements(stub, class_name, name)
            mine = student_code(source, func, given)
            owners[id(func)] = (class_name, name, mine)
            for start, end in mine.regions:
                owned.update(range(start, end + 1))
            for statement in mine.outside:
                first, last = node_span(statement)
                owned.update(range(first, last + 1))
            for statement in mine.given:
                # Without markers the whole body is the student's; the
                # stub's given statements in it are still nobody's.
                first, last = node_span(statement)
                owned.difference_update(range(first, last + 1))
        scope = file_scope(tree, keep, targets, frozenset(
            (owner, name) for owner, name, _ in functions if owner))
        expander = Expander(scope, _ownership(owners, stub_tree, stub))
        units = []
        try:
            for _, _, func in functions:
                units += expander.units(
                    func, node if isinstance(node, ast.ClassDef) else None)
        except (RecursionError, MemoryError) as exc:
            code.problems.append(f"{task.target}: the code is nested too "
                                 f"deeply to compare "
                                 f"({type(exc).__name__})")
            continue
        for unit in units:
            owned.update(unit.lines)
        for number in sorted(owned):
            text = lines[number - 1].strip() if 1 <= number <= len(lines) \
                else ""
            if text and text not in NBGRADER_MARKERS and \
                    number not in index_of:
                index_of[number] = len(code.lines)
                code.lines.append(lines[number - 1])
                code.origin.append((task.id, number))

        def indexes(numbers: frozenset[int]) -> tuple[int, ...]:
            return tuple(sorted(index_of[n] for n in numbers
                                if n in index_of))

        for unit in units:
            code.units.append((unit.tokens, indexes(unit.lines)))
            code.statements += [(tokens, indexes(numbers))
                                for tokens, numbers in unit.parts]
    return code


def _ownership(owners: dict[int, tuple[str | None, str, StudentCode]],
               stub_tree: ast.Module | None,
               stub: SourceFile | None
               ) -> Callable[[ast.AST, ast.stmt], bool]:
    """Whether a statement of a graded function is the student's: as
    the pep8 item reads it, and a compound statement (``if``, ``for``)
    only when the stub's same function has no such one outside its
    regions."""
    from grader.locate import source

    allowances: dict[int, Counter] = {}

    def stub_given(owner: str | None, name: str) -> Counter:
        """The stub's own statements of the function outside its regions:
        compound ones by their header, simple ones by what they do with
        every name blanked (a renamed copy of given code is still the
        stub's)."""
        if stub_tree is None or stub is None:
            return Counter()
        if owner is None:
            found = source.find_function(stub_tree, name)
        else:
            cls = source.find_class(stub_tree, owner)
            found = (source.find_method(cls, name) if cls is not None
                     else None)
        if found is None:
            return Counter()
        regions = source.StudentCode(
            tuple(source.marked_regions(stub, found)), (), True)
        return Counter(key for node in ast.walk(found)
                       if isinstance(node, ast.stmt)
                       and node is not found
                       and not regions.in_region(node.lineno)
                       and (key := _given_key(node)) is not None)

    def owns(func: ast.AST, node: ast.stmt) -> bool:
        if id(func) not in owners:
            return True
        owner, name, mine = owners[id(func)]
        if id(func) not in allowances:
            allowances[id(func)] = stub_given(owner, name)
        allowance = allowances[id(func)]
        key = _given_key(node)
        if key is not None and allowance[key] > 0:
            allowance[key] -= 1
            return False
        return mine.owns(node)

    return owns


def _given_key(node: ast.stmt) -> str | None:
    """A statement as the stub's given code is recognised: a compound
    statement by its header; a simple one by its syntax with every name
    blanked; None for a docstring or ``pass``."""
    from grader.analyse.executed import header_key

    if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and
                                      isinstance(node.value, ast.Constant)):
        return None
    header = header_key(node)
    if header is not None:
        return "header " + header
    if any(isinstance(getattr(node, name, None), list)
           for name in ("body", "orelse", "finalbody", "handlers")):
        return None
    blank = copy.deepcopy(node)
    for child in ast.walk(blank):
        if isinstance(child, ast.Name):
            child.id = "_"
    try:
        return ast.dump(blank)
    except (RecursionError, MemoryError):
        return None


def _stub_tree(stub: SourceFile | None) -> ast.Module | None:
    if stub is None:
        return None
    try:
        return stub.parse()
    except SyntaxError:
        return None


@dataclass
class Pair:
    """Two students' similarity: each side's share found in the other's,
    the tokens they share, and the lines (indexes into each one's
    :class:`OwnCode`) that hold shared code."""

    left: OwnCode
    right: OwnCode
    shares: tuple[float, float]
    tokens: int
    shared: tuple[list[int], list[int]]

    @property
    def rank(self) -> float:
        """The ranking key: the larger of the two shares."""
        return max(self.shares)


def _grams(tokens: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The fingerprints of one statement: its runs of :data:`GRAM`
    tokens (a shorter statement is one)."""
    if len(tokens) <= GRAM:
        return [tokens]
    return [tokens[i:i + GRAM] for i in range(len(tokens) - GRAM + 1)]


@dataclass
class _Prints:
    """One student's fingerprints: how many times each occurs (what is
    scored), and per statement, its fingerprints and line indexes (what
    is marked), with the set of those."""

    code: OwnCode
    counts: Counter
    statements: list[tuple[list[int], tuple[int, ...]]]
    marks: set[int]


def _fingerprints(code: OwnCode, ids: dict, common: set[int]) -> _Prints:
    def grams(tokens: tuple[str, ...]) -> list[int]:
        found = [ids.setdefault(g, len(ids)) for g in _grams(tokens)]
        return [g for g in found if g not in common]

    counts: Counter = Counter()
    for tokens, _ in code.units:
        counts.update(grams(tokens))
    statements = [(grams(tokens), indexes)
                  for tokens, indexes in code.statements]
    statements = [(g, indexes) for g, indexes in statements if g]
    return _Prints(code, counts, statements,
                   {g for found, _ in statements for g in found})


def _shared_lines(prints: _Prints, other: set[int]) -> tuple[list[int], int]:
    """The line indexes of the statements at least half of whose
    fingerprints the other side's statements have, and the tokens the
    shared fingerprints cover."""
    lines: set[int] = set()
    tokens = 0
    for grams, indexes in prints.statements:
        hits = [g in other for g in grams]
        if 2 * sum(hits) >= len(grams):
            lines.update(indexes)
        covered: set[int] = set()
        for start, hit in enumerate(hits):
            if hit:
                covered.update(range(start, start + GRAM))
        tokens += len(covered) if len(grams) > 1 or not hits[0] \
            else GRAM
    return sorted(lines), tokens


def compare(codes: list[OwnCode], pairs: int,
            boilerplate: OwnCode | None = None
            ) -> tuple[list[Pair], list[OwnCode]]:
    """The ``pairs`` most similar pairs among ``codes``, and the codes
    compared: those with any fingerprint left once the ``boilerplate``'s
    (what the stub itself has in its regions) are taken out.

    A fingerprint counts by how rare it is in the class (log(1 + N/n) for
    one that n of the N students have): code most of the class writes
    alike weighs little, code two students alone share weighs most."""
    ids: dict[tuple[str, ...], int] = {}
    common: set[int] = set()
    if boilerplate is not None:
        common = set(_fingerprints(boilerplate, ids, set()).counts)
    prints = [p for p in (_fingerprints(code, ids, common) for code in codes)
              if p.counts]
    students: Counter = Counter()
    for p in prints:
        students.update(p.counts.keys())
    weight = {g: math.log(1 + len(prints) / n) for g, n in students.items()}
    mass = [sum(weight[g] * n for g, n in p.counts.items()) for p in prints]
    scored = []
    for i, one in enumerate(prints):
        for j in range(i + 1, len(prints)):
            two = prints[j]
            both = one.counts.keys() & two.counts.keys()
            if not both:
                continue
            shared = sum(weight[g] * min(one.counts[g], two.counts[g])
                         for g in both)
            scored.append((shared / mass[i], shared / mass[j], i, j))
    scored.sort(key=lambda s: (-max(s[0], s[1]), -min(s[0], s[1]),
                               prints[s[2]].code.student,
                               prints[s[3]].code.student))
    found = []
    for left_share, right_share, i, j in scored[:pairs]:
        one, two = prints[i], prints[j]
        left_lines, tokens = _shared_lines(one, two.marks)
        right_lines, _ = _shared_lines(two, one.marks)
        found.append(Pair(one.code, two.code, (left_share, right_share),
                          tokens, (left_lines, right_lines)))
    return found, [p.code for p in prints]


_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 80em; }
.note { background: #fff8e1; border-left: 4px solid #f0b400;
        padding: .6em 1em; }
table.pairs td, table.pairs th { padding: .2em .8em; text-align: left; }
.side { display: inline-block; vertical-align: top; width: 48%;
        margin-right: 1%; }
pre { background: #f6f6f6; padding: .5em; overflow-x: auto; }
mark { background: #ffd8a8; }
.where { color: #888; }
"""


def _side(code: OwnCode, shared: list[int]) -> str:
    marked = set(shared)
    rows = []
    for index, line in enumerate(code.lines):
        task, number = code.origin[index]
        text = html.escape(clean(line))
        where = f'<span class="where">{html.escape(task)}:{number:>4} </span>'
        rows.append(where + (f"<mark>{text}</mark>" if index in marked
                             else text))
    return (f'<div class="side"><h4>{html.escape(clean(code.student))}'
            f'</h4><pre>{chr(10).join(rows)}</pre></div>')


def report_html(found: list[Pair], compared: int, students: int,
                assignment: str, skipped: list[str]) -> str:
    """The HTML report (every name and line a submission controls is
    escaped)."""
    def esc(text: str) -> str:
        return html.escape(clean(text))

    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Similarity: {esc(assignment)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Most similar solutions: {esc(assignment)}</h1>",
        f"<p>{compared} of {students} students had code of their own to "
        f"compare: what each graded method executes (their student "
        f"regions and what they added outside them, with the calls of "
        f"the file's own helpers inlined; the stub's given code is left "
        f"out). Names, strings, comments and layout are normalised and "
        f"each statement is compared on its own, so a copy that was "
        f"renamed, reordered or moved into helpers is found too; code "
        f"most of the class writes alike counts less.</p>",
        "<p class='note'><b>Read this as a ranking, not a verdict.</b> "
        "Short solutions are similar by nature: a correct homework "
        "class is a few lines that most students write alike, often as "
        "the textbook does. A high share between two short solutions is "
        "expected; what deserves a look is a long run of identical, "
        "unusual code (the same mistake, the same odd variable layout). "
        "Talk to the students before concluding anything.</p>",
    ]
    if not found:
        parts.append("<p>No two solutions share any code.</p>")
    else:
        parts.append("<table class='pairs'><tr><th>#</th><th>student"
                     "</th><th>student</th><th>share of each found in "
                     "the other</th><th>shared tokens</th></tr>")
        for number, pair in enumerate(found, 1):
            parts.append(
                f"<tr><td><a href='#pair{number}'>{number}</a></td>"
                f"<td>{esc(pair.left.student)}</td>"
                f"<td>{esc(pair.right.student)}</td>"
                f"<td>{100 * pair.shares[0]:.0f}% / "
                f"{100 * pair.shares[1]:.0f}%</td>"
                f"<td>{pair.tokens}</td></tr>")
        parts.append("</table>")
        for number, pair in enumerate(found, 1):
            parts.append(
                f"<h3 id='pair{number}'>{number}. "
                f"{esc(pair.left.student)} and {esc(pair.right.student)}: "
                f"{100 * pair.shares[0]:.0f}% / "
                f"{100 * pair.shares[1]:.0f}%</h3>"
                f"<p>Shared lines are marked.</p>"
                + _side(pair.left, pair.shared[0])
                + _side(pair.right, pair.shared[1]))
    if skipped:
        parts.append("<h2>Not compared</h2><ul>" + "".join(
            f"<li>{esc(s)}</li>" for s in skipped) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


@dataclass(frozen=True)
class SimilarityOptions:
    """What ``python -m grader similarity`` is asked: the typed options of
    :func:`run_similarity`."""

    dir: Path
    out: Path
    assignment: str | None = None
    pairs: int = 20

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SimilarityOptions:
        """The options of a parsed ``similarity`` command line."""
        return cls(dir=Path(args.dir), out=Path(args.out),
                   assignment=args.assignment, pairs=args.pairs)


@dataclass
class ClassSimilarity:
    """A class folder compared: its assignment, how many entries it has,
    the most similar pairs, how many students were compared, and why the
    others were not."""

    assignment: str
    students: int
    pairs: list[Pair]
    compared: int
    skipped: list[str]


def rank_class(args: SimilarityOptions) -> ClassSimilarity:
    """Locate every entry of the class folder as ``batch`` does and rank
    the pairs of their own code (nothing is written)."""
    from grader.analyse.static import stub_of
    from grader.errors import BatchError, CliError
    from grader.locate.submission import SubmissionError, locate
    from grader.routes.classfolder import class_assignment, discover
    from grader.rubric import RubricError, get_assignment

    try:
        if args.assignment:
            get_assignment(args.assignment)
        found = discover(args.dir, args.assignment, exclude=(args.out,))
        chosen = args.assignment or found.assignment or \
            class_assignment(found.entries)[0]
    except (BatchError, RubricError) as exc:
        raise CliError(str(exc)) from exc
    assignment = get_assignment(chosen)
    stub = stub_of(assignment)
    boilerplate = own_code("the stub", assignment, {
        task.id: stub for task in assignment.tasks}) if stub else None
    codes, skipped = [], []
    for entry in found.entries:
        if entry.problem:
            skipped.append(f"{entry.student}: {entry.problem}")
            continue
        try:
            submission = locate(entry.path, chosen, nearby=False)
        except (SubmissionError, OSError) as exc:
            skipped.append(f"{entry.student}: {exc}")
            continue
        codes.append(own_code(entry.student, assignment,
                              submission.sources))
    pairs, kept = compare(codes, args.pairs, boilerplate)
    ids = {id(code) for code in kept}
    skipped += [f"{code.student}: "
                + ("; ".join(dict.fromkeys(code.problems))
                   or "no code of their own beyond the stub's")
                for code in codes if id(code) not in ids]
    return ClassSimilarity(chosen, len(found.entries), pairs, len(kept),
                           skipped)


def run_similarity(args: SimilarityOptions) -> int:
    """``python -m grader similarity``: write the report; exit status."""
    result = rank_class(args)
    pairs = result.pairs
    write_atomic(Path(args.out), report_html(
        pairs, result.compared, result.students, result.assignment,
        result.skipped))
    print(f"compared {result.compared} of {result.students} students' own "
          f"code ({result.assignment}); {len(pairs)} most similar pairs -> "
          f"{args.out} (a ranking: short solutions are similar by nature)")
    for pair in pairs[:5]:
        print(f"  {clean(pair.left.student)} ~ {clean(pair.right.student)}"
              f": {100 * pair.shares[0]:.0f}% / {100 * pair.shares[1]:.0f}%")
    return 0
