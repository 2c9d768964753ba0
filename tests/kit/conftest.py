"""Fixtures shared by the kit's own tests (not the public student tests)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

REFERENCE = ROOT / "solutions" / "modeling_attention.py"
STUB = ROOT / "transformer_lm" / "modeling_attention.py"
SUBMISSIONS = Path(__file__).resolve().parent / "submissions"

# One intra-op thread: the grader forks workers from this process.
torch.set_num_threads(1)

# One warm fork server for the whole run (docs/internals.md,
# "A shared fork server"): every grading of the session, in a test's own
# process or in a `python -m grader` it starts, forks its workers from it
# instead of starting a server of its own (one torch import less each).
# Tests of the per-command server's own life opt out (`own_fork_server`).
_SESSION_SERVER: dict = {}


# The heaviest test files, heaviest first (seconds a file takes on one
# worker of a full run, measured 2026-11-27 late evening on a loaded
# machine; test_classroom.py early for its waits, which overlap the other
# worker's work): `-n auto --dist loadfile` hands whole files to the
# workers in collection order, and a heavy file handed out last keeps one
# worker busy while the other has nothing left (xdist's own order, files
# with the most tests first, put several of these last). Every file of
# more than a few seconds is named, so that only short files remain for
# the end; the files not named here follow in name order. A stale list
# only costs time, never a result.
HEAVY_FIRST = (
    "test_nbgrader_route.py", "test_walls_batch.py", "test_new_users.py",
    "test_transformer_block_routes.py", "test_attention_basics_grading.py",
    "test_classroom.py", "test_cluster.py", "test_audit.py",
    "test_integrity.py", "test_routes_agree.py",
    "test_transformer_block_grading.py", "test_front_doors.py",
    "test_batch.py", "test_formgrader_browser.py", "test_hostile.py",
    "test_public_suite.py", "test_class_entries.py", "test_bounds.py",
    "test_build.py", "test_effects.py", "test_effects_layer_dropout.py",
    "test_notebook_kernel.py",
    "test_class_view.py", "test_cli.py",
    "test_forkserver.py", "test_types.py", "test_shapes_calls.py",
    "test_bigscan.py", "test_grader_corpus.py", "test_class_folders.py",
    "test_encodings.py", "test_walls.py", "test_diagnoses.py",
    "test_layout.py", "test_tempdirs.py", "test_bundle.py",
    "test_shapes_graded.py", "test_shipped.py", "test_shapes_held.py",
    "test_workflows.py", "test_hostile_linted.py", "test_watch.py",
    "test_shapes_secret.py", "test_stand_ins.py", "test_starved.py",
    "test_attention_basics_notebook.py", "test_walls_forkserver_aten.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of HEAVY_FIRST first, in its order (a stable sort: each
    file's tests keep theirs)."""
    rank = {name: index for index, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_configure(config: pytest.Config) -> None:
    """Start the session's fork server (the xdist controller, or the one
    process of a plain run; workers inherit its address). Under xdist,
    files go to the workers in collection order (HEAVY_FIRST)."""
    from grader.run import forkserver

    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if hasattr(config, "workerinput") or \
            os.environ.get(forkserver.SHARED_ADDRESS):
        return
    from grader.run.tempdirs import make

    # In this process's run folder: swept if the session is killed.
    folder = str(make("forkserver-"))
    address = os.path.join(folder, "server")
    try:
        process = forkserver.listen(address)
    except forkserver.ForkServerError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        sys.stderr.write(f"no shared fork server: {exc}\n")
        return
    os.environ[forkserver.SHARED_ADDRESS] = address
    _SESSION_SERVER.update(process=process, folder=folder)
    _start_command_server(folder)


def _start_command_server(folder: str) -> None:
    """The session's command server (docs/internals.md,
    `grader.routes.warm`): each `python -m grader` a test starts runs in a
    fork of it (torch and the plug-ins imported once), unless the test
    leaves ``GRADER_COMMAND_SERVER`` out of the command's environment
    (tests of a command's own process: `own_command_process`)."""
    from grader.routes import warm

    address = os.path.join(folder, "commands")
    try:
        command_server = warm.listen(address)
    except warm.WarmServerError as exc:
        sys.stderr.write(f"no command server: {exc}\n")
        return
    os.environ[warm.ADDRESS] = address
    _SESSION_SERVER["commands"] = command_server


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the session's fork server, if this process started it."""
    from grader.run import forkserver

    from grader.routes import warm

    commands = _SESSION_SERVER.pop("commands", None)
    if commands is not None:
        os.environ.pop(warm.ADDRESS, None)
        commands.kill()
        commands.wait()
    process = _SESSION_SERVER.pop("process", None)
    if process is None:
        return
    os.environ.pop(forkserver.SHARED_ADDRESS, None)
    process.kill()
    process.wait()
    shutil.rmtree(_SESSION_SERVER.pop("folder"), ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def warm_flake8() -> None:
    """flake8 imported once in each process that runs tests: the
    gradings of the tests' own processes then lint in forks of it, as a
    batch's judges do, instead of starting an interpreter for each (about
    400 of them in a full run)."""
    from grader.engine import FLAKE8_CONFIG
    from grader.judge import pep8

    pep8.warm_up(FLAKE8_CONFIG)


@pytest.fixture
def own_fork_server(monkeypatch):
    """This test's gradings start fork servers of their own, as a
    command does outside the suite (for tests of that server's life):
    its commands run in processes of their own too (a command server
    would hand them its fork server)."""
    from grader.routes import warm
    from grader.run import forkserver

    monkeypatch.delenv(forkserver.SHARED_ADDRESS, raising=False)
    monkeypatch.delenv(warm.ADDRESS, raising=False)
    forkserver.stop()
    yield
    forkserver.stop()


@pytest.fixture
def own_command_process(monkeypatch):
    """Each `python -m grader` this test starts runs in a process of its
    own, as outside the suite (tests of what that process does: its
    threads, its children, its signals)."""
    from grader.routes import warm

    monkeypatch.delenv(warm.ADDRESS, raising=False)


@pytest.fixture(scope="session")
def grade_path():
    """Grade a path in-process, with short limits; returns the Report."""
    from grader.engine import Options, grade
    from grader.run.sandbox import Limits

    def run(path: Path, *, public_only: bool = False, seed: int = 7,
            timeout: float = 10.0, memory_mb: int = 1024,
            assignment: str | None = None):
        options = Options(seed=seed, public_only=public_only,
                          limits=Limits(timeout=timeout,
                                        memory_mb=memory_mb))
        return grade(Path(path), assignment, options)
    return run
