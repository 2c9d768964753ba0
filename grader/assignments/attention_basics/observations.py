"""Reading this assignment's observations: what every task's checks share.

The checks (``checks/test_task*.py``) are pytest tests of observations;
this module holds the steps they have in common: the output of a probe as
a tensor of the expected shape, the structure a ``describe`` probe saw,
the lecture's seeded construction and the properties of dropout. Each
fails with a message for the student and the ids of the known mistakes
that explain the failure.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from grader.api import (Case, TaskRun, close, fail, fail_probes, failure_of,
                        max_error, require_ran, share_outside, tensor_of)
from grader.assignments.attention import MaskWords, mask_dependence
from grader.assignments.attention_basics import mistakes, reference
from grader.assignments.attention_basics.cases import (ANSWERS,
                                                       DROPOUT_DRAWS, EQUAL,
                                                       FIXED_RATE,
                                                       LONG_CONTEXT, PER_HEAD,
                                                       RESEEDED, SEEDED,
                                                       TARGETS,
                                                       has_bias, init_of)

MEANINGS = {
    "task1": "[num_tokens, d_in]",
    "task2": "[num_tokens, d_out]",
    "task3": "[num_tokens, d_out]",
    "task4": "[batch_size, num_tokens, d_out]",
    "task5": "[batch_size, num_tokens, num_heads * d_out]",
    "task6": "[batch_size, num_tokens, d_out]",
    "task7": "[batch_size, num_tokens, d_model]",
}
# How an ``exact:`` probe is named from its ``values:`` probe's case.
EXACT = "exact:{}-exact"


def output_shape(task: str, sizes: dict[str, int]) -> tuple[int, ...]:
    """The shape ``task``'s function or forward returns for ``sizes``."""
    if task == "task1":
        return sizes["num_tokens"], sizes["d_in"]
    if task in ("task2", "task3"):
        return sizes["num_tokens"], sizes["d_out"]
    width = sizes["d_out"] * (sizes["num_heads"] if task == "task5" else 1)
    return sizes["batch_size"], sizes["num_tokens"], width


def name_of(run: TaskRun, probe_id: str) -> str:
    """How a report names the call a probe made."""
    info = run.result(probe_id).info
    target = info.target
    if target != "simple_self_attention":
        target += ".forward"
    dropout = info.params.get("dropout", 0.0)
    if info.train:
        target += f" in training mode (dropout={dropout:g})"
    elif dropout:
        target += f" in eval mode (dropout={dropout:g})"
    if info.params.get("causal", False):
        target += " with a causal mask"
    elif probe_id.split(":")[0].endswith("padding") and PER_HEAD in (
            info.case.name if info.case else ""):
        target += (" with a mask [batch_size, num_heads, num_tokens, "
                   "num_tokens] (0/-inf, its own per sequence and head)")
    elif probe_id.split(":")[0].endswith("padding"):
        target += (" with a padding mask (0/-inf, hiding the last keys of"
                   " some sequences)")
    return target


def output(run: TaskRun, probe_id: str, task: str | None = None,
           on_error: Callable[[], list[str]] | None = None
           ) -> tuple[Case, torch.Tensor]:
    """A probe's output, checked to be a float tensor of the right shape.

    ``on_error`` names the known mistakes that explain a probe that raised.
    """
    task = task or run.task
    what = name_of(run, probe_id)
    if run.import_error:
        fail(f"Not graded: {run.import_error}")
    result = run.result(probe_id)
    case = result.info.case
    if not result.ok:
        ids = on_error() if on_error and result.error else []
        found = failure_of(run, probe_id, what)
        fail_probes([found] if found else [], *ids)
    shape = output_shape(task, case.sizes)
    return case, tensor_of(result.value, f"The output of {what}", shape,
                           MEANINGS[task], case)


def optional_output(run: TaskRun, probe_id: str, task: str | None = None
                    ) -> torch.Tensor | None:
    """A probe's output if it is usable, else None (never fails)."""
    if probe_id not in run.results:
        return None
    try:
        return output(run, probe_id, task)[1]
    except AssertionError:
        return None


def mask_not_sliced(run: TaskRun, case: Case,
                    expected: Callable[[Case], torch.Tensor] | None = None,
                    diagnose: Callable[[Case, torch.Tensor],
                                       tuple[list[str], str]] | None = None
                    ) -> list[str]:
    """["mask_not_sliced"] when the same case runs with context_length =
    num_tokens: the mask buffer is used at its full size. With
    ``expected`` and ``diagnose``, also the mistakes that run shows (a
    second mistake behind the unsliced mask)."""
    exact = EXACT.format(case.name)
    if exact not in run.results or not run.result(exact).ok:
        return []
    found = ["mask_not_sliced"]
    student = optional_output(run, exact)
    if student is not None and expected is not None and diagnose is not None:
        right = run.case(exact)
        if not close(student, expected(right)):
            found += diagnose(right, student)[0]
    return found


def compare(run: TaskRun, prefix: str,
            expected: Callable[[Case], torch.Tensor],
            diagnose: Callable[[Case, torch.Tensor],
                               tuple[list[str], str]],
            on_error: Callable[[Case], list[str]] | None = None) -> None:
    """Every ``prefix`` probe's output equals ``expected(case)``.

    Probes that raised the same way are reported once, with their number.
    """
    probe_ids = run.probe_ids(prefix)
    failed = [p for p in probe_ids if not run.result(p).ok]
    if failed:
        first = run.result(failed[0])
        ids = (on_error(first.info.case) if on_error and first.error
               else [])
        require_ran(run, probe_ids, name_of(run, failed[0]), *ids)
    for probe_id in probe_ids:
        case = run.case(probe_id)
        handler = (lambda c=case: on_error(c)) if on_error else None
        _, student = output(run, probe_id, on_error=handler)
        want = expected(case)
        if not close(student, want):
            ids, words = diagnose(case, student)
            what = name_of(run, probe_id)
            fail(f"The output of {what} on {case.describe()} "
                 f"does not match the reference "
                 f"({max_error(student, want)}). {words}".rstrip(), *ids)


def at_every_call(run: TaskRun,
                  expected: Callable[[Case], torch.Tensor]) -> None:
    """The module right at every call (red team 10, R2): each
    ``longer:<case>-longer`` probe calls again the module the ``values:``
    probe of ``<case>`` built, on an input as long as its context
    (longer than the first), and must match the reference. Judged where
    the first call does (else ``values:`` has failed already)."""
    for probe_id in run.probe_ids("longer:"):
        first = probe_id.removeprefix("longer:").removesuffix("-longer")
        start = optional_output(run, f"values:{first}")
        if start is None or not close(start,
                                      expected(run.case(f"values:{first}"))):
            continue
        case, result = run.case(probe_id), run.result(probe_id)
        where = (f"the same module called again (built once, first called "
                 f"on {run.case(f'values:{first}').describe()}), on an "
                 f"input of {case.sizes['num_tokens']} tokens, as long as "
                 f"its context_length")
        advice = ("A module must be right at every call: slice the mask "
                  "buffer registered in __init__ to each input's "
                  "num_tokens, never keep what the first call made.")
        if not result.ok:
            fail(f"{name_of(run, probe_id)} runs on its first input but "
                 f"raises on {where} ({result.problem}). {advice}")
        student = optional_output(run, probe_id)
        want = expected(case)
        if student is None or not close(student, want):
            error = (f" ({max_error(student, want)})" if student is not None
                     else "")
            fail(f"The output of {name_of(run, probe_id)} matches the "
                 f"reference on its first input but not on "
                 f"{where}{error}. {advice}")


#: A variant of the task's output: the case and a known mistake's keyword
#: arguments (``mistakes.single_variant`` / ``multi_variant``).
Variant = Callable[..., torch.Tensor]


def positions_only(run: TaskRun, expected: Callable[[Case], torch.Tensor],
                   variant: Variant | None = None,
                   known: tuple[dict, ...] = ()) -> None:
    """The causal mask depends on positions only (RUBRIC, "Readings
    settled in use"): each ``equal:`` probe (a ``values:`` case with zero
    W_query weights, every score 0) gives what the same code gives with
    random scores, where token i averages the values of tokens 0..i.
    Judged where the random-score output of the same case is the
    reference's, or (``variant``) that of one of the ``known`` mistakes
    that leave the mask alone (with any scale): then the equal-score
    output must be that same computation's. Code that fails here hides
    the future on random scores but not when the scores are equal: its
    mask is read from the score values (``mask_from_scores``)."""
    for probe_id in run.probe_ids("equal:"):
        case = run.case(probe_id)
        base = case.name.removesuffix(EQUAL)
        random = optional_output(run, f"values:{base}")
        if random is None:
            continue
        want = _same_computation(random, run.case(f"values:{base}"), case,
                                 expected, variant, known)
        if want is None:
            continue
        where = (f"{name_of(run, probe_id)} on {case.describe()} with zero "
                 f"W_query weights (every score equal)")
        result = run.result(probe_id)
        if not result.ok:
            fail(f"{where} fails ({result.problem}), though it runs "
                 f"with random weights: the mask is computed from the "
                 f"score values. Build it from the positions alone "
                 f"(the mask buffer).", "mask_from_scores")
        student = output(run, probe_id)[1]
        if not mistakes.same(student, want):
            fail(f"The output of {where} does not match the reference "
                 f"({max_error(student, want)}), though it does with "
                 f"random weights (up to the mistakes named here): "
                 f"token i must average the values of tokens 0..i, and "
                 f"the mask hides the future only when the scores are "
                 f"not equal, so it is computed from the score values "
                 f"(e.g. attn_scores.triu(1) != 0). Build it from the "
                 f"positions alone: the mask buffer, "
                 f"self.mask.bool()[:num_tokens, :num_tokens].",
                 "mask_from_scores")


def _same_computation(random: torch.Tensor, base: Case, equal: Case,
                      expected: Callable[[Case], torch.Tensor],
                      variant: Variant | None, known: tuple[dict, ...]
                      ) -> torch.Tensor | None:
    """What the computation behind ``random`` (the output on ``base``)
    gives on ``equal``: the reference's, or a known mask-free mistake's
    (at the scale it used); None when neither explains ``random``."""
    if close(random, expected(base)):
        return expected(equal)
    if variant is None:
        return None
    for kwargs in known:
        if mistakes.same(random, variant(base, **kwargs)):
            return variant(equal, **kwargs)
        scale = mistakes.fit_scale(
            lambda c, k=kwargs: variant(base, scale=c, **k), random)
        if scale is not None:
            return variant(equal, scale=scale, **kwargs)
    return None


def seeded(run: TaskRun, expected: Callable[[Case], torch.Tensor],
           alternative: Callable[[Case], torch.Tensor | None] | None = None,
           diagnose: Callable[[Case, torch.Tensor],
                              tuple[list[str], str]] | None = None) -> None:
    """The lecture's construction after its manual_seed gives its numbers.

    ``alternative`` (the wrapper) is a second acceptable output. With
    ``diagnose``, ``init_order`` is also named behind another mistake: the
    loaded weights show a known mistake that the seeded output does not.
    The ``-reseeded`` probe (red team 13, a01) is the same construction
    after a torch seed derived from the grading seed: it must give the
    numbers the documented construction gives there (weights drawn from
    a generator of the module's own, seeded like the lecture, do not).
    It is judged where the lecture's construction gives the reference's
    numbers (an ``alternative`` output, or a failure, is judged there).
    """
    target = TARGETS[run.task]
    for probe_id in run.probe_ids("seeded:"):
        case = run.case(probe_id)
        built = (f"torch.manual_seed({SEEDED[run.task][0]}); "
                 f"{target}({_init_args(run, probe_id)})")
        if probe_id.endswith(RESEEDED):
            lecture = probe_id.removesuffix(RESEEDED)
            first = optional_output(run, lecture)
            if first is None or not close(first,
                                          expected(run.case(lecture))):
                continue
            _, student = output(run, probe_id)
            want = expected(case)
            if not close(student, want):
                fail(f"{target}({_init_args(run, probe_id)}) {case.variant}"
                     f" does not give the numbers the documented "
                     f"construction gives under that seed "
                     f"({max_error(student, want)}), though it gives the "
                     f"lecture's numbers after torch.manual_seed("
                     f"{SEEDED[run.task][0]}): create the parameters from "
                     f"torch's global random state (torch.rand, nn.Linear), "
                     f"never from a generator of your own.")
            continue
        base = probe_id.removesuffix("-long")
        if probe_id != base and not run.result(probe_id).ok \
                and run.result(base).ok:
            fail(f"{built} fails on the lecture's input, which is shorter "
                 f"than context_length ({run.result(probe_id).problem}), "
                 f"but works when context_length equals its length.",
                 "mask_not_sliced")
        _, student = output(run, probe_id)
        want = expected(case)
        other = alternative(case) if alternative else None
        if close(student, want) or (other is not None
                                    and mistakes.same(student, other)):
            continue
        ids, hint = [], ""
        loaded = optional_output(run, f"values:{case.name}")
        if loaded is not None and (close(loaded, want) or (
                other is not None and mistakes.same(loaded, other))):
            ids = ["init_order"]
            hint = (" With the same weights loaded into its parameters "
                    "it computes the right numbers, so the parameters "
                    "are not created (or initialised) as the docstring "
                    "says.")
        elif loaded is not None and diagnose is not None \
                and diagnose(case, loaded)[0] \
                and not diagnose(case, student)[0]:
            ids = ["init_order"]
            hint = (" With the same weights loaded into its parameters "
                    "it shows a known mistake (named on this item), but "
                    "this output does not: the parameters are also not "
                    "created (or initialised) as the docstring says.")
        fail(f"{built} on the lecture's input does not give the lecture's "
             f"numbers ({max_error(student, want)}).{hint}", *ids)


def _init_args(run: TaskRun, probe_id: str) -> str:
    """The constructor arguments of a seeded probe, as Python text."""
    s = run.case(probe_id).sizes
    if probe_id.endswith("-long"):
        s = {**s, "context_length": LONG_CONTEXT}
    return ", ".join(repr(a) for a in init_of(run.task, s)["args"])


# --------------------------------------------------------------------------
# Structure


def described(run: TaskRun, probe_id: str) -> tuple[Case, dict]:
    """What a ``describe`` probe saw of the module it built."""
    if run.import_error:
        fail(f"Not graded: {run.import_error}")
    result = run.result(probe_id)
    case = result.info.case
    target = result.info.target
    if not result.ok:
        fail(f"{target}(...) with the sizes of {case.describe()} could not "
             f"be built: {result.problem}")
    info = result.describe or {}
    if not info.get("is_module"):
        fail(f"{target}(...) is not an nn.Module: call super().__init__() "
             f"first in __init__.")
    return case, info


def expect_linear(info: dict, name: str, target: str, sizes: tuple[int, int],
                  bias: bool, meaning: str) -> None:
    """Child ``name`` is an nn.Linear(*sizes, bias=bias)."""
    layer = info.get("children", {}).get(name)
    if layer is None:
        fail(f"{target} has no layer named '{name}': create self.{name} = "
             f"nn.Linear({meaning}).")
    if not layer.get("is_linear"):
        fail(f"self.{name} of {target} is a {layer.get('type')}; it should "
             f"be nn.Linear({meaning}).")
    got = (layer["in_features"], layer["out_features"])
    if got != tuple(sizes):
        fail(f"self.{name} of {target} maps {got[0]} -> {got[1]} features; "
             f"nn.Linear({meaning}) maps {sizes[0]} -> {sizes[1]} here.")
    if bool(layer.get("bias")) != bias:
        has = "has a" if layer.get("bias") else "has no"
        fail(f"self.{name} of {target} {has} bias; nn.Linear({meaning}) "
             f"{'has' if bias else 'has none'} here.")


def expect_projections(info: dict, case: Case, target: str) -> None:
    """W_query, W_key, W_value = nn.Linear(d_in, d_out, bias=qkv_bias)."""
    s = case.sizes
    for name in ("W_query", "W_key", "W_value"):
        expect_linear(info, name, target, (s["d_in"], s["d_out"]),
                      has_bias(case), "d_in, d_out, bias=qkv_bias")


def expect_mask_buffer(info: dict, case: Case, target: str) -> None:
    """A buffer ``mask`` of shape [context_length, context_length]."""
    n = case.sizes["context_length"]
    buffers = info.get("buffers", {})
    if "mask" not in buffers:
        where = ("it is an nn.Parameter" if "mask" in
                 info.get("parameters", {}) else "it is not a buffer")
        fail(f"{target} has no buffer named 'mask' ({where}; buffers: "
             f"{', '.join(buffers) or 'none'}).", "mask_not_buffer")
    if list(buffers["mask"]) != [n, n]:
        fail(f"{target}'s mask buffer has shape {buffers['mask']}; with "
             f"context_length={n} it should be [{n}, {n}] = "
             f"[context_length, context_length].")


# --------------------------------------------------------------------------
# Dropout


def dropout(run: TaskRun) -> None:
    """Dropout acts on the attention weights, only in training, at random.

    On the ``dropout`` case the attention weights are read back from the
    output (:func:`mistakes.recover_weights`): in eval mode dropout
    changes nothing, nor does training at dropout 0 (``dropout-zero:``);
    in training, at each rate p (0.5 and a rate drawn from the seed),
    each weight a_ij (j <= i) becomes 0 or a_ij / (1 - p), the output is
    still those weights times the value vectors, calls under different
    seeds drop different weights, and the share of zeros lies within the
    bounds a correct dropout cannot miss (:func:`share_bounds`, at least
    the rubric's 30-70% at p = 0.5), and each weight is dropped on its
    own (no mask shared by two heads or sequences, no whole rows or
    columns, no kind of position spared: :func:`mask_dependence`). The
    weights are read in the heads' layout of the code's own output
    (:func:`mistakes.weights_layout`). Tokens whose eval output is not
    finite (a mask that hides the diagonal gives token 0 NaN) are left
    out, so a mistake judged by another item does not cost this one.
    Then the same at the sizes people use, where the output does not
    determine the weights (:func:`_narrow`).
    """
    task = run.task
    case, off = output(run, "dropout-off")
    split, merge = mistakes.weights_layout(off, case, task)
    values = mistakes.dropout_values(case, task, split)
    base_out = mistakes.merged_output(off, case, task, merge)
    rows = torch.isfinite(base_out).all(-1)  # the tokens judged
    base, residual = mistakes.recover_weights(base_out, values, rows)
    if not rows.any() or residual > 1e-4:
        fail("Dropout could not be judged: with dropout=0 the output is not "
             "a mix of the value vectors (attention weights times values "
             "computed with W_value).")
    for probe_id in run.probe_ids("dropout-zero:"):
        _, trained = output(run, probe_id)
        if not mistakes.same(trained, off):
            fail(f"In training mode the output of a model with dropout=0 "
                 f"differs from its output in eval mode "
                 f"({max_error(trained, off)}): a module built with "
                 f"dropout=0 must never drop. Use nn.Dropout(dropout), "
                 f"the rate passed to __init__.")
    n = base.shape[-1]
    judged = torch.ones(n, n, dtype=torch.bool).tril() & rows[..., None]
    for p in dropout_rates(run):
        masks = _dropped(run, p, off, values, rows, base, judged, merge)
        if all(torch.equal(mask, masks[0]) for mask in masks[1:]):
            fail(f"In training mode (dropout={p:g}) two calls of the "
                 f"same module under different random seeds drop exactly "
                 f"the same attention weights: dropout must draw a new "
                 f"mask at every call. Use self.dropout (an nn.Dropout); "
                 f"do not keep a mask from an earlier call, fix the "
                 f"pattern or seed the generator yourself.")
        weighed = judged & (base.abs() > 1e-4)
        outside = share_outside(p, torch.cat([mask[weighed]
                                              for mask in masks]),
                                RUBRIC_SHARE.get(p))
        if outside is not None:
            share, low, high = outside
            fail(f"In training mode (dropout={p:g}) the output drops "
                 f"{share:.1%} of the attention weights; expected between "
                 f"{low:.1%} and {high:.1%}: the share must follow p (use "
                 f"nn.Dropout(dropout), the rate passed to __init__).")
        problem = mask_dependence(_blocks(weighed, n),
                                  [_blocks(mask, n) for mask in masks], p,
                                  MASK_WORDS)
        if problem:
            fail(problem)
    _narrow(run)


# A row of a training call at the narrow case is dropout on the weights
# when some way of dropping them comes this close (relative to the
# output's scale; float32 rounding is about 1e-6).
NARROW_TOLERANCE = 1e-4
# The weights whose fate is judged at the narrow case (the share of zeros,
# the independence tests): those large enough that keeping or dropping
# them moves the row ten times more than the tolerance.
NARROW_WEIGHED = 1e-3


def _reference(case: Case, task: str) -> torch.Tensor:
    """A dropout case's expected output in eval mode (float64)."""
    x, weights = case.float64()
    return ANSWERS[TARGETS[task]](x, weights, case.sizes)


def _narrow(run: TaskRun) -> None:
    """Dropout at the sizes people use (red team 14, a05): on the narrow
    case (head_dim and d_in smaller than num_tokens,
    :func:`cases.narrow_dropout_case`) the output does not determine
    the weights, so each causal row of a training call is read by
    trying every way to drop its weights (:func:`mistakes.row_fates`):
    some way must give the row, the calls must drop different weights,
    the share dropped must follow p, and each weight must be dropped on
    its own (:func:`mask_dependence`, as at the other case). Judged
    when the eval output there is the reference's (a forward wrong there
    is judged by the values items); when it is not, but it is at the
    other dropout case, dropout cannot be judged and earns nothing."""
    task = run.task
    probes = run.probe_ids("narrow-train:")
    if not probes:
        return  # a public-only grade: the narrow case is hidden
    case, off = output(run, "narrow-off")
    if not mistakes.same(off, _reference(case, task)):
        main, main_off = output(run, "dropout-off")
        if mistakes.same(main_off, _reference(main, task)):
            fail(f"Dropout could not be judged: with dropout=0 in eval "
                 f"mode the output at {case.describe()} does not match "
                 f"the reference, though it does at the case dropout is "
                 f"read at.")
        return
    x, case_weights = case.float64()
    weights = reference.causal_weights(x, case_weights,
                                       case.sizes.get("num_heads", 1))
    values = mistakes.dropout_values(case, task)
    n = weights.shape[-1]
    weighed = torch.ones(n, n, dtype=torch.bool).tril() & (
        weights > NARROW_WEIGHED)
    masks = []
    for probe_id in probes:
        p = run.result(probe_id).info.params["dropout"]
        seen = (f"In training mode (dropout={p:g}) at {case.describe()}, "
                f"whose heads are narrower than the sequence, the output")
        _, trained = output(run, probe_id)
        if mistakes.same(trained, off):
            fail(f"{seen} does not change: apply self.dropout to the "
                 f"attention weights at every size.")
        drop_out = mistakes.merged_output(trained, case, task)
        if not torch.isfinite(drop_out).all():
            fail(f"{seen} contains NaN or inf: dropout is applied before "
                 f"the softmax, to the masked scores.", "dropout_misplaced")
        dropped, error = mistakes.row_fates(drop_out, weights, values, p)
        if float(error.max()) > NARROW_TOLERANCE:
            fail(f"{seen} is not the attention weights times the value "
                 f"vectors with each weight dropped or kept and scaled by "
                 f"1 / (1 - p): dropout must act on the attention weights "
                 f"(after the softmax, before they weight the values) at "
                 f"every size, not on the values, the scores or the "
                 f"context vectors.", "dropout_misplaced")
        masks.append(dropped)
    if all(torch.equal(mask, masks[0]) for mask in masks[1:]):
        fail(f"In training mode (dropout={FIXED_RATE:g}) at "
             f"{case.describe()} two calls drop exactly the same attention "
             f"weights: dropout must draw a new mask at every call.")
    outside = share_outside(FIXED_RATE, torch.cat([
        mask[weighed.expand_as(mask)] for mask in masks]),
        RUBRIC_SHARE.get(FIXED_RATE))
    if outside is not None:
        share, low, high = outside
        fail(f"In training mode (dropout={FIXED_RATE:g}) at "
             f"{case.describe()} the output drops {share:.1%} of the "
             f"attention weights; expected between {low:.1%} and "
             f"{high:.1%}: the share must follow p at every size.")
    blocks = _blocks(weighed.expand_as(masks[0]), n)
    problem = mask_dependence(blocks, [_blocks(mask, n) for mask in masks],
                              FIXED_RATE, MASK_WORDS)
    if problem:
        fail(f"{problem} (case {case.describe()})")


# The rubric's range for the share of zeros at p = 0.5; other rates use
# the bounds a correct dropout cannot miss (checking.share_bounds).
RUBRIC_SHARE = {0.5: (0.3, 0.7)}
# Dropout drops each weight on its own (docs/threat-model.md, principle
# 5): the attention plug-ins' shared independence tests, in this
# homework's words.
MASK_WORDS = MaskWords(
    prefix="In training mode (dropout={p:g})",
    blocks="[num_tokens, num_tokens] blocks of attention weights",
    of="of the attention weights", weights="attention weights",
    advice="dropout must drop each attention weight on its own: apply "
           "self.dropout (an nn.Dropout) to attn_weights")


def dropout_rates(run: TaskRun) -> list[float]:
    """The rates p > 0 dropout is judged at, in the plan's order (0.5,
    then a rate drawn from the grading seed): those of the
    ``dropout-eval:<p>`` probes."""
    return [run.result(probe_id).info.params["dropout"]
            for probe_id in run.probe_ids("dropout-eval:")]


def _blocks(mask: torch.Tensor, n: int) -> torch.Tensor:
    """[..., n, n] (sequences, heads) as [blocks, n, n]."""
    return mask.reshape(-1, n, n)


def _dropped(run: TaskRun, p: float, off: torch.Tensor,
             values: torch.Tensor, rows: torch.Tensor, base: torch.Tensor,
             judged: torch.Tensor, merge: bool = True
             ) -> list[torch.Tensor]:
    """Judge one rate: eval mode unchanged, every training call drops
    weights as dropout does. Returns each call's mask of dropped weights
    [..., num_tokens, num_tokens] (True where dropped; ``merge``: the
    heads' merge layout of :func:`mistakes.weights_layout`)."""
    task = run.task
    case, evaluated = output(run, f"dropout-eval:{p:g}")
    if not mistakes.same(evaluated, off):
        fail(f"In eval mode (model.eval()) the output of a model with "
             f"dropout={p:g} differs from the same model with dropout=0 "
             f"({max_error(evaluated, off)}): dropout must act only in "
             f"training.", "dropout_in_eval")
    seen = f"In training mode (dropout={p:g}) the output"
    masks = []
    for draw in range(DROPOUT_DRAWS):
        _, trained = output(run, f"dropout-train:{p:g}:{draw}")
        if mistakes.same(trained, off):
            fail(f"With dropout={p:g} in training mode the output does "
                 f"not change: apply self.dropout to the attention "
                 f"weights.")
        drop_out = mistakes.merged_output(trained, case, task, merge)
        if not torch.isfinite(drop_out).all(-1)[rows].all():
            fail(f"{seen} contains NaN or inf: dropout is applied before "
                 f"the softmax, to the masked scores.", "dropout_misplaced")
        dropped, residual = mistakes.recover_weights(drop_out, values, rows)
        if residual > 1e-4:
            fail(f"{seen} is no longer the attention weights times the "
                 f"value vectors: dropout is applied to the values or to "
                 f"the output, not to the attention weights.",
                 "dropout_misplaced")
        zero = dropped.abs() <= 1e-4
        kept = torch.isclose(dropped, base / (1 - p), rtol=1e-3, atol=1e-4)
        if not torch.all((zero | kept)[judged]):
            ratios = (dropped / base)[judged & ~zero & (base.abs() > 1e-3)]
            scale = float(ratios.median()) if ratios.numel() else 0.0
            if ratios.numel() and torch.allclose(
                    ratios, torch.ones_like(ratios), rtol=1e-3):
                fail(f"{seen} keeps the attention weights it does not "
                     f"drop at their eval value: dropout must scale them "
                     f"by 1 / (1 - p) = {1 / (1 - p):.4g}, as nn.Dropout "
                     f"does, so that their expected value is unchanged. "
                     f"Use self.dropout.")
            if scale > 1 and torch.allclose(
                    ratios, torch.full_like(ratios, scale), rtol=1e-3):
                fail(f"{seen} scales the kept attention weights by "
                     f"{scale:.4g} = 1 / (1 - {1 - 1 / scale:.3g}), not "
                     f"by 1 / (1 - p) = {1 / (1 - p):.4g}: the dropout "
                     f"rate passed to __init__ is not the one used.")
            fail(f"{seen} uses attention weights that are neither 0 nor "
                 f"their eval value / (1 - p): dropout is not applied to "
                 f"the weights after the softmax (case "
                 f"{case.describe()}).", "dropout_misplaced")
        # Weights that are 0 without dropout (hidden by a mask) say
        # nothing about the rate: the caller leaves them out.
        masks.append(zero)
    return masks
