"""``python -m grader batch``: one row per submission, whatever happens."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.routes.rows import RECORD
from grader.run import cores

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
REFERENCE = ROOT / "solutions" / "modeling_attention.py"
STUB = ROOT / "transformer_lm" / "modeling_attention.py"
EXAMPLE = ROOT / "examples" / "submission"
ITEMS = ["task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes"]


def _variant(old: str, new: str) -> str:
    text = REFERENCE.read_text()
    assert old in text
    return text.replace(old, new)


HANG = _variant("        q, k, v = self.q(x), self.k(x), self.v(x)\n",
                "        import time\n        time.sleep(600)\n"
                "        q, k, v = self.q(x), self.k(x), self.v(x)\n")
CRASH = "import os\nos._exit(7)\n" + REFERENCE.read_text()
UNSCALED = _variant(" / self.scale, dim=-1)", ", dim=-1)")


def _batch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "batch", *args],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _rows(path: Path) -> dict[str, dict]:
    return {row["student"]: row for row in csv.DictReader(path.open())}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A class of every kind of entry, graded once."""
    folder = tmp_path_factory.mktemp("class")
    shutil.copytree(EXAMPLE, folder / "alice")           # a repository
    shutil.copy(REFERENCE, folder / "bob.py")            # a file
    shutil.copy(STUB, folder / "carol.py")               # the stub
    (folder / "dave.py").write_text(HANG)                # hangs in task 1
    (folder / "erin.py").write_text(CRASH)               # exits on import
    (folder / "frank.py").write_bytes(b"\x7fELF\x00\x01")  # binary
    (folder / "notes.txt").write_text("not a submission")
    notebook = {"cells": [{"cell_type": "code", "metadata": {},
                           "outputs": [], "execution_count": None,
                           "source": REFERENCE.read_text()}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "gina.ipynb").write_text(json.dumps(notebook))
    out = tmp_path_factory.mktemp("out") / "grades.csv"
    result = _batch(str(folder), "--out", str(out), "--jobs", "2",
                    "--timeout", "3")
    return out, result


def test_every_submission_gets_one_row(mixed):
    """Eight entries, eight rows; the .txt is an error row that says
    why it was not graded."""
    out, result = mixed
    rows = _rows(out)
    assert sorted(rows) == ["alice", "bob", "carol", "dave", "erin",
                            "frank", "gina", "notes.txt"]
    assert rows["notes.txt"]["status"] == "error"
    assert "not a submission: a .txt file" in rows["notes.txt"]["errors"]
    header = next(csv.reader(out.open()))
    assert header[:4] == ["student", "status", "score", "max_score"]
    assert header[4:14] == ITEMS


def test_scores_and_errors_per_row(mixed):
    """Each row carries the grade the grade command would give."""
    rows = _rows(mixed[0])
    assert float(rows["alice"]["score"]) == 9.0
    assert float(rows["alice"]["task2.shapes"]) == -1.0
    assert float(rows["bob"]["score"]) == 11.0
    assert float(rows["gina"]["score"]) == 11.0
    assert float(rows["carol"]["score"]) == 0.0
    # An untouched class is a note, not an error.
    assert "untouched stub" in rows["carol"]["notes"]
    assert "stub" not in rows["carol"]["errors"]
    dave = rows["dave"]
    assert dave["status"] == "graded"
    assert float(dave["task1.forward"]) == 0.0
    assert float(dave["task2.scores"]) == 3.0
    assert "did not finish within 3 seconds" in dave["errors"]
    # os._exit at module level is refused, and the module-level code is
    # not run again: the reference's classes earn their points (issue 16).
    erin = rows["erin"]
    assert erin["status"] == "graded" and float(erin["score"]) == 11.0
    assert "os._exit" in erin["flags"]
    assert rows["frank"]["status"] == "error"
    assert "binary file" in rows["frank"]["errors"]


def test_exit_status_says_whether_everything_was_graded(mixed):
    """1 because two entries (a binary, a .txt) could not be graded."""
    _, result = mixed
    assert result.returncode == 1, result.stderr
    assert "not graded: frank" in result.stdout


def test_reports_and_feedback_next_to_the_csv(mixed):
    """A JSON per student and a feedback folder per graded student."""
    out = mixed[0]
    reports = out.with_name("grades.csv.reports")
    record = json.loads((reports / "alice" / "record.json").read_text())
    assert record["status"] == "graded"
    assert record["report"]["score"] == 9.0
    assert (reports / "alice" / "report.txt").is_file()
    frank = json.loads((reports / "frank.py" / "record.json").read_text())
    assert frank["status"] == "error" and "binary" in frank["error"]


def test_nbgrader_layout(tmp_path):
    """DIR = an nbgrader course: submitted/<student>/<assignment>/."""
    (tmp_path / "course").mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "course")
    for student, source in (("ann", REFERENCE), ("ben", STUB)):
        target = (tmp_path / "course" / "submitted" / student /
                  "multi_head_attention" / "transformer_lm")
        target.mkdir(parents=True)
        shutil.copy(source, target / "modeling_attention.py")
    out = tmp_path / "grades.csv"
    result = _batch(str(tmp_path / "course"), "--out", str(out),
                    "--no-feedback", "--public-only")
    assert result.returncode == 0, result.stderr
    rows = _rows(out)
    assert {k: float(v["score"]) for k, v in rows.items()} == {
        "ann": 11.0, "ben": 0.0}


def test_unwritable_output_fails_before_grading(tmp_path):
    """A clear one-line error, exit 2, and nothing graded."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out in (blocker / "grades.csv", Path("/proc/grades.csv")):
        started = time.monotonic()
        result = _batch(str(EXAMPLE.parent), "--out", str(out))
        assert result.returncode == 2
        assert "error: cannot write to" in result.stderr
        assert result.stderr.count("\n") == 1
        assert time.monotonic() - started < 30


def test_interrupted_batch_resumes(tmp_path):
    """SIGINT keeps what is done; --resume grades only the rest."""
    folder = tmp_path / "class"
    folder.mkdir()
    for index in range(6):
        shutil.copy(REFERENCE, folder / f"s{index}.py")
    out = tmp_path / "grades.csv"
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(out), "--jobs", "1", "--no-feedback", "--public-only"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    records = out.with_name(out.name + ".reports")
    while time.monotonic() < deadline:
        # Each student's record is written when graded (the CSV only
        # every few seconds and at the end).
        if len(list(records.glob("*/record.json"))) >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "--resume" in stderr
    # What is done is what a judge recorded: a judge writes its record
    # before the coordinator gets its row, so the CSV may lack the rows
    # of the last records (never hold a row without one), and --resume
    # rebuilds them from the records.
    done = sorted(p.parent.name for p in records.glob("*/record.json"))
    assert 2 <= len(done) < 6
    assert {f"{name}.py" for name in _rows(out)} <= set(done)
    result = _batch(str(folder), "--out", str(out), "--no-feedback",
                    "--public-only", "--resume")
    assert result.returncode == 0, result.stderr
    assert f"resuming: {len(done)} already graded" in result.stderr
    assert result.stderr.count("] s") == 6 - len(done)
    rows = _rows(out)
    assert sorted(rows) == [f"s{i}" for i in range(6)]
    assert all(float(r["score"]) == 11.0 for r in rows.values())


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(t) for t in text]
    return found


def _is_fork_server(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"grader.run.forkserver" in command


@pytest.mark.usefixtures("own_fork_server", "own_command_process")
@pytest.mark.parametrize("victim", ["judge", "fork server"])
def test_a_process_killed_from_outside_loses_no_row(tmp_path, victim):
    """A judge killed by SIGKILL is graded again; a fork server killed
    from outside (the judges share the coordinator's) is replaced. No row
    goes missing, no student gets an error row for it."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "slow.py").write_text(HANG)
    shutil.copy(REFERENCE, folder / "quick.py")
    out = tmp_path / "grades.csv"
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(out), "--jobs", "1", "--no-feedback", "--public-only",
         "--timeout", "4"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 60
    # The first student is done once its judge's record is on disk (the
    # CSV itself is rewritten at most every few seconds, so a quick
    # student's row may appear only at the end).
    records = out.with_name(out.name + ".reports")
    while killed is None and time.monotonic() < deadline:
        found = [pid for pid in _children(process.pid)
                 if _is_fork_server(pid) == (victim == "fork server")]
        if found and any(records.glob(f"*/{RECORD}")):
            killed = found[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    _, stderr = process.communicate(timeout=120)
    assert killed is not None
    assert process.returncode == 0, stderr
    rows = _rows(out)
    assert sorted(rows) == ["quick", "slow"]
    assert [r["status"] for r in rows.values()] == ["graded", "graded"]
    assert float(rows["slow"]["task2.scores"]) == 3.0


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return None if fields[0] in ("Z", "X") else int(fields[1])


def _workers() -> set[int]:
    """The live children of the fork server this session's commands use
    (GRADER_FORK_SERVER; other sessions' servers serve other tests)."""
    from grader.run import forkserver

    address = os.environ[forkserver.SHARED_ADDRESS].encode()
    servers = set()
    for path in Path("/proc").iterdir():
        if not path.name.isdigit():
            continue
        try:
            words = (path / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"grader.run.forkserver" in words and address in words:
            servers.add(int(path.name))
    assert servers, "no fork server of this session"
    return {int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _parent(int(p.name)) in servers}


@pytest.mark.usefixtures("own_command_process")
def test_a_coordinator_killed_outright_takes_its_judges_along(tmp_path):
    """A batch killed with SIGKILL (an administrator, the OOM killer)
    leaves nothing running: its judges die with it, and the worker a
    judge waited on ends with its judge, long before its own timeout
    (the fork server is the session's and serves on)."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "slow.py").write_text(HANG)
    before = _workers()
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(tmp_path / "grades.csv"), "--jobs", "1", "--no-feedback",
         "--public-only", "--timeout", "120"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        judges: list[int] = []
        workers: set[int] = set()
        while not (judges and workers) and time.monotonic() < deadline:
            judges = [pid for pid in _children(process.pid)
                      if not _is_fork_server(pid)]
            workers = _workers() - before
            time.sleep(0.05)
        assert judges and workers
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(
            _parent(pid) is not None for pid in [*judges, *workers]):
        time.sleep(0.05)
    assert [pid for pid in [*judges, *workers]
            if _parent(pid) is not None] == []


def test_progress_bar_on_a_terminal(monkeypatch):
    """A terminal gets one redrawn bar; a pipe gets plain lines."""
    from grader.routes.batch import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    progress = Progress(total=2, done=0)
    row = {"student": "a", "status": "graded", "score": 9.0,
           "max_score": 10.0}
    progress.update(row, 1.0)
    progress.update(row, 1.0)
    text = terminal.getvalue()
    assert text.startswith("\r[") and "2/2" in text and text.endswith("\n")
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    Progress(total=1, done=0).update(row, 1.5)
    assert pipe.getvalue() == "[1/1] a: 9/10 (1.5 s)\n"


@pytest.mark.slow
def test_a_hundred_mixed_submissions_give_a_hundred_rows(tmp_path):
    """Correct, buggy, stub, hanging and crashing: 100 rows, none lost."""
    folder = tmp_path / "class"
    folder.mkdir()
    kinds = {"ok": REFERENCE.read_text(), "unscaled": UNSCALED,
             "stub": STUB.read_text(), "hang": HANG, "crash": CRASH}
    # os._exit at import is refused and the module-level code is not run
    # again: the reference's classes earn their points (issue 16).
    expected = {"ok": 11.0, "unscaled": 9.0, "stub": 0.0, "hang": 7.0,
                "crash": 11.0}
    names = {}
    for index in range(100):
        kind = ("hang" if index % 25 == 0 else "crash" if index % 25 == 1
                else list(kinds)[index % 3])
        name = f"student{index:03d}"
        (folder / f"{name}.py").write_text(kinds[kind])
        names[name] = kind
    out = tmp_path / "grades.csv"
    started = time.monotonic()
    # 6 s a task leaves an honest task room on a machine the suite's
    # other worker loads too (at 2 s, one of 33 identical files once
    # lost a point there, its row unseen), and the four hanging files
    # still cost seconds, not minutes.
    result = _batch(str(folder), "--out", str(out), "--no-feedback",
                    "--timeout", "6", "--jobs", "2", timeout=900)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-2000:]
    rows = _rows(out)
    assert len(rows) == 100
    for name, kind in names.items():
        assert float(rows[name]["score"]) == expected[kind], (
            name, kind, rows[name])
    assert elapsed < 600


# --------------------------------------------------------------------------
# How many judges by default


def _cgroup(tmp_path: Path, files: dict[str, str], own: str = "0::/\n"
            ) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    root.mkdir(exist_ok=True)
    own_file = tmp_path / "self_cgroup"
    own_file.write_text(own)
    return root, own_file


@pytest.mark.parametrize("files, own, expected", [
    ({"cpu.max": "200000 100000\n"}, "0::/\n", 2),        # --cpus=2
    ({"cpu.max": "150000 100000\n"}, "0::/\n", 2),        # 1.5 rounds up
    ({"cpu.max": "50000 100000\n"}, "0::/\n", 1),         # never 0
    ({"cpu.max": "max 100000\n"}, "0::/\n", None),        # unlimited
    ({"pod/cpu.max": "100000 100000\n", "cpu.max": "max 100000\n"},
     "0::/pod\n", 1),                                     # its own cgroup
    ({"cpu/cpu.cfs_quota_us": "300000\n",
      "cpu/cpu.cfs_period_us": "100000\n"}, "", 3),        # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n",
      "cpu/cpu.cfs_period_us": "100000\n"}, "", None),     # v1 unlimited
    ({}, "", None),                                       # nothing known
    ({"cpu.max": "garbage\n"}, "0::/\n", None),
])
def test_the_default_judges_count_a_cgroup_cpu_quota(tmp_path, files, own,
                                                     expected):
    """A container limited to N CPUs starts N + 1 judges, whatever the
    host's cores (os.cpu_count() would say the host's)."""
    root, own_file = _cgroup(tmp_path, files, own)
    affinity = len(os.sched_getaffinity(0))
    usable = cores.usable_cores(root, own_file)
    assert usable == (affinity if expected is None
                      else min(affinity, expected))
    assert usable >= 1


def test_the_default_is_one_judge_more_than_the_usable_cores():
    assert cores.default_jobs() == cores.usable_cores() + 1


# --------------------------------------------------------------------------
# The checks' session prepared once in the coordinator

_PREPARED_SCRIPT = r"""
import json, os, sys
from pathlib import Path
from grader.judge import checking
from grader.engine import Options, grade
from grader.rubric import get_assignment

files = [Path(p) for p in sys.argv[1:]]
def reports():
    return [grade(f, "multi_head_attention", Options(seed=5)).as_json()
            for f in files]
plain = reports()
assignment = get_assignment("multi_head_attention")
checking.warm_up(assignment)
assert assignment.checks_dir in checking._PREPARED
original = checking._PreparedSession.run
def counted(self, context):
    with open(os.environ["RUNS_LOG"], "a") as log:
        log.write("run\n")
    return original(self, context)
checking._PreparedSession.run = counted
os.write(1, b"fd 1 is still the terminal\n")
os.write(2, b"fd 2 too\n")
prepared = reports()
for report in plain + prepared:
    report.pop("grader", None)
    report.get("output", {}).pop("seconds", None)
print(json.dumps({"same": plain == prepared,
                  "scores": [r["score"] for r in prepared]}))
"""


def test_a_prepared_session_gives_what_a_whole_session_gives(tmp_path):
    """A batch's coordinator configures pytest and collects the checks
    once; each judge (a fork) runs them. Reports must be the same as with
    a whole session, for passing and failing checks alike, and the
    coordinator's own stdout and stderr must stay its own (pytest's
    output capture is not left running in it)."""
    files = [ROOT / "solutions" / "modeling_attention.py",
             HERE / "submissions" / "mistake_softmax_dim.py",
             HERE / "submissions" / "mistake_mask_diagonal.py",
             HERE / "submissions" / "partial_task2_stub.py"]
    log = tmp_path / "runs.log"
    result = subprocess.run([sys.executable, "-c", _PREPARED_SCRIPT,
                             *map(str, files)], cwd=ROOT,
                            env={**os.environ, "RUNS_LOG": str(log)},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert log.read_text() == "run\n" * len(files)  # the prepared one ran
    assert "fd 1 is still the terminal" in result.stdout
    assert "fd 2 too" in result.stderr
    verdict = json.loads(result.stdout.splitlines()[-1])
    assert verdict["same"] is True
    assert verdict["scores"][0] == 11.0
    assert all(score < 11.0 for score in verdict["scores"][1:])
