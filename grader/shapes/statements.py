"""Shape comments, part 2: the statements that need one (trusted grader
process).

:func:`collect_statements` finds the statements of a method's student regions,
what to watch after each one runs and the comment that belongs to it;
:meth:`Statement.to_plain` is the plan handed to the sandbox, whose line tracer
(:func:`grader.worker.agent.line_tracer`, the only part that runs beside a
submission) records real shapes as plain data; :func:`merge_records` merges
those records.
"""
from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, cast

from grader.constants import END_MARKER, NBGRADER_MARKERS, START_MARKER

if TYPE_CHECKING:
    from grader.locate.source import SourceFile

#: The watch entry that stands for the value a ``return`` statement returns.
RETURN_VALUE = "<return>"
#: The watch entry of a target that is no name or attribute chain
#: (``vars(self)["q"] = ...``, ``f().attr = ...``): the tracer reads it as
#: unread, so the statement's comment is not verified (it fails closed).
UNWATCHABLE = "<target>"
#: The kind of a statement with nothing to watch (``print(x)``, an ``if``
#: header, a nested ``def`` or ``class`` line, a class body's statement):
#: planned only so that the tracer groups its lines. A torch operation on
#: it that makes a tensor outliving it makes it a tensor statement whose
#: comment cannot be verified (:func:`grader.shapes.verify.verify`).
SPAN_KIND = "span"

_MARKERS = (START_MARKER, END_MARKER) + NBGRADER_MARKERS


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
    one when they hold tensors (:mod:`grader.shapes.tensor_facts`), for
    statements that never ran. ``alternatives``: the value is a
    conditional expression (``return (att, probs) if flag else att``),
    whose branches may give different numbers of tensors.
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
    alternatives: bool = False

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
    """The values an assignment target writes, read back after it runs.

    ``x[mask] = v`` changes ``x`` (a container's item: the container);
    ``obj.__dict__["a"] = v`` writes ``obj.a``. A target with no name or
    attribute chain at its root is UNWATCHABLE."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [chain for element in target.elts
                for chain in _target_chains(element)]
    if isinstance(target, ast.Starred):
        return _target_chains(target.value)
    if isinstance(target, ast.Subscript) and isinstance(
            target.slice, ast.Constant) and isinstance(
            target.slice.value, str):
        base = _chain(target.value)
        if base is not None and len(base) > 1 and base[-1] == "__dict__":
            return [(*base[:-1], target.slice.value)]
    while isinstance(target, ast.Subscript):
        target = target.value
    chain = _chain(target)
    return [(UNWATCHABLE,)] if chain is None else [chain]


def _walrus_chains(node: ast.AST) -> list[tuple[str, ...]]:
    """The names ``:=`` binds anywhere in a statement, in the function's
    own scope (not inside a lambda)."""
    found: list[tuple[str, ...]] = []
    pending: list[ast.AST] = [node]
    while pending:
        item = pending.pop()
        if isinstance(item, ast.Lambda):
            continue
        if isinstance(item, ast.NamedExpr) and isinstance(item.target,
                                                          ast.Name):
            found.append((item.target.id,))
        pending.extend(ast.iter_child_nodes(item))
    return sorted(found)


#: Calls that write an attribute or an item of their first argument:
#: ``setattr(obj, "a", v)`` writes ``obj.a`` as ``obj.a = v`` does.
#: Methods of a module that store their second argument as an attribute
#: named by the first (``self.register_buffer("mask", t)``).
_REGISTERS = ("register_buffer", "register_parameter")
_SETTERS = {"setattr": "attribute", "__setattr__": "attribute",
            "setitem": "item", "__setitem__": "item",
            **dict.fromkeys(_REGISTERS, "attribute")}


def _written(call: ast.expr) -> tuple[str, ...] | None:
    """What a call of a setter writes (``setattr(obj, "a", v)``,
    ``object.__setattr__(obj, "a", v)``, ``obj.__setattr__("a", v)``,
    ``operator.setitem(d, k, v)``, ``obj.register_buffer("a", v)``): the
    attribute chain, the container,
    or UNWATCHABLE when the object or the attribute's name is not
    written out; None for any other call."""
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    name = (func.id if isinstance(func, ast.Name) else
            func.attr if isinstance(func, ast.Attribute) else None)
    setter = _SETTERS.get(name or "")
    if setter is None:
        return None
    args = list(call.args)
    if isinstance(func, ast.Attribute) and name in ("__setattr__",
                                                    "__setitem__") \
            and len(args) == 2:
        args = [func.value, *args]  # obj.__setattr__("a", v)
    elif name in _REGISTERS:
        if not isinstance(func, ast.Attribute):
            return None  # a function of the student's of that name
        args = [func.value, *args]  # obj.register_buffer("a", v)
    if len(args) != 3 or any(isinstance(a, ast.Starred) for a in args):
        return (UNWATCHABLE,)
    target = args[0]
    if setter == "item":
        while isinstance(target, ast.Subscript):
            target = target.value
        return _chain(target) or (UNWATCHABLE,)
    base = _chain(target)
    if base is None or not (isinstance(args[1], ast.Constant)
                            and isinstance(args[1].value, str)):
        return (UNWATCHABLE,)
    return (*base, args[1].value)


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
        elif isinstance(node, ast.Call):
            # ``vars(self).update(q=t)``, ``globals().update(...)``: a
            # method of what a call returned, which no chain names.
            return (UNWATCHABLE,)
        else:
            return None


@dataclass(frozen=True)
class _Case:
    """A ``case`` of a ``match`` (no statement of its own in ``ast``): a
    header whose pattern binds names, watched as a statement."""

    case: ast.match_case
    match: ast.Match

    @property
    def lineno(self) -> int:
        return self.case.pattern.lineno

    @property
    def col_offset(self) -> int:
        return self.case.pattern.col_offset


def _header(node: ast.stmt | _Case) -> list[ast.AST]:
    """The expressions of a compound statement's header (``if``/``while``
    test, ``for`` iterable, ``with`` items, ``match`` subject; a case's
    pattern and guard)."""
    if isinstance(node, _Case):
        guard = [node.case.guard] if node.case.guard is not None else []
        return [node.case.pattern, *guard]
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.iter]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in node.items]
    if isinstance(node, ast.Match):
        return [node.subject]
    return []


def _header_targets(node: ast.stmt | _Case) -> list[tuple[str, ...]]:
    """What a header binds besides ``:=``: a ``for`` target, the ``as``
    targets of a ``with``, the names a ``case`` pattern captures."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return _target_chains(node.target)
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [chain for item in node.items
                if item.optional_vars is not None
                for chain in _target_chains(item.optional_vars)]
    if isinstance(node, _Case):
        return sorted({(name,) for pattern in ast.walk(node.case.pattern)
                       for name in _captured(pattern)})
    return []


def _captured(pattern: ast.AST) -> list[str]:
    """The names one node of a ``case`` pattern binds."""
    if isinstance(pattern, (ast.MatchAs, ast.MatchStar)):
        return [pattern.name] if pattern.name else []
    if isinstance(pattern, ast.MatchMapping):
        return [pattern.rest] if pattern.rest else []
    return []


def _header_chains(node: ast.stmt | _Case) -> list[tuple[str, ...]]:
    """Everything a compound statement's header binds."""
    return _header_targets(node) + [chain for expr in _header(node)
                                    for chain in _walrus_chains(expr)]


def _headers(nodes: list[ast.stmt]) -> Iterator[ast.stmt | _Case]:
    """The compound statements at any depth (not entering nested
    definitions) whose header binds a name (a ``for`` or ``with`` target,
    ``:=``), and the ``case`` clauses whose pattern captures one: each is
    watched as a statement of its own (kind "header")."""
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef)):
            continue
        if _header_chains(node):
            yield node
        if isinstance(node, ast.Match):
            for case in node.cases:
                if _header_chains(_Case(case, node)):
                    yield _Case(case, node)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                yield from _headers(block)
        for inner in (getattr(node, "handlers", [])
                      + getattr(node, "cases", [])):
            yield from _headers(inner.body)


def _header_last(node: ast.stmt | _Case) -> int:
    """The last line of a compound statement's header."""
    return max(getattr(expr, "end_lineno", None) or node.lineno
               for expr in _header(node))


def _watch(node: ast.stmt | _Case
           ) -> tuple[str, tuple[tuple[str, ...], ...]] | None:
    """The kind of a statement and the values to record, or None to skip."""
    chains: list[tuple[str, ...]]
    if _header(node):
        chains = _header_chains(node)
        return ("header", tuple(dict.fromkeys(chains))) if chains else None
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
        written = _written(node.value)
        receiver = _receiver(node.value) if written is None else written
        kind, chains = "expr", [] if receiver is None else [receiver]
    else:
        kind, chains = type(node).__name__.lower(), []
    if kind != "return":
        chains += _walrus_chains(cast(ast.AST, node))
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


def _last_line(node: ast.stmt) -> int:
    """The last line of a parsed statement (``ast.parse`` sets it)."""
    assert node.end_lineno is not None
    return node.end_lineno


def _units(nodes: list[ast.stmt]) -> list[list[ast.stmt]]:
    """Group statements that share a line (``a = 1; b = 2``)."""
    units: list[list[ast.stmt]] = []
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
        if units and node.lineno <= _last_line(units[-1][-1]):
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

    Every assignment (plain, annotated, augmented, tuple unpacking, chained),
    ``return`` and expression statement of the student's code
    (:func:`grader.locate.source.student_code`: a student region, or code
    outside the regions that is not the stub's ``given`` code; with ``given``
    None, the regions only), at any depth of if/for/while/with/try, in source
    order; statements with nothing to watch (``print(x)``) are left out. A
    target the tracer cannot watch (``f().attr = v``) is watched as
    UNWATCHABLE, and the names ``:=`` binds in any statement are watched
    too. Returns [] when the class or the method is
    missing; raises ``SyntaxError`` when the source does not parse.
    """
    from grader.locate.source import find_class, find_function, find_method

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
    from grader.locate.source import simple_statements, student_code
    from grader.shapes.tensor_facts import NEVER, TensorFacts

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
    headers = list(_headers(func.body))
    simple_lines = {number for node in everything
                    for number in range(node.lineno, _last_line(node) + 1)}
    untraceable |= {id(node) for node in headers
                    if simple_lines & set(range(node.lineno,
                                                _header_last(node) + 1))}
    statements: list[Statement] = []
    for node in sorted(everything + headers,
                       key=lambda n: (n.lineno, n.col_offset)):
        if not code.owns(node.match if isinstance(node, _Case) else node):
            continue
        watched = _watch(node)
        if watched is None or not watched[1]:
            continue  # nothing it computes can be a tensor we can read
        kind, watch = watched
        header = kind == "header"
        # A case of a match is a header: only a statement is read whole.
        whole = cast(ast.stmt, node)
        verdict = (facts.resolved(facts.statement(whole))
                   if facts and not header else NEVER)
        first = node.lineno
        last = _header_last(node) if header else _last_line(whole)
        inside = [n for n in range(first, last + 1) if n in comments.text]
        below = comments.block(range(last + 1, len(lines) + 1))
        gap = last + 1
        while gap <= len(lines) and lines[gap - 1].strip() == "":
            gap += 1
        detached = comments.block(range(gap, len(lines) + 1)) \
            if gap > last + 1 else []
        above = comments.block(range(first - 1, 0, -1))[::-1]
        where: str | None
        comment, where = comments.join(inside), "trailing"
        if comment is None:
            comment, where = comments.join(below), "below"
        if comment is None:
            where = None
        segment = (_segment(lines, whole) if not header else
                   "\n".join(lines[first - 1:last]))
        statements.append(Statement(
            id=first_id + len(statements), kind=kind, first_line=first,
            last_line=last,
            text=textwrap.dedent(segment or lines[first - 1]).strip(),
            watch=watch, comment=comment, comment_where=where,
            below=comments.join(below) if where == "trailing" else None,
            above=comments.join(above), detached=comments.join(detached),
            traceable=id(node) not in untraceable,
            tensor=verdict.always, operands=tuple(sorted(verdict.names)),
            alternatives=isinstance(getattr(node, "value", None),
                                    ast.IfExp)))
    return statements + _span_statements(
        func.body, {s.first_line for s in statements}, code, comments,
        lines, first_id + len(statements))


def _spans(nodes: list[ast.stmt]) -> Iterator[tuple[ast.stmt, int, int]]:
    """Every statement at any depth with its lines (a compound statement's
    header only; a nested ``def`` or ``class`` from its first decorator to
    its header's end), entering class bodies but not nested functions'
    bodies (those are planned as functions of their own)."""
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef)):
            first = min([node.lineno] + [d.lineno
                                         for d in node.decorator_list])
            yield node, first, max(node.lineno, node.body[0].lineno - 1)
            if isinstance(node, ast.ClassDef):
                yield from _spans(node.body)
            continue
        blocks = [getattr(node, name) for name in ("body", "orelse",
                                                   "finalbody")
                  if isinstance(getattr(node, name, None), list)]
        blocks += [inner.body for inner in (getattr(node, "handlers", [])
                                            + getattr(node, "cases", []))]
        if not blocks:
            yield node, node.lineno, _last_line(node)
            continue
        header = [getattr(expr, "end_lineno", None) or node.lineno
                  for expr in _header(node)]
        yield node, node.lineno, max([node.lineno] + header)
        for block in blocks:
            yield from _spans(block)


def _span_statements(body: list[ast.stmt], planned: set[int], code: Any,
                     comments: _Comments, lines: list[str], first_id: int
                     ) -> list[Statement]:
    """The student's statements that no plan watches, as SPAN_KIND
    statements (with their comments), numbered from ``first_id``."""
    found: list[Statement] = []
    for node, first, last in _spans(body):
        if first in planned or not code.owns(node):
            continue
        planned.add(first)
        inside = [n for n in range(first, last + 1) if n in comments.text]
        comment, where = comments.join(inside), "trailing"
        if comment is None:
            below = comments.block(range(last + 1, len(lines) + 1))
            comment, where = comments.join(below), "below"
        found.append(Statement(
            id=first_id + len(found), kind=SPAN_KIND, first_line=first,
            last_line=last,
            text=textwrap.dedent("\n".join(lines[first - 1:last])).strip(),
            watch=(), comment=comment,
            comment_where=where if comment is not None else None,
            below=None, above=None, detached=None, traceable=True))
    return found


# ---------------------------------------------------------------------------
# Tracing happens inside the sandbox (grader.worker.agent.line_tracer); its
# records come back as plain data.
# ---------------------------------------------------------------------------

def merge_records(*records: dict[str, list]) -> dict[str, list]:
    """Concatenate the executions of several tracers' records."""
    merged: dict[str, list] = {}
    for one in records:
        for key, executions in one.items():
            merged.setdefault(str(key), []).extend(executions)
    return merged
