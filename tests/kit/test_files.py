"""grader.output.files.write_atomic: whole files, readable as the user's files.

Report files, the grades CSV and Gradescope's results.json are written
through it; their modes must follow the umask as the PNGs matplotlib
writes beside them do (tests/kit/test_cli.py checks a real grade's files).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.output.files import write_atomic

KIT = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _write_under(umask: int, path: Path, text: str) -> None:
    """write_atomic in a child process whose umask is ``umask`` (the
    tests' own umask is left alone)."""
    subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from grader.output.files import write_atomic; "
         "write_atomic(Path(sys.argv[1]), sys.argv[2])", str(path), text],
        cwd=KIT, check=True, timeout=60, umask=umask)


@pytest.mark.parametrize("umask, expected", [
    (0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_file_gets_0666_less_the_umask(tmp_path, umask, expected):
    """As open() would create it: 0644 under the usual umask 022."""
    path = tmp_path / "report.txt"
    _write_under(umask, path, "hello\n")
    assert path.read_text() == "hello\n"
    assert _mode(path) == expected
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


def test_a_replaced_file_keeps_its_mode(tmp_path):
    """A user's chmod of grades.csv survives the next write."""
    path = tmp_path / "grades.csv"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    _write_under(0o022, path, "new\n")
    assert path.read_text() == "new\n"
    assert _mode(path) == 0o640


def test_bytes_and_missing_folders(tmp_path):
    """Bytes are written as given; missing parent folders are made."""
    path = tmp_path / "a" / "b" / "results.json"
    write_atomic(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert _mode(path) == 0o666 & ~_current_umask()


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
