"""The inputs the grader runs a submission on, and what it asks for.

:func:`build` returns a :class:`~grader.plan.Plan`: for each task, the
probes the sandbox runs (construct this class with these sizes and weights,
call it on this input, in this mode) and, for the checks, the trusted case
behind every probe.

Cases: the public test values (``transformer_lm.test_values``) and, unless
``public_only``, hidden random cases derived from the grading seed. In a
hidden case every size (batch_size, seq_len, input_size, hidden, num_heads,
head_size) differs from its value in every public case, and no two of
them (nor batch_size * num_heads) are equal, so code that hard-codes a
public size, or reads one size for another, fails there.

Probes of task 2 (ids are prefixes the checks select on):

* ``probs:<case>``, ``causal:<case>``: ``forward(x, return_attention=True)``
  without and with ``causal=True``;
* ``probs:long``, ``causal:long`` (hidden): one sequence (batch_size
  1) of 20 to 36 tokens drawn from the seed, the other sizes small,
  without and with the mask: a mask wrong only past some length, or a
  ``.squeeze()`` that drops the batch, fails there;
* ``causal:<case>-equal-scores``: causal, with zero query weights and bias,
  so every score is 0: a mask built from the score values shows there;
* ``zero-qk:<case>``: zero query and key weights (uniform probabilities),
  for the value point when the scores are wrong;
* ``att-only:<case>``: ``forward(x)``; ``att-only-causal:<case>`` the
  same with ``causal=True`` and ``att-only-dropout-train:<p>:0`` in train
  mode under the seed of ``dropout-train:<p>:0`` (the mask and dropout
  reach forward(x) too);
* ``causal-train:<case>``: causal in train mode at p = 0 (the mask acts
  in training too);
* ``dropout-eval:<p>``, ``dropout-train:<p>:<draw>``: a hidden case large
  enough to measure a dropout rate, for two rates p (0.5, and one of
  ``SEEDED_RATES`` drawn from the grading seed) and two random seeds
  per rate; ``dropout-off`` and ``dropout-zero:<draw>``: the same case at
  p = 0 in eval and in train mode (the output dropout must leave alone).
  Per rate, the three probes call one object (``again``), so a mask
  drawn once and kept by the module shows as two equal draws;
* ``causal-dropout-train:<p>``: the dropout case with causal=True in
  train mode: the future stays 0 and the past is dropped at rate p;
* ``zero-v-dropout-eval:<p>``, ``zero-v-dropout-train:<p>``: the dropout
  case with zero value weights and bias, in eval and in train mode (one
  object): every value is 0, so whatever the probs and however the code
  weights the values with them, att is the same in both modes; noise
  added after the values were weighted shows there, even when the value
  step is one the grader does not know;
* ``size:<public case>:<dimension>:<probs|causal>``: the public sizes, and
  the public sizes with one dimension changed, so that a failure on the
  hidden cases can be traced to a size the code hard-codes; per public
  case and kind, ``same``, ``batch_size`` and ``seq_len`` (longer) call
  one object (``again``), so a causal mask kept from the first call fails;
* ``public-equal:<public case>``, ``public-dropout-eval``,
  ``public-dropout-train``: the first public case with every score equal
  (causal), and in eval and train mode with dropout 0.5, so that a mask
  read from the scores or a misplaced dropout is still named when a
  hard-coded size stops the hidden cases;
* ``trace:...``: forward under the rubric's size sets (shape comments).

Every random stream a submission can observe (inputs, weights, the torch
seed of a probe) is seeded with :func:`grader.plan.derive_seed`, a one-way
hash of the grading seed, so nothing a submission sees reveals the seed.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from grader.api import (ATOL, RTOL, Case, Plan, ProbeInfo, TwinInput,
                        derive_seed, probe, share_outside)
from grader.assignments.multi_head_attention import mistakes, reference

LAYERS_1 = ("q", "k", "v")
LAYERS_2 = ("q", "k", "v", "mix")
HIDDEN_CASES = 3
# Dropout is judged at two rates, each under two random seeds: the masks
# must differ between seeds and the share of zeros must follow p. The
# first rate is the rubric's 0.5; the second is drawn from the grading
# seed among SEEDED_RATES (red team 11, m03: with a fixed 0.2, code that
# dropped nothing below 0.2 kept the point). They stop below 0.2 (the old
# fixed rate, left out): above about 0.23 the rubric's 30-70% range at
# p = 0.5 no longer tells the two rates apart.
FIXED_RATE = 0.5
SEEDED_RATES = tuple(round(0.01 * i, 2) for i in range(5, 20))
DROPOUT_DRAWS = 2
# SelfAttention(input_size, hidden) built for task1.init.
INIT_SIZES = {"init": (7, 9), "init:other-sizes": (11, 6)}
# The sizes a hard-coded number could stand for, varied one at a time.
VARIED_1 = ("batch_size", "seq_len", "input_size", "hidden")
VARIED_2 = ("batch_size", "seq_len", "input_size", "num_heads",
            "head_size")
# The size: probes that share one object, in this order (the same init:
# only the input's batch_size or seq_len changes, seq_len to a longer one).
CHAINED = ("same", "batch_size", "seq_len")
# Where hidden sizes are drawn from (before the public values and equal
# sizes are excluded).
RANGES = {"batch_size": (2, 6), "seq_len": (3, 10), "input_size": (3, 13),
          "hidden": (3, 13), "num_heads": (2, 6), "head_size": (2, 7)}
DROPOUT_RANGES = {**RANGES, "batch_size": (4, 6), "seq_len": (10, 14),
                  "num_heads": (2, 5), "head_size": (2, 6)}
# The long case (red team 11, m04: no probe was longer than 14 tokens, so
# a mask wrong only past 16 tokens kept the point): one sequence
# (batch_size 1: red team 11, m06, a .squeeze() that drops the batch) of
# 20 to 36 tokens, with small other sizes (longer, an honest loop over
# token pairs, a flat score list, passes the per-statement reading bound
# MAX_READS and its comment fails closed).
LONG_RANGES = {"seq_len": (20, 36), "input_size": (3, 6), "num_heads": (2, 3),
               "head_size": (2, 4)}


def _stored_case(name: str, values: type, layers: tuple[str, ...]) -> Case:
    sizes = {key: getattr(values, key) for key in
             ("batch_size", "seq_len", "input_size", "hidden", "num_heads")
             if hasattr(values, key)}
    weights = {f"{layer}.{kind}": getattr(values, f"{layer}_{kind}")
               for layer in layers for kind in ("weight", "bias")}
    return Case(name=name, public=True, sizes=sizes, x=values.x,
                weights=weights)


def public_cases() -> dict[str, list[Case]]:
    """The public test values, per task."""
    from transformer_lm import test_values as tv

    return {
        "task1": [_stored_case("public", tv.SelfAttentionTestValues,
                               LAYERS_1)],
        "task2": [_stored_case("public", tv.MultiHeadAttentionTestValues,
                               LAYERS_2),
                  _stored_case("public-distinct",
                               tv.MultiHeadAttentionDistinctTestValues,
                               LAYERS_2)],
    }


def with_head_size(sizes: dict[str, int]) -> dict[str, int]:
    """``sizes`` with head_size = hidden // num_heads (when it has heads)."""
    if "num_heads" not in sizes:
        return dict(sizes)
    return {**sizes, "head_size": sizes["hidden"] // sizes["num_heads"]}


def public_values(task: str) -> dict[str, set[int]]:
    """Every value each size takes in the public cases of ``task``."""
    found: dict[str, set[int]] = {}
    for case in public_cases()[task]:
        for key, value in with_head_size(case.sizes).items():
            found.setdefault(key, set()).add(value)
    return found


def all_distinct(sizes: dict[str, int]) -> bool:
    """No two sizes (head_size and batch_size * num_heads included) are
    equal, so no size can stand in for another."""
    values = list(with_head_size(sizes).values())
    if "num_heads" in sizes:
        values.append(sizes["batch_size"] * sizes["num_heads"])
    return len(set(values)) == len(values)


def _distinct_sizes(rng: np.random.Generator, heads: bool,
                    ranges: dict[str, tuple[int, int]] = RANGES
                    ) -> dict[str, int]:
    """Sizes that differ from the public ones and from each other."""
    public = public_values("task2" if heads else "task1")

    def draw(key: str) -> int:
        low, high = ranges[key]
        while True:
            value = int(rng.integers(low, high + 1))
            if value not in public.get(key, ()):
                return value

    while True:
        sizes = {key: draw(key)
                 for key in ("batch_size", "seq_len", "input_size")}
        if heads:
            sizes["num_heads"] = draw("num_heads")
            sizes["hidden"] = sizes["num_heads"] * draw("head_size")
        else:
            sizes["hidden"] = draw("hidden")
        if sizes["hidden"] not in public["hidden"] and all_distinct(sizes):
            return sizes


def random_case(rng: np.random.Generator, name: str, sizes: dict,
                layers: tuple[str, ...]) -> Case:
    """Inputs ~ N(0, 1); weights ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    hidden = sizes["hidden"]
    weights = {}
    for layer in layers:
        fan_in = hidden if layer == "mix" else sizes["input_size"]
        bound = fan_in ** -0.5
        weights[f"{layer}.weight"] = torch.from_numpy(rng.uniform(
            -bound, bound, (hidden, fan_in)).astype(np.float32))
        weights[f"{layer}.bias"] = torch.from_numpy(rng.uniform(
            -bound, bound, (hidden,)).astype(np.float32))
    x = torch.from_numpy(rng.standard_normal(
        (sizes["batch_size"], sizes["seq_len"], sizes["input_size"])
    ).astype(np.float32))
    return Case(name=name, public=False, sizes=sizes, x=x, weights=weights)


def _rng(seed: int, *labels: object) -> np.random.Generator:
    """A generator for one stream, seeded one-way from the grading seed."""
    return np.random.default_rng(
        derive_seed(seed, "multi_head_attention", *labels))


def hidden_cases(seed: int) -> dict[str, list[Case]]:
    """Random cases derived from ``seed``, per task."""
    found = {}
    for task, layers in (("task1", LAYERS_1), ("task2", LAYERS_2)):
        rng = _rng(seed, "hidden", task)
        found[task] = [random_case(rng, f"hidden-{i}", _distinct_sizes(
            rng, task == "task2"), layers) for i in range(HIDDEN_CASES)]
    return found


def zeroed(case: Case, layers: tuple[str, ...], suffix: str,
           variant: str) -> Case:
    """The same case with the weights and biases of ``layers`` zero,
    named ``<case>-<suffix>`` and described ``variant``."""
    weights = dict(case.weights)
    for layer in layers:
        for name in (f"{layer}.weight", f"{layer}.bias"):
            weights[name] = torch.zeros_like(weights[name])
    return Case(name=f"{case.name}-{suffix}", public=case.public,
                sizes=case.sizes, x=case.x, weights=weights,
                shown=case.shown or case.name, variant=variant)


def zero_qk(case: Case) -> Case:
    """The same case with zero query and key weights and biases.

    Every score is then 0 and the probabilities are uniform whatever the
    score computation, so the value-and-mix step can be judged alone.
    """
    return zeroed(case, ("q", "k"), "zero-qk",
                  "with zero query and key weights")


def zero_values(case: Case) -> Case:
    """The same case with zero value weights and bias: every value is 0.

    The dropped probabilities then weight only zeros, so any value step
    gives the same att in train mode as in eval mode: randomness left in
    att is not the dropout of the probabilities.
    """
    return zeroed(case, ("v",), "zero-v", "with zero value weights")


def equal_scores(case: Case) -> Case:
    """The same case with zero query weights and bias: every score is 0.

    A causal mask built from positions still hides the future here; one
    built from the score values (``triu(scores, 1) != 0``) does not.
    """
    return zeroed(case, ("q",), "equal-scores",
                  "with every score equal, from zero query weights")


def dropout_case(seed: int) -> Case:
    """A hidden case large enough to measure a dropout rate.

    Its sizes follow the hidden cases' rules (none equals a public size),
    with at least 4 * 2 * 10 * 10 = 800 probabilities per call, so the
    bounds of :func:`grader.judge.checking.share_bounds` separate p = 0.2 from
    p = 0.5.
    """
    rng = _rng(seed, "dropout")
    return random_case(rng, "dropout", _distinct_sizes(
        rng, True, DROPOUT_RANGES), LAYERS_2)


def long_case(seed: int) -> Case:
    """The long case: one sequence of 20 to 36 tokens, the other sizes
    small and distinct, drawn from the seed."""
    rng = _rng(seed, "edge")

    def draw(key: str) -> int:
        low, high = LONG_RANGES[key]
        return int(rng.integers(low, high + 1))

    while True:
        heads = draw("num_heads")
        sizes = {"batch_size": 1, "seq_len": draw("seq_len"),
                 "input_size": draw("input_size"), "num_heads": heads,
                 "hidden": heads * draw("head_size")}
        values = list(with_head_size(sizes).values())[1:]
        if len(set(values)) == len(values) and sizes["hidden"] not in \
                public_values("task2")["hidden"]:
            break
    return random_case(rng, "long", sizes, LAYERS_2)


def vary(task: str, sizes: dict[str, int], key: str) -> dict[str, int]:
    """``sizes`` with only ``key`` changed, to the smallest larger value
    that no public case uses and that no other size equals (changing
    num_heads or head_size changes hidden with it)."""
    public = public_values(task)
    base = with_head_size(sizes)
    others = {value for name, value in base.items() if name != key}
    for value in range(base[key] + 1, base[key] + 40):
        if value in public.get(key, ()) or value in others:
            continue
        changed = {**base, key: value}
        if key in ("num_heads", "head_size"):
            changed["hidden"] = changed["num_heads"] * changed["head_size"]
        changed.pop("head_size", None)
        return changed
    raise ValueError(f"no other value of {key} for {sizes}")


def size_cases(seed: int, task: str) -> list[tuple[Case, str]]:
    """Each public case of ``task``, and copies with one size changed.

    Pairs (case, the dimension changed, "same" for none). A changed
    case has random weights drawn for its sizes.
    """
    layers = LAYERS_2 if task == "task2" else LAYERS_1
    keys = VARIED_2 if task == "task2" else VARIED_1
    found = []
    for public in public_cases()[task]:
        found.append((public, "same"))
        for key in keys:
            sizes = vary(task, public.sizes, key)
            rng = _rng(seed, "sizes", task, public.name, key)
            found.append((random_case(rng, f"{public.name}-{key}", sizes,
                                      layers), key))
    return found


def dropout_rates(seed: int) -> tuple[float, float]:
    """The two dropout rates judged: FIXED_RATE, then one of
    SEEDED_RATES drawn from a stream derived one-way from the seed."""
    rng = _rng(seed, "dropout", "rate")
    return FIXED_RATE, SEEDED_RATES[int(rng.integers(len(SEEDED_RATES)))]


def dropout_probe(p: float, draw: int | None) -> str:
    """The id of the dropout probe at rate ``p`` (0: ``dropout-off`` in
    eval mode, ``dropout-zero:<draw>`` in train mode), in eval mode
    (``draw`` None) or in train mode under random seed ``draw``."""
    if p == 0:
        return "dropout-off" if draw is None else f"dropout-zero:{draw}"
    return (f"dropout-eval:{p:g}" if draw is None
            else f"dropout-train:{p:g}:{draw}")


def _mha_init(case: Case, causal: bool = False,
              dropout: float = 0.0) -> dict:
    s = case.sizes
    return {"args": [s["input_size"], s["hidden"], s["num_heads"]],
            "kwargs": {"causal": causal, "dropout": dropout}}


def _task1_init(case: Case) -> dict:
    return {"args": [case.sizes["input_size"], case.sizes["hidden"]]}


def _attention(plan: Plan, probe_id: str, case: Case, causal: bool = False,
               again: bool = False, branch: str = "") -> None:
    """forward(x, return_attention=True) in eval mode (``again``: on the
    object the previous probe built; ``branch``: grader.plan.probe's)."""
    plan.add("task2", probe(
        probe_id, "MultiHeadSelfAttention", case=case, layers=LAYERS_2,
        init=_mha_init(case, causal), kwargs={"return_attention": True},
        params={"causal": causal}, again=again, branch=branch))


def _both_modes(plan: Plan, name: str, case: Case, seed: int) -> None:
    """``<name>-dropout-eval:<p>`` and ``<name>-dropout-train:<p>`` at
    FIXED_RATE on ``case``: one object, called in eval mode, then in
    train mode under a seed of its own (the rate's branch)."""
    p = FIXED_RATE
    for train in (False, True):
        plan.add("task2", probe(
            f"{name}-dropout-{'train' if train else 'eval'}:{p:g}",
            "MultiHeadSelfAttention", case=case, layers=LAYERS_2,
            init=_mha_init(case, dropout=p),
            kwargs={"return_attention": True}, train=train,
            seed=derive_seed(seed, "multi_head_attention", "dropout",
                             name, p), params={"dropout": p},
            again=train, branch=f"{p:g}"))


def _sizes(plan: Plan, found: list[tuple[Case, str]]) -> None:
    """The ``size:`` probes of task 2. Per public case and kind, the
    public sizes, then a larger batch_size, then a longer seq_len are one
    object called three times (their init is the same): a mask kept from
    the first call's length, or code right on the first call only, fails
    there (:func:`checks.test_task2.causal_across_calls`)."""
    groups: dict[str, list[tuple[Case, str]]] = {}
    for case, key in found:
        groups.setdefault(case.name.removesuffix("-" + key), []).append(
            (case, key))
    for base, group in groups.items():
        for causal in (False, True):
            kind = "causal" if causal else "probs"
            chained = [(c, k) for c, k in group if k in CHAINED]
            for index, (case, key) in enumerate(chained):
                _attention(plan, f"size:{base}:{key}:{kind}", case, causal,
                           again=index > 0, branch=kind)
        for case, key in group:
            if key not in CHAINED:
                for causal in (False, True):
                    kind = "causal" if causal else "probs"
                    _attention(plan, f"size:{base}:{key}:{kind}", case,
                               causal, branch=kind)


def build(seed: int, public_only: bool,
          size_sets: tuple[dict[str, int], ...]) -> Plan:
    """Every probe of both tasks, with the trusted case behind each."""
    plan = Plan()
    cases = public_cases()
    judged = cases if public_only else hidden_cases(seed)
    if not public_only:
        for task in cases:  # the public values are graded too (task 1)
            judged[task] = cases[task] + judged[task]

    # Task 1: SelfAttention.
    # Two sizes, so that hard-coded nn.Linear(7, 9) layers are caught.
    for name, sizes in INIT_SIZES.items():
        plan.add("task1", probe(name, "SelfAttention",
                                init={"args": list(sizes)}, describe=True))
    for case in judged["task1"]:
        plan.add("task1", probe(f"forward:{case.name}", "SelfAttention",
                                case=case, layers=LAYERS_1,
                                init=_task1_init(case)))
    if not public_only:
        for case, key in size_cases(seed, "task1"):
            plan.add("task1", probe(
                f"size:{case.name.removesuffix('-' + key)}:{key}",
                "SelfAttention", case=case, layers=LAYERS_1,
                init=_task1_init(case)))

    # Task 2: MultiHeadSelfAttention.
    task2 = [c for c in judged["task2"] if public_only or not c.public]
    for case in task2:
        _attention(plan, f"probs:{case.name}", case)
        _attention(plan, f"causal:{case.name}", case, causal=True)
        blank = zero_qk(case)
        plan.add("task2", probe(
            f"zero-qk:{case.name}", "MultiHeadSelfAttention", case=blank,
            layers=LAYERS_2, init=_mha_init(blank),
            kwargs={"return_attention": True}))
    for case in task2:   # after every plain causal probe
        equal = equal_scores(case)
        _attention(plan, f"causal:{equal.name}", equal, causal=True)
        # Compared with causal:<case> (mask_from_scores): in its autograd
        # mode (grader.plan.Plan.same_mode), as the pairs below.
        plan.same_mode("task2", f"causal:{equal.name}",
                       f"causal:{case.name}")
    if not public_only:
        # One long sequence, without and with the mask (red team 11, m04
        # and m06). One token (seq_len 1) is left out: there every mask
        # mistake and softmax_dim give the same probs, so its diagnoses
        # would add names the other cases rule out.
        long = long_case(seed)
        _attention(plan, f"probs:{long.name}", long)
        _attention(plan, f"causal:{long.name}", long, causal=True)
        # Dropout on the long sequence too, in both modes (red team 16:
        # no train-mode probe was longer than 14 tokens, so dropout only
        # when seq_len <= 16 kept the point).
        _both_modes(plan, "long", long, seed)
    first = task2[0]
    plan.add("task2", probe(f"att-only:{first.name}",
                            "MultiHeadSelfAttention", case=first,
                            layers=LAYERS_2, init=_mha_init(first)))
    # The mask in every mode and call (red team 9, U4 and U7): forward(x)
    # with causal=True, and causal in train mode at p = 0.
    plan.add("task2", probe(
        f"att-only-causal:{first.name}", "MultiHeadSelfAttention",
        case=first, layers=LAYERS_2, init=_mha_init(first, causal=True),
        params={"causal": True}))
    plan.add("task2", probe(
        f"causal-train:{first.name}", "MultiHeadSelfAttention", case=first,
        layers=LAYERS_2, init=_mha_init(first, causal=True),
        kwargs={"return_attention": True}, train=True,
        params={"causal": True}))
    plan.same_mode("task2", f"att-only:{first.name}", f"probs:{first.name}")
    for probe_id in (f"att-only-causal:{first.name}",
                     f"causal-train:{first.name}"):
        plan.same_mode("task2", probe_id, f"causal:{first.name}")
    drop = dropout_case(seed)
    for p in (0.0,) + dropout_rates(seed):
        for draw in (None,) + tuple(range(DROPOUT_DRAWS)):
            probe_id = dropout_probe(p, draw)
            plan.add("task2", probe(
                probe_id, "MultiHeadSelfAttention", case=drop,
                layers=LAYERS_2, init=_mha_init(drop, dropout=p),
                kwargs={"return_attention": True}, train=draw is not None,
                seed=derive_seed(seed, "multi_head_attention", "dropout",
                                 p, draw),
                params={"dropout": p}, again=draw is not None,
                # Each rate is a branch of its own, judged in both modes.
                branch=f"{p:g}"))
    # Causal and dropout together, in training (red team 10, R4): the
    # future stays hidden and the past is dropped at rate p.
    p = FIXED_RATE
    plan.add("task2", probe(
        f"causal-dropout-train:{p:g}",
        "MultiHeadSelfAttention", case=drop, layers=LAYERS_2,
        init=_mha_init(drop, causal=True, dropout=p),
        kwargs={"return_attention": True}, train=True,
        seed=derive_seed(seed, "multi_head_attention", "dropout", "causal",
                         p), params={"dropout": p, "causal": True}))
    # Every value 0 (red team 15): att is the same in both modes, so
    # randomness added after the values were weighted shows, whatever
    # the value step.
    p = FIXED_RATE
    _both_modes(plan, "zero-v", zero_values(drop), seed)
    # forward(x) under the seed of dropout-train:<p>:0: the same draws.
    plan.add("task2", probe(
        f"att-only-{dropout_probe(p, 0)}", "MultiHeadSelfAttention",
        case=drop, layers=LAYERS_2, init=_mha_init(drop, dropout=p),
        train=True, seed=derive_seed(seed, "multi_head_attention",
                                     "dropout", p, 0),
        params={"dropout": p}))
    plan.same_mode("task2", f"att-only-{dropout_probe(p, 0)}",
                   dropout_probe(p, 0))
    if not public_only:
        _sizes(plan, size_cases(seed, "task2"))
        public = cases["task2"][0]
        equal = equal_scores(public)
        _attention(plan, f"public-equal:{public.name}", equal, causal=True)
        plan.same_mode("task2", f"public-equal:{public.name}",
                       f"size:{public.name}:same:causal")
        for train in (False, True):
            mode = "train" if train else "eval"
            plan.add("task2", probe(
                f"public-dropout-{mode}", "MultiHeadSelfAttention",
                case=public, layers=LAYERS_2,
                init=_mha_init(public, dropout=0.5),
                kwargs={"return_attention": True}, train=train,
                seed=derive_seed(seed, "multi_head_attention", "dropout",
                                 "public"), params={"dropout": 0.5}))
        plan.same_mode("task2", "public-dropout-train", "public-dropout-eval")

    # Shape comments: forward under every size set, every branch taken,
    # on zeros and on random non-zero inputs (code that refuses one kind of
    # input is still traced on the other).
    for index, sizes in enumerate(size_sets):
        for kind, x in trace_inputs(seed, index, sizes):
            plan.add("task1", probe(
                f"trace:{index}{kind}", "SelfAttention", x=x,
                trace="forward",
                init={"args": [sizes["input_size"], sizes["hidden"]]},
                sizes=sizes))
            for causal in (False, True):
                for attention in (False, True):
                    plan.add("task2", probe(
                        f"trace:{index}{kind}:causal={causal}"
                        f":probs={attention}",
                        "MultiHeadSelfAttention", x=x, trace="forward",
                        init={"args": [sizes["input_size"], sizes["hidden"],
                                       sizes["num_heads"]],
                              "kwargs": {"causal": causal}},
                        kwargs={"return_attention": attention},
                        sizes=sizes))
    return plan


def trace_inputs(seed: int, index: int, sizes: dict[str, int]
                 ) -> list[tuple[str, torch.Tensor]]:
    """The inputs ``forward`` is traced on under size set ``index``: zeros,
    and N(0, 1) values drawn from a stream derived one-way from the seed
    (so a trace input is no sign of a trace, and gives no seed away)."""
    from grader.api import derive_seed

    shape = (sizes["batch_size"], sizes["seq_len"], sizes["input_size"])
    generator = torch.Generator().manual_seed(
        derive_seed(seed, "trace", index))
    return [("", torch.zeros(shape)),
            (":random", torch.randn(shape, generator=generator))]


def twin_input(task: str, info: ProbeInfo, seed: int) -> TwinInput | None:
    """Fresh inputs for the twins of a probe (grader.plan.TwinInput): N(0,
    1) values of the probe's input's shape, from a stream derived one-way
    from the seed, with the reference's answers to them and to the probe's
    own input (att; probs are not judged, their layout is the checks').
    A probe with random dropout in training that returns the probs is
    judged by the dropout's properties instead (:func:`dropout_judge`:
    no reference gives its values, and masks differ by platform). None
    for a trace and for forward(x) with random dropout in training (its
    twin repeats its input and seed)."""
    case = info.case
    dropout = float(info.params.get("dropout") or 0.0)
    random = info.train and dropout > 0
    if case is None or info.trace or (
            random and (info.target != "MultiHeadSelfAttention"
                        or not info.kwargs.get("return_attention"))):
        return None
    generator = torch.Generator().manual_seed(
        derive_seed(seed, "multi_head_attention", "twin", task, info.id))
    inputs = tuple(torch.randn(tuple(case.x.shape), generator=generator)
                   for _ in range(4))
    weights = {name: value.double() for name, value in case.weights.items()}
    if random:
        return TwinInput(inputs=inputs, expected=(None,) * len(inputs),
                         reference=None, rtol=RTOL, atol=ATOL,
                         asked="drops its probabilities as dropout does "
                         "(each 0 or scaled by 1 / (1 - p), att their "
                         "weighted values)",
                         judge=dropout_judge(
                             case, inputs, bool(info.params.get("causal")),
                             dropout))

    def answer(inputs: torch.Tensor) -> object:
        if info.target == "SelfAttention":
            return reference.self_attention(inputs.double(), weights)
        att, _ = reference.multi_head(inputs.double(), weights,
                                      case.sizes["num_heads"],
                                      bool(info.params.get("causal")))
        return (att, None) if info.kwargs.get("return_attention") else att

    return TwinInput(inputs=inputs,
                     expected=tuple(answer(x) for x in inputs),
                     reference=answer(case.x), rtol=RTOL, atol=ATOL)


def dropout_judge(case: Case, inputs: tuple[torch.Tensor, ...],
                  causal: bool, p: float
                  ) -> Callable[[Any, int], str | None]:
    """The properties of ``forward(x, return_attention=True)`` with
    dropout ``p`` in training, on ``case`` with ``inputs[index]`` for its
    input (index -1: the case's own): probs of the contract's shape, each
    0 or the reference's eval probability / (1 - p) (so the future stays
    0 under the mask), a share of zeros a Bernoulli(p) mask gives
    (:func:`grader.api.share_outside`), and att the reference's value
    step applied to those probs (:func:`mistakes.output_variant`: the
    dropout reaches the output). Words for the first property missing,
    or None."""
    cases = (case,) + tuple(replace(case, x=x) for x in inputs)

    def judge(value: Any, index: int) -> str | None:
        try:
            return properties(value, index)
        except (RuntimeError, TypeError, ValueError) as exc:
            return f"its answer cannot be read ({type(exc).__name__})"

    def properties(value: Any, index: int) -> str | None:
        graded = cases[index + 1]
        x, weights = graded.float64()
        want_att, want_probs = reference.multi_head(
            x, weights, graded.sizes["num_heads"], causal)
        if value is None or value.kind not in ("tuple", "list") \
                or len(value.items) != 2:
            return "it returns no (att, probs) pair"
        att, probs = (item.tensor if item.kind == "tensor" else None
                      for item in value.items)
        if att is None or probs is None \
                or tuple(probs.shape) != tuple(want_probs.shape) \
                or tuple(att.shape) != tuple(want_att.shape):
            return "its att or probs do not have the contract's shapes"
        probs = probs.double()
        kept = torch.isclose(probs, want_probs / (1 - p), rtol=RTOL,
                             atol=ATOL)
        zero = probs.abs() <= ATOL
        if not bool((kept | zero).all()):
            return (f"a probability is neither 0 nor its eval value / "
                    f"(1 - {p:g})")
        live = want_probs > ATOL
        outside = share_outside(p, zero[live])
        if outside is not None:
            return (f"{outside[0]:.0%} of the probabilities are dropped, "
                    f"outside {outside[1]:.0%} to {outside[2]:.0%}")
        step = mistakes.output_variant(graded, probs=probs)
        if not torch.allclose(att.double(), step, rtol=RTOL, atol=ATOL):
            return "att is not its dropped probs times the values"
        return None

    return judge
