"""What a worker takes from its fork server instead of walking again.

A walk of every loaded module writes the reference count of each module
object, a copied page apiece in a forked worker; the fork server makes
those walks once (``agent.index_loaded_files``, ``agent.index_aliases``)
and a worker takes them while it has loaded no module since
(``agent._indexed``). The mode's check at every library frame reads its
handler's code (an audit event) only after some ``__code__`` was
replaced (``operation_judge``'s ``code_set``, set by the audit hook).
docs/internals.md, "Walks and audited reads a worker no longer repeats".
"""
from __future__ import annotations

import shutil
from pathlib import Path

from forked import run_child
from grader.run.sandbox import Job, Limits, run_jobs

KIT = Path(__file__).resolve().parents[2]

# A child interpreter warmed as the fork server warms itself; each case
# runs in a fork of it, as a worker does.
SERVER = r'''
import json
import os
import sys

from forked import in_fork
from grader.run import forkserver

forkserver._warm_server()
from grader.worker import agent


def walked():
    """The index against the walks a worker made before it."""
    real, inside = agent.path_rules(os.sep, (os.sep,), ())[:2]
    roots = agent._loaded_native_roots(real, inside,
                                       agent._interpreter_natives(real))
    wanted = set(agent._ALIASES["wanted"])
    sites = agent.alias_sites(wanted, agent.KIT_PACKAGES)
    scanned = agent._bindings(list(sys.modules.items()), wanted,
                              agent.KIT_PACKAGES)
    taken = {"roots": agent._indexed("native_roots")}
    loaded = agent._indexed("loaded")
    # What the worker does next: the kit's modules dropped, then the
    # files the submission finds loaded.
    main = agent._kit_main()
    for name in list(sys.modules):
        if name.split(".")[0] in agent.KIT_PACKAGES:
            del sys.modules[name]
    if main:
        sys.modules["__main__"] = type(sys)("__main__")
    return {"roots equal": taken["roots"] == roots, "roots": len(roots),
            "sites equal": sorted(map(list, sites))
            == sorted(map(list, scanned)), "sites": len(sites),
            "loaded equal": loaded == agent._loaded_files(),
            "loaded": len(loaded or ())}


def after_an_import():
    """A module loaded since the index: the worker walks as before."""
    import wave  # noqa: F401 (not among the server's modules)

    real, inside = agent.path_rules(os.sep, (os.sep,), ())[:2]
    return {"loaded": agent._indexed("loaded") is None,
            "roots": agent._indexed("native_roots") is None,
            "walked roots": len(agent._loaded_native_roots(
                real, inside, agent._interpreter_natives(real)))}


assert "wave" not in sys.modules
print(json.dumps({"walked": in_fork(walked),
                  "imported": in_fork(after_an_import)}))
'''


def test_the_servers_walks_are_what_a_worker_would_find() -> None:
    """In a fork of a warm server, the native roots, the alias sites and
    the loaded files the index gives equal a full walk's; once a module
    was loaded since, the index is not used (a walk is)."""
    seen = run_child(SERVER)
    walked = seen["walked"]
    assert walked["roots equal"] and walked["roots"] > 0, walked
    assert walked["sites equal"] and walked["sites"] > 0, walked
    assert walked["loaded equal"] and walked["loaded"] > 100, walked
    imported = seen["imported"]
    assert imported == {"loaded": True, "roots": True,
                        "walked roots": walked["roots"]}, imported


def test_a_real_worker_takes_the_servers_walks() -> None:
    """Through the fork server the grader uses: the worker's hello frame
    says it took the index (it loaded no module of its own before the
    submission ran), and the submission still runs."""
    result = run_jobs([Job("plain", "print(6 * 7)\n", "/nowhere/plain.py",
                           [])], Limits(timeout=30))["plain"]
    assert result.finished and "42" in result.output, result.output
    hello = next(f for f in result.frames if f.get("type") == "hello")
    assert hello["confinement"]["indexed"] is True, hello


MODE = r'''
import json
import sys
import types

import torch

from grader.worker import agent

mode, handler = agent.torch_function_mode(types.SimpleNamespace,
                                          types.MethodType)
notes = []
code_set = [True]
phase = {"grader_off": False, "tracing": False}
judge, in_force, arm, _ = agent.operation_judge(
    torch, mode, handler,
    lambda code: ("submission" if code.co_filename == "<student>"
                  else "library"),
    lambda *note: notes.append(list(note)), phase,
    lambda function, *args: function(*args), code_set=code_set)
arm()
namespace = {"sys": sys}
exec(compile("def frame():\n    return sys._getframe()\n", "<student>",
             "exec"), namespace)
frame = namespace["frame"]()
seen = {}
in_force(frame)
seen["intact"] = [len(notes), code_set[0]]


def other(mode, func, types, args=(), kwargs=None):
    return func(*args, **(kwargs or {}))


original = handler.__code__
handler.__code__ = other.__code__
in_force(frame)  # no __code__ assignment seen: not read again
seen["unseen"] = [len(notes), code_set[0]]
code_set[0] = True  # what the audit hook does on the assignment
in_force(frame)
in_force(frame)
seen["seen"] = [len(notes), code_set[0]]
handler.__code__ = original
in_force(frame)
seen["restored"] = [len(notes), code_set[0]]

# The audit hook: any __code__ assignment sets the flag, first thing.
busy = {"hook": set(), "guard": [None], "ident": lambda: 0,
        "code_set": [False]}
codes = {"agent": set(), "frame_users": set(), "frame_handers": set(),
         "generators": set(), "import": set(), "loaded_files": set()}
paths = agent.path_rules("/tmp", ("/",), ())
who = agent.code_kinds("<student>", set(), set(), (), (), lambda c: "",
                       paths[0], paths[1], {}, {}, {})
hook = agent.audit_hook(lambda message: None,
                        lambda *report: None, object(), codes, who,
                        paths, {"scratch": "/tmp", "hidden": (),
                                "library_roots": ()}, busy)
hook("object.__getattr__", (frame, "f_code"))
seen["read"] = busy["code_set"][0]
sys.addaudithook(hook)
namespace["frame"].__code__ = namespace["frame"].__code__
seen["assigned"] = busy["code_set"][0]
print(json.dumps(seen))
'''


def test_the_modes_check_reads_the_handlers_code_after_an_assignment(
        ) -> None:
    """``in_force`` finds the mode intact and clears the flag; a replaced
    handler's code is found (``untraceable``, each time) once a
    ``__code__`` assignment was seen, and the flag stays set until the
    handler's own code is back. The audit hook sets the flag on a real
    ``__code__`` assignment, not on a read."""
    seen = run_child(MODE)
    assert seen["intact"] == [0, False]
    assert seen["unseen"] == [0, False]
    assert seen["seen"] == [2, True]
    assert seen["restored"] == [2, False]
    assert seen["read"] is False
    assert seen["assigned"] is True


TWICE = r'''
import json
import sys
from pathlib import Path

from grader.engine import Options, grade

kit = Path(sys.argv[1])
seen = []
for attempt in range(2):
    report = grade(kit / "cheat_import_solutions.py", None, Options(seed=7))
    seen.append([report.score, [flag.message for flag in report.flags]])
    # The kit's folder changes (a file made and removed) after the fork
    # server listed it: its workers' listing of the import path is stale.
    (kit / "made-meanwhile").touch()
    (kit / "made-meanwhile").unlink()
print(json.dumps(seen))
'''


def _kit_copy(tmp_path: Path) -> Path:
    """The kit's code, rubric and stub package copied to ``tmp_path``,
    without any cached bytecode (as in a fresh clone)."""
    kit = tmp_path / "kit"
    kit.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("grader", "solutions", "transformer_lm"):
        shutil.copytree(KIT / name, kit / name, ignore=skip)
    for name in ("setup.cfg", "pyproject.toml"):
        shutil.copy(KIT / name, kit / name)
    return kit


STUB_IMPORT = r'''
import json
import sys
from pathlib import Path

from grader.engine import Options, grade

report = grade(Path(sys.argv[1]), None, Options(seed=7))
print(json.dumps([report.score, [flag.message for flag in report.flags],
                  sys.dont_write_bytecode]))
'''


def test_a_fresh_clone_grades_an_import_of_the_stub_package_clean(
        tmp_path: Path) -> None:
    """A submission that imports the kit's stub package (as the kit's
    notebooks do), graded from a fresh clone (no cached bytecode) by an
    interpreter that writes bytecode (Python's default): the worker does
    not try to cache the stub's bytecode beside its source, which the
    confinement refuses and reports as the submission's write. The
    reference with that import earns what the reference earns."""
    kit = _kit_copy(tmp_path)
    text = (KIT / "solutions" / "modeling_attention.py").read_text()
    at = text.index("import torch")
    target = kit / "submission.py"
    target.write_text(text[:at] + "import transformer_lm.modeling_attention"
                      "  # noqa: F401\n" + text[at:])
    score, flags, silent = run_child(STUB_IMPORT, str(target), kit=kit,
                                     unset=("PYTHONDONTWRITEBYTECODE",))
    assert silent is False  # the grading process does write bytecode
    assert not any("__pycache__" in flag for flag in flags), flags
    assert flags == []
    assert score == 11.0


def test_a_kit_import_is_named_after_the_kit_folder_changed(
        tmp_path: Path) -> None:
    """A worker takes the fork server's listing of the import path only
    after listing its folders again (``agent._refresh_import_path``): once
    confined it may not list the kit's folder, and a stale listing would
    turn ``import solutions`` into "no module named", not the forbidden
    import the report names. A copy of the kit is graded twice, its
    folder changed between."""
    kit = _kit_copy(tmp_path)
    hostile = KIT / "tests" / "kit" / "hostile"
    shutil.copy(hostile / "cheat_import_solutions.py", kit)
    seen = run_child(TWICE, str(kit), kit=kit)
    named = 'The code tried to import "solutions" (line 20)'
    for score, flags in seen:
        assert score == 5.0
        assert any(named in flag for flag in flags), flags
