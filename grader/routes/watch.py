"""``python -m grader grade PATH --watch``: a warm self-check that regrades
in a fork of itself on every save and prints the items gained and lost.

Details: docs/internals.md, `grader.routes.watch`.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from grader.output.text import clean, one_line
from grader.run.proctree import fork_with_pipe, kill_group

#: Seconds between two looks at the watched files.
POLL = 0.2
#: Seconds between the two reads that must agree before a file is graded.
SETTLE = 0.1

Snapshot = dict[Path, tuple[int, int, str]]


def snapshot(paths: list[Path]) -> Snapshot:
    """Each file's modification time, size and content hash (a missing or
    unreadable file: zeros and no hash)."""
    state: Snapshot = {}
    for path in paths:
        try:
            data = path.read_bytes()
            info = path.stat()
            state[path] = (info.st_mtime_ns, len(data),
                           hashlib.sha256(data).hexdigest())
        except OSError:
            state[path] = (0, 0, "")
    return state


def stable(paths: list[Path], stopped: Callable[[], bool]) -> Snapshot:
    """The files' snapshot once two reads :data:`SETTLE` s apart agree (an
    editor that writes in several steps is waited for)."""
    before = snapshot(paths)
    while not stopped():
        time.sleep(SETTLE)
        now = snapshot(paths)
        if now == before:
            return now
        before = now
    return before


def _content(state: Snapshot) -> dict[Path, str]:
    return {path: entry[2] for path, entry in state.items()}


class Watcher:
    """The warm process: its options, the files it watches, the last
    grade's items."""

    def __init__(self, args: Any) -> None:
        """Keep the command line's options (``grade``'s)."""
        self.args = args
        self.paths: list[Path] = []
        self.last: dict[str, dict] | None = None
        self.stop: list[int] = []
        self.child = 0

    # -- warm-up ----------------------------------------------------------

    def warm_up(self) -> None:
        """Locate once (which files to watch, which assignment), then
        import and prepare everything a grade needs, once."""
        from grader.engine import build_plan, resolve_seed
        from grader.judge.checking import warm_up
        from grader.locate.submission import locate
        from grader.routes.judges import JudgeOptions, prewarm

        submission = locate(self.args.path, self.args.assignment)
        self.paths = self._watched(submission)
        prewarm(JudgeOptions(no_feedback=self.args.feedback is None))
        assignment = submission.assignment
        self.plan = build_plan(assignment, resolve_seed(self.args.seed)[0],
                               self.args.public_only)
        warm_up(assignment)
        gc.freeze()

    def _watched(self, submission: Any) -> list[Path]:
        paths = {Path(source.path) for source in submission.sources.values()}
        if Path(self.args.path).is_file():
            paths.add(Path(self.args.path))
        return sorted(paths)

    # -- one grade, in a fork of this process -------------------------------

    def _grade_child(self, write_fd: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        from grader.engine import Options, grade_submission
        from grader.locate.submission import SubmissionError, locate
        from grader.run.sandbox import Limits

        try:
            submission = locate(self.args.path, self.args.assignment)
            report = grade_submission(submission, Options(
                seed=self.args.seed, public_only=self.args.public_only,
                limits=Limits(timeout=self.args.timeout,
                              memory_mb=self.args.memory),
                judge=True, plan=self.plan))
            if self.args.feedback is not None:
                from grader.output.feedback import write_feedback

                write_feedback(report, self.args.feedback)
            record = {"report": report.as_json(), "text": report.as_text(),
                      "paths": [str(source.path) for source in
                                submission.sources.values()]}
        except SubmissionError as exc:
            record = {"error": one_line(str(exc))}
        data = json.dumps(record).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]

    def grade_once(self) -> dict | None:
        """Grade in a fork of this process; its record (None when it was
        stopped, or died)."""
        pid, fd = fork_with_pipe(self._grade_child, new_group=True,
                                 show_errors=True)
        self.child = pid
        chunks = []
        try:
            while not self.stop:
                ready, _, _ = select.select([fd], [], [], POLL)
                if ready:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    chunks.append(chunk)
        finally:
            os.close(fd)
            if self.stop:
                kill_group(pid)
            os.waitpid(pid, 0)
            self.child = 0
        if self.stop or not chunks:
            return None
        try:
            return json.loads(b"".join(chunks))
        except ValueError:
            return None

    # -- what is printed ----------------------------------------------------

    def show(self, record: dict, seconds: float) -> None:
        """The whole report the first time; then what changed."""
        write = sys.stdout.write
        if "error" in record:
            write(f"[watch] cannot grade: {record['error']}\n")
            sys.stdout.flush()
            return
        report = record["report"]
        items = {item["id"]: item for item in report["items"]}
        total = f"{report['score']:g} / {report['max_score']:g}"
        if self.last is None:
            write(record["text"])
            write(f"[watch] graded in {seconds:.2f} s: {total}; watching "
                  f"{', '.join(str(p) for p in self.paths)} "
                  f"(Ctrl-C stops)\n")
        else:
            write(f"[watch] regraded in {seconds:.2f} s: {total}\n")
            changes = self._changes(items)
            write("".join(changes.values()) or "[watch] no item changed\n")
            for item in items.values():
                costs = item["max_score"] > 0 or item["score"] < 0
                if (not item["passed"] and costs
                        and item["id"] not in changes):
                    write(f"  still FAIL {item['id']}: "
                          f"{one_line(clean(item['message']), 160)}\n")
        self.last = items
        sys.stdout.flush()

    def _changes(self, items: dict[str, dict]) -> dict[str, str]:
        """Item id -> a line saying what it gained or lost."""
        lines = {}
        assert self.last is not None
        for item_id, item in items.items():
            before = self.last.get(item_id)
            if before is None or before["score"] == item["score"]:
                continue
            change = item["score"] - before["score"]
            word = "gained" if change > 0 else "lost"
            lines[item_id] = (f"  {word} {change:+g} {item_id} (now "
                              f"{item['score']:g}): "
                              f"{one_line(clean(item['message']), 160)}\n")
        return lines

    # -- the loop -----------------------------------------------------------

    def run(self) -> int:
        """Grade, then regrade on every change, until a signal stops it."""
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.warm_up()
            graded: dict[Path, str] | None = None
            while not self.stop:
                state = stable(self.paths, lambda: bool(self.stop))
                if self.stop:
                    break
                if _content(state) == graded:
                    time.sleep(POLL)
                    continue
                started = time.perf_counter()
                record = self.grade_once()
                if record is None:
                    continue
                if snapshot(self.paths) != state:
                    sys.stdout.write("[watch] the file changed while it "
                                     "was graded: grading it again\n")
                    continue
                graded = _content(state)
                self.show(record, time.perf_counter() - started)
        finally:
            self._close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        sys.stdout.write("[watch] stopped\n")
        return 0

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stop.append(signum)

    def _close(self) -> None:
        if self.child:
            kill_group(self.child)
        from grader.run import forkserver

        forkserver.stop()


def watch(args: Any) -> int:
    """``grade PATH --watch`` (``args``: grade's parsed options)."""
    return Watcher(args).run()
