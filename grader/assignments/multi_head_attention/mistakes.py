"""Known mistakes, reproduced, so that a failing item can say what is wrong.

Each function computes what a submission with one classic mistake would return
on a case, from what torch's own (forbidden) attention kernels compute: scores
are read off ``scaled_dot_product_attention`` and the head layout off
``multi_head_attention_forward`` (:mod:`grader.assignments.attention`), so
nothing here can be handed in (docs/threat-model.md, principle 10);
:func:`matching` reports which variants a student's output equals. The scale a
submission used is recovered from its output (:func:`fit_scale_output`) or, for
probabilities, in closed form (:func:`fit_scale_probs`), which tells
``no_scaling`` (scale 1) from ``wrong_scale`` (any other wrong constant).

Mistakes with many spellings are recognised by what they do to the
output, not by enumerating code: probabilities that are the reference's
``[seq, seq]`` blocks in another order (:func:`block_order`, head_order),
blocks that are single-head attention over the full ``hidden`` width
(:func:`full_width_blocks`, heads_not_split), an output whose values
before ``mix`` are the reference's, moved (:func:`moved_values`,
merge_wrong_axes), and a causal mask that hides the past
(:func:`hides_past`, mask_inverted).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from grader.api import ATOL, RTOL, Case, close, fit_log_scale
from grader.assignments import attention
from grader.assignments.multi_head_attention import reference


# What depends on a case alone, computed once per case and process (a
# submission's checks ask for the same case's float64 copy and heads tens
# of times): id(case) -> (case, value); the case is kept, so that its id
# stays its own. Nothing here writes into a tensor it is given or gets.
_FLOAT64: dict[int, tuple[Case, tuple]] = {}
_HEADS: dict[tuple[int, bool, bool], tuple[Case, dict]] = {}
_KEPT = 256  # entries at most (a process that grades many plans)


def _remembered(table: dict, key: object, case: Case,
                make: Callable[[], object]) -> object:
    """``make()``, once per ``key`` of ``table`` (while ``case`` lives)."""
    found = table.get(key)
    if found is None or found[0] is not case:
        if len(table) >= _KEPT:
            table.clear()
        found = table[key] = (case, make())
    return found[1]


def _float64(case: Case) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``case.float64()``, computed once per case (see _FLOAT64)."""
    x, weights = _remembered(_FLOAT64, id(case), case, case.float64)
    return x, dict(weights)


def _heads(case: Case, merge_transpose: bool = True,
           split_transpose: bool = True) -> dict[str, torch.Tensor]:
    """q, k, v as [batch * heads, seq, head_size] (optionally mis-split);
    computed once per case and layout (see _HEADS)."""
    def make() -> dict[str, torch.Tensor]:
        x, weights = _float64(case)
        bs, seq = x.shape[:2]
        heads = case.sizes["num_heads"]
        out = {}
        for name in "qkv":
            t = reference.project(x, weights, name)
            if split_transpose:
                t = attention.split_heads(t, heads)
            out[name] = t.reshape(bs * heads, seq, -1)
        return out

    return dict(_remembered(_HEADS, (id(case), merge_transpose,
                                     split_transpose), case, make))


def probs_variant(case: Case, *, scale: float | None = None,
                  softmax_dim: int = -1, split_transpose: bool = True,
                  causal: bool = False, diagonal: int = 1,
                  fill: float = float("-inf")) -> torch.Tensor:
    """Multi-head probabilities with one mistake (defaults: correct)."""
    parts = _heads(case, split_transpose=split_transpose)
    q, k = parts["q"], parts["k"]
    divisor = q.shape[-1] ** 0.5 if scale is None else scale
    scores = attention.kernel_scores(q, k, divisor)
    if causal:
        seq = scores.shape[-1]
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal)
        scores = scores.masked_fill(mask, fill)
    return torch.softmax(scores, dim=softmax_dim)


def output_variant(case: Case, *, probs: torch.Tensor | None = None,
                   split_transpose: bool = True,
                   merge_transpose: bool = True,
                   mix: bool = True) -> torch.Tensor:
    """Multi-head output from ``probs`` with a mistake in values/merge."""
    x, weights = _float64(case)
    bs, seq = x.shape[:2]
    heads = case.sizes["num_heads"]
    if probs is None:
        probs = probs_variant(case, split_transpose=split_transpose)
    v = _heads(case, split_transpose=split_transpose)["v"]
    att = probs @ v
    if merge_transpose:
        att = attention.merge_heads(att.reshape(bs, heads, seq, -1))
    att = att.reshape(bs, seq, -1)
    if mix:
        att = torch.nn.functional.linear(att, weights["mix.weight"],
                                         weights["mix.bias"])
    return att


def scale_in_other_steps(case: Case, student: torch.Tensor
                         ) -> tuple[list[str], float] | None:
    """A scale mistake behind a split or softmax mistake: the first of
    (heads split without transpose, softmax over the queries, both) under
    which some constant c gives ``student``, as (the ids of those steps,
    c); None when none does (the composites ``--pairs`` audits)."""
    for split, dim in ((False, -1), (True, -2), (False, -2)):
        parts = _heads(case, split_transpose=split)
        scores = attention.kernel_scores(parts["q"], parts["k"])
        probs = student
        if dim == -2:
            scores, probs = scores.transpose(1, 2), student.transpose(1, 2)
        c = softmax_scale(scores, probs)
        if c is not None:
            return ((["reshape_not_transpose"] if not split else [])
                    + (["softmax_dim"] if dim == -2 else [])), c
    return None


def self_attention_variant(case: Case, *, scale: float | None = None,
                           softmax_dim: int = -1) -> torch.Tensor:
    """SelfAttention's output with a scale or softmax-dimension mistake."""
    x, weights = _float64(case)
    q, k, v = (reference.project(x, weights, n) for n in "qkv")
    divisor = q.shape[-1] ** 0.5 if scale is None else scale
    probs = torch.softmax(attention.kernel_scores(q, k, divisor),
                          dim=softmax_dim)
    return probs @ v


def matching(student: torch.Tensor,
             variants: dict[str, Callable[[], torch.Tensor]]) -> list[str]:
    """The ids of the variants whose output equals ``student``."""
    found = []
    for mistake, compute in variants.items():
        try:
            if close(student, compute().float()):
                found.append(mistake)
        except RuntimeError:
            continue
    return found


def scale_candidates(sizes: dict[str, int]) -> dict[str, float]:
    """The size expressions a scale constant may equal, by name."""
    candidates = {"1": 1.0}
    for key in ("hidden", "input_size", "seq_len"):
        if key in sizes:
            candidates[key] = float(sizes[key])
            candidates[f"sqrt({key})"] = math.sqrt(sizes[key])
    if "num_heads" in sizes:
        head_size = sizes["hidden"] // sizes["num_heads"]
        candidates["head_size"] = float(head_size)
        candidates["sqrt(head_size)"] = math.sqrt(head_size)
        candidates["num_heads"] = float(sizes["num_heads"])
    return candidates


def name_scale(value: float, sizes: dict[str, int]) -> str:
    """Describe a scale constant by the size expression it equals."""
    return attention.name_scale(value, scale_candidates(sizes))


def softmax_scale(scores: torch.Tensor, student: torch.Tensor
                  ) -> float | None:
    """The constant c with softmax(scores / c) = student, if there is one.

    From log p_ij = s_ij / c - logsumexp_i, centering each row removes the
    normaliser: c = sum(s_c^2) / sum(s_c * log(p)_c). The fit is returned
    only when it reproduces the student's probabilities.
    """
    if tuple(scores.shape) != tuple(student.shape) or not torch.all(
            student > 0):
        return None
    logs = torch.log(student.double())
    s_c = scores - scores.mean(-1, keepdim=True)
    l_c = logs - logs.mean(-1, keepdim=True)
    denominator = (s_c * l_c).sum()
    if denominator.abs() < 1e-12:
        return None
    c = float((s_c ** 2).sum() / denominator)
    if not math.isfinite(c) or c <= 0:
        return None
    if close(student, torch.softmax(scores / c, dim=-1).float()):
        return c
    return None


def fit_scale_probs(case: Case, student: torch.Tensor,
                    causal: bool = False) -> float | None:
    """The constant c with softmax(q k^T / c) = student, if there is one
    (non-causal probabilities; see :func:`softmax_scale`)."""
    if causal:
        return None
    parts = _heads(case)
    return softmax_scale(attention.kernel_scores(parts["q"], parts["k"]),
                         student)


# --------------------------------------------------------------------------
# Mistakes recognised by what they do to the output


def _blocks_equal(student: torch.Tensor, reference: torch.Tensor
                  ) -> torch.Tensor:
    """[n, m] booleans: block i of ``student`` matches block j of
    ``reference`` (the rubric's tolerance, block by block)."""
    s = student.double().flatten(1)[:, None]
    r = reference.double().flatten(1)[None]
    within = (s - r).abs() <= ATOL + RTOL * r.abs()
    return within.all(-1)


def block_order(student: torch.Tensor, reference: torch.Tensor
                ) -> list[int] | None:
    """Which reference block each block of ``student`` is, when the
    student's blocks are exactly the reference's in some order.

    Both are ``[n, seq, seq]``; returns the reference index of every
    student block (a permutation), or None when some block matches no
    reference block or two match the same one.
    """
    if tuple(student.shape) != tuple(reference.shape):
        return None
    equal = _blocks_equal(student, reference)
    order = []
    for row in equal:
        found = torch.nonzero(row).flatten().tolist()
        if len(found) != 1:
            return None
        order.append(found[0])
    return order if len(set(order)) == len(order) else None


def describe_order(order: list[int], batch_size: int,
                   num_heads: int) -> str:
    """Words for a row order of probs: head-major, or some permutation."""
    head_major = [(i % batch_size) * num_heads + i // batch_size
                  for i in range(batch_size * num_heads)]
    if order == head_major:
        return ("they are ordered head-major (row i holds head "
                "i // batch_size of sequence i % batch_size)")
    wrong = sum(1 for i, j in enumerate(order) if i != j)
    return f"{wrong} of the {len(order)} rows are in another row's place"


def head_major_rows(student: torch.Tensor, batch_size: int,
                    num_heads: int) -> torch.Tensor:
    """``student``'s ``[seq, seq]`` blocks put back in batch-major order,
    read as head-major (row i holds head i // batch_size of sequence
    i % batch_size)."""
    rows = [(i % num_heads) * batch_size + i // num_heads
            for i in range(batch_size * num_heads)]
    return student[rows]


def full_width_scale(case: Case, student: torch.Tensor) -> float | None:
    """The scale constant of probabilities whose blocks are single-head
    attention over the full ``hidden`` width (:func:`full_width_blocks`):
    the first block's fit, or None."""
    x, weights = _float64(case)
    q, k = (reference.project(x, weights, n) for n in "qk")
    scores = attention.kernel_scores(q, k)
    seq = scores.shape[-1]
    if student.dim() < 3 or tuple(student.shape[-2:]) != (seq, seq):
        return None
    first = student.reshape(-1, seq, seq)[0]
    for full in scores:
        c = softmax_scale(full, first)
        if c is not None:
            return c
    return None


def equal_fill(probs: torch.Tensor) -> list[str]:
    """The mask mistakes a causal mask filled with 0 (not -inf) shows:
    in every row the masked positions share one probability > 0 (their
    scores were all set to 0). ``["mask_zero_fill"]`` when the future is
    so filled, with ``"mask_diagonal"`` when the current token is too,
    with ``"mask_inverted"`` when the past is filled instead, with
    ``"mask_sees_next"`` when the future after the next token is."""
    seq = probs.shape[-1]
    if seq < 3 or probs.dim() < 2 or probs.shape[-2] != seq:
        return []
    rows = probs.reshape(-1, seq, seq).double()
    # A row with one value everywhere (masked whole, with a finite fill)
    # says nothing about what the masked scores were set to.
    uniform = [bool(torch.allclose(rows[:, i], rows[:, i, :1].expand(
        -1, seq), rtol=RTOL, atol=ATOL)) for i in range(seq)]

    def filled(region: torch.Tensor, min_rows: int = 1) -> bool:
        judged = [i for i in range(seq)
                  if int(region[i].sum()) >= 2 and not uniform[i]]
        if len(judged) < min_rows:
            return False
        for i in judged:
            values = rows[:, i][:, region[i]]
            first = values[:, :1]
            if not (torch.all(values > 0) and torch.allclose(
                    values, first.expand_as(values), rtol=RTOL, atol=ATOL)):
                return False
        return True

    ones = torch.ones(seq, seq, dtype=torch.bool)
    if filled(ones.triu(0)):
        return ["mask_zero_fill", "mask_diagonal"]
    if filled(ones.triu(1)):
        return ["mask_zero_fill"]
    if filled(ones.tril(-1)):
        return ["mask_zero_fill", "mask_inverted"]
    # Two rows at least: a first row masked whole (mask_diagonal with a
    # finite fill) is uniform too.
    if filled(ones.triu(2), min_rows=2):
        return ["mask_zero_fill", "mask_sees_next"]
    return []


def full_width_blocks(case: Case, student: torch.Tensor,
                      over_queries: bool = False) -> bool:
    """True when every ``[seq, seq]`` block of ``student`` is single-head
    attention of one sequence over the full ``hidden`` width (the
    projections not split into heads), with any scale (``over_queries``:
    with the softmax over the queries, both transposed)."""
    x, weights = _float64(case)
    q, k = (reference.project(x, weights, n) for n in "qk")
    scores = attention.kernel_scores(q, k)    # [batch, seq, seq]
    if over_queries:
        scores, student = scores.transpose(1, 2), student.transpose(-1, -2)
    seq = scores.shape[-1]
    if student.dim() < 3 or tuple(student.shape[-2:]) != (seq, seq):
        return False
    for block in student.reshape(-1, seq, seq):
        if not any(softmax_scale(full, block) is not None
                   for full in scores):
            return False
    return True


def merged_heads(case: Case, split_transpose: bool = True) -> torch.Tensor:
    """The reference's per-head outputs merged to [batch, seq, hidden],
    before ``mix`` (``split_transpose=False``: heads split without the
    transpose)."""
    return output_variant(case, mix=False, split_transpose=split_transpose)


def moved_values(case: Case, student: torch.Tensor, mixed: bool = True,
                 split_transpose: bool = True) -> bool:
    """True when ``student`` is the reference output with the merged
    per-head values moved to other places (another batch, position or
    channel) before ``mix`` (``mixed=False``: with no ``mix`` at all;
    ``split_transpose=False``: per-head values of heads split without
    the transpose).

    The student's values before ``mix`` are recovered by solving the
    ``mix`` layer; pairing them with the reference's by rank gives the
    move, and the output rebuilt from the reference's values so moved
    must equal the student's (at the rubric's tolerance).
    """
    _, weights = _float64(case)
    merged = merged_heads(case, split_transpose)
    if tuple(student.shape) != tuple(merged.shape):
        return False
    weight, bias = weights["mix.weight"], weights["mix.bias"]
    values = student.double()
    if mixed:
        if torch.linalg.cond(weight) > 1e6:
            return False
        flat = (values - bias).reshape(-1, weight.shape[0])
        values = torch.linalg.solve(weight, flat.T).T.reshape(merged.shape)
    moved = torch.empty_like(merged).flatten()
    moved[torch.argsort(values.flatten())] = torch.sort(
        merged.flatten()).values
    moved = moved.reshape(merged.shape)
    rebuilt = F.linear(moved, weight, bias) if mixed else moved
    right = F.linear(merged, weight, bias) if mixed else merged
    return close(student, rebuilt.float()) and not close(rebuilt, right)


def hides_past(probs: torch.Tensor) -> bool:
    """True when causal probabilities hide the past and show the future:
    every row that is a distribution gives 0 to each j < i, and some row
    gives probability to a j > i (the mask inverted)."""
    seq = probs.shape[-1]
    if seq < 2 or probs.dim() < 2 or probs.shape[-2] != seq:
        return False
    rows = probs.reshape(-1, seq, seq)
    finite = torch.isfinite(rows).all(-1)           # [n, seq]
    past = torch.ones(seq, seq, dtype=torch.bool).tril(-1)
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    judged = finite[..., None] & past
    seen = finite[..., None] & future
    return bool(torch.all(rows[judged] == 0)
                and torch.any(rows[seen] > 0))


# --------------------------------------------------------------------------
# Sizes written as numbers


def shapes_fit(value: object, shapes: list[tuple[int, ...]]) -> bool:
    """True when a returned value is the tensor (or tuple of tensors) of
    the expected shapes."""
    if value is None:
        return False
    items = [value] if len(shapes) == 1 else list(
        getattr(value, "items", ()))
    if len(shapes) > 1 and (getattr(value, "kind", "") not in
                            ("tuple", "list") or len(items) != len(shapes)):
        return False
    return all(getattr(item, "kind", "") == "tensor"
               and tuple(item.shape or ()) == tuple(shape)
               for item, shape in zip(items, shapes))


def size_dependence(run: object, suffix: str,
                    shapes: Callable[[Case], list[tuple[int, ...]]]
                    ) -> tuple[list[str], str]:
    """``hardcoded_size`` when the code runs on a public case but raises
    or returns the wrong shape once a single size of it changes.

    ``run`` is the task's :class:`~grader.run.observe.TaskRun`; its
    ``size:<public case>:<dimension><suffix>`` probes are the public case
    ("same") and copies with one dimension changed; ``shapes`` gives the
    contract shapes of a case's return value.
    """
    def fits(probe_id: str) -> bool:
        result = run.results.get(probe_id)
        return (result is not None and result.ok
                and shapes_fit(result.value, shapes(result.info.case)))

    for probe_id in run.probe_ids("size:"):
        if not probe_id.endswith(f":same{suffix}") or not fits(probe_id):
            continue
        base = probe_id[:-len(f"same{suffix}")]
        public = run.results[probe_id].info.case
        broken = []
        for other in run.probe_ids(base):
            if other.endswith(suffix) and other != probe_id \
                    and not fits(other):
                key = other[len(base):-len(suffix) or None]
                changed = run.results[other]
                old = _size_of(public.sizes, key)
                new = _size_of(changed.info.case.sizes, key)
                how = (changed.problem if not changed.ok
                       else "it returns the wrong shape")
                broken.append((f"{key} ({old} -> {new})", how))
        if broken:
            keys = " or ".join(k for k, _ in broken)
            return ["hardcoded_size"], (
                f"The code runs on {public.describe()} but fails when only "
                f"{keys} changes (first: {broken[0][1]}): a size is "
                f"written as a number; read it from x.shape or the "
                f"module's attributes.")
    return [], ""


def _size_of(sizes: dict[str, int], key: str) -> int:
    if key == "head_size":
        return sizes["hidden"] // sizes["num_heads"]
    return sizes[key]


def fit_scale_output(case: Case, student: torch.Tensor,
                     softmax_dim: int = -1) -> float | None:
    """The constant c for which SelfAttention's output (with the softmax
    over ``softmax_dim``) equals ``student``.

    A golden-section search on log c over [1e-2, 1e3] of the squared error;
    returned only when the output at c matches the student's.
    """
    def error(scale: float) -> float:
        variant = self_attention_variant(case, scale=scale,
                                         softmax_dim=softmax_dim)
        return float(((variant - student.double()) ** 2).sum())

    c = fit_log_scale(error)
    if close(student, self_attention_variant(
            case, scale=c, softmax_dim=softmax_dim).float()):
        return c
    return None


def scale_diagnosis(c: float | None, expected: float,
                    sizes: dict[str, int]) -> tuple[list[str], str]:
    """Ids and words for a recovered scale constant."""
    return attention.scale_diagnosis(c, expected, scale_candidates(sizes))
