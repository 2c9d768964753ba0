"""Fixtures shared by the kit's own tests (not the public student tests)."""
from __future__ import annotations

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


@pytest.hookimpl(optionalhook=True)  # only with pytest-xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the usable cores (at most one per
    3 GB of memory). Much of a worker's time is spent waiting on the
    grader's child processes (a sandbox worker's time limit, nbgrader,
    Slurm, a browser), which a third worker fills on two cores."""
    import os

    cores = len(os.sched_getaffinity(0))
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 0
    by_memory = max(1, memory // (3 * 2**30)) if memory else cores + 1
    return max(1, min(cores + 1, by_memory))


#: The test files that take longest (measured: a full run's per-file
#: seconds), longest first. With ``--dist loadfile`` each worker takes the
#: next file in collection order; starting the long ones first keeps one
#: long file from running alone at the end of the run.
LONGEST_FIRST = (
    "test_nbgrader_route.py", "test_classroom.py", "test_batch.py",
    "test_diagnoses.py", "test_routes_agree.py", "test_grader_corpus.py",
    "test_transformer_block_routes.py", "test_attention_basics_grading.py",
    "test_front_doors.py", "test_cluster.py", "test_starved.py",
    "test_new_users.py", "test_hostile.py", "test_notebook_cells.py",
    "test_formgrader_browser.py",
)


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Run the longest test files first (a stable sort: every file keeps
    its tests' order, the others keep theirs)."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
