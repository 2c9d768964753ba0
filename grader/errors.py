"""The grader's own errors, in a module that imports nothing of the kit.

``cli``, ``batch``, ``bundle`` and ``course`` raise and catch these; keeping
them here (not in ``cli``) means no library module imports the command
line, and no import cycle runs through it.
"""
from __future__ import annotations


class CliError(Exception):
    """A problem with the command line or its input: one line, exit 2."""


class RubricError(Exception):
    """A rubric table that is inconsistent or incomplete."""


class PluginError(RubricError):
    """An assignment plug-in that is missing a piece, has a piece of the
    wrong type or does not import; the message names the plug-in."""


class BatchError(Exception):
    """A batch that cannot start (bad folder, unwritable output)."""
