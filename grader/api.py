"""The plug-in API: everything an assignment's plug-in may use of the
grader, in one place (as ``pytest`` re-exports ``_pytest``).

An assignment package (``grader/assignments/<id>/``: its ``PLUGIN``, cases,
checks, mistakes and figures) imports the grader through this module only;
``tests/kit/test_plugin.py`` fails when one imports anything else of it.
What each name does is documented where it is defined, and
docs/adding-an-assignment.md shows them at work.
"""
from __future__ import annotations

from grader.catalog import Catalog, Edit, Mutant, Variant
from grader.judge.checking import (ATOL, RTOL, CheckFailed, close, explained,
                                   fail, fail_probes, failure_of, max_error,
                                   require_ran, returned, share_bounds,
                                   share_outside, tensor_of)
from grader.judge.fitting import fit_log_scale
from grader.output.figures import MapFigure
from grader.plan import (Case, Plan, ProbeInfo, TwinInput, derive_seed,
                         probe)
from grader.plugin import Plugin
from grader.run.observe import TaskRun
from grader.wire import encode_tensor

__all__ = [
    # the plug-in itself (grader.plugin)
    "Plugin",
    # its audit catalog, read from audit.toml (grader.catalog)
    "Catalog", "Edit", "Mutant", "Variant",
    # its plan: cases and the probes each worker runs (grader.plan)
    "Case", "Plan", "ProbeInfo", "TwinInput", "derive_seed", "probe",
    # what the sandbox observed (grader.run.observe)
    "TaskRun",
    # checks: comparisons and failures in words (grader.judge.checking)
    "ATOL", "RTOL", "CheckFailed", "close", "explained", "fail",
    "fail_probes", "failure_of", "max_error", "require_ran", "returned",
    "share_bounds", "share_outside", "tensor_of",
    # diagnoses: a constant recovered from an output (grader.judge.fitting)
    "fit_log_scale",
    # pictures of a failing item (grader.output.figures)
    "MapFigure",
    # a tensor as the wire carries it (grader.wire)
    "encode_tensor",
]
