"""The public test values: names, shapes, fresh copies, precision, 2022."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_lm import test_values as tv

ROOT = Path(__file__).resolve().parents[2]
DATA_2022 = json.loads(
    (ROOT / "solutions" / "data" / "hw4_2022_test_values.json").read_text())


def _tensor(entry: dict) -> torch.Tensor:
    return torch.tensor(entry["values"]).reshape(entry["shape"])


@pytest.mark.parametrize("cls, shapes", [
    (tv.SelfAttentionTestValues,
     {"x": (3, 5, 7), "q_weight": (9, 7), "k_bias": (9,),
      "output": (3, 5, 9)}),
    (tv.MultiHeadAttentionTestValues,
     {"x": (3, 5, 7), "mix_weight": (9, 9), "mix_bias": (9,),
      "output": (3, 5, 9), "output_causal": (3, 5, 9),
      "probs": (9, 5, 5)}),
    (tv.MultiHeadAttentionDistinctTestValues,
     {"x": (2, 5, 7), "q_weight": (12, 7), "mix_weight": (12, 12),
      "output": (2, 5, 12), "probs_causal": (6, 5, 5)}),
])
def test_names_and_shapes(cls, shapes):
    """The seed's names with the seed's shapes (and the distinct case)."""
    for name, shape in shapes.items():
        value = getattr(cls, name)
        assert value.dtype == torch.float32
        assert tuple(value.shape) == shape, name


def test_every_access_is_a_fresh_copy():
    """An in-place edit of one access cannot change the next."""
    first = tv.MultiHeadAttentionTestValues.k_weight
    first.add_(1.0)
    second = tv.MultiHeadAttentionTestValues.k_weight
    assert not torch.equal(first, second)
    torch.testing.assert_close(first - 1.0, second)


def test_distinct_case_has_all_different_sizes():
    """batch, seq, input, hidden, heads and head size all differ."""
    c = tv.MultiHeadAttentionDistinctTestValues
    sizes = [c.batch_size, c.seq_len, c.input_size, c.hidden, c.num_heads,
             c.hidden // c.num_heads]
    assert len(set(sizes)) == len(sizes), sizes


@pytest.mark.parametrize("name", ["SelfAttentionTestValues",
                                  "MultiHeadAttentionTestValues"])
def test_inputs_and_weights_are_the_2022_values(name):
    """Literal inputs and weights, bit for bit the 2022 kit's."""
    original = DATA_2022[name]
    stored = getattr(tv, name)
    for key, entry in original.items():
        if isinstance(entry, dict) and not key.startswith("output"):
            assert torch.equal(getattr(stored, key), _tensor(entry)), key


@pytest.mark.parametrize("name, key", [
    ("SelfAttentionTestValues", "output"),
    ("MultiHeadAttentionTestValues", "output"),
    ("MultiHeadAttentionTestValues", "output_causal")])
def test_outputs_agree_with_the_2022_outputs(name, key):
    """Recomputed outputs agree with the 2022 ones (rtol 1e-4, atol 1e-5)."""
    torch.testing.assert_close(getattr(getattr(tv, name), key),
                               _tensor(DATA_2022[name][key]),
                               rtol=1e-4, atol=1e-5)


def test_outputs_are_stored_at_full_float32_precision():
    """Stored outputs equal the float64 reference rounded to float32."""
    from solutions import build

    reference = build._load_reference("modeling_attention")
    values = tv.MultiHeadAttentionDistinctTestValues
    model = reference.MultiHeadSelfAttention(7, 12, 3).double().eval()
    for layer in ("q", "k", "v", "mix"):
        getattr(model, layer).weight.data = getattr(
            values, f"{layer}_weight").double()
        getattr(model, layer).bias.data = getattr(
            values, f"{layer}_bias").double()
    with torch.no_grad():
        att, probs = model(values.x.double(), return_attention=True)
    assert torch.equal(values.output, att.float())
    assert torch.equal(values.probs, probs.float())


def test_float32_literals_round_trip():
    """The shortest decimal written for a float32 reads back exactly."""
    from solutions.build import _float32_literal

    rng = np.random.default_rng(0)
    samples = rng.standard_normal(2000).astype(np.float32)
    for value in samples:
        assert np.float32(float(_float32_literal(value))) == value
