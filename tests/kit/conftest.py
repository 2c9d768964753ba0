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
