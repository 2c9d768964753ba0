"""PEP-8 findings: flake8 over a submission, attributed to its classes.

Details: docs/internals.md, `grader.judge.pep8`.
"""
from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

# nbgrader's cell markers (NBGRADER_MARKERS): flake8 calls them E266 ("too
# many leading '#' for block comment"), but they belong to nbgrader, not to
# the student.
from grader.constants import NBGRADER_MARKERS
from grader.errors import GraderError
from grader.locate.source import SourceError, encode_python, split_lines
from grader.run.tempdirs import run_folder

if TYPE_CHECKING:
    from grader.locate.cells import LintText
    from grader.locate.source import SourceFile

#: How long flake8 may take on one submission, in seconds. The largest
#: source the grader reads (grader.locate.source.MAX_SOURCE_BYTES) takes about
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
# Whether warm_up ran here (see warm).
_WARM = [False]
# Runs flake8 under an address-space limit set inside the child itself
# (no preexec_fn: the grader lints from a thread).
_RUNNER = ("import resource, runpy, sys\n"
           "limit = int(sys.argv.pop(1))\n"
           "_, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
           "if hard != resource.RLIM_INFINITY:\n"
           "    limit = min(limit, hard)\n"
           "resource.setrlimit(resource.RLIMIT_AS, (limit, hard))\n"
           "runpy.run_module('flake8', run_name='__main__', alter_sys=True)\n")


class Flake8Error(GraderError, RuntimeError):
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


def _flake8_argv(config: Path, target: str) -> list[str]:
    return ["--config", str(config), "--disable-noqa", "--jobs=1",
            f"--format={_FORMAT}", target]


def _vm_bytes() -> int:
    """The address space this process maps now (0 when unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _stack_depth() -> int:
    frame: FrameType | None = sys._getframe()
    depth = 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def warm() -> bool:
    """Whether :func:`warm_up` ran in this process (or in the process it
    was forked from): a lint then costs a fork, not an interpreter."""
    return _WARM[0]


def warm_up(config: Path) -> None:
    """Import flake8 and its plugins into this process and run it once
    (on a one-line file, output discarded), so that every lint started
    with ``fork=True`` from this process, or from a process forked from
    it (a batch's judges), starts warm: a fork instead of a new
    interpreter that imports flake8 again."""
    import contextlib

    from flake8.main import cli

    with tempfile.TemporaryDirectory(prefix="pep8-",
                                     dir=run_folder()) as directory:
        target = Path(directory) / "warm.py"
        target.write_text("x = 1\n", encoding="utf-8")
        sink = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        with contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink):
            try:
                cli.main(_flake8_argv(config, str(target)))
            except SystemExit:
                pass
    _WARM[0] = True


class Flake8Run:
    """flake8 checking one text in a process of its own: started at once,
    :meth:`rows` waits for it.

    The process is a new interpreter (``python -c`` running flake8), or,
    with ``fork=True``, a fork of this process, which costs a fraction
    of that when flake8 is already imported here (:func:`warm_up`, as a
    batch's coordinator does). Both get the same arguments, the same
    limits (:data:`FLAKE8_MEMORY_MB` beyond what the process maps when it
    starts, :data:`FLAKE8_TIMEOUT` seconds) and the same room on the
    stack, and their output is read alike.
    """

    def __init__(self, data: bytes, config: Path, fork: bool = False
                 ) -> None:
        """Write ``data`` to a private folder and start flake8 on it."""
        self.directory = tempfile.TemporaryDirectory(
            prefix="pep8-", dir=run_folder())
        folder = Path(self.directory.name)
        self.target = folder / "submission.py"
        self.target.write_bytes(data)
        self.out, self.err = folder / "flake8.out", folder / "flake8.err"
        self.timeout = FLAKE8_TIMEOUT
        self.started = time.monotonic()
        self.popen: subprocess.Popen | None = None
        self.pid = 0
        argv = _flake8_argv(config, self.target.name)
        if fork:
            self.pid = self._fork(folder, argv)
            return
        command = [sys.executable, "-c", _RUNNER,
                   str(FLAKE8_MEMORY_MB * 1024 * 1024), *argv]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.popen = subprocess.Popen(
                command, cwd=folder, stdout=out, stderr=err,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONIOENCODING": "utf-8"})

    def _fork(self, folder: Path, argv: list[str]) -> int:
        limit = _vm_bytes() + FLAKE8_MEMORY_MB * 1024 * 1024
        # A new interpreter starts flake8 a few frames deep under the
        # default limit; so does the fork, whatever the depth of the
        # caller and whatever limit this process was given (IPython's
        # completer, jedi, sets 3000 when it is imported): pyflakes gives
        # up on deep expressions at the same point either way.
        frames = _NEW_LIMIT + _stack_depth() - _RUNNER_DEPTH
        pid = os.fork()
        if pid:
            return pid
        code = 70
        try:
            os.chdir(folder)
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(self.out, os.O_WRONLY | os.O_CREAT, 0o600)
            err = os.open(self.err, os.O_WRONLY | os.O_CREAT, 0o600)
            for source, target in ((null, 0), (out, 1), (err, 2)):
                os.dup2(source, target)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
            import resource

            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
            sys.setrecursionlimit(max(frames, 100))
            from flake8.main import cli

            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1  # as an uncaught exception ends an interpreter
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            os._exit(code)

    def _wait(self) -> int:
        """The exit status; raises Flake8Error at the deadline."""
        left = self.timeout - (time.monotonic() - self.started)
        if self.popen is not None:
            try:
                return self.popen.wait(timeout=max(left, 0))
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
                raise Flake8Error(f"flake8 did not finish within "
                                  f"{self.timeout} s") from None
        deadline = time.monotonic() + max(left, 0)
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() >= deadline:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(self.pid, 0)
                raise Flake8Error(f"flake8 did not finish within "
                                  f"{self.timeout} s")
            time.sleep(0.005)

    def rows(self) -> list[tuple[int, int, str, str]]:
        """flake8's findings as (row, col, code, text); raises
        :class:`Flake8Error` when flake8 could not check the text."""
        try:
            returncode = self._wait()
            stdout = self.out.read_bytes().decode("utf-8", "replace")
            stderr = self.err.read_bytes().decode("utf-8", "replace")
        finally:
            self.directory.cleanup()
        return _parse(returncode, stdout, stderr, self.target.name)


# A new interpreter runs flake8 this many frames deep (runpy's frames).
_RUNNER_DEPTH = 5
# The recursion limit of a new interpreter (CPython's default).
_NEW_LIMIT = 1000


def _parse(returncode: int, stdout: str, stderr: str,
           name: str) -> list[tuple[int, int, str, str]]:
    """flake8's rows from its exit code and output, or Flake8Error."""
    # flake8 exits 1 both when it found something and when it crashed. Every
    # line of a finding starts with "row<TAB>col", so a crash is told by any
    # other line (its "failed during execution" banner), a traceback on
    # standard error, or an exit code 1 with no finding at all.
    # flake8's rows end with "\n" only; a message may quote a character
    # that str.splitlines would split at.
    rows = [row for row in stdout.split("\n") if row]
    matches = [_LINE.match(row) for row in rows]
    crashed = (returncode not in (0, 1)
               or (returncode == 1 and not rows)
               or not all(matches)
               or "Traceback (most recent call last)" in stderr)
    if crashed:
        detail = [line for line in (stdout + "\n" + stderr).split("\n")
                  if line.strip() and "greater verbosity" not in line]
        why = next((line for line in detail if "failed during" in line
                    or "Error" in line), detail[-1] if detail else "")
        why = why.replace(name + ": ", "").strip()
        raise Flake8Error(f"flake8 failed: {why[:200]}" if why else
                          f"flake8 failed (exit code "
                          f"{returncode}) without a message")
    return [(int(m.group(1)), int(m.group(2)), m.group(3),
             m.group(4) if len(m.group(4)) <= 300
             else m.group(4)[:297] + "...") for m in matches if m]


class PendingLint:
    """flake8 started over a source (:func:`start_flake8`);
    :meth:`findings` waits for it."""

    def __init__(self, source: SourceFile, config: Path,
                 fork: bool = False) -> None:
        """Start flake8 over ``source`` (see :class:`Flake8Run`)."""
        self.source = source
        lint = source.lint
        self.text = lint.text if lint is not None else source.text
        encoding = "utf-8" if lint is not None else source.encoding
        self.problem = ""
        self.run: Flake8Run | None = None
        try:
            data = encode_python(self.text, encoding)
        except SourceError as exc:
            self.problem = (f"the code cannot be handed to flake8 as it "
                            f"reads: {exc}")
            return
        try:
            self.run = Flake8Run(data, config, fork)
        except OSError as exc:
            self.problem = f"flake8 could not be started ({exc})"

    def findings(self) -> list[Pep8Finding]:
        """The findings (see :func:`run_flake8`); raises
        :class:`Flake8Error` when flake8 could not check the code."""
        if self.run is None:
            raise Flake8Error(self.problem)
        source, lint = self.source, self.source.lint
        rows = sorted(self.run.rows())
        lines = split_lines(self.text)
        findings = []
        for row, col, code, message in rows:
            if (code == "E266" and 1 <= row <= len(lines)
                    and _is_marker(lines[row - 1])):
                continue
            if lint is None:
                findings.append(Pep8Finding(row, col, code, message,
                                            f"line {row}"))
                continue
            finding = _notebook_finding(source, lint, row, col, code,
                                        message)
            if finding is not None:
                findings.append(finding)
        return findings


def start_flake8(source: SourceFile, config: Path,
                 fork: bool = False) -> PendingLint:
    """Start flake8 with ``config`` over ``source`` and return at once;
    ``fork=True`` forks this (warm) process instead of starting a new
    interpreter (:class:`Flake8Run`)."""
    return PendingLint(source, config, fork)


def run_flake8(source: SourceFile, config: Path,
               fork: bool = False) -> list[Pep8Finding]:
    """Run flake8 with ``config`` over ``source``; return its findings.

    See the module docstring for what is linted. E266 on an nbgrader marker
    line (``### BEGIN SOLUTION`` and the like) is dropped: the markers are
    nbgrader's, not the student's style. Raises :class:`Flake8Error` when
    flake8 cannot check the code (warnings on its standard error are
    ignored).
    """
    return start_flake8(source, config, fork).findings()


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

    ``spans`` maps a class name to its ``(first, last)`` lines (for instance
    from :func:`grader.locate.source.node_span`). Every class gets a key, even
    with no finding; findings outside every span go under ``None`` (reported,
    never penalised), except those on the kit's own notebook cells, which are
    not the student's and are dropped.
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
