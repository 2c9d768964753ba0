"""The student stub of a reference solution: every ``### BEGIN SOLUTION``
... ``### END SOLUTION`` block becomes ``raise NotImplementedError``."""
from __future__ import annotations

import ast
import re

from solutions.paths import BuildError

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
_TASK_HEADER = re.compile(r"#\s*(Task\s+\d+(?:\.\d+)?)\b")
MAX_LINE = 79


def _functions_by_line(tree: ast.Module) -> dict[int, str]:
    """Map each line inside a function to its qualified name."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, ast.FunctionDef):
                    assert child.end_lineno is not None  # set by ast.parse
                    for line in range(child.lineno, child.end_lineno + 1):
                        names[line] = name
                visit(child, name + ".")

    visit(tree, "")
    return names


def _raise_lines(indent: str, label: str) -> list[str]:
    line = f'{indent}raise NotImplementedError("{label}")'
    if len(line) <= MAX_LINE:
        return [line]
    return [f"{indent}raise NotImplementedError(",
            f'{indent}    "{label}")']


def make_stub(text: str, name: str = "<reference>") -> str:
    """Replace every solution block with ``raise NotImplementedError``.

    The message names the task (from the nearest ``# Task N.M`` comment
    above the block) and the function, e.g. ``"Task 1.2:
    SelfAttention.forward"``.
    """
    functions = _functions_by_line(ast.parse(text))
    out: list[str] = []
    task = None
    begin_line = None
    for number, line in enumerate(text.split("\n"), start=1):
        header = _TASK_HEADER.search(line)
        if header and line.lstrip().startswith("#") and begin_line is None:
            task = header.group(1)
        if BEGIN in line:
            if begin_line is not None:
                raise BuildError(f"{name}:{number}: nested {BEGIN}")
            begin_line = number
            where = functions.get(number)
            if where is None or task is None:
                raise BuildError(f"{name}:{number}: a solution block must "
                                 f"be inside a function, below a "
                                 f"'# Task N.M' header")
            indent = line[:len(line) - len(line.lstrip())]
            out.extend(_raise_lines(indent, f"{task}: {where}"))
        elif END in line:
            if begin_line is None:
                raise BuildError(f"{name}:{number}: {END} without {BEGIN}")
            begin_line = None
        elif begin_line is None:
            out.append(line)
    if begin_line is not None:
        raise BuildError(f"{name}:{begin_line}: {BEGIN} without {END}")
    return "\n".join(out)


def solution_blocks(text: str) -> list[str]:
    """The text of every solution block (used to check nothing leaks)."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in text.split("\n"):
        if BEGIN in line:
            current = []
        elif END in line and current is not None:
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks
