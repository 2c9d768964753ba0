"""``python -m grader grade`` (and ``merge``) run by the command's own
``main`` in the test's process (tests whose subject is the grading a
command gives, or the CSV a merge writes).

Torch is loaded in the test's process already: a command's own process
would import it again, about two seconds of CPU each. What only a process
of its own shows (an exit at interpreter level, its memory, a working
folder of its own, a fork server of its own) stays with a real
``python -m grader``, as in most of the suite. Of the commands that
grade, only ``grade``: a batch would prepare its checks' session in this
process, and a prepared session of one assignment breaks the gradings of
another here. ``merge`` grades nothing (it reads a batch's CSVs and
records): :func:`merge_command`.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]


def grade_command(*argv: str, unset: tuple[str, ...] = ("GRADER_SEED",),
                  **environment: str) -> subprocess.CompletedProcess:
    """``python -m grader grade ARGV`` from the kit's root, with ``unset``
    left out of the environment and ``environment`` added: its exit
    status, stdout and stderr, as :func:`subprocess.run` gives them."""
    return _command("grade", argv, unset, environment)


def merge_command(*argv: str) -> subprocess.CompletedProcess:
    """``python -m grader merge ARGV`` from the kit's root, in this
    process's environment, as :func:`grade_command` runs ``grade``."""
    return _command("merge", argv, (), {})


def _command(command: str, argv: tuple[str, ...], unset: tuple[str, ...],
             environment: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m grader COMMAND ARGV`` by the command's main here."""
    from grader.routes import cli

    out, err = io.StringIO(), io.StringIO()
    saved = {name: os.environ.get(name) for name in (*unset, *environment)}
    folder = os.getcwd()
    try:
        for name in unset:
            os.environ.pop(name, None)
        os.environ.update(environment)
        os.chdir(KIT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main([command, *argv])
    finally:
        os.chdir(folder)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess([command, *argv], status,
                                       out.getvalue(), err.getvalue())
