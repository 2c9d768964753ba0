"""The kit leaves nothing in the temporary folder (``grader.run.tempdirs``).

Every temporary folder of a grading (the workers' scratch folders, an
extracted zip, flake8's files) lives in its process's run folder, which
the process removes at its end and the next run sweeps when the process
was killed (its lock is free). One real ``grade`` of a zip, one of a
folder and one of a zip too deep to extract run with ``TMPDIR`` set to a
fresh folder: after each, that folder is empty, and the first swept the
folder of a process killed with SIGKILL. Where no tmpfs bounds a
worker's scratch folder, the folder is measured: past the bound, or when
it cannot be walked, the worker is stopped. See docs/threat-model.md.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

from grader.run.tempdirs import PREFIX, remove_tree, sweep

KIT = Path(__file__).resolve().parents[2]
SOLUTION = KIT / "solutions" / "modeling_attention.py"
SOLUTION_TAG = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.M)
#: A process that makes its run folder as a grader does (a scratch folder
#: 400 folders deep, a file), says where, and waits to be killed.
KILLED = """
import os, time
from grader.run.tempdirs import make, run_folder
scratch = make("scratch-")
here = os.open(scratch, os.O_RDONLY)
for _ in range(400):
    os.mkdir("d", dir_fd=here)
    below = os.open("d", os.O_RDONLY, dir_fd=here)
    os.close(here)
    here = below
open(os.path.join(scratch, "file"), "w").write("x")
print(run_folder(), flush=True)
time.sleep(120)
"""


def _environment(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(KIT))
    return env


def _grade(target: Path, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(target),
         "--assignment", "multi_head_attention", "--format", "json"],
        capture_output=True, text=True, env=_environment(tmp), cwd=KIT,
        timeout=600)


def test_a_grade_leaves_nothing_and_sweeps_a_killed_run(
        tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    text = SOLUTION_TAG.sub("", SOLUTION.read_text(encoding="utf-8"))
    killed = subprocess.Popen([sys.executable, "-c", KILLED],
                              stdout=subprocess.PIPE, text=True,
                              env=_environment(tmp))
    try:
        folder = Path(killed.stdout.readline().strip())  # type: ignore
        assert folder.parent == tmp and folder.name.startswith(
            f"{PREFIX}{killed.pid}-")
        assert sweep(tmp) == 0 and folder.is_dir()  # its owner lives
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.communicate()
    assert folder.is_dir()  # SIGKILL ran no clean-up

    archive = tmp_path / "sub.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("hw4-main/transformer_lm/modeling_attention.py",
                        text)
    done = _grade(archive, tmp)
    assert done.returncode == 0, done.stderr
    scores = {i["id"]: i["score"] for i in json.loads(done.stdout)["items"]}
    assert scores["task1.forward"] == 3 and scores["task2.output"] == 2
    assert list(tmp.iterdir()) == []  # its own run folder and the killed

    handed = tmp_path / "handed"
    handed.mkdir()
    (handed / "modeling_attention.py").write_text(text, encoding="utf-8")
    done = _grade(handed, tmp)
    assert done.returncode == 0, done.stderr
    assert list(tmp.iterdir()) == []


def test_a_sweep_takes_only_what_no_process_holds(tmp_path: Path) -> None:
    """A run folder whose lock is free goes, a held one stays; a folder of
    the older names goes once unchanged for an hour, not before."""
    import fcntl

    dead, held = tmp_path / f"{PREFIX}1-a", tmp_path / f"{PREFIX}2-b"
    old, new = tmp_path / "grader-zip-old", tmp_path / "grader-scratch-new"
    for folder in (dead, held, old, new):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "file").write_text("x")
    os.utime(old, (0, 0))
    lock = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert sweep(tmp_path) == 2
    finally:
        os.close(lock)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [held.name, new.name])


def test_a_zip_too_deep_is_refused_and_leaves_nothing(
        tmp_path: Path) -> None:
    """A member 2,000 folders deep after an ordinary one (extracted
    first): one short line saying why, no traceback, nothing left
    behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    archive = tmp_path / "deep.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("hw/modeling_attention.py", "x = 1\n")
        handle.writestr("a/" * 2000 + "modeling_attention.py", "x = 1\n")
    done = _grade(archive, tmp)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "is more than 12 folders deep" in said
    assert "'a/a/a/" in said and len(said) < 400  # the name, cut short
    assert "Traceback" not in done.stderr
    assert list(tmp.iterdir()) == []


# --------------------------------------------------------------------------
# Where no tmpfs can be mounted, the scratch folder is measured

#: Writes empty files until it is stopped (it never is by an error).
MANY_FILES = """
import time
for number in range(100_000):
    open(f"f{number}", "w").close()
time.sleep(30)
"""


def test_a_measured_scratch_folder_stops_its_worker_past_the_bound(
        ) -> None:
    """Without the tmpfs (as in a container that forbids namespaces), a
    worker past the bound's count of files is stopped, and its report
    says why, as a timeout's does."""
    from grader.run.sandbox import Job, Limits, run_jobs

    limits = Limits(timeout=30, scratch_mount=False, scratch_files=200)
    result = run_jobs([Job("many", MANY_FILES, "/nowhere/many.py", [])],
                      limits)["many"]
    assert result.ended == "disk", (result.ended, result.detail)
    assert result.detail.startswith(
        "it wrote more in its scratch folder than the bound (128 MB or "
        "200 files and folders) and was stopped")
    assert result.scratch_full and result.seconds < 20


def test_a_folder_too_deep_to_walk_cannot_be_measured(tmp_path: Path
                                                      ) -> None:
    """Deeper than the longest path: the walk fails closed (None)."""
    from grader.run.sandbox import scratch_use

    top = tmp_path / "scratch"
    top.mkdir()
    (top / "file").write_bytes(b"x" * 5000)
    used = scratch_use(top, 100)
    assert used is not None and used[1] == 1 and used[0] >= 5000
    assert scratch_use(top, 0) == (0, 1)  # past the count: stops there
    here = os.open(top, os.O_RDONLY)
    try:
        for _ in range(20):  # names of 250 letters: 5,000 in all
            os.mkdir("d" * 250, dir_fd=here)
            below = os.open("d" * 250, os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = below
        os.close(here)
        assert scratch_use(top, 10_000) is None
    finally:
        remove_tree(top)  # pytest's own clean-up recurses


def _corrupt_deflate(archive: Path) -> None:
    """A member whose deflate stream is broken past its first bytes."""
    data = b"x = 1\n" * 4000
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        handle.writestr("hw/modeling_attention.py", data)
    raw = bytearray(archive.read_bytes())
    start = raw.index(b"modeling_attention.py") + len("modeling_attention.py")
    raw[start + 4:start + 40] = b"\xff" * 36
    archive.write_bytes(bytes(raw))


def _name_not_utf8(archive: Path) -> None:
    """A member whose name is flagged UTF-8 but is not."""
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("hw/modeling_attention.py", "x = 1\n")
    raw = archive.read_bytes().replace(b"modeling_attention.py",
                                       b"modeling_attentio\xff.py")
    raw = raw.replace(b"\x14\x00\x00\x00", b"\x14\x00\x00\x08")
    archive.write_bytes(raw)


def _corrupt_lzma(archive: Path) -> None:
    """A member whose LZMA stream is broken."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_LZMA) as handle:
        handle.writestr("hw/modeling_attention.py", b"x = 1\n" * 4000)
    raw = bytearray(archive.read_bytes())
    start = raw.index(b"modeling_attention.py") + len("modeling_attention.py")
    raw[start + 12:start + 60] = b"\x00" * 48
    archive.write_bytes(bytes(raw))


def test_a_corrupt_zip_is_refused_in_one_line(tmp_path: Path) -> None:
    """A zip whose stream or names Python cannot read is a refusal that
    says so (ArchiveError, one line at the command line, that student's
    error row in a batch), never an exception of the library (red team
    4: a broken deflate stream and a name flagged UTF-8 that is not made
    ``grade`` print a traceback)."""
    from grader.locate.archive import ArchiveError, extract

    for make_zip in (_corrupt_deflate, _name_not_utf8, _corrupt_lzma):
        archive = tmp_path / f"{make_zip.__name__}.zip"
        make_zip(archive)
        try:
            extract(archive, tmp_path / make_zip.__name__)
        except ArchiveError as exc:
            assert "it is not a zip Python can read" in str(exc), exc
        else:
            raise AssertionError(f"{make_zip.__name__}: extracted")
