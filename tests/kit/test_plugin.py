"""The plug-in interface: every assignment is one validated object.

A plug-in is copied from the real ``multi_head_attention`` into a scratch
package, then broken one piece at a time: each break is a
:class:`grader.errors.PluginError` whose one-line message names the
plug-in and the piece, at start-up (``python -m grader`` refuses to run),
never a silently missing feature.
"""
from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

import pytest

from grader import plugin
from grader.errors import PluginError, RubricError
from grader.judge.checking import task_fixtures
from grader.plugin import Plugin
from grader.routes import cli
from grader.run.observe import TaskRun

KIT = Path(__file__).resolve().parents[2]
REAL = KIT / "grader" / "assignments" / "multi_head_attention"
GOOD_INIT = '''
from grader.assignments.multi_head_attention import (cases, figures,
                                                     mistakes, reference)
from grader.plugin import Plugin

PLUGIN = Plugin(id="{id}", build_plan=cases.build, reference=reference,
                mistakes=mistakes, figures=figures.figures)
'''


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """make(id, init=..., rubric=...) -> the id of a plug-in in a scratch
    package ``scratchkit_<n>`` (fresh per test, so no import is cached)."""
    package = f"scratchkit_{abs(hash(tmp_path)) % 10 ** 8}"
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin._load.cache_clear()
    plugin._rubric.cache_clear()

    def make(plugin_id: str, init: str = GOOD_INIT,
             rubric: str | None = None, checks: bool = True,
             stub: bool = True) -> str:
        folder = root / plugin_id
        folder.mkdir()
        (folder / "__init__.py").write_text(init.format(id=plugin_id))
        text = (REAL / "rubric.toml").read_text(encoding="utf-8").replace(
            'id = "multi_head_attention"', f'id = "{plugin_id}"')
        if rubric is not None:
            text = rubric
        if rubric != "":
            (folder / "rubric.toml").write_text(text, encoding="utf-8")
        if stub:
            shutil.copy(REAL / "stub.py", folder / "stub.py")
        if checks:
            shutil.copytree(REAL / "checks", folder / "checks",
                            ignore=shutil.ignore_patterns("__pycache__"))
        importlib.invalidate_caches()
        return plugin_id

    yield package, make
    plugin._load.cache_clear()
    plugin._rubric.cache_clear()
    for name in [n for n in sys.modules if n.startswith(package)]:
        del sys.modules[name]


def _error(package: str, plugin_id: str) -> str:
    with pytest.raises(PluginError) as caught:
        plugin.load(plugin_id, package)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"plug-in '{plugin_id}': ")
    return message


def test_the_kit_plugins_load_complete() -> None:
    found = {p.id: p for p in plugin.plugins()}
    folders = sorted(f.name for f in (KIT / "grader" / "assignments").iterdir()
                     if (f / "rubric.toml").is_file())
    assert sorted(found) == folders
    assert {"attention_basics", "multi_head_attention"} <= set(found)
    for loaded in found.values():
        assert isinstance(loaded, Plugin)
        assert loaded.folder == KIT / "grader" / "assignments" / loaded.id
        assert loaded.rubric.id == loaded.id
        assert callable(loaded.build_plan)
        # Figures are optional: the homework and the warm-up draw attention
        # maps, the transformer block none.
        assert loaded.figures is None or callable(loaded.figures)
        assert loaded.checks_dir.is_dir() and loaded.stub_file.is_file()
    assert found["attention_basics"].public_values is None
    assert callable(found["attention_basics"].figures)
    assert callable(found["multi_head_attention"].figures)
    values = found["multi_head_attention"].public_values()
    assert list(values) == ["test_values.py"]
    assert values["test_values.py"] == (
        KIT / "transformer_lm" / "test_values.py").read_text(encoding="utf-8")


def test_a_complete_copy_loads(scratch) -> None:
    package, make = scratch
    loaded = plugin.load(make("copied"), package)
    assert loaded.id == "copied"
    assert loaded.rubric.max_score == 10
    assert loaded.folder.name == "copied"


@pytest.mark.parametrize("init, words", [
    ("raise ImportError('no module named torchx')",
     "does not import: ImportError: no module named torchx"),
    ("def broken(:\n    pass", "does not import: SyntaxError"),
    ("X = 1", "its __init__.py exports no PLUGIN"),
    ("PLUGIN = dict(id='broken')",
     "PLUGIN is a dict, not a grader.plugin.Plugin"),
    (GOOD_INIT.replace("build_plan=cases.build", "build_plan='cases'"),
     "build_plan must be a callable, not a str"),
    (GOOD_INIT.replace("reference=reference", "reference=reference.project"),
     "reference must be a module, not a function"),
    (GOOD_INIT.replace("mistakes=mistakes", "mistakes=None"),
     "mistakes is missing"),
    (GOOD_INIT.replace("figures=figures.figures", "figures=figures"),
     "figures must be a callable, not a module"),
    (GOOD_INIT.replace('id="{id}"', 'id="another"'),
     "its id is 'another'"),
])
def test_a_broken_plugin_is_one_line_naming_it(scratch, init: str,
                                               words: str) -> None:
    package, make = scratch
    message = _error(package, make("broken", init=init))
    assert words in message


@pytest.mark.parametrize("what, words", [
    ({"rubric": ""}, "rubric.toml is missing"),
    ({"stub": False}, "stub.py is missing"),
    ({"checks": False}, "checks/ holds no test_*.py"),
    ({"rubric": 'id = "broken"\ntitle = "t"\n'},
     "rubric.toml has no 'tasks'"),
    ({"rubric": 'id = "broken"\ntasks = 3\n'}, "rubric.toml is malformed"),
    ({"rubric": 'id = [broken'}, "cannot read"),
])
def test_a_missing_or_broken_file_is_one_line_naming_it(
        scratch, what: dict, words: str) -> None:
    package, make = scratch
    message = _error(package, make("broken", **what))
    assert words in message


@pytest.mark.parametrize("stub, words", [
    ("class SelfAttention:\n    pass\n",
     "stub.py does not define MultiHeadSelfAttention"),
    ("SelfAttention = MultiHeadSelfAttention = None\n",
     "does not define SelfAttention, MultiHeadSelfAttention"),
    ("class SelfAttention(\n", "does not define SelfAttention"),
])
def test_a_stub_without_the_task_targets_names_them(
        scratch, tmp_path, stub: str, words: str) -> None:
    """The released stub must define every task's target (read, never
    run): an untouched submission is recognised by comparing with it."""
    package, make = scratch
    plugin_id = make("broken")
    (tmp_path / package / plugin_id / "stub.py").write_text(stub)
    message = _error(package, plugin_id)
    assert words in message


def test_a_points_mismatch_in_the_rubric_names_the_plugin(scratch) -> None:
    package, make = scratch
    text = (REAL / "rubric.toml").read_text(encoding="utf-8").replace(
        'id = "multi_head_attention"', 'id = "broken"').replace(
        "max_score = 10", "max_score = 11")
    message = _error(package, make("broken", rubric=text))
    assert "task maxima do not add up to max_score" in message


def test_a_broken_plugin_stops_every_command_at_start_up(
        scratch, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    package, make = scratch
    make("good")
    make("late", init=GOOD_INIT.replace("mistakes=mistakes",
                                        "mistakes=None"))
    monkeypatch.setattr(plugin, "PACKAGE", package)
    assert plugin.plugin_ids() == ("good", "late")
    assert isinstance(PluginError("x"), RubricError)
    example = str(KIT / "examples" / "submission")
    for argv in (["assignments"], ["grade", example]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err == (f"python -m grader {argv[0]}: error: plug-in "
                       f"'late': mistakes is missing\n")


def test_check_fixtures_come_from_the_rubric_task_ids() -> None:
    runs = {"task1": TaskRun(task="task1", source=None),
            "warmup": TaskRun(task="warmup", source=None)}
    fixtures = task_fixtures(["task1", "warmup"], runs)
    assert sorted(n for n in vars(fixtures) if not n.startswith("_")) == [
        "task1", "warmup"]
    for name in ("plan", "3d", "task-1"):
        with pytest.raises(ValueError, match="cannot name a fixture"):
            task_fixtures([name], {name: runs["task1"]})


def test_without_fork_the_grader_says_what_to_do_instead(
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """On Windows (no os.fork) every command that runs a submission stops
    with one line naming the public tests and WSL; ``assignments`` runs."""
    assert cli.platform_problem() is None
    monkeypatch.delattr(cli.os, "fork")
    example = str(KIT / "examples" / "submission")
    assert cli.main(["grade", example]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m grader grade: error: the grader needs "
                          "Linux")
    assert "python -m pytest tests/public" in err and "WSL" in err
    assert err.count("\n") == 1
    assert cli.main(["assignments"]) == 0
    assert "multi_head_attention" in capsys.readouterr().out


# --------------------------------------------------------------------------
# The declared API: a plug-in imports the grader through grader.api only


def grader_imports_outside_api(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of ``path`` that reaches the grader
    other than through :mod:`grader.api` or the assignments' own
    packages (anywhere in the file, inside functions too)."""
    import ast

    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 \
                and node.module:
            names = [node.module] if node.module != "grader" else [
                f"grader.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if (name == "grader" or name.startswith("grader.")) and not (
                    name == "grader.api"
                    or name.startswith("grader.assignments")):
                found.append((node.lineno, name))
    return found


def test_plugins_import_the_grader_through_its_api_only() -> None:
    folder = KIT / "grader" / "assignments"
    files = sorted(folder.rglob("*.py"))
    assert len(files) > 20
    outside = {str(p.relative_to(folder)): grader_imports_outside_api(p)
               for p in files}
    assert {k: v for k, v in outside.items() if v} == {}


@pytest.mark.parametrize("line", [
    "from grader.run.observe import TaskRun\n",
    "import grader.judge.checking\n",
    "from grader import wire\n",
    "def later():\n    from grader.routes import cli\n    return cli\n",
])
def test_a_planted_import_outside_the_api_is_found(tmp_path: Path,
                                                   line: str) -> None:
    planted = tmp_path / "cases.py"
    planted.write_text("from grader.api import Case\n" + line,
                       encoding="utf-8")
    assert len(grader_imports_outside_api(planted)) == 1


def test_the_api_exports_what_it_declares() -> None:
    from grader import api

    assert sorted(api.__all__) == sorted(
        name for name in vars(api) if not name.startswith("_")
        and name != "annotations")
    assert api.Plugin is Plugin and api.TaskRun is TaskRun
