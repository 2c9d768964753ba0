"""Grading what can be loaded of a file whose module-level code fails
(trusted side: the file is parsed here, never run).

Details: docs/internals.md, `grader.run.loadable`.
"""
from __future__ import annotations

import ast
import builtins
import glob
import importlib.machinery
import importlib.util
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.locate.cells import global_names, may_change
from grader.locate.source import SourceFile
from grader.output.text import listing, one_line

#: The kit's own packages: never skipped (importing them at module level
#: is refused in the sandbox and costs every task, docs/rubric-decisions.md).
KIT_PACKAGES = ("grader", "solutions")
#: Names every module has before its first line runs.
MODULE_NAMES = frozenset({"__name__", "__file__", "__doc__", "__spec__",
                          "__loader__", "__package__", "__builtins__",
                          "__annotations__", "__dict__"})
#: At most this many lines of module-level code are listed one by one.
MAX_LISTED = 12

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_IMPORTS = (ast.Import, ast.ImportFrom)


@dataclass(frozen=True)
class Skipped:
    """A top-level statement left out of the loaded module.

    ``kind``: ``import``, ``definition`` (a definition that cannot be made
    here), ``earlier`` (a definition redefined later in the file),
    ``value`` (an assignment a definition reads, which cannot be loaded)
    or ``code`` (any other module-level code). ``names`` are the names it
    would have bound; ``users`` the graded names whose code reads them.
    """

    line: int
    code: str
    kind: str
    why: str
    names: tuple[str, ...] = ()
    users: tuple[str, ...] = ()

    def sentence(self, source: SourceFile) -> str:
        """One line: where, what, why, and who needs it."""
        text = f"{source.where(self.line)}: `{self.code}` skipped: {self.why}"
        if self.users:
            names = [f"`{u}`" for u in self.users]
            shown = (names[0] if len(names) == 1 else
                     f"{', '.join(names[:-1])} and {names[-1]}")
            text += (f"; {shown} uses it, so it fails without it"
                     if len(names) == 1 else
                     f"; {shown} use it, so they fail without it")
        elif self.kind in ("import", "value"):
            text += "; nothing graded uses it"
        return text


@dataclass(frozen=True)
class Reduction:
    """The loadable part of a module, and what was left out."""

    source: SourceFile
    skipped: tuple[Skipped, ...]

    @property
    def unavailable(self) -> dict[str, Skipped]:
        """Name -> the skipped statement that would have bound it."""
        found: dict[str, Skipped] = {}
        for skip in self.skipped:
            if skip.kind == "earlier":
                continue
            for name in skip.names:
                found.setdefault(name, skip)
        return found

    def report(self, original: SourceFile, failure: str) -> str:
        """The note a report shows: why the file was reduced and one line
        per statement left out (module-level code beyond
        :data:`MAX_LISTED` statements is summed up)."""
        lines = [f"{shown_name(original)} could not be loaded as it is "
                 f"({failure.rstrip('.')}). It was graded on what can load "
                 f"here: its imports "
                 f"that can, the last definition of each class and "
                 f"function, and the module-level values they read. Not "
                 f"run:"]
        code = [s for s in self.skipped if s.kind == "code" and not s.users]
        shown = [s for s in self.skipped if s not in code[MAX_LISTED:]]
        lines += [f"  - {s.sentence(original)}" for s in shown]
        rest = code[MAX_LISTED:]
        if rest:
            where = listing([original.where(s.line) for s in rest], 3)
            lines.append(f"  - and {len(rest)} more statements of "
                         f"module-level code ({where})")
        return "\n".join(lines)


def shown_name(source: SourceFile) -> str:
    """The file's name as a report shows it: quoted, escaped."""
    from grader.locate.submission import show

    return show(Path(source.path.name))


# --------------------------------------------------------------------------
# Imports


def _readable(path: str, roots: dict[str, list[str]]) -> bool:
    real = os.path.realpath(path)

    def under(root: str) -> bool:
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)

    return (any(under(r) for r in roots["readable"])
            and not any(under(h) for h in roots["hidden"]))


def importable(module: str | None, level: int = 0,
               roots: dict[str, list[str]] | None = None) -> str | None:
    """Why ``import module`` cannot succeed in the sandbox, or None when
    it may.

    Decided from the import system's metadata only: the top-level
    package's spec (``importlib.util.find_spec``, which finds a module
    without running it) and, with ``roots`` (:func:`grader.run.sandbox.
    sandbox_paths`), whether the sandbox may read where it lies. A
    submodule of an installed package, or a name inside a module, cannot
    be known without running the package: the import is kept, and fails
    in the sandbox if it must. The kit's own packages are kept (the
    sandbox refuses them, and that costs every task).
    """
    if level:
        return "a relative import (the file is graded on its own)"
    top = (module or "").split(".")[0]
    if not top or top in KIT_PACKAGES:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError, AttributeError):
        return None  # undecidable here: keep it, the sandbox decides
    if spec is None:
        return "not installed here"
    if roots is None or spec.origin in (None, "built-in", "frozen"):
        places = list(spec.submodule_search_locations or [])
        if roots is None or not places:
            return None
    else:
        places = [spec.origin]
    if all(not _readable(p, roots) for p in places):
        return "not installed here (the grader's sandbox reads installed " \
               "libraries only)"
    return _hidden_submodule(module or "", spec, roots)


def _hidden_submodule(module: str, spec: importlib.machinery.ModuleSpec,
                      roots: dict[str, list[str]] | None) -> str | None:
    """Why ``module``, a submodule of a package the sandbox may read,
    cannot be imported there: its file lies where the sandbox hides it
    (another homework's module of the student package); else None."""
    parts = module.split(".")
    if roots is None or len(parts) < 2 or not spec.submodule_search_locations:
        return None
    found = False
    for folder in spec.submodule_search_locations:
        base = Path(folder) / parts[1]
        found = found or base.exists() or any(
            Path(folder).glob(f"{glob.escape(parts[1])}.*"))
        for path in (base.with_name(f"{parts[1]}.py"), base / "__init__.py"):
            if path.is_file() and not _readable(str(path), roots):
                return (f"not shipped with this homework (the grader's "
                        f"sandbox holds only the files of {parts[0]} that "
                        f"the homework's release ships)")
    if not found and any(_hides_some(folder, roots)
                         for folder in spec.submodule_search_locations):
        # A module of the student package that the package does not have
        # (a student's own helper module): the file is graded alone.
        return (f"not a module of {parts[0]} as the homework ships it (one "
                f"file is graded, alone: put the helper in the file)")
    return None


def _hides_some(folder: str, roots: dict[str, list[str]]) -> bool:
    """True when the sandbox hides some file of ``folder``: a package it
    shows selectively (the student package), not an installed library."""
    try:
        return any(path.suffix == ".py" and not _readable(str(path), roots)
                   for path in Path(folder).iterdir())
    except OSError:
        return False


# --------------------------------------------------------------------------
# What a statement binds and reads


def _stored(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def binds(node: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds."""
    if isinstance(node, _DEFINITIONS):
        return {node.name}
    if isinstance(node, ast.Import):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom):
        return {a.asname or a.name for a in node.names if a.name != "*"}
    found = set()
    for child in ast.walk(node):
        if isinstance(child, _DEFINITIONS) and child is not node:
            found.add(child.name)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            found |= binds(child)
    return found | _stored(node)


def _annotations(func: ast.FunctionDef | ast.AsyncFunctionDef
                 ) -> list[ast.expr]:
    args = func.args
    every = args.posonlyargs + args.args + args.kwonlyargs + [
        a for a in (args.vararg, args.kwarg) if a is not None]
    found = [a.annotation for a in every if a.annotation is not None]
    return found + ([func.returns] if func.returns is not None else [])


def definition_reads(node: ast.FunctionDef | ast.AsyncFunctionDef
                     | ast.ClassDef, lazy_annotations: bool) -> set[str]:
    """The global names a definition reads while it is being made (not
    when it is called): decorators, bases and keywords, default values,
    annotations (unless ``from __future__ import annotations``) and the
    statements of a class body."""
    exprs: list[ast.AST] = list(node.decorator_list)
    if isinstance(node, ast.ClassDef):
        exprs += node.bases + [k.value for k in node.keywords]
        local: set[str] = set()
        names: set[str] = set()
        for statement in node.body:
            if isinstance(statement, _DEFINITIONS):
                names |= definition_reads(statement, lazy_annotations) \
                    - local
                local.add(statement.name)
                continue
            names |= _loaded(statement) - local - _stored(statement)
            local |= _stored(statement)
        return names | set().union(*(_loaded(e) for e in exprs))
    args = node.args
    exprs += [d for d in args.defaults + args.kw_defaults if d is not None]
    if not lazy_annotations:
        exprs += _annotations(node)
    return set().union(*(_loaded(e) for e in exprs)) if exprs else set()


def _plain_target(target: ast.expr) -> bool:
    if isinstance(target, ast.Name):
        return True
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_plain_target(e) for e in target.elts)
    if isinstance(target, ast.Starred):
        return _plain_target(target.value)
    return False


def _is_value(node: ast.stmt) -> bool:
    """An assignment that binds plain names only (``a = ...``, ``a, b =
    ...``, ``a: T = ...``)."""
    if isinstance(node, ast.Assign):
        return all(_plain_target(t) for t in node.targets)
    return (isinstance(node, ast.AnnAssign) and node.value is not None
            and _plain_target(node.target))


def _inert(node: ast.stmt) -> bool:
    """A statement that does nothing: a bare constant or ``pass``."""
    return isinstance(node, ast.Pass) or (
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))


# --------------------------------------------------------------------------
# Building the reduced module


def _excerpt(lines: list[str], node: ast.stmt) -> str:
    first = min([node.lineno] + [d.lineno for d in getattr(
        node, "decorator_list", [])])
    text = lines[first - 1] if first <= len(lines) else ""
    if first == node.lineno:
        raw = text.encode("utf-8")
        text = raw[node.col_offset:].decode("utf-8", "replace")
    text = one_line(text, 80)
    if node.end_lineno and node.end_lineno > first and not text.endswith(
            "..."):
        text += " ..."
    return text.replace("`", "'")


def _char(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def _blank(lines: list[str], nodes: list[ast.stmt],
           dropped: set[int]) -> bool:
    """Blank out the dropped statements of ``nodes`` in ``lines``.

    Statements sharing lines (``a = 1; print(a)``) are handled as a unit:
    a unit entirely dropped loses its lines; a dropped one-line statement
    next to kept ones becomes ``0`` (a constant that does nothing).
    Returns False when that is not possible (a dropped statement that
    spans lines shares a line with a kept one).
    """
    units: list[list[ast.stmt]] = []
    for node in nodes:
        first = min([node.lineno] + [d.lineno for d in getattr(
            node, "decorator_list", [])])
        if units and first <= units[-1][-1].end_lineno:
            units[-1].append(node)
        else:
            units.append([node])
    for unit in units:
        gone = [id(n) in dropped for n in unit]
        if not any(gone):
            continue
        first = min([unit[0].lineno] + [d.lineno for d in getattr(
            unit[0], "decorator_list", [])])
        last = unit[-1].end_lineno
        assert last is not None  # set by ast.parse
        if all(gone):
            for number in range(first, last + 1):
                lines[number - 1] = ""
            continue
        for node, away in zip(unit, gone):
            if not away:
                continue
            if node.end_lineno != node.lineno:
                return False
            line = lines[node.lineno - 1]
            assert node.end_col_offset is not None  # set by ast.parse
            start = _char(line, node.col_offset)
            end = _char(line, node.end_col_offset)
            lines[node.lineno - 1] = (line[:start] + "0".ljust(end - start)
                                      + line[end:])
    return True


def _closure(names: set[str], reads: dict[str, set[str]]) -> set[str]:
    """Every name reachable from ``names`` through ``reads``."""
    seen = set(names)
    pending = list(names)
    while pending:
        for name in reads.get(pending.pop(), ()):
            if name not in seen:
                seen.add(name)
                pending.append(name)
    return seen


def reduce_module(source: SourceFile, graded: tuple[str, ...],
                  roots: dict[str, list[str]] | None = None,
                  raised: frozenset[int] = frozenset()
                  ) -> Reduction | None:
    """The loadable part of ``source`` (see the module docstring), or
    None when it cannot be built (the code does not parse, or blanking it
    out would not give valid Python) or would leave nothing out.

    ``graded`` are the names the assignment grades in this file (a
    skipped statement says which of them need it); ``roots`` the
    sandbox's readable and hidden trees (:func:`importable`); ``raised``
    the lines at which loading the file raised: a top-level statement
    (not a definition) that holds one is left out as one that cannot run
    here, whatever it reads (a value read by a definition included: the
    definition then meets its absence when called, as it would have).
    Code too deep or too large to analyse gives None too, never an
    exception.
    """
    try:
        return _reduce(source, graded, roots, raised)
    except (SyntaxError, RecursionError, MemoryError):
        return None


def _reduce(source: SourceFile, graded: tuple[str, ...],
            roots: dict[str, list[str]] | None,
            raised: frozenset[int] = frozenset()) -> Reduction | None:
    tree = source.parse()
    lines = list(source.lines)
    body = tree.body
    lazy = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
               and any(a.name == "annotations" for a in n.names)
               for n in body)
    last_definition: dict[str, int] = {}
    last_value: dict[str, int] = {}
    for index, node in enumerate(body):
        if isinstance(node, _DEFINITIONS):
            last_definition[node.name] = index
        elif _is_value(node):
            for name in _stored(node):
                last_value[name] = index
    # A name a definition provides is never taken from an assignment (as
    # in the notebook loader): `X = swap(X)` after `class X` is not run.
    for name in last_definition:
        last_value.pop(name, None)

    # What each kept binding reads: a definition when it is made and when
    # it is called, an assignment when it runs.
    reads: dict[str, set[str]] = {}
    for name, index in last_definition.items():
        definition = body[index]
        assert isinstance(definition, _DEFINITIONS)  # as last_definition
        reads[name] = global_names(definition, lines) | definition_reads(
            definition, lazy)
    for name, index in last_value.items():
        reads[name] = _loaded(body[index])
    defined = set(last_definition)
    for node in body:  # and a block that may bind or change it
        if not isinstance(node, (*_DEFINITIONS, *_IMPORTS)) and \
                not _is_value(node):
            changed, reads_now = may_change(node)
            for name in changed - defined:
                reads.setdefault(name, set()).update(reads_now - changed)
    needed = _closure(set().union(*(reads[n] for n in last_definition))
                      if last_definition else set(), reads)

    scan = _Scan(available=set(dir(builtins)) | MODULE_NAMES)
    undecided: set[str] = set()
    for index, node in enumerate(body):
        if _inert(node):
            scan.keep(index, set())
        elif isinstance(node, _IMPORTS):
            level = node.level if isinstance(node, ast.ImportFrom) else 0
            modules = ([node.module] if isinstance(node, ast.ImportFrom)
                       else [a.name for a in node.names])
            why = next((w for w in (importable(m, level, roots)
                                    for m in modules) if w), None)
            if why is None:
                scan.keep(index, binds(node))
                scan.star = scan.star or any(a.name == "*"
                                             for a in node.names)
            else:
                scan.skip(node, "import", why,
                          "is not installed here" if "installed" in why
                          else "is not shipped with this homework"
                          if "shipped" in why
                          else "comes from a relative import")
        elif isinstance(node, _DEFINITIONS):
            if last_definition[node.name] != index:
                later = body[last_definition[node.name]].lineno
                scan.skip(node, "earlier", f"redefined at line {later} "
                                           f"(the last definition is "
                                           f"graded)")
                continue
            lacking = scan.lacking(definition_reads(node, lazy))
            if lacking:
                scan.skip(node, "definition", scan.explain(
                    "its definition reads", lacking, body, last_definition,
                    last_value, index), "is skipped too")
            else:
                scan.keep(index, {node.name})
        elif (_stored(node) & needed and _is_value(node) and any(
                last_value.get(n) == index for n in _stored(node))):
            names = _stored(node)
            lacking = scan.lacking(_loaded(node) - names)
            if _holds(node, raised):
                # It raised when the file was loaded: it cannot run here
                # (a definition that reads it meets its absence when
                # called, as it would have).
                scan.skip(node, "value", RAISED_HERE, RAISED_CLAUSE)
            elif lacking:
                scan.skip(node, "value", scan.explain(
                    "it reads", lacking, body, last_definition, last_value,
                    index), "is skipped too")
            else:
                scan.keep(index, names)
        elif ((change := may_change(node))[0] - defined) & needed:
            # A block that may bind or change a value a definition reads
            # (`if not FAST: SCALED = False`): run as the kernel runs it,
            # or, when it cannot load here, the definitions that read
            # that value cannot be graded on a value the run would not
            # have (fail closed, below).
            changed, reads_now = change[0] - defined, change[1]
            lacking = scan.lacking(reads_now - changed)
            if _holds(node, raised):
                scan.skip(node, "value", RAISED_HERE, RAISED_CLAUSE)
                undecided |= changed & needed
            elif lacking:
                scan.skip(node, "value", scan.explain(
                    "it reads", lacking, body, last_definition, last_value,
                    index), "is skipped too")
                undecided |= changed & needed
            else:
                scan.keep(index, changed)
        else:
            scan.skip(node, "code", "module-level code (not a definition, "
                                    "nor a value one reads)",
                      "is bound only by module-level code that is not run")
    for name, index in last_definition.items():
        unknown = sorted(_closure(reads[name], reads) & undecided)
        if index in scan.kept and unknown:
            scan.kept.discard(index)
            scan.skip(body[index], "definition", (
                f"its code reads `{unknown[0]}`, which module-level code "
                f"that cannot run here may change"), "is skipped too")
    if not scan.skipped:
        return None
    dropped = {id(body[i]) for i in range(len(body)) if i not in scan.kept}
    if not _blank(lines, body, dropped):
        return None
    text = "".join(line + "\n" for line in lines)
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return Reduction(replace(source, text=text), tuple(_records(
        scan.skipped, lines=source.lines, graded=graded, reads=reads,
        available=scan.available)))


RAISED_HERE = "it raised when the grader loaded the file"
RAISED_CLAUSE = "is bound only by module-level code that raised here"


def _holds(node: ast.stmt, lines: frozenset[int]) -> bool:
    """Whether one of ``lines`` lies in ``node``."""
    return any(node.lineno <= line <= (node.end_lineno or node.lineno)
               for line in lines)


@dataclass
class _Scan:
    """The top-level statements seen so far: kept, skipped, and the
    names loaded before the next one runs."""

    available: set[str]
    star: bool = False
    kept: set[int] = field(default_factory=set)
    skipped: list[tuple[ast.stmt, str, str]] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)

    def keep(self, index: int, names: set[str]) -> None:
        self.kept.add(index)
        self.available |= names

    def skip(self, node: ast.stmt, kind: str, why: str,
             clause: str | None = None) -> None:
        """Leave ``node`` out; ``clause`` says why the names it binds are
        missing (``is not installed here``)."""
        self.skipped.append((node, kind, why))
        if clause:
            for name in binds(node):
                self.missing.setdefault(name, clause)

    def lacking(self, names: set[str]) -> list[str]:
        """The names of ``names`` not loaded yet (none after a star
        import, which may bind anything)."""
        return [] if self.star else sorted(names - self.available)

    def explain(self, what: str, names: list[str], body: list[ast.stmt],
                definitions: dict[str, int], values: dict[str, int],
                index: int) -> str:
        """``its definition reads `Base`, which is defined nowhere in the
        file``."""
        parts = []
        for name in names[:3]:
            later = definitions.get(name, values.get(name))
            if name in self.missing:
                why = self.missing[name]
            elif later is not None and later > index:
                why = f"is defined only further down (line " \
                      f"{body[later].lineno})"
            else:
                why = "is defined nowhere in the file"
            parts.append(f"`{name}`, which {why}")
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        return f"{what} {'; '.join(parts)}{more}"


def _records(skipped: list[tuple[ast.stmt, str, str]], *, lines: list[str],
             graded: tuple[str, ...], reads: dict[str, set[str]],
             available: set[str]) -> list[Skipped]:
    """The :class:`Skipped` records, with the graded names that need
    each: a graded name needs a statement when its code reads (directly or
    through the file's other definitions and values) a name that only the
    statement binds."""
    needs = {target: _closure(reads[target], reads)
             for target in graded if target in reads}
    found = []
    for node, kind, why in skipped:
        names = tuple(sorted(binds(node) - available)) \
            if kind != "earlier" else ()
        users = tuple(t for t in graded if t in needs
                      and set(names) & needs[t])
        found.append(Skipped(line=min([node.lineno] + [
            d.lineno for d in getattr(node, "decorator_list", [])]),
            code=_excerpt(lines, node), kind=kind, why=why, names=names,
            users=users))
    return found


def explain_missing_name(problem: str, error: dict | None,
                         reduction: Reduction) -> str:
    """``problem`` (a probe's sentence) with the reason of a skipped name
    appended, when the probe failed because that name is missing: a
    ``NameError`` on it, or the sandbox's ``LookupError`` for a graded
    name that is not defined."""
    if not isinstance(error, dict) or error.get("type") not in (
            "NameError", "LookupError"):
        return problem
    message = str(error.get("message", ""))
    for name, skip in reduction.unavailable.items():
        quoted = f"'{name}'" in message
        if quoted or message.startswith(f"{name} is not defined"):
            return (f"{problem.rstrip('.')} (`{name}` was not loaded: "
                    f"{reduction.source.where(skip.line)}, `{skip.code}`, "
                    f"skipped: {skip.why})")
    return problem
