"""Warm commands (docs/internals.md, `grader.routes.warm`): a
``python -m grader`` that names a command server runs in a fork of it and
ends as a command of its own would; whenever the fork could differ from a
fresh interpreter it runs in its own process instead.

Every test here starts a server of its own (``server``), so the
behaviour is this module's whatever the session provides; the commands
are real ``python -m grader`` processes.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.routes import warm

KIT = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).resolve().parent / "hostile"
SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
EXAMPLE = KIT / "examples" / "submission"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A command server of this module's, and its address."""
    folder = tmp_path_factory.mktemp("warm")
    address = str(folder / "commands")
    process = warm.listen(address)
    yield process, address
    process.kill()
    process.wait()


def _environment(address: str | None, **extra: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in (warm.ADDRESS, "GRADER_SEED")}
    if address is not None:
        environment[warm.ADDRESS] = address
    environment.update(extra)
    return environment


# Runs a command and prints, last on stderr, the peak memory (MB) of the
# processes it waited for: the client, and what the client itself forked.
PEAK = ("import resource, subprocess, sys; "
        "done = subprocess.run(sys.argv[1:]); "
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss; "
        "sys.stderr.write(f'\\npeak {peak // 1024}\\n'); "
        "sys.exit(done.returncode)")


def _measured(command: list[str], cwd: Path = KIT, **extra: str
              ) -> tuple[subprocess.CompletedProcess, int]:
    """``command`` run with ``extra`` in its environment (``address``:
    the server, or None); its result (stderr without the measure) and
    the peak memory in MB of the client's own process tree, which tells
    whether the client imported torch (a few hundred MB) or handed its
    run over (tens)."""
    address = extra.pop("address", None)
    done = subprocess.run([sys.executable, "-c", PEAK, *command], cwd=cwd,
                          env=_environment(address, **extra),
                          capture_output=True, text=True, timeout=300)
    stderr, _, peak = done.stderr.rstrip("\n").rpartition("\npeak ")
    done.stderr = stderr
    return done, int(peak)


def _grader(*argv: str, address: str | None, cwd: Path = KIT,
            **extra: str) -> subprocess.CompletedProcess:
    return _measured([sys.executable, "-m", "grader", *argv], cwd=cwd,
                     address=address, **extra)[0]


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(t) for t in (task / "children").read_text().split()]
    return found


def _wait_for(condition, within: float = 60.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {within:g} s")


def test_a_grade_through_the_server_is_the_grade_of_its_own_process(
        server) -> None:
    """Same report, item by item, same exit status; the seed of the
    client's environment and its working folder reach the command."""
    _, address = server
    runs, peaks = {}, {}
    for name, where in (("warm", address), ("cold", None)):
        runs[name], peaks[name] = _measured(
            [sys.executable, "-m", "grader", "grade", "submission",
             "--format", "json"], cwd=EXAMPLE.parent, address=where,
            GRADER_SEED="77")
    assert runs["warm"].returncode == runs["cold"].returncode == 0, \
        runs["warm"].stderr
    # The warm client never imported torch; the cold one did.
    assert peaks["warm"] < 100 < 200 < peaks["cold"], peaks
    warm_report = json.loads(runs["warm"].stdout)
    cold_report = json.loads(runs["cold"].stdout)
    items = {i["id"]: (i["score"], i["message"])
             for i in warm_report["items"]}
    assert items == {i["id"]: (i["score"], i["message"])
                     for i in cold_report["items"]}
    assert warm_report["score"] == cold_report["score"] == 9.0
    assert warm_report["grader"]["seed"] == "secret ($GRADER_SEED)"
    assert items["task1.shapes"][0] == 0  # the example's wrong comments


def test_refusals_and_their_exit_status_are_the_same(server,
                                                     tmp_path) -> None:
    _, address = server
    for argv in (["grade", str(tmp_path / "nothing.py")],
                 ["grade", "--format", "yaml", "x.py"],
                 ["nosuchcommand"], ["grade", "--help"]):
        warm_run = _grader(*argv, address=address)
        cold_run = _grader(*argv, address=None)
        assert (warm_run.returncode, warm_run.stdout, warm_run.stderr) == \
            (cold_run.returncode, cold_run.stdout, cold_run.stderr), argv
    assert _grader("grade", str(tmp_path / "nothing.py"),
                   address=address).returncode == 2


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""  # gone meanwhile


def _commands(server: int) -> list[int]:
    """The server's children that are its forks (the commands), not the
    fork server it started."""
    return [pid for pid in _children(server)
            if b"grader.routes.warm" in _command_line(pid)]


def _new_command(server: int, before: set[int]) -> int:
    """The server's first command not among ``before`` (those of earlier
    tests may still be ending)."""
    return _wait_for(lambda: [pid for pid in _commands(server)
                              if pid not in before])[0]


def _hanging_batch(tmp_path: Path, address: str, **popen):
    """A batch of one file that hangs in forward (its worker stopped at
    10 s: a judge outlives a coordinator killed with SIGKILL, in its own
    process as in a fork, until then)."""
    folder = tmp_path / "class"
    folder.mkdir()
    shutil.copy(HOSTILE / "t2_infinite_loop.py", folder / "s1.py")
    return subprocess.Popen(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(tmp_path / "g.csv"), "--jobs", "1", "--no-feedback",
         "--public-only", "--timeout", "10"],
        cwd=tmp_path, env=popen.pop("env", None) or _environment(address),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, 4096))


def test_the_command_is_a_fork_of_the_server_with_the_clients_state(
        server, tmp_path) -> None:
    """While it runs, the command is the server's child, not the
    client's; it has the client's folder and limits (its environment:
    the seed of the first test)."""
    process, address = server
    before = set(_commands(process.pid))
    client = _hanging_batch(tmp_path, address, preexec_fn=_limit_files)
    try:
        command = _new_command(process.pid, before)
        # The batch judges (its Ctrl-C keeps what is done from here on).
        _wait_for(lambda: _children(command))
        assert _children(client.pid) == []
        assert Path(f"/proc/{command}/cwd").resolve() == tmp_path.resolve()
        limits = Path(f"/proc/{command}/limits").read_text()
        line = next(row for row in limits.splitlines()
                    if row.startswith("Max open files"))
        assert line.split()[3:5] == ["300", "4096"]
    finally:
        client.send_signal(signal.SIGINT)
        client.communicate(timeout=120)
    # Ctrl-C reached the batch, which says how to resume (exit 130).
    assert client.returncode == 130


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])


def _dispositions(pid: int) -> dict[str, str]:
    """Which signals a process ignores, blocks and catches."""
    return {row.split(":")[0]: row.split()[1]
            for row in Path(f"/proc/{pid}/status").read_text().splitlines()
            if row.startswith(("SigIgn", "SigBlk", "SigCgt"))}


def test_the_command_has_the_signal_dispositions_of_its_own_process(
        server, tmp_path) -> None:
    """Started with SIGINT ignored and SIGUSR2 blocked (a background job
    of a shell, nohup), the command ignores, blocks and catches what it
    would in its own process: Ctrl-C does not stop it."""
    process, address = server
    seen, ends = {}, {}
    for name, where in (("warm", address), ("cold", None)):
        folder = tmp_path / name
        folder.mkdir()
        before = set(_commands(process.pid))
        client = _hanging_batch(folder, where, preexec_fn=_ignore_interrupts)
        try:
            command = (_new_command(process.pid, before) if where
                       else client.pid)
            _wait_for(lambda: _children(command))   # it judges
            seen[name] = _dispositions(command)
            client.send_signal(signal.SIGINT)
            time.sleep(1)
            assert client.poll() is None, name
        finally:
            client.send_signal(signal.SIGTERM)
            client.communicate(timeout=120)
        ends[name] = client.returncode
    assert seen["warm"] == seen["cold"]
    # SIGTERM stops the batch as Ctrl-C would have (it says how to
    # resume).
    assert ends == {"warm": 130, "cold": 130}
    assert int(seen["warm"]["SigIgn"], 16) & 1 << signal.SIGINT - 1


def test_an_uncaught_interrupt_ends_the_command_as_its_own_process(
        server, tmp_path) -> None:
    """Ctrl-C in a grade (which does not catch it): the traceback, the
    exit handlers (the run's temporary folder goes), then death by
    SIGINT, in a fork as in the command's own process."""
    process, address = server
    for name, where in (("warm", address), ("cold", None)):
        scratch = tmp_path / name
        scratch.mkdir()
        client = subprocess.Popen(
            [sys.executable, "-m", "grader", "grade",
             str(HOSTILE / "t2_infinite_loop.py"), "--timeout", "60"],
            cwd=tmp_path, env=_environment(where, TMPDIR=str(scratch)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for(lambda: list(scratch.glob("grader-run-*")))
            time.sleep(1)
        finally:
            client.send_signal(signal.SIGINT)
            _, stderr = client.communicate(timeout=120)
        assert client.returncode == -signal.SIGINT, (name, stderr)
        assert stderr.rstrip().endswith("KeyboardInterrupt"), name
        assert list(scratch.glob("grader-run-*")) == [], name


def test_a_command_that_names_no_fork_server_uses_the_servers(
        server, tmp_path) -> None:
    """Without GRADER_FORK_SERVER, the command's worker is forked by the
    fork server the command server started, not by one of its own."""
    process, address = server
    environment = _environment(address)
    environment.pop("GRADER_FORK_SERVER", None)
    before = set(_commands(process.pid))
    client = _hanging_batch(tmp_path, address, env=environment)
    try:
        command = _new_command(process.pid, before)
        workers = [pid for pid in _children(process.pid)
                   if b"forkserver" in _command_line(pid)]
        assert len(workers) == 1
        # The hanging worker, and no fork server among the command's own.
        _wait_for(lambda: _children(workers[0]))
        assert not any(b"forkserver" in _command_line(pid)
                       for pid in _children(command))
    finally:
        client.send_signal(signal.SIGINT)
        client.communicate(timeout=120)
    assert client.returncode == 130


def test_a_killed_client_takes_its_command_with_it(server, tmp_path) -> None:
    process, address = server
    before = set(_commands(process.pid))
    client = _hanging_batch(tmp_path, address)
    command = _new_command(process.pid, before)
    client.kill()
    client.communicate(timeout=60)
    # An ending process loses its command line before it has ended:
    # what counts is its state (gone, or a zombie the server reaps).
    _wait_for(lambda: _ended(command), within=30)


def _ended(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def test_a_command_killed_by_a_signal_kills_its_client_so(server,
                                                          tmp_path) -> None:
    process, address = server
    before = set(_commands(process.pid))
    client = _hanging_batch(tmp_path, address)
    command = _new_command(process.pid, before)
    os.kill(command, signal.SIGTERM)
    client.communicate(timeout=60)
    assert client.returncode == -signal.SIGTERM


def test_a_client_that_cannot_hand_its_run_over_runs_it_itself(
        server, tmp_path) -> None:
    """A server gone, a server of another identity (another hash seed),
    a closed standard input: each grade still happens, in the client's
    own process (it imports torch)."""
    _, address = server
    graded = [sys.executable, "-m", "grader", "grade",
              str(SUBMISSIONS / "correct_matmul.py"), "--public-only"]
    runs = [_measured(graded, address=str(tmp_path / "nobody")),
            _measured(graded, address=address, PYTHONHASHSEED="5"),
            _measured([sys.executable, "-c",
                       "import os, runpy, sys; os.close(0); "
                       "sys.argv[0] = 'grader'; "
                       "runpy.run_module('grader', run_name='__main__')",
                       *graded[3:]], address=address)]
    for done, peak in runs:
        assert done.returncode == 0, done.stderr
        assert "Total: 10 / 10" in done.stdout
        assert peak > 200, peak
    # The same command with its standard input open is handed over.
    done, peak = _measured(graded, address=address)
    assert done.returncode == 0 and "Total: 10 / 10" in done.stdout
    assert peak < 100, peak


def test_the_identity_names_what_the_interpreter_fixed_at_start() -> None:
    """Another hash seed or another flag is another identity: the
    client compares before it hands anything over."""
    script = ("from grader.routes import warm; import sys; "
              "sys.stdout.write(warm.identity().decode())")
    found = set()
    for extra, flags in (({}, []), ({"PYTHONHASHSEED": "3"}, []),
                         ({}, ["-X", "dev"])):
        found.add(subprocess.run(
            [sys.executable, *flags, "-c", script], cwd=KIT,
            env=_environment(None, **extra), capture_output=True, text=True,
            timeout=120).stdout)
    assert len(found) == 3 and "" not in found


def test_the_server_command_says_how_to_use_it() -> None:
    for argv, status in (([], 2), (["a", "b"], 2), (["--help"], 0)):
        done = subprocess.run(
            [sys.executable, "-m", "grader.routes.warm", *argv], cwd=KIT,
            capture_output=True, text=True, timeout=60)
        assert done.returncode == status, argv
        assert done.stderr.startswith(
            "usage: python -m grader.routes.warm PATH"), done.stderr
