"""The code that runs, traced back to the submission's own source (trusted).

Details: docs/internals.md, `grader.judge.attribution`.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Callable

from grader.locate.source import SourceFile, node_span
from grader.run.observe import TaskRun
from grader.worker.agent import compile_submission, make_fingerprint

if TYPE_CHECKING:
    from grader.shapes.statements import Statement

#: Code objects that are parts of a function rather than definitions.
_INNER = ("<lambda>", "<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def code_filename(source: SourceFile) -> str:
    """The file name a submission's code is compiled under, in the sandbox
    and here: its absolute path (what ``__file__`` says)."""
    return str(source.path.resolve())


@dataclass(frozen=True)
class Definition:
    """A function of the submission that ran (a method, a helper, a
    lambda), with the spans it is judged on."""

    name: str
    qualname: str
    node: ast.AST
    span: tuple[int, int]           # the function itself
    owner_span: tuple[int, int]     # its top-level class or statement
    owner: str                      # that class's (or function's) name
    method: bool                    # defined in a class body

    @property
    def function(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function node (None for a lambda)."""
        if isinstance(self.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return self.node
        return None


@dataclass
class SourceMap:
    """The trusted compile of a source: fingerprint -> definition."""

    source: SourceFile
    error: str | None = None
    by_print: dict[str, Definition] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, source: SourceFile) -> SourceMap:
        """Compile ``source`` as the agent does and index its code."""
        mapping = cls(source)
        try:
            module = compile_submission(source.text, code_filename(source))
            tree = source.parse()
            assert isinstance(module, CodeType)  # compile() gives code
        except (SyntaxError, ValueError, RecursionError,
                MemoryError) as exc:
            mapping.error = f"{type(exc).__name__}: {exc}"
            return mapping
        fingerprint = make_fingerprint()
        nodes = _definition_nodes(tree, source.lines)
        pending: list[tuple[CodeType, CodeType | None]] = [(module, None)]
        parents: dict[int, CodeType | None] = {}
        codes: list[CodeType] = []
        while pending:
            code, parent = pending.pop()
            parents[id(code)] = parent
            codes.append(code)
            pending += [(c, code) for c in code.co_consts
                        if isinstance(c, CodeType)]
        for code in codes:
            digest = fingerprint(code)
            mapping.known.add(digest)
            definition = _definition(code, parents, nodes)
            if definition is not None:
                mapping.by_print[digest] = definition
        return mapping

    def lookup(self, digest: str) -> Definition | None:
        """The definition a fingerprint belongs to (None: not this source's
        code, or code of no function, such as a class body)."""
        return self.by_print.get(digest)


def _definition_nodes(tree: ast.Module, lines: list[str]
                      ) -> dict[tuple[int, str], tuple]:
    """(first line incl. decorators, name) -> (node, top node, in class)."""
    found: dict[tuple[int, str], tuple] = {}

    def visit(node: ast.AST, top: ast.AST | None, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            owner = top if top is not None else child
            if isinstance(child, _DEFINITIONS):
                first = min([child.lineno] + [d.lineno for d in
                                              child.decorator_list])
                found[(first, child.name)] = (child, owner, in_class)
                visit(child, owner, isinstance(child, ast.ClassDef))
            elif isinstance(child, ast.Lambda):
                found.setdefault((child.lineno, "<lambda>"),
                                 (child, owner, False))
                visit(child, owner, False)
            else:
                visit(child, owner if top is not None else
                      (child if isinstance(child, ast.stmt) else None),
                      in_class)

    visit(tree, None, False)
    return found


def _definition(code: CodeType | None, parents: dict[int, CodeType | None],
                nodes: dict[tuple[int, str], tuple]) -> Definition | None:
    """The definition a code object is part of (comprehensions belong to
    their function)."""
    while code is not None and code.co_name in _INNER[1:]:
        code = parents.get(id(code))
    if code is None or code.co_name == "<module>":
        return None
    entry = nodes.get((code.co_firstlineno, code.co_name))
    if entry is None:
        return None
    node, top, in_class = entry
    if isinstance(node, ast.ClassDef):
        return None  # a class body runs once, at import
    span = node_span(node)
    owner_span = node_span(top) if top is not None else span
    owner = getattr(top, "name", code.co_name)
    return Definition(name=code.co_name, qualname=code.co_qualname,
                      node=node, span=span, owner_span=owner_span,
                      owner=owner, method=in_class)


@dataclass(frozen=True)
class Ran:
    """What of a task's code ran, traced back to the source."""

    build: tuple[Definition, ...]     # while the object was built
    call: tuple[Definition, ...]      # while it was called
    untraceable: tuple[str, ...]      # sentences about foreign code

    @property
    def all(self) -> tuple[Definition, ...]:
        """Every definition that ran, once."""
        seen: dict[int, Definition] = {}
        for definition in self.build + self.call:
            seen.setdefault(id(definition.node), definition)
        return tuple(seen.values())


def _ran_order(entry: tuple) -> tuple[int, str, str, str]:
    """A worker's ``ran`` entry's place: line, name, stage, digest."""
    digest, line, name, stage = entry
    return (line if type(line) is int else -1, str(name), str(stage),
            str(digest))


def _in_source_order(found: dict[int, Definition]
                     ) -> tuple[Definition, ...]:
    """The definitions by their place in the source (then name)."""
    return tuple(sorted(found.values(),
                        key=lambda d: (d.span, d.qualname)))


def ran(run: TaskRun, mapping: SourceMap) -> Ran:
    """The definitions that ran during a task's probes, by stage, and the
    code that ran but is not the submission's visible source."""
    build: dict[int, Definition] = {}
    call: dict[int, Definition] = {}
    foreign: list[str] = []
    for result in run.results.values():
        # The worker reports what ran from a set: read it in source
        # order, so that a report (the `outside` list, the untraceable
        # sentences) is the same in every run.
        for digest, line, name, stage in sorted(result.ran, key=_ran_order):
            definition = mapping.lookup(digest)
            if definition is None:
                if digest not in mapping.known:
                    foreign.append(f"{name} (line {line}), which is not "
                                   f"the code of the submission's file")
                continue
            target = call if stage == "call" else build
            target.setdefault(id(definition.node), definition)
        for filename, name, line, how in result.foreign:
            made = f" made at run time by {how}" if how else ""
            # No file: what the worker could not see at all (its tracer
            # removed, entries past its cap), in its own words.
            where = f" (from {filename!r}, line {line})" if filename else ""
            foreign.append(f"{name}{made}{where}")
    return Ran(build=_in_source_order(build), call=_in_source_order(call),
               untraceable=tuple(dict.fromkeys(foreign)))


# ---------------------------------------------------------------------------
# What a task's penalty and bonus items judge


def definition_key(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                   ) -> tuple[int, str]:
    """(first line, decorators included; name) of a def, as code objects
    know it (``co_firstlineno``, ``co_name``)."""
    name = getattr(node, "name", "<lambda>")
    first = min([node.lineno] + [d.lineno for d in
                                 getattr(node, "decorator_list", [])])
    return first, name


def statement_plan(source: SourceFile, stub: SourceFile | None = None
                   ) -> dict[tuple[int, str], list]:
    """Every function's statements that may need a shape comment, with ids
    unique across the source: the shape tracer's plan, so that whatever
    code runs (a helper, a swapped-in class) has its shapes recorded.

    ``stub`` is the released stub: a method it has keeps its given code
    out of the student's (:func:`grader.locate.source.student_code`).
    """
    from grader.locate.source import given_statements
    from grader.shapes.statements import function_statements

    plan: dict[tuple[int, str], list] = {}
    try:
        tree = source.parse()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return plan
    owners: dict[int, ast.ClassDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for child in node.body:
                owners[id(child)] = node
    functions = sorted((node for node in ast.walk(tree)
                        if isinstance(node, (ast.FunctionDef,
                                             ast.AsyncFunctionDef))),
                       key=lambda node: (node.lineno, node.col_offset))
    next_id = 0
    for node in functions:
        cls = owners.get(id(node))
        given = given_statements(stub, cls.name if cls else None,
                                 node.name)
        try:
            statements = function_statements(source, node, next_id, given,
                                             tree, cls)
        except (RecursionError, MemoryError):
            statements = []
        next_id += len(statements)
        plan[definition_key(node)] = statements
    return plan


def static_function(source: SourceFile, target: str,
                    method: str | None) -> ast.FunctionDef | None:
    """The graded method as written (``target.method``, or the function
    ``target`` itself), or None."""
    from grader.locate.source import find_class, find_function, find_method

    try:
        tree = source.parse()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    cls = find_class(tree, target)
    if cls is not None:
        return find_method(cls, method) if method else None
    return find_function(tree, target)


def declared_calls(source: SourceFile, target: str,
                   methods: tuple[str, ...]) -> list[list]:
    """The code keys of the target's methods named in ``methods`` (a
    task's declared ``inputs``), as ``[first line, name, index in
    methods]``: the shape tracer marks every execution inside a call of
    one with the shape of the call's first argument."""
    found = []
    for index, method in enumerate(methods):
        node = static_function(source, target, method)
        if node is not None:
            first, name = definition_key(node)
            found.append([first, name, index])
    return found


@dataclass(frozen=True)
class TaskCode:
    """What a task's pep8, shapes and bonus items and the forbidden-API
    scan judge: the graded class as written, and every definition of the
    submission that ran for the task (other graded classes' graded
    methods excepted: they are judged in their own task)."""

    spans: tuple[tuple[int, int], ...]
    statements: tuple = ()
    statement_count: int | None = None
    nodes: tuple[ast.AST, ...] = ()
    outside: tuple[str, ...] = ()     # what ran outside the graded class
    untraceable: tuple[str, ...] = ()
    #: Lambdas that ran for the graded call on lines no judged statement
    #: holds (a forward written as a lambda): no line of theirs can carry
    #: a shape comment, so the shapes item fails closed.
    unstated: tuple[str, ...] = ()


def _inside(span: tuple[int, int], outer: tuple[int, int]) -> bool:
    return outer[0] <= span[0] and span[1] <= outer[1]


def task_code(*, static_span: tuple[int, int] | None,
              static_method: ast.FunctionDef | None, stub: bool,
              executed: Ran | None, plan: dict[tuple[int, str], list],
              other_spans: dict[tuple[int, int], frozenset[int]],
              count: Callable[[ast.FunctionDef | ast.AsyncFunctionDef],
                              int],
              elsewhere: frozenset[int] = frozenset()) -> TaskCode:
    """Combine the graded class as written with the code that ran.

    ``count`` counts a function's statements (the bonus rule);
    ``other_spans`` are the other graded classes' spans, each with the
    ids of its graded methods' definition nodes (``__init__`` and the
    methods its task grades) that ran for its own task: those are judged
    there and left out here; any other code in their spans that ran for
    this task (a helper method, a static method, a nested function, a
    lambda), even if it ran for their task too, is this task's, on its
    own span, as a module-level helper is;
    ``elsewhere`` the ids of definition nodes another task judges as its
    companions (they ran for it too): they are left out of this task's
    PEP-8, shapes and bonus, but still scanned for forbidden APIs.
    """
    spans: list[tuple[int, int]] = [static_span] if static_span else []
    statements: dict[int, Statement] = {}
    nodes: list[ast.AST] = []
    if static_method is not None and not stub:
        for statement in plan.get(definition_key(static_method), []):
            statements[statement.id] = statement
    if executed is None:
        count_value = (count(static_method) if static_method is not None
                       else None)
        return TaskCode(spans=tuple(spans),
                        statements=tuple(statements.values()),
                        statement_count=count_value)
    outside: list[str] = []

    def theirs(definition: Definition) -> bool:
        return any(_inside(definition.span, o) for o in other_spans)

    def judged_there(definition: Definition) -> bool:
        return any(_inside(definition.span, span) and id(definition.node)
                   in ran for span, ran in other_spans.items())

    mine = sorted((d for d in executed.all if not judged_there(d)),
                  key=lambda d: (d.span, d.qualname))
    for definition in mine:
        nodes.append(definition.node)
        if id(definition.node) in elsewhere:
            continue
        if not (static_span and _inside(definition.owner_span, static_span)):
            spans.append(definition.span if theirs(definition)
                         else definition.owner_span)
            outside.append(f"{definition.qualname} (line "
                           f"{definition.span[0]})")
    called = [d for d in executed.call
              if d in mine and id(d.node) not in elsewhere]
    for definition in called:
        if isinstance(definition.node, (ast.FunctionDef,
                                        ast.AsyncFunctionDef)):
            for statement in plan.get(definition_key(definition.node), []):
                statements[statement.id] = statement
    # A lambda inside a statement judged here is part of that statement
    # (its value is the statement's); any other lambda that ran for the
    # call has no line a shape comment could sit on.
    judged = [(s.first_line, s.last_line) for s in statements.values()]
    unstated = [f"{d.qualname} (line {d.span[0]})" for d in called
                if d.function is None and not any(
                    _inside(d.span, lines) for lines in judged)]
    # The bonus counts the statements of what ran for forward, each once
    # (a function nested in another that ran is counted with it),
    # including code another task judges (another graded class's method,
    # a companion helper): left out of this task's penalties so that
    # nothing is charged twice, it still makes forward no shorter.
    ran_for_call = [d for d in executed.call if d in mine or judged_there(d)]
    outermost = [d for d in ran_for_call if not any(
        o is not d and _inside(d.span, o.span) for o in ran_for_call)]
    count_value = None
    if outermost:
        count_value = sum(count(d.function) if d.function is not None else 1
                          for d in outermost)
    elif static_method is not None:
        count_value = count(static_method)
    return TaskCode(spans=tuple(dict.fromkeys(spans)),
                    statements=tuple(sorted(statements.values(),
                                            key=lambda s: s.id)),
                    statement_count=count_value, nodes=tuple(nodes),
                    outside=tuple(dict.fromkeys(outside)),
                    untraceable=executed.untraceable,
                    unstated=tuple(dict.fromkeys(unstated)))
