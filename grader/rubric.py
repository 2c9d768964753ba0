"""The rubric as data: assignments, tasks, items, diagnoses and dimensions.

Each assignment is a folder ``grader/assignments/<id>/`` holding
``rubric.toml`` (this module reads it), the grader's own reference and cases
(``cases.py``), known-mistake variants (``mistakes.py``) and the pytest
checks (``checks/test_*.py``). Adding an assignment is adding such a folder.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from grader.errors import RubricError

ASSIGNMENTS_DIR = Path(__file__).resolve().parent / "assignments"
ITEM_KINDS = ("checks", "pep8", "shapes", "bonus")
#: The item kinds that take points for style (PEP-8, shape comments).
STYLE_KINDS = ("pep8", "shapes")
#: The share of a task's points that style penalties may take at most
#: (docs/rubric-decisions.md, "Proportionate style penalties").
MAX_STYLE_SHARE = 0.5
#: The bracket pairs a shape notation may use.
BRACKET_PAIRS = ("[]", "()")


@dataclass(frozen=True)
class Task:
    """A coding task: one class or function of the student module."""

    id: str
    title: str
    target: str
    max_score: float
    dimensions: tuple[str, ...] = ()
    #: Sizes every run of the task has, whatever the size set (a
    #: single-head task: ``num_heads`` = 1), as (name, size) pairs.
    sizes: tuple[tuple[str, int], ...] = ()
    #: Other top-level classes of the submission judged with this task
    #: (for PEP-8, shapes and the bonus) wherever they run: code the
    #: target runs beneath it, not a task of its own.
    companions: tuple[str, ...] = ()
    #: The dimensions of the first argument (after ``self``) of methods of
    #: the target, as (method, names) pairs (the ``inputs`` table): the
    #: lines that run inside a call of such a method are verified at the
    #: sizes that call's input has (docs/shape-comments.md, "A method's
    #: comments describe its own input").
    inputs: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Item:
    """A rubric item: an id, its points and how they are earned."""

    id: str
    task: str
    kind: str
    points: float
    title: str
    parts: dict[str, float] = field(default_factory=dict)
    # Plain words for a part in a report ("your output with the scaling
    # removed"), instead of its id.
    part_words: dict[str, str] = field(default_factory=dict)
    combine: str = "sum"
    method: str | None = None
    max_statements: int | None = None
    requires: str | None = None

    @property
    def max_score(self) -> float:
        """Points available: positive items only (penalties and bonus: 0)."""
        return self.points if self.kind == "checks" else 0.0


@dataclass(frozen=True)
class Notation:
    """One way of writing a shape in a comment: a bracket pair and,
    optionally, a label that must come before it in the comment (the
    book's ``# Shape: (b, num_tokens, d_out)``)."""

    brackets: str
    label: str | None = None


#: The notation of an assignment whose rubric names none: square brackets,
#: anywhere in the comment.
DEFAULT_NOTATION = (Notation("[]"),)
#: The example shape a message shows when the rubric gives none.
DEFAULT_SHAPE_EXAMPLE = "[batch_size, seq_len, hidden]"


@dataclass(frozen=True)
class Assignment:
    """One homework assignment and everything the grader knows about it."""

    id: str
    title: str
    module: str
    notebook: str
    max_score: float
    signature: tuple[str, ...]
    tasks: tuple[Task, ...]
    items: tuple[Item, ...]
    diagnoses: dict[str, str]
    dimensions: dict[str, tuple[str, ...]]
    size_sets: tuple[dict[str, int], ...]
    folder: Path
    identities: tuple[tuple[str, str, str], ...] = ()
    # The folder of its public tests, tests/public/<public_tests>/ ("" when
    # it has none); a homework ships that folder only.
    public_tests: str = ""
    forbidden: dict = field(default_factory=dict)
    # What the sandbox worker watches and reports of library classes (the
    # ``[sandbox]`` table): ``watched`` and ``numbers``.
    sandbox: dict = field(default_factory=dict)
    notation: tuple[Notation, ...] = DEFAULT_NOTATION
    shape_example: str = DEFAULT_SHAPE_EXAMPLE

    @property
    def forbidden_names(self) -> frozenset[str]:
        """Names whose use in a submission's source is forbidden: the
        listed ``names`` and the last part of every forbidden callable and
        class."""
        rules = self.forbidden
        dotted = list(rules.get("callables", [])) + list(
            rules.get("classes", []))
        return frozenset(list(rules.get("names", []))
                         + [d.rsplit(".", 1)[-1] for d in dotted])

    @property
    def checks_dir(self) -> Path:
        """The folder of this assignment's pytest checks."""
        return self.folder / "checks"

    def task(self, task_id: str) -> Task:
        """The task with id ``task_id``."""
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def item(self, item_id: str) -> Item:
        """The item with id ``item_id``."""
        for item in self.items:
            if item.id == item_id:
                return item
        raise KeyError(item_id)

    def items_of(self, task_id: str) -> list[Item]:
        """The items of one task, in rubric order."""
        return [item for item in self.items if item.task == task_id]


def _item(raw: dict, task_ids: set[str], diagnoses: dict) -> Item:
    try:
        item = Item(id=raw["id"], task=raw["task"], kind=raw["kind"],
                    points=float(raw["points"]), title=raw["title"],
                    parts={k: float(v) for k, v in
                           raw.get("parts", {}).items()},
                    part_words={k: str(v) for k, v in
                                raw.get("part_words", {}).items()},
                    combine=raw.get("combine", "sum"),
                    method=raw.get("method"),
                    max_statements=raw.get("max_statements"),
                    requires=raw.get("requires"))
    except KeyError as exc:
        raise RubricError(f"item {raw.get('id', '?')} has no "
                          f"{exc.args[0]!r}") from exc
    if item.task not in task_ids:
        raise RubricError(f"item {item.id} names unknown task {item.task}")
    if item.kind not in ITEM_KINDS:
        raise RubricError(f"item {item.id} has unknown kind {item.kind}")
    if item.kind == "checks":
        if not item.parts:
            raise RubricError(f"item {item.id} has no parts")
        if item.combine not in ("sum", "max"):
            raise RubricError(f"item {item.id}: combine must be sum or max")
        best = (sum(item.parts.values()) if item.combine == "sum"
                else max(item.parts.values()))
        if best != item.points:
            raise RubricError(f"item {item.id}: its parts give {best} "
                              f"points, the item says {item.points}")
    if item.kind in STYLE_KINDS and item.points > 0:
        raise RubricError(f"item {item.id}: a penalty has points <= 0")
    if item.kind == "bonus" and not (item.method and item.requires
                                     and item.max_statements):
        raise RubricError(f"item {item.id}: a bonus needs method, "
                          f"max_statements and requires")
    return item


def _public_tests(value: object, path: Path) -> str:
    """``public_tests``: one folder name under tests/public/."""
    if not isinstance(value, str) or (value and not value.isidentifier()):
        raise RubricError(f"{path}: public_tests must be the name of one "
                          f"folder under tests/public/, got {value!r}")
    return value


FORBIDDEN_KEYS = {"names": list, "callables": list, "classes": list,
                  "name_pattern": str, "modules": list, "packages": list,
                  "aten": str}


def _forbidden(raw: dict, path: Path) -> dict:
    """The ``[forbidden]`` table, validated (see grader.worker.agent)."""
    import re

    for key, value in raw.items():
        kind = FORBIDDEN_KEYS.get(key)
        if kind is None:
            raise RubricError(f"{path}: unknown key forbidden.{key}")
        if not isinstance(value, kind) or (kind is list and not all(
                isinstance(v, str) for v in value)):
            raise RubricError(f"{path}: forbidden.{key} must be a "
                              f"{kind.__name__} of strings")
    for key in ("name_pattern", "aten"):
        if key in raw:
            try:
                re.compile(raw[key])
            except re.error as exc:
                raise RubricError(f"{path}: forbidden.{key} is not a "
                                  f"regular expression: {exc}") from exc
    return dict(raw)


def _sandbox(raw: object, path: Path) -> dict:
    """The ``[sandbox]`` table, validated: ``watched``, the dotted names
    of library classes or modules whose replaced entries are flagged
    "patched"; ``numbers``, for a dotted class name, the attributes whose
    numbers a ``describe`` probe reports of a child module of that class
    (see grader.worker.agent)."""
    if not isinstance(raw, dict) or set(raw) - {"watched", "numbers"}:
        raise RubricError(f"{path}: the sandbox table has only watched and "
                          f"numbers")
    watched = raw.get("watched", [])
    numbers = raw.get("numbers", {})
    if not (isinstance(watched, list)
            and all(isinstance(w, str) for w in watched)):
        raise RubricError(f"{path}: sandbox.watched must be a list of "
                          f"dotted names")
    reserved = {"type", "is_linear", "in_features", "out_features", "bias"}
    if not (isinstance(numbers, dict) and all(
            isinstance(names, list) and all(
                isinstance(n, str) and n.isidentifier() and n not in reserved
                for n in names) for names in numbers.values())):
        raise RubricError(f"{path}: sandbox.numbers must map dotted class "
                          f"names to lists of attribute names (not "
                          f"{', '.join(sorted(reserved))})")
    return {"watched": list(watched),
            "numbers": {str(k): list(v) for k, v in numbers.items()}}


def _notation(raw: object, path: Path) -> tuple[Notation, ...]:
    """The ``[[shapes.notation]]`` tables, validated."""
    if raw is None:
        return DEFAULT_NOTATION
    if not isinstance(raw, list) or not raw:
        raise RubricError(f"{path}: shapes.notation must be a non-empty "
                          f"list of tables")
    found = []
    for entry in raw:
        if not isinstance(entry, dict) or set(entry) - {"brackets",
                                                        "label"}:
            raise RubricError(f"{path}: a shapes.notation table has "
                              f"brackets and, optionally, a label")
        brackets, label = entry.get("brackets"), entry.get("label")
        if brackets not in BRACKET_PAIRS:
            raise RubricError(f"{path}: shapes.notation brackets must be "
                              f"one of {', '.join(BRACKET_PAIRS)}")
        if label is not None and not (isinstance(label, str)
                                      and label.strip()):
            raise RubricError(f"{path}: a shapes.notation label must be "
                              f"non-empty text")
        found.append(Notation(brackets, label.strip() if label else None))
    if len({n.brackets for n in found}) != len(found):
        raise RubricError(f"{path}: shapes.notation names a bracket pair "
                          f"twice")
    return tuple(found)


def _check_style_share(tasks: tuple[Task, ...], items: tuple[Item, ...],
                       path: Path) -> None:
    """No task may lose more than :data:`MAX_STYLE_SHARE` of its points
    to style: a correct task with every style fault keeps at least half
    of them."""
    for task in tasks:
        style = -sum(i.points for i in items
                     if i.task == task.id and i.kind in STYLE_KINDS)
        if style > MAX_STYLE_SHARE * task.max_score:
            raise RubricError(
                f"{path}: the style penalties of {task.id} take "
                f"{style:g} of its {task.max_score:g} points; at most "
                f"{MAX_STYLE_SHARE * task.max_score:g} (half) may be lost "
                f"to style")


def load_assignment(folder: Path) -> Assignment:
    """Read and validate ``folder/rubric.toml``: a :class:`RubricError`
    (one line) for a table that is missing a key or has one of the wrong
    type."""
    path = folder / "rubric.toml"
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RubricError(f"cannot read {path}: {exc}") from exc
    try:
        return _assignment(raw, folder, path)
    except KeyError as exc:
        raise RubricError(f"{path}: rubric.toml has no {exc}") from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise RubricError(f"{path}: rubric.toml is malformed: "
                          f"{type(exc).__name__}: {exc}") from exc


def _fixed_sizes(raw: dict) -> tuple[tuple[str, int], ...]:
    """A task's ``sizes`` table: dimension name -> a positive int."""
    fixed = []
    for name, size in dict(raw).items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a task's sizes must be positive integers; "
                             f"{name} = {size!r}")
        fixed.append((str(name), size))
    return tuple(fixed)


def _inputs(raw: dict, names: dict[str, tuple[str, ...]]
            ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A task's ``inputs`` table: method name -> the dimension names of
    its first argument, each a dimension of ``[shapes.dimensions]``."""
    found = []
    for method, dims in dict(raw).items():
        if not (isinstance(dims, list) and dims
                and all(isinstance(d, str) and d in names for d in dims)):
            raise ValueError(f"a task's inputs give each method a list of "
                             f"dimension names of [shapes.dimensions]; "
                             f"{method} = {dims!r}")
        found.append((str(method), tuple(dims)))
    return tuple(found)


def _assignment(raw: dict, folder: Path, path: Path) -> Assignment:
    names = raw.get("shapes", {}).get("dimensions", {})
    tasks = tuple(Task(id=t["id"], title=t["title"], target=t["target"],
                       max_score=float(t["max_score"]),
                       dimensions=tuple(t.get("dimensions", ())),
                       sizes=_fixed_sizes(t.get("sizes", {})),
                       companions=tuple(map(str, t.get("companions", ()))),
                       inputs=_inputs(t.get("inputs", {}), names))
                  for t in raw["tasks"])
    task_ids = {t.id for t in tasks}
    diagnoses = dict(raw.get("diagnoses", {}))
    items = tuple(_item(i, task_ids, diagnoses) for i in raw["items"])
    if len({i.id for i in items}) != len(items):
        raise RubricError(f"{path}: duplicate item ids")
    if sum(t.max_score for t in tasks) != float(raw["max_score"]):
        raise RubricError(f"{path}: task maxima do not add up to max_score")
    for task in tasks:
        available = sum(i.max_score for i in items if i.task == task.id)
        if available != task.max_score:
            raise RubricError(f"{path}: the items of {task.id} give "
                              f"{available} points, the task says "
                              f"{task.max_score}")
    _check_style_share(tasks, items, path)
    shapes = raw.get("shapes", {})
    return Assignment(
        id=raw["id"], title=raw["title"], module=raw["module"],
        notebook=raw["notebook"], max_score=float(raw["max_score"]),
        signature=tuple(raw.get("signature", ())), tasks=tasks, items=items,
        diagnoses=diagnoses,
        dimensions={k: tuple(v) for k, v in
                    shapes.get("dimensions", {}).items()},
        size_sets=tuple(dict(s) for s in shapes.get("size_sets", ())),
        folder=folder,
        identities=tuple(tuple(i) for i in shapes.get("identities", ())),
        public_tests=_public_tests(raw.get("public_tests", ""), path),
        forbidden=_forbidden(raw.get("forbidden", {}), path),
        sandbox=_sandbox(raw.get("sandbox", {}), path),
        notation=_notation(shapes.get("notation"), path),
        shape_example=str(shapes.get("example", DEFAULT_SHAPE_EXAMPLE)))


@cache
def assignments() -> tuple[Assignment, ...]:
    """Every assignment the grader knows, in folder-name order."""
    found = []
    for folder in sorted(ASSIGNMENTS_DIR.iterdir()):
        if (folder / "rubric.toml").is_file():
            found.append(load_assignment(folder))
    return tuple(found)


def get_assignment(assignment_id: str) -> Assignment:
    """The assignment with id ``assignment_id``."""
    for assignment in assignments():
        if assignment.id == assignment_id:
            return assignment
    known = ", ".join(a.id for a in assignments())
    raise RubricError(f"unknown assignment {assignment_id!r} "
                      f"(known: {known})")
