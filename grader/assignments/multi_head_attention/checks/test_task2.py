"""Checks of Coding Task 2: MultiHeadSelfAttention.

Items are isolated as docs/rubric.md says: task2.causal is judged on the
structure of the causal probabilities alone (on random scores and on
scores that are all equal, where only a mask built from positions hides
the future); task2.output's value point is judged on cases with zero
query and key weights when task2.scores failed (the probabilities are then
uniform whatever the score computation); its dropout point is judged by
the properties of dropout on the student's own probabilities, whatever
their layout, at two rates and under two random seeds each (each
probability dropped on its own, element-wise independent), and by its
effect on the output: att must be those dropped probabilities times the
values, and the output without dropout in eval mode and at p = 0
(docs/threat-model.md, principle 5).

Every item is judged on hidden cases whose sizes all differ from the
public ones; when the code only runs at the public sizes, the failure is
tagged ``hardcoded_size`` with the size that breaks it.
"""
from collections.abc import Callable, Iterator

import pytest
import torch

from grader.api import (ATOL, RTOL, Case, CheckFailed, TaskRun, close,
                        explained, fail,
                        max_error, require_ran, returned, share_outside,
                        tensor_of)
from grader.assignments.multi_head_attention import mistakes, reference
from grader.assignments.multi_head_attention.cases import (CHAINED,
                                                           DROPOUT_DRAWS)
from grader.assignments.attention import MaskWords, mask_dependence

OUT = "[batch_size, seq_len, hidden]"
PROBS = "[batch_size * num_heads, seq_len, seq_len]"
CALL = "MultiHeadSelfAttention.forward(x, return_attention=True)"
# docs/rubric.md's range for the share of zeros at p = 0.5; other rates use
# the bounds a correct dropout cannot miss (checking.share_bounds).
RUBRIC_SHARE = {0.5: (0.3, 0.7)}


def contract(case: Case) -> list[tuple[int, ...]]:
    """The shapes of (att, probs) for a case's sizes."""
    s = case.sizes
    bs, seq, heads = s["batch_size"], s["seq_len"], s["num_heads"]
    return [(bs, seq, s["hidden"]), (bs * heads, seq, seq)]


def hardcoded(task2: TaskRun, kind: str,
              behind: Callable[[], tuple[list[str], str]] | None = None
              ) -> Callable[[], tuple[list[str], str]]:
    """The ``hardcoded_size`` explanation of a failure on ``kind``
    ("probs" or "causal") probes, computed when a check fails; with
    ``behind``, the mistakes the cases that did run show too (a second
    mistake hidden behind the hard-coded size is still named)."""
    def explain() -> tuple[list[str], str]:
        ids, words = mistakes.size_dependence(task2, f":{kind}", contract)
        if not ids:  # probs in another layout: still a hard-coded size
            ids, words = mistakes.size_dependence(task2, f":{kind}",
                                                  four_dimensional)
        if ids and behind is not None:
            more, said = behind()
            ids += [name for name in more if name not in ids]
            words = f"{words} {said}".strip()
        return ids, words
    return explain


def on_cases_that_ran(task2: TaskRun, kind: str,
                      judge: Callable[[str], tuple[list[str], str]]
                      ) -> Callable[[], tuple[list[str], str]]:
    """``judge(probe_id)``'s diagnosis on the first public-size probe of
    ``kind`` ("probs" or "causal": ``size:<case>:same:<kind>``) that ran
    and shows a mistake (none: nothing)."""
    def diagnose() -> tuple[list[str], str]:
        for probe_id in task2.probe_ids("size:"):
            if not probe_id.endswith(f":same:{kind}") \
                    or not task2.result(probe_id).ok:
                continue
            try:
                ids, words = judge(probe_id)
            except CheckFailed as exc:
                ids, words = list(exc.diagnoses), exc.message
            except (AssertionError, RuntimeError):
                continue
            if ids:
                return ids, f"Where the code runs: {words}".strip()
        return [], ""
    return diagnose


def four_dimensional(case: Case) -> list[tuple[int, ...]]:
    """The shapes of (att, probs) with probs as [bs, num_heads, seq, seq]
    (the ``probs_shape`` mistake)."""
    s = case.sizes
    bs, seq, heads = s["batch_size"], s["seq_len"], s["num_heads"]
    return [(bs, seq, s["hidden"]), (bs, heads, seq, seq)]


def pair(task2: TaskRun, probe_id: str) -> tuple[Case, object, object]:
    """The (att, probs) values a return_attention=True call returned."""
    info = task2.result(probe_id).info
    what = CALL + (" with causal=True" if info.params.get("causal")
                   else "")
    value = returned(task2, probe_id, what)
    case = info.case
    if value.kind not in ("tuple", "list") or value.length != 2:
        fail(f"{what} on {case.describe()} should return (att, probs); "
             f"got {value.describe()}.")
    return case, value.items[0], value.items[1]


def probs_of(task2: TaskRun, probe_id: str,
             diagnose: Callable[[Case, torch.Tensor],
                                tuple[list[str], str]] | None = None
             ) -> tuple[Case, torch.Tensor]:
    """The returned probs, checked to be [bs * num_heads, seq, seq].

    probs returned as [bs, num_heads, seq, seq] fail ``probs_shape``;
    ``diagnose(case, flattened probs)`` then names the mistakes their
    values show too (one failure, every mistake named)."""
    case, probs = any_shape_probs(task2, probe_id)
    s = case.sizes
    bs, seq, heads = s["batch_size"], s["seq_len"], s["num_heads"]
    if probs is not None:
        ids, words = diagnose(case, probs) if diagnose else ([], "")
        fail(f"probs on {case.describe()} have shape "
             f"{[bs, heads, seq, seq]} = [batch_size, num_heads, seq_len, "
             f"seq_len]; expected {[bs * heads, seq, seq]} = {PROBS}: "
             f"reshape them after the softmax. {words}".rstrip(),
             "probs_shape", *ids)
    _, _, value = pair(task2, probe_id)
    return case, tensor_of(value, "probs", (bs * heads, seq, seq), PROBS,
                           case)


def any_shape_probs(task2: TaskRun, probe_id: str
                    ) -> tuple[Case, torch.Tensor | None]:
    """probs returned as [bs, num_heads, seq, seq], flattened to the
    contract's [bs * num_heads, seq, seq] (None when they are not in that
    layout)."""
    case, _, probs = pair(task2, probe_id)
    s = case.sizes
    bs, seq, heads = s["batch_size"], s["seq_len"], s["num_heads"]
    if probs.kind == "tensor" and probs.tensor is not None and tuple(
            probs.shape) == (bs, heads, seq, seq):
        return case, probs.tensor.reshape(bs * heads, seq, seq)
    return case, None


def att_of(task2: TaskRun, probe_id: str) -> tuple[Case, torch.Tensor]:
    """The returned att, checked to be [bs, seq, hidden]."""
    case, att, _ = pair(task2, probe_id)
    s = case.sizes
    return case, tensor_of(att, "att", (s["batch_size"], s["seq_len"],
                                        s["hidden"]), OUT, case)


def expected(case: Case, causal: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference (att, probs) of a case."""
    x, weights = case.float64()
    return reference.multi_head(x, weights, case.sizes["num_heads"], causal)


def scored_probs(task2: TaskRun, named: bool = False
                 ) -> Iterator[tuple[Case, torch.Tensor]]:
    """Every non-causal probs with its case (``named``: a wrong layout's
    failure also names what is wrong with the values)."""
    for probe_id in task2.probe_ids("probs:"):
        yield probs_of(task2, probe_id, values_diagnosis if named else None)


def values_diagnosis(case: Case, probs: torch.Tensor
                     ) -> tuple[list[str], str]:
    """diagnose_probs, when probs differ from the reference."""
    if close(probs, expected(case)[1]):
        return [], ""
    return diagnose_probs(case, probs)


def scores_correct(task2: TaskRun) -> bool:
    """task2.scores's verdict, without failing (used to isolate items)."""
    try:
        return all(close(probs, expected(case)[1])
                   for case, probs in scored_probs(task2))
    except AssertionError:
        return False


def diagnose_probs(case: Case, student: torch.Tensor
                   ) -> tuple[list[str], str]:
    """Known mistakes that explain wrong non-causal probabilities."""
    s = case.sizes
    head_size = s["hidden"] // s["num_heads"]
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale_probs(case, student), head_size ** 0.5, s)
    ids += mistakes.matching(student, {
        "softmax_dim": lambda: mistakes.probs_variant(case, softmax_dim=-2),
        "reshape_not_transpose": lambda: mistakes.probs_variant(
            case, split_transpose=False)})
    # Softmax over the queries: the other mistakes are read on columns.
    over_queries = not sums_to_one(student) and sums_to_one(student, -2)
    right = (mistakes.probs_variant(case, softmax_dim=-2) if over_queries
             else expected(case)[1])
    order = mistakes.block_order(student, right)
    if order == list(range(len(order or ()))):
        order = None      # the blocks in place: nothing reordered
    if order is not None:
        ids += ["head_order"] + (["softmax_dim"] if over_queries else [])
        how = mistakes.describe_order(order, s["batch_size"],
                                      s["num_heads"])
        words += (f" Each [seq_len, seq_len] block of probs is a right "
                  f"head distribution{COLUMNS if over_queries else ''}, "
                  f"but {how}: row b * num_heads + h must hold head h of "
                  f"sequence b.")
    elif over_queries and mistakes.full_width_blocks(case, student, True):
        ids += ["heads_not_split", "softmax_dim"]
        words += (f" Each [seq_len, seq_len] block of probs is attention "
                  f"over all hidden features of q and k{COLUMNS}: every "
                  f"head uses the full projections instead of its own "
                  f"head_size slice.")
    elif mistakes.full_width_blocks(case, student):
        ids.append("heads_not_split")
        words += (" Each [seq_len, seq_len] block of probs is attention "
                  "over all hidden features of q and k: every head uses "
                  "the full projections instead of its own head_size "
                  "slice.")
        more, said = mistakes.scale_diagnosis(
            mistakes.full_width_scale(case, student), head_size ** 0.5, s)
        ids += more
        words += f" {said}" if said else ""
    elif not ids:
        ids, words = reordered_scale(case, student)
    if not ids:
        ids, words = scale_behind_steps(case, student)
    return list(dict.fromkeys(ids)), words.strip()


#: How a message says the softmax ran over the queries.
COLUMNS = (" taken over the queries (each column sums to 1, not each row: "
           "softmax over dim=-1)")


def scale_behind_steps(case: Case, student: torch.Tensor
                       ) -> tuple[list[str], str]:
    """A scale mistake together with a split or softmax mistake (both
    named): :func:`mistakes.scale_in_other_steps`."""
    s = case.sizes
    found = mistakes.scale_in_other_steps(case, student)
    if found is None:
        return [], ""
    steps, c = found
    ids, words = mistakes.scale_diagnosis(c, (s["hidden"] // s["num_heads"])
                                          ** 0.5, s)
    if "reshape_not_transpose" in steps:
        words += (" The heads are split with reshape/view alone: view as "
                  "[batch_size, seq_len, num_heads, head_size] and "
                  "transpose(1, 2) first.")
    if "softmax_dim" in steps:
        words += f" The softmax is{COLUMNS}."
    return steps + ids, words


def reordered_scale(case: Case, student: torch.Tensor
                    ) -> tuple[list[str], str]:
    """head_order and a scale mistake together: the rows read head-major
    are the reference's at another scale."""
    s = case.sizes
    head_size = s["hidden"] // s["num_heads"]
    rows = mistakes.head_major_rows(student, s["batch_size"],
                                    s["num_heads"])
    ids, words = mistakes.scale_diagnosis(
        mistakes.fit_scale_probs(case, rows), head_size ** 0.5, s)
    if not ids:
        return [], ""
    return ["head_order"] + ids, (
        f"{words} Read head-major (row i holds head i // batch_size of "
        f"sequence i % batch_size), the rows are the reference's at that "
        f"scale: row b * num_heads + h must hold head h of sequence b.")


@pytest.mark.item("task2.scores")
def test_probs_match_reference(task2: TaskRun) -> None:
    """Non-causal probs: right shape, batch-major, equal to the reference."""
    behind = on_cases_that_ran(task2, "probs", lambda probe_id:
                               values_diagnosis(*probs_of(task2, probe_id)))
    with explained(hardcoded(task2, "probs", behind)):
        require_ran(task2, task2.probe_ids("probs:"), CALL)
        for case, probs in scored_probs(task2, named=True):
            want = expected(case)[1]
            if not close(probs, want):
                ids, words = diagnose_probs(case, probs)
                error = max_error(probs, want)
                fail(f"probs on {case.describe()} do not match the "
                     f"reference ({error}). {words}".rstrip(), *ids)


def sums_to_one(probs: torch.Tensor, dim: int = -1) -> bool:
    """True when ``probs`` sum to 1 along ``dim`` (within ATOL)."""
    sums = probs.sum(dim)
    return bool(torch.allclose(sums, torch.ones_like(sums), rtol=0,
                               atol=ATOL))


def hides_diagonal(probs: torch.Tensor) -> bool:
    """True when every row after the first gives 0 to j >= i: the mask
    hides the current token too (triu(diagonal=0)), whatever the fill
    (with -inf the first row is NaN; with a finite fill it is uniform)."""
    seq = probs.shape[-1]
    if seq < 2:
        return False
    hidden = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=0)
    hidden[0] = False
    return bool(torch.all(probs[:, hidden] == 0))


def sees_next(probs: torch.Tensor) -> bool:
    """True when every token attends to itself, its past and the next
    token, and to nothing after that: the mask starts one step too far
    right (triu(diagonal=2)), whatever the fill."""
    seq = probs.shape[-1]
    if seq < 3 or torch.isnan(probs).any():
        return False
    beyond = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=2)
    following = probs.diagonal(offset=1, dim1=1, dim2=2)
    return bool(torch.all(probs[:, beyond] == 0) and torch.all(following > 0))


def causal_problem(probs: torch.Tensor) -> str | None:
    """What is wrong with the structure of causal probs, or None."""
    seq = probs.shape[-1]
    future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
    nan_rows = torch.isnan(probs).any(-1).any(0).nonzero().flatten()
    if len(nan_rows):
        rows = ", ".join(str(int(i)) for i in nan_rows[:4])
        return (f"contain NaN (in row(s) {rows} of the [seq_len, seq_len] "
                f"blocks). A row whose every score is -inf gives NaN: "
                f"every token must still see itself")
    if not torch.all(probs[:, future] == 0):
        return "are not 0 above the diagonal: tokens attend to the future"
    if not torch.all(probs[:, ~future] > 0):
        return ("have zeros on or below the diagonal; position i may "
                "attend to every j <= i, itself included")
    sums = probs.sum(-1)
    if not sums_to_one(probs):
        return (f"have rows that do not sum to 1 (they range from "
                f"{sums.min().item():.4g} to {sums.max().item():.4g})")
    return None


def hides_future(probs: torch.Tensor) -> bool:
    """True when causal probs are exactly 0 strictly above the diagonal."""
    seq = probs.shape[-1]
    future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
    return bool(torch.all(probs[:, future] == 0))


def diagnose_causal(task2: TaskRun, case: Case, probs: torch.Tensor,
                    unmasked_id: str = "") -> tuple[list[str], str]:
    """Known mask mistakes that explain wrong causal probabilities
    (``unmasked_id``: the probe of the same input without the mask,
    default ``probs:<case>``)."""
    base = case.name.removesuffix("-equal-scores")
    if base != case.name:
        # All scores equal: a mask read from the score values is empty
        # (or hides everything) here, while it worked on random scores.
        # (Nothing else is read here: equal scores make every region of
        # a row look filled with one value.)
        sibling = optional_probs(task2, f"causal:{base}")
        if sibling is not None and hides_future(sibling) \
                and not hides_future(probs):
            return ["mask_from_scores"], (
                "With every score equal (zero query weights) the mask "
                "does not hide the future, though it does on random "
                "scores: it is computed from the score values. Build it "
                "from the positions alone, e.g. torch.ones(seq_len, "
                "seq_len).triu(1).")
        return [], ""
    ids, words = [], ""
    unmasked = optional_probs(task2, unmasked_id or f"probs:{case.name}")
    if unmasked is not None and close(probs, unmasked):
        ids.append("mask_ignored")
    ids += mistakes.matching(probs, {
        "mask_zero_fill": lambda: mistakes.probs_variant(
            case, causal=True, fill=0.0)})
    ids += over_queries_masks(case, probs)
    filled = mistakes.equal_fill(probs)
    ids += filled
    if "mask_zero_fill" in filled:
        words += (" The masked positions of each row share one probability "
                  "> 0: their scores are set to 0, not -inf.")
    if hides_diagonal(probs) or torch.isnan(probs[:, 0]).all() or (
            torch.all(probs.diagonal(dim1=1, dim2=2)[:, 1:] == 0)):
        ids.append("mask_diagonal")
        words += (" Every later token gives itself probability 0, and the "
                  "first token, with every score masked, has nothing left "
                  "to attend to.")
    if sees_next(probs):
        ids.append("mask_sees_next")
        words += (" Every token also attends to the token right after it "
                  "(and to nothing later).")
    if mistakes.hides_past(probs):
        ids.append("mask_inverted")
        words += (" Each token gives probability 0 to the tokens before it "
                  "and attends to the ones after it: the mask is inverted. "
                  "Hide j > i (torch.triu(..., diagonal=1)) where the mask "
                  "is True.")
    if not sums_to_one(probs) and sums_to_one(probs, dim=-2):
        ids.append("softmax_dim")
    return list(dict.fromkeys(ids)), words.strip()


def over_queries_masks(case: Case, probs: torch.Tensor) -> list[str]:
    """Mask mistakes behind a softmax over the queries: ``probs`` are the
    reference's with that mask and the softmax over dim=1 (NaN where a
    whole column is masked, as in the student's)."""
    found = []
    for name, kwargs in (("mask_diagonal", {"diagonal": 0}),
                         ("mask_sees_next", {"diagonal": 2}),
                         ("mask_zero_fill", {"fill": 0.0})):
        variant = mistakes.probs_variant(case, causal=True, softmax_dim=-2,
                                         **kwargs).float()
        if same_with_nan(probs, variant):
            found += [name, "softmax_dim"]
    return found


def same_with_nan(student: torch.Tensor, want: torch.Tensor) -> bool:
    """``close``, with NaN where (and only where) ``want`` has NaN."""
    if tuple(student.shape) != tuple(want.shape):
        return False
    nan = torch.isnan(want)
    return bool(torch.equal(torch.isnan(student), nan)
                and close(student[~nan], want[~nan]))


def causal_diagnosis(task2: TaskRun, probe_id: str,
                     probs: torch.Tensor | None = None
                     ) -> tuple[list[str], str]:
    """What is wrong with one probe's causal probs (nothing when their
    structure is right); ``probs`` defaults to the probe's own."""
    case = task2.case(probe_id)
    if probs is None:
        probs = probs_of(task2, probe_id)[1]
    if causal_problem(probs) is None:
        return [], ""
    sibling = (probe_id.removesuffix(":causal") + ":probs"
               if probe_id.startswith("size:") else "")
    return diagnose_causal(task2, case, probs, sibling)


def optional_probs(task2: TaskRun, probe_id: str) -> torch.Tensor | None:
    """A probe's probs if they ran and have the contract shape."""
    if probe_id not in task2.results or not task2.result(probe_id).ok:
        return None
    try:
        flat = any_shape_probs(task2, probe_id)[1]
        return flat if flat is not None else probs_of(task2, probe_id)[1]
    except AssertionError:
        return None


def both(*diagnoses: Callable[[], tuple[list[str], str]]
         ) -> Callable[[], tuple[list[str], str]]:
    """Every diagnosis of ``diagnoses`` together."""
    def diagnose() -> tuple[list[str], str]:
        ids, words = [], ""
        for found, said in (run() for run in diagnoses):
            ids += [name for name in found if name not in ids]
            words = f"{words} {said}".strip()
        return ids, words
    return diagnose


def public_mask_from_scores(task2: TaskRun) -> tuple[list[str], str]:
    """``mask_from_scores`` on the first public case, where the code runs
    (``public-equal:``): its mask hides the future on random scores but
    not when every score is equal."""
    for probe_id in task2.probe_ids("public-equal:"):
        name = probe_id.split(":", 1)[1]
        probs = optional_probs(task2, probe_id)
        sibling = optional_probs(task2, f"size:{name}:same:causal")
        if probs is not None and sibling is not None \
                and hides_future(sibling) and not hides_future(probs):
            return ["mask_from_scores"], (
                "Where the code runs, with every score equal the mask "
                "does not hide the future: it is computed from the score "
                "values; build it from the positions alone.")
    return [], ""


def public_dropout_misplaced(task2: TaskRun) -> tuple[list[str], str]:
    """``dropout_misplaced`` on the first public case, where the code runs
    (``public-dropout-*``): dropout changes att but not probs."""
    ids = ("public-dropout-eval", "public-dropout-train")
    if not all(probe_id in task2.results and task2.result(probe_id).ok
               for probe_id in ids):
        return [], ""
    try:
        _, eval_att, eval_probs = any_layout(task2, ids[0])
        _, train_att, train_probs = any_layout(task2, ids[1])
    except CheckFailed:
        return [], ""
    if not att_alone_changes(eval_att, eval_probs, train_att, train_probs):
        return [], ""
    return ["dropout_misplaced"], (
        "Where the code runs, dropout in train mode changes att but not "
        "the returned probs: apply self.dropout to probs.")


@pytest.mark.item("task2.causal")
def test_causal_probs_structure(task2: TaskRun) -> None:
    """causal=True: 0 above the diagonal, > 0 on and below, rows sum 1,
    on random scores and on scores that are all equal, and at every call
    of one module (:func:`causal_across_calls`)."""
    behind = both(on_cases_that_ran(task2, "causal", lambda probe_id:
                                    causal_diagnosis(task2, probe_id)),
                  lambda: public_mask_from_scores(task2))
    with explained(hardcoded(task2, "causal", behind)):
        require_ran(task2, task2.probe_ids("causal:"),
                    CALL + " with causal=True")
        failures = []
        for probe_id in task2.probe_ids("causal:"):
            try:
                causal_probe(task2, probe_id)
            except CheckFailed as exc:
                failures.append(exc)
        if failures:
            raise every_mistake(failures)
        causal_values(task2)
        for probe_id in task2.probe_ids("causal:"):
            causal_att_follows(task2, probe_id)
        causal_in_training(task2)
        causal_without_probs(task2)
    causal_across_calls(task2)


def causal_across_calls(task2: TaskRun) -> None:
    """The mask at every call of one module (red team 10, R2): the
    ``size:<public case>:<key>:causal`` probes of CHAINED call one object
    with the public sizes, a larger batch_size, then a longer seq_len;
    each call's probs must have the causal structure. Judged where the
    first call's do (the hidden cases, which passed before, judge a
    hard-coded size), outside the hard-coded-size explanation: a mask
    kept from the first call's length fails here, not a size."""
    for probe_id in task2.probe_ids("size:"):
        if not probe_id.endswith(":same:causal"):
            continue
        first = optional_probs(task2, probe_id)
        if first is None or causal_problem(first) is not None:
            continue
        start = task2.case(probe_id)
        base = probe_id.removesuffix(":same:causal")
        for number, key in enumerate(CHAINED[1:], start=2):
            later = f"{base}:{key}:causal"
            if later not in task2.results:
                continue
            case, result = task2.case(later), task2.result(later)
            where = (f"the same module called again (its call "
                     f"{number}), on {case.describe()}")
            advice = ("A module must be right at every call: build the "
                      "mask for each input's seq_len (or register one for "
                      "the largest length in __init__ and slice it), never "
                      "keep what the first call made.")
            if not result.ok:
                fail(f"{CALL} with causal=True runs at a module's first "
                     f"call, on {start.describe()}, but raises on {where} "
                     f"({result.problem}). {advice}")
            probs = optional_probs(task2, later)
            if probs is None:
                fail(f"{CALL} with causal=True returns the contract shapes "
                     f"at a module's first call, on {start.describe()}, but "
                     f"not on {where}. {advice}")
            problem = causal_problem(probs)
            if problem is not None:
                fail(f"With causal=True the probs are right at a "
                     f"module's first call, on {start.describe()}, but on "
                     f"{where} they {problem}. {advice}")


def causal_values(task2: TaskRun) -> None:
    """When task2.scores passed (the unmasked probs are the reference's),
    the causal probs must be the reference's too: right structure over
    other scores (unscaled, or not from q and k) is a causal branch that
    computes something else. When task2.scores failed, the structure is
    judged alone, so a score mistake is not charged twice (red team 9,
    U2; docs/rubric-decisions.md)."""
    if not scores_correct(task2):
        return
    for probe_id in task2.probe_ids("causal:"):
        case, probs = probs_of(task2, probe_id)
        want = expected(case, causal=True)[1]
        if not close(probs, want):
            fail(f"With causal=True on {case.describe()} the probs hide "
                 f"the future but do not match the reference "
                 f"({max_error(probs, want)}), though without the mask "
                 f"they do: the causal branch computes other scores "
                 f"(another scale, or not q @ k^T). Compute the scaled "
                 f"scores once, then mask them.")


def causal_in_training(task2: TaskRun) -> None:
    """The mask acts in train mode too (``causal-train:``, dropout 0):
    the probs are 0 above the diagonal, and when they are the eval ones,
    att follows them (red team 9, U7: a mask applied only in eval mode
    lets the layer train on the future). Only the future is judged: a
    dropout that acts at p = 0 (a fixed rate) changes the rest, and the
    dropout point has paid for it."""
    probe_ids = task2.probe_ids("causal-train:")
    require_ran(task2, probe_ids, CALL + " with causal=True in train mode")
    for probe_id in probe_ids:
        case, probs = probs_of(task2, probe_id)
        name = probe_id.removeprefix("causal-train:")
        if not hides_future(probs):
            fail(f"With causal=True in train mode (model.train(), "
                 f"dropout=0) on {case.describe()} the probs are not 0 "
                 f"above the diagonal (tokens attend to the future), "
                 f"though in eval mode they are: the mask must act in "
                 f"training too.")
        evaluated = optional_probs(task2, f"causal:{name}")
        if evaluated is not None and close(probs, evaluated):
            causal_att_follows(task2, probe_id, name)


def plain_att(task2: TaskRun, probe_id: str) -> torch.Tensor | None:
    """What forward(x) returned, when it ran and returned a tensor of
    att's contract shape; None otherwise."""
    if probe_id not in task2.results or not task2.result(probe_id).ok:
        return None
    value = task2.result(probe_id).value
    s = task2.case(probe_id).sizes
    shape = (s["batch_size"], s["seq_len"], s["hidden"])
    if value is None or value.kind != "tensor" or value.tensor is None \
            or tuple(value.shape) != shape \
            or not value.tensor.is_floating_point():
        return None
    return value.tensor


def plain_call_judged(task2: TaskRun) -> bool:
    """True when forward(x) returns the att forward(x,
    return_attention=True) returns (``att-only:``, the value point's
    check): only then are the mask and dropout judged through forward(x)
    too (otherwise the value point has paid for forward(x))."""
    probe_ids = task2.probe_ids("att-only:")
    for probe_id in probe_ids:
        att = plain_att(task2, probe_id)
        with_probs = _tensors(task2,
                              "probs:" + probe_id.removeprefix("att-only:"))
        if att is None or with_probs is None \
                or not close(att, with_probs[1]):
            return False
    return bool(probe_ids)


def plain_call_differs(task2: TaskRun, probe_id: str,
                       want: torch.Tensor) -> str:
    """How forward(x) (``probe_id``) differs from ``want``, the att of the
    same call with return_attention=True, or ""."""
    what = "MultiHeadSelfAttention.forward(x)"
    require_ran(task2, [probe_id], what)
    att = plain_att(task2, probe_id)
    if att is None:
        return (f"does not return att as a tensor {OUT} (it does without "
                f"the mask or dropout)")
    if close(att, want):
        return ""
    return (f"returns another att than forward(x, return_attention=True) "
            f"({max_error(att, want)})")


def causal_without_probs(task2: TaskRun) -> None:
    """forward(x) with causal=True returns the masked att (red team 9, U4:
    a mask applied only when the probabilities are returned); judged when
    forward(x) is right without the mask."""
    if not plain_call_judged(task2):
        return
    for probe_id in task2.probe_ids("att-only-causal:"):
        found = _tensors(task2,
                         "causal:" + probe_id.removeprefix("att-only-causal:"))
        if found is None:
            continue
        case, want, _ = found
        differs = plain_call_differs(task2, probe_id, want)
        if differs:
            fail(f"With causal=True on {case.describe()} forward(x) "
                 f"{differs}: the mask must act whether or not the "
                 f"probabilities are returned. Mask the scores before "
                 f"the return_attention branch.")


def _tensors(task2: TaskRun, probe_id: str
             ) -> tuple[Case, torch.Tensor, torch.Tensor] | None:
    """(case, att, probs) of a probe when both are tensors and att has
    the contract's shape; None otherwise (judged by other items)."""
    result = task2.result(probe_id)
    value = result.value if result.ok else None
    if value is None or value.kind not in ("tuple", "list") or \
            value.length != 2:
        return None
    case, att, probs = pair(task2, probe_id)
    s = case.sizes
    shape = (s["batch_size"], s["seq_len"], s["hidden"])
    if att.kind != "tensor" or probs.kind != "tensor" or \
            att.tensor is None or probs.tensor is None or \
            tuple(att.shape) != shape or \
            not probs.tensor.is_floating_point():
        return None
    return case, att.tensor.reshape(shape), probs.tensor


def causal_att_follows(task2: TaskRun, probe_id: str,
                       name: str | None = None) -> None:
    """The mask must reach the output: with causal=True, att is the
    masked probs forward returns carried through the same value step
    that gives att from probs without the mask (whichever known step
    that is, mistakes included, so a value-step mistake is charged to
    task2.output alone). A value step the grader cannot follow on the
    unmasked case leaves the structure to judge alone; an attacker gains
    nothing there, since such an att fails task2.output
    (docs/rubric-decisions.md). ``name``: the case's name (default: the
    probe's, ``causal:<name>``)."""
    name = name or probe_id.removeprefix("causal:")
    if f"probs:{name}" not in task2.probe_ids("probs:"):
        return
    plain, masked = (_tensors(task2, f"probs:{name}"),
                     _tensors(task2, probe_id))
    if plain is None or masked is None:
        return
    case, att, probs = plain
    step = value_step(case, probs, att)
    if step is None:
        return
    _, att, probs = masked
    wanted = step(probs)
    if not any(close(att, want) for want in wanted):
        error = f" ({max_error(att, wanted[0])})" if wanted else ""
        fail(f"With causal=True on {case.describe()} the returned probs "
             f"hide the future, but att is not those probs times the "
             f"values{error}, as it is without the mask: the output still "
             f"reads later tokens. Multiply the masked probs by the "
             f"values.")


def causal_probe(task2: TaskRun, probe_id: str) -> None:
    """Fail when one causal probe's probs have the wrong structure."""
    case, probs = probs_of(task2, probe_id, lambda case, probs:
                           causal_diagnosis(task2, probe_id, probs))
    problem = causal_problem(probs)
    if problem is None:
        return
    where = f"with causal=True on {case.describe()}"
    if case.name.endswith("-equal-scores"):
        where += ", where every score is equal,"
    ids, words = diagnose_causal(task2, case, probs)
    fail(f"probs {where} {problem}. {words}".rstrip(), *ids)


def every_mistake(failures: list[CheckFailed]) -> CheckFailed:
    """The first probe's failure, with the mistakes only later probes
    show (a mask read from the scores shows on equal scores alone, after
    a first failure that named another mistake)."""
    first = failures[0]
    for later in failures[1:]:
        new = [name for name in later.diagnoses
               if name not in first.diagnoses]
        if new:
            first = first.extended(new, later.message)
    return first


def output_diagnosis(case: Case, att: torch.Tensor
                     ) -> tuple[list[str], str]:
    """diagnose_output, when att differs from the reference."""
    if close(att, expected(case)[0]):
        return [], ""
    return diagnose_output(case, att)


def diagnose_output(case: Case, student: torch.Tensor
                    ) -> tuple[list[str], str]:
    """Known mistakes in the value, merge and mix steps."""
    ids = mistakes.matching(student, {
        "no_mix": lambda: mistakes.output_variant(case, mix=False),
        "reshape_not_transpose": lambda: mistakes.output_variant(
            case, merge_transpose=False)})
    if "reshape_not_transpose" not in ids:
        ids += mistakes.matching(student, {
            "reshape_not_transpose": lambda: mistakes.output_variant(
                case, split_transpose=False, merge_transpose=False)})
    if not ids and mistakes.matching(student, {
            "both": lambda: mistakes.output_variant(
                case, merge_transpose=False, mix=False),
            "split": lambda: mistakes.output_variant(
                case, split_transpose=False, mix=False)}):
        return ["reshape_not_transpose", "no_mix"], ""
    words = ""
    # Values of heads split without transpose, moved: only when no known
    # output explains it (a split and a merge by reshape alone are
    # reshape_not_transpose, docs/diagnoses.md).
    steps = ((True, True), (True, False)) + (
        () if ids else ((False, True), (False, False)))
    for split, mixed in steps:
        if mistakes.moved_values(case, student, mixed, split):
            ids += (["merge_wrong_axes"] + ([] if mixed else ["no_mix"])
                    + ([] if split else ["reshape_not_transpose"]))
            words = ("The per-head outputs are right, but merging them "
                     "back to [batch_size, seq_len, hidden] puts values "
                     "in the wrong sequence, position or feature: from "
                     "[batch_size * num_heads, seq_len, head_size], view "
                     "as [batch_size, num_heads, seq_len, head_size], "
                     "transpose(1, 2), then reshape.")
            break
    return list(dict.fromkeys(ids)), words


@pytest.mark.item("task2.output", part="values")
def test_output_matches_reference(task2: TaskRun) -> None:
    """Non-causal att equals the reference (zero q/k if scores failed)."""
    if scores_correct(task2):
        prefix, note = "probs:", ""
    else:
        prefix = "zero-qk:"
        note = (" (judged with zero query and key weights, where the "
                "probabilities are uniform, because task2.scores failed)")
    behind = on_cases_that_ran(task2, "probs", lambda probe_id:
                               output_diagnosis(*att_of(task2, probe_id)))
    with explained(hardcoded(task2, "probs", behind)):
        require_ran(task2, task2.probe_ids(prefix), CALL)
        for probe_id in task2.probe_ids(prefix):
            case, att = att_of(task2, probe_id)
            want = expected(case)[0]
            if not close(att, want):
                ids, words = diagnose_output(case, att)
                error = max_error(att, want)
                fail(f"att on {case.describe()}{note} does not match the "
                     f"reference ({error}). {words}".rstrip(), *ids)
        if prefix == "zero-qk:":
            for probe_id in task2.probe_ids("probs:"):
                follows_own_probs(task2, probe_id)


def follows_own_probs(task2: TaskRun, probe_id: str) -> None:
    """When task2.scores failed, the value point's uniform cases cannot
    tell a value-and-mix step from an average of the values; so on the
    graded cases att must also be the reference's value-and-mix step
    applied to the probs forward returned (read in any layout they can
    be read in; probs that no layout reads, of another size, leave the
    uniform cases to judge alone; docs/rubric-decisions.md)."""
    case, att = att_of(task2, probe_id)
    _, _, probs = pair(task2, probe_id)
    own = probs.tensor if probs.kind == "tensor" else None
    layouts = (batch_major(case, own) if own is not None
               and own.is_floating_point() else [])
    if not layouts:
        return  # probs no layout reads: the uniform cases judge alone
    for layout in layouts:
        try:
            want = mistakes.output_variant(case, probs=layout.double())
        except RuntimeError:
            continue
        if close(att, want.float()):
            return
    fail(f"att on {case.describe()} is not the returned probs times the "
         f"values (with mix): because task2.scores failed, the value and "
         f"mix step is judged on the probabilities forward returns, and "
         f"att does not follow from them. Multiply the returned probs by "
         f"the values, merge the heads, then apply self.mix.")


@pytest.mark.item("task2.output", part="values")
def test_return_attention_false_returns_att(task2: TaskRun) -> None:
    """forward(x) returns att alone, the same att as with probs."""
    with explained(hardcoded(task2, "probs")):
        require_ran(task2, task2.probe_ids("att-only:"),
                    "MultiHeadSelfAttention.forward(x)")
        for probe_id in task2.probe_ids("att-only:"):
            case = task2.case(probe_id)
            s = case.sizes
            value = returned(task2, probe_id,
                             "MultiHeadSelfAttention.forward(x)")
            att = tensor_of(value, "forward(x) (return_attention=False)",
                            (s["batch_size"], s["seq_len"], s["hidden"]),
                            OUT, case)
            _, with_probs = att_of(task2, f"probs:{case.name}")
            if not close(att, with_probs):
                fail(f"forward(x) and forward(x, return_attention=True) "
                     f"return different att on {case.describe()}.")


def any_layout(task2: TaskRun, probe_id: str
               ) -> tuple[Case, torch.Tensor | None, torch.Tensor]:
    """(case, att or None, probs) of a dropout probe, probs in any layout
    whose last dimension runs over the keys."""
    case, att, probs = pair(task2, probe_id)
    seq = case.sizes["seq_len"]
    if (probs.kind != "tensor" or probs.tensor is None
            or not probs.dtype.startswith(("float", "bfloat"))
            or not probs.shape or probs.shape[-1] != seq):
        fail(f"probs on {case.describe()} should be a floating-point "
             f"tensor of probabilities over the {seq} keys (its last "
             f"dimension); got {probs.describe()}.")
    usable = att.tensor if att.kind == "tensor" else None
    return case, usable, probs.tensor


def dropout_rates(task2: TaskRun) -> list[float]:
    """The rates p > 0 dropout is judged at, in the plan's order (0.5,
    then a rate drawn from the grading seed): those of the
    ``dropout-eval:<p>`` probes."""
    return [task2.result(probe_id).info.params["dropout"]
            for probe_id in task2.probe_ids("dropout-eval:")]


def dropout_at(task2: TaskRun, p: float) -> tuple[list[torch.Tensor], int]:
    """Judge dropout at rate ``p``: eval mode leaves a distribution; in
    train mode every probability is 0 or its eval value / (1 - p). Returns
    the masks of dropped probabilities (one per seed)."""
    case, eval_att, eval_probs = any_layout(task2, f"dropout-eval:{p:g}")
    if not (torch.all(eval_probs >= 0) and sums_to_one(eval_probs)):
        if sums_to_one(eval_probs, dim=-2):
            fail(f"In eval mode the probabilities of a model with "
                 f"dropout={p:g} are not a distribution: their rows do "
                 f"not sum to 1 but their columns do, so the softmax runs "
                 f"over the queries; dropout cannot be judged on them. "
                 f"{misplaced(task2, p, eval_att, eval_probs)}".rstrip(),
                 "softmax_dim", *(["dropout_misplaced"] if misplaced(
                     task2, p, eval_att, eval_probs) else []))
        fail(f"In eval mode (model.eval()) the probabilities of a model "
             f"with dropout={p:g} are not a distribution (rows must sum "
             f"to 1): dropout must act only in training. Use "
             f"self.dropout, an nn.Dropout, not F.dropout(..., "
             f"training=True).")
    judged = eval_probs > 0
    masks = []
    for draw in range(DROPOUT_DRAWS):
        _, train_att, train_probs = any_layout(
            task2, f"dropout-train:{p:g}:{draw}")
        if train_probs.shape != eval_probs.shape:
            fail(f"With dropout={p:g} probs have shape "
                 f"{list(train_probs.shape)} in train mode but "
                 f"{list(eval_probs.shape)} in eval mode.")
        if close(train_probs, eval_probs):
            if (train_att is not None and eval_att is not None
                    and train_att.shape == eval_att.shape
                    and not close(train_att, eval_att)):
                fail(f"With dropout={p:g} in train mode att changes but "
                     f"the returned probs do not: dropout is applied "
                     f"elsewhere (scores, values or output), or probs are "
                     f"returned before dropout. Apply self.dropout to "
                     f"probs and return the dropped probs.",
                     "dropout_misplaced")
            fail(f"With dropout={p:g} in train mode nothing changes: "
                 f"apply self.dropout to probs.")
        zero = train_probs == 0
        if not zero_or_scaled(train_probs, eval_probs, p):
            scale = uniform_scale(train_probs, eval_probs)
            if scale is not None and abs(scale - 1) <= RTOL:
                fail(f"With dropout={p:g} in train mode the probabilities "
                     f"that are not dropped keep their eval value: "
                     f"dropout must scale them by 1 / (1 - p) = "
                     f"{1 / (1 - p):.4g}, as nn.Dropout does, so that "
                     f"their expected value is unchanged. Use "
                     f"self.dropout.")
            if scale is not None and scale > 1:
                fail(f"With dropout={p:g} in train mode the kept "
                     f"probabilities are multiplied by {scale:.4g} = "
                     f"1 / (1 - {1 - 1 / scale:.3g}), not by 1 / (1 - p) "
                     f"= {1 / (1 - p):.4g}: the dropout rate passed to "
                     f"__init__ is not the one used. Use self.dropout.")
            fail(f"With dropout={p:g} in train mode the returned "
                 f"probabilities are neither 0 nor their eval value / "
                 f"(1 - p): dropout is not applied to the probabilities "
                 f"after the softmax (case {case.describe()}).",
                 "dropout_misplaced")
        masks.append(zero[judged])
    return masks, int(judged.sum())


def zero_or_scaled(train_probs: torch.Tensor, eval_probs: torch.Tensor,
                   p: float) -> bool:
    """Whether every probability in train mode is 0 or its eval value
    scaled by 1 / (1 - p), as nn.Dropout leaves it."""
    return bool(torch.all((train_probs == 0) | torch.isclose(
        train_probs, eval_probs / (1 - p), rtol=RTOL, atol=ATOL)))


def misplaced(task2: TaskRun, p: float, eval_att: torch.Tensor | None,
              eval_probs: torch.Tensor) -> str:
    """Words when dropout at rate ``p`` changes att but not the returned
    probs (dropout applied elsewhere), else ""."""
    _, train_att, train_probs = any_layout(task2, f"dropout-train:{p:g}:0")
    if not att_alone_changes(eval_att, eval_probs, train_att, train_probs):
        return ""
    return ("Also, in train mode att changes but the returned probs do "
            "not: dropout is applied elsewhere, not to probs.")


def att_alone_changes(eval_att: torch.Tensor | None,
                      eval_probs: torch.Tensor,
                      train_att: torch.Tensor | None,
                      train_probs: torch.Tensor) -> bool:
    """True when train mode changes att but not the returned probs: the
    dropout is applied somewhere other than the probabilities."""
    return (eval_att is not None and train_att is not None
            and train_probs.shape == eval_probs.shape
            and train_att.shape == eval_att.shape
            and close(train_probs, eval_probs)
            and not close(train_att, eval_att))


def uniform_scale(train: torch.Tensor, evaluated: torch.Tensor
                  ) -> float | None:
    """The one factor c with train = c * eval wherever train is not 0, if
    there is one (dropout at some other rate)."""
    kept = (train != 0) & (evaluated > 0)
    if not kept.any():
        return None
    ratios = train[kept].double() / evaluated[kept].double()
    scale = float(ratios.median())
    if torch.allclose(ratios, torch.full_like(ratios, scale), rtol=RTOL,
                      atol=0):
        return scale
    return None


# --------------------------------------------------------------------------
# Dropout drops each probability on its own (docs/threat-model.md,
# principle 5): the tests are the attention plug-ins' shared ones
# (grader/assignments/attention.py, ``mask_dependence``). Each fails a
# correct dropout with probability at most attention.ALPHA (17 such tests
# per rate, 34 per grading, and the shared-block test's own bound: under
# 1e-9 in all; docs/threat-model.md gives the numbers).

ON_ITS_OWN = ("dropout must drop each probability on its own: use "
              "self.dropout (an nn.Dropout) on probs")
MASK_WORDS = MaskWords(prefix="With dropout={p:g} in train mode",
                       blocks="[seq_len, seq_len] blocks of probs",
                       of="of probs", weights="probabilities",
                       advice=ON_ITS_OWN)


def drop_blocks(task2: TaskRun, p: float
                ) -> tuple[torch.Tensor, list[torch.Tensor]] | None:
    """(judged, masks): where the eval probs are > 0, and each draw's
    dropped probabilities, as [blocks, seq, seq] (any layout whose last
    dimension runs over the keys, cut into [seq, seq] blocks; None when
    it cannot be)."""
    case, _, eval_probs = any_layout(task2, f"dropout-eval:{p:g}")
    seq = case.sizes["seq_len"]
    if eval_probs.numel() % (seq * seq):
        return None
    masks = []
    for draw in range(DROPOUT_DRAWS):
        _, _, probs = any_layout(task2, f"dropout-train:{p:g}:{draw}")
        masks.append((probs == 0).reshape(-1, seq, seq))
    return (eval_probs > 0).reshape(-1, seq, seq), masks


def independent_masks(task2: TaskRun, p: float) -> None:
    """Fail unless the masks at rate ``p`` look element-wise independent:
    no two blocks (heads, sequences) of a draw share a mask; no more
    whole rows or whole columns dropped than chance allows; every kind of
    position dropped about as often as p says."""
    found = drop_blocks(task2, p)
    if found is None:
        return
    problem = mask_dependence(*found, p, MASK_WORDS)
    if problem:
        fail(problem)


def causal_dropout(task2: TaskRun) -> None:
    """causal=True with dropout in train mode (``causal-dropout-train:``,
    red team 10, R4): the future stays exactly 0, and the share of zeros
    among the allowed entries (on and below the diagonal) follows p.
    Judged where the causal probs have the right structure in train mode
    at p = 0 (``causal-train:``): a mask wrong there is task2.causal's
    (items are isolated), a mask that gives way to dropout is this
    point's. Judged on probs in the contract's layout or [bs, num_heads,
    seq, seq] (other layouts fail task2.scores)."""
    for probe_id in task2.probe_ids("causal-train:"):
        base = optional_probs(task2, probe_id)
        if base is None or causal_problem(base) is not None:
            return
    probe_ids = task2.probe_ids("causal-dropout-train:")
    require_ran(task2, probe_ids,
                CALL + " with causal=True and dropout in train mode")
    for probe_id in probe_ids:
        p = task2.result(probe_id).info.params["dropout"]
        case, _, probs = any_layout(task2, probe_id)
        s = case.sizes
        seq = s["seq_len"]
        if tuple(probs.shape) not in (
                (s["batch_size"] * s["num_heads"], seq, seq),
                (s["batch_size"], s["num_heads"], seq, seq)):
            continue
        blocks = probs.reshape(-1, seq, seq)
        future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
        seen = (f"With causal=True and dropout={p:g} in train mode, on "
                f"{case.describe()},")
        if not torch.all(blocks[:, future] == 0):
            fail(f"{seen} the probs are not 0 above the diagonal: tokens "
                 f"attend to the future. The mask must act whatever the "
                 f"dropout rate and the mode.")
        outside = share_outside(p, blocks[:, ~future] == 0,
                                RUBRIC_SHARE.get(p))
        if outside is not None:
            share, low, high = outside
            fail(f"{seen} {share:.1%} of the probabilities on or below "
                 f"the diagonal are 0; expected between {low:.1%} and "
                 f"{high:.1%}: dropout must act with the causal mask too "
                 f"(apply self.dropout to the masked probs).")


@pytest.mark.item("task2.output", part="dropout")
def test_dropout_acts_on_probabilities(task2: TaskRun) -> None:
    """Dropout on the probabilities, as randomness that reaches the
    output: at p = 0.5 and at a rate drawn from the grading seed, each
    prob is 0 or eval / (1 - p); two
    seeds drop different probabilities; the share of zeros follows p;
    each probability is dropped on its own (no mask shared by two blocks,
    no whole rows or columns dropped more often than chance allows, no
    kind of position spared); att is those dropped probs times the
    values (docs/threat-model.md, principle 5); in eval mode and at
    p = 0 att is the output without dropout; with causal=True in train
    mode the future stays 0 and the past is dropped at rate p
    (:func:`causal_dropout`); with zero value weights att is the same in
    both modes (:func:`dropout_with_zero_values`)."""
    with explained(hardcoded(task2, "probs", lambda:
                             public_dropout_misplaced(task2))):
        require_ran(task2, task2.probe_ids("dropout-"), CALL)
        for p in dropout_rates(task2):
            masks, _ = dropout_at(task2, p)
            if all(torch.equal(mask, masks[0]) for mask in masks[1:]):
                fail(f"With dropout={p:g} in train mode, two calls of the "
                     f"same module under different random seeds drop "
                     f"exactly the same probabilities: dropout must draw "
                     f"a new mask at every call. Use self.dropout (an "
                     f"nn.Dropout); do not keep a mask from an earlier "
                     f"call, fix the pattern or seed the generator "
                     f"yourself.")
            outside = share_outside(p, torch.cat(masks),
                                    RUBRIC_SHARE.get(p))
            if outside is not None:
                share, low, high = outside
                fail(f"With dropout={p:g} in train mode {share:.1%} of "
                     f"the probabilities are 0; expected between "
                     f"{low:.1%} and {high:.1%}: the share of zeros must "
                     f"follow p (use self.dropout, built from the rate "
                     f"passed to __init__).")
            independent_masks(task2, p)
        dropout_reaches_output(task2)
        dropout_without_probs(task2)
        causal_dropout(task2)
        dropout_with_zero_values(task2)
        long_dropout(task2)


def long_dropout(task2: TaskRun) -> None:
    """Dropout on the long case (``long-dropout-train:<p>``: one sequence
    of 20 to 36 tokens, hidden; red team 16: no train-mode probe was
    longer than 14 tokens, so dropout only when seq_len <= 16 kept the
    point): each prob is 0 or its eval value / (1 - p), the share of
    zeros follows p, and att is those dropped probs times the values
    (the code's own value step on this case, read from eval mode)."""
    for probe_id in task2.probe_ids("long-dropout-train:"):
        p = task2.result(probe_id).info.params["dropout"]
        case, evaluated, eval_probs = dropout_att(
            task2, f"long-dropout-eval:{p:g}")
        _, att, probs = dropout_att(task2, probe_id)
        seen = (f"With dropout={p:g} in train mode, on "
                f"{case.describe()},")
        if probs.shape != eval_probs.shape:
            fail(f"{seen} probs have shape {list(probs.shape)}, but "
                 f"{list(eval_probs.shape)} in eval mode.")
        if close(probs, eval_probs):
            fail(f"{seen} nothing is dropped: dropout must act at every "
                 f"length. Apply self.dropout to probs.")
        zero = probs == 0
        if not zero_or_scaled(probs, eval_probs, p):
            fail(f"{seen} the returned probabilities are neither 0 nor "
                 f"their eval value / (1 - p): dropout must act on the "
                 f"probabilities at every length. Apply self.dropout to "
                 f"probs.", "dropout_misplaced")
        outside = share_outside(p, zero[eval_probs > 0],
                                RUBRIC_SHARE.get(p))
        if outside is not None:
            share, low, high = outside
            fail(f"{seen} {share:.1%} of the probabilities are 0; "
                 f"expected between {low:.1%} and {high:.1%}: dropout "
                 f"must act at every length (use self.dropout).")
        if close(att, evaluated):
            fail(f"{seen} att is the same as in eval mode: the dropped "
                 f"probabilities never weight the values. Apply "
                 f"self.dropout to probs and multiply those probs by the "
                 f"values.", "dropout_misplaced")
        step = value_step(case, eval_probs, evaluated)
        if step is not None and not any(close(att, want)
                                        for want in step(probs)):
            fail(f"{seen} att is not the returned (dropped) probs times "
                 f"the values: the randomness of att is not the dropout "
                 f"of the probabilities. Apply self.dropout to probs, "
                 f"then multiply those probs by the values.",
                 "dropout_misplaced")


def dropout_with_zero_values(task2: TaskRun) -> None:
    """With zero value weights and bias every value is 0, so any value
    step (one the grader knows or not) gives the same att in train mode
    as in eval mode: randomness left there is not the dropout of the
    probabilities (red team 15: noise added after the values were
    weighted, behind a value step the grader does not know). Judged last,
    so that the value-step checks, which say more, speak first."""
    require_ran(task2, task2.probe_ids("zero-v-dropout-"), CALL)
    for probe_id in task2.probe_ids("zero-v-dropout-train:"):
        p = task2.result(probe_id).info.params.get("dropout", 0.0)
        blank, still, _ = dropout_att(task2, f"zero-v-dropout-eval:{p:g}")
        _, att, _ = dropout_att(task2, probe_id)
        if not close(att, still):
            fail(f"With dropout={p:g} in train mode att changes even "
                 f"where every value is 0 (on {blank.describe()}, "
                 f"against eval mode {max_error(att, still)}): the "
                 f"dropped probabilities weight only zeros there, so "
                 f"this randomness is not the dropout of the "
                 f"probabilities. Apply self.dropout to probs only, then "
                 f"multiply those probs by the values.",
                 "dropout_misplaced")


def dropout_without_probs(task2: TaskRun) -> None:
    """forward(x) in train mode under the seed of a
    ``dropout-train:<p>:<draw>`` probe returns that probe's att: the same
    draws drop the same probabilities (red team 9, U4: dropout applied
    only when the probabilities are returned); judged when forward(x) is
    right in eval mode."""
    if not plain_call_judged(task2):
        return
    for probe_id in task2.probe_ids("att-only-dropout-"):
        twin = probe_id.removeprefix("att-only-")
        _, want, _ = dropout_att(task2, twin)
        p = task2.result(probe_id).info.params.get("dropout", 0.0)
        differs = plain_call_differs(task2, probe_id, want)
        if differs:
            fail(f"With dropout={p:g} in train mode, under the same "
                 f"random seed, forward(x) {differs}: dropout must act "
                 f"whether or not the probabilities are returned. Apply "
                 f"self.dropout to probs before the return_attention "
                 f"branch.")


# --------------------------------------------------------------------------
# The effect of dropout on the output (docs/threat-model.md, principle 5):
# the returned probs are an intermediate the code controls; what counts is
# att. Dropped probabilities must weight the values, so that the
# randomness reaches att, and nothing else may.

#: How att follows from probs: the reference's value step and the value
#: steps of the known mistakes (each judged by the value point, not here).
VALUE_STEPS = ({}, {"mix": False}, {"merge_transpose": False},
               {"merge_transpose": False, "mix": False},
               {"split_transpose": False},
               {"split_transpose": False, "merge_transpose": False},
               {"split_transpose": False, "merge_transpose": False,
                "mix": False})


def dropout_att(task2: TaskRun, probe_id: str
                ) -> tuple[Case, torch.Tensor, torch.Tensor]:
    """(case, att, probs) of a dropout probe: att in any layout of its
    [bs, seq, hidden] numbers, read as [bs, seq, hidden] (its layout is
    the value point's to judge), probs in any layout over the keys."""
    case, att, probs = any_layout(task2, probe_id)
    s = case.sizes
    shape = (s["batch_size"], s["seq_len"], s["hidden"])
    if att is None or not att.is_floating_point() \
            or att.numel() != shape[0] * shape[1] * shape[2]:
        _, value, _ = pair(task2, probe_id)
        att = tensor_of(value, "att", shape, OUT, case)
    return case, att.reshape(shape), probs


def batch_major(case: Case, probs: torch.Tensor) -> list[torch.Tensor]:
    """``probs`` as [bs * num_heads, seq, seq] in batch-major order, for
    each layout they can be read in (none: a layout not understood)."""
    s = case.sizes
    bs, heads, seq = s["batch_size"], s["num_heads"], s["seq_len"]
    dims = {bs: "b", heads: "h", seq: "q"}
    if len(dims) < 3 or probs.numel() != bs * heads * seq * seq:
        return []
    if probs.dim() == 3 and tuple(probs.shape) == (bs * heads, seq, seq):
        return [probs, mistakes.head_major_rows(probs, bs, heads)]
    if probs.dim() == 4 and sorted(probs.shape[:3]) == sorted(
            (bs, heads, seq)):
        order = [dims[size] for size in probs.shape[:3]]
        moved = probs.permute(*(order.index(d) for d in "bhq"), 3)
        return [moved.reshape(bs * heads, seq, seq)]
    return []


def full_width_average(case: Case, probs: torch.Tensor) -> torch.Tensor:
    """The value step of heads that were never split (heads_not_split):
    each head's [seq, seq] probs weight the full-width values, the heads
    are averaged, then ``mix``; ``probs`` batch-major."""
    x, weights = case.float64()
    s = case.sizes
    bs, heads, seq = s["batch_size"], s["num_heads"], s["seq_len"]
    values = reference.project(x, weights, "v").unsqueeze(1)
    att = (probs.reshape(bs, heads, seq, seq) @ values).mean(dim=1)
    return torch.nn.functional.linear(att, weights["mix.weight"],
                                      weights["mix.bias"])


def _value_steps(case: Case) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    """Each known value step, as a function of batch-major probs."""
    steps: list[Callable[[torch.Tensor], torch.Tensor]] = [
        lambda flat, how=how: mistakes.output_variant(case, probs=flat,
                                                      **how)
        for how in VALUE_STEPS]
    steps.append(lambda flat: full_width_average(case, flat))
    return steps


def value_step(case: Case, probs: torch.Tensor, att: torch.Tensor
               ) -> Callable[[torch.Tensor], list[torch.Tensor]] | None:
    """How the code turns its probs into att on ``case``: the known value
    steps that give ``att`` from ``probs`` (each layout probs can be read
    in), as a function of probs in that layout that returns what each of
    them gives; None when none does. Several steps can agree where the
    heads' probs are alike (identical heads: concatenating and averaging
    them give the same att), so every one that agrees is kept."""
    found: list[tuple[int, Callable]] = []
    for index, flat in enumerate(batch_major(case, probs)):
        for known in _value_steps(case):
            try:
                agrees = close(att, known(flat.double()).float())
            except RuntimeError:
                continue
            if agrees:
                found.append((index, known))
    if not found:
        return None

    def steps(student: torch.Tensor) -> list[torch.Tensor]:
        layouts = batch_major(case, student)
        wanted = []
        for index, known in found:
            if index < len(layouts):
                try:
                    wanted.append(known(layouts[index].double()).float())
                except RuntimeError:
                    continue
        return wanted
    return steps


def values_earned(task2: TaskRun) -> bool:
    """The value point's verdict, without failing."""
    try:
        test_output_matches_reference(task2)
    except (AssertionError, RuntimeError, ValueError):
        return False
    return True


def dropout_reaches_output(task2: TaskRun) -> None:
    """Without dropout (eval mode, or p = 0) att is deterministic and the
    output without dropout; in train mode at p > 0 att changes with the
    random seed, and it is the returned (dropped) probs times the values
    whenever the code's value step is one the grader knows (always, when
    the value point is earned: a value step the grader cannot follow on
    this case alone earns nothing here)."""
    case, off, off_probs = dropout_att(task2, "dropout-off")
    for probe_id in task2.probe_ids("dropout-zero:") + task2.probe_ids(
            "dropout-eval:"):
        _, att, _ = dropout_att(task2, probe_id)
        if not close(att, off):
            rate = task2.result(probe_id).info.params.get("dropout", 0.0)
            where = (f"In eval mode with dropout={rate:g}" if rate
                     else "In train mode with dropout=0")
            fail(f"{where} att differs from the same model's att with "
                 f"dropout=0 in eval mode ({max_error(att, off)}): only "
                 f"dropout of the probabilities may make att random, and "
                 f"only in train mode.",
                 *([] if rate else ["dropout_misplaced"]))
    step = value_step(case, off_probs, off)
    if step is None and values_earned(task2):
        fail(f"On {case.describe()} att is not the returned probs times "
             f"the values (with mix), though it is on the other cases: "
             f"the effect of dropout on att cannot be judged. Return the "
             f"probs whose dropout weights the values.",
             "dropout_misplaced")
    for p in dropout_rates(task2):
        _, evaluated, _ = dropout_att(task2, f"dropout-eval:{p:g}")
        drawn = []
        for draw in range(DROPOUT_DRAWS):
            _, att, probs = dropout_att(task2, f"dropout-train:{p:g}:{draw}")
            if close(att, evaluated):
                fail(f"With dropout={p:g} in train mode the returned probs "
                     f"are dropped but att is the same as in eval mode: "
                     f"the dropped probabilities never weight the values. "
                     f"Apply self.dropout to probs and multiply those "
                     f"probs by the values.", "dropout_misplaced")
            wanted = step(probs) if step is not None else []
            if step is not None and not any(close(att, want)
                                            for want in wanted):
                error = f" ({max_error(att, wanted[0])})" if wanted else ""
                fail(f"With dropout={p:g} in train mode att is not the "
                     f"returned (dropped) probs times the values{error}: "
                     f"the randomness of att is not the dropout of the "
                     f"probabilities. Apply self.dropout to probs, then "
                     f"multiply those probs by the values.",
                     "dropout_misplaced")
            drawn.append(att)
        if all(close(att, drawn[0]) for att in drawn[1:]):
            fail(f"With dropout={p:g} in train mode att is the same under "
                 f"different random seeds: the randomness of dropout does "
                 f"not reach the output.", "dropout_misplaced")
