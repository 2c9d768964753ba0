"""Finding a submission and the source each task is graded from.

``PATH`` may be a Python file of any name, a notebook, or a student
repository folder. Each task is graded from the first candidate source that
*implements* the task's class (defines it with something other than the
untouched stub): for a notebook, the notebook first, then the student module
beside it (``transformer_lm/<module>.py`` next to the notebook or above it),
which the notebook may import; for a folder, its notebooks, then its module.
When no candidate implements a task, the first that defines it is graded
(and earns 0, "not implemented yet").
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.rubric import Assignment, assignments, get_assignment
from grader.source import (SourceError, SourceFile, find_class,
                           find_function, load_source)
from transformer_lm.notebook import marked_regions_only_raise

MAX_NOTEBOOKS = 20


class SubmissionError(Exception):
    """The path cannot be graded (missing, unreadable, nothing in it)."""


@dataclass(frozen=True)
class Submission:
    """A located submission: its assignment and each task's source."""

    path: Path
    assignment: Assignment
    sources: dict[str, SourceFile]
    notes: tuple[str, ...] = field(default_factory=tuple)


def _defines(text: str, name: str) -> bool:
    return re.search(rf"^\s*(class|def)\s+{re.escape(name)}\b", text,
                     re.MULTILINE) is not None


def is_stub(source: SourceFile, name: str) -> bool | None:
    """Whether ``name`` is the untouched stub.

    True when every student region (between the YOUR CODE markers) of
    ``name`` only raises NotImplementedError; False when the student wrote
    something, or removed every marker; None when ``name`` is not defined
    or the source does not parse (which counts as the student's work). The
    notebook's :func:`transformer_lm.notebook.use_implemented` applies the
    same rule.
    """
    try:
        tree = source.parse()
    except SyntaxError:
        return None
    node = find_class(tree, name) or find_function(tree, name)
    if node is None:
        return None
    functions = [node] if isinstance(node, ast.FunctionDef) else [
        n for n in node.body if isinstance(n, ast.FunctionDef)]
    verdicts = [marked_regions_only_raise(f, source.lines)
                for f in functions]
    verdicts = [v for v in verdicts if v is not None]
    return bool(verdicts) and all(verdicts)


def _detect(candidates: list[SourceFile]) -> Assignment:
    """The assignment the sources implement best.

    Ranked by the share of its graded names that some source implements
    (not the untouched stub), then by the share that some source defines.
    """
    ranking = []
    for assignment in assignments():
        names = assignment.signature
        defined = [n for n in names
                   if any(_defines(c.text, n) for c in candidates)]
        implemented = [n for n in defined if any(
            _defines(c.text, n) and is_stub(c, n) is not True
            for c in candidates)]
        ranking.append((len(implemented) / len(names),
                        len(defined) / len(names), assignment))
    ranking.sort(key=lambda r: r[:2], reverse=True)
    best = ranking[0] if ranking else None
    if best is None or best[1] == 0:
        names = "; ".join(f"{a.id}: {', '.join(a.signature)}"
                          for a in assignments())
        raise SubmissionError(
            f"no known assignment found: the submission defines none of "
            f"the graded classes or functions ({names}); use --assignment "
            f"to choose one")
    if len(ranking) > 1 and ranking[1][:2] == best[:2]:
        raise SubmissionError(
            f"the submission fits {best[2].id} and {ranking[1][2].id} "
            f"equally; choose one with --assignment")
    return best[2]


def _nearby_modules(start: Path, module: str) -> list[Path]:
    found = []
    for folder in [start, *list(start.parents)[:2]]:
        for candidate in (folder / "transformer_lm" / f"{module}.py",
                          folder / f"{module}.py"):
            if candidate.is_file() and candidate not in found:
                found.append(candidate)
    return found


def _folder_candidates(folder: Path, module: str) -> list[Path]:
    notebooks = sorted(
        p for p in folder.rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts
        and not any(part.startswith(".") for part in
                    p.relative_to(folder).parts))[:MAX_NOTEBOOKS]
    modules = sorted(p for p in folder.rglob(f"{module}.py")
                     if not any(part.startswith(".") for part in
                                p.relative_to(folder).parts))
    modules.sort(key=lambda p: (p.parent.name != "transformer_lm",
                                len(p.parts)))
    return notebooks + modules


def _load_all(paths: list[Path]) -> list[SourceFile]:
    sources = []
    for path in paths:
        sources.append(load_source(path))
    return sources


def locate(path: Path, assignment_id: str | None = None) -> Submission:
    """Find the submission at ``path`` and the source of each task."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"no such file or folder: {path}")
    try:
        if path.is_dir():
            modules = {a.module for a in assignments()}
            if assignment_id:
                modules = {get_assignment(assignment_id).module}
            paths: list[Path] = []
            for module in sorted(modules):
                paths += [p for p in _folder_candidates(path, module)
                          if p not in paths]
            if not paths:
                wanted = " or ".join(f"transformer_lm/{m}.py"
                                     for m in sorted(modules))
                raise SubmissionError(f"no submission found in {path}: "
                                      f"expected {wanted} or a notebook")
            candidates = _load_all(paths)
        elif path.is_file():
            primary = load_source(path)
            candidates = [primary]
            if primary.is_notebook:
                names = ([get_assignment(assignment_id).module]
                         if assignment_id else
                         [a.module for a in assignments()])
                for module in names:
                    candidates += [load_source(p) for p in
                                   _nearby_modules(path.parent, module)]
        else:
            raise SubmissionError(f"{path} is neither a file nor a folder")
    except SourceError as exc:
        raise SubmissionError(str(exc)) from exc

    assignment = (get_assignment(assignment_id) if assignment_id
                  else _detect(candidates))
    if path.is_dir():
        module_name = f"{assignment.module}.py"
        candidates = [c for c in candidates if c.is_notebook
                      or c.path.name == module_name]
    sources: dict[str, SourceFile] = {}
    notes: list[str] = []
    for task in assignment.tasks:
        chosen = _choose(candidates, task.target)
        sources[task.id] = chosen
        if len(candidates) > 1:
            notes.append(f"{task.id} ({task.target}) graded from "
                         f"{_display(chosen.path, path)}")
    return Submission(path=path, assignment=assignment, sources=sources,
                      notes=tuple(notes))


def _choose(candidates: list[SourceFile], target: str) -> SourceFile:
    defining = [c for c in candidates if _defines(c.text, target)]
    for candidate in defining:
        if is_stub(candidate, target) is not True:
            return candidate
    if defining:
        return defining[0]
    return candidates[0]


def _display(path: Path, root: Path) -> str:
    try:
        base = root if root.is_dir() else root.parent
        return str(path.relative_to(base))
    except ValueError:
        return str(path)
