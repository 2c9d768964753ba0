"""The plug-in interface: what an assignment gives the generic grader.

Details: docs/internals.md, `grader.plugin`.
"""
from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from grader.catalog import CATALOG_FILE, Catalog, CatalogError
from grader.catalog import load as load_catalog
from grader.errors import PluginError
from grader.output.text import one_line
from grader.rubric import (ASSIGNMENTS_DIR, Assignment, RubricError,
                           load_assignment)

#: The attribute of an assignment package that holds its plug-in.
EXPORT = "PLUGIN"
#: The package whose sub-packages are the plug-ins.
PACKAGE = "grader.assignments"
#: What a plug-in id may look like (it is a Python package name).
ID_PATTERN = re.compile(r"[a-z][a-z0-9_]*\Z")

#: ``build_plan(seed, public_only, size_sets) -> Plan``.
PlanBuilder = Callable[[int, bool, tuple[dict[str, int], ...]], Any]
#: ``figures(failed item ids, runs by task id) -> [figure records]``.
FigureMaker = Callable[[set[str], dict[str, Any]], list]
#: ``twin_input(task, probe info, seed) -> grader.plan.TwinInput | None``.
TwinInputMaker = Callable[[str, Any, int], Any]
#: ``public_values() -> {file name in transformer_lm/: text}``.
PublicValues = Callable[[], dict[str, str]]
#: Files of the student package (``transformer_lm/``) that every
#: assignment's release ships, besides its own module and public values.
SHARED_PACKAGE_FILES = ("__init__.py", "notebook.py")


@dataclass(frozen=True)
class Plugin:
    """One assignment, as the generic grader sees it.

    ``id`` is the package name and the rubric's ``id``. ``build_plan``
    returns the :class:`grader.plan.Plan` of probes and trusted cases for
    a grading seed. ``reference`` is the grader's own float64 reference
    and ``mistakes`` the known mistakes, reproduced (both modules; the
    checks import them). ``figures`` draws the failing items' pictures
    (optional). ``public_values`` renders the files of public test
    values shipped to students in ``transformer_lm/`` (optional: an
    assignment may ship none); ``public_files`` names them (declared, so
    that the grader knows what the release ships without rendering them:
    :attr:`package_files`). ``twin_input`` (optional) gives a probe's
    twins fresh inputs and the trusted answers to them and to the
    probe's own input (:class:`grader.plan.TwinInput`,
    :meth:`grader.plan.Plan.assign_modes`; None for a probe it cannot
    judge so: its twin then repeats its input). The rubric, the checks,
    the stub and the forbidden APIs are data in the plug-in's folder:
    ``rubric.toml``
    (with its ``[forbidden]`` table), ``checks/test_*.py``, ``stub.py``,
    and the audit catalog of known mistakes and correct variants,
    ``audit.toml`` (:mod:`grader.catalog`; optional for grading, and left
    out of the student copies; ``python -m grader audit`` reports a
    plug-in without one).
    """

    id: str
    build_plan: PlanBuilder
    reference: ModuleType
    mistakes: ModuleType
    figures: FigureMaker | None = None
    public_values: PublicValues | None = None
    public_files: tuple[str, ...] = ()
    twin_input: TwinInputMaker | None = None
    #: The plug-in's folder; :func:`load` sets it from the package.
    folder: Path = field(default=Path(), compare=False)

    @property
    def package_files(self) -> tuple[str, ...]:
        """The files of the student package ``transformer_lm/`` that this
        assignment's release ships (the nbgrader release, the student
        repository, the Gradescope bundle) and all that a worker grading
        it may read of the package: the shared files, its own module and
        its public test values. Every other file of the package (another
        homework's module, which may hold a given solution) is hidden
        from the worker (docs/threat-model.md, principles 3 and 10)."""
        return (SHARED_PACKAGE_FILES + (f"{self.rubric.module}.py",)
                + tuple(self.public_files))

    @property
    def rubric_file(self) -> Path:
        """Its rubric table (points, items, diagnoses, forbidden APIs)."""
        return self.folder / "rubric.toml"

    @property
    def checks_dir(self) -> Path:
        """Its pytest checks, one marked test per rubric item part."""
        return self.folder / "checks"

    @property
    def stub_file(self) -> Path:
        """The released stub (what an untouched submission looks like)."""
        return self.folder / "stub.py"

    @property
    def catalog_file(self) -> Path:
        """Its audit catalog (mutants and correct variants)."""
        return self.folder / CATALOG_FILE

    @property
    def catalog(self) -> Catalog | None:
        """Its audit catalog, read and validated against the rubric
        (cached); None when the folder holds none."""
        if not self.catalog_file.is_file():
            return None
        return _catalog(self.folder)

    @property
    def rubric(self) -> Assignment:
        """Its rubric, read and validated (cached)."""
        return _rubric(self.folder)


def _fail(plugin_id: str, message: str) -> PluginError:
    return PluginError(f"plug-in {plugin_id!r}: {message}")


_KINDS: dict[str, tuple[str, bool]] = {
    # field: (what it must be, optional)
    "build_plan": ("callable", False),
    "reference": ("module", False),
    "mistakes": ("module", False),
    "figures": ("callable", True),
    "public_values": ("callable", True),
    "twin_input": ("callable", True),
}


def validate(plugin: object, plugin_id: str) -> Plugin:
    """``plugin`` if it is a complete, well-typed plug-in for the folder
    ``plugin_id``; else a :class:`PluginError` naming what is wrong."""
    if not isinstance(plugin, Plugin):
        raise _fail(plugin_id, f"{EXPORT} is a {type(plugin).__name__}, "
                               f"not a grader.plugin.Plugin")
    if plugin.id != plugin_id:
        raise _fail(plugin_id, f"its id is {plugin.id!r}, its folder "
                               f"{plugin_id!r}")
    for spec in fields(Plugin):
        if spec.name not in _KINDS:
            continue
        kind, optional = _KINDS[spec.name]
        value = getattr(plugin, spec.name)
        if value is None:
            if optional:
                continue
            raise _fail(plugin_id, f"{spec.name} is missing")
        good = (isinstance(value, ModuleType) if kind == "module"
                else callable(value) and not isinstance(value, ModuleType))
        if not good:
            raise _fail(plugin_id, f"{spec.name} must be a {kind}, not a "
                                   f"{type(value).__name__}")
    _check_public_files(plugin, plugin_id)
    for path, what in ((plugin.rubric_file, "rubric.toml"),
                       (plugin.stub_file, "stub.py")):
        if not path.is_file():
            raise _fail(plugin_id, f"{what} is missing")
    if not sorted(plugin.checks_dir.glob("test_*.py")):
        raise _fail(plugin_id, "checks/ holds no test_*.py")
    try:
        rubric = _rubric(plugin.folder)
    except RubricError as exc:
        raise _fail(plugin_id, str(exc)) from exc
    if rubric.id != plugin_id:
        raise _fail(plugin_id, f"rubric.toml says id = {rubric.id!r}")
    try:
        plugin.catalog
    except CatalogError as exc:
        raise _fail(plugin_id, str(exc)) from exc
    missing = _undefined_targets(plugin.stub_file,
                                 [task.target for task in rubric.tasks])
    if missing:
        raise _fail(plugin_id, f"stub.py does not define "
                               f"{', '.join(missing)} (the rubric's "
                               f"task targets)")
    return plugin


def _check_public_files(plugin: Plugin, plugin_id: str) -> None:
    """``public_files``: plain ``.py`` names of the package folder, given
    exactly when ``public_values`` is."""
    names = plugin.public_files
    if not isinstance(names, tuple) or not all(
            isinstance(n, str) and ID_PATTERN.match(n.removesuffix(".py"))
            and n.endswith(".py") for n in names):
        raise _fail(plugin_id, "public_files must be a tuple of file names "
                               "like 'test_values.py'")
    if bool(names) != (plugin.public_values is not None):
        raise _fail(plugin_id, "public_files names the files public_values "
                               "renders: give both or neither")


def _undefined_targets(stub: Path, targets: list[str]) -> list[str]:
    """The ``targets`` that ``stub`` defines at module level as a class
    or function (read, never run); all of them when it does not parse."""
    try:
        tree = ast.parse(stub.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return list(targets)
    defined = {node.name for node in tree.body if isinstance(
        node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    return [target for target in targets if target not in defined]


@cache
def _rubric(folder: Path) -> Assignment:
    return load_assignment(folder)


@cache
def _catalog(folder: Path) -> Catalog:
    return load_catalog(folder / CATALOG_FILE, _rubric(folder))


def load(plugin_id: str, package: str | None = None) -> Plugin:
    """Import and validate the plug-in ``<package>.<plugin_id>`` (by
    default :data:`PACKAGE`, ``grader/assignments/<id>/``)."""
    return _load(plugin_id, package or PACKAGE)


@cache
def _load(plugin_id: str, package: str) -> Plugin:
    if not ID_PATTERN.match(plugin_id):
        raise _fail(plugin_id, "not a valid package name")
    try:
        module = importlib.import_module(f"{package}.{plugin_id}")
    except Exception as exc:  # noqa: BLE001 - any import error is the same
        raise _fail(plugin_id, f"does not import: {type(exc).__name__}: "
                               f"{one_line(str(exc))}") from exc
    if not hasattr(module, EXPORT):
        raise _fail(plugin_id, f"its __init__.py exports no {EXPORT}")
    found = getattr(module, EXPORT)
    if isinstance(found, Plugin):
        found = replace(found, folder=Path(module.__file__).resolve().parent
                        if module.__file__ else Path())
    return validate(found, plugin_id)


def plugin_ids() -> tuple[str, ...]:
    """The folders of :data:`PACKAGE` (``grader/assignments/``) that hold
    a plug-in (a package, or a folder with a ``rubric.toml``), in name
    order."""
    root = (ASSIGNMENTS_DIR if PACKAGE == "grader.assignments" else
            Path(importlib.import_module(PACKAGE).__path__[0]))
    return tuple(folder.name for folder in sorted(root.iterdir())
                 if (folder / "__init__.py").is_file()
                 or (folder / "rubric.toml").is_file())


def plugins() -> tuple[Plugin, ...]:
    """Every plug-in, loaded and validated (the grader's start-up)."""
    return tuple(load(plugin_id) for plugin_id in plugin_ids())


def of(assignment: Assignment) -> Plugin:
    """The plug-in of a rubric."""
    return load(assignment.id)
