"""Reading dropout where the output does not determine the weights
(attention_basics' narrow dropout case; red team 14, a05).

``mistakes.row_fates`` tries every way to drop a causal row's weights:
it must give back the mask a dropout on the weights drew, and find no
way for dropout placed anywhere else. The graded effect of the narrow
case on whole files is in test_effects.py (``narrow_*`` rows).
"""
from __future__ import annotations

import torch

from grader.assignments.attention_basics import cases, mistakes

P = 0.5


def _weights_values(seed: int, heads: int = 2, tokens: int = 10,
                    width: int = 3, batch: int = 4
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, heads, tokens, tokens, generator=generator,
                         dtype=torch.float64)
    future = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
    weights = torch.softmax(scores.masked_fill(future, -torch.inf), -1)
    values = torch.randn(batch, heads, tokens, width, generator=generator,
                         dtype=torch.float64)
    return weights, values


def test_the_mask_of_a_dropout_on_the_weights_is_read_back() -> None:
    weights, values = _weights_values(1)
    generator = torch.Generator().manual_seed(2)
    keep = torch.rand(weights.shape, generator=generator,
                      dtype=torch.float64) >= P
    output = ((weights * keep / (1 - P)) @ values).float()
    dropped, error = mistakes.row_fates(output, weights, values, P)
    causal = torch.ones(weights.shape[-2:], dtype=torch.bool).tril()
    assert float(error.max()) < 1e-5
    assert torch.equal(dropped & causal, ~keep & causal)
    assert not dropped[..., ~causal].any()


def test_dropout_on_the_values_or_the_context_is_no_way_of_dropping() -> None:
    weights, values = _weights_values(3)
    generator = torch.Generator().manual_seed(4)
    on_values = values * (torch.rand(values.shape, generator=generator,
                                     dtype=torch.float64) >= P) / (1 - P)
    context = weights @ values
    on_context = context * (torch.rand(context.shape, generator=generator,
                                       dtype=torch.float64) >= P) / (1 - P)
    unscaled = (weights * (torch.rand(weights.shape, generator=generator,
                                      dtype=torch.float64) >= P)) @ values
    for wrong in (weights @ on_values, on_context, unscaled):
        _, error = mistakes.row_fates(wrong.float(), weights, values, P)
        assert float(error.max()) > 1e-2


def test_the_narrow_case_is_narrow_at_every_seed() -> None:
    """head_dim (task 4: d_out) and d_in below num_tokens, rows short
    enough to enumerate, out_proj the identity (task 6)."""
    for seed in range(40):
        for task in ("task4", "task6"):
            case = cases.narrow_dropout_case(seed, task)
            sizes = case.sizes
            width = sizes.get("head_dim", sizes["d_out"])
            assert width < sizes["num_tokens"] <= 12
            assert sizes["d_in"] < sizes["num_tokens"]
            if task == "task6":
                assert torch.equal(case.weights["out_proj.weight"],
                                   torch.eye(sizes["d_out"]))
