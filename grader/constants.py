"""Values the kit shares, each defined once.

The student-region markers are the student package's
(:mod:`transformer_lm.notebook`, which ships to students and cannot import
the grader); they are re-exported here for the grader's modules.
"""
from __future__ import annotations

from pathlib import Path

from transformer_lm.notebook import END_MARKER, START_MARKER

__all__ = ["DEFAULT_SEED", "END_MARKER", "GRADER_DIR", "KIT_ROOT",
           "NBGRADER_MARKERS", "SEED_ENV", "START_MARKER", "TORCH_CPU_INDEX",
           "TORCH_VERSION"]

#: The grader package (its subpackages lie below it) and the kit's root,
#: the folder that holds it.
GRADER_DIR = Path(__file__).resolve().parent
KIT_ROOT = GRADER_DIR.parent

#: The torch release the kit pins (README, .ci/run, the Gradescope zip,
#: the student repository); the CPU build, from PyTorch's own index.
TORCH_VERSION = "2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: The environment variable that holds a secret grading seed.
SEED_ENV = "GRADER_SEED"
#: The seed of a grading that names none (the public one).
DEFAULT_SEED = 2024
#: nbgrader's marker lines (solutions and hidden tests).
NBGRADER_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION",
                    "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
