"""The inputs the grader runs a submission on, and what it asks for.

:func:`build` returns a :class:`~grader.plan.Plan`: for each task, the
probes the sandbox runs (construct this class with these sizes and weights,
call it on this input, in this mode) and, for the checks, the trusted case
behind every probe.

Cases: the public test values (``transformer_lm.test_values``) and, unless
``public_only``, hidden random cases derived from the grading seed, with
sizes chosen so that no two of batch_size, seq_len, input_size, hidden,
num_heads, head_size and batch_size * num_heads are equal.
"""
from __future__ import annotations

import numpy as np
import torch

from grader.plan import Case, Plan, probe

LAYERS_1 = ("q", "k", "v")
LAYERS_2 = ("q", "k", "v", "mix")
HIDDEN_CASES = 3
DROPOUT_P = 0.5
# SelfAttention(input_size, hidden) built for task1.init.
INIT_SIZES = {"init": (7, 9), "init:other-sizes": (11, 6)}


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


def _distinct_sizes(rng: np.random.Generator, heads: bool) -> dict:
    while True:
        sizes = {"batch_size": int(rng.integers(2, 5)),
                 "seq_len": int(rng.integers(3, 10)),
                 "input_size": int(rng.integers(3, 13))}
        if heads:
            sizes["num_heads"] = int(rng.integers(2, 5))
            head_size = int(rng.integers(2, 7))
            sizes["hidden"] = sizes["num_heads"] * head_size
            values = list(sizes.values()) + [
                head_size, sizes["batch_size"] * sizes["num_heads"]]
        else:
            sizes["hidden"] = int(rng.integers(3, 13))
            values = list(sizes.values())
        if len(set(values)) == len(values):
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


def hidden_cases(seed: int) -> dict[str, list[Case]]:
    """Random cases derived from ``seed``, per task."""
    rng = np.random.default_rng([seed, 1])
    task1 = [random_case(rng, f"hidden-{i}", _distinct_sizes(rng, False),
                         LAYERS_1) for i in range(HIDDEN_CASES)]
    task2 = [random_case(rng, f"hidden-{i}", _distinct_sizes(rng, True),
                         LAYERS_2) for i in range(HIDDEN_CASES)]
    return {"task1": task1, "task2": task2}


def zero_qk(case: Case) -> Case:
    """The same case with zero query and key weights and biases.

    Every score is then 0 and the probabilities are uniform whatever the
    score computation, so the value-and-mix step can be judged alone.
    """
    weights = dict(case.weights)
    for name in ("q.weight", "q.bias", "k.weight", "k.bias"):
        weights[name] = torch.zeros_like(weights[name])
    return Case(name=f"{case.name}-zero-qk", public=case.public,
                sizes=case.sizes, x=case.x, weights=weights)


def dropout_case(seed: int) -> Case:
    """A case large enough to measure a dropout rate (864 probabilities).

    With p = 0.5 the share of zeros falls outside [0.3, 0.7] with a
    probability below 1e-30, so a correct dropout never fails.
    """
    rng = np.random.default_rng([seed, 2])
    sizes = {"batch_size": 3, "seq_len": 12, "input_size": 5, "hidden": 8,
             "num_heads": 2}
    return random_case(rng, "dropout", sizes, LAYERS_2)


def _mha_init(case: Case, causal: bool = False,
              dropout: float = 0.0) -> dict:
    s = case.sizes
    return {"args": [s["input_size"], s["hidden"], s["num_heads"]],
            "kwargs": {"causal": causal, "dropout": dropout}}


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
                                init={"args": [case.sizes["input_size"],
                                               case.sizes["hidden"]]}))

    # Task 2: MultiHeadSelfAttention.
    task2 = [c for c in judged["task2"] if public_only or not c.public]
    for case in task2:
        for causal in (False, True):
            kind = "causal" if causal else "probs"
            plan.add("task2", probe(
                f"{kind}:{case.name}", "MultiHeadSelfAttention", case=case,
                layers=LAYERS_2, init=_mha_init(case, causal),
                kwargs={"return_attention": True}, causal=causal))
        blank = zero_qk(case)
        plan.add("task2", probe(
            f"zero-qk:{case.name}", "MultiHeadSelfAttention", case=blank,
            layers=LAYERS_2, init=_mha_init(blank),
            kwargs={"return_attention": True}))
    first = task2[0]
    plan.add("task2", probe(f"att-only:{first.name}",
                            "MultiHeadSelfAttention", case=first,
                            layers=LAYERS_2, init=_mha_init(first)))
    drop = dropout_case(seed)
    for train in (False, True):
        mode = "train" if train else "eval"
        plan.add("task2", probe(
            f"dropout-{mode}", "MultiHeadSelfAttention", case=drop,
            layers=LAYERS_2, init=_mha_init(drop, dropout=DROPOUT_P),
            kwargs={"return_attention": True}, train=train,
            seed=seed, dropout=DROPOUT_P))

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
    from grader.plan import derive_seed

    shape = (sizes["batch_size"], sizes["seq_len"], sizes["input_size"])
    generator = torch.Generator().manual_seed(
        derive_seed(seed, "trace", index))
    return [("", torch.zeros(shape)),
            (":random", torch.randn(shape, generator=generator))]
