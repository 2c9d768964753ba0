"""PEP-8 findings: flake8 over a submission, attributed to its classes.

The rubric takes a point from a task when flake8, run with the kit's own
configuration (the ``[flake8]`` section of ``setup.cfg``), reports anything
on a line of the task's class. Findings outside every class (module-level
given code, imports) are reported and never penalised.

What flake8 reads is what runs: it gets bytes that decode (by Python's own
rules, the file's ``coding`` cookie included) to exactly the canonical text
the sandbox compiles (:mod:`grader.source`). It runs with
``--disable-noqa``, so ``# noqa`` and ``# flake8: noqa`` hide nothing, in a
subprocess with a time and memory limit; when it cannot check the code
(it crashes, as pyflakes does with ``RecursionError`` on a 600-term sum,
runs out of memory or time), :class:`Flake8Error` says why, and the code is
not PEP-8 clean.

A notebook is linted as the program it is (:class:`grader.cells.LintText`:
every Python cell in order, so a name imported in one cell and used in a
later one is used), and findings are mapped back to the module the grader
assembled and to ``cell 7, line 3``. Findings on the kit's own cells
(nbgrader's read-only cells) outside the graded classes are not the
student's and are dropped, and so are findings on lines IPython rewrote
(magics), ``E402`` (imports in later cells are how notebooks are written),
``F811`` for a definition redefined in a later cell (re-running an edited
cell is how notebooks are written), and ``F821`` for the names the kernel
itself defines (``get_ipython``, ``display``, ``In``, ...).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# nbgrader's cell markers (NBGRADER_MARKERS): flake8 calls them E266 ("too
# many leading '#' for block comment"), but they belong to nbgrader, not to
# the student.
from grader.constants import NBGRADER_MARKERS
from grader.source import SourceError, encode_python, split_lines

if TYPE_CHECKING:
    from grader.cells import LintText
    from grader.source import SourceFile

#: How long flake8 may take on one submission, in seconds. The largest
#: source the grader reads (grader.source.MAX_SOURCE_BYTES) takes about
#: 3 s at worst on an idle machine.
FLAKE8_TIMEOUT = 30
#: The address space flake8 may use, in MB (about 150 MB at worst).
FLAKE8_MEMORY_MB = 1024
#: Codes that say nothing about a notebook's own style (see the module
#: docstring).
NOTEBOOK_IGNORED = ("E402",)
#: Names the IPython kernel defines in every notebook's namespace: using
#: them is no undefined name (F821) in a notebook.
KERNEL_NAMES = frozenset({"get_ipython", "display", "In", "Out", "exit",
                          "quit", "_", "__", "___", "_i", "_ii", "_iii",
                          "_ih", "_oh", "_dh"})
_UNDEFINED = re.compile(r"undefined name '([^']*)'")

_FORMAT = "%(row)d\t%(col)d\t%(code)s\t%(text)s"
_LINE = re.compile(r"^(\d+)\t(\d+)\t(\w+)\t(.*)$")
_REDEFINED = re.compile(r"from line (\d+)")
# Runs flake8 under an address-space limit set inside the child itself
# (no preexec_fn: the grader lints from a thread).
_RUNNER = ("import resource, runpy, sys\n"
           "limit = int(sys.argv.pop(1))\n"
           "_, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
           "if hard != resource.RLIM_INFINITY:\n"
           "    limit = min(limit, hard)\n"
           "resource.setrlimit(resource.RLIMIT_AS, (limit, hard))\n"
           "runpy.run_module('flake8', run_name='__main__', alter_sys=True)\n")


class Flake8Error(RuntimeError):
    """flake8 could not check the code: it crashed, timed out, ran out of
    memory, or printed something unexpected."""


@dataclass(frozen=True)
class Pep8Finding:
    """One flake8 finding: line of :attr:`SourceFile.text` (None for a
    notebook line the grader does not load, such as a test cell), column,
    code and message; ``where`` tells a student where it is; ``kit`` marks
    a line of the kit's own notebook cells."""

    line: int | None
    col: int
    code: str
    text: str
    where: str = ""
    kit: bool = False


def _is_marker(line: str) -> bool:
    return line.strip() in NBGRADER_MARKERS


def _flake8(data: bytes, config: Path) -> list[tuple[int, int, str, str]]:
    """flake8's findings on ``data`` as (row, col, code, text)."""
    with tempfile.TemporaryDirectory(prefix="pep8-") as directory:
        target = Path(directory) / "submission.py"
        target.write_bytes(data)
        command = [sys.executable, "-c", _RUNNER,
                   str(FLAKE8_MEMORY_MB * 1024 * 1024),
                   "--config", str(config), "--disable-noqa", "--jobs=1",
                   f"--format={_FORMAT}", target.name]
        try:
            completed = subprocess.run(
                command, cwd=directory, capture_output=True,
                encoding="utf-8", errors="replace", timeout=FLAKE8_TIMEOUT,
                env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        except subprocess.TimeoutExpired as exc:
            raise Flake8Error(f"flake8 did not finish within "
                              f"{FLAKE8_TIMEOUT} s") from exc
    # flake8 exits 1 both when it found something and when it crashed. Every
    # line of a finding starts with "row<TAB>col", so a crash is told by any
    # other line (its "failed during execution" banner), a traceback on
    # standard error, or an exit code 1 with no finding at all.
    # flake8's rows end with "\n" only; a message may quote a character
    # that str.splitlines would split at.
    rows = [row for row in completed.stdout.split("\n") if row]
    matches = [_LINE.match(row) for row in rows]
    crashed = (completed.returncode not in (0, 1)
               or (completed.returncode == 1 and not rows)
               or not all(matches)
               or "Traceback (most recent call last)" in completed.stderr)
    if crashed:
        detail = [line for line in (completed.stdout + "\n"
                                    + completed.stderr).split("\n")
                  if line.strip() and "greater verbosity" not in line]
        why = next((line for line in detail if "failed during" in line
                    or "Error" in line), detail[-1] if detail else "")
        why = why.replace(target.name + ": ", "").strip()
        raise Flake8Error(f"flake8 failed: {why[:200]}" if why else
                          f"flake8 failed (exit code "
                          f"{completed.returncode}) without a message")
    return [(int(m.group(1)), int(m.group(2)), m.group(3),
             m.group(4) if len(m.group(4)) <= 300
             else m.group(4)[:297] + "...") for m in matches if m]


def run_flake8(source: SourceFile, config: Path) -> list[Pep8Finding]:
    """Run flake8 with ``config`` over ``source``; return its findings.

    See the module docstring for what is linted. E266 on an nbgrader marker
    line (``### BEGIN SOLUTION`` and the like) is dropped: the markers are
    nbgrader's, not the student's style. Raises :class:`Flake8Error` when
    flake8 cannot check the code (warnings on its standard error are
    ignored).
    """
    lint = source.lint
    text = lint.text if lint is not None else source.text
    encoding = "utf-8" if lint is not None else source.encoding
    try:
        data = encode_python(text, encoding)
    except SourceError as exc:
        raise Flake8Error(f"the code cannot be handed to flake8 as it "
                          f"reads: {exc}") from exc
    rows = sorted(_flake8(data, config))
    lines = split_lines(text)
    findings = []
    for row, col, code, message in rows:
        if (code == "E266" and 1 <= row <= len(lines)
                and _is_marker(lines[row - 1])):
            continue
        if lint is None:
            findings.append(Pep8Finding(row, col, code, message,
                                        f"line {row}"))
            continue
        finding = _notebook_finding(source, lint, row, col, code, message)
        if finding is not None:
            findings.append(finding)
    return findings


def _notebook_finding(source: SourceFile, lint: LintText, row: int,
                      col: int, code: str, message: str
                      ) -> Pep8Finding | None:
    """A finding on line ``row`` of the notebook's program, mapped to the
    assembled module (None: not a finding on the student's Python)."""
    if row in lint.rewritten or code in NOTEBOOK_IGNORED:
        return None
    undefined = _UNDEFINED.match(message) if code == "F821" else None
    if undefined and undefined.group(1) in KERNEL_NAMES:
        return None
    origin = lint.origins[row - 1] if 1 <= row <= len(lint.origins) \
        else None
    if code == "F811" and origin is not None:
        earlier = _REDEFINED.search(message)
        if earlier:
            before = int(earlier.group(1))
            other = (lint.origins[before - 1]
                     if 1 <= before <= len(lint.origins) else None)
            if other is not None and other[0] != origin[0]:
                return None
    line = source.line_at(*origin) if origin is not None else None
    return Pep8Finding(line, col, code, message, lint.where(row),
                       kit=row in lint.kit)


def attribute(findings: list[Pep8Finding],
              spans: dict[str, tuple[int, int]]
              ) -> dict[str | None, list[Pep8Finding]]:
    """Group findings by the class whose inclusive line span holds them.

    ``spans`` maps a class name to its ``(first, last)`` lines (for
    instance from :func:`grader.source.node_span`). Every class gets a key,
    even with no finding; findings outside every span go under ``None``
    (reported, never penalised), except those on the kit's own notebook
    cells, which are not the student's and are dropped.
    """
    grouped: dict[str | None, list[Pep8Finding]] = {
        name: [] for name in spans}
    grouped[None] = []
    for finding in findings:
        owner = next((name for name, (first, last) in spans.items()
                      if finding.line is not None
                      and first <= finding.line <= last), None)
        if owner is None and finding.kit:
            continue
        grouped[owner].append(finding)
    return grouped


def format_pep8(findings: list[Pep8Finding], source: SourceFile) -> str:
    """One line per finding: where (line or notebook cell), code, message."""
    if not findings:
        return "PEP-8: flake8 found nothing."
    count = len(findings)
    lines = [f"PEP-8: flake8 found {count} problem{'s' if count > 1 else ''}:"]
    for finding in findings:
        where = finding.where or source.where(finding.line or 0)
        lines.append(f"  {where}, column {finding.col}: "
                     f"{finding.code} {finding.text}")
    return "\n".join(lines)
