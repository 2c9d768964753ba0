"""Build each assignment's notebook from its template and reference.

Template: ``solutions/notebooks/<assignment>.md``. Cells are separated by
directive lines ``<!-- KIND key=value ... -->``:

* ``markdown``: a markdown cell (its text follows);
* ``readonly id=ID``: a locked code cell (its code follows);
* ``solution id=ID source=NAME``: a solution cell holding the reference's
  class or function ``NAME`` verbatim, solution markers included (nbgrader
  replaces the solution blocks in the release); ``NAME`` must have one, or
  nbgrader would replace the whole cell by its placeholder;
* ``given id=ID source=NAME``: an ordinary code cell holding the
  reference's ``NAME`` verbatim, which the release ships whole (given code
  a student may read or replace); ``NAME`` must have no solution block;
* ``test item=ITEM``: an autograded test cell for rubric item ``ITEM``,
  worth the item's points, filled in outside the kernel by ``python -m grader
  nbgrader`` (:mod:`grader.routes.nbgrader`); in a kernel its hidden part
  counts 0; nothing follows it in the template;
* ``answer id=ID points=N``: a manually graded markdown answer cell whose
  text (the model answer) follows.

From it this module writes the nbgrader *source* assignment
``solutions/source/<assignment>/`` (the notebook with solutions, a copy
of the student package and the assignment's public tests) and the
*release* ``assignment/<assignment>/``, which it obtains by running
``nbgrader generate_assignment`` in a scratch course directory, so the
committed release is what nbgrader produces.
"""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path

from grader.errors import GraderError
from grader.locate.source import GRADING_CELL_MARK, node_span
from grader.output.notebook import cell_points
from grader.rubric import Assignment, assignments
from solutions.paths import (PACKAGE, ROOT, SOLUTIONS, Generated,
                             public_test_files)
from solutions.stubs import BEGIN as BEGIN_SOLUTION

TEMPLATES = SOLUTIONS / "notebooks"
SOURCE = SOLUTIONS / "source"
RELEASE = ROOT / "assignment"
_DIRECTIVE = re.compile(r"^<!--\s*(\w+)((?:\s+\w+=\S+)*)\s*-->\s*$")


def package_files(assignment_id: str) -> tuple[str, ...]:
    """The files of the student package the release ships: the grader's
    one definition (:attr:`grader.plugin.Plugin.package_files`), which is
    also all that a worker grading the assignment may read of it."""
    from grader.plugin import load

    return load(assignment_id).package_files


class TemplateError(GraderError):
    """A template that cannot be turned into a notebook."""


@dataclass
class CellSpec:
    """One cell of a template."""

    kind: str
    options: dict[str, str] = field(default_factory=dict)
    body: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The cell's text without leading or trailing blank lines."""
        return "\n".join(self.body).strip("\n")


def parse_template(text: str) -> list[CellSpec]:
    """Split a template into cell specifications."""
    cells: list[CellSpec] = []
    for number, line in enumerate(text.split("\n"), start=1):
        match = _DIRECTIVE.match(line)
        if match:
            options = dict(pair.split("=", 1)
                           for pair in match.group(2).split())
            cells.append(CellSpec(match.group(1), options))
        elif cells:
            cells[-1].body.append(line)
        elif line.strip():
            raise TemplateError(f"line {number}: text before the first "
                                f"cell directive")
    return cells


def definition_source(reference: str, name: str) -> str:
    """The verbatim source of top-level class or function ``name``."""
    tree = ast.parse(reference)
    lines = reference.split("\n")
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and \
                node.name == name:
            first, last = node_span(node, lines)
            return "\n".join(lines[first - 1:last])
    raise TemplateError(f"the reference defines no {name}")


def _definition_cell(reference: str, spec: CellSpec) -> str:
    """The source of a ``solution`` or ``given`` cell. A solution cell
    without a solution block would be released as nbgrader's bare
    placeholder, and a given cell with one would lose its code: both are
    template errors."""
    name = spec.options["source"]
    source = definition_source(reference, name)
    marked = BEGIN_SOLUTION in source
    if spec.kind == "solution" and not marked:
        raise TemplateError(
            f"solution cell {name} has no {BEGIN_SOLUTION} block: nbgrader "
            f"would release the whole cell as its placeholder; make it a "
            f"`given` cell")
    if spec.kind == "given" and marked:
        raise TemplateError(
            f"given cell {name} holds a {BEGIN_SOLUTION} block: make it a "
            f"`solution` cell")
    return source


def _source_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + [lines[-1]]


def _nbgrader(grade_id: str, *, grade: bool = False, solution: bool = False,
              locked: bool = False, points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked,
            "schema_version": 3, "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def _test_source(assignment: Assignment, item_id: str) -> str:
    """An autograded cell: comments for the student; its hidden part,
    run only if a kernel executes the cell (plain ``nbgrader
    autograde``), says where the points come from and counts 0. The
    points are filled in outside the kernel by ``python -m grader
    nbgrader`` (:mod:`grader.routes.nbgrader`)."""
    item = assignment.item(item_id)
    worth = (f"+{item.points:g} bonus point{'s' if item.points != 1 else ''}"
             f", extra credit beyond the {assignment.max_score:g}"
             if item.kind == "bonus" else
             f"{item.points:g} point{'s' if item.points != 1 else ''}")
    return "\n".join([
        f"# Autograded: {item_id} ({worth}): {item.title}.",
        GRADING_CELL_MARK,
        "# Filled in by the kit's grader, outside the notebook, when your",
        "# work is collected. Check it yourself in a terminal with:",
        f"#     python -m grader grade . --assignment {assignment.id} "
        f"--public-only",
        "### BEGIN HIDDEN TESTS",
        f'print("{item_id} is graded outside the notebook by the kit\'s "',
        '      "grader (python -m grader nbgrader); run in a kernel, "',
        '      "this cell counts 0.")',
        "0.0",
        "### END HIDDEN TESTS"])


def build_notebook(assignment: Assignment, template: str,
                   reference: str) -> dict:
    """The nbgrader source notebook of ``assignment`` as a JSON object."""
    cells = []
    used_ids: set[str] = set()
    for index, spec in enumerate(parse_template(template)):
        grade_id = spec.options.get("id") or spec.options.get(
            "item", f"cell{index}").replace(".", "_")
        if spec.kind != "markdown":
            if grade_id in used_ids:
                raise TemplateError(f"duplicate cell id {grade_id}")
            used_ids.add(grade_id)
        cell: dict = {"id": grade_id if spec.kind != "markdown"
                      else f"md{index}", "metadata": {}}
        if spec.kind == "markdown":
            cell.update(cell_type="markdown", source=spec.text)
        elif spec.kind == "readonly":
            cell.update(cell_type="code", source=spec.text,
                        metadata=_nbgrader(grade_id, locked=True))
        elif spec.kind in ("solution", "given"):
            cell.update(cell_type="code",
                        source=_definition_cell(reference, spec))
            if spec.kind == "solution":
                cell.update(metadata=_nbgrader(grade_id, solution=True))
        elif spec.kind == "test":
            item = assignment.item(spec.options["item"])
            cell.update(cell_type="code",
                        source=_test_source(assignment, item.id),
                        metadata=_nbgrader(grade_id, grade=True, locked=True,
                                           points=cell_points(assignment,
                                                              item.id)))
        elif spec.kind == "answer":
            cell.update(cell_type="markdown",
                        source="### BEGIN SOLUTION\n" + spec.text
                        + "\n### END SOLUTION",
                        metadata=_nbgrader(grade_id, grade=True,
                                           solution=True,
                                           points=float(
                                               spec.options["points"])))
        else:
            raise TemplateError(f"unknown cell kind {spec.kind!r}")
        if cell["cell_type"] == "code":
            cell.update(execution_count=None, outputs=[])
        cell["source"] = _source_lines(cell["source"])
        cells.append(cell)
    return {"cells": cells,
            "metadata": {"kernelspec": {"display_name": "Python 3",
                                        "language": "python",
                                        "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def notebook_text(notebook: dict) -> str:
    """JSON text as nbformat writes it."""
    return json.dumps(notebook, indent=1, sort_keys=True,
                      ensure_ascii=False) + "\n"


def source_files(assignment: Assignment) -> dict[Path, str]:
    """The nbgrader source assignment: notebook, student package and the
    assignment's own public tests (``tests/public/``, so that ``python -m
    pytest tests/public`` in the released folder runs them)."""
    template = (TEMPLATES / f"{assignment.id}.md").read_text(
        encoding="utf-8")
    reference = (SOLUTIONS / f"{assignment.module}.py").read_text(
        encoding="utf-8")
    folder = SOURCE / assignment.id
    files = {folder / assignment.notebook: notebook_text(
        build_notebook(assignment, template, reference))}
    for name in package_files(assignment.id):
        files[folder / "transformer_lm" / name] = (
            PACKAGE / name).read_text(encoding="utf-8")
    for relative, data in public_test_files(assignment.public_tests).items():
        files[folder / relative] = data.decode("utf-8")
    return files


@cache
def _release(assignment_id: str, sources: tuple[tuple[str, str], ...]
             ) -> tuple[tuple[str, str], ...]:
    """Run ``nbgrader generate_assignment`` on the given source files."""
    with tempfile.TemporaryDirectory(prefix="nbgrader-build-") as tmp:
        course = Path(tmp)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        for relative, text in sources:
            path = course / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        result = subprocess.run(
            [sys.executable, "-m", "nbgrader", "generate_assignment",
             assignment_id, "--force", "--log-level=WARN"],
            cwd=course, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment failed: "
                               f"{result.stderr[-3000:]}")
        released = course / "assignment" / assignment_id
        return tuple(sorted(
            (str(path.relative_to(released)), path.read_text("utf-8"))
            for path in released.rglob("*") if path.is_file()))


def release_files(assignment: Assignment) -> dict[Path, str]:
    """The release nbgrader makes from the current source files."""
    sources = tuple(sorted((str(path.relative_to(ROOT)), text)
                           for path, text in source_files(assignment)
                           .items()))
    folder = RELEASE / assignment.id
    return {folder / relative: text for relative, text in
            _release(assignment.id, sources)}


def _source_file(assignment: Assignment, path: Path) -> str:
    return source_files(assignment)[path]


def _release_file(assignment: Assignment, path: Path) -> str:
    return release_files(assignment)[path]


def generated_files() -> list[Generated]:
    """Source and release files of every assignment with a template."""
    targets = []
    for assignment in assignments():
        if not (TEMPLATES / f"{assignment.id}.md").is_file():
            continue
        for path in source_files(assignment):
            targets.append(Generated(
                path, partial(_source_file, assignment, path)))
        for path in release_files(assignment):
            targets.append(Generated(
                path, partial(_release_file, assignment, path)))
    return targets
