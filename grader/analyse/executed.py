"""What a graded function executes, read statically: its own statements
with the calls of the file's own helpers inlined (module-level functions
and lambdas, methods of the same class, classes of the file and their
``__init__``/``forward``), as normalised token units, one per statement.

Trusted side: the text is parsed, never run. Used by ``python -m grader
similarity``; details: docs/internals.md, `grader.analyse.executed`.
"""
from __future__ import annotations

import ast
import builtins
import copy
import io
import re
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from grader.analyse.synonyms import canonical, counter_loops, if_test

#: How deep helpers are inlined into helpers.
MAX_DEPTH = 4
#: At most this many units per graded function, tokens per unit.
MAX_UNITS = 600
MAX_TOKENS = 400
#: An argument is copied into a helper's body (instead of bound to a
#: local) when the parameter is read once, or up to this many times when
#: the argument is this small (syntax nodes).
SMALL_ARGUMENT = 30
MAX_COPIES = 3

#: The placeholders: a local name, a module-level name that is no import
#: nor inlined helper, an attribute the student chose (``self.A``), a
#: long string. Parameters of a graded function are ``P1``, ``P2``...
LOCAL, GLOBAL, ATTRIBUTE, STRING = "V", "G", "A", "'S'"
#: Locals of an inlined helper are renamed to this prefix first, so that
#: they never take the name of a caller's parameter.
_HELPER_LOCAL = "_inlined_local_"
_BUILTINS = frozenset(dir(builtins))
#: The names that stand for a compound statement's keyword.
_KEYWORDS = frozenset({"if", "while", "for"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Unit:
    """One statement as executed: its normalised tokens and the source
    lines it came from (the caller's and those of the helpers inlined
    into it); with the temporaries it reads put in place, and ``parts``,
    the statements it was made of (tokens and lines of each)."""

    tokens: tuple[str, ...]
    lines: frozenset[int]
    parts: tuple[tuple[tuple[str, ...], frozenset[int]], ...] = ()


@dataclass
class FileScope:
    """What a file defines at module level (the last definition of a name
    counts, as when the file runs), its imports and the names nothing may
    normalise away (``keep``: the stub's vocabulary)."""

    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    lambdas: dict[str, ast.Lambda]
    classes: dict[str, ast.ClassDef]
    imports: dict[str, str]
    other_globals: set[str]
    keep: frozenset[str]
    # Targets compared in their own right, and the (class, method) pairs
    # compared as such: never inlined into another.
    graded: frozenset[str] = frozenset()
    graded_methods: frozenset[tuple[str, str]] = frozenset()
    # Module-level names that hold an instance of a class of the file.
    instances: dict[str, ast.ClassDef] = field(default_factory=dict)
    # What each class binds to its names (:func:`class_namespaces`).
    namespaces: dict[int, dict[str, ast.AST | None]] = field(
        default_factory=dict)


def file_scope(tree: ast.Module, keep: frozenset[str],
               graded: frozenset[str],
               graded_methods: frozenset[tuple[str, str]]) -> FileScope:
    """The module-level definitions and imports of ``tree``."""
    scope = FileScope({}, {}, {}, {}, set(), keep, graded, graded_methods)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    scope.imports[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    scope.imports[top] = top
        elif isinstance(node, ast.ImportFrom):
            module = node.module if not node.level and node.module else None
            for alias in node.names:
                name = alias.asname or alias.name
                scope.imports[name] = (f"{module}.{alias.name}" if module
                                       else GLOBAL)
    for node in tree.body:
        _define(scope, node)
    scope.namespaces = class_namespaces(tree)
    return scope


def _define(scope: FileScope, node: ast.stmt) -> None:
    for table in (scope.functions, scope.lambdas, scope.classes,
                  scope.instances):
        for name in _bound_names(node):
            table.pop(name, None)
    if isinstance(node, _FUNCTIONS):
        scope.functions[node.name] = node
    elif isinstance(node, ast.ClassDef):
        scope.classes[node.name] = node
    elif (isinstance(node, ast.Assign) and len(node.targets) == 1
          and isinstance(node.targets[0], ast.Name)
          and isinstance(node.value, ast.Lambda)):
        scope.lambdas[node.targets[0].id] = node.value
    elif (isinstance(node, ast.Assign) and len(node.targets) == 1
          and isinstance(node.targets[0], ast.Name)
          and _constructed(node.value, scope) is not None):
        scope.instances[node.targets[0].id] = scope.classes[
            node.value.func.id]  # type: ignore[attr-defined]
        scope.other_globals.add(node.targets[0].id)
    else:
        scope.other_globals.update(_bound_names(node))


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, _DEFINITIONS):
        return [node.name]
    return [n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def class_namespaces(tree: ast.Module
                     ) -> dict[int, dict[str, ast.AST | None]]:
    """What each top-level class of ``tree`` (by ``id``) holds under each
    name once the module has run, read through plain names: a ``def`` of
    its body, or the function a plain name (``forward = _forward``) or a
    class of the file's attribute (``forward = Other.forward``) stands
    for where the class body binds it or the module does after the class
    (``Class.forward = f``), module-level aliases (``f = g``) followed as
    they stand when the binding runs; None for a name bound to anything
    else (a call, a lambda)."""
    env: dict[str, ast.AST | None] = {}
    classes: dict[str, ast.ClassDef] = {}
    found: dict[int, dict[str, ast.AST | None]] = {}

    def resolve(value: ast.expr | None,
                local: dict[str, ast.AST | None]) -> ast.AST | None:
        if isinstance(value, ast.Name):
            return (local if value.id in local else env).get(value.id)
        if (isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id not in local
                and value.value.id in classes):
            return found[id(classes[value.value.id])].get(value.attr)
        return None

    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            local: dict[str, ast.AST | None] = {}
            for item in node.body:
                _bind(item, local, resolve(_binding(item)[1], local))
            found[id(node)] = local
        targets, value = _binding(node)
        for target in targets:
            if (isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in classes):
                found[id(classes[target.value.id])][target.attr] = resolve(
                    value, {})
        _bind(node, env, resolve(value, {}))
        for name in _bound_names(node):
            classes.pop(name, None)
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
    return found


def _binding(node: ast.stmt) -> tuple[list[ast.expr], ast.expr | None]:
    """The targets and the value of an assignment (none for any other
    statement)."""
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [node.target], node.value
    return [], None


def _bind(node: ast.stmt, table: dict[str, ast.AST | None],
          resolved: ast.AST | None) -> None:
    """Record in ``table`` what ``node`` binds: a function to its name,
    the function its value stands for (``resolved``) to the plain names
    it assigns, None to every other name it binds."""
    if isinstance(node, _FUNCTIONS):
        table[node.name] = node
        return
    names = _bound_names(node)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [alias.asname or alias.name.split(".")[0]
                 for alias in node.names]
    for name in names:
        table[name] = None
    for target in _binding(node)[0]:
        if isinstance(target, ast.Name):
            table[target.id] = resolved


def bound_method(cls: ast.ClassDef, name: str,
                 namespaces: dict[int, dict[str, ast.AST | None]]
                 ) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function ``cls`` holds as method ``name`` (see
    :func:`class_namespaces`); where no plain name says which, the last
    ``def`` of that name in its body."""
    found = namespaces.get(id(cls), {}).get(name)
    if isinstance(found, _FUNCTIONS):
        return found
    for node in cls.body:
        if isinstance(node, _FUNCTIONS) and node.name == name:
            found = node
    return found if isinstance(found, _FUNCTIONS) else None


def _outside_methods(cls: ast.ClassDef,
                     namespaces: dict[int, dict[str, ast.AST | None]]
                     ) -> list[ast.AST]:
    """The functions ``cls`` holds as methods that are not in its body."""
    inside = {id(node) for node in cls.body}
    found = {id(f): f for f in namespaces.get(id(cls), {}).values()
             if f is not None and id(f) not in inside}
    return list(found.values())


def canonical_tree(tree: ast.Module) -> ast.Module:
    """``tree``, or a copy of it in which every method's first parameter
    (the instance, however the student named it) is called ``self``, the
    module-level functions a class holds as methods included: the
    classes and functions that need it are copied, the rest is shared,
    never changed."""
    methods = {id(f) for namespace in class_namespaces(tree).values()
               for f in namespace.values() if f is not None}
    body = [_canonical_class(node) if isinstance(node, ast.ClassDef)
            else _canonical_method(node) if id(node) in methods
            else node for node in tree.body]
    if all(new is old for new, old in zip(body, tree.body)):
        return tree
    return ast.Module(body=body, type_ignores=tree.type_ignores)


def _renamed_instance(method: ast.AST) -> str | None:
    if not isinstance(method, _FUNCTIONS) or _is_static(method):
        return None
    params = method.args.posonlyargs + method.args.args
    return params[0].arg if params and params[0].arg != "self" else None


def _canonical_class(cls: ast.ClassDef) -> ast.ClassDef:
    if not any(_renamed_instance(method) for method in cls.body):
        return cls
    cls = copy.deepcopy(cls)
    for method in cls.body:
        _rename_instance(method)
    return cls


def _canonical_method(func: ast.stmt) -> ast.stmt:
    """A module-level function a class holds as a method, its instance
    called ``self`` (a copy, when it needs one)."""
    if _renamed_instance(func) is None:
        return func
    func = copy.deepcopy(func)
    _rename_instance(func)
    return func


def _rename_instance(method: ast.AST) -> None:
    old = _renamed_instance(method)
    if old is None:
        return
    for node in ast.walk(method):
        if isinstance(node, ast.arg) and node.arg == old:
            node.arg = "self"
        elif isinstance(node, ast.Name) and node.id == old:
            node.id = "self"


def stub_vocabulary(text: str) -> frozenset[str]:
    """The names a stub fixes: every identifier of its code and every
    ````literal```` of its docstrings and comments."""
    names: set[str] = set()
    try:
        names.update(n.id for n in ast.walk(ast.parse(text))
                     if isinstance(n, ast.Name))
        names.update(n.attr for n in ast.walk(ast.parse(text))
                     if isinstance(n, ast.Attribute))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    names.update(re.findall(r"``([A-Za-z_]\w*)", text))
    return frozenset(names)


# --------------------------------------------------------------------------
# One function's scope: who is a parameter, a local, a helper


@dataclass
class _Frame:
    """The function being expanded: its class (for ``self.m()``), its
    local helpers (nested ``def`` and lambdas) and the instance
    attributes that hold one of the file's classes."""

    owner: ast.ClassDef | None
    local_helpers: dict[str, ast.AST] = field(default_factory=dict)
    members: dict[str, ast.ClassDef] = field(default_factory=dict)
    stack: tuple[int, ...] = ()
    # Locals that hold an instance of a class of the file; attributes of
    # ``self`` that hold a lambda or function of the file.
    instances: dict[str, ast.ClassDef] = field(default_factory=dict)
    bound: dict[str, ast.AST] = field(default_factory=dict)
    depth: int = 0


def _frame(owner: ast.ClassDef | None, func: ast.AST, scope: FileScope,
           stack: tuple[int, ...], depth: int) -> _Frame:
    """The frame of ``func`` (a method of ``owner``, or a function)."""
    frame = _Frame(owner, _local_helpers(func), stack=stack, depth=depth)
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            cls = _constructed(node.value, scope)
            if cls is not None:
                frame.instances[node.targets[0].id] = cls
    for node in (n for part in _class_parts(owner, scope)
                 for n in ast.walk(part)):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not (isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"):
            continue
        cls = _constructed(value, scope)
        if cls is not None:
            frame.members[target.attr] = cls
        elif isinstance(value, ast.Lambda):
            frame.bound[target.attr] = value
        elif isinstance(value, ast.Name) and value.id in scope.functions:
            frame.bound[target.attr] = scope.functions[value.id]
    return frame


def _class_parts(owner: ast.ClassDef | None,
                 scope: FileScope) -> list[ast.AST]:
    """A class and the functions outside it that it holds as methods."""
    if owner is None:
        return []
    return [owner, *_outside_methods(owner, scope.namespaces)]


def _constructed(value: ast.expr, scope: FileScope) -> ast.ClassDef | None:
    """The class of the file (not graded on its own) ``value`` builds."""
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in scope.classes
            and value.func.id not in scope.graded):
        return scope.classes[value.func.id]
    return None


def _local_helpers(func: ast.AST) -> dict[str, ast.AST]:
    """Nested ``def`` and ``name = lambda ...`` of a function's body."""
    found: dict[str, ast.AST] = {}
    if not isinstance(func, _FUNCTIONS):
        return found
    for node in func.body:
        if isinstance(node, _FUNCTIONS):
            found[node.name] = node
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.Lambda)):
            found[node.targets[0].id] = node.value
    return found


def _method(cls: ast.ClassDef, name: str, scope: FileScope,
            seen: frozenset[str] = frozenset()) -> ast.AST | None:
    """The method ``name`` of ``cls`` (:func:`bound_method`) or, when it
    has none, of its bases that are classes of the file."""
    classes = scope.classes
    found: ast.AST | None = bound_method(cls, name, scope.namespaces)
    if found is not None or len(seen) >= MAX_DEPTH:
        return found
    for base in cls.bases:
        if (isinstance(base, ast.Name) and base.id in classes
                and base.id not in seen | {cls.name}):
            inherited = _method(classes[base.id], name, scope,
                                seen | {cls.name})
            if inherited is not None:
                return inherited
    return None


def _is_static(func: ast.AST) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod"
               for d in getattr(func, "decorator_list", []))


# --------------------------------------------------------------------------
# Inlining


@dataclass
class _Call:
    """A resolved helper call: the helper (a function or a lambda), the
    expression bound to its first parameter when it is a method, and the
    class whose methods ``self.m()`` reaches inside it."""

    helper: ast.AST
    receiver: ast.expr | None
    owner: ast.ClassDef | None


class Expander:
    """Expands the statements of graded functions of one file."""

    def __init__(self, scope: FileScope,
                 owns: Callable[[ast.AST, ast.stmt], bool]) -> None:
        """``owns(function, statement)`` says whether a statement of a
        function is the student's (given code is nobody's)."""
        self.scope = scope
        self.owns = owns
        self.chosen: set[str] | None = None
        # The names the given code (statements not the student's) of the
        # function being expanded reads: what it reads is never dead.
        self.given_reads: set[str] = set()

    def units(self, func: ast.FunctionDef | ast.AsyncFunctionDef,
              owner: ast.ClassDef | None) -> list[Unit]:
        """The units ``func`` executes, its parameters numbered."""
        frame = _frame(owner, func, self.scope, (id(func),), 0)
        raw: list[tuple[ast.stmt | list[str], set[int]]] = []
        self.given_reads = set()
        self._block(func, func.body, frame, raw, owned_only=True)
        params = [a.arg for a in func.args.posonlyargs + func.args.args
                  + func.args.kwonlyargs]
        positions = {name: f"P{i}" for i, name in enumerate(params)
                     if not (i == 0 and owner is not None)}
        if func.args.vararg:
            positions[func.args.vararg.arg] = "P*"
        if func.args.kwarg:
            positions[func.args.kwarg.arg] = "P**"
        members = self._attributes()
        raw = _split_tuples(_propagate_aliases(
            _without_dead(raw, self.given_reads),
            set(positions) | {"self"}))[:MAX_UNITS]

        def tokens_of(node: ast.stmt | list[str]) -> tuple[str, ...]:
            return (tuple(node) if isinstance(node, list)
                    else self._tokens(node, positions, members))

        parts = [(tokens_of(node)[:MAX_TOKENS], frozenset(lines))
                 for node, lines in raw]
        found = []
        for node, lines, made_of in _merge_temporaries(raw):
            tokens = tokens_of(node)
            if tokens:
                found.append(Unit(tokens[:MAX_TOKENS], frozenset(lines),
                                  tuple(parts[i] for i in made_of
                                        if parts[i][0])))
        return found

    # -- statements

    def _block(self, func: ast.AST, body: list[ast.stmt], frame: _Frame,
               out: list, owned_only: bool) -> None:
        # A counter loop reads as the ``for`` it spells; whose code it is
        # is judged on the statement written.
        for node, written in counter_loops(body):
            if len(out) >= MAX_UNITS:
                return
            if _inert(node) or isinstance(node, (ast.Import, ast.ImportFrom,
                                                 ast.Global, ast.Nonlocal)):
                continue
            if isinstance(node, _DEFINITIONS) or _lambda_binding(node):
                continue  # a local helper: inlined where it is called
            live = _live_branch(node)
            if live is not None:
                # A test or a loop that decides nothing (``if False:``,
                # ``for _ in range(0):``): only what runs is compared.
                self._block(func, live, frame, out, owned_only)
                continue
            mine = not owned_only or self.owns(func, written)
            blocks = _blocks(node)
            if blocks:
                header = _header(node)
                if mine and header is not None:
                    self._statement(header, node, frame, out)
                elif header is not None:
                    self.given_reads.update(_loads(header))
                for block in blocks:
                    self._block(func, block, frame, out, owned_only)
            elif mine:
                self._statement(node, node, frame, out)
            else:
                self.given_reads.update(_loads(node))

    def _statement(self, node: ast.stmt, where: ast.stmt, frame: _Frame,
                   out: list) -> None:
        lines = set(range(where.lineno, (where.end_lineno or where.lineno)
                          + 1))
        if isinstance(node, list):
            out.append((node, lines))
            return
        work = copy.deepcopy(node)
        if isinstance(work, ast.AugAssign):
            work = ast.Assign(targets=[_load_copy(work.target)],
                              value=ast.BinOp(_load_copy(work.target),
                                              work.op, work.value))
        elif isinstance(work, ast.AnnAssign):
            if work.value is None:
                return
            work = ast.Assign(targets=[work.target], value=work.value)
        before: list = []
        work = _Inliner(self, frame, before, lines).visit(work)
        out.extend(before)
        out.append((work, lines))

    # -- helpers

    def resolve(self, call: ast.Call, frame: _Frame) -> _Call | None:
        """The helper a call reaches, or None (a library call)."""
        func = call.func
        if isinstance(func, ast.Name):
            return self._by_name(func.id, frame)
        if not isinstance(func, ast.Attribute):
            return None
        base, scope = func.value, self.scope
        if isinstance(base, ast.Name) and base.id == "self":
            if func.attr in frame.bound:
                return _Call(frame.bound[func.attr], None, frame.owner)
            if frame.owner is None:
                return None
            method = _method(frame.owner, func.attr, scope)
            if method is None or self._graded_method(frame.owner, func.attr):
                return None
            return _Call(method, None if _is_static(method)
                         else ast.Name("self", ast.Load()), frame.owner)
        cls, receiver = self._class_of(base, frame)
        if cls is not None:
            method = _method(cls, func.attr, scope)
            if method is not None and not self._graded_method(
                    cls, func.attr):
                return _Call(method, None if _is_static(method)
                             else receiver, cls)
        return None

    def _by_name(self, name: str, frame: _Frame) -> _Call | None:
        """``helper(...)``: a local helper, a function, lambda or class
        of the file (its ``__init__``)."""
        scope = self.scope
        if name in frame.local_helpers:
            return _Call(frame.local_helpers[name], None, frame.owner)
        if name in scope.graded:
            return None
        if name in scope.functions:
            return _Call(scope.functions[name], None, None)
        if name in scope.lambdas:
            return _Call(scope.lambdas[name], None, None)
        if name in scope.classes:
            cls = scope.classes[name]
            init = _method(cls, "__init__", scope)
            return (_Call(init, ast.Name("self", ast.Load()), cls)
                    if init is not None else None)
        return None

    def _class_of(self, base: ast.expr, frame: _Frame
                  ) -> tuple[ast.ClassDef | None, ast.expr | None]:
        """The class of the file whose method ``base.m(...)`` calls, and
        the instance: ``Ops.m``, ``Ops().m``, ``ops.m`` (``ops = Ops()``
        in the function or at module level), ``self.part.m``."""
        classes = self.scope.classes
        if isinstance(base, ast.Name):
            if base.id in classes:
                return classes[base.id], None
            held = frame.instances.get(base.id) or self.scope.instances.get(
                base.id)
            return held, base
        if (isinstance(base, ast.Call) and isinstance(base.func, ast.Name)
                and base.func.id in classes):
            return classes[base.func.id], ast.Name(LOCAL, ast.Load())
        if (isinstance(base, ast.Attribute)
                and isinstance(base.value, ast.Name)
                and base.value.id == "self" and base.attr in frame.members):
            return frame.members[base.attr], ast.Name("self", ast.Load())
        return None, None

    def member_call(self, call: ast.Call, frame: _Frame) -> _Call | None:
        """``self.part(...)`` where ``self.part`` holds a class of the
        file: its ``forward`` (or ``__call__``)."""
        func = call.func
        if (isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "self" and func.attr in frame.members
                and (frame.owner is None
                     or _method(frame.owner, func.attr,
                                self.scope) is None)):
            return self._member_call(frame.members[func.attr])
        return None

    def _member_call(self, cls: ast.ClassDef) -> _Call | None:
        method = (_method(cls, "forward", self.scope)
                  or _method(cls, "__call__", self.scope))
        if method is None:
            return None
        return _Call(method, ast.Name("self", ast.Load()), cls)

    def _graded_method(self, owner: ast.ClassDef, name: str) -> bool:
        return (owner.name, name) in self.scope.graded_methods

    def _attributes(self) -> set[str]:
        """The attributes the student sets on ``self`` anywhere in the
        file's classes, that the stub does not name: renamable, so
        normalised (found once per file)."""
        if self.chosen is None:
            self.chosen = {
                node.attr for cls in self.scope.classes.values()
                for part in _class_parts(cls, self.scope)
                for node in ast.walk(part)
                if isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"} - self.scope.keep
        return self.chosen

    # -- normalisation

    def _tokens(self, node: ast.stmt, positions: dict[str, str],
                members: set[str]) -> tuple[str, ...]:
        normal = _Normaliser(self.scope, positions, members).visit(
            copy.deepcopy(node))
        try:
            # One spelling per operation, then strings to placeholders
            # (an einsum's pattern is read first).
            normal = _Strings().visit(canonical(normal, frozenset(
                self.scope.imports.values())))
            text = ast.unparse(ast.fix_missing_locations(normal))
        except (ValueError, TypeError, AttributeError, RecursionError):
            return ()
        return tuple(_lex(text))


class _Inliner(ast.NodeTransformer):
    """Replaces each helper call of a statement by the helper's returned
    expression; the helper's other statements go to ``before``."""

    def __init__(self, expander: Expander, frame: _Frame, before: list,
                 lines: set[int]) -> None:
        self.expander = expander
        self.frame = frame
        self.before = before
        self.lines = lines

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node  # a lambda's body runs when it is called, not here

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        frame = self.frame
        if frame.depth >= MAX_DEPTH:
            return node
        found = (self.expander.member_call(node, frame)
                 or self.expander.resolve(node, frame))
        if found is None or id(found.helper) in frame.stack:
            return node
        return self._inline(node, found)

    def _inline(self, call: ast.Call, found: _Call) -> ast.AST:
        helper = found.helper
        arguments = helper.args  # type: ignore[attr-defined]
        params = [a.arg for a in arguments.posonlyargs + arguments.args]
        given = list(call.args)
        if found.receiver is not None and params:
            given.insert(0, found.receiver)
        binding: dict[str, ast.expr] = {}
        defaults = list(arguments.defaults)
        first_default = len(params) - len(defaults)
        for index, name in enumerate(params):
            if index < len(given) and not isinstance(given[index],
                                                     ast.Starred):
                binding[name] = given[index]
            elif index >= first_default:
                binding[name] = defaults[index - first_default]
        for keyword in call.keywords:
            if keyword.arg is not None and keyword.arg in params:
                binding[keyword.arg] = keyword.value
        for kwonly, default in zip(arguments.kwonlyargs,
                                   arguments.kw_defaults):
            value = next((k.value for k in call.keywords
                          if k.arg == kwonly.arg), default)
            if value is not None:
                binding[kwonly.arg] = value
        if isinstance(helper, ast.Lambda):
            body: list[ast.stmt] = [ast.Return(helper.body,
                                               lineno=helper.lineno,
                                               end_lineno=helper.end_lineno)]
        else:
            body = [n for n in helper.body  # type: ignore[attr-defined]
                    if not _inert(n)]
        body = _rename_locals(body, params, self.expander.scope,
                              self.frame.local_helpers)
        stored = {n.id for s in body for n in ast.walk(s)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        copies: dict[str, ast.expr] = {}
        early: dict[str, tuple[int, ast.expr]] = {}
        for name, value in binding.items():
            until = _first_store(body, name) if name in stored else len(body)
            reads = _reads(body, name, until)
            small = sum(1 for _ in ast.walk(value)) <= SMALL_ARGUMENT
            copied = (reads <= 1 or _plain(value)
                      or (small and reads <= MAX_COPIES))
            if copied and name not in stored:
                copies[name] = value
            elif copied and until < len(body):
                # ``t = t.view(...)``: the argument is read until the
                # parameter is first assigned, a local after.
                early[name] = (until, value)
            else:
                self.before.append((ast.Assign(
                    targets=[ast.Name(_HELPER_LOCAL + name, ast.Store())],
                    value=copy.deepcopy(value)), set(self.lines)))
        body = [_substituted(s, index, copies, early, params)
                for index, s in enumerate(body)]
        inner = _frame(found.owner, helper, self.expander.scope,
                       self.frame.stack + (id(helper),),
                       self.frame.depth + 1)
        result: ast.expr = ast.Name(LOCAL, ast.Load())
        last = body[-1] if body else None
        if isinstance(last, ast.Return):
            body.pop()
            if last.value is not None:
                before: list = []
                result = _Inliner(self.expander, inner, before,
                                  self.lines).visit(last.value)
                self.lines.update(_span(last))
                body_units: list = []
                self.expander._block(helper, body, inner, body_units,
                                     owned_only=False)
                self.before.extend(body_units)
                self.before.extend(before)
                return result
        body_units = []
        self.expander._block(helper, body, inner, body_units,
                             owned_only=False)
        self.before.extend(body_units)
        return result


def _plain(value: ast.expr) -> bool:
    """A name or an attribute of one (``self``, ``self.width``): copied
    wherever it is read, at no cost."""
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Name)


def _first_store(body: list[ast.stmt], name: str) -> int:
    """The index of the first statement of ``body`` that assigns ``name``
    by a plain assignment (``len(body)`` when another kind of statement
    assigns it first: then it is bound, never copied)."""
    for index, node in enumerate(body):
        if any(isinstance(n, ast.Name) and n.id == name
               and isinstance(n.ctx, ast.Store) for n in ast.walk(node)):
            return index if isinstance(node, ast.Assign) else len(body)
    return len(body)


def _reads(body: list[ast.stmt], name: str, until: int) -> int:
    """How often ``name`` is read in ``body[:until]`` and in the value of
    ``body[until]``."""
    nodes: list[ast.AST] = list(body[:until])
    if until < len(body):
        nodes.append(body[until].value)  # type: ignore[attr-defined]
    return sum(1 for node in nodes for n in ast.walk(node)
               if isinstance(n, ast.Name) and n.id == name
               and isinstance(n.ctx, ast.Load))


def _substituted(node: ast.stmt, index: int, copies: dict[str, ast.expr],
                 early: dict[str, tuple[int, ast.expr]],
                 params: list[str]) -> ast.stmt:
    """Statement ``index`` of an inlined body with the arguments put in."""
    work = copy.deepcopy(node)
    live = dict(copies)
    live.update({name: value for name, (until, value) in early.items()
                 if index < until})
    last = {name: value for name, (until, value) in early.items()
            if index == until}
    if last:
        work.value = _Substitute(last, []).visit(  # type: ignore
            work.value)  # type: ignore[attr-defined]
    return _Substitute(live, params).visit(work)


class _Substitute(ast.NodeTransformer):
    """Replaces reads of a helper's parameters by the caller's
    arguments; the other parameters become the helper's locals."""

    def __init__(self, copies: dict[str, ast.expr],
                 params: list[str]) -> None:
        self.copies = copies
        self.params = set(params)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.copies and isinstance(node.ctx, ast.Load):
            return copy.deepcopy(self.copies[node.id])
        if node.id in self.params:
            return ast.Name(_HELPER_LOCAL + node.id, node.ctx)
        return node


def _rename_locals(body: list[ast.stmt], params: list[str],
                   scope: FileScope,
                   helpers: dict[str, ast.AST]) -> list[ast.stmt]:
    """A helper's own locals, renamed so that none is taken for a name of
    its caller."""
    stored = {n.id for s in body for n in ast.walk(s)
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    renamed = stored - set(params)
    if not renamed:
        return body

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in renamed:
                return ast.copy_location(
                    ast.Name(_HELPER_LOCAL + node.id, node.ctx), node)
            return node

    return [Rename().visit(copy.deepcopy(s)) for s in body]


class _Normaliser(ast.NodeTransformer):
    """Names to placeholders, imports to the module they name, keyword
    arguments sorted."""

    def __init__(self, scope: FileScope, positions: dict[str, str],
                 members: set[str]) -> None:
        self.scope = scope
        self.positions = positions
        self.members = members

    def visit_Name(self, node: ast.Name) -> ast.AST:
        name, scope = node.id, self.scope
        if name.startswith(_HELPER_LOCAL):
            new = LOCAL
        elif name in self.positions:
            new = self.positions[name]
        elif name in ("self", LOCAL, STRING) or name in _KEYWORDS:
            new = name
        elif name in scope.imports:
            new = scope.imports[name]
        elif name in scope.functions or name in scope.classes or \
                name in scope.lambdas or name in scope.other_globals:
            new = name if name in scope.keep else GLOBAL
        elif name in _BUILTINS:
            new = name
        else:
            new = LOCAL
        return ast.copy_location(ast.Name(new, node.ctx), node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if (isinstance(node.value, ast.Name) and node.value.id == "self"
                and node.attr in self.members):
            node.attr = ATTRIBUTE
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        node.keywords.sort(key=lambda k: k.arg or "")
        return node


class _Strings(ast.NodeTransformer):
    """Long strings and f-strings to one token."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and len(node.value) > 12:
            return ast.copy_location(ast.Name(STRING, ast.Load()), node)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return ast.copy_location(ast.Name(STRING, ast.Load()), node)


def _simple(value: ast.expr, roots: set[str]) -> bool:
    """A constant, or a name of ``roots`` and attributes of it
    (``self.width``), or a tuple of those: what an alias may stand
    for."""
    if isinstance(value, ast.Tuple):
        return all(_simple(v, roots) for v in value.elts)
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Constant) or (
        isinstance(value, ast.Name) and value.id in roots)


def _aliases(node: object, roots: set[str]) -> dict[str, ast.expr]:
    """``n = self.width`` or ``n, d = self.a, self.b``: name -> value."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
        return {}
    target, value = node.targets[0], node.value
    pairs = [(target, value)]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
            and len(target.elts) == len(value.elts):
        pairs = list(zip(target.elts, value.elts))
    if all(isinstance(t, ast.Name) and t.id not in roots
           and _simple(v, roots) for t, v in pairs):
        return {t.id: v for t, v in pairs}  # type: ignore[attr-defined]
    return {}


def _propagate_aliases(raw: list, roots: set[str]) -> list:
    """Copy propagation: a local assigned once, from a constant or an
    attribute of ``self`` or of a parameter, is read as that value (so
    ``n = self.width; t.view(n)`` reads as ``t.view(self.width)``)."""
    stores: dict[str, int] = {}
    for node, _ in raw:
        if isinstance(node, ast.AST):
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    stores[n.id] = stores.get(n.id, 0) + 1
    found: dict[str, ast.expr] = {}
    dropped = set()
    for index, (node, _) in enumerate(raw):
        aliases = _aliases(node, roots)
        if aliases and all(stores.get(name) == 1 for name in aliases):
            found.update(aliases)
            dropped.add(index)
    if not found:
        return raw
    substitute = _Substitute(found, [])
    return [(node if not isinstance(node, ast.AST)
             else substitute.visit(node), lines)
            for index, (node, lines) in enumerate(raw)
            if index not in dropped]


def _loads(node: ast.AST) -> set[str]:
    """The names ``node`` reads."""
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _without_dead(raw: list, given: set[str]) -> list:
    """The statements without those that change nothing the method
    computes, until none is left: an ``assert``; an expression statement
    that calls nothing (a name, an attribute or a constant read alone);
    an assignment to local names none of which a statement reads (nor
    the given code: ``given``), whose value calls no in-place method
    (``add_``). A copy padded with them, or whose pads read each
    temporary a second time, compares as the code it copied."""
    work = list(raw)
    while True:
        read = set(given)
        for node, _ in work:
            if isinstance(node, ast.AST):
                read |= _loads(node)
        kept = [(node, lines) for node, lines in work
                if not _dead(node, read)]
        if len(kept) == len(work):
            return kept
        work = kept


def _dead(node: object, read: set[str]) -> bool:
    """Whether ``node`` changes nothing computed (see _without_dead)."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Expr):
        return not any(isinstance(n, (ast.Call, ast.Await, ast.Yield,
                                      ast.YieldFrom, ast.NamedExpr))
                       for n in ast.walk(node.value))
    if not isinstance(node, ast.Assign) or _header_value(node.value):
        return False
    names = []
    for target in node.targets:
        elements = (target.elts if isinstance(target, (ast.Tuple, ast.List))
                    else [target])
        for element in elements:
            if isinstance(element, ast.Starred):
                element = element.value
            if not isinstance(element, ast.Name):
                return False  # an attribute or an item: state changes
            names.append(element.id)
    in_place = any(isinstance(n, ast.Attribute) and n.attr.endswith("_")
                   and not n.attr.startswith("_")
                   for n in ast.walk(node.value))
    binds = any(isinstance(n, ast.NamedExpr) for n in ast.walk(node.value))
    return not (in_place or binds or any(name in read for name in names))


def _header_value(value: ast.expr) -> bool:
    """A compound statement's header as :func:`_header` writes it."""
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in _KEYWORDS)


def _live_branch(node: ast.stmt) -> list[ast.stmt] | None:
    """What runs of a statement whose test or loop decides nothing: the
    branch a constant test takes, or a loop's ``else`` when it never
    runs (``for _ in range(0)``, ``while False``, over ``()`` or
    ``[]``); None for any other statement."""
    if isinstance(node, ast.If) and isinstance(node.test, ast.Constant):
        return node.body if node.test.value else node.orelse
    if isinstance(node, ast.While) and isinstance(node.test, ast.Constant) \
            and not node.test.value:
        return node.orelse
    if isinstance(node, ast.For) and _empty(node.iter):
        return node.orelse
    return None


def _empty(iterable: ast.expr) -> bool:
    """An iterable that is empty whatever runs: ``()``, ``[]``, or
    ``range`` of constants that gives nothing."""
    if isinstance(iterable, (ast.Tuple, ast.List)):
        return not iterable.elts
    if not isinstance(iterable, ast.Call) or iterable.keywords or not (
            isinstance(iterable.func, ast.Name)
            and iterable.func.id == "range"
            and 1 <= len(iterable.args) <= 3):
        return False
    values = [a.value for a in iterable.args
              if isinstance(a, ast.Constant) and type(a.value) is int]
    if len(values) != len(iterable.args):
        return False  # a size known only at run time
    if len(values) == 3 and values[2] == 0:
        return False  # range() refuses a zero step: it raises
    return len(range(*values)) == 0


def _split_tuples(raw: list) -> list:
    """``a, b = f(x), g(x)`` as ``a = f(x)`` and ``b = g(x)`` (when no
    value reads a name the statement assigns)."""
    found = []
    for node, lines in raw:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Tuple)
                and isinstance(node.value, ast.Tuple)
                and len(node.targets[0].elts) == len(node.value.elts)
                and all(isinstance(t, ast.Name)
                        for t in node.targets[0].elts)):
            names = {t.id for t in node.targets[0].elts}  # type: ignore
            if not any(isinstance(n, ast.Name) and n.id in names
                       for n in ast.walk(node.value)):
                found += [(ast.Assign(targets=[t], value=v), lines)
                          for t, v in zip(node.targets[0].elts,
                                          node.value.elts)]
                continue
        found.append((node, lines))
    return found


def _defined(node: object) -> str | None:
    """The name a plain ``name = value`` statement assigns."""
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and not _header_value(node.value)):
        return node.targets[0].id
    return None


def _merge_temporaries(raw: list) -> list[tuple[Any, set[int], list[int]]]:
    """A value assigned to a name and read once, by a later statement, is
    put where it is read (so splitting an expression into temporaries, or
    joining them, changes nothing compared)."""
    current: dict[str, int] = {}
    reads: dict[int, list[int]] = {}
    for index, (node, _) in enumerate(raw):
        if not isinstance(node, ast.AST):
            continue
        for n in ast.walk(node):
            if (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                    and n.id in current):
                reads.setdefault(current[n.id], []).append(index)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                current.pop(n.id, None)
        name = _defined(node)
        if name is not None:
            current[name] = index
    work = [(node, set(lines), [index])
            for index, (node, lines) in enumerate(raw)]
    dropped = set()
    for index, (node, lines, made_of) in enumerate(work):
        uses = reads.get(index, [])
        name = _defined(node)
        if name is None or len(uses) != 1 or uses[0] <= index:
            continue
        use, use_lines, use_made_of = work[uses[0]]
        work[uses[0]] = (_Substitute({name: node.value}, []).visit(
            copy.deepcopy(use)), use_lines | lines, made_of + use_made_of)
        dropped.add(index)
    return [unit for index, unit in enumerate(work) if index not in dropped]


# --------------------------------------------------------------------------
# Small helpers


def _lex(text: str) -> Iterator[str]:
    skip = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER, tokenize.COMMENT}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type not in skip:
                yield token.string
    except (tokenize.TokenError, SyntaxError):
        return


def _inert(node: ast.stmt) -> bool:
    return isinstance(node, ast.Pass) or (
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))


def _lambda_binding(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Lambda))


def _load_copy(target: ast.expr) -> ast.expr:
    value = copy.deepcopy(target)
    for node in ast.walk(value):
        if hasattr(node, "ctx"):
            node.ctx = ast.Load()  # type: ignore[attr-defined]
    return value


def _span(node: ast.AST) -> range:
    first = getattr(node, "lineno", 0)
    return range(first, (getattr(node, "end_lineno", None) or first) + 1)


def _blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    blocks = [getattr(node, name) for name in ("body", "orelse",
                                               "finalbody")
              if isinstance(getattr(node, name, None), list)]
    blocks += [h.body for h in getattr(node, "handlers", [])]
    blocks += [c.body for c in getattr(node, "cases", [])]
    return blocks


def header_key(node: ast.stmt) -> str | None:
    """What a compound statement's own part does (None for a simple
    statement, or one too deep to describe)."""
    header = _header(node) if _blocks(node) else None
    if header is None:
        return None
    try:
        return ast.dump(header)
    except (RecursionError, MemoryError):
        return None


def _header(node: ast.stmt) -> ast.stmt | None:
    """A compound statement's own part (its test, its loop), as a
    statement whose tokens stand for it."""
    if isinstance(node, ast.If):
        return ast.Expr(ast.Call(ast.Name("if", ast.Load()),
                                 [if_test(node)], []))
    if isinstance(node, ast.While):
        return ast.Expr(ast.Call(ast.Name("while", ast.Load()),
                                 [node.test], []))
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return ast.Assign(targets=[node.target], value=ast.Call(
            ast.Name("for", ast.Load()), [node.iter], []))
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return ast.Expr(ast.Tuple([i.context_expr for i in node.items],
                                  ast.Load()))
    return None
