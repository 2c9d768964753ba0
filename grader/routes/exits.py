"""What each command's exit status means, the ``exit status:`` block of
its ``--help`` (shared by :mod:`grader.routes.cli` and
:mod:`grader.routes.classroom`), and how a command's process ends
(:func:`finish`)."""
from __future__ import annotations

import textwrap
from typing import NoReturn


#: What each command's exit status means.
EXIT_STATUS = {
    "grade": (
        ("0", "a grade was produced, whatever the score (code that raises, "
              "hangs or does not import earns 0 for what it affects); "
              "with --watch: stopped by Ctrl-C"),
        ("2", "the submission could not be graded: a bad path, an "
              "unreadable file, no graded class, bad options (one line on "
              "standard error)")),
    "shapes": (
        ("0", "the report was printed, whatever it finds"),
        ("1", "a graded source does not parse (its file and line are "
              "named)"),
        ("2", "the path cannot be read or holds no graded class, bad "
              "options")),
    "batch": (
        ("0", "every submission was graded, whatever the scores"),
        ("1", "some could not be graded: each has a row with status "
              "'error' and 0 points, and is listed with its reason"),
        ("2", "nothing was graded: DIR is no class folder, the CSV or its "
              "reports cannot be written, bad options"),
        ("130", "interrupted: the rows written so far are kept; run again "
                "with --resume to grade the rest")),
    "summary": (
        ("0", "the summary was printed, FILE.csv.summary.json and "
              "FILE.csv.summary.png written beside the CSV"),
        ("2", "the CSV cannot be read or is no batch's")),
    "merge": (
        ("0", "every student of the class has a row in the merged CSV"),
        ("1", "merged, but some students or shards are missing (named)"),
        ("2", "refused: a student graded in two parts, an unreadable "
              "part")),
    "similarity": (
        ("0", "the report was written"),
        ("2", "DIR is no class folder, or the report cannot be "
              "written")),
    "nbgrader": (
        ("0", "every submission was graded and recorded"),
        ("1", "some got 0 because they could not be graded, or a result "
              "could not be recorded (each is listed with its reason)"),
        ("2", "nothing could start: not an nbgrader course root, an "
              "unknown assignment or student, no submissions, bad options"),
        ("130", "interrupted: what was graded is recorded; run the command "
                "again")),
    "gradescope-bundle": (
        ("0", "the zip was written"),
        ("2", "it could not be built: an unknown or missing --assignment, "
              "a tool whose version cannot be pinned, an unwritable "
              "OUT.zip")),
    "assignments": (("0", "always"),),
    "audit": (
        ("0", "every mutant lost the items it declares and was named by "
              "its diagnosis, every correct variant earned full marks "
              "(and, with --pairs, each mistake of every pair was named)"),
        ("1", "a hole: a mutant passes every item or an item it declares, "
              "costs an item it does not declare, or its diagnosis is not "
              "named; a variant loses a point; the reference is not at "
              "full marks; or the assignment has no catalog"),
        ("2", "nothing was audited: an unknown assignment, a catalog whose "
              "edits do not apply, no reference solution (a student copy), "
              "bad options"),
        ("130", "interrupted")),
}


def exit_status_text(meanings: tuple[tuple[str, str], ...]) -> str:
    """An ``exit status:`` block for an epilog, one wrapped line each."""
    width = max(4, *(len(code) for code, _ in meanings))
    lines = ["exit status:"]
    for code, meaning in meanings:
        lines += textwrap.wrap(meaning, width=79,
                               initial_indent=f"  {code:<{width}} ",
                               subsequent_indent=" " * (width + 3))
    return "\n".join(lines)


def finish(status: int | None) -> NoReturn:
    """End the command with ``status`` as ``sys.exit`` would, without the
    interpreter's teardown: freeing torch's modules object by object costs
    about a third of a second of CPU (a fifth of ``import torch``) and
    changes nothing once the output is out. The exit handlers run first
    (``atexit``, ``weakref.finalize``: temporary folders); when a thread
    other than this one still runs, or the output cannot be flushed, the
    usual ``sys.exit`` decides."""
    import atexit
    import os
    import sys
    import threading

    if threading.active_count() > 1:
        sys.exit(status)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(status)
    os._exit(status or 0)
