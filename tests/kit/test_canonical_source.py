"""One canonical text for every stage (grader.locate.source).

The sandbox compiles, flake8 lints, the region finder and the shape
checker read one text: the file decoded as Python decodes it (PEP 263),
with lines counted as Python's tokenizer counts them. These tests pin that
agreement against the interpreter itself, the reading limits (regular
files only, a size cap, nothing followed through a final symlink), and
that code too deep for the parser gives a grade or a one-line error,
never a traceback.
"""
from __future__ import annotations

import ast
import io
import json
import os
import socket
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from in_process import grade_command

from grader.analyse.static import analyse, stub_of
from grader.judge.pep8 import run_flake8
from grader.locate.source import (MAX_SOURCE_BYTES, SourceError, SourceFile,
                                  decode_python, encode_python, find_class,
                                  find_method, given_statements, load_python,
                                  read_bytes, split_lines, student_code,
                                  student_regions, untouched)
from grader.rubric import get_assignment

KIT = Path(__file__).resolve().parents[2]
CONFIG = KIT / "grader" / "flake8.cfg"
STUB = KIT / "grader" / "assignments" / "multi_head_attention" / "stub.py"
SPECIAL = ("\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
           "\u2029")


def _python_runs(data: bytes, tmp_path: Path) -> tuple[bool, str]:
    """Whether ``python FILE`` accepts these bytes (the interpreter's own
    reading of a source file), and its error."""
    path = tmp_path / "probe.py"
    path.write_bytes(data)
    completed = subprocess.run([sys.executable, "-I", str(path)],
                               capture_output=True, text=True, timeout=60)
    return completed.returncode == 0, completed.stderr


# --------------------------------------------------------------------------
# Decoding, as the interpreter decodes


ACCEPTED = {
    "utf-8": "s = 'caf\u00e9'\n".encode("utf-8"),
    "utf-8 BOM": b"\xef\xbb\xbfs = 1\n",
    "BOM and utf-8 cookie": b"\xef\xbb\xbf# coding: utf-8\ns = 1\n",
    "latin-1 cookie": b"# -*- coding: latin-1 -*-\ns = '\xe9'\n",
    "cookie on line 2": b"#!/usr/bin/env python\n# coding: latin-1\n"
                        b"s = '\xe9'\n",
    "cp1252 cookie": b"# coding: cp1252\ns = '\x80'\n",
    "vim cookie": b"# vim: set fileencoding=latin-1 :\ns = '\xe9'\n",
    "shift_jis": "# coding: shift_jis\ns = '\u30c6\u30b9\u30c8'\n"
                 .encode("shift_jis"),
    "unicode_escape": b"# coding: unicode_escape\nx = 1  # \\u000ay = 2\n",
    "CRLF": b"x = 1\r\ny = 2\r\n",
    "CR only": b"x = 1\ry = 2\r",
    "form feed": b"\x0cx = 1\n\x0cy = 2\n",
}
REFUSED = {
    "invalid UTF-8": (b"s = '\xff'\n", "not valid UTF-8 text (byte 5)"),
    "invalid UTF-8 on line 3": (b"a = 1\nb = 2\ns = '\xff'\n",
                                "not valid UTF-8 text (byte 17)"),
    "invalid UTF-8 in a comment": (b"x = 1  # caf\xe9\n",
                                   "not valid UTF-8 text (byte 12) and "
                                   "declares no encoding"),
    "unknown encoding": (b"# coding: klingon\nx = 1\n",
                         "unknown encoding: klingon"),
    "not a text encoding": (b"# coding: rot13\nx = 1\n",
                            "'rot13' is not a text encoding"),
    "BOM against the cookie": (b"\xef\xbb\xbf# coding: latin-1\nx = 1\n",
                               "Python refuses its encoding"),
    "cookie after code": (b"x = 1\n# coding: latin-1\ns = '\xe9'\n",
                          "not valid UTF-8 text"),
    "NUL byte": (b"x = 1\0\n", "NUL byte"),
    "NUL by escape": (b"# coding: unicode_escape\nx = '\\x00'\n",
                      "NUL character"),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_decoding_agrees_with_the_interpreter(name: str,
                                              tmp_path: Path) -> None:
    """The text the grader reads parses to the tree Python compiles."""
    data = ACCEPTED[name]
    text, encoding = decode_python(data, "probe.py")
    compiled = compile(data, "probe.py", "exec", ast.PyCF_ONLY_AST)
    assert ast.dump(ast.parse(text)) == ast.dump(compiled)
    assert "\r" not in text
    assert _python_runs(data, tmp_path)[0]
    # flake8 gets bytes that mean exactly this text.
    assert decode_python(encode_python(text, encoding), "copy")[0] == text


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_python_refuses_is_refused_in_one_line(name: str,
                                                    tmp_path: Path) -> None:
    data, words = REFUSED[name]
    with pytest.raises(SourceError) as caught:
        decode_python(data, "probe.py")
    message = str(caught.value)
    assert words in message and "\n" not in message
    runs, error = _python_runs(data, tmp_path)
    assert not runs and ("SyntaxError" in error or "null bytes" in error)


# --------------------------------------------------------------------------
# Lines, as the tokenizer counts them


def _text_with(char: str) -> str:
    return (f"import torch  # a{char}b\n"
            f"s = 'x{char}y'\n"
            f"t = '''\n1{char}2\n'''\n"
            f"\x0cclass A:  # {char}\n"
            f"    def f(self):\n"
            f"        return 1  # {char}{char}\n")


@pytest.mark.parametrize("char", SPECIAL, ids=[repr(c) for c in SPECIAL])
def test_one_line_splitter_agrees_with_the_tokenizer(char: str) -> None:
    """Every token sits where split_lines says its line is; splitlines
    would move every line after the character."""
    text = _text_with(char)
    lines = split_lines(text)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        (row, col), (end_row, _) = token.start, token.end
        if row == end_row and token.string.strip():
            assert lines[row - 1][col:col + len(token.string)] == \
                token.string
    tree = ast.parse(text)
    assert [node.lineno for node in tree.body] == [1, 2, 3, 6]
    assert lines[5].startswith("\x0cclass A")
    assert len(text.splitlines()) > len(lines)
    source = SourceFile(text=text, path=Path("probe.py"))
    assert source.lines == lines
    assert sorted(source.comments) == [1, 6, 8]


def test_line_ends_are_made_canonical() -> None:
    source = SourceFile(text="a = 1\r\nb = 2\rc = 3\n", path=Path("x.py"))
    assert source.text == "a = 1\nb = 2\nc = 3\n"
    assert source.lines == ["a = 1", "b = 2", "c = 3"]


def test_flake8_sees_the_lines_python_sees(tmp_path: Path) -> None:
    """A long line after line-shifting characters, in a Latin-1 file: its
    E501 is on the line, and at the column, Python counts."""
    long = "x = 1  # " + "\u00e9" * 75
    text = ("# -*- coding: latin-1 -*-\n"
            f"a = 1  # {''.join(SPECIAL)}end\n" + long + "\n")
    path = tmp_path / "shifted.py"
    path.write_bytes(text.encode("latin-1", "replace")
                     .replace(b"?", b" "))  # \u2028 and co. are not Latin-1
    utf8 = tmp_path / "shifted_utf8.py"
    utf8.write_text(text.replace("latin-1", "utf-8"), encoding="utf-8")
    for case in (path, utf8):
        source = load_python(case)
        findings = run_flake8(source, CONFIG)
        assert [(f.code, f.line) for f in findings] == [("E501", 3)]
        assert "(84 > 79 characters)" in findings[0].text


# --------------------------------------------------------------------------
# Reading: regular files only, with a cap


def test_reading_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    real = tmp_path / "real.py"
    real.write_text("x = 1\n")
    link = tmp_path / "link.py"
    link.symlink_to(real)
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    sock = tmp_path / "sock.py"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    try:
        for path in (link, fifo, sock, tmp_path, Path("/dev/zero")):
            with pytest.raises(SourceError, match="not a regular file"):
                read_bytes(path, 100)
    finally:
        server.close()
    assert read_bytes(real, 100) == b"x = 1\n"


def test_reading_stops_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.py"
    path.write_bytes(b"#" * 101)
    assert len(read_bytes(path, 101)) == 101
    with pytest.raises(SourceError, match="larger than the grader's limit"):
        read_bytes(path, 100)
    with pytest.raises(SourceError, match="cannot read"):
        read_bytes(tmp_path / "missing.py", 100)


def test_a_300000_term_expression_is_refused_by_the_cap(
        tmp_path: Path) -> None:
    path = tmp_path / "huge.py"
    path.write_text("x = " + "+".join(["a"] * 300_000) + "\n")
    with pytest.raises(SourceError, match="larger than the grader's limit "
                                          "of 256 KB"):
        load_python(path)
    completed = subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(path)], cwd=KIT,
        capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1
    assert "larger than the grader's limit" in completed.stderr


def test_code_too_deep_for_the_parser_earns_0_with_a_message(
        tmp_path: Path) -> None:
    """A 100,000-term sum fits the cap but not Python's parser: a grade
    of 0 that says so, no traceback."""
    text = (KIT / "solutions" / "modeling_attention.py").read_text()
    deep = "DEEP = " + "+".join(["1"] * 100_000) + "\n"
    path = tmp_path / "deep.py"
    path.write_text(text + "\n" + deep)
    assert path.stat().st_size < MAX_SOURCE_BYTES
    assignment = get_assignment("multi_head_attention")
    analysis = analyse(assignment, assignment.tasks[0], load_python(path))
    assert analysis.syntax_error == ("the code cannot be compiled: the code "
                                     "is nested too deeply for Python to "
                                     "compile it")
    completed = grade_command(  # in_process.py
        str(path), "--format", "json", "--assignment",
        "multi_head_attention", "--public-only", unset=())
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr
    report = json.loads(completed.stdout)
    assert report["score"] == 0
    assert "nested too deeply" in json.dumps(report)


# --------------------------------------------------------------------------
# Regions and the student's code


def _forward(text: str, name: str = "SelfAttention") -> tuple:
    source = SourceFile(text=text, path=Path("probe.py"))
    return source, find_method(find_class(source.parse(), name), "forward")


def test_markers_are_comment_tokens_only() -> None:
    text = ("class SelfAttention:\n"
            "    def forward(self, x):\n"
            "        # YOUR CODE STARTS HERE\n"
            "        s = '''\n"
            "        # YOUR CODE ENDS HERE\n"
            "        '''\n"
            "        y = x  # YOUR CODE ENDS HERE\n"
            "        return y\n"
            "        # YOUR CODE ENDS HERE\n")
    source, func = _forward(text)
    assert student_regions(source, func) == [(4, 8)]


def test_statements_outside_the_markers_are_the_students() -> None:
    """The stub's given code, however laid out, stays the kit's; any
    other statement outside the markers is the student's."""
    stub = load_python(STUB)
    given = given_statements(stub, "MultiHeadSelfAttention", "forward")
    text = STUB.read_text()
    text = text.replace("        bs, seq, _ = x.shape\n",
                        "        bs,seq,_=x.shape  # the sizes\n"
                        "        extra = x * 2\n")
    text = text.replace("        if return_attention:\n"
                        "            return att, probs\n",
                        "        if return_attention:\n"
                        "            return att, probs\n"
                        "        if return_attention:\n"
                        "            return att, probs\n")
    source, func = _forward(text, "MultiHeadSelfAttention")
    code = student_code(source, func, given)
    outside = sorted(node.lineno for node in code.outside)
    lines = source.lines
    assert [lines[n - 1].strip() for n in outside] == [
        "extra = x * 2", "return att, probs"]
    assert untouched(load_python(STUB), find_class(
        load_python(STUB).parse(), "MultiHeadSelfAttention"), stub)
    assert not untouched(source, find_class(
        source.parse(), "MultiHeadSelfAttention"), stub)
    # Without a stub to compare with, only the regions are the student's.
    assert student_code(source, func, None).outside == ()


def test_the_graders_stub_copy_is_the_released_stub() -> None:
    for assignment_id in ("multi_head_attention", "attention_basics"):
        assignment = get_assignment(assignment_id)
        copy = stub_of(assignment)
        released = KIT / "transformer_lm" / f"{assignment.module}.py"
        assert copy is not None
        assert copy.text == released.read_text(encoding="utf-8")
