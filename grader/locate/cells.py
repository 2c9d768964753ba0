"""Notebook code cells as the Jupyter kernel runs them (trusted side).

Details: docs/internals.md, `grader.locate.cells`.
"""
from __future__ import annotations

import __future__
import ast
import builtins
import json
import keyword
import re
import symtable
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grader.locate.source import (GRADING_CELL_MARK, MAX_NOTEBOOK_BYTES,
                                  MAX_SOURCE_BYTES, SourceError, SourceFile,
                                  canonical, node_span, read_bytes)

#: Cell magics whose body is Python run in the notebook's own namespace.
PYTHON_CELL_MAGICS = frozenset({"capture", "time", "prun", "debug"})
#: How much cell text IPython's transformer may tokenize per notebook (it
#: re-reads a cell once per magic it rewrites); beyond, the equivalent
#: rule takes over.
TRANSFORM_BUDGET = 512 * 1024

# A line IPython's token transformers may rewrite: an escape at the start
# of a line, a help '?' at its end, or '= %' / '= !' assignments.
_SPECIAL = re.compile(r"^[ \t]*[%!?,;/]|\?[ \t]*$|=[ \t]*[%!]", re.MULTILINE)
_INDENT = re.compile(r"^[ \t]+")
_CLASSIC_FIRST = re.compile(r"^>>>( |$)")
_CLASSIC = re.compile(r"^(>>>|\.\.\.)( |$)")
_IPYTHON = re.compile(r"^(((\[nav\]|\[ins\])?\ )?In\ \[\d+\]:\ "
                      r"|\s*\.{3,}:\ ?)")


@dataclass(frozen=True)
class KernelLine:
    """One line of the Python the kernel runs for a cell.

    ``line`` is the 1-based cell line it came from; ``rewritten`` is True
    when IPython replaced it (a magic, a shell escape, help).
    """

    text: str
    line: int
    rewritten: bool = False
    cell: int = 0          # the cell it came from, when moved out of it


@dataclass(frozen=True)
class LintText:
    """The notebook as one program, the text flake8 lints.

    Every Python cell in notebook order, without its leading and trailing
    blank lines, two blank lines between cells. ``origins`` maps each line
    (index ``n - 1``) to its ``(cell, line)`` (None for separators);
    ``kit`` holds the lines of the kit's own cells (nbgrader's locked,
    non-solution cells and the grading cells) and ``rewritten`` the lines
    IPython rewrote.
    """

    text: str
    origins: tuple[tuple[int, int] | None, ...]
    kit: frozenset[int]
    rewritten: frozenset[int]

    def where(self, line: int) -> str:
        """``cell 7, line 3`` for line ``line`` of the program."""
        if 1 <= line <= len(self.origins) and self.origins[line - 1]:
            cell, cell_line = self.origins[line - 1]
            return f"cell {cell}, line {cell_line}"
        return f"line {line} of the notebook's code"


# --------------------------------------------------------------------------
# One cell as the kernel runs it


def _numbered(text: str) -> list[KernelLine]:
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return [KernelLine(part, number)
            for number, part in enumerate(parts, start=1)]


def _cleanup(lines: list[KernelLine]) -> list[KernelLine]:
    """IPython's cleanup transforms: leading blank lines, a common indent
    of the whole cell, ``>>>`` and ``In [n]:`` prompts."""
    start = 0
    while start < len(lines) and (lines[start].text == ""
                                  or lines[start].text.isspace()):
        start += 1
    lines = lines[start:]
    if not lines:
        return lines
    indent = _INDENT.match(lines[0].text)
    if indent:
        space = indent.group(0)
        lines = [KernelLine(line.text[len(space):], line.line,
                            line.rewritten)
                 if line.text.startswith(space) else line for line in lines]
    for first, prompt in ((_CLASSIC_FIRST, _CLASSIC),
                          (_IPYTHON, _IPYTHON)):
        if first.match(lines[0].text) or (
                len(lines) > 1 and prompt.match(lines[1].text)):
            lines = [KernelLine(prompt.sub("", line.text, count=1),
                                line.line, line.rewritten)
                     for line in lines]
    return lines


class _Budget:
    """How much text IPython's transformer may still tokenize."""

    def __init__(self, size: int) -> None:
        self.left = size


def _ipython_transformer() -> Any:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except Exception:  # not installed, or broken: use the equivalent rule
        return None
    return TransformerManager()


def _escape(line: str) -> str | None:
    """The equivalent rule for one line without IPython (None: unchanged)."""
    indent = line[:len(line) - len(line.lstrip(" \t"))]
    body = line[len(indent):].rstrip()
    target = re.match(r"([\w.]+(?:\s*,\s*[\w.]+)*)\s*=\s*(?=[%!])", body)
    prefix = ""
    if target:
        prefix = target.group(1) + " = "
        body = body[target.end():]
    if body.startswith("!") and prefix:
        call = f"get_ipython().getoutput({body[1:]!r})"
    elif body.startswith("!!"):
        call = f"get_ipython().getoutput({body[2:]!r})"
    elif body.startswith("!"):
        call = f"get_ipython().system({body[1:]!r})"
    elif body.startswith("%") and not body.startswith("%%"):
        name, _, rest = body[1:].partition(" ")
        call = f"get_ipython().run_line_magic({name!r}, {rest.strip()!r})"
    elif not prefix and re.fullmatch(r"[\w.]+\?{1,2}", body):
        name = body.rstrip("?")
        kind = "pinfo2" if body.endswith("??") else "pinfo"
        call = f"get_ipython().run_line_magic({kind!r}, {name!r})"
    else:
        return None
    return indent + prefix + call


def _equivalent_rule(lines: list[KernelLine]) -> list[KernelLine]:
    out = []
    for line in lines:
        rewritten = _escape(line.text)
        out.append(line if rewritten is None
                   else KernelLine(rewritten, line.line, True))
    return out


def _token_transforms(lines: list[KernelLine], manager: Any,
                      budget: _Budget) -> list[KernelLine]:
    """IPython's token transforms, one at a time, keeping line origins."""
    texts = [line.text + "\n" for line in lines]
    size = sum(len(text) for text in texts)
    for _ in range(500):  # IPython's own TRANSFORM_LOOP_LIMIT
        if budget.left < size:
            return _equivalent_rule(lines)
        budget.left -= size
        try:
            changed, after = manager.do_one_token_transform(texts)
        except Exception:  # IPython gave up on this text: so would the
            return lines   # kernel's transform; Python reports the error
        if not changed:
            return lines
        prefix = 0
        while (prefix < min(len(texts), len(after))
               and texts[prefix] == after[prefix]):
            prefix += 1
        suffix = 0
        while (suffix < min(len(texts), len(after)) - prefix
               and texts[-1 - suffix] == after[-1 - suffix]):
            suffix += 1
        old = lines[prefix:len(lines) - suffix]
        new = after[prefix:len(after) - suffix]
        replaced = [KernelLine(text.rstrip("\n"),
                               old[min(i, len(old) - 1)].line if old
                               else lines[max(prefix - 1, 0)].line, True)
                    for i, text in enumerate(new)]
        # A rewritten statement may span several lines ending in "\";
        # IPython puts it on one: the result keeps whole lines only.
        flat = [part for line in replaced
                for part in _split_kernel_line(line)]
        lines = lines[:prefix] + flat + lines[len(lines) - suffix:]
        texts = [line.text + "\n" for line in lines]
        size = sum(len(text) for text in texts)
    return lines


def _split_kernel_line(line: KernelLine) -> list[KernelLine]:
    parts = line.text.split("\n")
    return [KernelLine(part, line.line, line.rewritten) for part in parts]


def kernel_lines(text: str, manager: Any = None,
                 budget: _Budget | None = None) -> list[KernelLine] | None:
    """The Python the kernel runs for a cell's ``text``, line by line.

    Returns None when the cell is not Python run in the notebook (a cell
    magic such as ``%%bash``; see :data:`PYTHON_CELL_MAGICS`). ``manager``
    is IPython's ``TransformerManager`` (None: the equivalent rule).
    """
    budget = budget or _Budget(TRANSFORM_BUDGET)
    return _kernel(_numbered(canonical(text)), manager, budget)


def _kernel(lines: list[KernelLine], manager: Any,
            budget: _Budget) -> list[KernelLine] | None:
    lines = _cleanup(lines)
    if lines and lines[0].text.startswith("%%") and not re.match(
            r"%%\w+\?", lines[0].text):
        name = lines[0].text[2:].rstrip().partition(" ")[0]
        if name not in PYTHON_CELL_MAGICS:
            return None
        return _kernel(lines[1:], manager, budget)
    if not _SPECIAL.search("\n".join(line.text for line in lines)):
        return lines
    if manager is None:
        return _equivalent_rule(lines)
    return _token_transforms(lines, manager, budget)


# --------------------------------------------------------------------------
# The notebook


@dataclass(frozen=True)
class _Cell:
    number: int
    lines: list[KernelLine] | None
    kit: bool
    grading: bool
    tree: ast.Module | None = None
    futures: int = 0       # the __future__ flags in force after it
    #: names whose value after this cell the grader cannot know, and why
    unknown: tuple[frozenset[str], str] | None = None
    #: the cell line of the first statement the compiler refuses: the
    #: kernel runs the statements above it, then stops (compiled_nodes)
    stop: int | None = None

    @property
    def texts(self) -> list[str]:
        return [line.text for line in self.lines or []]


def _cell_source(cell: dict, number: int, path: Path) -> str:
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        source = "".join(source)
    if not isinstance(source, str):
        raise SourceError(f"{path} is not a valid notebook: cell {number}'s "
                          f"source is neither text nor a list of lines")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SourceError(
            f"{path}: cell {number} is not valid text (a lone surrogate, "
            f"\\u{ord(source[exc.start]):04x}, at character {exc.start}), "
            f"so Jupyter cannot run it") from exc
    return source


def _is_kit_cell(cell: dict, source: str) -> bool:
    """nbgrader's read-only cells of the release, and the grading cells."""
    if GRADING_CELL_MARK in source:
        return True
    metadata = cell.get("metadata")
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) \
        else None
    return (isinstance(nbgrader, dict) and nbgrader.get("locked") is True
            and nbgrader.get("solution") is not True)


def _read_notebook(path: Path) -> dict:
    data = read_bytes(path, MAX_NOTEBOOK_BYTES)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path} is not UTF-8 text (byte {exc.start})"
                          ) from exc
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path} is not a valid notebook: invalid JSON "
                          f"at line {exc.lineno}: {exc.msg}") from exc
    except RecursionError as exc:
        raise SourceError(f"{path} is not a valid notebook: its JSON is "
                          f"nested too deeply") from exc
    except MemoryError as exc:
        raise SourceError(f"{path} is not a valid notebook: its JSON is "
                          f"too large to read") from exc
    if not isinstance(notebook, dict) or not isinstance(
            notebook.get("cells"), list):
        raise SourceError(f"{path} is not a valid notebook: it has no "
                          f"list of cells")
    return notebook


#: What a cell error that stops the whole cell adds.
NOTHING_RUNS = (" (the kernel runs nothing of that cell, so it defines "
                "nothing here either)")


def _cells(path: Path) -> tuple[list[_Cell], list[str]]:
    """The code cells as the kernel runs them, and the cell errors."""
    notebook = _read_notebook(path)
    raw = []
    total = 0
    for number, cell in enumerate(notebook["cells"], start=1):
        if not (isinstance(cell, dict) and cell.get("cell_type") == "code"):
            continue
        source = _cell_source(cell, number, path)
        total += len(source.encode("utf-8"))
        if total > MAX_SOURCE_BYTES:
            raise SourceError(f"{path}: its code cells hold more than the "
                              f"grader's limit of "
                              f"{MAX_SOURCE_BYTES // 1024} KB of Python")
        raw.append((number, source, _is_kit_cell(cell, source)))
    manager = (_ipython_transformer()
               if any(_SPECIAL.search(s) for _, s, _ in raw) else None)
    budget = _Budget(TRANSFORM_BUDGET)
    cells, errors = [], []
    futures = 0  # the __future__ flags in force, as in the kernel
    names = _Bound()  # what earlier cells may or surely bind
    for number, source, kit in raw:
        lines = kernel_lines(source, manager, budget)
        grading = GRADING_CELL_MARK in source
        tree = None
        unknown = None
        automagic = _automagic(lines, names) if not grading else None
        if automagic is not None and automagic[0] == "magic":
            lines = [automagic[1]]
        elif automagic is not None:  # "unsure": see _automagic
            unknown = automagic[2]
        stop = None
        if lines is not None:
            text = "".join(line.text + "\n" for line in lines)
            try:
                tree = parse_cell(text, futures)
                count, refused, futures = compiled_nodes(tree, futures)
                if refused is not None:
                    node = tree.body[count]
                    stop = lines[node.lineno - 1].line
                    if not grading and unknown is None:
                        errors.append(
                            f"cell {number}, line {stop}: SyntaxError: "
                            f"{refused.msg} (the kernel runs the "
                            f"statements above it, then stops the cell, "
                            f"so they alone define anything here)")
            except SyntaxError as exc:
                row = exc.lineno or 0
                where = (f", line {lines[row - 1].line}"
                         if 1 <= row <= len(lines) else "")
                if not grading and unknown is None:
                    errors.append(f"cell {number}{where}: SyntaxError: "
                                  f"{exc.msg}{NOTHING_RUNS}")
            except (RecursionError, MemoryError, ValueError) as exc:
                if not grading:
                    why = ("it is nested too deeply for Python to compile"
                           if isinstance(exc, RecursionError) else
                           "Python cannot compile it"
                           if isinstance(exc, MemoryError) else str(exc))
                    errors.append(f"cell {number}: {why}{NOTHING_RUNS}")
        cell = _Cell(number, lines, kit, grading, tree, futures, unknown,
                     stop)
        names.add(cell)
        cells.append(cell)
    return cells, errors


# --------------------------------------------------------------------------
# What a line magic does with its argument, and IPython's automagic

#: How a line magic treats its argument, read from IPython's own code
#: (``IPython/core/magics/execution.py``). The property decides, not the
#: name: "run" -- the argument is compiled and run as code in the
#: notebook's namespace, its exceptions caught and shown (``%time``:
#: ``exec(code, user_ns)`` in a ``try``); "raise" -- the same, its
#: exceptions end the cell (``%prun``: ``runctx(code, user_ns,
#: user_ns)``); "function" -- the argument is the body of a timing
#: function run an unknown number of times, so it binds only what it
#: declares ``global`` (``%timeit``); "debugger" -- run under pdb, which
#: waits for whoever runs the notebook to continue it (``%debug
#: STATEMENT``). Every other magic's argument is not code of the notebook.
LINE_MAGIC_CODE = {"time": "run", "prun": "raise", "timeit": "function",
                   "debug": "debugger"}
#: The options each of them takes before its code (IPython's
#: ``parse_options`` strings; ``debug`` takes ``--breakpoint FILE:LINE``).
_MAGIC_OPTIONS = {"time": "", "prun": "D:l:rs:T:q", "timeit": "n:r:tcp:qo",
                  "debug": "b:"}
#: Line magics of a kernel when IPython is not installed here (IPython's
#: core magics, its default aliases and ipykernel's).
_FALLBACK_LINE_MAGICS = frozenset("""
alias alias_magic autoawait autocall automagic autosave bookmark cat cd
clear colors conda config connect_info cp debug dhist dirs doctest_mode ed
edit env gui hist history killbgscripts ldir less lf lk ll load load_ext
loadpy logoff logon logstart logstate logstop ls lsmagic lx macro magic
man matplotlib mkdir more mv notebook page pastebin pdb pdef pdoc pfile
pinfo pinfo2 pip popd pprint precision prun psearch psource pushd pwd
pycat pylab qtconsole quickref recall rehashx reload_ext rep rerun reset
reset_selective rm rmdir run save sc set_env sx system tb time timeit
unalias unload_ext who who_ls whos xdel xmode""".split())
#: What IPython's splitter reads at the start of a one-line cell.
_AUTOMAGIC = re.compile(r"^(\s*)([,;/%]|!!?|\?\??)?\s*(%{0,2}[\w.*]*)(.*)$")
#: Names the kernel binds itself besides Python's builtins.
_KERNEL_BUILTINS = frozenset({"get_ipython", "exit", "quit", "display"})


def _line_magics() -> frozenset[str]:
    """The line magics of a kernel (IPython's own registry when it is
    installed: the magics classes hold it without a shell)."""
    try:
        from IPython.core import magics
        from IPython.core.alias import default_aliases
    except Exception:  # not installed, or broken
        return _FALLBACK_LINE_MAGICS
    found = set(_FALLBACK_LINE_MAGICS)
    for value in vars(magics).values():
        table = getattr(value, "magics", None)
        if isinstance(value, type) and isinstance(table, dict):
            found |= set(table.get("line", {}))
    try:
        found |= {name for name, _ in default_aliases()}
    except Exception:
        pass
    return frozenset(found)


_LINE_MAGICS: frozenset[str] | None = None


def is_line_magic(name: str) -> bool:
    """Whether a kernel has a line magic ``name``."""
    global _LINE_MAGICS
    if _LINE_MAGICS is None:
        _LINE_MAGICS = _line_magics()
    return name in _LINE_MAGICS


def magic_code(name: str, argument: str) -> str | None:
    """The code a line magic runs of its ``argument`` (its options
    removed), or None when the magic runs none (see
    :data:`LINE_MAGIC_CODE`)."""
    if name not in LINE_MAGIC_CODE:
        return None
    spec = _MAGIC_OPTIONS[name]
    rest = argument.strip()
    if name == "debug":
        rest = re.sub(r"^(--breakpoint|-b)(\s+|=)\S+\s*", "", rest)
        return rest
    while spec and rest.startswith("-") and len(rest) > 1 \
            and not rest[1].isspace():
        word, _, after = rest.partition(" ")
        letter = word[1:2]
        if f"{letter}:" in spec and len(word) == 2:
            _, _, after = after.lstrip().partition(" ")
        rest = after.lstrip()
    return rest


class _Bound:
    """The names earlier cells may bind and those they surely bind (a
    plain top-level binding), for IPython's automagic: a magic name the
    notebook has bound is Python, not a magic."""

    def __init__(self) -> None:
        self.maybe: set[str] = set()
        self.surely: set[str] = set()
        self.deleted: set[str] = set()
        self.automagic_changed = False

    def add(self, cell: "_Cell") -> None:
        if cell.unknown is not None:
            self.maybe |= cell.unknown[0]
        for node in (cell.tree.body if cell.tree else []):
            binds, reads = _global_effects(node)
            self.maybe |= binds
            self.surely |= _kills(node, reads)
            self.deleted |= {n.id for n in ast.walk(node)
                             if isinstance(n, ast.Name)
                             and isinstance(n.ctx, ast.Del)}
            for call in ast.walk(node):
                magic = _magic_call(call)
                if magic and magic[0] == "automagic":
                    self.automagic_changed = True

    def state(self, name: str) -> str:
        """What ``name`` is to automagic: "python", "magic" or "unsure"."""
        if name in _KERNEL_BUILTINS or name in vars(builtins) \
                or keyword.iskeyword(name):
            return "python"
        if name in self.surely and name not in self.deleted:
            return "python"
        if name in self.maybe or self.automagic_changed:
            return "unsure"
        return "magic"


def _code_binds(code: str) -> set[str]:
    """The global names ``code`` may bind when run as a cell's code."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    found: set[str] = set()
    for node in tree.body:
        found |= _global_effects(node)[0]
    return found


def _automagic(lines: list[KernelLine] | None, names: _Bound) -> \
        tuple[str, KernelLine, tuple[frozenset[str], str] | None] | None:
    """IPython's automagic (on by default), which a kernel applies to a
    cell of one line only (``InteractiveShell.transform_cell``): ``time
    X = 1`` runs ``%time X = 1`` when ``time`` is a line magic the
    notebook has not bound (``prefilter.AutoMagicChecker``). Returns
    ("magic", the rewritten line, None) when the kernel surely runs the
    magic, ("unsure", the line, (names, why)) when whether it does
    depends on what earlier cells bound at run time, None otherwise."""
    if lines is None or len(lines) != 1 or lines[0].rewritten:
        return None
    line = lines[0]
    match = _AUTOMAGIC.match(line.text)
    if not match or match.group(2) or "-*-" in line.text:
        return None
    name, rest = match.group(3), match.group(4).strip()
    if (not name or not name.isidentifier() or not is_line_magic(name)
            or rest[:1] in ("=", ",")):
        return None
    call = KernelLine(f"get_ipython().run_line_magic({name!r}, {rest!r})",
                      line.line, True)
    state = names.state(name)
    if state == "magic":
        return "magic", call, None
    if state == "python":
        return None
    code = magic_code(name, rest)
    binds = _code_binds(line.text) | (_code_binds(code) if code else set())
    why = (f"line {line.line}: `{line.text.strip()}` is IPython's magic "
           f"%{name} only while "
           f"`{name}` is unbound when the cell runs (automagic), which "
           f"depends on how earlier cells ran")
    return "unsure", line, (frozenset(binds), why)


def _magic_call(node: ast.AST) -> tuple[str, str] | None:
    """``get_ipython().run_line_magic(NAME, ARG)``: (NAME, ARG)."""
    if not (isinstance(node, ast.Call) and len(node.args) == 2
            and not node.keywords
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run_line_magic"
            and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "get_ipython"
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                    for a in node.args)):
        return None
    return node.args[0].value, node.args[1].value


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """Every statement run in the notebook's namespace: the top level and
    the blocks of its ``if``/``for``/``while``/``with``/``try``/``match``
    statements, never a function's or a class's body."""
    found: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        found.append(node)
        if isinstance(node, (*_DEFINITIONS, ast.Lambda)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, []) or []:
                if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                    pending.extend(child.body)
                elif isinstance(child, ast.stmt):
                    pending.append(child)
    return found


def _module_view(cell: _Cell) -> tuple[list[KernelLine], ast.Module,
                                       dict[int, tuple[frozenset[str],
                                                       str]]]:
    """The cell as the grader runs it: each line magic that runs its
    argument as code in the notebook's namespace (see
    :data:`LINE_MAGIC_CODE`) becomes that code, on the magic's line.
    Returns the lines, their tree, and for top-level statements (their
    index) holding a magic whose effect the grader cannot know, the
    names it may bind and why."""
    assert cell.tree is not None and cell.lines is not None
    lines = list(cell.lines)
    texts = [line.text for line in lines]
    unsure: dict[int, tuple[set[str], str]] = {}
    replace_at: dict[int, list[str]] = {}
    for node in _module_level(cell.tree):
        if not isinstance(node, ast.Expr) or node.lineno != node.end_lineno:
            continue
        magic = _magic_call(node.value)
        if magic is None or magic[0] not in LINE_MAGIC_CODE:
            continue
        text = texts[node.lineno - 1]
        if text[node.end_col_offset:].strip() or \
                text[:node.col_offset].strip():
            continue
        name, argument = magic
        indent = text[:node.col_offset]
        code = magic_code(name, argument) or ""
        if not code.strip():
            continue
        try:
            compile_cell(code + "\n", cell.futures)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            # IPython compiles it first and raises: the cell ends here.
            replace_at[node.lineno] = [
                f"{indent}raise SyntaxError({'%' + name!r} "
                f"' cannot compile its code')"]
            continue
        code_lines = code.split("\n")
        kind = LINE_MAGIC_CODE[name]
        if kind == "run":
            replace_at[node.lineno] = (
                [f"{indent}try:"] + [f"{indent}    {t}" for t in code_lines]
                + [f"{indent}except Exception:", f"{indent}    pass"])
        elif kind == "raise":
            replace_at[node.lineno] = [indent + t for t in code_lines]
        else:
            if kind == "function":
                names = {n for part in ast.walk(ast.parse(code))
                         if isinstance(part, ast.Global) for n in part.names}
                why = (f"line {lines[node.lineno - 1].line}: "
                       f"`%{name} {argument}` binds what it declares "
                       f"global once per timing run, a number of runs only "
                       f"the kernel's clock decides")
            else:
                names = _code_binds(code)
                why = (f"line {lines[node.lineno - 1].line}: "
                       f"`%{name} {argument}` runs under the debugger, "
                       f"only when whoever runs the notebook continues it")
            if names:
                top = _top_index(cell.tree, node.lineno)
                before = unsure.get(top, (set(), why))
                unsure[top] = (before[0] | names, before[1])
    if not replace_at:
        return lines, cell.tree, {k: (frozenset(v[0]), v[1])
                                  for k, v in unsure.items()}
    view: list[KernelLine] = []
    for number, line in enumerate(lines, start=1):
        if number in replace_at:
            view += [KernelLine(t, line.line, True, line.cell)
                     for t in replace_at[number]]
        else:
            view.append(line)
    text = "".join(line.text + "\n" for line in view)
    try:
        tree = parse_cell(text, cell.futures)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return lines, cell.tree, {}
    if len(tree.body) != len(cell.tree.body):
        # ``%prun a = 1; b = 2`` is two statements: the indices shift.
        remapped = {}
        for top, value in unsure.items():
            first = cell.tree.body[top].lineno
            shift = sum(len(replace_at[n]) - 1 for n in replace_at
                        if n < first)
            remapped[_top_index(tree, first + shift)] = value
        unsure = remapped
    return view, tree, {k: (frozenset(v[0]), v[1])
                        for k, v in unsure.items()}


def _top_index(tree: ast.Module, line: int) -> int:
    """The index of the top-level statement that holds ``line``."""
    for index, node in enumerate(tree.body):
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            return index
    return max(len(tree.body) - 1, 0)


def always_raises(node: ast.stmt) -> bool:
    """Whether a statement at the top level of a cell surely raises (a
    ``raise``, ``assert`` of a constant false, an ``if`` each of whose
    branches surely raises): the kernel runs nothing after it in that
    cell. A ``try`` or ``with`` may swallow the exception: not counted."""
    if isinstance(node, ast.Raise):
        return True
    if isinstance(node, ast.Assert):
        return isinstance(node.test, ast.Constant) and not node.test.value
    if isinstance(node, ast.If):
        return bool(node.orelse) and _block_raises(node.body) and \
            _block_raises(node.orelse)
    return False


def _block_raises(block: list[ast.stmt]) -> bool:
    return any(always_raises(node) for node in block)


def compile_cell(text: str, futures: int = 0) -> ast.Module:
    """Code compiled whole, as a line magic that runs its argument
    compiles it (``%time``: one module), with the ``__future__`` features
    in force and top-level ``await`` allowed; to bytecode as well (never
    run), so that what only the compiler refuses raises here. A cell is
    not compiled whole: see :func:`parse_cell` and :func:`compiled_nodes`.
    Raises SyntaxError like :func:`compile`."""
    flags = futures | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(text, "<cell>", "exec", ast.PyCF_ONLY_AST | flags,
                   dont_inherit=True)
    compile(tree, "<cell>", "exec", flags, dont_inherit=True)
    return tree


def parse_cell(text: str, futures: int = 0) -> ast.Module:
    """A cell's syntax tree, parsed as IPython parses a cell (its
    ``ast_parse``: the ``__future__`` features earlier cells imported in
    force, top-level ``await`` allowed), not compiled: the kernel compiles
    it one statement at a time (:func:`compiled_nodes`). Raises
    SyntaxError like :func:`compile`: the kernel runs nothing of it."""
    flags = futures | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    return compile(text, "<cell>", "exec", ast.PyCF_ONLY_AST | flags,
                   dont_inherit=True)


def compiled_nodes(tree: ast.Module, futures: int = 0
                   ) -> tuple[int, SyntaxError | None, int]:
    """How IPython runs a parsed cell (``InteractiveShell.run_ast_nodes``):
    each top-level statement compiled as a module of its own, with the
    ``__future__`` features compiled so far in force (its compiler
    remembers them, as :mod:`codeop` does), and run before the next is
    compiled. A ``__future__`` import below other statements of its cell
    is therefore valid (it stands first in its own module) and in force
    from the next statement on; a statement the compiler refuses
    (``return`` outside a function, a ``__future__`` import inside a
    block) stops the cell, after the statements above it ran. Returns
    how many statements compile, the refusal of the next (None: all
    do), and the flags in force after them."""
    for index, node in enumerate(tree.body):
        alone = ast.Module([node], [])
        try:
            compile(alone, "<cell>", "exec",
                    futures | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                    dont_inherit=True)
        except SyntaxError as exc:
            return index, exc, futures
        futures |= future_flags(alone)
    return len(tree.body), None, futures


def future_flags(tree: ast.Module) -> int:
    """The compiler flags of the ``__future__`` imports ``tree`` holds at
    its top (they stay in force for every later cell, as in IPython)."""
    flags = 0
    for node in tree.body:
        if is_future(node):
            for alias in node.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
    return flags


def is_future(node: ast.stmt) -> bool:
    """``from __future__ import ...``."""
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


def awaits_at_top(node: ast.stmt) -> bool:
    """Whether a top-level statement awaits outside any function (valid in
    a cell, where IPython runs it in the kernel's event loop; never part
    of the module a definition needs)."""
    pending: list[ast.AST] = [node]
    while pending:
        item = pending.pop()
        if isinstance(item, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
            return True
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.Lambda, ast.ClassDef)) or item is node:
            pending.extend(ast.iter_child_nodes(item))
    return False


def _loaded_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def global_names(node: ast.stmt, cell_lines: list[str]) -> set[str]:
    """Global names a definition reads (its locals excluded)."""
    first, last = node_span(node, cell_lines)
    text = textwrap.dedent("\n".join(cell_lines[first - 1:last]))
    try:
        table = symtable.symtable(text, "<definition>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _loaded_names(node)
    names: set[str] = set()
    pending = [table]
    while pending:
        scope = pending.pop()
        names |= {symbol.get_name() for symbol in scope.get_symbols()
                  if symbol.is_global() and symbol.is_referenced()}
        pending += scope.get_children()
    return names


def _future_lines(cell: _Cell) -> list[KernelLine]:
    """The lines of a cell's ``__future__`` imports, their cell named."""
    found = []
    texts = cell.texts
    for node in (cell.tree.body if cell.tree else []):
        if is_future(node):
            first, last = node_span(node, texts)
            found += [KernelLine(k.text, k.line, k.rewritten, cell.number)
                      for k in (cell.lines or [])[first - 1:last]]
    return found


def _hoisted(cells: list[_Cell]) -> list[KernelLine]:
    """Every ``__future__`` import of the notebook, to stand first: each
    was at the top of its cell, where the kernel compiles it, and joined
    cells are one program where it must come first."""
    return [line for cell in cells for line in _future_lines(cell)]


def _without(cell: _Cell) -> _Cell:
    """The cell without its hoisted lines."""
    if cell.tree is None or cell.lines is None:
        return cell
    moved: set[int] = set()
    texts = cell.texts
    for node in cell.tree.body:
        if is_future(node):
            first, last = node_span(node, texts)
            moved |= set(range(first, last + 1))
    if not moved:
        return cell
    kept = [k for index, k in enumerate(cell.lines, 1) if index not in moved]
    return _Cell(cell.number, kept, cell.kit, cell.grading, cell.tree)


def as_linted(line: KernelLine) -> str:
    """A line as flake8 reads it: a rewritten top-level expression (a line
    magic, a shell escape, help) is a comment of its kernel text, as the
    student sees a line that is not Python (red team 10, H1: a magic atop
    a class's cell cost E302, "expected 2 blank lines"). Indented ones
    and assignments stay statements: a comment there could empty a block
    or leave a name undefined."""
    text = line.text
    if not line.rewritten or text[:1].isspace():
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
        return "# " + text
    return text


def _program(cells: list[_Cell]) -> LintText:
    """Every Python cell that compiles, in order, as one program."""
    texts: list[str] = []
    origins: list[tuple[int, int] | None] = []
    kit: set[int] = set()
    rewritten: set[int] = set()
    hoisted = _hoisted(cells)
    if hoisted:
        cells = [_Cell(0, hoisted, False, False, ast.Module([], []))] + [
            _without(cell) for cell in cells]
    for cell in cells:
        if cell.tree is None or cell.lines is None:
            continue
        lines = list(cell.lines)
        while lines and not lines[0].text.strip():
            lines.pop(0)
        while lines and not lines[-1].text.strip():
            lines.pop()
        if not lines:
            continue
        if texts:
            texts += ["", ""]
            origins += [None, None]
        for line in lines:
            texts.append(as_linted(line))
            origins.append((line.cell or cell.number, line.line))
            if cell.kit:
                kit.add(len(texts))
            if line.rewritten:
                rewritten.add(len(texts))
    return LintText("".join(text + "\n" for text in texts), tuple(origins),
                    frozenset(kit), frozenset(rewritten))


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class _Statement:
    """One top-level statement of a cell, as the loader's rule sees it.

    ``binds``: the global names it may bind, rebind or unbind when the
    kernel runs it (assignment, ``for``, ``with ... as``, ``except ... as``,
    ``import``, ``def``, ``class``, ``del``, a walrus, a ``match``
    capture; in any of its blocks), and the names whose object it changes
    through an attribute or item target (``CONFIG["x"] = 1``). ``kills``:
    the names it surely binds anew whatever runs (a plain top-level
    binding that does not read the name), so an earlier binding cannot
    reach past it. ``now``: the global names it may read when it runs;
    ``later``: those a definition's body reads when called.
    """

    number: int
    node: ast.stmt
    lines: list[KernelLine]
    binds: frozenset[str]
    kills: frozenset[str]
    now: frozenset[str]
    later: frozenset[str]
    #: names it may bind in a way the grader cannot know, and why
    unknown: frozenset[str] = frozenset()
    why: str = ""


def _inside(node: ast.AST) -> list[ast.AST]:
    """The parts of ``node`` run in the global scope when it runs: no
    function body, no class body, no comprehension's own scope (their
    header parts that run at once are kept)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        return [*node.decorator_list, *args.defaults,
                *[d for d in args.kw_defaults if d is not None],
                *[a.annotation for a in (*args.posonlyargs, *args.args,
                                         *args.kwonlyargs, args.vararg,
                                         args.kwarg)
                  if a is not None and a.annotation is not None],
                *([node.returns] if node.returns else [])]
    if isinstance(node, ast.Lambda):
        return [*node.args.defaults,
                *[d for d in node.args.kw_defaults if d is not None]]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    if isinstance(node, _COMPREHENSIONS):
        return [node.generators[0].iter]
    return list(ast.iter_child_nodes(node))


def _target_base(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _global_effects(node: ast.stmt) -> tuple[set[str], set[str]]:
    """The global names a top-level statement may bind or change, and
    those it may read, when the kernel runs it (see :class:`_Statement`).
    A walrus inside a comprehension binds in the cell's scope, as in
    Python; everything else inside a nested scope is that scope's."""
    binds: set[str] = set()
    reads: set[str] = set()
    pending: list[ast.AST] = [node]
    while pending:
        item = pending.pop()
        if isinstance(item, _DEFINITIONS):
            binds.add(item.name)
        elif isinstance(item, (ast.Import, ast.ImportFrom)):
            binds |= {(alias.asname or alias.name).split(".")[0]
                      for alias in item.names if alias.name != "*"}
        elif isinstance(item, ast.ExceptHandler) and item.name:
            binds.add(item.name)
        elif isinstance(item, (ast.MatchAs, ast.MatchStar)) and item.name:
            binds.add(item.name)
        elif isinstance(item, ast.MatchMapping) and item.rest:
            binds.add(item.rest)
        elif isinstance(item, ast.Name):
            (reads if isinstance(item.ctx, ast.Load) else binds).add(item.id)
        elif isinstance(item, (ast.Attribute, ast.Subscript)) and \
                not isinstance(item.ctx, ast.Load):
            base = _target_base(item)
            if base:
                binds.add(base)
        if isinstance(item, ast.ClassDef) and item is not node:
            reads |= _class_body_reads(item)
        if isinstance(item, (*_COMPREHENSIONS, ast.Lambda)):
            reads |= _loaded_names(item) - _own_names(item)
            binds |= {n.target.id for n in ast.walk(item)
                      if isinstance(n, ast.NamedExpr)
                      and isinstance(n.target, ast.Name)}
        if isinstance(item, ast.AugAssign):
            base = _target_base(item.target)
            if base:
                reads.add(base)
        pending.extend(_inside(item))
    if isinstance(node, ast.ClassDef):
        reads |= _class_body_reads(node)
    return binds, reads


def _own_names(node: ast.AST) -> set[str]:
    """The names a lambda or a comprehension binds in its own scope (its
    parameters, its loop targets): read there, they are not globals."""
    if isinstance(node, ast.Lambda):
        args = node.args
        return {a.arg for a in (*args.posonlyargs, *args.args,
                                *args.kwonlyargs, args.vararg, args.kwarg)
                if a is not None}
    return {n.id for generator in getattr(node, "generators", [])
            for n in ast.walk(generator.target) if isinstance(n, ast.Name)}


def may_change(node: ast.stmt) -> tuple[set[str], set[str]]:
    """The global names a top-level statement may bind, rebind, unbind
    or change through an attribute or item target when it runs (in any
    of its blocks), and the global names it may read (see
    :class:`_Statement`)."""
    return _global_effects(node)


def _class_body_reads(node: ast.ClassDef) -> set[str]:
    """The names a class body reads while the class is made (its
    statements, its methods' decorators and defaults; not their bodies)."""
    reads: set[str] = set()
    for statement in node.body:
        reads |= _global_effects(statement)[1]
    return reads


def _kills(node: ast.stmt, reads: set[str]) -> set[str]:
    """The names ``node`` surely binds anew (see :class:`_Statement`)."""
    if isinstance(node, _DEFINITIONS):
        names = {node.name}
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        names = {(alias.asname or alias.name).split(".")[0]
                 for alias in node.names if alias.name != "*"}
    elif isinstance(node, ast.Assign) or (
            isinstance(node, ast.AnnAssign) and node.value is not None):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target])
        names = {target.id for target in targets
                 if isinstance(target, ast.Name)}
    else:
        return set()
    return names - reads


def _statement(number: int, node: ast.stmt,
               lines: list[KernelLine]) -> _Statement:
    binds, now = _global_effects(node)
    later = (global_names(node, [line.text for line in lines])
             if isinstance(node, _DEFINITIONS) else set())
    return _Statement(number, node, lines, frozenset(binds),
                      frozenset(_kills(node, now)), frozenset(now),
                      frozenset(later))


def _slice(program: list[_Statement], graded: set[str]) -> set[int]:
    """The statements (their indices in ``program``) that make what the
    kernel's run leaves bound to the ``graded`` names, and to every name
    a kept definition reads when called: walking back from the end, a
    statement is kept when it may bind or change a name still needed
    there; the names it reads are needed before it, and the names it
    surely binds anew are not (unless it reads them: ``class A(A)``)."""
    wanted = set(graded)
    while True:
        needed = set(wanted)
        kept: set[int] = set()
        for index in range(len(program) - 1, -1, -1):
            statement = program[index]
            if statement.binds & needed:
                kept.add(index)
                needed -= statement.kills
                needed |= statement.now
        later = set().union(*(program[i].later for i in kept)) - wanted
        if not later:
            return kept
        wanted |= later


def _unknowable(program: list[_Statement], graded: set[str]
                ) -> list[tuple[_Statement, set[str]]]:
    """The statements whose effect the grader cannot know (a magic it
    cannot model, see :func:`_module_view`) on a name the run leaves to
    ``graded`` or to their code, and those names."""
    wanted = set(graded)
    while True:
        needed = set(wanted)
        kept: set[int] = set()
        hits: list[tuple[_Statement, set[str]]] = []
        for index in range(len(program) - 1, -1, -1):
            statement = program[index]
            if statement.unknown & needed:
                hits.append((statement, statement.unknown & needed))
            if statement.binds & needed:
                kept.add(index)
                needed -= statement.kills
                needed |= statement.now
        later = set().union(*(program[i].later for i in kept)) - wanted
        if not later:
            return hits
        wanted |= later


def load_notebook(path: Path) -> SourceFile:
    """Assemble a module from a notebook's code cells, as the kernel runs
    them (see the module docstring).

    The module holds, in notebook order and verbatim, every top-level
    import (``__future__`` imports and imports of a graded name first) and
    every top-level statement the kernel runs (none after a top-level
    ``raise`` in its cell; a line magic that runs its argument as code in
    the notebook's namespace is that code, see :func:`_module_view`) whose
    run may bind or change what the kernel's run leaves bound to a graded
    name (each top-level class and function) or to a name their code
    reads, transitively (:func:`_slice`): ``if``/``try``/``with``/``for``
    blocks that bind such a name are kept whole, and an earlier definition
    a later one reads (``class A(A):``) is kept too. Other statements
    (test calls, plots, prints, training that binds nothing needed) are
    left out, so that loading the module runs no experiment; the kit's
    grading cells are left out too. Cells that do not compile are
    reported in ``cell_errors``. Raises :class:`SourceError` (one line)
    for a file that is not a notebook, not valid text, or over the size
    caps.
    """
    path = Path(path)
    cells, errors = _cells(path)
    futures: list[_Statement] = []  # first, as every cell after them saw
    imports: list[_Statement] = []  # of a graded name: first, as before
    program: list[_Statement] = []
    always: set[int] = set()  # the imports: kept where they stand
    for cell in cells:
        if cell.grading:
            continue
        if cell.unknown is not None and cell.lines:
            line = cell.lines[0]
            program.append(_Statement(
                cell.number, ast.parse("pass").body[0], [line], frozenset(),
                frozenset(), frozenset(), frozenset(), cell.unknown[0],
                cell.unknown[1]))
        if cell.tree is None or cell.lines is None:
            continue
        lines, tree, unsure = _module_view(cell)
        for index, node in enumerate(tree.body):
            if cell.stop is not None and \
                    lines[node.lineno - 1].line >= cell.stop:
                break  # refused by the compiler: the kernel stops here
            if awaits_at_top(node):
                continue  # run in the kernel's event loop: an experiment
            statement = _statement(cell.number, node, lines)
            if index in unsure:
                statement = replace(statement, unknown=unsure[index][0],
                                    why=unsure[index][1])
            if is_future(node):
                futures.append(statement)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                always.add(len(program))
                program.append(statement)
            else:
                program.append(statement)
            if always_raises(node):
                break  # the kernel runs nothing after it in this cell
    graded = {s.node.name for s in program
              if isinstance(s.node, _DEFINITIONS)}
    # An import of a graded name stands first, as before, so that the
    # student's definition, wherever it is, is what that name holds.
    for index in sorted(always):
        if program[index].binds & graded:
            imports.append(program[index])
    hoisted = {id(s) for s in imports}
    program = [s for s in program if id(s) not in hoisted]
    always = {i for i, s in enumerate(program)
              if isinstance(s.node, (ast.Import, ast.ImportFrom))}
    # A graded name is its definitions' alone: what the student wrote is
    # what is graded, never ``X = swap(X)`` or ``X.forward = f`` after it
    # (nor the kit's ``X = use_implemented(X, module.X)``, a pick the
    # grader makes itself).
    program = [s if isinstance(s.node, _DEFINITIONS) else
               replace(s, binds=s.binds - graded) for s in program]
    notes: list[str] = []
    lost: set[str] = set()
    for name in sorted(graded):
        for statement, names in _unknowable(program, {name}):
            lost.add(name)
            notes.append(
                f"cell {statement.number}, {statement.why}; "
                f"{name} reads {', '.join(sorted(names))}, whose value "
                f"after the kernel's run the grader cannot know, so "
                f"{name} is not graded (not earned)")
            break
    if lost:
        program = [s for s in program if not (
            isinstance(s.node, _DEFINITIONS) and s.node.name in lost)]
        always = {i for i, s in enumerate(program)
                  if isinstance(s.node, (ast.Import, ast.ImportFrom))}
    kept = _slice(program, graded - lost) | always

    text_lines: list[str] = []
    origins: list[tuple[int, int] | None] = []

    def append(statement: _Statement) -> None:
        lines = statement.lines
        first, last = node_span(statement.node,
                                [line.text for line in lines])
        for line in lines[first - 1:last]:
            text_lines.append(line.text)
            origins.append((statement.number, line.line))

    for statement in futures + imports:
        append(statement)
    apart = False  # a definition stands two blank lines from its neighbours
    for index in sorted(kept):
        statement = program[index]
        definition = isinstance(statement.node, _DEFINITIONS)
        if text_lines and (definition or apart):
            text_lines.extend(["", ""])
            origins.extend([None, None])
        apart = definition
        append(statement)
    text = "\n".join(text_lines) + "\n" if text_lines else ""
    return SourceFile(text=text, path=path, origins=tuple(origins),
                      cell_errors=tuple(errors), lint=_program(cells),
                      notes=tuple(notes))
