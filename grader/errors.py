"""The grader's own errors: one base, :class:`GraderError`, and the ones
every route shares. This module imports nothing of the kit, so that no
library module needs the command line to raise or catch them
(docs/architecture.md, "Imports")."""
from __future__ import annotations


class GraderError(Exception):
    """The base of every error the kit raises on purpose: catching it
    catches a refusal the kit explains in one line, never a bug."""


class CliError(GraderError):
    """A problem with the command line or its input: one line, exit 2."""


class RubricError(GraderError):
    """A rubric table that is inconsistent or incomplete."""


class PluginError(RubricError):
    """An assignment plug-in that is missing a piece, has a piece of the
    wrong type or does not import; the message names the plug-in."""


class BatchError(GraderError):
    """A batch that cannot start (bad folder, unwritable output)."""
