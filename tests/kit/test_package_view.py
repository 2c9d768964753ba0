"""What a worker may read of the student package: exactly what the graded
assignment's release ships (principles 3 and 10 of docs/threat-model.md).

The set is defined once, by the grader (``Plugin.package_files``); the
sandbox hides every other file of ``transformer_lm/`` (another homework's
module may hold a given solution: the transformer_block stub's complete
``MultiHeadSelfAttention``), and the nbgrader release and the Gradescope
bundle ship the same set. The grading of files that try to reach a hidden
module is in ``test_walls_batch.py`` (``given_layer_*``).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from grader.plugin import SHARED_PACKAGE_FILES, plugins
from grader.run import loadable
from grader.run.sandbox import sandbox_paths
from grader.worker import agent, confine

KIT = Path(__file__).resolve().parents[2]
PACKAGE = KIT / "transformer_lm"
PLUGINS = {plugin.id: plugin for plugin in plugins()}


def _package_hidden(package: tuple[str, ...]) -> set[str]:
    """The hidden files of the package folder (no compiled copies)."""
    hidden = sandbox_paths(package)["hidden"]
    return {Path(p).name for p in hidden
            if Path(p).parent == PACKAGE.resolve()}


@pytest.mark.parametrize("plugin_id", sorted(PLUGINS))
def test_a_worker_reads_only_its_assignments_package(plugin_id: str) -> None:
    """Hidden: exactly the other assignments' modules and public values
    (and any other file the package folder holds); readable: the shared
    files, its own module and its own public values."""
    plugin = PLUGINS[plugin_id]
    own = plugin.package_files
    assert own[:len(SHARED_PACKAGE_FILES)] == SHARED_PACKAGE_FILES
    assert f"{plugin.rubric.module}.py" in own
    others = {f"{p.rubric.module}.py" for p in PLUGINS.values()
              if p.id != plugin_id}
    others |= {name for p in PLUGINS.values() if p.id != plugin_id
               for name in p.public_files} - set(own)
    on_disk = {p.name for p in PACKAGE.iterdir() if p.is_file()}
    assert _package_hidden(own) == (on_disk - set(own))
    assert others <= _package_hidden(own)
    assert not set(own) & _package_hidden(own)
    hidden = set(sandbox_paths(own)["hidden"])
    for name in others:
        for level in ("", 1, 2):
            assert importlib.util.cache_from_source(
                str(PACKAGE.resolve() / name), optimization=level) in hidden
    # Without a package view (a bare Job), the whole package is readable.
    assert not _package_hidden(None)


def test_the_release_ships_the_same_files() -> None:
    """The nbgrader release's transformer_lm/ is the grader's set."""
    for plugin in PLUGINS.values():
        release = KIT / "assignment" / plugin.id / "transformer_lm"
        shipped = {p.name for p in release.iterdir() if p.is_file()}
        assert shipped == set(plugin.package_files), plugin.id


def test_a_hidden_module_is_skipped_as_not_shipped() -> None:
    """Module-level ``from transformer_lm.modeling_transformer import``:
    not importable when grading multi_head_attention (skipped, like a
    missing module), importable when grading transformer_block."""
    given = "transformer_lm.modeling_transformer"
    attention = sandbox_paths(PLUGINS["multi_head_attention"].package_files)
    block = sandbox_paths(PLUGINS["transformer_block"].package_files)
    why = loadable.importable(given, 0, attention)
    assert why is not None and "not shipped with this homework" in why
    assert loadable.importable(given, 0, block) is None
    assert loadable.importable("transformer_lm.test_values", 0,
                               attention) is None
    assert "not shipped" in loadable.importable(
        "transformer_lm.test_values", 0, block)


def test_landlock_grants_no_hidden_file_and_lists_the_folder() -> None:
    """The kernel's grants: the package folder is listed (names only),
    each shipped file is readable, no hidden file is."""
    paths = sandbox_paths(PLUGINS["multi_head_attention"].package_files)
    granted = confine.readable_paths(paths["readable"], paths["hidden"])
    folder = str(PACKAGE.resolve())
    assert folder not in granted
    assert folder in confine.listed_paths(paths["readable"],
                                          paths["hidden"])
    assert os.path.join(folder, "modeling_attention.py") in granted
    for name in ("modeling_transformer.py", "attention_basics.py"):
        assert os.path.join(folder, name) not in granted


def test_a_hidden_file_is_named_as_a_module() -> None:
    """The agent's names for hidden files and their compiled copies."""
    hidden = ("/k/solutions", "/k/p/m.py", "/k/p/__pycache__/m.c-3.pyc")
    name = agent.path_rules("/s", ("/k",), hidden)[4]
    assert name("/k/solutions/x.py") == "solutions.x"
    assert name("/k/solutions/a/__init__.py") == "solutions.a"
    assert name("/k/p/m.py") == "p.m"
    assert name("/k/p/__pycache__/m.c-3.pyc") == "p.m"
    assert name("/k/p/n.py") == "/k/p/n.py"
