"""The judges of a class: one forked judge per submission, ``--jobs`` at
a time, each grading exactly as ``python -m grader grade`` does; a judge
that dies is retried once, one that hangs is stopped at a deadline."""
from __future__ import annotations

import argparse
import gc
import json
import os
import select
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.output.files import write_atomic
from grader.plan import Plan
from grader.routes.classfolder import Entry
from grader.routes.rows import (STATUS_ERROR, STATUS_GRADED, error_row,
                                record_path, row_from_report)
from grader.run.cores import default_jobs
from grader.run.proctree import fork_with_pipe, kill_group
from grader.run.tempdirs import sweep
from grader.worker.confine import die_with_parent

RETRIES = 1


@dataclass
class JudgeOptions:
    """How the judges of a class grade: the typed options of
    :func:`judge_all` (``batch`` and ``nbgrader`` build them from their
    command lines)."""

    assignment: str | None = None
    seed: int | None = None
    public_only: bool = False
    timeout: float = 20.0
    memory: int = 2048
    no_feedback: bool = False
    jobs: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> JudgeOptions:
        """The options a parsed command line gives (absent ones keep their
        defaults)."""
        given = {name: getattr(args, name) for name in
                 cls.__dataclass_fields__ if hasattr(args, name)}
        return cls(**given)


def _judge(entry: Entry, reports: Path, args: JudgeOptions,
           result_fd: int, plan: Plan | None = None) -> None:
    """Grade one submission (in a forked child); send back its row.

    The submission is located from its own entry alone (no module beside
    it is looked up) and graded against ``args.assignment``, the class's,
    with the coordinator's ``plan`` of the cases (built once for all).
    """
    from grader.engine import Options, grade_submission
    from grader.locate.submission import SubmissionError, locate
    from grader.run.sandbox import Limits

    record: dict[str, object] = {"student": entry.student,
                                 "path": str(entry.path)}
    try:
        options = Options(seed=args.seed, public_only=args.public_only,
                          limits=Limits(timeout=args.timeout,
                                        memory_mb=args.memory),
                          judge=True, plan=plan)
        submission = locate(entry.path, args.assignment, nearby=False)
        report = grade_submission(submission, options)
        record.update(status=STATUS_GRADED, report=report.as_json())
        if not args.no_feedback:
            from grader.output.feedback import write_feedback

            write_feedback(report, reports / entry.key)
    except SubmissionError as exc:
        record.update(status=STATUS_ERROR,
                      error=f"could not grade: {exc}")
    except Exception as exc:  # a grader bug must not stop the batch
        record.update(status=STATUS_ERROR,
                      error=f"internal grader error: "
                            f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc())
    write_atomic(record_path(reports, entry),
                 json.dumps(record, indent=2) + "\n")
    data = json.dumps(record).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(result_fd, view):]


@dataclass
class _Running:
    entry: Entry
    pid: int
    fd: int
    started: float
    attempt: int
    data: bytearray
    ended: bool = False  # its pipe reached end of file: the judge exits


def _start(entry: Entry, reports: Path, args: JudgeOptions,
           attempt: int, others: list[_Running],
           plan: Plan | None = None) -> _Running:
    coordinator = os.getpid()

    def judge(write_fd: int) -> None:
        # A coordinator killed outright (SIGKILL, the OOM killer) takes
        # its judges with it, and their workers end with them (the fork
        # server ends a worker whose client is gone).
        die_with_parent(coordinator)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _judge(entry, reports, args, write_fd, plan)

    pid, read_fd = fork_with_pipe(
        judge, close=[other.fd for other in others], new_group=True)
    os.set_blocking(read_fd, False)
    return _Running(entry, pid, read_fd, time.monotonic(), attempt,
                    bytearray())


def _stop(running: _Running) -> None:
    kill_group(running.pid, signal.SIGKILL)


def _deadline(args: JudgeOptions) -> float:
    """How long one judge may take: two rounds of workers (the second
    when the module-level code raised), each as long as a starved worker
    may run (grader.run.sandbox.WALL_FACTOR), plus slack."""
    from grader.run.sandbox import WALL_FACTOR

    return 2 * WALL_FACTOR * args.timeout + 60.0


def _collect(running: _Running) -> dict | None:
    try:
        while chunk := os.read(running.fd, 1 << 16):
            running.data.extend(chunk)
        running.ended = True
    except BlockingIOError:
        pass
    try:
        return json.loads(bytes(running.data)) if running.data else None
    except json.JSONDecodeError:
        return None


def prewarm(args: JudgeOptions) -> None:
    """Import, once, everything a judge needs (flake8 too: each judge
    lints in a fork of itself), and start the fork server every judge
    asks for its workers (it warms up meanwhile). Again: a no-op."""
    from grader.run import forkserver

    forkserver.start()
    # Any student of a class may plot: the server imports matplotlib once.
    forkserver.warm_plotting()
    import torch

    import grader.engine
    from grader.judge import pep8
    from grader.plugin import plugins

    if "flake8.main.cli" not in sys.modules:
        pep8.warm_up(grader.engine.FLAKE8_CONFIG)

    torch.set_num_threads(1)
    plugins()
    # What every judge would otherwise do again: the shapes' torch
    # catalogue, the folders a worker may read.
    import grader.shapes.tensor_facts  # noqa: F401
    from grader.run.sandbox import sandbox_paths

    for each in plugins():
        sandbox_paths(each.package_files)
    if not args.no_feedback:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.font_manager  # noqa: F401
        import PIL.Image
        import PIL.ImageDraw  # noqa: F401

        PIL.Image.preinit()  # the PNG writer, imported by the first save

        import grader.output.figures  # noqa: F401
    # Every judge asks this one server for its workers: it must be ready
    # before the first judge is forked (see ForkServer.wait_ready).
    try:
        forkserver.shared().wait_ready()
    except forkserver.ForkServerError:
        pass  # each judge reports it for its submission


def shared_plan(args: JudgeOptions) -> Plan | None:
    """The cases' plan every judge grades with, built once here (None
    when the assignment is not known yet: each judge builds its own)."""
    from grader.engine import build_plan, resolve_seed
    from grader.rubric import RubricError, get_assignment

    if not args.assignment:
        return None
    try:
        assignment = get_assignment(args.assignment)
    except RubricError:
        return None
    return build_plan(assignment, resolve_seed(args.seed)[0],
                      args.public_only)


def judge_all(todo: list[Entry], reports: Path, args: JudgeOptions,
              done: Callable[[Entry, dict, dict | None, float], None]
              ) -> list[int]:
    """Grade ``todo`` in forked judges, ``args.jobs`` at a time.

    Each judge grades ``entry.path`` (against ``args.assignment`` when it
    is set) and writes its record (:func:`record_path`); ``done(entry, row,
    record, seconds)`` is called in this process as each one finishes,
    with its CSV row and the judge's record (None when the judge died
    twice or hung). Returns the signals that interrupted the loop (empty
    when every submission was judged).
    """
    prewarm(args)
    plan = shared_plan(args)
    if plan is not None:
        from grader.judge.checking import warm_up
        from grader.rubric import get_assignment

        assert args.assignment  # a shared plan needs a known assignment
        warm_up(get_assignment(args.assignment))
    # What the coordinator holds now (torch, the plan) is never freed:
    # out of the garbage collector's sight, a judge neither walks it nor
    # copies its pages by touching them.
    gc.freeze()
    jobs = args.jobs or default_jobs()
    queue = [(entry, 0) for entry in todo]
    running: list[_Running] = []
    # Ctrl-C and SIGTERM only raise a flag that the loop checks: an
    # exception raised by a signal can land in a finaliser, where Python
    # prints it and carries on.
    stop: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stop.append(signum)

    # A signal the batch was started ignoring (a shell's background job
    # ignores Ctrl-C) stays ignored.
    previous = {sig: signal.signal(sig, on_signal)
                for sig in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        while (queue or running) and not stop:
            while queue and len(running) < jobs:
                entry, attempt = queue.pop(0)
                running.append(_start(entry, reports, args, attempt,
                                      running, plan))
            _wait_for_news(running)
            for job in list(running):
                # A judge whose pipe ended has written its record and is
                # exiting (or died): wait for it rather than poll again.
                pid, status = os.waitpid(
                    job.pid, 0 if job.ended else os.WNOHANG)
                late = time.monotonic() - job.started > _deadline(args)
                if not pid and not late:
                    _collect(job)
                    continue
                if not pid:
                    _stop(job)
                    os.waitpid(job.pid, 0)
                record = _collect(job)
                os.close(job.fd)
                running.remove(job)
                seconds = time.monotonic() - job.started
                if record is None and not late and job.attempt < RETRIES:
                    queue.append((job.entry, job.attempt + 1))
                    continue
                why = (f"grading took longer than {_deadline(args):g} s"
                       if late else _death(status))
                row = row_of(job.entry, record, why)
                if record is None:
                    save_error(reports, job.entry, row)
                done(job.entry, row, record, seconds)
    finally:
        for job in running:
            _stop(job)
            os.waitpid(job.pid, 0)
            os.close(job.fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sweep()  # the temporary folders of judges that were killed
    return stop


def _wait_for_news(running: list[_Running]) -> None:
    """Sleep until a judge sends something or ends (or 50 ms pass), and
    read what came: the next judge starts as soon as a core is free."""
    listening = [job.fd for job in running if not job.ended]
    if not listening:
        return
    ready, _, _ = select.select(listening, [], [], 0.05)
    for job in running:
        if job.fd in ready:
            _collect(job)


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return (f"the grading process was killed ({name}) twice; "
                f"nothing of this submission was kept")
    return (f"the grading process ended (status "
            f"{os.WEXITSTATUS(status)}) without a result, twice")


def row_of(entry: Entry, record: dict | None, why: str) -> dict:
    """The row of a finished judge (``record``), or an error row saying
    ``why`` there is none; never raises."""
    try:
        if record is None:
            return error_row(entry.student, entry.path,
                             f"could not grade: {why}")
        if record.get("status") == STATUS_GRADED:
            return row_from_report(entry.student, entry.path,
                                   record["report"])
        return error_row(entry.student, entry.path,
                         str(record.get("error", "could not grade")))
    except (KeyError, TypeError, ValueError) as exc:
        return error_row(entry.student, entry.path,
                         f"internal grader error: unreadable record "
                         f"({type(exc).__name__}: {exc})")


def save_error(reports: Path, entry: Entry, row: dict) -> None:
    write_atomic(record_path(reports, entry),
                 json.dumps({"student": entry.student,
                             "path": str(entry.path),
                             "status": STATUS_ERROR,
                             "error": row["errors"]}, indent=2) + "\n")
