"""``python -m grader grade PATH --watch``, end to end, as a student runs
it: the first grade, a save that loses points and its regrade (the items
lost, the new total), then Ctrl-C: exit 0 and no process of it left (the
fork server, its workers, the regrading fork). One watcher, one edit:
a few seconds more than a grade.
"""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# The watcher's own fork server and its end are under test: no shared one.
pytestmark = pytest.mark.usefixtures("own_fork_server")

KIT = Path(__file__).resolve().parents[2]
REFERENCE = KIT / "solutions" / "modeling_attention.py"
# A generous bound for a loaded 2-core machine: not a speed assertion.
PATIENCE = 240.0


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, session id, start time) of every process."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (int(fields[1]), int(fields[3]),
                                  fields[19])
    return found


def _tree(root: int, seen: dict[int, str]) -> None:
    """Add ``root``'s descendants (pid -> start time) to ``seen``."""
    table = _processes()
    todo = [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _, started) in table.items():
            if ppid == parent and pid not in seen:
                seen[pid] = started
                todo.append(pid)


def _alive(pid: int, started: str) -> bool:
    entry = _processes().get(pid)
    return entry is not None and entry[2] == started


class Lines:
    """A process's standard output, line by line, read by a thread."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=self._read, args=(process,),
                                       daemon=True)
        self.reader.start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            self.lines.put(line)

    def rest(self) -> str:
        """Everything, once the process closed its output."""
        self.reader.join(timeout=10)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "".join(self.seen)

    def until(self, needle: str, during=lambda: None) -> list[str]:
        """The lines up to the first holding ``needle``."""
        deadline = time.monotonic() + PATIENCE
        block: list[str] = []
        while time.monotonic() < deadline:
            during()
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            block.append(line)
            self.seen.append(line)
            if needle in line:
                return block
        raise AssertionError(f"no {needle!r} within {PATIENCE:g} s; "
                             f"output: {''.join(self.seen)[-3000:]}")


@pytest.mark.slow
@pytest.mark.usefixtures("own_command_process")
def test_watch_regrades_on_save_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    submission = tmp_path / "modeling_attention.py"
    submission.write_text(REFERENCE.read_text())
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", "grade", str(submission),
         "--public-only", "--watch"], cwd=KIT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    tree: dict[int, str] = {}
    try:
        output = Lines(process)
        first = output.until("[watch] graded")
        assert "Total: 10 / 10 + 1 bonus" in "".join(first)
        assert "11 / 10" in first[-1]

        text = REFERENCE.read_text().replace(" / self.scale, dim=-1)",
                                             ", dim=-1)")
        submission.write_text(text)
        block = output.until("[watch] regraded",
                             during=lambda: _tree(process.pid, tree))
        assert "9 / 10" in block[-1]
        changes = "".join(output.until("\n") + output.until("\n"))
        assert changes.startswith("  lost -1 task1.forward (now 2)"), \
            changes
        assert "lost -1 task1.bonus (now 0)" in changes
        assert any(pid != process.pid for pid in tree), \
            "the watcher started no process to grade"
    finally:
        _tree(process.pid, tree)
        process.send_signal(signal.SIGINT)
        try:
            status = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert status == 0, process.stderr.read()[-3000:]
    assert output.rest().endswith("[watch] stopped\n")
    time.sleep(0.5)  # a worker killed with its server is reaped by init
    left = [pid for pid, started in tree.items() if _alive(pid, started)]
    left += [pid for pid, (_, session, _) in _processes().items()
             if session == process.pid]
    assert not left, f"processes left behind: {left}"
