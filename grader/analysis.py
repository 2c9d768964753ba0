"""Static analysis of a task's source (trusted: the code is parsed, never
run): does it parse, where is the task's class, is it the untouched stub,
does it name a forbidden API, which statements need shape comments, and how
many statements its graded method has (for a bonus).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from grader.rubric import Assignment, Task
from grader.shapes import Statement, collect_statements
from grader.source import (SourceFile, body_without_docstring, find_class,
                           find_function, find_method, node_span)
from grader.submission import is_stub

# The kit's own packages: importing them is using the reference or grader.
KIT_PACKAGES = ("grader", "solutions")


@dataclass
class TaskAnalysis:
    """What the source says about one task, without running it."""

    task: Task
    source: SourceFile
    syntax_error: str | None = None
    span: tuple[int, int] | None = None
    stub: bool = False
    forbidden: list[str] = field(default_factory=list)
    statements: dict[str, list[Statement]] = field(default_factory=dict)
    statement_counts: dict[str, int] = field(default_factory=dict)

    @property
    def defined(self) -> bool:
        """True when the task's class or function is in the source."""
        return self.span is not None


def count_statements(function: ast.FunctionDef) -> int:
    """Statements in a function's body at any depth, docstring excluded."""
    count = 0
    for statement in body_without_docstring(function):
        count += sum(1 for node in ast.walk(statement)
                     if isinstance(node, ast.stmt))
    return count


def _docstrings(node: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    found = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.Module, ast.ClassDef, ast.FunctionDef,
                              ast.AsyncFunctionDef)) and child.body:
            first = child.body[0]
            if (isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                found.add(id(first.value))
    return found


def forbidden_uses(node: ast.AST,
                   forbidden: tuple[str, ...] | frozenset[str] = ()
                   ) -> list[str]:
    """Forbidden attention APIs or kit modules a piece of code names.

    A name, an attribute, an imported name or a string constant (e.g.
    ``getattr(F, "scaled_dot_product_attention")``) equal to a forbidden
    API counts; prose that mentions one (a docstring, a comment, a longer
    string) does not. Obfuscated names are caught when called, by the
    sandbox's tripwires.
    """
    found = []
    docstrings = _docstrings(node)
    for child in ast.walk(node):
        names: list[str] = []
        if isinstance(child, ast.Name):
            names = [child.id]
        elif isinstance(child, ast.Attribute):
            names = [child.attr]
        elif (isinstance(child, ast.Constant)
              and isinstance(child.value, str)
              and id(child) not in docstrings):
            names = [child.value.strip()]
        elif isinstance(child, ast.alias):
            names = [child.name.rsplit(".", 1)[-1]]
        for name in names:
            if name in forbidden and name not in found:
                found.append(name)
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            modules = ([a.name for a in child.names]
                       if isinstance(child, ast.Import)
                       else [child.module or ""])
            for module in modules:
                if module.split(".")[0] in KIT_PACKAGES:
                    found.append(f"import {module}")
    return found


def analyse(assignment: Assignment, task: Task,
            source: SourceFile) -> TaskAnalysis:
    """Everything static about one task."""
    result = TaskAnalysis(task=task, source=source)
    try:
        tree = source.parse()
    except SyntaxError as exc:
        where = source.where(exc.lineno or 0)
        result.syntax_error = f"SyntaxError at {where}: {exc.msg}"
        return result
    node = find_class(tree, task.target) or find_function(tree,
                                                          task.target)
    if node is None:
        return result
    result.span = node_span(node, source.lines)
    result.stub = is_stub(source, task.target) is True
    names = assignment.forbidden_names
    result.forbidden = forbidden_uses(node, names)
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            result.forbidden += [f for f in forbidden_uses(statement, names)
                                 if f.startswith("import ")]
        elif (isinstance(statement, (ast.FunctionDef, ast.ClassDef))
              and statement is not node and statement.name in used):
            # A module-level helper the task's code calls.
            result.forbidden += [f for f in forbidden_uses(statement, names)
                                 if f not in result.forbidden]
    for item in assignment.items_of(task.id):
        if not item.method:
            continue
        method = (find_method(node, item.method)
                  if isinstance(node, ast.ClassDef) else node)
        if method is None:
            continue
        result.statement_counts[item.method] = count_statements(method)
        if item.kind == "shapes":
            class_name = (task.target if isinstance(node, ast.ClassDef)
                          else None)
            result.statements[item.method] = collect_statements(
                source, class_name, item.method)
    return result
