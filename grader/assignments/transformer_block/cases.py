"""The inputs the grader runs a transformer_block submission on.

:func:`build` returns a :class:`~grader.plan.Plan` (see
:mod:`grader.assignments.multi_head_attention.cases` for the pattern).
Every case is drawn from a stream derived one-way from the grading seed;
its weights follow the naming contract of docs/transformer_block.md (the
state_dict names of the reference solution), with LayerNorm weights and
biases away from 1 and 0 so that a misplaced norm shows. A TransformerLM
probe allows the contract's one tie (``reference.TIED``).

Probes of task 1 (TransformerEncoderLayer):

* ``init:<n>``: the layer built with two sets of sizes, described;
* ``forward:<case>:causal=<c>``: ``forward(x)`` in eval mode;
* ``forward:hidden-0-longer:causal=True``: the layer of
  ``forward:hidden-0:causal=True`` called again (``again``) on a longer
  input (a mask kept from the first call's length fails there);
* ``forward:<case>:causal=True:dropout=<p>``: the same in eval mode on a
  layer built with dropout ``EVAL_DROPOUT``: dropout is off in eval mode,
  so the output must still be the reference's (a layer that drops in eval
  mode, e.g. with ``F.dropout``'s default ``training=True``, fails);
* ``layer-future:<case>:<i>``: the causal layer on the same case with
  every position after i changed, so that task2.causal can tell a layer
  that keeps ``causal=True`` causal (however wrong its values) from one
  that does not (docs/transformer_block.md, "Isolation");
* ``train-dropout:<kind>:<k>``: the causal layer built with dropout
  :func:`train_dropout` (drawn from the seed), in train mode, under two
  torch seeds, on a case in which one sublayer's dropout alone acts
  (:func:`sublayer_case`), so that its dropout mask can be read back
  from the output; described (the rate of its ``self.dropout``);
* ``init-dropout``: the causal layer built with dropout ``LM_DROPOUT``,
  described (every dropout rate, at any depth);
* ``trace:...``: forward under the rubric's size sets (shape comments).

Probes of task 2 (TransformerLM), each at two depths, ``d2`` (two encoder
layers) and ``d0`` (no layer: embeddings and output projection alone),
so that task 2 is judged without the student's layer when that layer
fails task 1 (docs/transformer_block.md, "Isolation"):

* ``init:<depth>:<n>``: the model built, described;
* ``logits:<depth>:<case>``: ``forward(input_ids)``;
* ``future:<depth>:<case>:<i>``: the same input with every token after
  position i replaced (the causality item compares positions 0..i);
* ``loss:<depth>:<case>``: ``loss(input_ids)`` on the same weights;
* ``logits-eval:<depth>:hidden-0:dropout=<p>``, ``loss-train:d0:hidden-0``:
  the first case's forward in eval mode on the model built with dropout
  ``LM_DROPOUT`` (a family of its own: one probe per autograd mode, so
  each gets a state twin and meets the state off the plain one, where
  the mode is set by ``model.eval()``: red team 13, b02), and at depth
  0 its loss in train mode at dropout 0 (:func:`add_mode_probes`);
* ``drop-logits:d2:<case>:<k>``, ``drop-loss:d2:<case>:<k>``: the
  first case's forward and loss in train mode on the model built with
  dropout ``LM_DROPOUT``, under two torch seeds
  (:func:`add_loss_dropout_probes`);
* ``prefix:d2:<case>``: ``forward(input_ids[:, :-1])`` on the same
  weights, so that a loss computed from the logits of the text without
  its last token (the other honest reading) is recognised behind a
  non-causal layer too;
* ``reach:d2:<case>:<i>``: the first case at depth 2 with the weights of
  ``layers[i]`` redrawn, so that a model judged at depth 0 (its layer
  fails task 1) still shows that every layer reaches its logits;
* ``compose:d2:<case>``: the first case at depth 2 with each of the
  student's layers answering ``forward`` with a linear map the grader
  draws (the probe's ``substitutes``; the layer's own forward never
  runs), so that how the model combines its layers is judged whatever
  the layer computes (:func:`substitutes`);
* ``before:<depth>``, ``trained:<depth>``: ``forward`` on fresh text of
  the training corpus, before and after the probe's ``fit`` (Adam steps on
  the model's own ``loss``) at depth 1 or 0, each with its own corpus
  (:func:`next_tokens`); the grader computes the loss from the returned
  logits;
* ``init-dropout:d2``: a two-layer model built with dropout
  ``LM_DROPOUT``, described (every dropout rate, at any depth);
* ``trace:...``: forward and loss under the rubric's size sets (the
  shapes item judges the code that runs for the task, loss included).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from grader.api import (ATOL, RTOL, Case, Plan, ProbeInfo, TwinInput,
                        derive_seed, encode_tensor, probe)
from grader.assignments.transformer_block.reference import (TIED,
                                                            encoder_layer,
                                                            layer_shapes,
                                                            lm_shapes)

LABEL = "transformer_block"
HIDDEN_CASES = 3
DEPTHS = {"d2": 2, "d0": 0}
TRAIN_DEPTHS = {"d2": 1, "d0": 0}
# The training item: a small model, Adam, and a corpus drawn from the
# grading seed in which the next token is a hidden permutation of the
# current one (``successor[token]``, depth d0: a model with no layer can
# learn it) or of the current one plus its position (``successor[(token +
# i) % vocab]`` for the token at position i, depth d2: only a model whose
# layer is trained on (token, position) together learns it; a bigram, a
# model without positions or one that trains out_proj alone cannot).
TRAIN = {"vocab_size": 12, "hidden": 16, "num_heads": 2, "fcn_hidden": 32,
         "max_seq_len": 8, "lr": 0.02, "fresh": 16}
#: Adam steps and sequences per batch at each depth (the position corpus
#: needs more of both; larger batches keep it steady under every seed).
TRAIN_STEPS = {"d2": 80, "d0": 40}
TRAIN_BATCH = {"d2": 32, "d0": 8}
# The loss the trained model's logits on fresh text must stay below
# (ln 12 = 2.48 untrained; the reference reaches < 0.3 under every seed
# the kit's tests try, a bigram or a frozen body stays above 1.5 at d2).
TRAIN_BOUND = 0.8
#: The dropout rate of the eval-mode probes that must ignore it.
EVAL_DROPOUT = 0.3
#: Where the rate of the train-mode probes of the layer's own dropout is
#: drawn from the grading seed (:func:`train_dropout`, two decimals: a
#: rate applied in place of the one given, 0.5 say, fails; red team 11,
#: B01), how many torch seeds each runs under, and the rate of the model
#: whose every dropout rate is read (and of its eval-mode logits probes).
TRAIN_DROPOUT = (0.2, 0.4)
TRAIN_SEEDS = 2
LM_DROPOUT = 0.2
RANGES_1 = {"batch_size": (2, 5), "seq_len": (3, 9), "num_heads": (2, 4),
            "head_size": (2, 6), "fcn_hidden": (5, 24)}
#: The train-dropout case's sizes: blocks (sequences) of at least 7 x 10
#: entries, so that two sequences of an honest dropout's draw share a
#: mask with probability (p^2 + (1 - p)^2)^70 <= 2e-12 at p >= 0.2.
RANGES_DROP = {**RANGES_1, "seq_len": (7, 9), "head_size": (5, 6)}
RANGES_2 = {**RANGES_1, "vocab_size": (7, 23)}
INIT_1 = ({"hidden": 12, "num_heads": 3, "fcn_hidden": 20, "dropout": 0.25},
          {"hidden": 10, "num_heads": 2, "fcn_hidden": 7, "dropout": 0.1})
INIT_2 = ({"vocab_size": 19, "hidden": 12, "num_heads": 3, "fcn_hidden": 20,
           "max_seq_len": 9},
          {"vocab_size": 11, "hidden": 10, "num_heads": 2, "fcn_hidden": 7,
           "max_seq_len": 13})


def _rng(seed: int, *labels: object) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, LABEL, *labels))


def _uniform(rng: np.random.Generator, shape: tuple, low: float,
             high: float) -> torch.Tensor:
    return torch.from_numpy(rng.uniform(low, high, shape).astype(np.float32))


def random_weights(rng: np.random.Generator,
                   shapes: dict[str, tuple]) -> dict[str, torch.Tensor]:
    """Weights for ``shapes``: linear layers U(-1/sqrt(fan_in), ..),
    embeddings N(0, 1), LayerNorm weights U(0.5, 1.5), biases U(-.5, .5)."""
    weights = {}
    for name, shape in shapes.items():
        if "embeddings" in name:
            weights[name] = torch.from_numpy(
                rng.standard_normal(shape).astype(np.float32))
        elif ".norm" in name or name.startswith("norm"):
            low, high = (0.5, 1.5) if name.endswith("weight") \
                else (-0.5, 0.5)
            weights[name] = _uniform(rng, shape, low, high)
        else:
            fan_in = shapes[name.rsplit(".", 1)[0] + ".weight"][-1]
            bound = fan_in ** -0.5
            weights[name] = _uniform(rng, shape, -bound, bound)
    return weights


def all_distinct(sizes: dict[str, int]) -> bool:
    """No two sizes (hidden and head_size included) are equal."""
    values = list(sizes.values())
    return len(set(values)) == len(values)


def train_dropout(seed: int) -> float:
    """The rate of the train-mode dropout probes under ``seed``: drawn in
    TRAIN_DROPOUT, two decimals."""
    low, high = TRAIN_DROPOUT
    return round(float(_rng(seed, "task1", "train-dropout", "rate").uniform(
        low, high)), 2)


def draw_sizes(rng: np.random.Generator, lm: bool,
               ranges: dict[str, tuple[int, int]] | None = None
               ) -> dict[str, int]:
    """Sizes that differ from each other (and max_seq_len > seq_len, so
    code that uses one for the other fails), in ``ranges`` (RANGES_2 or
    RANGES_1 when None)."""
    ranges = ranges or (RANGES_2 if lm else RANGES_1)
    while True:
        sizes = {key: int(rng.integers(low, high + 1))
                 for key, (low, high) in ranges.items()}
        sizes["hidden"] = sizes["num_heads"] * sizes["head_size"]
        if lm:
            sizes["max_seq_len"] = sizes["seq_len"] + int(
                rng.integers(2, 7))
        if all_distinct(sizes):
            return sizes


def layer_case(rng: np.random.Generator, name: str,
               ranges: dict[str, tuple[int, int]] | None = None) -> Case:
    """A hidden case of task 1: x ~ N(0, 1) and a layer's weights."""
    sizes = draw_sizes(rng, lm=False, ranges=ranges)
    x = torch.from_numpy(rng.standard_normal(
        (sizes["batch_size"], sizes["seq_len"], sizes["hidden"])
    ).astype(np.float32))
    weights = random_weights(rng, layer_shapes(sizes["hidden"],
                                               sizes["fcn_hidden"]))
    return Case(name=name, public=False, sizes=sizes, x=x, weights=weights)


def longer_case(case: Case, rng: np.random.Generator) -> Case:
    """``case`` (a layer's) on a longer input: the same weights and sizes
    but seq_len, which becomes the smallest larger value no other size
    equals; x ~ N(0, 1) again."""
    others = {value for key, value in case.sizes.items() if key != "seq_len"}
    seq_len = case.sizes["seq_len"] + 1
    while seq_len in others:
        seq_len += 1
    sizes = {**case.sizes, "seq_len": seq_len}
    x = torch.from_numpy(rng.standard_normal(
        (sizes["batch_size"], seq_len, sizes["hidden"])).astype(np.float32))
    return Case(name=f"{case.name}-longer", public=False, sizes=sizes, x=x,
                weights=case.weights, shown=case.shown or case.name,
                variant="on a longer input, the same layer called again")


def lm_case(rng: np.random.Generator, name: str, num_layers: int) -> Case:
    """A hidden case of task 2: input_ids and a model's weights."""
    sizes = draw_sizes(rng, lm=True)
    sizes["num_layers"] = num_layers
    ids = torch.from_numpy(rng.integers(
        0, sizes["vocab_size"], (sizes["batch_size"], sizes["seq_len"])))
    weights = random_weights(rng, lm_shapes(
        sizes["vocab_size"], sizes["hidden"], sizes["fcn_hidden"],
        num_layers, sizes["max_seq_len"]))
    return Case(name=name, public=False, sizes=sizes, x=ids.long(),
                weights=weights)


def with_future_changed(case: Case, position: int,
                        rng: np.random.Generator) -> Case:
    """``case`` with every token after ``position`` replaced by another."""
    ids = case.x.clone()
    vocab = case.sizes["vocab_size"]
    tail = ids[:, position + 1:]
    shift = torch.from_numpy(rng.integers(1, vocab, tail.shape))
    ids[:, position + 1:] = (tail + shift) % vocab
    return Case(name=f"{case.name}-future-{position}", public=False,
                sizes=case.sizes, x=ids, weights=case.weights)


def with_future_rows(case: Case, position: int,
                     rng: np.random.Generator) -> Case:
    """A layer ``case`` with every row of x after ``position`` redrawn."""
    x = case.x.clone()
    tail = x[:, position + 1:]
    x[:, position + 1:] = torch.from_numpy(
        rng.standard_normal(tuple(tail.shape)).astype(np.float32))
    return Case(name=f"{case.name}-future-{position}", public=False,
                sizes=case.sizes, x=x, weights=case.weights)


def with_layer_redrawn(case: Case, layer: int,
                       rng: np.random.Generator) -> Case:
    """A model ``case`` whose ``layers[layer]`` weights are drawn anew."""
    prefix = f"layers.{layer}."
    mine = {name: tuple(value.shape) for name, value in case.weights.items()
            if name.startswith(prefix)}
    weights = {**case.weights, **random_weights(rng, mine)}
    return Case(name=f"{case.name}-layer-{layer}", public=False,
                sizes=case.sizes, x=case.x, weights=weights)


def with_prefix(case: Case) -> Case:
    """A model ``case`` whose input drops its last token."""
    sizes = {**case.sizes, "seq_len": case.sizes["seq_len"] - 1}
    return Case(name=case.name, public=False, sizes=sizes,
                x=case.x[:, :-1].clone(), weights=case.weights,
                variant="without its last token")


def substitutes(rng: np.random.Generator, hidden: int, layers: int
                ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """A linear map (weight [hidden, hidden], bias [hidden]) for each
    of ``layers`` layers: the identity plus U(-1/sqrt(hidden), ..) noise
    (so that no map is near zero and no two commute), bias U(-.5, .5)."""
    bound = hidden ** -0.5
    return {f"layers.{i}": (
        torch.eye(hidden) + _uniform(rng, (hidden, hidden), -bound, bound),
        _uniform(rng, (hidden,), -0.5, 0.5)) for i in range(layers)}


def composed(probe_id: str, case: Case, init: dict,
             maps: dict[str, tuple[torch.Tensor, torch.Tensor]]
             ) -> tuple[dict, ProbeInfo]:
    """The forward probe of ``case`` with each layer's forward
    replaced by its map in ``maps`` (kept in the probe's params)."""
    wire, info = weighted(probe_id, "TransformerLM", case, init)
    wire["substitutes"] = {path: [encode_tensor(w), encode_tensor(b)]
                           for path, (w, b) in maps.items()}
    return wire, replace(info, params={**info.params, "substitutes": maps})


def lm_init(sizes: dict[str, int]) -> dict:
    """TransformerLM's constructor arguments for ``sizes``."""
    return {"args": [sizes["vocab_size"], sizes["hidden"],
                     sizes["num_heads"], sizes["fcn_hidden"],
                     sizes["num_layers"], sizes["max_seq_len"]],
            "kwargs": {"dropout": 0.0}}


def layer_init(sizes: dict[str, int], causal: bool,
               dropout: float = 0.0) -> dict:
    """TransformerEncoderLayer's constructor arguments for ``sizes``."""
    return {"args": [sizes["hidden"], sizes["num_heads"],
                     sizes["fcn_hidden"]],
            "kwargs": {"dropout": dropout, "causal": causal}}


def weighted(probe_id: str, target: str, case: Case, init: dict, *,
             method: str | None = None, causal: bool = False,
             fit: dict | None = None, x: torch.Tensor | None = None,
             seed: int = 0) -> tuple[dict, ProbeInfo]:
    """A probe that loads every weight of ``case`` (state_dict names) and
    calls ``method`` (forward when None) on ``x`` (the case's input)."""
    wire, info = probe(probe_id, target, case=case, init=init,
                       seed=seed, params={
                           "causal": causal,
                           "dropout": init["kwargs"].get("dropout", 0.0)})
    wire["state"] = {name: encode_tensor(value)
                     for name, value in case.weights.items()}
    if target == "TransformerLM":
        wire["tied"] = [list(group) for group in TIED]
    if x is not None:
        wire["call"]["args"] = [encode_tensor(x)]
    if method is not None:
        wire["call"]["method"] = method
    if fit is not None:
        wire["fit"] = fit
    return wire, info


def next_tokens(successor: torch.Tensor, ids: torch.Tensor, position: int,
                depth: str) -> torch.Tensor:
    """The tokens of the training corpus at ``position`` + 1 after
    ``ids`` at ``position``: ``successor[ids]`` at depth d0,
    ``successor[(ids + position) % vocab]`` at d2."""
    if depth == "d0":
        return successor[ids]
    return successor[(ids + position) % successor.numel()]


def corpus(seed: int, depth: str = "d0"
           ) -> tuple[list[torch.Tensor], Case, torch.Tensor]:
    """The training item's batches at ``depth``, the model's initial
    weights (as a case whose input is the fresh text) and the permutation
    behind it (:func:`next_tokens`)."""
    rng = _rng(seed, "training") if depth == "d0" else \
        _rng(seed, "training", depth)
    vocab, length = TRAIN["vocab_size"], TRAIN["max_seq_len"]
    successor = torch.from_numpy(rng.permutation(vocab))

    def text(count: int) -> torch.Tensor:
        ids = torch.empty(count, length, dtype=torch.long)
        ids[:, 0] = torch.from_numpy(rng.integers(0, vocab, count))
        for i in range(1, length):
            ids[:, i] = next_tokens(successor, ids[:, i - 1], i - 1, depth)
        return ids

    batches = [text(TRAIN_BATCH[depth]) for _ in range(TRAIN_STEPS[depth])]
    fresh = text(TRAIN["fresh"])
    sizes = {"vocab_size": vocab, "hidden": TRAIN["hidden"],
             "num_heads": TRAIN["num_heads"],
             "fcn_hidden": TRAIN["fcn_hidden"], "max_seq_len": length,
             "batch_size": TRAIN["fresh"], "seq_len": length}
    return batches, Case(name="training", public=False, sizes=sizes,
                         x=fresh, weights={}), successor


def training_case(seed: int, depth: str) -> Case:
    """The training item's model at ``depth``: sizes, initial weights and
    the fresh text the trained model is judged on."""
    _, base, _ = corpus(seed, depth)
    sizes = {**base.sizes, "num_layers": TRAIN_DEPTHS[depth]}
    rng = _rng(seed, "training-weights", depth)
    weights = random_weights(rng, lm_shapes(
        sizes["vocab_size"], sizes["hidden"], sizes["fcn_hidden"],
        sizes["num_layers"], sizes["max_seq_len"]))
    # Training starts from LayerNorm's own initial values.
    for name in weights:
        if ".norm" in name:
            weights[name] = (torch.ones_like(weights[name])
                             if name.endswith("weight")
                             else torch.zeros_like(weights[name]))
    return Case(name=f"training-{depth}", public=False, sizes=sizes,
                x=base.x, weights=weights)


def build(seed: int, public_only: bool,
          size_sets: tuple[dict[str, int], ...]) -> Plan:
    """Every probe of both tasks, with the trusted case behind each."""
    plan = Plan()
    count = 1 if public_only else HIDDEN_CASES

    # Task 1: TransformerEncoderLayer.
    for index, sizes in enumerate(INIT_1):
        plan.add("task1", probe(
            f"init:{index}", "TransformerEncoderLayer",
            init=layer_init(sizes, causal=False, dropout=sizes["dropout"]),
            describe=True))
    rng = _rng(seed, "task1")
    future_rng = _rng(seed, "task1", "future")
    for index in range(count):
        case = layer_case(rng, f"hidden-{index}")
        for causal in (False, True):
            # Each flag (and the eval-mode rate) is a branch of the
            # forward: family, judged in both autograd modes.
            wire, info = weighted(
                f"forward:{case.name}:causal={causal}",
                "TransformerEncoderLayer", case,
                layer_init(case.sizes, causal), causal=causal)
            plan.add("task1", (wire, replace(
                info, branch=f"causal={causal}")))
        if index == 0:
            # The same layer called again on a longer input (red team
            # 10, R2): a causal mask kept from the first call's length
            # raises or lets the future through here.
            longer = longer_case(case, _rng(seed, "task1", "longer"))
            wire, info = weighted(
                f"forward:{longer.name}:causal=True",
                "TransformerEncoderLayer", longer,
                layer_init(longer.sizes, True), causal=True)
            wire["again"] = True
            plan.add("task1", (wire, replace(info, again=True,
                                             branch="causal=True")))
        wire, info = weighted(
            f"forward:{case.name}:causal=True:dropout={EVAL_DROPOUT:g}",
            "TransformerEncoderLayer", case,
            layer_init(case.sizes, True, EVAL_DROPOUT), causal=True)
        plan.add("task1", (wire, replace(
            info, branch=f"causal=True:dropout={EVAL_DROPOUT:g}")))
        for position in future_positions(case.sizes["seq_len"]):
            plan.add("task1", weighted(
                f"layer-future:{case.name}:{position}",
                "TransformerEncoderLayer",
                with_future_rows(case, position, future_rng),
                layer_init(case.sizes, True), causal=True))

    # Task 2: TransformerLM, at both depths.
    firsts: dict[str, Case] = {}
    for depth, layers in DEPTHS.items():
        for index, sizes in enumerate(INIT_2):
            plan.add("task2", probe(
                f"init:{depth}:{index}", "TransformerLM",
                init=lm_init({**sizes, "num_layers": layers}),
                describe=True))
        rng = _rng(seed, "task2", depth)
        for index in range(count):
            case = lm_case(rng, f"hidden-{index}", layers)
            init = lm_init(case.sizes)
            plan.add("task2", weighted(f"logits:{depth}:{case.name}",
                                       "TransformerLM", case, init))
            for position in future_positions(case.sizes["seq_len"]):
                changed = with_future_changed(case, position, rng)
                plan.add("task2", weighted(
                    f"future:{depth}:{case.name}:{position}",
                    "TransformerLM", changed, init))
            plan.add("task2", weighted(f"loss:{depth}:{case.name}",
                                       "TransformerLM", case, init,
                                       method="loss"))
            if index == 0:
                firsts[depth] = case
            if depth == "d2":
                plan.add("task2", weighted(
                    f"prefix:d2:{case.name}", "TransformerLM",
                    with_prefix(case), init))
            if depth == "d2" and index == 0:
                for layer in range(layers):
                    plan.add("task2", weighted(
                        f"reach:d2:{case.name}:{layer}", "TransformerLM",
                        with_layer_redrawn(case, layer, _rng(
                            seed, "task2", "reach", layer)), init))
                plan.add("task2", composed(
                    f"compose:d2:{case.name}", case, init, substitutes(
                        _rng(seed, "task2", "compose"),
                        case.sizes["hidden"], layers)))
    for depth in TRAIN_DEPTHS:
        batches, _, _ = corpus(seed, depth)
        case = training_case(seed, depth)
        init = lm_init(case.sizes)
        plan.add("task2", weighted(f"before:{depth}", "TransformerLM",
                                   case, init))
        fit = {"method": "loss", "lr": TRAIN["lr"],
               "batches": [encode_tensor(b) for b in batches]}
        plan.add("task2", weighted(
            f"trained:{depth}", "TransformerLM", case, init, fit=fit,
            seed=derive_seed(seed, LABEL, "fit", depth)))
        # Judged against before:<depth>: in its autograd mode
        # (grader.plan.Plan.same_mode).
        plan.same_mode("task2", f"trained:{depth}", f"before:{depth}")
    # After every other probe of their families, whose autograd modes
    # (alternating in plan order) they leave as they were.
    for depth, case in firsts.items():
        add_mode_probes(plan, depth, case)
    add_loss_dropout_probes(plan, seed, firsts["d2"])

    add_dropout_probes(plan, seed)

    # Shape comments.
    for index, sizes in enumerate(size_sets):
        for kind, x, ids in trace_inputs(seed, index, sizes):
            for causal in (False, True):
                plan.add("task1", probe(
                    f"trace:{index}{kind}:causal={causal}",
                    "TransformerEncoderLayer", x=x, trace="forward",
                    init=layer_init(sizes, causal), sizes=sizes))
            for method in ("forward", "loss"):
                wire, info = probe(
                    f"trace:{index}{kind}:{method}", "TransformerLM", x=ids,
                    trace="forward",
                    init=lm_init({**sizes, "num_layers": 1}), sizes=sizes)
                if method == "loss":
                    wire["call"]["method"] = "loss"
                plan.add("task2", (wire, info))
    return plan


def add_mode_probes(plan: Plan, depth: str, case: Case) -> None:
    """The first model case at ``depth`` in the other mode (red team 11):
    ``logits-eval:<depth>:<case>:dropout=<LM_DROPOUT>``, forward in eval mode
    on the model built with dropout LM_DROPOUT (dropout is off in eval
    mode: the logits are the reference's; ``F.dropout``'s default
    ``training=True`` fails, B02), and, at depth 0 alone (no layer of
    the student's, whose own dropout in train mode is task 1's),
    ``loss-train:d0:<case>``, loss in train mode at dropout 0 (the mean
    cross-entropy of the model's own logits, as in eval mode: a loss that
    sums in training fails, B09)."""
    init = lm_init(case.sizes)
    init["kwargs"]["dropout"] = LM_DROPOUT
    plan.add("task2", weighted(
        f"logits-eval:{depth}:{case.name}:dropout={LM_DROPOUT:g}",
        "TransformerLM", replace(
            case, shown=case.name, variant=(
                f"with the model built with dropout={LM_DROPOUT:g} and run "
                f"in eval mode (model.eval(): dropout must be off; use "
                f"nn.Dropout modules, which follow train()/eval(), not "
                f"F.dropout, whose training=True is the default)")),
        init))
    if depth != "d0":
        return
    wire, info = weighted(f"loss-train:{depth}:{case.name}", "TransformerLM",
                          replace(case, shown=case.name,
                                  variant="in train mode (model.train(), "
                                          "dropout=0)"),
                          lm_init(case.sizes), method="loss")
    wire["train"] = True
    plan.add("task2", (wire, replace(info, train=True)))


def add_loss_dropout_probes(plan: Plan, seed: int, case: Case) -> None:
    """``drop-logits:d2:<case>:<k>`` and ``drop-loss:d2:<case>:<k>``: the
    first case's forward and loss in train mode, on the two-layer model
    built with dropout ``LM_DROPOUT``, each under ``TRAIN_SEEDS`` torch
    seeds (red team 13, b05). Where the model's own logits there differ
    from seed to seed (its layers' dropout acts: task 1's), so does a
    loss computed from them; a loss that runs the model in eval mode
    gives one value under every seed."""
    init = lm_init(case.sizes)
    init["kwargs"]["dropout"] = LM_DROPOUT
    for k in range(TRAIN_SEEDS):
        shown = replace(case, shown=case.name, variant=(
            f"in train mode (model.train()) with the model built with "
            f"dropout={LM_DROPOUT:g}, under torch seed {k + 1} of "
            f"{TRAIN_SEEDS}"))
        for kind, method in (("logits", None), ("loss", "loss")):
            wire, info = weighted(
                f"drop-{kind}:d2:{case.name}:{k}", "TransformerLM", shown,
                init, method=method,
                seed=derive_seed(seed, LABEL, "drop-loss", k))
            wire["train"] = True
            plan.add("task2", (wire, replace(info, train=True)))


def sublayer_case(case: Case, kind: str, rng: np.random.Generator) -> Case:
    """``case`` made so that one sublayer's dropout alone shows in train
    mode, whatever dropout the attention applies inside: its value
    weights are zero, so it returns ``mix.bias`` exactly. ``"att"``:
    mix.bias is drawn away from 0 (|b| in 0.5..1.5), the feed-forward
    network returns 0 (its last linear is zero) and norm1 is LayerNorm's
    identity (weight 1, bias 0), so the output is norm2(norm1(x +
    dropout(b))) and x + dropout(b) is read back from it up to a shift
    and a scale; ``"fcn"``: mix.bias is zero (the attention returns 0),
    so the output is norm2(h + dropout(fcn(h))), h = norm1(x).
    :func:`silenced_by_mix` gives the same case silenced otherwise."""
    weights = dict(case.weights)
    hidden = case.sizes["hidden"]
    for name in ("self_attention.v.weight", "self_attention.v.bias"):
        weights[name] = torch.zeros_like(weights[name])
    if kind == "att":
        sign = torch.from_numpy(rng.choice([-1.0, 1.0], hidden)).float()
        weights["self_attention.mix.bias"] = sign * _uniform(
            rng, (hidden,), 0.5, 1.5)
        for name in ("fcn.2.weight", "fcn.2.bias", "norm1.bias"):
            weights[name] = torch.zeros_like(weights[name])
        weights["norm1.weight"] = torch.ones(hidden)
    else:
        weights["self_attention.mix.bias"] = torch.zeros(hidden)
    return Case(name=f"{case.name}-{kind}", public=False, sizes=case.sizes,
                x=case.x, weights=weights, shown=case.name,
                variant=SUBLAYER_WORDS[kind])


def silenced_by_mix(sublayer: Case, base: Case, kind: str) -> Case:
    """``sublayer`` (:func:`sublayer_case` of ``base``) with the
    attention's value weights back at ``base``'s and its output
    projection (``mix.weight``) zero instead: the attention still
    returns ``mix.bias`` exactly, whatever its probabilities and their
    dropout, so the same sublayer's dropout alone shows, read back the
    same way (red team 14, b07: a residual dropout right only while the
    value weights are zero is wrong here)."""
    weights = dict(sublayer.weights)
    for name in ("self_attention.v.weight", "self_attention.v.bias"):
        weights[name] = base.weights[name]
    weights["self_attention.mix.weight"] = torch.zeros_like(
        weights["self_attention.mix.weight"])
    return replace(sublayer, name=f"{sublayer.name}-mix", weights=weights,
                   variant=SILENCED_BY_MIX[kind])


#: How a report names each train-mode dropout case.
SUBLAYER_WORDS = {
    "att": "with zero value weights and no feed-forward output (only the "
           "attention sublayer's dropout acts)",
    "fcn": "with zero value weights and mix.bias (only the feed-forward "
           "sublayer's dropout acts)"}
#: The same, for the cases silenced by the output projection instead.
SILENCED_BY_MIX = {
    "att": "with a zero mix.weight and no feed-forward output (only the "
           "attention sublayer's dropout acts)",
    "fcn": "with a zero mix.weight and mix.bias (only the feed-forward "
           "sublayer's dropout acts)"}


def add_dropout_probes(plan: Plan, seed: int) -> None:
    """The probes of dropout in train mode (docs/transformer_block.md,
    "Dropout in train mode"): ``train-dropout:<kind>:<k>``, the causal
    layer built with dropout :func:`train_dropout` on each sublayer case
    (:func:`sublayer_case`) under ``TRAIN_SEEDS`` torch seeds (task1);
    ``init-dropout:d2``, a two-layer model built with dropout
    ``LM_DROPOUT``, described (task2: every rate, at any depth; a
    sublayer's seeds call one layer, ``again``), and
    ``init-dropout``, the causal layer built at its sizes and rate,
    described (what the model's layers are compared with)."""
    rng = _rng(seed, "task1", "train-dropout")
    base = layer_case(rng, "train-dropout", RANGES_DROP)
    rate = train_dropout(seed)
    for kind in SUBLAYER_WORDS:
        case = sublayer_case(base, kind, rng)
        init = layer_init(case.sizes, True, rate)
        # Two layers of TRAIN_SEEDS calls each: one silences the
        # attention by its value weights, the other by its output
        # projection (b07); the masks of all four are judged together.
        for k in range(2 * TRAIN_SEEDS):
            again = k % TRAIN_SEEDS > 0
            wire, info = weighted(
                f"train-dropout:{kind}:{k}", "TransformerEncoderLayer",
                case if k < TRAIN_SEEDS else silenced_by_mix(case, base,
                                                             kind),
                init, causal=True,
                seed=derive_seed(seed, LABEL, "train-dropout", kind, k))
            wire["train"] = wire["describe"] = True
            if again:
                # The seeds' calls are one layer's (red team 10, R2): a
                # mask kept from its first call shows as equal masks.
                wire["again"] = True
            plan.add("task1", (wire, replace(info, train=True, again=again,
                                             params={**info.params,
                                                     "kind": kind},
                                             branch=kind)))
    plan.add("task1", probe(
        "init-dropout", "TransformerEncoderLayer", describe=True,
        init=layer_init(INIT_2[0], True, LM_DROPOUT)))
    init = lm_init({**INIT_2[0], "num_layers": DEPTHS["d2"]})
    init["kwargs"]["dropout"] = LM_DROPOUT
    plan.add("task2", probe("init-dropout:d2", "TransformerLM", init=init,
                            describe=True, params={"dropout": LM_DROPOUT}))


def future_positions(seq_len: int) -> tuple[int, ...]:
    """The positions after which the causality probes change the text."""
    return tuple(sorted({0, seq_len // 2, seq_len - 2}))


def trace_inputs(seed: int, index: int, sizes: dict[str, int]
                 ) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Inputs of the shape-trace probes under size set ``index``: for the
    layer, zeros and N(0, 1) values; for the model, token ids."""
    generator = torch.Generator().manual_seed(
        derive_seed(seed, "trace", LABEL, index))
    shape = (sizes["batch_size"], sizes["seq_len"])
    ids = torch.randint(0, sizes["vocab_size"], shape, generator=generator)
    return [("", torch.zeros(shape + (sizes["hidden"],)), ids),
            (":random", torch.randn(shape + (sizes["hidden"],),
                                    generator=generator), ids.flip(-1))]


def twin_input(task: str, info: ProbeInfo, seed: int) -> TwinInput | None:
    """Fresh inputs for the twins of a probe (grader.plan.TwinInput): for a
    TransformerEncoderLayer's forward without random dropout, N(0, 1)
    values of the probe's input's shape (from a stream derived one-way
    from the seed) with the reference layer's outputs for them and for the
    probe's own input. None otherwise (the model's probes: token ids,
    substitute layers, methods; dropout in training; traces): the twin
    then repeats the probe's input."""
    case = info.case
    if case is None or info.trace or info.target != \
            "TransformerEncoderLayer" or (info.train
                                          and info.params.get("dropout")):
        return None
    generator = torch.Generator().manual_seed(
        derive_seed(seed, LABEL, "twin", task, info.id))
    inputs = tuple(torch.randn(tuple(case.x.shape), generator=generator)
                   for _ in range(4))
    weights = {name: value.double() for name, value in case.weights.items()}

    def answer(inputs: torch.Tensor) -> torch.Tensor:
        return encoder_layer(inputs.double(), weights,
                             case.sizes["num_heads"],
                             bool(info.params.get("causal")))

    return TwinInput(inputs=inputs,
                     expected=tuple(answer(x) for x in inputs),
                     reference=answer(case.x), rtol=RTOL, atol=ATOL)
