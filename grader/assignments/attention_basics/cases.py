"""The inputs the grader runs a submission on, and what it asks for.

:func:`build` returns a :class:`~grader.plan.Plan`: for each task, the
probes the sandbox runs and, for the checks, the trusted case behind each.

Cases:

* **public**: the lecture's inputs, "Your journey starts with one step"
  (``[6, 3]``; the classes from ``CausalAttention`` on get the batch of two
  copies, ``[2, 6, 3]``), with the weights the lecture's
  ``torch.manual_seed`` creates when the parameters are made in the
  documented order (:func:`reference.documented_weights`);
* **hidden** (unless ``public_only``): random cases derived from the
  grading seed, in which no two sizes (and no two products of two sizes
  that a head split could confuse) are equal, the mask buffer of
  ``CausalAttention`` and ``MultiHeadAttention`` is longer than the input
  (``context_length > num_tokens``) and ``qkv_bias`` alternates. The
  wrapper's cases have ``context_length = num_tokens``: its mask is
  ``CausalAttention``'s, judged in task 4.

Probes, per task (ids are prefixes the checks select on):

* ``init:<case>``: construct with the case's sizes and ``describe`` the
  module (children, ``nn.Linear`` sizes, parameters, buffers);
* ``prime:`` then ``seeded:``: the lecture's construction after its
  ``torch.manual_seed``. The worker seeds torch right before a probe's
  *call*, not before its construction, and runs a task's probes in order in
  one process; so the ``prime:`` probe builds the module and calls it with
  no argument (``forward()`` raises a TypeError before any student code
  runs, after the worker seeded torch) and the ``seeded:`` probe that
  follows constructs its module from exactly that random state, as
  ``torch.manual_seed(123); SelfAttention_v1(3, 2)`` does;
  ``seeded:lecture-reseeded`` (hidden grades) is the same construction
  after a torch seed derived from the grading seed, judged against the
  weights the documented construction creates under it (red team 13:
  weights from a private generator seeded 123 pass the lecture's seed);
* ``values:<case>``: the case's weights loaded into the parameters (never
  into the buffers: the mask is the student's own), eval mode, dropout 0;
  ``exact:<case>`` is the same with ``context_length = num_tokens`` (an
  unsliced mask works there only), ``square:`` a case where batch_size =
  num_tokens = d_out, the only sizes where ``keys.T`` on a batch computes
  something instead of raising; one hidden wrapper case (drawn from the
  seed) runs its ``values:`` and ``head:`` probes in training mode, at
  dropout 0 the eval-mode output (red team 13: heads reversed in
  training);
* ``values:long`` (tasks 4 and 6, hidden): two sequences of 20 to 36
  tokens drawn from the seed, the other sizes small: a mask wrong only
  past some length fails there;
* ``longer:<case>-longer`` (tasks 4 and 6): the first hidden case's
  module called again (``again``) right after its ``values:`` probe, on
  an input as long as its context: a mask kept from the first call is
  too short there;
* ``equal:<case>-equal-scores`` (tasks 4 and 6): the ``values:`` probe
  with zero W_query weights, so that every score is 0: a causal mask
  built from the positions hides the future there, one built from the
  score values does not (``mask_from_scores``);
* ``head:<case>:<h>``: the wrapper's head h run alone as a
  ``CausalAttention`` with that head's weights (the wrapper is judged on
  its own heads when they are wrong);
* ``mask:<case>`` and ``blank-mask:<case>``: ``QKVMultiheadAttention`` with
  an additive causal mask; "blank" cases have one head, zero query and key
  weights and an identity ``linear_layer``, so the mask is judged alone;
  ``mask-train:<case>-blank``: the last blank case's module called again
  in training mode (the mask acts there too);
* ``padding:<case>`` and ``blank-padding:<case>``: the same with an
  additive padding mask [batch_size, 1, 1, num_tokens] (sequence b hides
  its last 1 + b % (num_tokens - 1) keys), so that the mask's values, not
  only its presence, are judged; on every other hidden case (which ones
  follow the seed; ``<case>-per-head``) a mask of its own per sequence
  and head, [batch_size, num_heads, num_tokens, num_tokens]
  (:func:`padding_mask`; red team 13: code that kept head 0's mask);
  ``after-mask:<case>``: the last case's module called again without a
  mask right after its ``padding:`` call (``again``; red team 13: a mask
  kept on the module for later calls);
* ``dropout-off``, ``dropout-zero:0``, ``dropout-eval:<p>``,
  ``dropout-train:<p>:<draw>``: dropout 0 in eval and (the same module)
  in training, and each rate p (0.5, and one of ``SEEDED_RATES`` drawn
  from the grading seed) in eval and in
  training under ``DROPOUT_DRAWS`` random seeds (a rate's three probes
  call one module, ``again``), on a case with d_out
  (head_dim) larger than num_tokens, so the attention weights can be
  recovered from the output (task 6: two heads, so that a mask shared
  by the heads shows);
* ``narrow-off``, ``narrow-train:0.5:<draw>`` (not in a public-only
  grade): the narrow dropout case (head_dim and d_in smaller than
  num_tokens, :func:`narrow_dropout_case`) at dropout 0 in eval, and at
  0.5 in training under ``DROPOUT_DRAWS`` seeds (one module, called
  again): each causal row's dropped weights read by trying every way
  to drop them (red team 14, a05);
* ``wrapper-train`` and ``wrapper-head-train`` (task 5): the wrapper
  built with dropout 0.5 (two heads, the dropout case's sizes) in
  training mode, and its head 0 alone as a ``CausalAttention`` with the
  same rate: heads built with the wrapper's rate drop attention weights,
  so the wrapper's output is not its eval-mode output (unless the
  submission's ``CausalAttention`` never drops, task 4's point);
* ``trace:<i>``: forward under the rubric's size set i, for the shape
  comments (every branch: with and without a mask).

Every random stream a submission can observe (hidden inputs and weights,
the torch seed of a dropout probe) is seeded with
:func:`grader.plan.derive_seed`, a one-way hash of the grading seed; the
lecture's own seeds (123, 789) are public.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from grader.api import (ATOL, RTOL, Case, Plan, ProbeInfo, TwinInput,
                        derive_seed, encode_tensor, probe)
from grader.assignments.attention_basics import reference

HIDDEN_CASES = 3
# Dropout is judged at two rates, each under two random seeds: the masks
# must differ between seeds and the share of zeros must follow p. The
# first rate is the rubric's 0.5; the second is drawn from the grading
# seed among SEEDED_RATES (red team 11: with a fixed 0.2, code that
# dropped nothing below 0.2 kept the point); the old fixed 0.2 is left
# out, and above about 0.23 the rubric's 30-70% range at p = 0.5 would
# no longer tell the two rates apart.
FIXED_RATE = 0.5
SEEDED_RATES = tuple(round(0.01 * i, 2) for i in range(5, 20))
# The wrapper's heads are judged at one rate: their output must move.
WRAPPER_DROPOUT = 0.5
DROPOUT_DRAWS = 2
# The dropout case's sequence length and task 6's heads (dropout_case).
DROPOUT_TOKENS = (12, 14)   # [low, high): the dropout case's num_tokens
DROPOUT_BATCH = (18, 31)    # and its batch size
DROPOUT_HEADS = 2
# The narrow dropout case (narrow_dropout_case): heads and inputs narrower
# than the sequence, as in every configuration a student meets, and
# causal rows short enough to read each weight's fate from the output
# (a row of n weights has 2**n ways to drop them).
NARROW_TOKENS = (10, 13)    # [low, high): its num_tokens
NARROW_BATCH = (6, 10)      # its batch size
NARROW_HEAD = (2, 5)        # its head_dim (task 4: d_out)
PUBLIC = "lecture"
# The name suffix of an equal-scores case (equal_scores).
EQUAL = "-equal-scores"
# The name suffix of a task 7 case whose padding: probes get a mask of its
# own per sequence and head (per_head_case; red team 13, a03).
PER_HEAD = "-per-head"
# How a report names the case of an after-mask: probe (red team 13, a10).
AFTER_MASK = ("(the same module called again without a mask, right after "
              "a call with one)")
# The name suffix of the seeded: probe built under a seed derived from the
# grading seed (red team 13, a01: weights from a private generator seeded
# like the lecture kept the lecture's numbers whatever the user's seed).
RESEEDED = "-reseeded"

# "Your journey starts with one step", embedded in 3 dimensions.
INPUTS = torch.tensor(
    [[0.43, 0.15, 0.89],   # Your
     [0.55, 0.87, 0.66],   # journey
     [0.57, 0.85, 0.64],   # starts
     [0.22, 0.58, 0.33],   # with
     [0.77, 0.25, 0.10],   # one
     [0.05, 0.80, 0.55]])  # step
BATCH = torch.stack((INPUTS, INPUTS), dim=0)

TARGETS = {"task1": "simple_self_attention", "task2": "SelfAttention_v1",
           "task3": "SelfAttention_v2", "task4": "CausalAttention",
           "task5": "MultiHeadAttentionWrapper",
           "task6": "MultiHeadAttention", "task7": "QKVMultiheadAttention"}
# The lecture's constructions: (manual_seed, sizes). The weights of the
# public case of each task are what this seed creates.
SEEDED: dict[str, tuple[int, dict[str, int]]] = {
    "task2": (123, {"num_tokens": 6, "d_in": 3, "d_out": 2}),
    "task3": (789, {"num_tokens": 6, "d_in": 3, "d_out": 2}),
    "task4": (123, {"batch_size": 2, "num_tokens": 6, "context_length": 6,
                    "d_in": 3, "d_out": 2}),
    "task5": (123, {"batch_size": 2, "num_tokens": 6, "context_length": 6,
                    "d_in": 3, "d_out": 2, "num_heads": 2}),
    "task6": (123, {"batch_size": 2, "num_tokens": 6, "context_length": 6,
                    "d_in": 3, "d_out": 2, "num_heads": 2,
                    "head_dim": 1}),
    "task7": (123, {"batch_size": 2, "num_tokens": 6, "d_in": 3,
                    "d_out": 4, "num_heads": 2, "head_dim": 2}),
}
# The context length of the public "long" probes: longer than the input.
LONG_CONTEXT = 10
# The long hidden case of tasks 4 and 6 (red team 11: no probe was longer
# than 13 tokens, so a mask wrong only past 16 tokens kept the point):
# [low, high] tokens.
LONG_TOKENS = (20, 36)


def has_bias(case: Case) -> bool:
    """Whether the case's query/key/value projections have a bias."""
    return any(name.endswith("W_query.bias") for name in case.weights)


def init_of(task: str, sizes: dict[str, int], dropout: float = 0.0,
            qkv_bias: bool | None = None) -> dict[str, Any]:
    """Constructor arguments of ``task``'s class for ``sizes``.

    ``qkv_bias`` None passes no keyword (the lecture's calls).
    """
    s = sizes
    if task in ("task2", "task3"):
        args = [s["d_in"], s["d_out"]]
    elif task == "task4":
        args = [s["d_in"], s["d_out"], s["context_length"], dropout]
    elif task in ("task5", "task6"):
        args = [s["d_in"], s["d_out"], s["context_length"], dropout,
                s["num_heads"]]
    elif task == "task7":
        return {"args": [s["d_in"], s["d_out"], s["num_heads"]],
                "kwargs": {}}
    else:
        raise KeyError(task)
    kwargs = {} if qkv_bias is None or task == "task2" else {
        "qkv_bias": qkv_bias}
    return {"args": args, "kwargs": kwargs}


def _add(plan: Plan, task: str, probe_id: str, *, case: Case | None = None,
         init: dict | None = None, x: torch.Tensor | None = None,
         extra: tuple[torch.Tensor, ...] = (), call: bool = True,
         load: bool = True, describe: bool = False,
         trace: str | None = None, train: bool = False, seed: int = 0,
         causal: bool = False, dropout: float = 0.0,
         sizes: dict[str, int] | None = None, target: str | None = None,
         no_arguments: bool = False, lead: bool = False,
         seeding: bool = False, again: bool = False,
         branch: str = "") -> None:
    """Add one probe of ``task`` (on ``target``, default the task's).

    The case's weights are loaded by parameter name (``load``); ``extra``
    tensors follow x as positional arguments; ``call=False`` only builds
    (and describes); ``no_arguments`` calls the object with no argument;
    ``lead``: the probe only prepares the random state of the next one
    (wire key ``lead``, grader.plan.Plan.assign_modes); ``seeding``: that
    state must be the exact stream of ``torch.manual_seed(seed)`` (wire
    key ``seeding``; every other probe's call gets a state no seeding
    wrote, grader.worker.agent.torch_seeder).
    ``again`` calls the object the previous probe built (same init);
    ``branch``: the probe's branch in its family (grader.plan.probe).
    """
    wire, info = probe(probe_id, target or TARGETS[task], case=case,
                       init=init, x=x, describe=describe, trace=trace,
                       train=train, seed=seed, sizes=sizes,
                       params={"causal": causal, "dropout": dropout},
                       again=again, branch=branch)
    wire.pop("state", None)
    if case is not None and load and init is not None:
        wire["state"] = {name: encode_tensor(tensor)
                         for name, tensor in case.weights.items()}
    if no_arguments:
        wire["call"] = {"args": [], "kwargs": {}}
    elif not call:
        wire.pop("call", None)
    elif extra:
        wire["call"]["args"] += [encode_tensor(t) for t in extra]
    if lead:
        wire["lead"] = True
    if seeding:
        wire["seeding"] = True
    plan.add(task, (wire, info))


# --------------------------------------------------------------------------
# Cases


def public_cases() -> dict[str, Case]:
    """The lecture's inputs with the lecture's seeded weights, per task."""
    cases = {"task1": Case(PUBLIC, True, {"num_tokens": 6, "d_in": 3},
                           INPUTS, {})}
    for task, (seed, sizes) in SEEDED.items():
        init = init_of(task, sizes)
        x = INPUTS if task in ("task2", "task3") else BATCH
        weights = reference.documented_weights(TARGETS[task],
                                               tuple(init["args"]), seed)
        cases[task] = Case(PUBLIC, True, dict(sizes), x, weights)
    return cases


def _distinct(values: list[int]) -> bool:
    return len(set(values)) == len(values)


def random_sizes(rng: np.random.Generator, task: str) -> dict[str, int]:
    """Sizes for ``task`` with no two equal (nor two products a head split
    could confuse), context_length > num_tokens (tasks 4 and 6; the
    wrapper's equals num_tokens), and no size 3 for the fused
    projection."""
    def draw(low: int, high: int) -> int:
        return int(rng.integers(low, high + 1))

    while True:
        s = {"num_tokens": draw(3, 8), "d_in": draw(2, 9)}
        extra: list[int] = []
        if task in ("task2", "task3"):
            s["d_out"] = draw(2, 9)
        if task in ("task4", "task5", "task6", "task7"):
            s = {"batch_size": draw(2, 4), **s}
        if task in ("task4", "task6"):
            s["context_length"] = s["num_tokens"] + draw(1, 4)
        if task in ("task4", "task5"):
            s["d_out"] = draw(2, 7)
        if task == "task5":
            s["num_heads"] = draw(2, 4)
            extra = [s["num_heads"] * s["d_out"]]
        if task in ("task6", "task7"):
            s["num_heads"] = draw(2, 4)
            s["head_dim"] = draw(2, 5)
            s["d_out"] = s["num_heads"] * s["head_dim"]
            extra = [s["batch_size"] * s["num_heads"]]
        if task == "task7":
            extra += [3]
        if _distinct(list(s.values()) + extra):
            if task == "task5":  # the mask is CausalAttention's (task 4)
                s["context_length"] = s["num_tokens"]
            return s


def _uniform(rng: np.random.Generator, shape: tuple[int, ...],
             bound: float) -> torch.Tensor:
    return torch.from_numpy(rng.uniform(-bound, bound, shape)
                            .astype(np.float32))


def random_weights(rng: np.random.Generator, task: str,
                   sizes: dict[str, int], bias: bool) -> dict:
    """Weights ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), by parameter name."""
    d_in, d_out = sizes.get("d_in", 0), sizes.get("d_out", 0)

    def layer(name: str, fan_in: int, fan_out: int,
              with_bias: bool = True) -> dict:
        found = {f"{name}.weight": _uniform(rng, (fan_out, fan_in),
                                            fan_in ** -0.5)}
        if with_bias:
            found[f"{name}.bias"] = _uniform(rng, (fan_out,), fan_in ** -0.5)
        return found

    weights: dict[str, torch.Tensor] = {}
    if task == "task2":
        for name in reference.PROJECTIONS:
            weights[name] = _uniform(rng, (d_in, d_out), 1.0)
    elif task in ("task3", "task4", "task6"):
        for name in reference.PROJECTIONS:
            weights.update(layer(name, d_in, d_out, bias))
        if task == "task6":
            weights.update(layer("out_proj", d_out, d_out))
    elif task == "task5":
        for head in range(sizes["num_heads"]):
            for name in reference.PROJECTIONS:
                weights.update(layer(f"heads.{head}.{name}", d_in, d_out,
                                     bias))
    elif task == "task7":
        weights.update(layer("qkv_layer", d_in, 3 * d_out))
        weights.update(layer("linear_layer", d_out, d_out))
    return weights


def random_input(rng: np.random.Generator, task: str,
                 sizes: dict[str, int]) -> torch.Tensor:
    """x ~ N(0, 1): [num_tokens, d_in] for tasks 1-3, else a batch."""
    shape = (sizes["num_tokens"], sizes["d_in"])
    if "batch_size" in sizes:
        shape = (sizes["batch_size"],) + shape
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))


def _rng(seed: int, *labels: object) -> np.random.Generator:
    """A generator for one stream, seeded one-way from the grading seed."""
    return np.random.default_rng(
        derive_seed(seed, "attention_basics", *labels))


def hidden_cases(seed: int) -> dict[str, list[Case]]:
    """HIDDEN_CASES random cases per task, derived from ``seed``."""
    found = {}
    for task in TARGETS:
        rng = _rng(seed, "hidden", task)
        cases = []
        for index in range(HIDDEN_CASES):
            sizes = random_sizes(rng, task)
            bias = index % 2 == 0
            cases.append(Case(f"hidden-{index}", False, sizes,
                              random_input(rng, task, sizes),
                              random_weights(rng, task, sizes, bias)))
        found[task] = cases
    return found


def with_context(case: Case, context_length: int, suffix: str) -> Case:
    """The same case for a module built with another context_length."""
    return Case(f"{case.name}-{suffix}", case.public,
                {**case.sizes, "context_length": context_length}, case.x,
                case.weights)


def square_case(seed: int) -> Case:
    """batch_size = num_tokens = d_out = 4: ``keys.T`` runs here (and
    context_length = num_tokens, so an unsliced mask runs too: behind it,
    ``transpose_batch`` is still named)."""
    rng = _rng(seed, "square")
    sizes = {"batch_size": 4, "num_tokens": 4, "context_length": 4,
             "d_in": 3, "d_out": 4}
    return Case("square", False, sizes, random_input(rng, "task4", sizes),
                random_weights(rng, "task4", sizes, False))


def _dropout_weights(rng: np.random.Generator, task: str,
                     sizes: dict[str, int], width: int) -> dict:
    """The weights of a dropout case; task 6 gets DROPOUT_HEADS heads of
    ``width`` (``sizes`` completed in place) and out_proj the identity,
    so that each head's output is read alone."""
    if task == "task6":
        sizes.update(num_heads=DROPOUT_HEADS, head_dim=width,
                     d_out=width * DROPOUT_HEADS)
    weights = random_weights(rng, task, sizes, False)
    if task == "task6":
        d_out = sizes["d_out"]
        weights["out_proj.weight"] = torch.eye(d_out)
        weights["out_proj.bias"] = torch.zeros(d_out)
    return weights


def dropout_case(seed: int, task: str) -> Case:
    """A case whose attention weights can be read back from the output.

    d_in and d_out (task 4) or head_dim (task 6) are larger than
    num_tokens, so the values of a sequence (of a head) span a
    num_tokens-dimensional space and the output determines the weights;
    ``out_proj`` is the identity. Task 6 has two heads, so that a mask
    shared by the heads shows; context_length = num_tokens, so that an
    unsliced mask (judged by the other item) does not cost the dropout
    point too (nor does a head split or merge without the transpose:
    :func:`mistakes.weights_layout` reads the weights in its layout).
    At least 18 sequences of 12 tokens (sizes drawn from the seed) give
    1404 causal weights per head and call,
    so the bounds of :func:`grader.judge.checking.share_bounds` (two calls
    per rate) separate p = 0.2 from p = 0.5, and the 78 causal weights of
    a [num_tokens, num_tokens] block make two blocks of an honest dropout
    drop the same weights with probability under 1e-13 (the
    independence tests of :func:`grader.assignments.attention.
    mask_dependence`; docs/threat-model.md, principle 5).
    """
    rng = _rng(seed, "dropout", task)
    # Every size is drawn from the seed (red team 9: code that dropped
    # only at a batch of 24 earned the point): 18 to 30 sequences of 12 or 13.
    tokens = int(rng.integers(*DROPOUT_TOKENS))
    width = tokens + int(rng.integers(1, 4))
    sizes = {"batch_size": int(rng.integers(*DROPOUT_BATCH)),
             "num_tokens": tokens, "context_length": tokens,
             "d_in": tokens + int(rng.integers(1, 4)), "d_out": width}
    weights = _dropout_weights(rng, task, sizes, width)
    return Case("dropout", False, sizes, random_input(rng, task, sizes),
                weights)


def narrow_dropout_case(seed: int, task: str) -> Case:
    """A dropout case at the sizes people use: head_dim (task 4: d_out)
    and d_in smaller than num_tokens, so that the output does not
    determine the attention weights (red team 14, a05: code that
    placed dropout right only where :func:`dropout_case` can read the
    weights kept the point). Every size is drawn from the seed; out_proj
    is the identity. Each weight's fate is read from the output by
    trying every way to drop a causal row
    (:func:`grader.assignments.attention_basics.mistakes.row_fates`)."""
    rng = _rng(seed, "narrow-dropout", task)
    tokens = int(rng.integers(*NARROW_TOKENS))
    width = int(rng.integers(*NARROW_HEAD))
    sizes = {"batch_size": int(rng.integers(*NARROW_BATCH)),
             "num_tokens": tokens, "context_length": tokens,
             "d_in": int(rng.integers(2, tokens)), "d_out": width}
    weights = _dropout_weights(rng, task, sizes, width)
    return Case("narrow-dropout", False, sizes,
                random_input(rng, task, sizes), weights)


def wrapper_dropout_case(seed: int) -> Case:
    """Task 5's dropout case: the dropout case's sizes, two heads.

    At least 18 sequences of 12 tokens give each head 1404 causal weights,
    so an honest dropout at p = 0.5 leaves the output unchanged with
    probability under 2**-1404.
    """
    base = dropout_case(seed, "task4")
    rng = _rng(seed, "dropout", "task5")
    sizes = {**base.sizes, "num_heads": DROPOUT_HEADS}
    return Case("wrapper-dropout", False, sizes, base.x,
                random_weights(rng, "task5", sizes, False))


def long_case(seed: int, task: str) -> Case:
    """Two sequences of 20 to 36 tokens (drawn from the seed), the other
    sizes small and distinct, the context a little longer."""
    rng = _rng(seed, "long", task)

    def draw(low: int, high: int) -> int:
        return int(rng.integers(low, high + 1))

    while True:
        tokens = draw(*LONG_TOKENS)
        s = {"batch_size": 2, "num_tokens": tokens,
             "context_length": tokens + draw(1, 4), "d_in": draw(3, 6)}
        if task == "task4":
            s["d_out"] = draw(4, 7)
            extra = []
        else:
            s["num_heads"] = 3
            s["head_dim"] = draw(4, 5)
            s["d_out"] = 3 * s["head_dim"]
            extra = [s["batch_size"] * s["num_heads"]]
        if _distinct(list(s.values()) + extra):
            break
    return Case("long", False, s, random_input(rng, task, s),
                random_weights(rng, task, s, False))


def longer_case(seed: int, task: str, case: Case) -> Case:
    """The same weights and module sizes on a new input as long as the
    context (``num_tokens = context_length``, longer than the case's):
    called on the module the case's ``values:`` probe built, a causal
    mask kept from its first call is too short here."""
    sizes = {**case.sizes, "num_tokens": case.sizes["context_length"]}
    x = random_input(_rng(seed, "longer", task), task, sizes)
    return Case(f"{case.name}-longer", case.public, sizes, x, case.weights)


def equal_scores(case: Case) -> Case:
    """The same case with zero W_query weights (and bias): every score is
    0. A causal mask built from the positions still hides the future
    here (token i averages the values of tokens 0..i); one built from the
    score values (``attn_scores.triu(1) != 0``) does not."""
    weights = {name: torch.zeros_like(tensor)
               if name.startswith("W_query.") else tensor
               for name, tensor in case.weights.items()}
    return Case(f"{case.name}{EQUAL}", case.public, dict(case.sizes),
                case.x, weights)


def blank_case(case: Case) -> Case:
    """One head, zero query and key weights, identity linear_layer.

    Every score is 0, so with a causal mask token i averages the values of
    tokens 0..i whatever the scale, the head split and the merge: the mask
    is judged alone.
    """
    d_out = case.sizes["d_out"]
    weight = case.weights["qkv_layer.weight"].clone()
    bias = case.weights["qkv_layer.bias"].clone()
    weight[:2 * d_out] = 0.0
    bias[:2 * d_out] = 0.0
    weights = {"qkv_layer.weight": weight, "qkv_layer.bias": bias,
               "linear_layer.weight": torch.eye(d_out),
               "linear_layer.bias": torch.zeros(d_out)}
    sizes = {**case.sizes, "num_heads": 1, "head_dim": d_out}
    return Case(f"{case.name}-blank", case.public, sizes, case.x, weights)


def per_head_case(case: Case) -> Case:
    """The same case, for the padding: probes with a mask of its own per
    sequence and head (:func:`padding_mask`)."""
    return Case(f"{case.name}{PER_HEAD}", case.public, dict(case.sizes),
                case.x, case.weights, shown=case.shown or case.name)


def padding_mask(case: Case, dtype: torch.dtype = torch.float32
                 ) -> torch.Tensor:
    """The mask of a case's padding: probe: [batch_size, num_heads,
    num_tokens, num_tokens] for a per-head case (its blank one included,
    with its one head), else [batch_size, 1, 1, num_tokens]."""
    s = case.sizes
    if PER_HEAD in case.name:
        return reference.per_head_additive_mask(
            s["batch_size"], s["num_heads"], s["num_tokens"], dtype)
    return reference.padding_additive_mask(s["batch_size"], s["num_tokens"],
                                           dtype)


def reseeded_case(seed: int, task: str, case: Case) -> tuple[int, Case]:
    """The public case's construction under a torch seed derived from the
    grading seed: the seed, and the case with the weights the documented
    construction creates under it."""
    derived = derive_seed(seed, "attention_basics", "seeded", task)
    weights = reference.documented_weights(
        TARGETS[task], tuple(init_of(task, case.sizes)["args"]), derived)
    return derived, Case(case.name, False, dict(case.sizes), case.x,
                         weights, hidden=True, shown=case.shown or case.name,
                         variant=f"built after torch.manual_seed({derived})")


def head_case(case: Case, head: int) -> Case:
    """The wrapper's head ``head`` as a CausalAttention case."""
    prefix = f"heads.{head}."
    weights = {name[len(prefix):]: tensor
               for name, tensor in case.weights.items()
               if name.startswith(prefix)}
    return Case(f"{case.name}-head{head}", case.public, dict(case.sizes),
                case.x, weights)


# --------------------------------------------------------------------------
# The plan


def _values(plan: Plan, task: str, case: Case, prefix: str = "values",
            extra: tuple[torch.Tensor, ...] = (), causal: bool = False,
            train: bool = False, again: bool = False) -> None:
    """A ``values:``-style probe: the case's weights loaded, eval mode
    (``train``: training mode; ``again``: on the previous probe's
    object)."""
    bias = None if case.public else has_bias(case)
    if task == "task1":
        _add(plan, task, f"{prefix}:{case.name}", case=case)
        return
    _add(plan, task, f"{prefix}:{case.name}", case=case,
         init=init_of(task, case.sizes, qkv_bias=bias), extra=extra,
         causal=causal, train=train, again=again)


def _structure(plan: Plan, task: str, case: Case) -> None:
    """An ``init:`` probe: build with the case's sizes and describe."""
    bias = None if case.public else has_bias(case)
    _add(plan, task, f"init:{case.name}", case=case,
         init=init_of(task, case.sizes, qkv_bias=bias), call=False,
         load=False, describe=True)


def _seeded(plan: Plan, task: str, case: Case, name: str = "",
            context_length: int | None = None,
            seed: int | None = None) -> None:
    """The lecture's construction after its manual_seed (see the module
    docstring for the prime: probe); ``seed``: after that one instead."""
    seed = SEEDED[task][0] if seed is None else seed
    sizes = dict(case.sizes)
    if context_length is not None:
        sizes["context_length"] = context_length
    init = init_of(task, sizes)
    probe_id = f"seeded:{case.name}{name}"
    _add(plan, task, f"prime:{probe_id}", init=init, seed=seed,
         no_arguments=True, lead=True, seeding=True)
    _add(plan, task, probe_id, case=case, init=init, load=False)


def dropout_rates(seed: int) -> tuple[float, float]:
    """The two dropout rates judged: FIXED_RATE, then one of
    SEEDED_RATES drawn from a stream derived one-way from the seed."""
    rng = _rng(seed, "dropout", "rate")
    return FIXED_RATE, SEEDED_RATES[int(rng.integers(len(SEEDED_RATES)))]


def _dropout(plan: Plan, task: str, seed: int) -> None:
    """Dropout 0 in eval, and in training on the same module
    (``dropout-zero:0``: a module built with dropout 0 never drops); each
    rate in eval and in training under DROPOUT_DRAWS seeds derived from
    the grading seed."""
    case = dropout_case(seed, task)
    runs = [("dropout-off", 0.0, None), ("dropout-zero:0", 0.0, 0)]
    for p in dropout_rates(seed):
        runs += [(f"dropout-eval:{p:g}", p, None)]
        runs += [(f"dropout-train:{p:g}:{draw}", p, draw)
                 for draw in range(DROPOUT_DRAWS)]
    for probe_id, p, draw in runs:
        # A rate's eval and training calls are one object's: a mask drawn
        # once and kept shows as two equal draws.
        _add(plan, task, probe_id, case=case,
             init=init_of(task, case.sizes, dropout=p, qkv_bias=False),
             train=draw is not None, dropout=p, again=draw is not None,
             seed=derive_seed(seed, "attention_basics", "dropout", task,
                              p, draw),
             # Each rate is a branch of its own, judged in both modes.
             branch=f"{p:g}")


def _narrow_dropout(plan: Plan, task: str, seed: int) -> None:
    """The narrow dropout case (:func:`narrow_dropout_case`) at dropout 0
    in eval mode, and at FIXED_RATE in training under DROPOUT_DRAWS
    seeds derived from the grading seed (one object, called again)."""
    case = narrow_dropout_case(seed, task)
    runs = [("narrow-off", 0.0, None)] + [
        (f"narrow-train:{FIXED_RATE:g}:{draw}", FIXED_RATE, draw)
        for draw in range(DROPOUT_DRAWS)]
    for probe_id, p, draw in runs:
        _add(plan, task, probe_id, case=case,
             init=init_of(task, case.sizes, dropout=p, qkv_bias=False),
             train=draw is not None, dropout=p, again=bool(draw),
             seed=derive_seed(seed, "attention_basics", "narrow-dropout",
                              task, p, draw),
             branch=f"narrow-{p:g}")


def _wrapper_dropout(plan: Plan, seed: int) -> None:
    """Task 5: the wrapper and its head 0 alone, built with dropout
    WRAPPER_DROPOUT, in training mode under one seed derived from the
    grading seed."""
    case = wrapper_dropout_case(seed)
    head = head_case(case, 0)
    for probe_id, init, target, probe_case in (
            ("wrapper-train", init_of("task5", case.sizes,
                                      dropout=WRAPPER_DROPOUT,
                                      qkv_bias=False), None, case),
            ("wrapper-head-train", init_of("task4", case.sizes,
                                           dropout=WRAPPER_DROPOUT,
                                           qkv_bias=False),
             TARGETS["task4"], head)):
        _add(plan, "task5", probe_id, case=probe_case, init=init,
             train=True, dropout=WRAPPER_DROPOUT, target=target,
             seed=derive_seed(seed, "attention_basics", "dropout", "task5",
                              probe_id))


def _traces(plan: Plan, task: str,
            size_sets: tuple[dict[str, int], ...], seed: int = 0) -> None:
    """forward traced under every size set (with and without a mask), on
    random non-zero inputs drawn from a stream derived one-way from the
    seed."""
    from grader.api import derive_seed

    for index, sizes in enumerate(size_sets):
        generator = torch.Generator().manual_seed(
            derive_seed(seed, "trace", task, index))
        x = torch.randn(sizes["batch_size"], sizes["num_tokens"],
                        sizes["d_in"], generator=generator)
        init = init_of(task, sizes)
        _add(plan, task, f"trace:{index}", init=init, x=x, trace="forward",
             sizes=sizes)
        if task == "task7":
            _add(plan, task, f"trace:{index}:mask", init=init, x=x,
                 extra=(reference.causal_additive_mask(
                     sizes["num_tokens"]),), trace="forward", sizes=sizes)


def build(seed: int, public_only: bool,
          size_sets: tuple[dict[str, int], ...]) -> Plan:
    """Every probe of every task, with the trusted case behind each."""
    plan = Plan()
    public = public_cases()
    hidden = {task: [] for task in TARGETS} if public_only \
        else hidden_cases(seed)
    judged = {task: [public[task]] + hidden[task] for task in TARGETS}
    # Drawn from the seed (red team 13): the wrapper case whose values:
    # and head: probes run in training mode (dropout 0: the output is the
    # eval-mode output, a02), and which hidden task 7 cases get a mask
    # per sequence and head (every other one, a03).
    choose = _rng(seed, "modes")
    wrapper_train = 1 + int(choose.integers(HIDDEN_CASES))
    per_head = int(choose.integers(2))

    # Task 1: simple_self_attention.
    for case in judged["task1"]:
        _values(plan, "task1", case)

    # Tasks 2-7: structure, the lecture's seeded construction, values.
    for task in list(TARGETS)[1:]:
        for case in judged[task]:
            _structure(plan, task, case)
        _seeded(plan, task, public[task])
        if task in ("task4", "task6"):
            _seeded(plan, task, public[task], "-long", LONG_CONTEXT)
        if not public_only:
            # The same construction under a seed derived from the grading
            # seed (red team 13, a01).
            derived, reseeded = reseeded_case(seed, task, public[task])
            _seeded(plan, task, reseeded, RESEEDED, seed=derived)
        for index, case in enumerate(judged[task]):
            train = task == "task5" and index == wrapper_train
            _values(plan, task, case, train=train)
            if task in ("task4", "task6") and index == 1:
                # The first hidden case's module called again, on a longer
                # input (red team 10, R2).
                _values(plan, task, longer_case(seed, task, case),
                        "longer", again=True)
            if task in ("task4", "task6") and not case.public:
                _values(plan, task, with_context(
                    case, case.sizes["num_tokens"], "exact"), "exact")
            if task == "task5":
                for head in range(case.sizes["num_heads"]):
                    _add(plan, task, f"head:{case.name}:{head}",
                         case=head_case(case, head), init=init_of(
                             "task4", case.sizes,
                             qkv_bias=None if case.public
                             else has_bias(case)),
                         target=TARGETS["task4"], train=train)
                    plan.same_mode(task, f"head:{case.name}:{head}",
                                   f"values:{case.name}")
            if task == "task7":
                mask = reference.causal_additive_mask(
                    case.sizes["num_tokens"])
                _values(plan, task, case, "mask", (mask,), causal=True)
                _values(plan, task, blank_case(case), "blank-mask",
                        (mask,), causal=True)
                if index == len(judged[task]) - 1:
                    # The same module in training mode (red team 10,
                    # R7): the mask acts there too.
                    _values(plan, task, blank_case(case), "mask-train",
                            (mask,), causal=True, train=True, again=True)
                padded = case
                if not case.public and (index + per_head) % 2:
                    padded = per_head_case(case)
                _values(plan, task, padded, "padding",
                        (padding_mask(padded),))
                if index == len(judged[task]) - 1:
                    # The same module called again without a mask (red
                    # team 13, a10): the last call's mask must not act.
                    called = replace(case, shown=case.shown or case.name,
                                     variant=AFTER_MASK)
                    _values(plan, task, called, "after-mask", again=True)
                blank = blank_case(padded)
                _values(plan, task, blank, "blank-padding",
                        (padding_mask(blank),))
    # A causal mask depends on positions only (RUBRIC, "Readings settled
    # in use"): each judged case again with every score equal, after
    # every random-score probe.
    for task in ("task4", "task6"):
        for case in judged[task]:
            _values(plan, task, equal_scores(case), "equal")
            # Compared with values:<case> (mask_from_scores): in its
            # autograd mode (grader.plan.Plan.same_mode), as head:.
            plan.same_mode(task, f"equal:{case.name}{EQUAL}",
                           f"values:{case.name}")
    if not public_only:
        for task in ("task4", "task6"):   # one long input (red team 11)
            _values(plan, task, long_case(seed, task))
    square = square_case(seed)
    _add(plan, "task4", "square:square", case=square,
         init=init_of("task4", square.sizes, qkv_bias=False))
    for task in ("task4", "task6"):
        _dropout(plan, task, seed)
        if not public_only:
            _narrow_dropout(plan, task, seed)
    _wrapper_dropout(plan, seed)

    # Shape comments: forward under every size set.
    for task in ("task4", "task6", "task7"):
        _traces(plan, task, size_sets, seed)
    return plan


#: The reference of each target, on float64 (x, weights, sizes).
ANSWERS = {
    "simple_self_attention":
        lambda x, w, s: reference.simple_self_attention(x),
    "SelfAttention_v1": lambda x, w, s: reference.self_attention_v1(x, w),
    "SelfAttention_v2": lambda x, w, s: reference.self_attention_v2(x, w),
    "CausalAttention": lambda x, w, s: reference.causal_attention(x, w),
    "MultiHeadAttentionWrapper":
        lambda x, w, s: reference.wrapper(x, w, s["num_heads"]),
    "MultiHeadAttention":
        lambda x, w, s: reference.multi_head_attention(x, w, s["num_heads"]),
    "QKVMultiheadAttention": lambda x, w, s: reference.qkv_attention(
        x, w, s["num_heads"], reference.causal_additive_mask(
            x.shape[-2], torch.float64)),
}


def twin_input(task: str, info: ProbeInfo, seed: int) -> TwinInput | None:
    """Fresh inputs for the twins of a probe (grader.plan.TwinInput): N(0,
    1) values of the probe's input's shape, from a stream derived one-way
    from the seed, with the reference's outputs for them and for the
    probe's own input, on the case's weights. None (the twin repeats the
    probe's input) for a probe with random dropout in training (no
    reference gives its values), a trace, a QKVMultiheadAttention call
    without the causal mask, and a ``seeded:`` probe (it judges the
    construction after a manual_seed; its forward is the ``values:``
    probes' forward, judged in both modes on distinct inputs)."""
    case = info.case
    if case is None or info.trace or info.target not in ANSWERS or (
            info.train and info.params.get("dropout")) or (
            info.target == "QKVMultiheadAttention"
            and not info.params.get("causal")) or \
            info.id.startswith("seeded:"):
        return None
    generator = torch.Generator().manual_seed(
        derive_seed(seed, "attention_basics", "twin", task, info.id))
    inputs = tuple(torch.randn(tuple(case.x.shape), generator=generator)
                   for _ in range(4))
    weights = {name: value.double() for name, value in case.weights.items()}
    answer = ANSWERS[info.target]
    return TwinInput(
        inputs=inputs, expected=tuple(
            answer(x.double(), weights, case.sizes) for x in inputs),
        reference=answer(case.x.double(), weights, case.sizes), rtol=RTOL,
        atol=ATOL)
