"""A file Python cannot compile under its own encoding declaration is
reported as exactly that (issue 24, "Also").

The files of ``hostile/encodings/`` are the reference solution under a
cookie naming an ASCII-incompatible codec (EBCDIC: cp037, cp500 after a
shebang, cp1140): decoded so, the declaration itself turns into other
characters and Python refuses the file, while a reading as ASCII would be
full marks. Each is a one-line refusal naming the codec, the line and
Python's own words, never "nothing defines SelfAttention"; in a student
folder the reason leads the message. An honest Latin-1 file is graded as
usual, item by item.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from in_process import grade_command

from grader.locate.source import SourceError, decode_python

KIT = Path(__file__).resolve().parents[2]
ENCODINGS = KIT / "tests" / "kit" / "hostile" / "encodings"
PYTHON_SAYS = "Python cannot compile it: invalid non-printable character"
REFERENCE_ITEMS = {"task1.init": 1.0, "task1.forward": 3.0,
                   "task1.pep8": 0.0, "task1.shapes": 0.0,
                   "task1.bonus": 1.0, "task2.scores": 3.0,
                   "task2.causal": 1.0, "task2.output": 2.0,
                   "task2.pep8": 0.0, "task2.shapes": 0.0}


def _grade(path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env["PYTHONPATH"] = str(KIT)
    return subprocess.run([sys.executable, "-m", "grader", "grade",
                           str(path), "--public-only", "--format", "json"],
                          cwd=KIT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("name, codec, line", [
    ("ebcdic_emacs_cookie.py", "cp037", 1),
    ("ebcdic_vim_line_two.py", "cp500", 2),
    ("ebcdic_plain_cookie.py", "cp1140", 1),
])
def test_an_encoding_python_cannot_compile_is_named(name, codec, line):
    """A one-line refusal (exit 2): the codec, the line, Python's words;
    Python itself refuses the same bytes."""
    path = ENCODINGS / name
    with pytest.raises(SyntaxError):
        compile(path.read_bytes(), name, "exec")
    with pytest.raises(SourceError) as caught:
        decode_python(path.read_bytes(), name)
    assert f"does not decode as {codec}, line {line}" in str(caught.value)
    # The command's main in this process (in_process.py); the folder's
    # refusal below runs the command as a process of its own.
    run = grade_command(str(path), "--public-only", "--format", "json")
    assert run.returncode == 2, run.stdout
    assert run.stdout == ""
    message = run.stderr.strip()
    assert "\n" not in message
    assert f"does not decode as {codec}, line {line} (its own encoding " \
           f"declaration)" in message
    assert PYTHON_SAYS in message
    assert "defines" not in message


def test_in_a_student_folder_the_reason_leads(tmp_path):
    """transformer_lm/modeling_attention.py in cp037: the folder cannot
    be graded because of that file, said first, in one line of a real
    ``python -m grader grade``."""
    module = tmp_path / "repo" / "transformer_lm" / "modeling_attention.py"
    module.parent.mkdir(parents=True)
    shutil.copy(ENCODINGS / "ebcdic_emacs_cookie.py", module)
    run = _grade(tmp_path / "repo")
    assert run.returncode == 2
    assert "cannot be graded: \"transformer_lm/modeling_attention.py\"" \
        in run.stderr
    assert "does not decode as cp037, line 1" in run.stderr
    assert "nothing in" not in run.stderr
    assert run.stdout == "" and run.stderr.count("\n") == 1


def test_an_honest_latin1_file_is_graded_as_usual():
    """The same check leaves an ASCII-compatible declaration alone (the
    command by its main in this process, in_process.py)."""
    run = grade_command(str(ENCODINGS / "latin1_honest.py"),
                        "--public-only", "--format", "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert {i["id"]: i["score"] for i in report["items"]} == \
        REFERENCE_ITEMS
    assert report["errors"] == [] and report["flags"] == []
