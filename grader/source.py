"""Reading a submission's source: Python files, notebooks, and their regions.

A submission reaches the grader as text, never as an imported module. This
module turns a ``.py`` file or a notebook into a :class:`SourceFile` (Python
text plus, for notebooks, where each line came from) and finds the parts of
it the rubric talks about: a class's span, a method, and the student regions
between ``# YOUR CODE STARTS HERE`` and ``# YOUR CODE ENDS HERE``.
"""
from __future__ import annotations

import ast
import json
import re
import symtable
import textwrap
from dataclasses import dataclass
from pathlib import Path

# The notebook's own autograded cells carry this line; they are the kit's,
# not the student's code, and are never graded as part of a submission.
GRADING_CELL_MARK = "# nbgrader: graded by the kit's grader"
START_MARKER = "YOUR CODE STARTS HERE"
END_MARKER = "YOUR CODE ENDS HERE"
_MAGIC_LINE = re.compile(r"^\s*[%!]")


class SourceError(Exception):
    """A submission file that cannot be read as Python or as a notebook."""


@dataclass(frozen=True)
class SourceFile:
    """Python source text and where each of its lines came from.

    For a ``.py`` file, line ``n`` of :attr:`text` is line ``n`` of the file.
    For a notebook, :attr:`text` is a module assembled from its code cells
    and :attr:`origins` maps each line (1-based, index ``n - 1``) to its
    ``(cell, line)`` in the notebook, both 1-based; lines the grader added
    (blank separators) map to ``None``.
    """

    text: str
    path: Path
    origins: tuple[tuple[int, int] | None, ...] | None = None
    cell_errors: tuple[str, ...] = ()

    @property
    def is_notebook(self) -> bool:
        """True when this source was assembled from a notebook."""
        return self.origins is not None

    @property
    def lines(self) -> list[str]:
        """The source text split into lines (without line endings)."""
        return self.text.splitlines()

    def where(self, line: int) -> str:
        """Describe line ``line`` of :attr:`text` for a student to find it."""
        if self.origins is None:
            return f"line {line}"
        if 1 <= line <= len(self.origins) and self.origins[line - 1]:
            cell, cell_line = self.origins[line - 1]
            return f"cell {cell}, line {cell_line}"
        return f"line {line} of the assembled notebook code"

    def parse(self) -> ast.Module:
        """Parse :attr:`text`; raises ``SyntaxError`` as ``ast.parse`` does."""
        return ast.parse(self.text, filename=str(self.path))


def read_text(path: Path) -> str:
    """Read a text file, with a clear error for binary or unreadable files."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror}") from exc
    if b"\0" in data:
        raise SourceError(f"{path} is a binary file, not Python source")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"{path} is not UTF-8 text (byte {exc.start})") from exc


def load_python(path: Path) -> SourceFile:
    """Load a ``.py`` file."""
    return SourceFile(text=read_text(path), path=path)


def _cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        source = "".join(source)
    if not isinstance(source, str):
        raise SourceError("a notebook cell's source is neither text "
                          "nor a list of lines")
    return source


def _strip_magics(source: str) -> str:
    """Blank out IPython magics and shell escapes, keeping line numbers."""
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join("" if _MAGIC_LINE.match(line) else line
                     for line in source.split("\n"))


def notebook_code_cells(path: Path) -> list[tuple[int, str]]:
    """Return ``(cell number, source)`` for each code cell of a notebook.

    Cell numbers count every cell (markdown included) from 1, as Jupyter
    shows them top to bottom.
    """
    try:
        notebook = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path} is not a valid notebook: invalid JSON "
                          f"at line {exc.lineno}: {exc.msg}") from exc
    if not isinstance(notebook, dict) or not isinstance(
            notebook.get("cells"), list):
        raise SourceError(f"{path} is not a valid notebook: it has no "
                          f"list of cells")
    cells = []
    for number, cell in enumerate(notebook["cells"], start=1):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            cells.append((number, _cell_source(cell)))
    return cells


def _loaded_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _global_names(node: ast.stmt, cell_lines: list[str]) -> set[str]:
    """Global names a definition reads (its locals excluded)."""
    first, last = node_span(node, cell_lines)
    text = textwrap.dedent("\n".join(cell_lines[first - 1:last]))
    try:
        table = symtable.symtable(text, "<definition>", "exec")
    except SyntaxError:
        return _loaded_names(node)
    names: set[str] = set()
    pending = [table]
    while pending:
        scope = pending.pop()
        names |= {symbol.get_name() for symbol in scope.get_symbols()
                  if symbol.is_global() and symbol.is_referenced()}
        pending += scope.get_children()
    return names


def _assigned_names(node: ast.stmt) -> list[str]:
    targets = (node.targets if isinstance(node, ast.Assign)
               else [node.target])
    return [n.id for t in targets for n in ast.walk(t)
            if isinstance(n, ast.Name)]


def load_notebook(path: Path) -> SourceFile:
    """Assemble a module from a notebook's code cells.

    The module holds every top-level import of every code cell, the last
    top-level assignment of each global name that a kept definition uses
    (e.g. ``DEVICE = "cpu"``), and the last definition of each top-level
    class and function, verbatim and in notebook order, separated by two
    blank lines. Other statements (test calls, plots) are left out, so that
    loading the module runs no experiment. Cells that do not parse are
    reported in ``cell_errors``.
    """
    Entry = tuple[int, ast.stmt, list[str]]
    imports: list[Entry] = []
    definitions: dict[str, Entry] = {}
    assignments: dict[str, tuple[int, Entry]] = {}
    errors: list[str] = []
    order = 0
    for number, raw in notebook_code_cells(path):
        if GRADING_CELL_MARK in raw:
            continue
        source = _strip_magics(raw)
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            errors.append(f"cell {number}, line {exc.lineno}: "
                          f"SyntaxError: {exc.msg}")
            continue
        cell_lines = source.split("\n")
        for node in tree.body:
            order += 1
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append((number, node, cell_lines))
            elif isinstance(node, (ast.ClassDef, ast.FunctionDef,
                                   ast.AsyncFunctionDef)):
                definitions.pop(node.name, None)  # keep notebook order
                definitions[node.name] = (number, node, cell_lines)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for name in _assigned_names(node):
                    assignments[name] = (order, (number, node, cell_lines))

    needed: dict[int, Entry] = {}
    wanted = set().union(*(_global_names(e[1], e[2])
                           for e in definitions.values()))
    wanted -= set(definitions)
    seen: set[str] = set()
    while wanted - seen:
        name = (wanted - seen).pop()
        seen.add(name)
        if name in assignments:
            position, entry = assignments[name]
            needed[position] = entry
            wanted |= _loaded_names(entry[1].value) if entry[1].value \
                else set()

    text_lines: list[str] = []
    origins: list[tuple[int, int] | None] = []

    def append(number: int, node: ast.stmt, cell_lines: list[str]) -> None:
        first, last = node_span(node, cell_lines)
        for line_no in range(first, last + 1):
            text_lines.append(cell_lines[line_no - 1])
            origins.append((number, line_no))

    for entry in imports:
        append(*entry)
    for position in sorted(needed):
        append(*needed[position])
    for entry in definitions.values():
        if text_lines:
            text_lines.extend(["", ""])
            origins.extend([None, None])
        append(*entry)
    text = "\n".join(text_lines) + "\n" if text_lines else ""
    return SourceFile(text=text, path=path, origins=tuple(origins),
                      cell_errors=tuple(errors))


def load_source(path: Path) -> SourceFile:
    """Load a ``.py`` file or a notebook, chosen by the file's suffix."""
    if path.suffix == ".ipynb":
        return load_notebook(path)
    return load_python(path)


def find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    """Return the last top-level definition of class ``name``, if any."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            found = node
    return found


def find_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """Return the last top-level definition of function ``name``, if any."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            found = node
    return found


def find_method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    """Return the last definition of method ``name`` in ``cls``, if any."""
    found = None
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            found = node
    return found


def node_span(node: ast.AST,
              lines: list[str] | None = None) -> tuple[int, int]:
    """First and last line of a definition, decorators included.

    With the source ``lines``, the span also takes in the comment lines
    indented inside the definition that follow its last statement (such as
    ``# YOUR CODE ENDS HERE``), which the syntax tree leaves out.
    """
    first = min([node.lineno] + [d.lineno for d in getattr(
        node, "decorator_list", [])])
    last = node.end_lineno
    if lines is not None:
        indent = node.col_offset
        probe = last
        while probe < len(lines):
            text = lines[probe]
            stripped = text.strip()
            if stripped and not (stripped.startswith("#") and
                                 len(text) - len(text.lstrip()) > indent):
                break
            probe += 1
            if stripped:
                last = probe
    return first, last


def body_without_docstring(func: ast.FunctionDef) -> list[ast.stmt]:
    """A function's statements, without its docstring."""
    body = list(func.body)
    if (body and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    return body


def student_regions(lines: list[str],
                    func: ast.FunctionDef) -> list[tuple[int, int]]:
    """The student regions of a function, as inclusive line ranges.

    A region is the lines strictly between a ``# YOUR CODE STARTS HERE``
    comment and the next ``# YOUR CODE ENDS HERE`` comment inside the
    function (a start marker with no end runs to the end of the function).
    When the function has lost its markers, its whole body (docstring
    excluded) is the student's.
    """
    first, last = func.lineno, func.end_lineno
    regions = []
    start = None
    for number in range(first, last + 1):
        text = lines[number - 1].strip()
        if not text.startswith("#"):
            continue
        if START_MARKER in text and start is None:
            start = number + 1
        elif END_MARKER in text and start is not None:
            if number - 1 >= start:
                regions.append((start, number - 1))
            start = None
    if start is not None:
        regions.append((start, last))
    if regions:
        return regions
    body = body_without_docstring(func)
    if not body:
        return []
    return [(node_span(body[0])[0], last)]


def in_regions(line: int, regions: list[tuple[int, int]]) -> bool:
    """True when ``line`` lies inside one of the inclusive ``regions``."""
    return any(start <= line <= end for start, end in regions)
