"""Shape comments, part 1: the grammar (trusted grader process).

:class:`DimensionTable` (an assignment's dimension names and aliases),
:func:`parse_shapes` (the shapes a comment claims, in the assignment's
notation) and the evaluation of a claimed dimension under a size set.
Nothing here runs in the sandbox. :mod:`grader.shapes` describes the three
parts; ``docs/shape-comments.md`` documents the grammar for students.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.errors import GraderError
from grader.rubric import DEFAULT_NOTATION, DEFAULT_SHAPE_EXAMPLE, Notation

if TYPE_CHECKING:
    from grader.rubric import Assignment


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

class ShapeSyntaxError(GraderError, ValueError):
    """Bracketed text that is not a shape (an index, prose, a typo)."""


class ShapeEvalError(GraderError, ValueError):
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
    """A product, quotient, sum or difference: ``op`` is ``*``, ``/``,
    ``//``, ``+`` or ``-`` (``seq_len - 1`` for a shifted sequence)."""

    op: str
    left: Dim
    right: Dim

    def __str__(self) -> str:
        """The expression with explicit parentheses."""
        return f"({self.left} {self.op} {self.right})"


Dim = Name | Int | BinOp

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[^\W\d]\w*)"
                    r"|(?P<op>//|[*/(),+-]))")
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
        assert kind is not None  # every alternative is a named group
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


class DimParser:
    """Recursive descent over ``dim := term (('+'|'-') term)*``,
    ``term := factor (('*'|'/'|'//') factor)*``."""

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
        node = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            self.count()
            node = BinOp(op, node, self.term())
        return node

    def term(self) -> Dim:
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
    if dim.op in ("+", "-"):
        value = left + right if dim.op == "+" else left - right
        if value < 0:
            raise ShapeEvalError(f"{dim.left} {dim.op} {dim.right} is "
                                 f"negative ({left} {dim.op} {right})")
        return value
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


def is_index(comment: str, start: int) -> bool:
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


def brief(text: str, limit: int = 120) -> str:
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


def is_tuple(inside: str) -> bool:
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


def shape_groups(comment: str, notation: tuple[Notation, ...]
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
    groups: list[tuple[str, tuple[Dim, ...] | str]] = []
    for start, end, inside, rule in shape_groups(comment, notation):
        text = brief(" ".join(comment[start:end].split()))
        if is_index(comment, start):
            groups.append((text, "a call, not a shape"
                           if rule.brackets == "()" else
                           "an index, not a shape"))
            continue
        if rule.brackets == "()" and not is_tuple(inside):
            groups.append((text, "no comma: round brackets hold a shape "
                                 "only as a tuple, (num_tokens,)"))
            continue
        try:
            groups.append((text, DimParser(inside).shape()))
        except ShapeSyntaxError as exc:
            groups.append((text, str(exc)))
    return groups


def notation_of(table: DimensionTable | None) -> tuple[Notation, ...]:
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
            _bracket_groups(comment, notation_of(table))
            if isinstance(dims, tuple)]


def ignored_brackets(comment: str,
                     table: DimensionTable | None = None) -> list[str]:
    """Bracketed text of ``comment`` that is not a shape, with the reason."""
    return [f"{text} ({reason})" for text, reason in
            _bracket_groups(comment, notation_of(table))
            if isinstance(reason, str)]
