"""``python -m grader similarity DIR --out similarity.html``: the most
similar pairs of a class's solutions, ranked, never judged.

Details: docs/internals.md, `grader.routes.similarity`.
"""
from __future__ import annotations

import argparse
import ast
import html
import io
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import GraderError
from grader.output.files import write_atomic
from grader.output.text import clean

NOISE = 25       # copydetect's k: shorter shared runs are noise
GUARANTEE = 25   # runs this long are always found (winnowing window 1)


class SimilarityError(GraderError):
    """The comparison cannot start (one line, exit status 2)."""


@dataclass
class OwnCode:
    """A student's own code: the document compared and, for each of its
    lines, where it came from (task id, line in the submission)."""

    student: str
    lines: list[str] = field(default_factory=list)
    origin: list[tuple[str, int]] = field(default_factory=list)
    # Why a task's code could not be read (it does not parse, the class
    # is missing): the true reason a student was not compared.
    problems: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The document copydetect reads."""
        return "".join(line + "\n" for line in self.lines)


def own_code(student: str, assignment: object,
             sources: dict[str, object]) -> OwnCode:
    """The student's own lines of every task of ``assignment``, in each
    task's source (``sources``, a located submission's)."""
    from grader.analyse.static import stub_of
    from grader.judge.pep8 import NBGRADER_MARKERS
    from grader.locate.source import (find_class, find_function,
                                      given_statements, node_span, split_lines,
                                      student_code)

    stub = stub_of(assignment)  # type: ignore[arg-type]
    code = OwnCode(student)
    for task in assignment.tasks:  # type: ignore[attr-defined]
        source = sources.get(task.id)
        if source is None:
            continue
        try:
            tree = source.parse()  # type: ignore[attr-defined]
        except SyntaxError as exc:
            code.problems.append(f"{task.target}: the code does not parse "
                                 f"(SyntaxError at line {exc.lineno}: "
                                 f"{exc.msg})")
            continue
        except (ValueError, RecursionError, MemoryError) as exc:
            code.problems.append(f"{task.target}: the code cannot be read "
                                 f"({type(exc).__name__})")
            continue
        lines = split_lines(source.text)  # type: ignore[attr-defined]
        node = find_class(tree, task.target) or find_function(
            tree, task.target)
        if node is None:
            code.problems.append(f"{task.target} is not defined")
            continue
        functions = ([(node.name, f) for f in ast.walk(node)
                      if isinstance(f, ast.FunctionDef)]
                     if isinstance(node, ast.ClassDef)
                     else [(None, node)])
        owned: set[int] = set()
        for class_name, func in functions:
            given = given_statements(stub, class_name, func.name)
            mine = student_code(source, func, given)
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
        for number in sorted(owned):
            text = lines[number - 1].strip() if 1 <= number <= len(lines) \
                else ""
            if text and text not in NBGRADER_MARKERS:
                code.lines.append(lines[number - 1])
                code.origin.append((task.id, number))
    return code


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


def _lines_of(slices: object, text: str) -> list[int]:
    """The line indexes of ``text`` that the character ``slices`` (2xN)
    touch."""
    starts = [0]
    for index, char in enumerate(text):
        if char == "\n":
            starts.append(index + 1)
    touched: set[int] = set()
    import bisect

    for start, end in zip(*slices):  # type: ignore[call-overload]
        first = bisect.bisect_right(starts, int(start)) - 1
        last = bisect.bisect_right(starts, max(int(end) - 1, int(start))) - 1
        touched.update(range(first, last + 1))
    count = text.count("\n")
    return sorted(i for i in touched if 0 <= i < count)


def compare(codes: list[OwnCode], pairs: int,
            boilerplate: OwnCode | None = None
            ) -> tuple[list[Pair], list[OwnCode]]:
    """The ``pairs`` most similar pairs among ``codes``, and the codes
    compared: those with any fingerprint left once the ``boilerplate``'s
    (what the stub itself has in its regions) are taken out."""
    try:
        from copydetect import CodeFingerprint, compare_files
    except ImportError as exc:
        raise SimilarityError(
            "copydetect is not installed: pip install copydetect (or the "
            "kit's extra: pip install -e '.[similarity]')") from exc
    window = GUARANTEE - NOISE + 1
    common = []
    if boilerplate is not None and boilerplate.lines:
        common = list(CodeFingerprint(
            "stub.py", NOISE, window, fp=io.StringIO(boilerplate.text),
            language="python").hashes)
    prints = []
    for code in codes:
        if not code.lines:
            continue
        fingerprint = CodeFingerprint(
            f"{len(prints)}.py", NOISE, window, boilerplate=common,
            fp=io.StringIO(code.text), language="python")
        if fingerprint.hashes:
            prints.append((code, fingerprint))
    screened = []
    for i, (_, first) in enumerate(prints):
        for j in range(i + 1, len(prints)):
            second = prints[j][1]
            common = len(first.hashes & second.hashes)
            if common:
                screened.append((common / min(len(first.hashes),
                                              len(second.hashes)), i, j))
    screened.sort(key=lambda s: (-s[0], s[1], s[2]))
    found = []
    for _, i, j in screened[:max(3 * pairs, pairs + 20)]:
        (left, one), (right, two) = prints[i], prints[j]
        tokens, shares, slices = compare_files(one, two)
        if not tokens:
            continue
        found.append(Pair(left, right,
                          (float(shares[0]), float(shares[1])), int(tokens),
                          (_lines_of(slices[0], left.text),
                           _lines_of(slices[1], right.text))))
    found.sort(key=lambda p: (-p.rank, -min(p.shares), p.left.student,
                              p.right.student))
    return found[:pairs], [code for code, _ in prints]


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
        f"compare (their student regions and what they added outside "
        f"them; the stub's given code is left out). Compared with "
        f"copydetect: names, strings and layout are normalised, so a "
        f"renamed copy is found too.</p>",
        "<p class='note'><b>Read this as a ranking, not a verdict.</b> "
        "Short solutions are similar by nature: a correct homework "
        "class is a few lines that most students write alike, often as "
        "the textbook does. A high share between two short solutions is "
        "expected; what deserves a look is a long run of identical, "
        "unusual code (the same mistake, the same odd variable layout). "
        "Talk to the students before concluding anything.</p>",
    ]
    if not found:
        parts.append("<p>No two solutions share any code above the "
                     "noise threshold.</p>")
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


def run_similarity(args: SimilarityOptions) -> int:
    """``python -m grader similarity``: write the report; exit status."""
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
    from grader.analyse.static import stub_of

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
    try:
        pairs, kept = compare(codes, args.pairs, boilerplate)
    except SimilarityError as exc:
        raise CliError(str(exc)) from exc
    ids = {id(code) for code in kept}
    skipped += [f"{code.student}: "
                + ("; ".join(dict.fromkeys(code.problems))
                   or "no code of their own beyond the stub's")
                for code in codes if id(code) not in ids]
    compared = len(kept)
    write_atomic(Path(args.out), report_html(
        pairs, compared, len(found.entries), chosen, skipped))
    print(f"compared {compared} of {len(found.entries)} students' own "
          f"code ({chosen}); {len(pairs)} most similar pairs -> {args.out} "
          f"(a ranking: short solutions are similar by nature)")
    for pair in pairs[:5]:
        print(f"  {clean(pair.left.student)} ~ {clean(pair.right.student)}"
              f": {100 * pair.shares[0]:.0f}% / {100 * pair.shares[1]:.0f}%")
    return 0
