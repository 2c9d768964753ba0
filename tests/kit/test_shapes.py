"""Tests of the shape-comment verifier (grader.shapes) on real submissions.

Each case file in ``shape_cases/`` holds ``SelfAttention`` and/or
``MultiHeadSelfAttention``; its docstring says what it gets wrong. The
tracer runs in this process on these trusted files (the grader runs it in
the sandbox): every class is built under both of the rubric's size sets and
its forward is called causal and not, with and without return_attention,
under the sandbox agent's line tracer (``tests/kit/tracing.py``). Findings
are asserted exactly, as (kind, line),
with lines located by their text so that the case files can be edited.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
import torch
from tracing import Trace

from grader.locate.loading import load_notebook
from grader.locate.source import SourceFile, load_python
from grader.shapes import (DimensionTable, Finding, ShapeEvalError,
                           ShapeRecordError, Statement, collect_statements,
                           format_findings, ignored_brackets, merge_records,
                           parse_shapes, penalised, size_set_collisions,
                           verify)

KIT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "shape_cases"
REFERENCE = KIT / "solutions" / "modeling_attention.py"
RUBRIC = tomllib.loads(
    (KIT / "grader" / "assignments" / "multi_head_attention"
     / "rubric.toml").read_text(encoding="utf-8"))
DIMS = DimensionTable.from_rubric(RUBRIC["shapes"]["dimensions"])
SIZE_SETS: list[dict[str, int]] = RUBRIC["shapes"]["size_sets"]
SET_1 = SIZE_SETS[0]
SA, MHSA = "SelfAttention", "MultiHeadSelfAttention"


# ---------------------------------------------------------------------------
# Helpers: load a case, trace its forward, locate lines
# ---------------------------------------------------------------------------

@cache
def _load(path: Path) -> tuple[SourceFile, ModuleType]:
    """The source and the executed module of a case file or notebook."""
    if path.suffix == ".ipynb":
        source = load_notebook(path)
        module = ModuleType(f"shape_case_{path.stem}")
        exec(compile(source.text, str(path), "exec"), module.__dict__)
        return source, module
    spec = importlib.util.spec_from_file_location(
        f"shape_case_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return load_python(path), module


@dataclass
class Traced:
    """One class's statements and what its forward did under each set."""

    source: SourceFile
    statements: list[Statement]
    runs: list[tuple[dict[str, int], dict]]
    intact: bool

    def findings(self) -> list[Finding]:
        """The verifier's findings for these runs."""
        return verify(self.statements, self.runs, DIMS)

    def kinds(self) -> list[tuple[str, int]]:
        """The findings as (kind, line), in report order."""
        return [(finding.kind, finding.line) for finding in self.findings()]


def trace(path: Path, class_name: str, causal: tuple[bool, ...] = (False,
                                                                   True),
          attention: tuple[bool, ...] = (False, True)) -> Traced:
    """Run ``class_name.forward`` of ``path`` under each rubric size set."""
    source, module = _load(path)
    cls = getattr(module, class_name)
    statements = collect_statements(source, class_name, "forward")
    plan = [statement.to_plain() for statement in statements]
    filename = cls.forward.__code__.co_filename
    runs = []
    intact = True
    torch.manual_seed(0)
    for sizes in SIZE_SETS:
        x = torch.randn(sizes["batch_size"], sizes["seq_len"],
                        sizes["input_size"])
        with Trace(filename, "forward", plan) as tracer:
            if class_name == SA:
                cls(sizes["input_size"], sizes["hidden"])(x)
            else:
                for is_causal in causal:
                    model = cls(sizes["input_size"], sizes["hidden"],
                                sizes["num_heads"], causal=is_causal)
                    for return_attention in attention:
                        model(x, return_attention=return_attention)
        runs.append((sizes, tracer.records))
        intact = intact and tracer.intact
    return Traced(source, statements, runs, intact)


def line_of(path: Path, snippet: str) -> int:
    """The line number of the one line of ``path`` that holds ``snippet``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [n for n, line in enumerate(lines, 1) if snippet in line]
    assert len(found) == 1, f"{snippet!r} is on lines {found} of {path.name}"
    return found[0]


def statement_at(statements: list[Statement], line: int) -> Statement:
    """The statement that starts on ``line``."""
    (statement,) = [s for s in statements if s.first_line == line]
    return statement


# ---------------------------------------------------------------------------
# Dimension names and the shape grammar
# ---------------------------------------------------------------------------

def test_dimension_table_resolves_aliases_in_any_case() -> None:
    assert DIMS.resolve("bs") == "batch_size"
    assert DIMS.resolve("B") == "batch_size"
    assert DIMS.resolve("Seq_Length") == "seq_len"
    assert DIMS.resolve("d_k") == "head_size"
    assert DIMS.resolve("h") == "num_heads"
    assert DIMS.resolve("hidden") == "hidden"
    assert DIMS.resolve("T") is None
    assert DIMS.known_names() == ["batch_size", "seq_len", "input_size",
                                  "hidden", "num_heads", "head_size"]
    assert DIMS.describe().startswith("batch_size (bs, batch, b); seq_len")


def test_dimension_table_rejects_an_alias_of_two_dimensions() -> None:
    with pytest.raises(ValueError, match="'h' is used for both"):
        DimensionTable.from_rubric({"hidden": ["h"], "num_heads": ["h"]})


@pytest.mark.parametrize("comment, claim, value", [
    ("[batch_size, seq_len, hidden]", "[batch_size, seq_len, hidden]",
     (2, 5, 33)),
    ("-> [batch_size, num_heads, seq_len, seq_len]",
     "[batch_size, num_heads, seq_len, seq_len]", (2, 3, 5, 5)),
    ("[bs, seq, hidden] @ [bs, hidden, seq] -> [bs, seq, seq]",
     "[bs, seq, seq]", (2, 5, 5)),
    ("shape [bs, num_heads, seq, seq]", "[bs, num_heads, seq, seq]",
     (2, 3, 5, 5)),
    ("'k' [batch_size, seq_len, input_size]\n"
     "-> view [batch_size, seq_len, num_heads, head_size]\n"
     "-> transpose [batch_size, num_heads, seq_len, head_size]",
     "[batch_size, num_heads, seq_len, head_size]", (2, 3, 5, 11)),
    ("[bs*heads, seq, hidden / num_heads]",
     "[bs*heads, seq, hidden / num_heads]", (6, 5, 11)),
    ("[(bs * h), 1, d_model // h]", "[(bs * h), 1, d_model // h]",
     (6, 1, 11)),
    ("FloatTensor[batch_size * num_heads, seq_len, seq_len]",
     "[batch_size * num_heads, seq_len, seq_len]", (6, 5, 5)),
    ("[seq_len, seq_len], True strictly above the diagonal",
     "[seq_len, seq_len]", (5, 5)),
    ("[batch_size * num_heads,\n seq_len, seq_len]",
     "[batch_size * num_heads, seq_len, seq_len]", (6, 5, 5)),
    ("[bs, hidden] taken from x[0]", "[bs, hidden]", (2, 33)),
    ("scores.sum() -> []", "[]", ()),
    # The seed's own example: h is num_heads by the rubric's aliases.
    ("[batch, seq, h] -> [seq, batch, h]", "[seq, batch, h]", (5, 2, 3)),
])
def test_parse_shapes_takes_the_last_bracketed_shape(
        comment: str, claim: str, value: tuple[int, ...]) -> None:
    claims = parse_shapes(comment)
    assert claims[-1].text == claim
    assert claims[-1].evaluate(SET_1, DIMS) == value


@pytest.mark.parametrize("comment, reason", [
    ("(B, T, C)", None),
    ("mask[None, None, :, :]", "an index, not a shape"),
    ("[bs, seq hidden]", "expected ','"),
    ("[-1, seq]", "unexpected '-'"),
    ("[bs, self.head_size]", "unexpected '.'"),
    ("[bs, 2 ** 3]", "unexpected '*'"),
    ("[bs, (seq]", "unexpected end of shape"),
])
def test_parse_shapes_skips_what_is_not_a_shape(comment: str,
                                                reason: str | None) -> None:
    assert parse_shapes(comment) == []
    ignored = ignored_brackets(comment)
    if reason is None:
        assert ignored == []
    else:
        assert len(ignored) == 1 and reason in ignored[0]


def test_claims_report_unknown_names_and_uneven_quotients() -> None:
    (claim,) = parse_shapes("[B, T, C * bs]")
    assert claim.unknown_names(DIMS) == ["T", "C"]
    with pytest.raises(ShapeEvalError, match="unknown name 'T'"):
        claim.evaluate(SET_1, DIMS)
    (uneven,) = parse_shapes("[hidden / 4]")
    with pytest.raises(ShapeEvalError, match=r"does not divide evenly"):
        uneven.evaluate(SET_1, DIMS)
    (floor,) = parse_shapes("[hidden // 2]")
    with pytest.raises(ShapeEvalError, match=r"\(33 // 2\)"):
        floor.evaluate(SET_1, DIMS)


def test_rubric_size_sets_keep_dimensions_and_products_apart() -> None:
    from grader.rubric import assignments

    for assignment in assignments():
        assert assignment.size_sets, assignment.id
        for sizes in assignment.size_sets:
            assert size_set_collisions(sizes, assignment.identities) == [], (
                assignment.id, sizes)
    identity = [("hidden", "num_heads", "head_size")]
    for sizes in SIZE_SETS:
        assert size_set_collisions(sizes) == [
            f"hidden = head_size * num_heads = {sizes['hidden']}"]
    # The seed's test sizes cannot tell heads from batch or head size.
    seed = {"batch_size": 3, "seq_len": 5, "input_size": 7, "hidden": 9,
            "num_heads": 3, "head_size": 3}
    collisions = size_set_collisions(seed, identity)
    assert "batch_size = num_heads = 3" in collisions
    assert "batch_size = head_size = 3" in collisions


# ---------------------------------------------------------------------------
# Collecting statements and their comments
# ---------------------------------------------------------------------------

def test_collect_statements_of_the_reference_stays_in_student_regions(
        ) -> None:
    source, _ = _load(REFERENCE)
    statements = collect_statements(source, MHSA, "forward")
    regions_text = [s.text for s in statements]
    assert "bs, seq, _ = x.shape" not in regions_text
    assert not any(text.startswith("probs = att = None")
                   for text in regions_text)
    assert not any(text.startswith("return") for text in regions_text)
    k = statement_at(statements, line_of(REFERENCE, "        k = (self.k(x)"))
    assert k.last_line == k.first_line + 3
    assert k.comment_where == "below"
    assert parse_shapes(k.comment)[-1].text == (
        "[batch_size * num_heads, seq_len, head_size]")
    mask = statement_at(statements, line_of(REFERENCE, "mask = torch."))
    assert mask.comment.startswith("[seq_len, seq_len]")
    assert collect_statements(source, "NoSuchClass", "forward") == []
    assert collect_statements(source, MHSA, "no_such_method") == []


def test_collect_statements_watches_what_each_statement_changes() -> None:
    path = CASES / "inplace_ops.py"
    statements = collect_statements(_load(path)[0], MHSA, "forward")
    expected = {
        "scores.masked_fill_(mask,": ("expr", (("scores",),)),
        "scores[:, mask] = float": ("assign", (("scores",),)),
        "probs *= 1.0": ("augassign", (("probs",),)),
        "outputs.append(": ("expr", (("outputs",),)),
        "q, k, v = [t.view": ("assign", (("q",), ("k",), ("v",))),
    }
    for snippet, (kind, watch) in expected.items():
        statement = statement_at(statements, line_of(path, snippet))
        assert (statement.kind, statement.watch) == (kind, watch), snippet
    accepted = CASES / "accepted_forms.py"
    statements = collect_statements(_load(accepted)[0], MHSA, "forward")
    chained = statement_at(statements, line_of(accepted, "scores = scaled"))
    assert chained.watch == (("scores",), ("scaled",))
    annotated = statement_at(statements, line_of(accepted, "probs: torch"))
    assert annotated.kind == "annassign"
    returned = statement_at(statements, line_of(accepted, "return att, p"))
    assert (returned.kind, returned.watch) == ("return", (("<return>",),))


def test_statement_plan_is_plain_json() -> None:
    statements = collect_statements(_load(REFERENCE)[0], MHSA, "forward")
    plan = [statement.to_plain() for statement in statements]
    assert json.loads(json.dumps(plan)) == plan
    assert set(plan[0]) == {"id", "kind", "first_line", "last_line",
                            "watch", "traceable"}


# ---------------------------------------------------------------------------
# End to end: the reference, the seed, every accepted form
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("class_name", [SA, MHSA])
def test_reference_solution_has_no_finding(class_name: str) -> None:
    traced = trace(REFERENCE, class_name)
    assert traced.intact
    assert traced.findings() == []
    # Every statement ran (causal and not), so nothing went unverified.
    for statement in traced.statements:
        assert all(records.get(str(statement.id))
                   for _, records in traced.runs), statement.text


def test_reference_without_causal_runs_leaves_notes_only() -> None:
    traced = trace(REFERENCE, MHSA, causal=(False,), attention=(False,))
    assert traced.kinds() == [
        ("never_ran", line_of(REFERENCE, "mask = torch.ones")),
        ("never_ran", line_of(REFERENCE, "scores = scores.masked_fill")),
    ]
    assert not penalised(traced.findings())


@pytest.mark.parametrize("class_name", [SA, MHSA])
def test_seed_solution_comments_pass(class_name: str) -> None:
    traced = trace(CASES / "seed_solution.py", class_name)
    assert traced.intact
    assert traced.findings() == []


@pytest.mark.parametrize("class_name", [SA, MHSA])
def test_every_accepted_comment_form_passes(class_name: str) -> None:
    traced = trace(CASES / "accepted_forms.py", class_name)
    assert traced.intact
    assert traced.findings() == []


def test_module_level_function_is_checked_like_a_method() -> None:
    path = CASES / "accepted_forms.py"
    source, module = _load(path)
    statements = collect_statements(source, None, "split_heads")
    assert [s.kind for s in statements] == ["assign", "assign", "return"]
    assert collect_statements(source, None, "no_such_function") == []
    plan = [statement.to_plain() for statement in statements]
    runs = []
    for sizes in SIZE_SETS:
        t = torch.zeros(sizes["batch_size"], sizes["seq_len"],
                        sizes["hidden"])
        with Trace(module.split_heads.__code__.co_filename,
                   "split_heads", plan) as tracer:
            module.split_heads(t, sizes["num_heads"])
        runs.append((sizes, tracer.records))
    assert runs[1][1][str(statements[2].id)] == [[[6, 7, 13]]]
    assert verify(statements, runs, DIMS) == []


# ---------------------------------------------------------------------------
# End to end: mistakes
# ---------------------------------------------------------------------------

def test_missing_wrong_and_unknown_in_self_attention() -> None:
    path = CASES / "mistakes.py"
    traced = trace(path, SA)
    assert traced.kinds() == [
        ("missing", line_of(path, "q = self.q(x)")),
        ("no_shape", line_of(path, "k = self.k(x)  # the keys")),
        ("unknown_name", line_of(path, "v = self.v(x)  # [B, T, C]")),
        ("wrong_shape", line_of(path, "scores = q @ k.transpose(1, 2)  #")),
        ("no_shape", line_of(path, "# over the keys")),
    ]
    findings = traced.findings()
    assert penalised(findings)
    assert "T, C" in findings[2].message
    assert "batch_size (bs, batch, b)" in findings[2].hint
    assert findings[3].claimed == "[bs, seq, hidden]"
    assert [one.shapes for one in findings[3].real] == [("[2, 5, 5]",),
                                                        ("[3, 7, 7]",)]
    assert "comment below is not used" in findings[4].hint


def test_mistakes_in_multi_head_attention() -> None:
    path = CASES / "mistakes.py"
    traced = trace(path, MHSA)
    assert traced.kinds() == [
        ("wrong_shape", line_of(path, "k = (self.k(x)")),
        ("wrong_shape", line_of(path, "q = (self.q(x)")),
        ("wrong_shape", line_of(path, "v = (self.v(x)")),
        ("unknown_name", line_of(path, "# [T, T]")),
    ]
    literal_heads, uneven, _, _ = traced.findings()
    # [bs * 3, ...] is right while num_heads is 3: only set 2 catches it.
    assert [one.wrong for one in literal_heads.real] == [0, 4]
    assert "does not divide evenly" in uneven.real[0].expected


def test_comment_above_belongs_to_the_statement_before() -> None:
    path = CASES / "attribution.py"
    traced = trace(path, SA)
    assert traced.kinds() == [
        ("wrong_shape", line_of(path, "v = self.v(x)")),
        ("wrong_shape", line_of(path, "probs = torch.softmax(q @")),
        ("missing", line_of(path, "return probs @ v")),
    ]
    for finding in traced.findings():
        assert "belongs to the statement before it" in finding.hint


def test_blank_lines_trailing_and_multi_line_attribution() -> None:
    path = CASES / "attribution.py"
    traced = trace(path, MHSA)
    first_k = line_of(path, "k = self.k(x).view(")
    assert traced.kinds() == [
        ("missing", first_k),
        ("wrong_shape", line_of(path, "q = (self.q(x)")),
        ("missing", line_of(path, "scores = q @ k.transpose(1, 2) /")),
    ]
    findings = traced.findings()
    assert "blank line" in findings[0].hint
    assert findings[1].claimed == "[bs, seq, num_heads, head_size]"
    assert findings[2].hint is None  # the comment above is v's, and right
    second_k = statement_at(traced.statements, first_k + 3)
    assert second_k.comment_where == "trailing"


def test_multi_line_statements_and_tuple_unpacking() -> None:
    path = CASES / "multiline_tuples.py"
    traced = trace(path, SA)
    assert traced.kinds() == [
        ("wrong_shape", line_of(path, "scores, k_t =")),
        ("wrong_shape", line_of(path, "probs, values =")),
    ]
    one_claim, swapped = traced.findings()
    assert one_claim.real[0].shapes == ("[2, 5, 5] and [2, 33, 5]",)
    assert swapped.claimed == "[bs, seq, hidden], [bs, seq, seq]"
    out = statement_at(traced.statements, line_of(path, "out = torch.bmm("))
    assert out.last_line == out.first_line + 3
    assert traced.runs[0][1][str(out.id)] == [[[2, 5, 33]]]


def test_tuple_return_with_shapes_in_the_wrong_order() -> None:
    path = CASES / "multiline_tuples.py"
    traced = trace(path, MHSA)
    assert traced.kinds() == [
        ("wrong_shape", line_of(path, "return att, probs  #")),
    ]
    (finding,) = traced.findings()
    assert finding.real[1].shapes == ("[3, 7, 26] and [6, 7, 7]",)


def test_in_place_operations_are_checked() -> None:
    path = CASES / "inplace_ops.py"
    assert trace(path, SA).kinds() == [
        ("wrong_shape", line_of(path, "probs.mul_(1.0)")),
    ]
    assert trace(path, MHSA).kinds() == [
        ("missing", line_of(path, "scores.masked_fill_(mask,")),
        ("wrong_shape", line_of(path, "probs *= 1.0")),
    ]


def test_every_loop_iteration_is_checked() -> None:
    path = CASES / "loops.py"
    assert trace(path, SA).findings() == []
    traced = trace(path, MHSA)
    assert traced.kinds() == [
        ("wrong_shape", line_of(path, "att = out if att is None")),
    ]
    (finding,) = traced.findings()
    # 4 forward calls per set; 3 heads (set 1) and 2 heads (set 2): the
    # claim holds only in the last iteration of each call.
    assert [(one.wrong, one.executions) for one in finding.real] == [
        (8, 12), (4, 8)]
    assert finding.real[1].shapes == ("[3, 7, 13]", "[3, 7, 26]")
    assert ("(wrong in 12 of the 20 times this line ran, right in the "
            "others)") in finding.message


def test_lines_that_never_run_are_judged_statically() -> None:
    """A statement that never ran: a right comment is a note, a missing
    one on a tensor statement is a finding, an unknown name too."""
    path = CASES / "never_runs.py"
    traced = trace(path, MHSA)
    assert traced.kinds() == [
        ("never_ran", line_of(path, "x = x.unsqueeze(0)")),
        ("missing", line_of(path, "scores = scores.float()")),
        ("unknown_name", line_of(path, "scores = scores.half()")),
        ("not_traced", line_of(path, "if bs < 0: att")),
    ]
    assert [finding.penalised for finding in traced.findings()] == [
        False, True, True, False]
    findings = traced.findings()
    assert "did not run in any of the grader's runs" \
        in findings[1].message
    assert "names are checked whether or not its statement ran" \
        in findings[2].message


def test_removing_the_trace_function_is_tampering() -> None:
    path = CASES / "tampering.py"
    assert not trace(path, SA).intact
    assert not trace(path, MHSA).intact
    assert trace(CASES / "loops.py", MHSA).intact


# ---------------------------------------------------------------------------
# The tracer itself
# ---------------------------------------------------------------------------

def test_tracer_restores_the_previous_trace_function() -> None:
    def previous(frame, event, arg):
        return None

    sys.settrace(previous)
    try:
        with Trace("nowhere.py", "forward", []) as tracer:
            assert sys.gettrace() is not previous
        assert sys.gettrace() is previous
        assert tracer.intact
    finally:
        sys.settrace(None)


def test_tracer_ignores_other_methods_with_the_same_name() -> None:
    path = CASES / "seed_solution.py"
    source, module = _load(path)
    plan = [s.to_plain() for s in collect_statements(source, SA, "forward")]
    model = module.MultiHeadSelfAttention(7, 12, 3)
    filename = model.forward.__code__.co_filename
    with Trace(filename, "forward", plan) as tracer:
        model(torch.randn(2, 5, 7))
    assert tracer.records == {}
    assert tracer.intact


def test_merge_records_concatenates_executions() -> None:
    assert merge_records({"0": [[[1]]]}, {"0": [[[2]]], "1": [[None]]}) == {
        "0": [[[1]], [[2]]], "1": [[None]]}


def _interpreters() -> list[pytest.param]:
    found = [pytest.param(Path(sys.executable), id="current")]
    for version in ("3.11.7", "3.12.1", "3.13.0"):
        path = Path(f"/root/.pyenv/versions/{version}/bin/python")
        found.append(pytest.param(path, id=version, marks=pytest.mark.skipif(
            not path.exists(), reason=f"Python {version} is not installed "
                                      f"under pyenv on this machine")))
    return found


PROBE_EXPECTED = {
    "TamperFrame": False, "TamperNone": False,
    "intact": True, "trace_after": True,
    "not_traceable": ["c = x.view(4)"],
    "records": {
        "y = (x\n     + x\n     + x)": [[[2, 3]]],
        "ys = [y for _ in range(n)]": [[None]],
        "total = x.view(1)": [[[1]]],
        # A for target is watched (issue 24): read after each binding and
        # once more when the loop ends (no tensor: an int).
        "for h in range(n):": [[None], [None], [None], [None]],
        "total = total.view(h + 1)": [[[1]], [[2]], [[3]]],
        "total += x": [[[3]]],
        "total.fill_(0)": [[[3]]],
        "total[0] = 1": [[[3]]],
        "a = x.view(2)": [[[2]]],
        "b = x.view(3)": [[[3]]],
        "d = x.view(5)": [[[5]]],
        "e = [x.view(i) for i in range(1, 3)][1]": [[[2]]],
        "return total, x.view(7), n": [[[3], [7], None]],
    },
}


@pytest.mark.parametrize("python", _interpreters())
def test_tracer_line_events_agree_across_python_versions(
        python: Path) -> None:
    """The probe needs no torch, so it runs under every interpreter.

    It pins the behaviours that differ between 3.11 and 3.12+: the extra
    line events of a multi-line statement, inlined comprehensions (PEP
    709), a return inside ``with``, a statement that raised, statements
    sharing a line, and the three ways of switching tracing off.
    """
    completed = subprocess.run(
        [str(python), str(CASES / "tracer_probe.py"), str(KIT)],
        capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(completed.stdout) == PROBE_EXPECTED


# ---------------------------------------------------------------------------
# Verification on recorded data
# ---------------------------------------------------------------------------

def _loop_statement() -> Statement:
    path = CASES / "loops.py"
    statements = collect_statements(_load(path)[0], MHSA, "forward")
    return statement_at(statements, line_of(path, "out = probs @ v"))


def test_one_wrong_execution_among_many_is_a_finding() -> None:
    statement = _loop_statement()  # claims [bs, seq, head_size]
    good, bad = [[2, 5, 11]], [[2, 5, 12]]
    runs = [(SET_1, {str(statement.id): [good, bad, good]})]
    (finding,) = verify([statement], runs, DIMS)
    assert (finding.kind, finding.line) == ("wrong_shape",
                                            statement.first_line)
    assert (finding.real[0].wrong, finding.real[0].executions) == (1, 3)
    assert verify([statement], [(SET_1, {str(statement.id): [good]})],
                  DIMS) == []


def test_statement_without_tensors_needs_no_comment() -> None:
    statement = _loop_statement()
    runs = [(SET_1, {str(statement.id): [[None], [None]]})]
    assert verify([statement], runs, DIMS) == []


@pytest.mark.parametrize("records", [
    [], {"0": "junk"}, {"0": ["junk"]}, {"0": [[["a"]]]}, {"0": [[[-1]]]},
    {"0": [[[True]]]},
])
def test_malformed_records_are_rejected(records: object) -> None:
    statement = _loop_statement()
    bad = ({str(statement.id): records["0"]} if isinstance(records, dict)
           else records)
    with pytest.raises(ShapeRecordError):
        verify([statement], [(SET_1, bad)], DIMS)


# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------

def test_report_lists_statement_claim_and_real_shapes() -> None:
    path = CASES / "mistakes.py"
    traced = trace(path, MHSA)
    report = format_findings(traced.findings(), traced.source)
    line = line_of(path, "v = (self.v(x)")
    assert report.startswith(
        "Shape comments: 4 problems.\n"
        "Your forward ran under these sizes:\n"
        "  size set 1: batch_size=2, seq_len=5, input_size=7, num_heads=3, "
        "head_size=11,\n              hidden=33\n")
    assert (f"line {line}: wrong shape\n"
            f"    v = (self.v(x).view(bs, seq, self.num_heads, "
            f"self.head_size)\n"
            f"         .transpose(1, 2).reshape(bs * self.num_heads, seq, "
            f"-1))\n"
            f"  the comment claims [bs, num_heads, seq, head_size], the real "
            f"shape differs\n"
            f"  size set 1: claimed [2, 3, 5, 11], real [6, 5, 11]\n"
            f"  size set 2: claimed [3, 2, 7, 13], real [6, 7, 13]") in report
    assert ("  size set 1: claimed [6, 5, 11], real [6, 5, 11] (right under "
            "these sizes)\n  size set 2: claimed [9, 7, 13], real "
            "[6, 7, 13]") in report
    assert "hint: known names (aliases): batch_size (bs, batch, b)" in report
    assert format_findings([], traced.source) == (
        "Shape comments: no problems found.")


def test_notebook_findings_point_at_cell_and_line(tmp_path: Path) -> None:
    cell = (CASES / "mistakes.py").read_text(encoding="utf-8")
    start = cell.index("class SelfAttention")
    end = cell.index("class MultiHeadSelfAttention")
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "# Homework"},
        {"cell_type": "code", "metadata": {}, "outputs": [],
         "execution_count": None,
         "source": "import torch\nimport torch.nn as nn"},
        {"cell_type": "markdown", "metadata": {}, "source": "Task 1"},
        {"cell_type": "code", "metadata": {}, "outputs": [],
         "execution_count": None, "source": cell[start:end].rstrip()},
        {"cell_type": "code", "metadata": {}, "outputs": [],
         "execution_count": None, "source": "model = SelfAttention(7, 9)"},
    ]}
    path = tmp_path / "homework.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    traced = trace(path, SA)
    assert [kind for kind, _ in traced.kinds()] == [
        "missing", "no_shape", "unknown_name", "wrong_shape", "no_shape"]
    report = format_findings(traced.findings(), traced.source)
    cell_lines = cell[start:end].splitlines()
    q_line = next(n for n, text in enumerate(cell_lines, 1)
                  if "q = self.q(x)" in text)
    assert f"cell 4, line {q_line}: missing shape comment" in report


# ---------------------------------------------------------------------------
# Messages that say the fix
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("comment, fix", [
    ("(bs, seq, hidden)", "use square brackets: [bs, seq, hidden]"),
    ("q: (batch_size, seq_len,\nhidden)",
     "use square brackets: [batch_size, seq_len, hidden]"),
    ("[bs * self.num_heads, seq, self.head_size]",
     "write head_size, num_heads, not self.head_size, self.num_heads: "
     "[bs * num_heads, seq, head_size]"),
    ("(bs, self.num_heads, seq)",
     "use square brackets: [bs, num_heads, seq]"),
    ("the scores", None),
    ("call f(x, y) here", None),
])
def test_shape_fix_says_what_to_write(comment: str, fix: str | None) -> None:
    from grader.shapes import shape_fix

    assert shape_fix(comment) == fix


def _one_statement(text: str) -> Statement:
    source = SourceFile(text=text, path=Path("fix.py"))
    (statement,) = collect_statements(source, SA, "forward")
    return statement


def test_round_brackets_and_self_get_their_fix_in_the_report() -> None:
    head = ("class SelfAttention:\n    def forward(self, x):\n"
            "        # YOUR CODE STARTS HERE\n")
    for comment, words in (
            ("(bs, seq, input_size)", "the comment's shape is not "
             "understood: use square brackets: [bs, seq, input_size]"),
            ("[bs, seq, self.hidden]", "write hidden, not self.hidden: "
             "[bs, seq, hidden]")):
        statement = _one_statement(
            f"{head}        return x + 0  # {comment}\n")
        runs = [(SET_1, {"0": [[[2, 5, 7]]]})]
        (finding,) = verify([statement], runs, DIMS)
        assert finding.kind == "no_shape"
        assert words in finding.message


def test_partly_wrong_shapes_are_told_in_plain_words() -> None:
    statement = _loop_statement()
    runs = [(SET_1, {str(statement.id): [[[2, 5, 11]], [[2, 5, 12]]]})]
    (finding,) = verify([statement], runs, DIMS)
    assert finding.message.endswith(
        "(wrong in 1 of the 2 times this line ran, right in the others)")
    assert "execution" not in format_findings([finding], _load(
        CASES / "loops.py")[0])


def test_the_shapes_command_names_the_line_that_does_not_parse(
        tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\n\nclass SelfAttention:\n"
                   "    def forward(self, x)\n        return x\n")
    completed = subprocess.run(
        [sys.executable, "-m", "grader", "shapes", str(bad),
         "--assignment", "multi_head_attention"], cwd=KIT,
        capture_output=True, text=True, timeout=120)
    assert completed.returncode == 1
    assert completed.stdout == ""
    assert completed.stderr == (
        f"python -m grader shapes: {bad}: SyntaxError at line 5: expected "
        f"':'; fix it first, then check the shape comments again\n")


# ---------------------------------------------------------------------------
# Tensor statements decided statically (grader.shapes.tensor_facts)
# ---------------------------------------------------------------------------

FACTS_HEAD = '''import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import softmax


class SelfAttention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.q = nn.Linear(d, h)
        self.drop = nn.Dropout(0.1)
        self.scale = h ** 0.5
        self.helper = None

    def forward(self, x, flag=False):
'''
FACTS = {
    # statement (in forward, after the ones above it): tensor?
    "q = self.q(x)": True,
    "k = self.q(x).view(2, -1)": True,
    "s = q @ k.T / self.scale": True,
    "p = softmax(s, dim=-1)": True,
    "p2 = F.softmax(s, -1)": True,
    "m = torch.ones(3, 3).triu(1)": True,
    "s = s.masked_fill(m == 0, float('-inf'))": True,
    "s.masked_fill_(m, 0.0)": True,
    "a, b = q.chunk(2, dim=-1)": True,
    "parts = q.chunk(2, dim=-1)": False,
    "c, d = q, 3": True,
    "x = x.unsqueeze(0)": True,
    "n = q.shape[0]": False,
    "size = q.size(-1)": False,
    "val = q.sum().item()": False,
    "h = self.helper(q)": False,
    "e = self.drop(p)": True,
    "w = flag if flag else q": False,
    "y = [t * 2 for t in (q, k)]": False,
    "u = q.max(dim=-1)": False,
    "return q @ k.transpose(0, 1), n": True,
}


def test_tensor_statements_are_decided_conservatively() -> None:
    body = "".join(f"        {line}\n" for line in FACTS)
    source = SourceFile(text=FACTS_HEAD + body, path=Path("facts.py"))
    statements = collect_statements(source, SA, "forward")
    assert {s.text: s.tensor for s in statements} == FACTS


def test_names_seen_holding_tensors_complete_the_static_verdict() -> None:
    text = ("class SelfAttention:\n    def forward(self, x):\n"
            "        # YOUR CODE STARTS HERE\n"
            "        t = f(x)  # [bs, seq, input_size]\n"
            "        if x.numel() < 0:\n"
            "            t = t.float()\n"
            "        return t  # [bs, seq, input_size]\n")
    source = SourceFile(text=text, path=Path("seen.py"))
    statements = collect_statements(source, SA, "forward")
    never = statement_at(statements, 6)
    assert not never.tensor and never.operands == ("t",)
    runs = [(SET_1, {"0": [[[2, 5, 7]]], "2": [[[2, 5, 7]]]})]
    (finding,) = verify(statements, runs, DIMS)
    assert (finding.kind, finding.line, finding.penalised) == (
        "missing", 6, True)
    # Had t held something else, the statement would be a note only.
    runs = [(SET_1, {"0": [[None]], "2": [[None]]})]
    (finding,) = verify(statements, runs, DIMS)
    assert (finding.kind, finding.penalised) == ("never_ran", False)


def test_a_method_whose_last_line_holds_no_code_is_traced() -> None:
    """The last statement ends in a lone ")": its method is still
    traced, so a wrong comment above it is found."""
    text = ("import torch\n\n\nclass Probe:\n    def forward(self, x):\n"
            "        y = x + 1  # [bs, 1]\n"
            "        return torch.cat(\n            [y]\n        )\n")
    source = SourceFile(text=text, path=Path("probe_lone.py"))
    statements = collect_statements(source, "Probe", "forward")
    namespace: dict = {}
    exec(compile(source.text, "probe_lone.py", "exec"), namespace)
    plan = [s.to_plain() for s in statements]
    with Trace("probe_lone.py", "forward", plan) as tracer:
        namespace["Probe"]().forward(torch.zeros(2, 3))
    assert tracer.records == {"0": [[[2, 3]]], "1": [[[2, 3]]]}


@pytest.mark.parametrize("comment", [
    "[" + ", ".join(["bs"] * 40_000) + "]",
    "a" * 100_000 + " b[bs]",
    "[" + "(" * 50_000 + "bs" + ")" * 50_000 + "]",
    "[" + " * ".join(["bs"] * 40_000) + "]",
    "[" + "9" * 5_000 + "]",
    "[bs] " * 40_000,
    "(" + ", ".join(["bs"] * 40_000) + ")",
    "[" + ", ".join(["self.bs"] * 30_000) + "]",
], ids=["long list", "long word", "deep parentheses", "long product",
        "huge number", "many brackets", "round brackets", "self"])
def test_hostile_comments_are_read_in_bounded_time_and_space(
        comment: str) -> None:
    """Whatever a comment holds, reading and reporting it is linear, never
    recursive, and the report stays short. Time is a bound, not a
    benchmark: 5 s of this process's CPU time (not wall time, which other
    jobs on a busy machine stretch), or 50 times the same work on a plain
    comment measured in the same run."""
    import time

    def judge(comment: str) -> tuple[list, str, float]:
        text = ("class SelfAttention:\n    def forward(self, x):\n"
                "        # YOUR CODE STARTS HERE\n"
                f"        y = x + 1  # {comment}\n"
                "        return y  # [bs, seq, input_size]\n")
        source = SourceFile(text=text, path=Path("hostile_comment.py"))
        started = time.process_time()
        statements = collect_statements(source, SA, "forward")
        runs = [(SET_1, {"0": [[[2, 5, 7]]], "1": [[[2, 5, 7]]]})]
        findings = verify(statements, runs, DIMS)
        report = format_findings(findings, source)
        return findings, report, time.process_time() - started

    *_, plain = judge("[bs, seq, input_size]")
    findings, report, seconds = judge(comment)
    assert seconds < max(5.0, 50 * plain), (seconds, plain)
    assert [f.line for f in findings] == [4]
    assert len(report) < 3000
