"""The shape grammar as rubric data (issue 16): each assignment's notation.

The warm-up reads the notation of the book it comes from, ``# Shape: (b,
num_tokens, d_out)`` (round brackets after a ``Shape:`` label), as well as
square brackets; the homework reads square brackets only, exactly as
docs/shape-comments.md says (its own tests, test_shapes.py, are unchanged).
"""
from __future__ import annotations

import pytest

from grader.rubric import get_assignment
from grader.shapes import (DimensionTable, Statement, ignored_brackets,
                           parse_shapes, shape_fix, verify)

WARM_UP = DimensionTable.of(get_assignment("attention_basics"))
HOMEWORK = DimensionTable.of(get_assignment("multi_head_attention"))
SIZES = {"batch_size": 2, "num_tokens": 8, "context_length": 11, "d_in": 13,
         "num_heads": 5, "head_dim": 7, "d_out": 35}


def claims(comment: str, table: DimensionTable) -> list[str]:
    """The shapes a comment holds, as written."""
    return [claim.text for claim in parse_shapes(comment, table)]


@pytest.mark.parametrize("comment,found", [
    ("Shape: (b, num_tokens, d_out)", ["(b, num_tokens, d_out)"]),
    ("shape : (b, num_heads, num_tokens, head_dim)",
     ["(b, num_heads, num_tokens, head_dim)"]),
    ("New. Shape: (b, num_tokens, num_tokens)",
     ["(b, num_tokens, num_tokens)"]),
    ("Shape: (b, num_tokens, d_out) -> (b, num_tokens, num_heads, "
     "head_dim)", ["(b, num_tokens, d_out)",
                   "(b, num_tokens, num_heads, head_dim)"]),
    ("Shape: (num_tokens,)", ["(num_tokens,)"]),
    ("Shape: ()", ["()"]),
    ("Shape: (b, (num_heads * head_dim))", ["(b, (num_heads * head_dim))"]),
    ("[b, num_tokens] then Shape: (b, num_tokens, d_out)",
     ["[b, num_tokens]", "(b, num_tokens, d_out)"]),
    ("[batch_size, num_tokens, d_out]", ["[batch_size, num_tokens, d_out]"]),
    ("Shape: (b, num_tokens, d_out) (optional projection)",
     ["(b, num_tokens, d_out)"]),
])
def test_the_warm_up_reads_the_books_notation(comment: str,
                                              found: list[str]) -> None:
    """Round brackets after the label, any case, as Python writes a tuple;
    square brackets anywhere; the last shape is the claim."""
    assert claims(comment, WARM_UP) == found


@pytest.mark.parametrize("comment", [
    "(b, num_tokens, d_out)",
    "Unroll last dim: (b, num_tokens, d_out)",
    "Shape: x.view(b, num_tokens)",
    "Shape: (num_tokens)",
    "Dot product for each head",
    "optional projection (after the heads are merged)",
])
def test_round_brackets_without_the_label_or_a_comma_are_prose(
        comment: str) -> None:
    """Round brackets elsewhere are prose, calls are calls, and a group
    without a comma is no tuple."""
    assert claims(comment, WARM_UP) == []


def test_the_homework_keeps_square_brackets_only() -> None:
    """The book's notation is not the homework's: its comments are read as
    before."""
    assert claims("Shape: (b, seq, hidden)", HOMEWORK) == []
    assert claims("Shape: (b, seq) -> [b, seq, hidden]", HOMEWORK) == [
        "[b, seq, hidden]"]
    assert parse_shapes("Shape: (b, seq, hidden)") == []   # the default
    assert shape_fix("(bs, seq, hidden)", HOMEWORK) == (
        "use square brackets: [bs, seq, hidden]")


@pytest.mark.parametrize("comment,fix", [
    ("(b, num_tokens, d_out)",
     "use square brackets: [b, num_tokens, d_out], or write Shape: before "
     "the round brackets: Shape: (b, num_tokens, d_out)"),
    ("Shape: (num_tokens)",
     "a shape in round brackets is a tuple: write (num_tokens,) or "
     "[num_tokens]"),
    ("Shape: (b, self.num_heads, num_tokens, head_dim)",
     "write num_heads, not self.num_heads: (b, num_heads, num_tokens, "
     "head_dim)"),
    ("Shape: (b, num_tokens, d_out)", None),
])
def test_messages_say_the_fix_in_the_warm_ups_notation(comment: str,
                                                       fix: str | None
                                                       ) -> None:
    """A comment whose shape is not understood gets the change to make."""
    assert shape_fix(comment, WARM_UP) == fix


def test_prose_after_the_label_is_listed_as_no_shape() -> None:
    """A round group after the label with no comma is reported as prose,
    not as a shape with an unknown name."""
    assert ignored_brackets("Shape: (optional projection)", WARM_UP) == [
        "(optional projection) (no comma: round brackets hold a shape only "
        "as a tuple, (num_tokens,))"]


def _statement(comment: str | None) -> Statement:
    return Statement(id=0, kind="assign", first_line=3, last_line=3,
                     text="keys = self.W_key(x)", watch=(("keys",),),
                     comment=comment, comment_where="trailing", below=None,
                     above=None, detached=None, traceable=True)


@pytest.mark.parametrize("comment,kind", [
    ("Shape: (b, num_tokens, d_out)", None),
    ("Shape: (b, num_tokens, d_in)", "wrong_shape"),
    ("Shape: (b, T, d_out)", "unknown_name"),
    ("(b, num_tokens, d_out)", "no_shape"),
    ("the keys", "no_shape"),
])
def test_book_comments_are_verified_against_the_real_shape(
        comment: str, kind: str | None) -> None:
    """A claim in the book's notation is checked like any other: right,
    wrong, an unknown name, or no shape at all (the message then shows the
    warm-up's example)."""
    runs = [(SIZES, {"0": [[[2, 8, 35]]]})]
    findings = verify([_statement(comment)], runs, WARM_UP)
    assert [f.kind for f in findings] == ([kind] if kind else [])
    if kind == "no_shape" and comment == "the keys":
        assert findings[0].message == (
            "the comment has no bracketed shape such as [batch_size, "
            "num_tokens, d_out] or Shape: (b, num_tokens, d_out)")
