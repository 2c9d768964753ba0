"""The grader on a corpus of real submissions, item by item.

Every file in ``submissions/`` is a complete student module: correct
variants, each known mistake of docs/rubric.md's diagnosis table, forbidden
APIs and broken code. The table below gives, for each of them, the score of all
ten rubric items, the diagnosis ids of the items it fails and the total,
as an honest reading of ``docs/rubric.md`` gives them (not as the
grader happens to print them). The other tests check what the rubric says
about isolation of items, clamping, the bonus, messages, hidden cases,
seeds, ``--public-only`` and the grader's own reference.

Submissions are graded in-process with the ``grade_path`` fixture (about a
second each); every (file, options) pair is graded once per session.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
import torch

from grader.assignments.multi_head_attention import reference
from grader.engine import DEFAULT_SEED as DEFAULT_GRADER_SEED
from grader.engine import SEED_ENV, resolve_seed
from grader.output.report import Report

KIT = Path(__file__).resolve().parents[2]
SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
SOLUTION = KIT / "solutions" / "modeling_attention.py"

ITEMS = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes")
DIAGNOSES = {"no_scaling", "wrong_scale", "softmax_dim",
             "reshape_not_transpose", "mask_diagonal", "mask_zero_fill",
             "mask_ignored", "no_mix", "probs_shape", "dropout_misplaced",
             "forbidden_api", "heads_not_split", "head_order",
             "merge_wrong_axes", "mask_inverted", "hardcoded_size",
             "mask_from_scores"}

# Scores of one task's five items, in ITEMS order.
# task 1: init, forward, pep8, shapes, bonus
T1_FULL = (1, 3, 0, 0, 1)          # correct, 3 statements: 4 + 1 bonus
T1_NO_BONUS = (1, 3, 0, 0, 0)      # correct, more than 3 statements
T1_INIT_ONLY = (1, 0, 0, 0, 0)     # builds, forward wrong or broken
T1_ZERO = (0, 0, 0, 0, 0)
# task 2: scores, causal, output, pep8, shapes
T2_FULL = (3, 1, 2, 0, 0)
T2_ZERO = (0, 0, 0, 0, 0)


@dataclass(frozen=True)
class Expected:
    """What a submission earns, per docs/rubric.md."""

    task1: tuple[float, ...]
    task2: tuple[float, ...]
    total: float
    diagnoses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    why: str = ""

    @property
    def scores(self) -> dict[str, float]:
        """Item id -> expected score."""
        return dict(zip(ITEMS, self.task1 + self.task2))


def _forbidden(*items: str) -> dict[str, tuple[str, ...]]:
    return {item: ("forbidden_api",) for item in items}


CORPUS: dict[str, Expected] = {
    # ---------------------------------------------------------- correct
    "correct_matmul": Expected(T1_FULL, T2_FULL, 11),
    "correct_bmm": Expected(T1_NO_BONUS, T2_FULL, 10),
    "correct_einsum": Expected(T1_NO_BONUS, T2_FULL, 10),
    "correct_flat_heads": Expected(T1_FULL, T2_FULL, 11),
    "correct_head_loop": Expected(T1_NO_BONUS, T2_FULL, 10),
    "correct_inplace_mask": Expected(T1_FULL, T2_FULL, 11),
    "correct_large_negative_fill": Expected(
        T1_FULL, T2_FULL, 11,
        why="exp(-1e9) is exactly 0 in float32: the future gets 0"),
    "correct_scale_query": Expected(T1_FULL, T2_FULL, 11),
    "correct_prints": Expected(
        T1_NO_BONUS, T2_FULL, 10,
        why="the print call is a 4th statement of forward: no bonus"),
    "correct_seed_notebook": Expected(
        (1, 3, -1, 0, 0), (3, 1, 2, -1, 0), 8,
        why="the seed's long lines and one-space inline comments cost "
            "both PEP-8 points; its shape comments are all right; its "
            "forward has 4 statements"),
    "correct_docstring_mentions_sdpa": Expected(
        T1_FULL, T2_FULL, 11,
        why="naming a forbidden API in a docstring is not using it"),
    "broken_returns_float64": Expected(
        T1_FULL, T2_FULL, 11,
        why="a float64 tensor of the right shape and values matches: "
            "docs/rubric.md compares in float32"),
    # ---------------------------------------------------------- mistakes
    "mistake_no_scaling": Expected(
        (1, 2, 0, 0, 0), (0, 1, 2, 0, 0), 6,
        {"task1.forward": ("no_scaling",), "task2.scores": ("no_scaling",)},
        why="2 of 3 for the unscaled output; 3 statements but not fully "
            "correct: no bonus; causal and output are isolated"),
    "mistake_wrong_scale_hidden": Expected(
        T1_FULL, (0, 1, 2, 0, 0), 8, {"task2.scores": ("wrong_scale",)}),
    "mistake_task1_scale_hidden": Expected(
        T1_INIT_ONLY, T2_FULL, 7, {"task1.forward": ("wrong_scale",)}),
    "mistake_scale_after_softmax": Expected(
        T1_INIT_ONLY, T2_FULL, 7,
        why="dividing the probabilities is not a scale of the scores: it "
            "matches neither reference nor any known mistake"),
    "mistake_softmax_dim": Expected(
        T1_INIT_ONLY, (0, 0, 1, 0, 0), 2,
        {"task1.forward": ("softmax_dim",), "task2.scores": ("softmax_dim",),
         "task2.causal": ("softmax_dim",), "task2.output": ("softmax_dim",)},
        why="causal rows do not sum to 1; the value point is judged on "
            "uniform probabilities (a softmax of zeros over any dim); the "
            "eval-mode probabilities are no distribution: no dropout point"),
    "mistake_reshape_not_transpose": Expected(
        T1_FULL, (0, 1, 1, 0, 0), 7,
        {"task2.scores": ("reshape_not_transpose",),
         "task2.output": ("reshape_not_transpose",)}),
    "mistake_merge_not_transpose": Expected(
        T1_FULL, (3, 1, 1, 0, 0), 10,
        {"task2.output": ("reshape_not_transpose", "merge_wrong_axes")},
        why="a reshape across the head axis is both mistakes: heads "
            "merged without the transpose, so the right per-head values "
            "land in the wrong places"),
    "mistake_mask_diagonal": Expected(
        T1_FULL, (3, 0, 2, 0, 0), 10, {"task2.causal": ("mask_diagonal",)}),
    "mistake_mask_diagonal_finite": Expected(
        T1_FULL, (3, 0, 2, 0, 0), 10, {"task2.causal": ("mask_diagonal",)}),
    "mistake_mask_zero_fill": Expected(
        T1_FULL, (3, 0, 2, 0, 0), 10, {"task2.causal": ("mask_zero_fill",)}),
    "mistake_mask_ignored": Expected(
        T1_FULL, (3, 0, 2, 0, 0), 10, {"task2.causal": ("mask_ignored",)}),
    "mistake_no_mix": Expected(
        T1_FULL, (3, 1, 1, 0, 0), 10, {"task2.output": ("no_mix",)}),
    "mistake_probs_shape": Expected(
        T1_FULL, (0, 0, 2, 0, 0), 7,
        {"task2.scores": ("probs_shape",), "task2.causal": ("probs_shape",)},
        why="task2.scores and task2.causal need [bs * num_heads, seq, seq]; "
            "the value point is judged on att alone, the dropout point on "
            "the probabilities whatever their layout (docs/rubric.md)"),
    "mistake_dropout_on_output": Expected(
        T1_FULL, (3, 1, 1, 0, 0), 10,
        {"task2.output": ("dropout_misplaced",)}),
    "mistake_dropout_before_softmax": Expected(
        T1_FULL, (3, 1, 1, 0, 0), 10,
        {"task2.output": ("dropout_misplaced",)}),
    "mistake_probs_before_dropout": Expected(
        T1_FULL, (3, 1, 1, 0, 0), 10,
        {"task2.output": ("dropout_misplaced",)}),
    "mistake_no_dropout": Expected(T1_FULL, (3, 1, 1, 0, 0), 10),
    "mistake_hardcoded_sizes": Expected(
        (0, 3, 0, -1, 1), T2_FULL, 9, {"task1.init": ("hardcoded_size",)},
        why="q, k, v = nn.Linear(7, 9) are not nn.Linear(input_size, "
            "hidden): no init point. With the weights loaded the forward "
            "is right (3 and the bonus), but run with its own layers under "
            "the shape size sets its tensors are [bs, seq, 9], not the "
            "[bs, seq, hidden] its comments claim"),
    "mistake_dropout_always_on": Expected(
        T1_FULL, (3, 1, 1, 0, 0), 10,
        why="the scores/output models have dropout 0; only the eval-mode "
            "check of the dropout point fails"),
    # ---------------------------------------------------------- forbidden
    "forbidden_sdpa": Expected(
        T1_ZERO, T2_FULL, 6, _forbidden("task1.init", "task1.forward")),
    "forbidden_multiheadattention": Expected(
        T1_FULL, T2_ZERO, 5,
        _forbidden("task2.scores", "task2.causal", "task2.output")),
    "forbidden_sdpa_getattr": Expected(
        T1_FULL, T2_ZERO, 5,
        _forbidden("task2.scores", "task2.causal", "task2.output"),
        why="caught at run time by the sandbox's tripwire"),
    "forbidden_import_solution": Expected(
        T1_ZERO, T2_ZERO, 0,
        _forbidden("task1.init", "task1.forward", "task2.scores",
                   "task2.causal", "task2.output")),
    # ---------------------------------------------------------- broken
    "broken_syntax_error": Expected(T1_ZERO, T2_ZERO, 0),
    "broken_import_error": Expected(T1_ZERO, T2_ZERO, 0),
    "broken_forward_raises": Expected(
        T1_INIT_ONLY, T2_FULL, 7,
        why="statements that never ran cannot be shown wrong: no shapes "
            "penalty"),
    "broken_nan": Expected(T1_INIT_ONLY, T2_FULL, 7),
    "broken_returns_list": Expected(T1_INIT_ONLY, T2_FULL, 7),
    "broken_returns_int": Expected(T1_INIT_ONLY, T2_FULL, 7),
    "broken_wrong_shape": Expected(T1_INIT_ONLY, T2_FULL, 7),
    "partial_task2_stub": Expected(T1_FULL, T2_ZERO, 5),
    "partial_task1_only": Expected(T1_FULL, T2_ZERO, 5),
    "hardcoded_public_values": Expected(T1_INIT_ONLY, T2_FULL, 7),
    "clamp_penalties": Expected(
        (1, 3, -1, -1, 1), (0, 0, 0, -1, -1), 3,
        {"task2.output": ("no_mix",)},
        why="task 1: 1 + 3 - 1 - 1 = 2, plus the bonus; task 2: "
            "0 - 1 - 1 = -2, clamped to 0"),
}


# --------------------------------------------------------------------------
# Grading, once per (file, options)


Key = tuple[str, bool, int]       # (name or path, public_only, seed)
DEFAULT_SEED = 7                   # the grade_path fixture's default


def _path(name: str) -> Path:
    path = Path(name)
    return path if path.suffix else SUBMISSIONS / f"{name}.py"


def uses(*keys: Key) -> Callable[[Callable], Callable]:
    """Declare the gradings a test reads, so that they are prefetched."""
    def mark(function: Callable) -> Callable:
        function.gradings = keys
        return function
    return mark


def _needed(items: list[pytest.Item]) -> list[Key]:
    """The gradings the collected tests of this module will ask for."""
    keys: dict[Key, None] = {}
    for item in items:
        if getattr(item, "module", None) is not sys.modules[__name__]:
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("name") in CORPUS:
            keys[(params["name"], False, DEFAULT_SEED)] = None
        for key in getattr(item.function, "gradings", ()):
            keys[key] = None
    return list(keys)


def _prefetch(grade_path: Callable, keys: list[Key]) -> dict[Key, object]:
    """Grade ``keys``: half here, half in a forked copy of this process.

    Grading is CPU-bound and mostly single-threaded, so two processes
    halve the wall time on a machine with two cores. The child grades
    with the very same in-process grade_path and pickles its reports (or
    the error) back over a pipe; it ends with os._exit.
    """
    theirs, mine = keys[1::2], keys[0::2]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            found: dict[Key, object] = {}
            for key in theirs:
                try:
                    found[key] = grade_path(_path(key[0]),
                                            public_only=key[1], seed=key[2])
                except Exception as exc:  # reported by the test
                    found[key] = f"{type(exc).__name__}: {exc}"
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump(found, pipe)
        finally:
            os._exit(0)
    os.close(write_fd)
    results: dict[Key, object] = {}
    try:
        for key in mine:
            results[key] = grade_path(_path(key[0]), public_only=key[1],
                                      seed=key[2])
    finally:
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
    if data:
        results.update(pickle.loads(data))
    return results


@pytest.fixture(scope="session")
def graded(grade_path, request: pytest.FixtureRequest
           ) -> Callable[..., Report]:
    """Grade a corpus file (by name) or a path; cached for the session.

    The gradings this module's collected tests need are done up front, in
    two processes; any other grading is done when first asked for.
    """
    cache = _prefetch(grade_path, _needed(request.session.items))

    def run(name: str | Path, *, public_only: bool = False,
            seed: int = DEFAULT_SEED) -> Report:
        key = (str(name), public_only, seed)
        if key not in cache:
            cache[key] = grade_path(_path(str(name)),
                                    public_only=public_only, seed=seed)
        report = cache[key]
        if isinstance(report, str):
            pytest.fail(f"grading {name} raised {report}")
        return report
    return run


def line_of(name: str, text: str) -> int:
    """The 1-based line of a corpus file that contains ``text``."""
    lines = (SUBMISSIONS / f"{name}.py").read_text().splitlines()
    found = [n for n, line in enumerate(lines, 1) if text in line]
    assert len(found) == 1, f"{text!r} is on lines {found} of {name}"
    return found[0]


def rubric_total(expected: Expected) -> float:
    """docs/rubric.md's total: each task clamped to [0, max], plus the
    bonus."""
    t1, t2 = expected.task1, expected.task2
    return (min(max(sum(t1[:4]), 0), 4) + t1[4]
            + min(max(sum(t2), 0), 6))


# --------------------------------------------------------------------------
# The table


def test_corpus_covers_every_submission_file() -> None:
    """Every file in submissions/ has a row, and every row a file."""
    files = {p.stem for p in SUBMISSIONS.glob("*.py")}
    assert files == set(CORPUS)


def test_table_totals_follow_the_rubric() -> None:
    """Each row's total is its items clamped per task, plus the bonus."""
    for name, expected in CORPUS.items():
        assert rubric_total(expected) == expected.total, name
        for item, ids in expected.diagnoses.items():
            assert set(ids) <= DIAGNOSES, (name, item)


def _rows() -> list:
    return sorted(CORPUS)


@pytest.mark.parametrize("name", _rows())
def test_submission_scores_and_diagnoses(graded, name: str) -> None:
    """All ten items, their diagnoses and the total, as docs/rubric.md says."""
    expected = CORPUS[name]
    report = graded(name)
    assert [item.id for item in report.items] == list(ITEMS)
    assert report.scores() == pytest.approx(expected.scores), (
        "\n".join([f"expected because: {expected.why or 'see the file'}"]
                  + [f"{i.id}: {i.score:g} {i.diagnosis} {i.message[:300]}"
                     for i in report.items]))
    diagnoses = {item.id: sorted(item.diagnosis) for item in report.items
                 if item.diagnosis}
    assert diagnoses == {k: sorted(v) for k, v in
                         expected.diagnoses.items()}
    assert report.score == expected.total
    assert report.max_score == 10


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_passed_flags_agree_with_scores(graded, name: str) -> None:
    """A correctness item passes exactly when it earned its points."""
    for item in graded(name).items:
        if item.max_score > 0:
            assert item.passed == (item.score == item.max_score), item.id
        elif item.id.endswith((".pep8", ".shapes")):
            # An item the grader could not check is no pass (issue 30).
            assert item.passed == (item.score == 0 and item.checked), \
                item.id


# --------------------------------------------------------------------------
# Isolation of items (docs/rubric.md's rubric table)


def test_unscaled_output_earns_two_of_three(graded) -> None:
    """task1.forward: matching the unscaled reference earns 2."""
    item = graded("mistake_no_scaling").item("task1.forward")
    assert item.score == 2
    assert not item.passed
    assert "with the scaling removed" in item.message
    assert "not scaled" in item.message


@pytest.mark.parametrize("name", ["mistake_no_scaling",
                                  "mistake_wrong_scale_hidden",
                                  "mistake_reshape_not_transpose"])
def test_causal_is_judged_on_structure_alone(graded, name: str) -> None:
    """Wrong scores with a right mask still earn task2.causal."""
    report = graded(name)
    assert report.item("task2.scores").score == 0
    assert report.item("task2.causal").score == 1


@pytest.mark.parametrize("name", ["mistake_no_scaling",
                                  "mistake_wrong_scale_hidden",
                                  "mistake_softmax_dim",
                                  "mistake_probs_shape"])
def test_value_point_survives_wrong_scores(graded, name: str) -> None:
    """When task2.scores fails, att is judged with zero q/k weights, so a
    right value-and-mix step keeps its point."""
    report = graded(name)
    assert report.item("task2.scores").score == 0
    item = report.item("task2.output")
    assert item.score >= 1
    if item.score < 2:
        assert "(earned: values; missed: dropout)" in item.message


def test_value_point_on_zero_qk_still_catches_a_wrong_merge(graded) -> None:
    """A wrong value step fails on the zero-q/k cases and says so."""
    item = graded("mistake_reshape_not_transpose").item("task2.output")
    assert item.score == 1
    assert "zero query and key weights" in item.message
    assert "earned: dropout" in item.message


def test_a_task_with_penalties_only_is_clamped_at_zero(graded) -> None:
    """0 correctness points and two penalties: the task scores 0."""
    report = graded("clamp_penalties")
    task2 = next(t for t in report.tasks if t.id == "task2")
    assert task2.raw == -2
    assert task2.score == 0
    assert report.score == 3
    assert "clamped at 0" in report.as_text()
    assert report.as_json()["tasks"][1]["score"] == 0


def test_bonus_needs_three_statements_and_a_full_forward(graded) -> None:
    """+1 for 3 statements and 3 points; 0 if wrong; 0 for more."""
    full = graded("correct_matmul").item("task1.bonus")
    assert (full.score, full.passed) == (1, True)
    assert "3 statement(s)" in full.message
    wrong = graded("mistake_no_scaling").item("task1.bonus")
    assert wrong.score == 0
    assert "task1.forward did not earn full points" in wrong.message
    long = graded("correct_einsum").item("task1.bonus")
    assert long.score == 0
    assert "4 statements" in long.message
    task1 = next(t for t in graded("correct_matmul").tasks
                 if t.id == "task1")
    assert (task1.score, task1.bonus) == (5, 1)


def test_missing_class_is_named_in_every_item(graded) -> None:
    """A class that is not there: each of its items says so."""
    report = graded("partial_task1_only")
    for item_id in ("task2.scores", "task2.pep8", "task2.shapes"):
        message = report.item(item_id).message
        assert "MultiHeadSelfAttention is not defined" in message, message


def test_stub_task_is_reported_as_not_started(graded) -> None:
    """An untouched task: 0 points, shapes not checked, a clear note of
    the task (no error: the report's header does not list it)."""
    report = graded("partial_task2_stub")
    assert "not checked" in report.item("task2.shapes").message
    task2 = next(t for t in report.tasks if t.id == "task2")
    assert any("untouched stub" in n for n in task2.notes)
    assert not any("untouched stub" in e for e in report.errors)
    assert "\nError:" not in report.as_text()
    (entry,) = [t for t in report.as_json()["tasks"] if t["id"] == "task2"]
    assert entry["notes"] == task2.notes


# --------------------------------------------------------------------------
# Messages a student can act on


def test_probs_shape_message_names_both_shapes(graded) -> None:
    """The message shows the returned and the expected shape."""
    message = graded("mistake_probs_shape").item("task2.scores").message
    shapes = re.findall(r"\[(\d+), (\d+), (\d+)(?:, (\d+))?\]", message)
    assert len(shapes) >= 2
    got = next(s for s in shapes if s[3])
    want = next(s for s in shapes if not s[3])
    bs, heads, seq = int(got[0]), int(got[1]), int(got[2])
    assert (int(want[0]), int(want[1])) == (bs * heads, seq)
    assert "[batch_size, num_heads, seq_len, seq_len]" in message
    assert "[batch_size * num_heads, seq_len, seq_len]" in message


def test_exception_message_names_the_line(graded) -> None:
    """A forward that raises: the type, the line and its code."""
    message = graded("broken_forward_raises").item("task1.forward").message
    line = line_of("broken_forward_raises", "q @ k / self.scale")
    assert "RuntimeError" in message
    assert f"line {line}" in message
    assert "q @ k / self.scale" in message


def test_syntax_error_is_graded_with_its_line(graded) -> None:
    """A SyntaxError: every correctness item says where it is."""
    report = graded("broken_syntax_error")
    line = line_of("broken_syntax_error", "scores = (q @ k")
    for item_id in ("task1.init", "task1.forward", "task2.scores",
                    "task2.causal", "task2.output"):
        message = report.item(item_id).message
        assert "SyntaxError" in message and f"line {line}" in message
    assert "not checked" in report.item("task1.pep8").message
    assert "not checked" in report.item("task2.shapes").message


def test_import_error_names_the_line(graded) -> None:
    """A module that raises at import: every item says why."""
    report = graded("broken_import_error")
    line = line_of("broken_import_error", "attention_softmax")
    message = report.item("task2.scores").message
    assert "ImportError" in message and f"line {line}" in message
    assert "could not be loaded" in report.item("task1.init").message


def test_nan_output_says_nan(graded) -> None:
    """A NaN output is called NaN, not a large difference."""
    assert "NaN" in graded("broken_nan").item("task1.forward").message


def test_nan_probabilities_say_nan(graded) -> None:
    """mask_diagonal's NaN row is named in the causal message."""
    message = graded("mistake_mask_diagonal").item("task2.causal").message
    assert "NaN" in message


def test_wrong_shape_message_names_both_shapes(graded) -> None:
    """Returned [3, 5, 5] where [3, 5, 9] = [bs, seq, hidden] is due."""
    message = graded("broken_wrong_shape").item("task1.forward").message
    assert "[3, 5, 5]" in message
    assert "[3, 5, 9] = [batch_size, seq_len, hidden]" in message


def test_wrong_types_are_named(graded) -> None:
    """A list and an int tensor: the message says what came back."""
    listed = graded("broken_returns_list").item("task1.forward").message
    assert "should be a tensor" in listed and "list" in listed
    integer = graded("broken_returns_int").item("task1.forward").message
    assert "floating-point" in integer and "int64" in integer


def test_wrong_scale_names_the_constant(graded) -> None:
    """The recovered scale is named by the size it equals."""
    heads = graded("mistake_wrong_scale_hidden").item("task2.scores")
    assert "sqrt(hidden)" in heads.message
    assert "sqrt(head_size)" in heads.message
    single = graded("mistake_task1_scale_hidden").item("task1.forward")
    assert re.search(r"= hidden\b", single.message)
    assert "sqrt(hidden)" in single.message


def test_forbidden_api_message_names_the_api(graded) -> None:
    """The forbidden call is named, statically or at run time."""
    static = graded("forbidden_sdpa").item("task1.forward").message
    assert "scaled_dot_product_attention" in static
    caught = graded("forbidden_sdpa_getattr").item("task2.scores").message
    assert "scaled_dot_product_attention" in caught


def test_dropout_misplaced_message_points_to_probs(graded) -> None:
    """The dropout message tells where dropout belongs."""
    message = graded("mistake_dropout_on_output").item(
        "task2.output").message
    assert "self.dropout to probs" in message


def test_text_report_explains_each_diagnosis(graded) -> None:
    """The text report spells out what a diagnosis id means."""
    text = graded("mistake_mask_ignored").as_text()
    assert "[FAIL] task2.causal" in text
    assert "diagnosis mask_ignored: causal=True changes nothing" in text
    assert "Total: 9 / 10 + 1 bonus" in text


def test_printed_output_is_captured_in_the_report(graded) -> None:
    """What a submission prints is kept per task, never lost."""
    report = graded("correct_prints")
    outputs = {t.id: t.output for t in report.tasks}
    assert "loading my attention module" in outputs["task1"]
    assert "SelfAttention.forward input" in outputs["task1"]
    assert "MultiHeadSelfAttention probs" in outputs["task2"]
    assert "Output of your code while grading task1" in report.as_text()


# --------------------------------------------------------------------------
# Hidden cases, seeds, --public-only


def test_hidden_cases_defeat_hard_coded_public_values(graded) -> None:
    """Returning the stored output for the public x earns nothing."""
    item = graded("hardcoded_public_values").item("task1.forward")
    assert item.score == 0
    assert "hidden case" in item.message


@uses(("correct_matmul", True, DEFAULT_SEED),
      ("hardcoded_public_values", True, DEFAULT_SEED))
def test_public_only_grades_the_public_values_alone(graded) -> None:
    """--public-only: a correct submission keeps full marks, and only
    the public values are checked (the hard-coded one passes them)."""
    report = graded("correct_matmul", public_only=True)
    assert report.public_only
    assert report.score == 11
    assert "public" in report.as_text()
    hard = graded("hardcoded_public_values", public_only=True)
    assert hard.item("task1.forward").score == 3


SEEDS = (0, 1, 2, 12345)


@uses(*[("correct_matmul", False, seed) for seed in SEEDS])
@pytest.mark.parametrize("seed", SEEDS)
def test_correct_submission_full_marks_under_any_seed(graded,
                                                      seed: int) -> None:
    """The hidden cases change with the seed; a correct answer doesn't."""
    report = graded("correct_matmul", seed=seed)
    assert report.score == 11, [(i.id, i.score, i.message)
                                for i in report.items]
    assert report.seed_label == str(seed)


def test_secret_seed_comes_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """$GRADER_SEED sets the seed without showing it; --seed wins."""
    monkeypatch.setenv(SEED_ENV, "12345")
    assert resolve_seed(None) == (12345, f"secret (${SEED_ENV})")
    assert resolve_seed(3) == (3, "3")
    monkeypatch.delenv(SEED_ENV)
    assert resolve_seed(None) == (DEFAULT_GRADER_SEED,
                                  str(DEFAULT_GRADER_SEED))


@uses(("hardcoded_public_values", False, 0))
def test_seed_changes_the_hidden_cases(graded) -> None:
    """Two seeds grade on different hidden sizes (visible in messages)."""
    first = graded("hardcoded_public_values", seed=0).item("task1.forward")
    second = graded("hardcoded_public_values").item("task1.forward")
    assert first.score == second.score == 0
    assert first.message != second.message


# --------------------------------------------------------------------------
# A notebook submission


def _notebook(path: Path, demo: bool = False) -> Path:
    """A notebook like the seed's: imports with magics, the two classes
    (from correct_matmul.py), each followed by its test cell; with
    ``demo``, also the seed's causal-masking demonstration cells, which
    assign names (x, att, probs) that the classes use as locals."""
    text = (SUBMISSIONS / "correct_matmul.py").read_text()
    start = text.index("class SelfAttention")
    middle = text.index("class MultiHeadSelfAttention")
    first_class = text[start:middle].rstrip() + "\n"
    second_class = text[middle:]

    def code(source: str) -> dict:
        return {"cell_type": "code", "execution_count": None,
                "metadata": {}, "outputs": [],
                "source": source.splitlines(keepends=True)}

    def markdown(source: str) -> dict:
        return {"cell_type": "markdown", "metadata": {},
                "source": source.splitlines(keepends=True)}

    cells = [
        code("import sys\n\nimport torch\nimport torch.nn as nn\n"
             "import matplotlib.pyplot as plt\n\n"
             "sys.path.append('../')\n%load_ext autoreload\n"
             "%autoreload 2\n\n"
             "from transformer_lm.test_values import "
             "SelfAttentionTestValues, \\\n"
             "    MultiHeadAttentionTestValues\n"),
        markdown("# Coding Task 1. SelfAttention\n"),
        code(first_class),
        code("model = SelfAttention(input_size=7, hidden=9)\n"
             "model.k.weight.data = SelfAttentionTestValues.k_weight\n"
             "output = model(SelfAttentionTestValues.x)\n"
             "assert output.shape == (3, 5, 9)\n"),
        markdown("# Coding Task 2. Multi-head self-attention\n"),
        code(second_class),
        code("model = MultiHeadSelfAttention(7, 9, 3)\n"
             "output = model(MultiHeadAttentionTestValues.x)\n"
             "print('Tests passed!')\n"),
    ]
    if demo:
        cells += [
            code("model = MultiHeadSelfAttention(input_size=11, hidden=15, "
                 "num_heads=3,\n    causal=True)\n"
                 "x = torch.randn(3, 7, 11)\n\n"
                 "att, probs = model(x, return_attention=True)\n"),
            code("plt.imshow(torch.softmax(probs[0], dim=-1).detach()"
                 ".numpy())\nplt.colorbar()\n"),
        ]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4,
                "nbformat_minor": 5}
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return path


def test_notebook_submission_is_graded_from_its_cells(
        graded, tmp_path: Path) -> None:
    """The classes are taken from the code cells; full marks."""
    report = graded(_notebook(tmp_path / "multi_head_attention.ipynb"))
    assert report.score == 11, [(i.id, i.score, i.message)
                                for i in report.items]
    assert report.path.endswith(".ipynb")
    assert {t.source for t in report.tasks} == {report.path}


def test_notebook_with_the_seeds_demo_cells_is_graded(
        graded, tmp_path: Path) -> None:
    """The seed's own demonstration cells do not break grading."""
    report = graded(_notebook(tmp_path / "multi_head_attention.ipynb",
                              demo=True))
    assert report.score == 11, [(i.id, i.score, i.message)
                                for i in report.items]


# --------------------------------------------------------------------------
# The grader's reference against the kit's reference solution


def _solution() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kit_solution", SOLUTION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _weights(model: torch.nn.Module, names: tuple[str, ...]
             ) -> dict[str, torch.Tensor]:
    return {f"{n}.{kind}": getattr(getattr(model, n), kind).detach()
            for n in names for kind in ("weight", "bias")}


@pytest.mark.parametrize("seed", range(6))
def test_grader_reference_agrees_with_solution(seed: int) -> None:
    """reference.py (on torch's SDPA) equals solutions/ in float64."""
    solution = _solution()
    generator = torch.Generator().manual_seed(seed)

    def size(low: int, high: int) -> int:
        return int(torch.randint(low, high, (1,), generator=generator))

    torch.manual_seed(seed)
    bs, seq, inp = size(1, 5), size(1, 10), size(1, 12)
    heads, head_size = size(1, 5), size(1, 7)
    hidden = heads * head_size
    x = torch.randn(bs, seq, inp, dtype=torch.float64, generator=generator)

    single = solution.SelfAttention(inp, hidden).double().eval()
    with torch.no_grad():
        want = single(x)
    got = reference.self_attention(x, _weights(single, ("q", "k", "v")))
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)

    for causal in (False, True):
        multi = solution.MultiHeadSelfAttention(
            inp, hidden, heads, causal=causal).double().eval()
        with torch.no_grad():
            att, probs = multi(x, return_attention=True)
        ref_att, ref_probs = reference.multi_head(
            x, _weights(multi, ("q", "k", "v", "mix")), heads, causal)
        torch.testing.assert_close(ref_probs, probs, rtol=1e-10,
                                   atol=1e-12)
        torch.testing.assert_close(ref_att, att, rtol=1e-10, atol=1e-12)
