"""Shape comments: which statements need one, what they claim, and the truth.

The rubric asks for a shape comment on every statement in a student region of
``forward`` whose value is a tensor, and checks it by running the code. This
module holds the trusted side's two parts; the third runs in the sandbox:

1. **Static analysis** (trusted grader process): :class:`DimensionTable`
   (the rubric's dimension names and aliases), :func:`parse_shapes` (the
   bracketed shapes of a comment) and :func:`collect_statements` (the
   statements of a method's student regions, what to watch after each one
   runs, and the comment that belongs to it). :meth:`Statement.to_plain` is
   the plan handed to the sandbox.
2. **Tracing** (untrusted sandbox worker): the agent's line tracer
   (:func:`grader.agent.line_tracer`) runs ``forward`` under
   ``sys.settrace`` and records the shape of every watched value each time
   a planned statement completes; its records are plain data.
3. **Verification** (trusted grader process): :func:`verify` compares the
   claims with the records of every size set and returns :class:`Finding`
   records; :func:`format_findings` turns them into a report a student can
   act on.

The grammar and the attribution rules are documented for students in
``docs/shape-comments.md``.
"""
from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field, replace
from itertools import combinations_with_replacement
from typing import TYPE_CHECKING, Any, Iterable

from grader.rubric import DEFAULT_NOTATION, DEFAULT_SHAPE_EXAMPLE, Notation

if TYPE_CHECKING:  # only for annotations; the tracer must stay stdlib-only
    from grader.rubric import Assignment
    from grader.source import SourceFile

#: Finding kinds that cost the task's point.
PENALISED_KINDS = ("missing", "no_shape", "unknown_name", "wrong_shape")
#: Finding kinds that are reported as notes and cost nothing.
NOTE_KINDS = ("never_ran", "not_traced")
#: The watch entry that stands for the value a ``return`` statement returns.
RETURN_VALUE = "<return>"
#: At most this many executions of one statement are kept verbatim; after
#: that, only executions with shapes not seen before are added.
MAX_EXECUTIONS = 10_000

_ABOVE_HINT = ("a comment above a statement belongs to the statement before "
               "it; put each shape on the same line as its statement or "
               "directly below it")
_MARKERS = ("YOUR CODE STARTS HERE", "YOUR CODE ENDS HERE",
            "### BEGIN SOLUTION", "### END SOLUTION",
            "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


# ---------------------------------------------------------------------------
# Dimension names
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class DimensionTable:
    """The shape grammar of one assignment: the dimension names a shape
    comment may use, with their aliases, and the notation shapes are
    written in.

    Built from the rubric's ``[shapes.dimensions]`` table (canonical name ->
    list of aliases), its ``[[shapes.notation]]`` tables (bracket pairs, an
    optional label) and its ``example``. Names are matched
    case-insensitively.
    """

    entries: tuple[tuple[str, tuple[str, ...]], ...]
    notation: tuple[Notation, ...] = DEFAULT_NOTATION
    example: str = DEFAULT_SHAPE_EXAMPLE
    _lookup: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Build the case-insensitive lookup; reject ambiguous aliases."""
        lookup: dict[str, str] = {}
        for canonical, aliases in self.entries:
            for name in (canonical, *aliases):
                key = name.lower()
                if lookup.get(key, canonical) != canonical:
                    raise ValueError(f"dimension name {name!r} is used for "
                                     f"both {lookup[key]} and {canonical}")
                lookup[key] = canonical
        object.__setattr__(self, "_lookup", lookup)

    @classmethod
    def from_rubric(cls, table: dict[str, list[str]],
                    notation: tuple[Notation, ...] = DEFAULT_NOTATION,
                    example: str = DEFAULT_SHAPE_EXAMPLE
                    ) -> DimensionTable:
        """Build the table from the rubric's ``[shapes.dimensions]`` dict
        (and its notation, default: square brackets)."""
        return cls(tuple((str(name), tuple(str(a) for a in aliases))
                         for name, aliases in table.items()),
                   tuple(notation), example)

    @classmethod
    def of(cls, assignment: Assignment) -> DimensionTable:
        """The shape grammar of ``assignment``'s rubric."""
        return cls.from_rubric(
            {k: list(v) for k, v in assignment.dimensions.items()},
            assignment.notation, assignment.shape_example)

    def resolve(self, name: str) -> str | None:
        """The canonical name for ``name`` (any case), or None if unknown."""
        return self._lookup.get(name.lower())

    def known_names(self) -> list[str]:
        """The canonical names, in rubric order."""
        return [canonical for canonical, _ in self.entries]

    def describe(self) -> str:
        """Every name with its aliases, e.g. ``batch_size (bs, batch, b)``."""
        return "; ".join(f"{name} ({', '.join(aliases)})" if aliases
                         else name for name, aliases in self.entries)


# ---------------------------------------------------------------------------
# The shape grammar
# ---------------------------------------------------------------------------

class ShapeSyntaxError(ValueError):
    """Bracketed text that is not a shape (an index, prose, a typo)."""


class ShapeEvalError(ValueError):
    """A claimed shape that has no value under a size set."""


@dataclass(frozen=True)
class Name:
    """A dimension name as written in the comment."""

    text: str

    def __str__(self) -> str:
        """The name as written."""
        return self.text


@dataclass(frozen=True)
class Int:
    """An integer literal dimension, e.g. the ``1`` of ``[bs, 1, seq]``."""

    value: int

    def __str__(self) -> str:
        """The integer as written."""
        return str(self.value)


@dataclass(frozen=True)
class BinOp:
    """A product or quotient: ``op`` is ``*``, ``/`` or ``//``."""

    op: str
    left: Dim
    right: Dim

    def __str__(self) -> str:
        """The expression with explicit parentheses."""
        return f"({self.left} {self.op} {self.right})"


Dim = Name | Int | BinOp

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[^\W\d]\w*)"
                    r"|(?P<op>//|[*/(),]))")
_BRACKET = re.compile(r"\[([^\[\]]*)\]")


#: The longest dimension a shape may spell (operators and parentheses):
#: longer ones are no shape, and are never evaluated (nothing a comment
#: holds can make the grader recurse deeply).
MAX_DIM_OPERATORS = 16


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens = []
    position = 0
    end = len(text.rstrip())
    while position < end:
        match = _TOKEN.match(text, position)
        if match is None:
            raise ShapeSyntaxError(
                f"unexpected {text[position:end].lstrip()[:1]!r}")
        kind = match.lastgroup
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over ``dim := factor (('*'|'/'|'//') factor)*``."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.index = 0
        self.operators = 0

    def peek(self) -> tuple[str, str] | None:
        return (self.tokens[self.index]
                if self.index < len(self.tokens) else None)

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise ShapeSyntaxError("unexpected end of shape")
        self.index += 1
        return token

    def shape(self) -> tuple[Dim, ...]:
        dims: list[Dim] = []
        while self.peek() is not None:
            dims.append(self.dim())
            token = self.peek()
            if token is None:
                break
            if token != ("op", ","):
                raise ShapeSyntaxError(f"expected ',' before {token[1]!r}")
            self.take()
        return tuple(dims)

    def count(self) -> None:
        self.operators += 1
        if self.operators > MAX_DIM_OPERATORS:
            raise ShapeSyntaxError("too long to be a shape")

    def dim(self) -> Dim:
        node = self.factor()
        while self.peek() in (("op", "*"), ("op", "/"), ("op", "//")):
            op = self.take()[1]
            self.count()
            node = BinOp(op, node, self.factor())
        return node

    def factor(self) -> Dim:
        kind, text = self.take()
        if kind == "int":
            if len(text) > 18:
                raise ShapeSyntaxError("a number too large to be a size")
            return Int(int(text))
        if kind == "name":
            return Name(text)
        if text == "(":
            self.count()
            node = self.dim()
            if self.take() != ("op", ")"):
                raise ShapeSyntaxError("unbalanced parentheses")
            return node
        raise ShapeSyntaxError(f"unexpected {text!r}")


def _names(dim: Dim) -> list[str]:
    if isinstance(dim, Name):
        return [dim.text]
    if isinstance(dim, BinOp):
        return _names(dim.left) + _names(dim.right)
    return []


def _evaluate(dim: Dim, sizes: dict[str, int], table: DimensionTable) -> int:
    if isinstance(dim, Int):
        return dim.value
    if isinstance(dim, Name):
        canonical = table.resolve(dim.text)
        if canonical is None:
            raise ShapeEvalError(f"unknown name {dim.text!r}")
        if canonical not in sizes:
            raise ShapeEvalError(f"no size for {canonical}")
        return int(sizes[canonical])
    left = _evaluate(dim.left, sizes, table)
    right = _evaluate(dim.right, sizes, table)
    if dim.op == "*":
        return left * right
    if right == 0 or left % right:
        raise ShapeEvalError(f"{dim.left} {dim.op} {dim.right} does not "
                             f"divide evenly ({left} {dim.op} {right})")
    return left // right


@dataclass(frozen=True)
class ShapeClaim:
    """One bracketed shape of a comment, e.g. ``[bs * num_heads, seq, 4]``."""

    text: str
    dims: tuple[Dim, ...]

    def names(self) -> list[str]:
        """The dimension names used, as written, in order of appearance."""
        return [name for dim in self.dims for name in _names(dim)]

    def unknown_names(self, table: DimensionTable) -> list[str]:
        """The names that are neither a dimension nor an alias of one."""
        unknown: list[str] = []
        for name in self.names():
            if table.resolve(name) is None and name not in unknown:
                unknown.append(name)
        return unknown

    def evaluate(self, sizes: dict[str, int],
                 table: DimensionTable) -> tuple[int, ...]:
        """The shape this claim means under ``sizes`` (canonical -> int).

        Raises :class:`ShapeEvalError` for an unknown name or a quotient
        that does not divide evenly.
        """
        return tuple(_evaluate(dim, sizes, table) for dim in self.dims)


def _is_index(comment: str, start: int) -> bool:
    """True when the bracket at ``start`` indexes something (``x[0]``).

    A bracket glued to a word, ``)`` or ``]`` is subscript syntax, except
    after ``shape``, ``size`` or a ``...Tensor`` type name, as in the
    docstrings' ``FloatTensor[batch_size, seq_len, hidden]``.
    """
    if start == 0:
        return False
    before = comment[start - 1]
    if before in ")]":
        return True
    if not (before.isalnum() or before == "_"):
        return False
    first = start - 1
    while first > 0 and (comment[first - 1].isalnum()
                         or comment[first - 1] == "_"):
        first -= 1  # (a regex search here is quadratic in the word)
    word = comment[first:start].lower()
    return not (word in ("shape", "size") or word.endswith("tensor"))


def _brief(text: str, limit: int = 120) -> str:
    """``text`` for a report line: at most ``limit`` characters."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


#: The longest comment text searched for round-bracket groups (a longer
#: comment is cut: shapes are short, and the scan stays linear).
MAX_COMMENT_SCAN = 20_000


def _round_groups(comment: str) -> list[tuple[int, int, str]]:
    """The outermost balanced ``(...)`` groups of ``comment``: (start,
    end, inside), found in one pass (unbalanced parentheses are none)."""
    groups = []
    depth, start = 0, 0
    for index, char in enumerate(comment[:MAX_COMMENT_SCAN]):
        if char == "(":
            if depth == 0:
                start = index
            depth += 1
        elif char == ")" and depth:
            depth -= 1
            if depth == 0:
                groups.append((start, index + 1, comment[start + 1:index]))
    return groups


def _label_pattern(label: str) -> re.Pattern[str]:
    """``Shape:`` -> any case, spaces allowed before the colon."""
    body = label.rstrip(":").strip()
    pattern = re.escape(body) + (r"\s*:" if label.endswith(":") else "")
    if body[:1].isalnum() or body[:1] == "_":
        pattern = r"(?<![\w])" + pattern
    return re.compile(pattern, re.IGNORECASE)


def _is_tuple(inside: str) -> bool:
    """Round brackets hold a shape only as Python writes a tuple: with a
    comma at their top level, or nothing at all (``()``)."""
    depth = 0
    for char in inside:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            return True
    return not inside.strip()


def _groups(comment: str, notation: tuple[Notation, ...]
            ) -> list[tuple[int, int, str, Notation]]:
    """The bracket groups ``notation`` reads as candidate shapes, in the
    order they appear: (start, end, inside, notation). A notation with a
    label reads only the groups after the label's first appearance."""
    found = []
    for rule in notation:
        if rule.brackets == "[]":
            spans = [(m.start(), m.end(), m.group(1))
                     for m in _BRACKET.finditer(comment)]
        else:
            spans = _round_groups(comment)
        if rule.label:
            label = _label_pattern(rule.label).search(
                comment[:MAX_COMMENT_SCAN])
            if label is None:
                continue
            spans = [span for span in spans if span[0] >= label.end()]
        found += [(start, end, inside, rule)
                  for start, end, inside in spans]
    return sorted(found, key=lambda group: group[0])


def _bracket_groups(comment: str,
                    notation: tuple[Notation, ...] = DEFAULT_NOTATION
                    ) -> list[tuple[str, tuple[Dim, ...] | str]]:
    """Each bracket group: its text (shortened for reports) and its dims,
    or why it is no shape."""
    groups = []
    for start, end, inside, rule in _groups(comment, notation):
        text = _brief(" ".join(comment[start:end].split()))
        if _is_index(comment, start):
            groups.append((text, "a call, not a shape"
                           if rule.brackets == "()" else
                           "an index, not a shape"))
            continue
        if rule.brackets == "()" and not _is_tuple(inside):
            groups.append((text, "no comma: round brackets hold a shape "
                                 "only as a tuple, (num_tokens,)"))
            continue
        try:
            groups.append((text, _Parser(inside).shape()))
        except ShapeSyntaxError as exc:
            groups.append((text, str(exc)))
    return groups


def _notation_of(table: DimensionTable | None) -> tuple[Notation, ...]:
    return table.notation if table is not None else DEFAULT_NOTATION


def parse_shapes(comment: str,
                 table: DimensionTable | None = None) -> list[ShapeClaim]:
    """Every bracketed shape in ``comment``, in order.

    A dimension is a name, an integer, or a product or quotient of them
    (``*``, ``/``, ``//``, parentheses), e.g. ``[batch_size * num_heads,
    seq_len, hidden / num_heads]``; ``[]`` is the shape of a scalar. A shape
    may wrap over comment lines. Bracketed text that is not a shape
    (``mask[None, :]``, ``[:, 0]``, prose) is skipped; see
    :func:`ignored_brackets`. The claim of a comment is the last shape.

    The brackets are those of ``table``'s notation (default: square
    brackets anywhere); a notation with a label, such as the book's
    ``# Shape: (b, num_tokens, d_out)``, reads its brackets only after the
    label.
    """
    return [ShapeClaim(text, dims) for text, dims in
            _bracket_groups(comment, _notation_of(table))
            if isinstance(dims, tuple)]


def ignored_brackets(comment: str,
                     table: DimensionTable | None = None) -> list[str]:
    """Bracketed text of ``comment`` that is not a shape, with the reason."""
    return [f"{text} ({reason})" for text, reason in
            _bracket_groups(comment, _notation_of(table))
            if isinstance(reason, str)]


# ---------------------------------------------------------------------------
# Statements and their comments
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Statement:
    """A statement of a student region, what to record, and its comment.

    ``watch`` lists the values to record after each execution: a name, an
    attribute chain such as ``("self", "cache")``, or ``(RETURN_VALUE,)``.
    ``comment`` is the text of the comment that belongs to the statement
    (without the ``#`` marks, one line per comment line), ``comment_where``
    says whether it was the ``"trailing"`` comment or the block ``"below"``.
    ``below``, ``above`` and ``detached`` (a block below, after blank lines)
    keep the neighbouring comment blocks for hints.
    ``traceable`` is False when the statement shares its first line with a
    compound-statement header (``if c: x = f(x)``): line events cannot tell
    whether it ran. ``tensor`` says whether the source alone shows that the
    statement produces a tensor, and ``operands`` the names that make it
    one when they hold tensors (:mod:`grader.tensor_facts`), for
    statements that never ran.
    """

    id: int
    kind: str
    first_line: int
    last_line: int
    text: str
    watch: tuple[tuple[str, ...], ...]
    comment: str | None
    comment_where: str | None
    below: str | None
    above: str | None
    detached: str | None
    traceable: bool
    tensor: bool = False
    operands: tuple[str, ...] = ()

    def to_plain(self) -> dict[str, Any]:
        """The statement as JSON-able data: the plan the tracer receives."""
        return {"id": self.id, "kind": self.kind,
                "first_line": self.first_line, "last_line": self.last_line,
                "watch": [list(chain) for chain in self.watch],
                "traceable": self.traceable}


def _chain(node: ast.expr) -> tuple[str, ...] | None:
    """``x`` -> ("x",), ``self.a.b`` -> ("self", "a", "b"), else None."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(attributes))


def _target_chains(target: ast.expr) -> list[tuple[str, ...]]:
    """The values an assignment target writes, read back after it runs."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [chain for element in target.elts
                for chain in _target_chains(element)]
    if isinstance(target, ast.Starred):
        return _target_chains(target.value)
    while isinstance(target, ast.Subscript):  # x[mask] = v changes x
        target = target.value
    chain = _chain(target)
    return [] if chain is None else [chain]


def _receiver(call: ast.expr) -> tuple[str, ...] | None:
    """The object a method call works on: ``scores`` in ``scores.fill_()``.

    Method chains and subscripts are followed down to their root, so
    ``x[mask].fill_(0).add_(1)`` watches ``x``.
    """
    if not (isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)):
        return None
    node = call.func.value
    while True:
        chain = _chain(node)
        if chain is not None:
            return chain
        if isinstance(node, ast.Call) and isinstance(node.func,
                                                     ast.Attribute):
            node = node.func.value
        elif isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        else:
            return None


def _watch(node: ast.stmt) -> tuple[str, tuple[tuple[str, ...], ...]] | None:
    """The kind of a statement and the values to record, or None to skip."""
    chains: list[tuple[str, ...]]
    if isinstance(node, ast.Assign):
        kind = "assign"
        chains = [c for target in node.targets for c in _target_chains(target)]
    elif isinstance(node, ast.AnnAssign):
        if node.value is None:
            return None
        kind, chains = "annassign", _target_chains(node.target)
    elif isinstance(node, ast.AugAssign):
        kind, chains = "augassign", _target_chains(node.target)
    elif isinstance(node, ast.Return):
        kind, chains = "return", [(RETURN_VALUE,)]
    elif isinstance(node, ast.Expr):
        if isinstance(node.value, ast.Constant):
            return None  # a docstring-like string or ``...``
        receiver = _receiver(node.value)
        kind, chains = "expr", [] if receiver is None else [receiver]
    else:
        return None
    unique: list[tuple[str, ...]] = []
    for chain in chains:
        if chain not in unique:
            unique.append(chain)
    return kind, tuple(unique)


@dataclass(frozen=True)
class _Comments:
    """The comments of a source text, by line."""

    text: dict[int, str]
    whole_line: frozenset[int]
    markers: frozenset[int]

    @classmethod
    def scan(cls, source: SourceFile) -> _Comments:
        """The comment tokens of ``source`` (see SourceFile.comments)."""
        text: dict[int, str] = {}
        whole: set[int] = set()
        markers: set[int] = set()
        for row, comment in source.comments.items():
            text[row] = comment.text.lstrip("#").strip()
            if comment.whole_line:
                whole.add(row)
                if any(marker in comment.text for marker in _MARKERS):
                    markers.add(row)
        return cls(text, frozenset(whole), frozenset(markers))

    def block(self, lines: Iterable[int]) -> list[int]:
        """The run of whole-line, non-marker comments along ``lines``."""
        found = []
        for number in lines:
            if number not in self.whole_line or number in self.markers:
                break
            found.append(number)
        return found

    def join(self, numbers: list[int]) -> str | None:
        return "\n".join(self.text[n] for n in numbers) if numbers else None


def _units(nodes: list[ast.stmt]) -> list[list[ast.stmt]]:
    """Group statements that share a line (``a = 1; b = 2``)."""
    units: list[list[ast.stmt]] = []
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
        if units and node.lineno <= units[-1][-1].end_lineno:
            units[-1].append(node)
        else:
            units.append([node])
    return units


def _has_prefix(lines: list[str], node: ast.stmt) -> bool:
    """True when code precedes ``node`` on its first line."""
    line = lines[node.lineno - 1].encode("utf-8")
    return line[:node.col_offset].strip() != b""


def _segment(lines: list[str], node: ast.stmt) -> str | None:
    """The source of ``node``, its first line padded to its column (as
    ``ast.get_source_segment(..., padded=True)``, which splits the whole
    text on every call)."""
    first, last = node.lineno, node.end_lineno
    if last is None or not 1 <= first <= last <= len(lines):
        return None
    start = lines[first - 1].encode("utf-8")
    head = start[:node.col_offset].decode("utf-8", "replace")
    if first == last:
        body = [start[node.col_offset:node.end_col_offset]
                .decode("utf-8", "replace")]
    else:
        end = lines[last - 1].encode("utf-8")
        body = ([start[node.col_offset:].decode("utf-8", "replace")]
                + lines[first:last - 1]
                + [end[:node.end_col_offset].decode("utf-8", "replace")])
    if len(body) > 1:
        body[0] = " " * len(head) + body[0]
    return "\n".join(body)


def collect_statements(source: SourceFile, class_name: str | None,
                       method: str,
                       given: tuple[str, ...] | None = None
                       ) -> list[Statement]:
    """The statements of ``class_name.method`` that may need a comment.

    With ``class_name`` None, ``method`` is a module-level function.

    Every assignment (plain, annotated, augmented, tuple unpacking,
    chained), ``return`` and expression statement of the student's code
    (:func:`grader.source.student_code`: a student region, or code outside
    the regions that is not the stub's ``given`` code; with ``given`` None,
    the regions only), at any depth of if/for/while/with/try, in source
    order; statements with nothing to
    watch (``print(x)``, an assignment to ``f().attr``) are left out.
    Returns [] when the class or the method is missing; raises
    ``SyntaxError`` when the source does not parse.
    """
    from grader.source import find_class, find_function, find_method

    tree = source.parse()
    cls = None
    if class_name is None:
        func = find_function(tree, method)
    else:
        cls = find_class(tree, class_name)
        func = find_method(cls, method) if cls is not None else None
    if func is None:
        return []
    return function_statements(source, func, given=given, tree=tree,
                               cls=cls)


def function_statements(source: SourceFile,
                        func: ast.FunctionDef | ast.AsyncFunctionDef,
                        first_id: int = 0,
                        given: tuple[str, ...] | None = None,
                        tree: ast.Module | None = None,
                        cls: ast.ClassDef | None = None) -> list[Statement]:
    """The statements of one function node that may need a comment (see
    :func:`collect_statements`), numbered from ``first_id``. ``cls`` is
    the class the function is a method of, if any (``tree`` and ``cls``
    are found when not given)."""
    from grader.source import simple_statements, student_code
    from grader.tensor_facts import NEVER, TensorFacts

    if tree is None:
        tree = source.parse()
        cls = next((node for node in ast.walk(tree)
                    if isinstance(node, ast.ClassDef)
                    and func in node.body), None)
    lines = source.lines
    code = student_code(source, func, given)
    comments = _Comments.scan(source)
    try:
        facts: TensorFacts | None = TensorFacts(tree, func, cls)
    except (RecursionError, MemoryError):
        facts = None
    everything = list(simple_statements(func.body))
    untraceable = {id(node) for unit in _units(everything)
                   if _has_prefix(lines, unit[0]) for node in unit}
    statements = []
    for node in sorted(everything, key=lambda n: (n.lineno, n.col_offset)):
        if not code.owns(node):
            continue
        watched = _watch(node)
        if watched is None or not watched[1]:
            continue  # nothing it computes can be a tensor we can read
        kind, watch = watched
        verdict = facts.resolved(facts.statement(node)) if facts else NEVER
        first, last = node.lineno, node.end_lineno
        inside = [n for n in range(first, last + 1) if n in comments.text]
        below = comments.block(range(last + 1, len(lines) + 1))
        gap = last + 1
        while gap <= len(lines) and lines[gap - 1].strip() == "":
            gap += 1
        detached = comments.block(range(gap, len(lines) + 1)) \
            if gap > last + 1 else []
        above = comments.block(range(first - 1, 0, -1))[::-1]
        comment, where = comments.join(inside), "trailing"
        if comment is None:
            comment, where = comments.join(below), "below"
        if comment is None:
            where = None
        segment = _segment(lines, node)
        statements.append(Statement(
            id=first_id + len(statements), kind=kind, first_line=first,
            last_line=last,
            text=textwrap.dedent(segment or lines[first - 1]).strip(),
            watch=watch, comment=comment, comment_where=where,
            below=comments.join(below) if where == "trailing" else None,
            above=comments.join(above), detached=comments.join(detached),
            traceable=id(node) not in untraceable,
            tensor=verdict.always, operands=tuple(sorted(verdict.names))))
    return statements


# ---------------------------------------------------------------------------
# Tracing happens inside the sandbox (grader.agent.line_tracer); its records
# come back as plain data.
# ---------------------------------------------------------------------------

def merge_records(*records: dict[str, list]) -> dict[str, list]:
    """Concatenate the executions of several tracers' records."""
    merged: dict[str, list] = {}
    for one in records:
        for key, executions in one.items():
            merged.setdefault(str(key), []).extend(executions)
    return merged


# ---------------------------------------------------------------------------
# Verification (trusted grader process; pure functions)
# ---------------------------------------------------------------------------

class ShapeRecordError(ValueError):
    """Tracer records that are not the documented plain data."""


Shape = tuple[int, ...]
Execution = tuple[Shape | None, ...]


def _executions(records: Any, statement_id: int) -> list[Execution]:
    """The validated executions of one statement in one run's records."""
    if not isinstance(records, dict):
        raise ShapeRecordError("records must be a dict")
    raw = records.get(str(statement_id), records.get(statement_id, []))
    if not isinstance(raw, list):
        raise ShapeRecordError(f"records of statement {statement_id} "
                               f"must be a list")
    executions = []
    for execution in raw:
        if not isinstance(execution, list):
            raise ShapeRecordError("an execution must be a list")
        values = []
        for value in execution:
            if value is None:
                values.append(None)
            elif (isinstance(value, list) and all(
                    type(size) is int and size >= 0 for size in value)):
                values.append(tuple(value))
            else:
                raise ShapeRecordError(f"not a shape: {value!r}")
        executions.append(tuple(values))
    return executions


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


def penalised(findings: Iterable[Finding]) -> bool:
    """True when any finding costs the task's point (notes do not)."""
    return any(finding.penalised for finding in findings)


def _show(shape: Iterable[int]) -> str:
    return _brief("[" + ", ".join(str(size) for size in shape) + "]")


def _claims_match(tensors: list[Shape], claims: list[ShapeClaim],
                  sizes: dict[str, int], table: DimensionTable) -> bool:
    """Whether an execution's tensors agree with the comment's claims.

    One claim (the last shape) is enough when every tensor has it; tensors
    of different shapes are matched in order to the last ``len(tensors)``
    shapes of the comment.
    """
    def value(claim: ShapeClaim) -> Shape | None:
        try:
            return claim.evaluate(sizes, table)
        except ShapeEvalError:
            return None

    last = value(claims[-1])
    if last is not None and all(shape == last for shape in tensors):
        return True
    if len(tensors) < 2 or len(claims) < len(tensors):
        return False
    wanted = [value(claim) for claim in claims[-len(tensors):]]
    return all(w is not None and w == t for w, t in zip(wanted, tensors))


def _tensors(execution: Execution) -> list[Shape]:
    return [value for value in execution if value is not None]


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
          claims: list[ShapeClaim], table: DimensionTable) -> RealShapes:
    seen: list[str] = []
    wrong = 0
    count = 1
    for execution in executions:
        tensors = _tensors(execution)
        if not tensors:
            continue
        count = max(count, len(tensors))
        shown = " and ".join(_show(shape) for shape in tensors)
        if shown not in seen:
            seen.append(shown)
        if claims and not _claims_match(tensors, claims, sizes, table):
            wrong += 1
    expected = _expected(claims, count, sizes, table) if claims else None
    return RealShapes(index=index, sizes=dict(sizes), shapes=tuple(seen),
                      expected=expected, executions=len(executions),
                      wrong=wrong)


def _unknown_finding(statement: Statement, claim: ShapeClaim,
                     unknown: list[str], table: DimensionTable,
                     real: tuple[RealShapes, ...] = ()) -> Finding:
    names = _brief(", ".join(unknown))
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
        return bool(_Parser(text).shape())
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
    notation = _notation_of(table)
    for start, end, inside, _ in _groups(comment, notation):
        if _SELF.search(inside) and _parses(_SELF.sub("", inside)):
            names = sorted(set(re.findall(r"\bself\s*\.\s*(\w+)",
                                          inside)))
            fixed = _brief(" ".join(_SELF.sub(
                "", comment[start:end]).split()))
            return (_brief(f"write {', '.join(names)}, not "
                           f"{', '.join('self.' + n for n in names)}")
                    + f": {fixed}")
    read = {(start, end) for start, end, _, _ in _groups(comment, notation)}
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
            fixed = _brief("[" + " ".join(inside.split()) + "]")
            if labelled:
                return (f"use square brackets: {fixed}, or write "
                        f"{labelled} before the round brackets: "
                        f"{labelled} ({' '.join(inside.split())})")
            return f"use square brackets: {fixed}"
    if labelled:
        for start, end, inside, rule in _groups(comment, notation):
            if (rule.brackets == "()" and not _is_tuple(inside)
                    and not _is_index(comment, start) and _parses(inside)):
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
                    (tensor if execution[index] is not None
                     else other).add(chain[0])
    return frozenset(tensor - other)


def _unverified(statement: Statement, claims: list[ShapeClaim],
                table: DimensionTable, tensors: frozenset[str]
                ) -> Finding | None:
    """The finding for a statement that never ran (or cannot be told to
    have run): its names are checked, and a tensor statement without a
    shape in its comment is penalised all the same."""
    if claims and claims[-1].unknown_names(table):
        finding = _unknown_finding(statement, claims[-1],
                                   claims[-1].unknown_names(table), table)
        return replace(finding, message=finding.message + " (this "
                       "statement never ran, but its names are checked "
                       "all the same)")
    if statement.traceable:
        why = "never ran under the grader's cases"
    else:
        why = ("shares its line with an if/for/while/with header, so the "
               "grader cannot tell whether it ran")
    hint = None if statement.traceable else "put the statement on its own line"
    is_tensor = statement.tensor or bool(set(statement.operands) & tensors)
    base = dict(line=statement.first_line, statement=statement.text, real=())
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
    kind = "never_ran" if statement.traceable else "not_traced"
    return Finding(kind=kind, claimed=claims[-1].text if claims else None,
                   message=f"{why}, so its comment could not be checked",
                   hint=hint, **base)


def _verify_statement(statement: Statement,
                      runs: list[tuple[dict[str, int], list[Execution]]],
                      following: list[tuple[dict[str, int], list[Execution]]],
                      table: DimensionTable,
                      tensors: frozenset[str] = frozenset()
                      ) -> Finding | None:
    """The finding for one statement; ``following`` is the next one's;
    ``tensors`` the names seen to hold tensors (for statements that never
    ran)."""
    claims = parse_shapes(statement.comment or "", table)
    ran = any(executions for _, executions in runs)
    if not ran:
        return _unverified(statement, claims, table, tensors)
    if not any(_tensors(execution) for _, executions in runs
               for execution in executions):
        return None  # ran and produced no tensor: nothing to claim
    real = tuple(_real(index, sizes, executions, claims, table)
                 for index, (sizes, executions) in enumerate(runs, 1))
    base = dict(line=statement.first_line, statement=statement.text,
                real=real)
    if statement.comment is None:
        hint = None
        if _fits(statement.above, runs, table):
            hint = ("the comment above fits this statement, but "
                    + _ABOVE_HINT)
        elif _fits(statement.detached, runs, table):
            hint = ("a blank line separates this statement from the comment "
                    "below it; remove the blank line")
        return Finding(kind="missing", claimed=None,
                       message="this statement produces a tensor but has "
                               "no shape comment", hint=hint, **base)
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
    if wrong < executions:
        message += (f" (wrong in {wrong} of the {executions} times this "
                    f"line ran, right in the others)")
    hint = None
    if statement.comment_where == "below" and _fits(statement.comment,
                                                    following, table):
        hint = ("this comment fits the next statement: " + _ABOVE_HINT)
    return Finding(kind="wrong_shape", claimed=claimed, message=message,
                   hint=hint, **base)


def verify(statements: list[Statement],
           runs: list[tuple[dict[str, int], dict[str, Any]]],
           dims: DimensionTable) -> list[Finding]:
    """Compare every statement's claimed shape with what really ran.

    ``runs`` holds one ``(sizes, records)`` pair per size set: ``sizes``
    maps canonical dimension names to ints, ``records`` is the merged
    :attr:`ShapeTracer.records` of every forward call made with those
    sizes. A statement needs a comment when any execution produced a
    tensor; its claim must hold under every size set and every execution.
    A statement that never ran gives a note, unless it is a tensor
    statement (decided statically, completed by the names the trace saw
    hold tensors; see :mod:`grader.tensor_facts`) without a shape comment,
    or its comment names an unknown dimension: those are findings. Raises
    :class:`ShapeRecordError` for records that are not the documented
    plain data.
    """
    per_statement = [[(sizes, _executions(records, statement.id))
                      for sizes, records in runs]
                     for statement in statements]
    tensors = observed_tensors(statements, per_statement)
    findings = []
    for index, statement in enumerate(statements):
        following = (per_statement[index + 1]
                     if index + 1 < len(statements) else [])
        finding = _verify_statement(statement, per_statement[index],
                                    following, dims, tensors)
        if finding is not None:
            findings.append(finding)
    return findings


_TITLES = {
    "missing": "missing shape comment",
    "no_shape": "comment without a shape",
    "unknown_name": "unknown dimension name",
    "wrong_shape": "wrong shape",
    "never_ran": "note: never ran",
    "not_traced": "note: not checked",
}


def _wrap(text: str, first: str) -> str:
    return textwrap.fill(text, width=79, initial_indent=first,
                         subsequent_indent=" " * len(first),
                         break_on_hyphens=False)


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
    size_sets = {one.index: one.sizes for f in findings for one in f.real}
    if size_sets:
        header.append("Your forward ran under these sizes:")
        header += [_wrap(_sizes_text(sizes), f"  size set {index}: ")
                   for index, sizes in sorted(size_sets.items())]
    blocks = ["\n".join(header)]
    for finding in problems + notes:
        shown = finding.statement.split("\n")
        if len(shown) > 12 or len(finding.statement) > 1200:
            shown = [_brief(line, 200) for line in shown[:12]] + ["..."]
        statement = textwrap.indent("\n".join(shown), "    ")
        lines = [f"{source.where(finding.line)}: {_TITLES[finding.kind]}",
                 statement, _wrap(finding.message, "  ")]
        for one in finding.real:
            real = ", ".join(one.shapes) or "no tensor"
            if not one.executions:
                shown = "did not run"
            elif finding.kind == "wrong_shape":
                shown = f"claimed {one.expected}, real {real}"
                if not one.wrong:
                    shown += " (right under these sizes)"
            else:
                shown = f"real {real}"
            lines.append(_wrap(shown, f"  size set {one.index}: "))
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
