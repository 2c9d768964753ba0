"""Why a value test failed: the classic mistakes, named as the grader
names them.

A value test knows the stored outputs and the weights, never the
reference code. It names a cause only when a probe of *your own* model
shows it, and otherwise says where to look without guessing:

* **no scaling / another scale**: your model, given query weights divided
  (or multiplied) by the missing factor, reproduces the stored values;
* **softmax over the wrong dimension**: the probabilities of a query do
  not sum to 1, those of a key (or of another dimension) do;
* **the causal mask**: which positions the probabilities hide (the
  current token too, or not the next one).

The sentences are the grader's own (its ``[diagnoses]``), word for word.
"""
from __future__ import annotations

from types import ModuleType

import torch
from builders import multi_head, self_attention

NO_SCALING = ("The scores are not divided by the square root of the key "
              "size. Divide q k^T by sqrt(d_k) before the softmax.")
WRONG_SCALE = ("The scores are divided by the wrong constant. Divide q k^T "
               "by sqrt(d_k): sqrt(hidden) for SelfAttention, "
               "sqrt(head_size) for MultiHeadSelfAttention.")
SOFTMAX_DIM = ("The softmax runs over the wrong dimension. Take it over the "
               "keys, the last dimension of the scores (dim=-1).")
MASK_DIAGONAL = ("The causal mask also hides the current token. Mask only "
                 "j > i: torch.triu(..., diagonal=1).")
MASK_SEES_NEXT = ("The causal mask lets each token see the next one. Look "
                  "at the mask's diagonal: mask every j > i, "
                  "torch.triu(..., diagonal=1), not diagonal=2.")
SEES_FUTURE = ("probs are not 0 above the diagonal: a token attends to the "
               "future. Mask every j > i (torch.triu(..., diagonal=1)) and "
               "fill the masked scores with -inf.")
#: The grader's id of each sentence (tests/kit checks they are its words).
DIAGNOSES = {"no_scaling": NO_SCALING, "wrong_scale": WRONG_SCALE,
             "softmax_dim": SOFTMAX_DIM, "mask_diagonal": MASK_DIAGONAL,
             "mask_sees_next": MASK_SEES_NEXT}


def _close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    return (actual.shape == expected.shape and bool(torch.allclose(
        actual.detach().float(), expected, rtol=1e-4, atol=1e-5)))


def _scaled_q(model: torch.nn.Module, factor: float) -> torch.nn.Module:
    """``model`` with its query layer multiplied by ``factor``."""
    with torch.no_grad():
        model.q.weight.data = model.q.weight.data * factor
        model.q.bias.data = model.q.bias.data * factor
    return model


def _run(call, *args, **kwargs):
    """``call(...)``, or None when it raises (the test itself reports
    that)."""
    try:
        with torch.no_grad():
            return call(*args, **kwargs)
    except Exception:  # the student's code may raise anything
        return None


def _sums_to_one(probs: torch.Tensor, dim: int) -> bool:
    sums = probs.sum(dim)
    return bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-4))


def _scale_clue(matches, right: float, wrong: dict[str, float]
                ) -> str | None:
    """NO_SCALING or WRONG_SCALE when ``matches(factor)`` (the model with
    its queries times ``factor`` reproduces the stored values) holds for
    the factor that undoes the student's divisor."""
    if matches(1 / right):
        return NO_SCALING
    if any(matches(divisor / right) for divisor in wrong.values()):
        return WRONG_SCALE
    return None


def self_attention_clue(impl: ModuleType, values: type) -> str | None:
    """The cause of a wrong ``SelfAttention`` output, when a probe
    shows it; None otherwise."""
    hidden = values.hidden

    def matches(factor: float) -> bool:
        model = _run(lambda: _scaled_q(self_attention(impl, values), factor))
        output = None if model is None else _run(model, values.x)
        return isinstance(output, torch.Tensor) and _close(
            output, values.output)

    clue = _scale_clue(matches, hidden ** 0.5,
                       {"hidden": hidden,
                        "input_size": values.input_size ** 0.5})
    if clue is not None:
        return clue
    # Values that are all 1: each output is the sum of a query's weights.
    model = _run(self_attention, impl, values)
    if model is None:
        return None
    with torch.no_grad():
        model.v.weight.data = torch.zeros_like(model.v.weight)
        model.v.bias.data = torch.ones_like(model.v.bias)
    sums = _run(model, values.x)
    if not isinstance(sums, torch.Tensor) or sums.shape[:2] != (
            values.x.shape[:2]) or torch.isnan(sums).any():
        return None
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4) and \
            torch.allclose(sums.sum(1), torch.full_like(
                sums.sum(1), values.seq_len), atol=1e-3):
        return SOFTMAX_DIM
    return None


def _probs(impl: ModuleType, values: type, causal: bool,
           factor: float = 1.0) -> torch.Tensor | None:
    """Your probs on ``values`` (queries times ``factor``), or None when
    they cannot be had in the contract shape."""
    model = _run(multi_head, impl, values, causal=causal)
    if model is None:
        return None
    result = _run(_scaled_q(model, factor), values.x, return_attention=True)
    if not (isinstance(result, tuple) and len(result) == 2
            and isinstance(result[1], torch.Tensor)):
        return None
    probs = result[1].detach().float()
    seq = values.seq_len
    if probs.shape != (values.batch_size * values.num_heads, seq, seq):
        return None
    return probs


def mask_clue(probs: torch.Tensor) -> str | None:
    """What causal probs show about the mask, or None."""
    seq = probs.shape[-1]
    later = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=0)
    later[0] = False
    if torch.isnan(probs[:, 0]).all() or (
            seq > 1 and torch.all(probs[:, later] == 0)):
        return MASK_DIAGONAL
    if torch.isnan(probs).any():
        return None
    future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
    if torch.all(probs[:, future] == 0):
        return None
    beyond = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=2)
    if seq > 2 and torch.all(probs[:, beyond] == 0) and torch.all(
            probs.diagonal(offset=1, dim1=1, dim2=2) > 0):
        return MASK_SEES_NEXT
    return SEES_FUTURE


def multi_head_clue(impl: ModuleType, values: type, causal: bool = False
                    ) -> str | None:
    """The cause of wrong ``MultiHeadSelfAttention`` values, when a probe
    shows it; None otherwise."""
    probs = _probs(impl, values, causal)
    if probs is None:
        return None
    if causal:
        clue = mask_clue(probs)
        if clue is not None:
            return clue
    if torch.isnan(probs).any():
        return None
    if not _sums_to_one(probs, -1):
        others = [d for d in (0, 1) if _sums_to_one(probs, d)]
        return SOFTMAX_DIM if others else None
    expected = values.probs_causal if causal else values.probs
    head_size = values.hidden // values.num_heads

    def matches(factor: float) -> bool:
        scaled = _probs(impl, values, causal, factor)
        return scaled is not None and _close(scaled, expected)

    return _scale_clue(matches, head_size ** 0.5,
                       {"hidden": values.hidden ** 0.5,
                        "head_size": head_size})


def hint(clue: str | None, otherwise: str) -> str:
    """The clue when there is one, else where to look (``otherwise``)."""
    return clue if clue is not None else otherwise
