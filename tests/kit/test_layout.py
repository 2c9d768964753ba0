"""The folders are the architecture (docs/architecture.md, "Layout").

* Every module of the kit's code (``grader/`` outside the plug-ins,
  ``solutions/``'s builders, ``transformer_lm/``) lies where the document
  says: the top-level modules are the few it names, every subpackage is a
  stage or a side it names.
* The imports between them form **no cycle**, counting the imports inside
  functions too (a lazy import is still a dependency: it runs the first
  time the function does). Only imports under ``if TYPE_CHECKING`` are
  left out: they never run.
* A third-party import inside a function is one of the few heavy ones
  named below, each with its reason; everything else is imported at the
  top, where a reader looks for it.
* The sandbox side (``grader/worker/``) imports nothing of the grader but
  itself and the wire.
* Every module imports alone in a fresh interpreter.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
GRADER = KIT / "grader"

#: The modules at grader/'s top: the engine, the contracts every stage
#: shares, and the two entry points.
TOP_LEVEL = {"__init__", "__main__", "api", "catalog", "classroom",
             "constants", "engine", "errors", "plan", "plugin", "rubric",
             "wire"}
#: grader/'s subpackages: the stages and the two sides.
SUBPACKAGES = {"analyse", "assignments", "judge", "locate", "output",
               "routes", "run", "shapes", "worker"}

#: Third-party modules a kit module may import inside a function, and why.
HEAVY = {
    "torch": "seconds to import: `--help`, the lint server and the "
             "command line's refusals must not wait for it",
    "numpy": "imported with torch, where values are rebuilt",
    "matplotlib": "pictures only, and only when asked for",
    "PIL": "pictures only (the class summary)",
    "nbgrader": "the nbgrader route only (a dev extra)",
    "nbformat": "the nbgrader route only",
    "nbconvert": "the nbgrader route only",
    "sqlalchemy": "nbgrader's gradebook only",
    "flake8": "the lint server only: a fresh flake8 per process",
    "_pytest": "pytest's session, prepared once in the checks' warm-up",
    "IPython": "notebook cells only: IPython's input transformer (magics)",
}


def module_name(root: Path, path: Path) -> str:
    """``grader/routes/cli.py`` -> ``grader.routes.cli``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def kit_modules(root: Path = KIT) -> dict[str, Path]:
    """Every module of the kit's code below ``root``: grader/ (not the
    plug-ins, which test_plugin.py holds to the declared API),
    solutions/'s builders (not the notebook sources) and transformer_lm/."""
    found = {}
    for top in ("grader", "solutions", "transformer_lm"):
        for path in sorted((root / top).rglob("*.py")):
            inner = path.relative_to(root / top).parts
            if top == "grader" and inner[0] == "assignments":
                continue
            if top == "solutions" and inner[0] != path.name:
                continue  # solutions/source/, solutions/notebooks/
            found[module_name(root, path)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(
                node.test):
            for statement in node.body:
                skipped.update(id(n) for n in ast.walk(statement))
    return skipped


def imports_of(path: Path, modules: dict[str, Path]
               ) -> tuple[set[str], set[str]]:
    """The kit modules ``path`` imports anywhere (module level or inside a
    function), and the top-level names of the other modules it imports
    inside a function or class (``torch``, ``json``...)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_only(tree)
    top_level = {id(n) for n in tree.body}
    kit: set[str] = set()
    lazy: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 \
                and node.module:
            targets = [f"{node.module}.{a.name}" for a in node.names]
            targets = [t if t in modules else node.module for t in targets]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            name = target
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                kit.add(name)
            elif id(node) not in top_level:
                lazy.add(target.split(".")[0])
    return kit, lazy


def import_graph(root: Path = KIT) -> dict[str, set[str]]:
    """module -> the kit modules it imports (anywhere in its code)."""
    modules = kit_modules(root)
    graph = {}
    for name, path in modules.items():
        graph[name] = imports_of(path, modules)[0] - {name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a
    module importing itself): each is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return cycles


# --------------------------------------------------------------------------
# The folders


def test_grader_top_level_holds_only_the_shared_contracts() -> None:
    top = {p.stem for p in GRADER.glob("*.py")}
    folders = {p.name for p in GRADER.iterdir()
               if p.is_dir() and (p / "__init__.py").is_file()}
    assert top == TOP_LEVEL
    assert folders == SUBPACKAGES


def test_the_architecture_document_names_every_folder() -> None:
    text = (KIT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for folder in SUBPACKAGES - {"assignments"}:
        assert f"grader/{folder}/" in text, folder
    for module in TOP_LEVEL - {"__init__", "__main__"}:
        assert f"grader/{module}.py" in text, module


def test_the_readme_shows_the_tree() -> None:
    text = (KIT / "README.md").read_text(encoding="utf-8")
    for folder in SUBPACKAGES:
        assert re.search(rf"^\s*[│├└─ ]*{folder}/", text, re.M), folder


# --------------------------------------------------------------------------
# Imports


def test_kit_modules_import_each_other_without_cycles() -> None:
    graph = import_graph()
    assert "grader.routes.classroom" in graph["solutions.student_repo"]
    assert "grader.routes.batch" in graph["grader.routes.cli"], \
        "the scan missed an import inside a function"
    assert import_cycles(graph) == []


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_cycle_through_an_import_inside_a_function_is_found(
        tmp_path: Path) -> None:
    """A planted ring: a module-level import one way, an import inside a
    function (three levels down a subpackage) the other."""
    _plant(tmp_path, {
        "grader/__init__.py": "",
        "grader/routes/__init__.py": "",
        "grader/routes/batch.py": "from grader.routes.shards import x\n",
        "grader/routes/shards.py": ("x = 1\n\n\ndef merge():\n"
                                    "    from grader.routes import batch\n"
                                    "    return batch\n"),
        "grader/engine.py": "import torch\n",
        "solutions/__init__.py": "",
        "transformer_lm/__init__.py": "",
    })
    graph = import_graph(tmp_path)
    assert import_cycles(graph) == [["grader.routes.batch",
                                     "grader.routes.shards"]]
    assert graph["grader.engine"] == set()


def test_an_import_under_type_checking_is_no_dependency(
        tmp_path: Path) -> None:
    _plant(tmp_path, {
        "grader/__init__.py": "",
        "grader/a.py": ("from typing import TYPE_CHECKING\n"
                        "if TYPE_CHECKING:\n    from grader import b\n"),
        "grader/b.py": "from grader import a\n",
        "solutions/__init__.py": "",
        "transformer_lm/__init__.py": "",
    })
    assert import_cycles(import_graph(tmp_path)) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
                         ) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_imports_inside_functions_are_kit_stdlib_or_named_heavy() -> None:
    modules = kit_modules()
    unexplained = {}
    for name, path in modules.items():
        lazy = imports_of(path, modules)[1]
        other = {m for m in lazy if m not in sys.stdlib_module_names
                 and m not in HEAVY}
        if other:
            unexplained[name] = sorted(other)
    assert unexplained == {}


def test_the_sandbox_side_imports_only_itself_and_the_wire() -> None:
    modules = kit_modules()
    graph = import_graph()
    worker = [m for m in modules if m.startswith("grader.worker.")]
    assert worker
    for name in worker:
        outside = {m for m in graph[name]
                   if not m.startswith("grader.worker")
                   and m not in ("grader.wire", "grader")}
        assert outside == set(), name


# One fresh interpreter imports the third-party libraries the kit's modules
# use (never a module of the kit), then forks once per kit module: each
# child imports its module alone, as a fresh interpreter would, without
# paying torch's import again (about 2 s of CPU each, 60 times).
_IMPORT_EACH_ALONE = r"""
import importlib, io, os, sys, traceback
for library in sys.argv[1].split(","):
    try:
        importlib.import_module(library)
    except ImportError:
        pass
kit = ("grader", "solutions", "transformer_lm", "bench")
assert not [m for m in sys.modules if m.split(".")[0] in kit], "kit preloaded"
for module in sys.argv[2:]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        status, text = 0, ""
        try:
            importlib.import_module(module)
        except BaseException:
            status, text = 1, traceback.format_exc()[-400:]
        os.write(write_end, text.encode())
        os._exit(status)
    os.close(write_end)
    with io.open(read_end, "rb") as pipe:
        text = pipe.read().decode()
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    print(f"{module}\t{code}\t{text!r}", flush=True)
"""


def test_every_module_imports_alone() -> None:
    """Each module of the kit imports in an interpreter where no other
    module of the kit was imported before it (third-party libraries are
    loaded once, before the fork, to save their import time)."""
    modules = [m for m in kit_modules() if not m.endswith("__main__")]
    modules += [f"grader.assignments.{folder.name}" for folder in
                sorted((GRADER / "assignments").iterdir())
                if (folder / "__init__.py").is_file()]
    libraries = ",".join(sorted(set(HEAVY) - {"_pytest"}) + ["pytest"])
    completed = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_ALONE, libraries, *modules],
        cwd=KIT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-2000:]
    results = [line.split("\t", 2) for line in completed.stdout.splitlines()
               if line.count("\t") >= 2]
    assert [name for name, _, _ in results] == modules
    failed = [(name, text) for name, code, text in results if code != "0"]
    assert failed == []
    assert len(results) > 50


def test_a_module_that_needs_another_first_is_found(tmp_path: Path) -> None:
    """The fork-per-module check catches a module that works only after
    another kit module was imported (the failure the test exists for)."""
    package = tmp_path / "grader_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("import sys\nsys.FLAG = 1\n")
    (package / "second.py").write_text("import sys\nassert sys.FLAG\n")
    completed = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_ALONE, "json",
         "grader_probe_pkg.first", "grader_probe_pkg.second"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    codes = dict(line.split("\t")[:2]
                 for line in completed.stdout.splitlines())
    assert codes == {"grader_probe_pkg.first": "0",
                     "grader_probe_pkg.second": "1"}


@pytest.mark.parametrize("command", [
    ["-m", "grader", "--help"],
    ["-m", "grader.classroom", "--help"],
    ["-m", "grader.routes.gradescope_driver", "--help"],
    ["-m", "solutions.build", "--help"],
])
def test_every_command_keeps_its_name(command: list[str]) -> None:
    """The commands people and workflows already type (``python -m
    grader.classroom`` in student repositories made before the layout
    changed) still answer."""
    completed = subprocess.run([sys.executable, *command], cwd=KIT,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("usage: ")


# --------------------------------------------------------------------------
# Errors


def defined_exceptions(path: Path) -> list[tuple[str, list[str]]]:
    """(class, base names) for every class of ``path`` whose name ends in
    ``Error`` (the kit's naming for what it raises on purpose)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.name, [ast.unparse(base) for base in node.bases])
            for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            and node.name.endswith("Error")]


def test_every_kit_error_derives_from_grader_error() -> None:
    """One base: an error class either derives from GraderError directly
    or from another error of the kit that does."""
    from grader.errors import GraderError

    classes = {}
    for name, path in kit_modules().items():
        for cls, _ in defined_exceptions(path):
            module = __import__(name, fromlist=["_"])
            classes[f"{name}.{cls}"] = getattr(module, cls)
    assert len(classes) > 15
    outside = sorted(n for n, c in classes.items()
                     if not issubclass(c, GraderError))
    assert outside == []


def test_the_error_scan_sees_a_planted_error(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("class OopsError(ValueError):\n    pass\n")
    assert defined_exceptions(path) == [("OopsError", ["ValueError"])]


# --------------------------------------------------------------------------
# Docstrings


MAX_MODULE_DOCSTRING = 12


def test_module_docstrings_are_a_paragraph_that_points_to_docs() -> None:
    """A module's docstring says what it is for in a paragraph or two; the
    details live in docs/ (docs/internals.md, module by module)."""
    long = {}
    for name, path in kit_modules().items():
        if not name.startswith("grader"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")),
                                clean=False) or ""
        if len(doc.strip().splitlines()) > MAX_MODULE_DOCSTRING:
            long[name] = len(doc.strip().splitlines())
    assert long == {}
    internals = (KIT / "docs" / "internals.md").read_text(encoding="utf-8")
    for name, path in kit_modules().items():
        if f"docs/internals.md, `{name}`" in path.read_text(
                encoding="utf-8"):
            assert f"## `{name}`" in internals, name
