"""Reading a submission's source exactly as Python reads it.

Details: docs/internals.md, `grader.locate.source`.
"""
from __future__ import annotations

import ast
import codecs
import io
import os
import re
import stat
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from grader.constants import END_MARKER, START_MARKER
from grader.errors import GraderError

if TYPE_CHECKING:
    from grader.locate.cells import LintText

# The notebook's own autograded cells carry this line; they are the kit's,
# not the student's code, and are never graded as part of a submission.
GRADING_CELL_MARK = "# nbgrader: graded by the kit's grader"

#: The largest Python source the grader reads: a ``.py`` file, or all the
#: code cells of a notebook together (the reference solution is about
#: 9 KB; flake8 needs about 3 s on the worst text of this size).
MAX_SOURCE_BYTES = 256 * 1024
#: The largest notebook file the grader reads (outputs and pictures
#: included).
MAX_NOTEBOOK_BYTES = 16 * 1024 * 1024


class SourceError(GraderError):
    """A submission file that cannot be read as Python or as a notebook."""


class UncompilableError(GraderError, SyntaxError):
    """Source that Python's parser gives up on (too deep, out of memory).

    A :class:`SyntaxError`, so that every caller that handles code that
    does not parse handles this too.
    """


# --------------------------------------------------------------------------
# Reading and decoding


def _size(limit: int) -> str:
    return (f"{limit // (1024 * 1024)} MB" if limit >= 1024 * 1024
            else f"{limit // 1024} KB")


def read_bytes(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    The file is opened without following a final symlink and checked with
    ``fstat`` before anything is read: FIFOs, devices, sockets, folders
    and symlinks are refused, and so is a file larger than ``limit`` (at
    most ``limit + 1`` bytes are ever read). Raises :class:`SourceError`
    with one line.
    """
    path = Path(path)
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        before = os.lstat(path)
        if not stat.S_ISREG(before.st_mode):
            raise SourceError(f"{path} is not a regular file")
        descriptor = os.open(path, flags)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: "
                          f"{exc.strerror or exc}") from exc
    try:
        status = os.fstat(descriptor)
        if (not stat.S_ISREG(status.st_mode)
                or (status.st_dev, status.st_ino)
                != (before.st_dev, before.st_ino)):
            raise SourceError(f"{path} is not a regular file")
        if status.st_size > limit:
            raise SourceError(f"{path} is larger than the grader's limit "
                              f"of {_size(limit)}")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(descriptor, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: "
                          f"{exc.strerror or exc}") from exc
    finally:
        os.close(descriptor)
    if total > limit:
        raise SourceError(f"{path} is larger than the grader's limit of "
                          f"{_size(limit)}")
    return b"".join(chunks)


def canonical(text: str) -> str:
    """``text`` with ``\\r\\n`` and ``\\r`` line ends made ``\\n``.

    Python's tokenizer ends a line at ``\\n``, ``\\r\\n`` and ``\\r`` only,
    so after this every stage can count lines by ``\\n`` alone.
    """
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def split_lines(text: str) -> list[str]:
    """The lines of canonical ``text``, without their ``\\n``.

    The kit's one line splitter: it ends lines where Python's tokenizer
    does (never at a form feed, ``\\x0b``, ``\\x1c``-``\\x1e``, ``\\x85``,
    ``\\u2028`` or ``\\u2029``, where ``str.splitlines`` would), so line
    ``n`` here is line ``n`` of every syntax tree, traceback and flake8
    finding.
    """
    lines = canonical(text).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def decode_python(data: bytes, name: str) -> tuple[str, str]:
    """Decode Python source bytes as the interpreter does (PEP 263).

    Returns the canonical text and the encoding that turns it back into
    bytes with the same meaning (the declared one; ``utf-8`` after a BOM).
    Raises :class:`SourceError`, one line, for whatever Python refuses: an
    unknown or non-text encoding, a BOM with another cookie, bytes the
    encoding cannot decode, a NUL character.
    """
    if b"\0" in data:
        raise SourceError(f"{name} contains a NUL byte: it is a binary "
                          f"file, not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        try:
            data.decode("utf-8-sig")
        except UnicodeDecodeError as bad:
            if "encoding declaration" in str(exc.msg):
                raise SourceError(
                    f"{name} is not valid UTF-8 text (byte {bad.start}) "
                    f"and declares no encoding, so Python refuses it"
                ) from exc
        raise SourceError(f"{name}: Python refuses its encoding "
                          f"({exc.msg})") from exc
    try:
        is_text = codecs.lookup(encoding)._is_text_encoding
    except LookupError as exc:  # pragma: no cover - detect_encoding checks
        raise SourceError(f"{name}: unknown encoding {encoding}") from exc
    if not is_text:
        raise SourceError(f"{name}: Python refuses its encoding "
                          f"({encoding!r} is not a text encoding)")
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, ValueError, TypeError) as exc:
        where = (f" (byte {exc.start})"
                 if isinstance(exc, UnicodeDecodeError) else "")
        label = "UTF-8" if encoding in ("utf-8", "utf-8-sig") else encoding
        raise SourceError(f"{name} is not valid {label} text{where}, so "
                          f"Python refuses it") from exc
    if "\0" in text:
        raise SourceError(f"{name} decodes to text with a NUL character, "
                          f"which Python refuses")
    _check_declaration(data, text, encoding, name)
    return canonical(text), ("utf-8" if encoding == "utf-8-sig"
                             else encoding)


_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)


def _declared(line: str) -> str | None:
    """The encoding a line's PEP 263 cookie names, normalised."""
    found = _COOKIE.match(line)
    if not found:
        return None
    try:
        return codecs.lookup(found.group(1)).name
    except LookupError:
        return found.group(1).lower()


def _check_declaration(data: bytes, text: str, encoding: str,
                       name: str) -> None:
    """Refuse a file whose encoding declaration does not survive its own
    encoding: the cookie line, decoded as the encoding it names, must
    still name it (an ASCII-incompatible codec such as cp037 turns the
    whole file, cookie included, into other characters, which Python
    cannot compile). The message gives the line and Python's words."""
    expected = codecs.lookup(encoding).name
    raw_lines = data.split(b"\n", 2)[:2]
    decoded = text.split("\n", 2)[:2]
    for number, raw in enumerate(raw_lines, 1):
        if _declared(raw.decode("latin-1")) is None:
            continue
        line = decoded[number - 1] if number <= len(decoded) else ""
        if _declared(line) == expected:
            return
        raise SourceError(f"{name} does not decode as {encoding}, line "
                          f"{number} (its own encoding declaration), so "
                          f"Python cannot compile it"
                          f"{_python_says(data, name)}")


def _python_says(data: bytes, name: str) -> str:
    """Python's own words for source bytes it cannot compile (parsed
    only, never run), or ''."""
    try:
        compile(data, name, "exec", ast.PyCF_ONLY_AST)
    except SyntaxError as exc:
        return f": {exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError, MemoryError):
        return ""
    return ""


def encode_python(text: str, encoding: str) -> bytes:
    """Bytes that :func:`decode_python` turns back into exactly ``text``.

    Used to hand flake8 a file that means what the grader read. Raises
    :class:`SourceError` when no such bytes exist in ``encoding``.
    """
    try:
        data = text.encode(encoding)
        same = decode_python(data, "the linted copy")[0] == text
    except (UnicodeError, SourceError, LookupError) as exc:
        raise SourceError(f"the text cannot be written back in "
                          f"{encoding} ({exc})") from exc
    if not same:
        raise SourceError(f"the text does not survive a round trip "
                          f"through {encoding}")
    return data


# --------------------------------------------------------------------------
# The source


@dataclass(frozen=True)
class Comment:
    """A comment token: where it starts and its text (with the ``#``)."""

    line: int
    col: int
    text: str
    whole_line: bool


@dataclass(frozen=True)
class SourceFile:
    """Canonical Python text and where each of its lines came from.

    For a ``.py`` file, line ``n`` of :attr:`text` is line ``n`` of the file.
    For a notebook, :attr:`text` is a module assembled from its code cells
    and :attr:`origins` maps each line (1-based, index ``n - 1``) to its
    ``(cell, line)`` in the notebook, both 1-based; lines the grader added
    (blank separators) map to ``None``. :attr:`lint` is the notebook as one
    program, as flake8 judges it (see :class:`grader.locate.cells.LintText`).
    :attr:`encoding` is the encoding the file declared (flake8 gets the
    text in it). The text is made canonical on construction.
    """

    text: str
    path: Path
    origins: tuple[tuple[int, int] | None, ...] | None = None
    cell_errors: tuple[str, ...] = ()
    encoding: str = "utf-8"
    lint: LintText | None = field(default=None, compare=False, repr=False)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Make :attr:`text` canonical (``\\n`` line ends only)."""
        object.__setattr__(self, "text", canonical(self.text))

    @cached_property
    def lines(self) -> list[str]:
        """The text's lines (without ``\\n``), by :func:`split_lines`."""
        return split_lines(self.text)

    def where(self, line: int) -> str:
        """Describe line ``line`` of :attr:`text` for a student to find it."""
        if self.origins is None:
            return f"line {line}"
        origin = (self.origins[line - 1]
                  if 1 <= line <= len(self.origins) else None)
        if origin:
            cell, cell_line = origin
            return f"cell {cell}, line {cell_line}"
        return f"line {line} of the assembled notebook code"

    @cached_property
    def _lines_by_origin(self) -> dict[tuple[int, int], int]:
        return {origin: number
                for number, origin in enumerate(self.origins or (), start=1)
                if origin is not None}

    def line_at(self, cell: int, line: int) -> int | None:
        """The line of :attr:`text` that holds ``line`` of notebook cell
        ``cell`` (None when the grader did not load that line)."""
        return self._lines_by_origin.get((cell, line))

    @cached_property
    def _parsed(self) -> tuple[ast.Module | None, SyntaxError | None]:
        try:
            return ast.parse(self.text, filename=str(self.path)), None
        except SyntaxError as exc:
            return None, exc
        except RecursionError:
            return None, UncompilableError(
                "the code is nested too deeply for Python to compile it")
        except MemoryError:
            return None, UncompilableError(
                "Python's parser ran out of memory on this code")
        except ValueError as exc:  # NUL in a hand-made SourceFile
            return None, SyntaxError(str(exc))

    def parse(self) -> ast.Module:
        """The syntax tree of :attr:`text` (parsed once, shared).

        Raises ``SyntaxError`` as ``ast.parse`` does, and
        :class:`UncompilableError` (a ``SyntaxError``) where the parser
        gives up (``RecursionError``, ``MemoryError``). Callers must not
        change the tree.
        """
        tree, error = self._parsed
        if error is not None:
            raise error
        assert tree is not None  # _parsed gives a tree or an error
        return tree

    @cached_property
    def comments(self) -> dict[int, Comment]:
        """The comment tokens of :attr:`text`, by line.

        Found by Python's tokenizer, so ``#`` inside a string is no
        comment. Text that does not tokenize gives the comments before the
        error.
        """
        found: dict[int, Comment] = {}
        lines = self.lines
        readline = io.StringIO(self.text).readline
        try:
            for token in tokenize.generate_tokens(readline):
                if token.type != tokenize.COMMENT:
                    continue
                row, col = token.start
                before = lines[row - 1][:col] if row <= len(lines) else ""
                found[row] = Comment(row, col, token.string,
                                     before.strip() == "")
        except (tokenize.TokenError, SyntaxError, RecursionError,
                MemoryError):
            pass
        return found


def load_python(path: Path) -> SourceFile:
    """Load a ``.py`` file (see :func:`read_bytes`, :func:`decode_python`)."""
    text, encoding = decode_python(read_bytes(path, MAX_SOURCE_BYTES),
                                   str(path))
    return SourceFile(text=text, path=Path(path), encoding=encoding)


# --------------------------------------------------------------------------
# Classes, functions, spans


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


def node_span(node: ast.stmt | ast.expr,
              lines: list[str] | None = None) -> tuple[int, int]:
    """First and last line of a definition, decorators included.

    With the source ``lines`` (from :func:`split_lines`), the span also
    takes in the comment lines indented inside the definition that follow
    its last statement (such as ``# YOUR CODE ENDS HERE``), which the
    syntax tree leaves out.
    """
    first = min([node.lineno] + [d.lineno for d in getattr(
        node, "decorator_list", [])])
    last = node.end_lineno
    assert last is not None  # set by ast.parse
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


def body_without_docstring(func: ast.FunctionDef | ast.AsyncFunctionDef
                           ) -> list[ast.stmt]:
    """A function's statements, without its docstring."""
    body = list(func.body)
    if (body and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    return body


_COMPOUND_BLOCKS = ("body", "orelse", "finalbody")


def simple_statements(nodes: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Simple statements at any depth, not entering nested definitions.

    The nesting of blocks is bounded by Python's own limit on indentation
    levels (100), so the recursion is too.
    """
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef)):
            continue
        blocks = [getattr(node, name) for name in _COMPOUND_BLOCKS
                  if isinstance(getattr(node, name, None), list)]
        blocks += [handler.body for handler in getattr(node, "handlers", [])]
        blocks += [case.body for case in getattr(node, "cases", [])]
        if blocks:
            for block in blocks:
                yield from simple_statements(block)
        else:
            yield node


# --------------------------------------------------------------------------
# Student regions and the student's code


def _markers(source: SourceFile,
             func: ast.FunctionDef | ast.AsyncFunctionDef
             ) -> list[tuple[int, str]]:
    """The region markers inside ``func``: (line, "start" | "end").

    A marker is a comment token alone on its line (so ``# YOUR CODE ENDS
    HERE`` inside a string, or after code, is none).
    """
    found = []
    comments = source.comments
    assert func.end_lineno is not None  # set by ast.parse
    for number in range(func.lineno, func.end_lineno + 1):
        comment = comments.get(number)
        if comment is None or not comment.whole_line:
            continue
        if START_MARKER in comment.text:
            found.append((number, "start"))
        elif END_MARKER in comment.text:
            found.append((number, "end"))
    return found


def marked_regions(source: SourceFile,
                   func: ast.FunctionDef | ast.AsyncFunctionDef
                   ) -> list[tuple[int, int]]:
    """The lines strictly between each start marker and the next end
    marker inside ``func`` (a start with no end runs to the end of the
    function); [] when the function has no region marker."""
    regions = []
    start = None
    for number, kind in _markers(source, func):
        if kind == "start" and start is None:
            start = number + 1
        elif kind == "end" and start is not None:
            if number - 1 >= start:
                regions.append((start, number - 1))
            start = None
    if start is not None:
        assert func.end_lineno is not None  # set by ast.parse
        regions.append((start, func.end_lineno))
    return regions


def student_regions(source: SourceFile,
                    func: ast.FunctionDef | ast.AsyncFunctionDef
                    ) -> list[tuple[int, int]]:
    """The student regions of a function, as inclusive line ranges.

    The marked regions (see :func:`marked_regions`); when the function has
    lost its markers, its whole body (docstring excluded) is the
    student's.
    """
    regions = marked_regions(source, func)
    if regions or _markers(source, func):
        return regions
    body = body_without_docstring(func)
    if not body:
        return []
    assert func.end_lineno is not None  # set by ast.parse
    return [(node_span(body[0])[0], func.end_lineno)]


def statement_key(node: ast.stmt) -> str | None:
    """What a statement does, without positions or comments (None when
    the statement is too deep to describe)."""
    try:
        return ast.dump(node)
    except (RecursionError, MemoryError):
        return None


def _inert(node: ast.stmt) -> bool:
    """A statement that does nothing: a bare constant (docstring, ``...``)
    or ``pass``."""
    return isinstance(node, ast.Pass) or (
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))


@dataclass(frozen=True)
class StudentCode:
    """Where the student's code of one function is.

    ``regions`` are the student regions (:func:`student_regions`);
    ``outside`` the statements outside them that are not the stub's given
    code, so the student's as well; ``marked`` whether the function has
    region markers at all; ``given`` the stub's own given statements found
    inside the regions of a function that lost its markers (nobody's code,
    as they would be with the markers).
    """

    regions: tuple[tuple[int, int], ...]
    outside: tuple[ast.stmt, ...]
    marked: bool
    given: tuple[ast.stmt, ...] = ()

    @cached_property
    def _region_lines(self) -> frozenset[int]:
        return frozenset(line for start, end in self.regions
                         for line in range(start, end + 1))

    @cached_property
    def _outside_ids(self) -> frozenset[int]:
        return frozenset(id(node) for node in self.outside)

    @cached_property
    def _given_ids(self) -> frozenset[int]:
        return frozenset(id(node) for node in self.given)

    def in_region(self, line: int) -> bool:
        """True when ``line`` lies in a student region."""
        return line in self._region_lines

    def owns(self, node: ast.stmt) -> bool:
        """True when ``node`` is the student's code."""
        if id(node) in self._given_ids:
            return False
        return self.in_region(node.lineno) or id(node) in self._outside_ids


def student_code(source: SourceFile,
                 func: ast.FunctionDef | ast.AsyncFunctionDef,
                 given: tuple[str, ...] | None) -> StudentCode:
    """The student's code of ``func``: its regions, and what stands
    outside them but is not the released stub's own code.

    ``given`` holds the keys (:func:`statement_key`) of the same function's
    statements outside the regions of the stub the kit released (see
    :func:`given_statements`). A simple statement outside the regions is
    given code when it equals one of them (same syntax tree; comments and
    layout aside), each given statement standing for at most one; any
    other statement outside the regions, at any depth of the function, is
    the student's, for every penalty. Bare constants and ``pass`` are
    nobody's code. A function without markers is the student's entirely,
    except the stub's given statements it still holds (same rule: each
    given statement stands for at most one), so the same code is judged
    the same with or without the markers. With ``given`` None (no stub to
    compare with), only the regions are.
    """
    regions = student_regions(source, func)
    marked = bool(_markers(source, func))
    if given is None:
        return StudentCode(tuple(regions), (), marked)
    if not marked:
        return StudentCode(tuple(regions), (), False,
                           _given_inside(func, given))
    allowance = Counter(given)
    inside = StudentCode(tuple(regions), (), True)
    outside = []
    for node in simple_statements(func.body):
        if inside.in_region(node.lineno) or _inert(node):
            continue
        key = statement_key(node)
        if key is not None and allowance[key] > 0:
            allowance[key] -= 1
            continue
        outside.append(node)
    return StudentCode(tuple(regions), tuple(outside), True)


def _given_inside(func: ast.FunctionDef | ast.AsyncFunctionDef,
                  given: tuple[str, ...]) -> tuple[ast.stmt, ...]:
    """The statements of ``func`` that match the stub's ``given`` keys,
    each key standing for at most one statement, in source order."""
    allowance = Counter(given)
    found = []
    for node in simple_statements(func.body):
        key = statement_key(node)
        if key is not None and allowance[key] > 0:
            allowance[key] -= 1
            found.append(node)
    return tuple(found)


def load_stub(path: Path) -> SourceFile | None:
    """The kit's copy of the released stub (None when it is missing)."""
    try:
        return load_python(path)
    except SourceError:
        return None


def given_statements(stub: SourceFile | None, class_name: str | None,
                     name: str) -> tuple[str, ...]:
    """The stub's given code of ``class_name.name`` (or of the function
    ``name``): the keys of its statements outside its student regions;
    () when the stub has no such function."""
    if stub is None:
        return ()
    try:
        tree = stub.parse()
    except SyntaxError:
        return ()
    if class_name is None:
        func = find_function(tree, name)
    else:
        cls = find_class(tree, class_name)
        func = find_method(cls, name) if cls is not None else None
    if func is None:
        return ()
    regions = StudentCode(tuple(marked_regions(stub, func)), (), True)
    keys = (statement_key(node) for node in simple_statements(func.body)
            if not regions.in_region(node.lineno) and not _inert(node))
    return tuple(key for key in keys if key is not None)


def _raises_not_implemented(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    error = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(error, ast.Name) and error.id == "NotImplementedError"


def untouched(source: SourceFile, node: ast.ClassDef | ast.FunctionDef,
              stub: SourceFile | None) -> bool:
    """Whether the class or function ``node`` is still the released stub.

    True when it has marked functions, every statement in their regions
    only raises ``NotImplementedError``, and nothing outside the regions is
    the student's (see :func:`student_code`).
    """
    functions: list[tuple[str | None, ast.FunctionDef]]
    if isinstance(node, ast.ClassDef):
        functions = [(node.name, f) for f in node.body
                     if isinstance(f, ast.FunctionDef)]
    else:
        functions = [(None, node)]
    verdicts = []
    for class_name, func in functions:
        code = student_code(source, func, given_statements(
            stub, class_name, func.name))
        if not code.marked:
            continue
        inside = [n for n in ast.walk(func)
                  if isinstance(n, ast.stmt) and n is not func
                  and code.in_region(n.lineno)]
        verdicts.append(not code.outside and all(
            _raises_not_implemented(n) for n in inside))
    return bool(verdicts) and all(verdicts)
