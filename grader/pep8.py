"""PEP-8 findings: flake8 over a submission, attributed to its classes.

The rubric takes a point from a task when flake8, run with the kit's own
configuration (the ``[flake8]`` section of ``setup.cfg``), reports anything
on a line of the task's class. Findings outside every class (module-level
given code, imports) are reported and never penalised.

flake8 runs in a subprocess on a copy of the submission's Python text, so a
notebook is linted as the module the grader assembled from its code cells,
and every finding is reported with :meth:`SourceFile.where` (``cell 7, line
3``).
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.source import SourceFile

#: How long flake8 may take on one submission, in seconds.
FLAKE8_TIMEOUT = 120
#: nbgrader's cell markers. flake8 calls them E266 ("too many leading '#'
#: for block comment"), but they belong to nbgrader, not to the student.
NBGRADER_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION",
                    "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")

_FORMAT = "%(row)d\t%(col)d\t%(code)s\t%(text)s"
_LINE = re.compile(r"^(\d+)\t(\d+)\t(\w+)\t(.*)$")


class Flake8Error(RuntimeError):
    """flake8 crashed, timed out, or printed something unexpected."""


@dataclass(frozen=True)
class Pep8Finding:
    """One flake8 finding: 1-based line and column, code and message."""

    line: int
    col: int
    code: str
    text: str


def _is_marker(line: str) -> bool:
    return line.strip() in NBGRADER_MARKERS


def run_flake8(source: SourceFile, config: Path) -> list[Pep8Finding]:
    """Run flake8 with ``config`` over ``source.text``; return its findings.

    The text is written to ``submission.py`` in a temporary directory and
    checked by ``python -m flake8 --config CONFIG`` in a subprocess. E266 on
    an nbgrader marker line (``### BEGIN SOLUTION`` and the like) is
    dropped: the markers are nbgrader's, not the student's style. Raises
    :class:`Flake8Error` when flake8 crashes, times out or prints output
    that is not a finding (warnings on its standard error are ignored).
    """
    with tempfile.TemporaryDirectory(prefix="pep8-") as directory:
        target = Path(directory) / "submission.py"
        target.write_text(source.text, encoding="utf-8")
        command = [sys.executable, "-m", "flake8", "--config", str(config),
                   f"--format={_FORMAT}", target.name]
        try:
            completed = subprocess.run(
                command, cwd=directory, capture_output=True, text=True,
                timeout=FLAKE8_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise Flake8Error(f"flake8 did not finish within "
                              f"{FLAKE8_TIMEOUT} s") from exc
    # flake8 exits 1 both when it found something and when it crashed. Every
    # line of a finding starts with "row<TAB>col", so a crash is told by any
    # other line (its "There was a critical error" banner), a traceback on
    # standard error, or an exit code 1 with no finding at all.
    rows = completed.stdout.splitlines()
    matches = [_LINE.match(row) for row in rows]
    crashed = (completed.returncode not in (0, 1)
               or (completed.returncode == 1 and not rows)
               or not all(matches)
               or "Traceback (most recent call last)" in completed.stderr)
    if crashed:
        detail = (completed.stdout + completed.stderr).strip().splitlines()
        raise Flake8Error(f"flake8 failed (exit code "
                          f"{completed.returncode}): "
                          f"{detail[-1] if detail else 'no output'}")
    lines = source.lines
    findings = []
    for match in matches:
        row, col, code, text = match.groups()
        finding = Pep8Finding(int(row), int(col), code, text)
        if (code == "E266" and 1 <= finding.line <= len(lines)
                and _is_marker(lines[finding.line - 1])):
            continue
        findings.append(finding)
    return sorted(findings, key=lambda f: (f.line, f.col, f.code))


def attribute(findings: list[Pep8Finding],
              spans: dict[str, tuple[int, int]]
              ) -> dict[str | None, list[Pep8Finding]]:
    """Group findings by the class whose inclusive line span holds them.

    ``spans`` maps a class name to its ``(first, last)`` lines (for
    instance from :func:`grader.source.node_span`). Every class gets a key,
    even with no finding; findings outside every span go under ``None``
    (reported, never penalised).
    """
    grouped: dict[str | None, list[Pep8Finding]] = {
        name: [] for name in spans}
    grouped[None] = []
    for finding in findings:
        owner = next((name for name, (first, last) in spans.items()
                      if first <= finding.line <= last), None)
        grouped[owner].append(finding)
    return grouped


def format_pep8(findings: list[Pep8Finding], source: SourceFile) -> str:
    """One line per finding: where (line or notebook cell), code, message."""
    if not findings:
        return "PEP-8: flake8 found nothing."
    count = len(findings)
    lines = [f"PEP-8: flake8 found {count} problem{'s' if count > 1 else ''}:"]
    for finding in findings:
        lines.append(f"  {source.where(finding.line)}, column {finding.col}: "
                     f"{finding.code} {finding.text}")
    return "\n".join(lines)
