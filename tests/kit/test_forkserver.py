"""The fork server: workers start clean, and nothing outlives its grader.

Workers are forked by a separate, freshly started process that holds
nothing of any grading (``grader/run/forkserver.py``). These tests check what a
worker can see of its parent (no seed, no command line, no environment of
the grading process), that a worker dies when the process that asked for it
dies, and that the server itself ends with its client; and that a
listening server several commands share (``GRADER_FORK_SERVER``, the one
this suite runs on) keeps those properties, and is used only when it is
this kit's.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.run import forkserver
from grader.run.sandbox import Job, Limits, run_jobs
from grader.wire import MAGIC_SIZE, AuthenticatedReader, ChannelError

ROOT = Path(__file__).resolve().parents[2]

PEEK = textwrap.dedent('''
    import os, sys
    print("ARGV", sys.argv)
    print("ENV", sorted(os.environ))
    print("SECRET" if "s3cret-grading-seed" in repr(dict(os.environ))
          else "clean")
''')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_a_worker_sees_nothing_of_the_grading_process(monkeypatch) -> None:
    """Not the grading process's environment (its secret seed), nor its
    command line: the worker comes from the fork server."""
    monkeypatch.setenv("GRADER_SEED", "s3cret-grading-seed")
    result = run_jobs([Job("peek", PEEK, "/nowhere/peek.py", [])],
                      Limits(timeout=20))["peek"]
    assert "clean" in result.output and "SECRET" not in result.output
    assert "GRADER_SEED" not in result.output
    assert "forkserver.py" in result.output  # the server's own argv
    assert "pytest" not in result.output
    assert result.finished


LOOPING_CLIENT = textwrap.dedent('''
    import json, os, sys, time
    sys.path.insert(0, {root!r})
    from grader.run import forkserver
    from grader.run.sandbox import Job, Limits, _start
    running = _start(Job("loop", "while True:\\n    pass\\n",
                         "/nowhere/loop.py", []), Limits(timeout=600))
    print(json.dumps({{"worker": running.pid,
                      "server": forkserver.shared().pid}}), flush=True)
    time.sleep(600)
''')


def _gone(pids: list[int], within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(map(_alive, pids)):
        time.sleep(0.1)
    return not any(map(_alive, pids))


@pytest.mark.usefixtures("own_fork_server")
def test_a_worker_dies_with_the_process_that_asked_for_it(
        tmp_path: Path) -> None:
    """A client killed while its worker loops forever takes the worker
    with it (the server watches each client's pipe)."""
    script = textwrap.dedent(f'''
        import json, os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from grader.run import forkserver
        from grader.run.sandbox import Job, Limits, _start
        running = _start(Job("loop", "while True:\\n    pass\\n",
                             "/nowhere/loop.py", []), Limits(timeout=600))
        print(json.dumps({{"worker": running.pid,
                          "server": forkserver.shared().pid}}), flush=True)
        time.sleep(600)
    ''')
    client = subprocess.Popen([sys.executable, "-c", script],
                              stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(client.stdout.readline())
        assert _alive(pids["worker"]) and _alive(pids["server"])
        client.kill()
        client.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (
                _alive(pids["worker"]) or _alive(pids["server"])):
            time.sleep(0.1)
        assert not _alive(pids["worker"])
        assert not _alive(pids["server"])
    finally:
        if client.poll() is None:
            client.kill()


@pytest.fixture
def listening(tmp_path: Path, monkeypatch):
    """A listening server of this kit, named in the environment."""
    address = str(tmp_path / "server")
    process = forkserver.listen(address)
    monkeypatch.setenv(forkserver.SHARED_ADDRESS, address)
    forkserver.stop()
    yield process
    forkserver.stop()
    process.kill()
    process.wait()


def test_a_shared_server_keeps_a_killed_clients_worker_from_living(
        listening) -> None:
    """Under a shared server too, a client killed while its worker loops
    takes the worker with it; the server stays for the other clients."""
    client = subprocess.Popen(
        [sys.executable, "-c", LOOPING_CLIENT.format(root=str(ROOT))],
        stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(client.stdout.readline())
        assert pids["server"] == listening.pid  # it used the shared one
        assert _alive(pids["worker"])
        client.kill()
        client.wait(timeout=10)
        assert _gone([pids["worker"]])
        assert listening.poll() is None
        result = run_jobs([Job("peek", PEEK, "/nowhere/peek.py", [])],
                          Limits(timeout=20))["peek"]
        assert result.finished and "clean" in result.output
        assert forkserver.shared().pid == listening.pid
    finally:
        if client.poll() is None:
            client.kill()


CHURN = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r})
    from grader.run import forkserver
    from grader.run.sandbox import Job, Limits, run_jobs
    for round in range({rounds}):
        if {connect_only}:
            forkserver.shared()            # connect, then hang up
            forkserver.stop()
            continue
        jobs = [Job(f"j{{i}}", f"print({{i}} * 7)\\n", f"/nowhere/j{{i}}.py",
                    []) for i in range(2)]
        results = run_jobs(jobs, Limits(timeout=30))
        for i in range(2):
            assert results[f"j{{i}}"].finished, results[f"j{{i}}"].output
            assert str(i * 7) in results[f"j{{i}}"].output
    print("ok")
''')


def test_clients_that_come_and_go_never_cost_another_its_worker(
        listening) -> None:
    """Clients that connect and hang up at once, beside clients that ask
    for workers: every worker reads its own job (a worker once closed a
    descriptor number a departed client had freed, its own job pipe)."""
    clients = [subprocess.Popen(
        [sys.executable, "-c", CHURN.format(
            root=str(ROOT), rounds=rounds, connect_only=connect_only)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rounds, connect_only in ((40, True), (40, True), (4, False),
                                     (4, False))]
    for client in clients:
        out, err = client.communicate(timeout=300)
        assert client.returncode == 0 and out.strip() == "ok", err[-2000:]
    assert listening.poll() is None


def test_the_grade_command_uses_the_shared_server(listening) -> None:
    """`python -m grader grade` starts no server of its own when one of
    this kit listens at GRADER_FORK_SERVER, and grades the same."""
    command = [sys.executable, "-m", "grader", "grade", "--format", "json",
               str(ROOT / "examples" / "submission")]
    shared = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    children, servers = set(), set()
    while shared.poll() is None:
        listed = Path(f"/proc/{shared.pid}/task/{shared.pid}/children")
        try:
            children.update(listed.read_text().split())
        except OSError:
            pass
        for pid in children - servers:
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"grader.run.forkserver" in argv:
                servers.add(pid)
        time.sleep(0.01)
    out, err = shared.communicate()
    assert shared.returncode == 0, err
    assert not servers  # no server of its own
    environment = {k: v for k, v in os.environ.items()
                   if k != forkserver.SHARED_ADDRESS}
    own = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                         env=environment)
    assert own.returncode == 0, own.stderr
    assert json.loads(out)["items"] == json.loads(own.stdout)["items"]


def test_the_kit_on_pythonpath_is_the_same_identity(monkeypatch) -> None:
    """A command run with the kit on PYTHONPATH (once or twice) and one
    run without it import the same files: they share a server (the
    session's, started without it in CI); another folder on the path
    is another identity."""
    def named(pythonpath: str | None) -> bytes:
        if pythonpath is None:
            monkeypatch.delenv("PYTHONPATH", raising=False)
        else:
            monkeypatch.setenv("PYTHONPATH", pythonpath)
        return forkserver.identity()

    kit = str(ROOT)
    same = {named(None), named(""), named(kit),
            named(os.pathsep.join([kit, kit])), named(kit + os.sep)}
    assert len(same) == 1
    assert named(os.pathsep.join([kit, str(ROOT / "tests")])) not in same


def test_a_foreign_or_gone_server_is_not_used(tmp_path: Path,
                                              monkeypatch) -> None:
    """A listening server of another kit (another identity), or an
    address where nothing listens, is passed over: the grading starts a
    server of its own and grades as usual."""
    address = str(tmp_path / "foreign")
    server = subprocess.Popen(
        [sys.executable, "-m", "grader.run.forkserver", "--listen", address,
         "ready %d not-this-kit"], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(address) and time.monotonic() < deadline:
            time.sleep(0.1)
        for named in (address, str(tmp_path / "nothing-here")):
            monkeypatch.setenv(forkserver.SHARED_ADDRESS, named)
            forkserver.stop()
            result = run_jobs([Job("peek", PEEK, "/nowhere/peek.py", [])],
                              Limits(timeout=20))["peek"]
            assert result.finished and "clean" in result.output
            own = forkserver.shared()
            assert own.process is not None and own.pid != server.pid
            assert named in forkserver._REFUSED
            forkserver.stop()
    finally:
        forkserver.stop()
        server.kill()
        server.wait()


def test_a_hung_worker_is_stopped_at_its_deadline() -> None:
    """The grading process's deadline kills the whole worker."""
    started = time.monotonic()
    result = run_jobs([Job("loop", "while True:\n    pass\n",
                           "/nowhere/loop.py", [])],
                      Limits(timeout=1.5))["loop"]
    assert result.ended == "timeout"
    assert time.monotonic() - started < 15


def test_the_cpu_limit_past_the_deadline_is_the_timeout() -> None:
    """The kernel's CPU-time limit (a second after the timeout) may fire
    before a busy grader wakes for its deadline: past the deadline the
    report is the timeout's, whichever came first (a report does not
    depend on the machine's load); before it, the signal is named."""
    late = ("import signal\nimport time\nstart = time.monotonic()\n"
            "while time.monotonic() - start < 1.7:\n    pass\n"
            "signal.raise_signal(signal.SIGXCPU)\n")
    early = "import signal\nsignal.raise_signal(signal.SIGXCPU)\n"
    results = run_jobs([Job("late", late, "/nowhere/late.py", []),
                        Job("early", early, "/nowhere/early.py", [])],
                       Limits(timeout=1.5))
    assert results["late"].ended == "timeout"
    assert "did not finish within 1.5 seconds" in results["late"].detail
    assert results["early"].ended == "signalled"
    assert "CPU-time limit" in results["early"].detail


# --------------------------------------------------------------------------
# The authenticated channel


def _frame(key: bytes, magic: bytes, message: dict) -> bytes:
    import hashlib
    import hmac
    import struct

    body = json.dumps(message).encode()
    header = struct.pack(">I", len(body))
    return magic + header + body + hmac.new(key, header + body,
                                            hashlib.sha256).digest()


def test_foreign_bytes_and_forged_frames_are_skipped() -> None:
    """Bytes before, between and inside frames that the agent did not send
    are counted and skipped; authentic frames all arrive, in order, even
    when fed one byte at a time."""
    key, magic = b"k" * 32, b"m" * MAGIC_SIZE
    stream = (b"garbage" + _frame(key, magic, {"type": "hello"})
              + _frame(b"x" * 32, magic, {"type": "probe", "forged": 1})
              + b"\x00\xff" * 10 + _frame(key, magic, {"type": "done"}))
    reader = AuthenticatedReader(key, magic)
    messages = []
    for index in range(len(stream)):
        messages += reader.feed(stream[index:index + 1])
    assert [m["type"] for m in messages] == ["hello", "done"]
    assert reader.forged_frames == 1
    assert reader.foreign_bytes >= len(b"garbage") + 20


def test_an_authentic_frame_is_parsed_within_bounds() -> None:
    """Even an authentic frame (a compromised agent) cannot make the grading
    process build millions of objects."""
    key, magic = b"k" * 32, b"m" * MAGIC_SIZE
    reader = AuthenticatedReader(key, magic)
    bomb = {"type": "probe", "value": [[] for _ in range(300_000)]}
    try:
        reader.feed(_frame(key, magic, bomb))
    except ChannelError as exc:
        assert "arrays and objects" in str(exc)
    else:
        raise AssertionError("a frame of 300,000 lists was parsed")


def test_the_servers_index_of_loaded_files_changes_no_answer(
        tmp_path: Path) -> None:
    """The real paths the server resolves once (``index_loaded_files``)
    give a worker exactly the files it would resolve itself, a module
    loaded through a symbolic link under both its names; a module loaded
    after the index is resolved by the worker, as before."""
    from grader.worker import agent

    saved = dict(agent._REAL_FILES)
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    names = ("loaded_before_the_index", "loaded_after_the_index")
    for name in names:
        (real / f"{name}.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(link))
    try:
        importlib.import_module(names[0])
        agent._REAL_FILES.clear()
        resolved_here = agent._loaded_files()
        agent.index_loaded_files()
        assert len(agent._REAL_FILES) > 100  # torch's files, at least
        assert agent._REAL_FILES[str(link / f"{names[0]}.py")] == \
            str(real / f"{names[0]}.py")
        assert agent._loaded_files() == resolved_here
        importlib.import_module(names[1])
        files = agent._loaded_files()
        for name in names:
            assert {str(link / f"{name}.py"), str(real / f"{name}.py")} \
                <= files
    finally:
        sys.path.remove(str(link))
        for name in names:
            sys.modules.pop(name, None)
        agent._REAL_FILES.clear()
        agent._REAL_FILES.update(saved)


def test_the_command_ends_as_sys_exit_would() -> None:
    """``python -m grader`` skips the interpreter's teardown: its status,
    its whole output and its exit handlers (temporary folders) are as
    ``sys.exit`` leaves them; with another thread still running, it is
    ``sys.exit`` that ends it (the thread finishes first)."""
    script = textwrap.dedent('''
        import atexit, sys, threading, time
        from grader.routes.exits import finish
        atexit.register(print, "handler ran")
        sys.stdout.write("x" * 100000 + "\\n")
        if sys.argv[1] == "thread":
            threading.Thread(target=lambda: (time.sleep(0.3),
                                             print("thread done"))).start()
        finish(int(sys.argv[2]))
    ''')
    for mode, status in (("alone", 3), ("thread", 0)):
        result = subprocess.run([sys.executable, "-c", script, mode,
                                 str(status)], cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        lines = result.stdout.splitlines()
        assert result.returncode == status, result.stderr
        assert lines[0] == "x" * 100000
        assert lines[-1] == "handler ran"
        assert ("thread done" in lines) == (mode == "thread")


SLOW = textwrap.dedent('''
    import time
    print("started", flush=True)
    time.sleep(2)
    print("finished")
''')


@pytest.mark.usefixtures("own_fork_server")
def test_a_job_whose_server_was_killed_runs_again() -> None:
    """The fork server killed from outside while its worker runs: the
    worker dies with it, and the job runs once more on the server that
    replaces it; its result is that run's, whole (a student does not
    lose points because something killed the server)."""
    import signal
    import threading

    server = forkserver.shared()
    server.wait_ready()
    killed: list[int] = []

    def kill_once_a_worker_runs() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            children = [int(pid) for task in
                        Path(f"/proc/{server.pid}/task").iterdir()
                        for pid in (task / "children").read_text().split()]
            if children:
                time.sleep(0.5)  # the worker is running the submission
                os.kill(server.pid, signal.SIGKILL)
                killed.append(server.pid)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_once_a_worker_runs)
    killer.start()
    result = run_jobs([Job("slow", SLOW, "/nowhere/slow.py", [])],
                      Limits(timeout=30))["slow"]
    killer.join()
    assert killed == [server.pid]
    assert result.finished, result.output
    assert result.output.split() == ["started", "finished"]
    assert forkserver.shared().pid != server.pid
