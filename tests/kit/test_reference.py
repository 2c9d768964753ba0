"""The reference solution against independent oracles.

An oracle here is torch's own ``scaled_dot_product_attention`` in float64 on
random sizes (so no stored tensor can be over-fitted), plus the original
2022 kit's stored outputs.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
DATA_2022 = json.loads(
    (ROOT / "solutions" / "data" / "hw4_2022_test_values.json").read_text())


@pytest.fixture(scope="module")
def ref():
    """The reference solution module, loaded from its file."""
    path = ROOT / "solutions" / "modeling_attention.py"
    spec = importlib.util.spec_from_file_location("reference_solution",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tensor(entry: dict) -> torch.Tensor:
    return torch.tensor(entry["values"]).reshape(entry["shape"])


def _load(model: torch.nn.Module, values: dict, layers: str) -> None:
    for layer in layers.split():
        getattr(model, layer).weight.data = _tensor(values[f"{layer}_weight"])
        getattr(model, layer).bias.data = _tensor(values[f"{layer}_bias"])


def test_reproduces_2022_self_attention(ref):
    """SelfAttention on the 2022 values, rtol 1e-4 / atol 1e-5."""
    values = DATA_2022["SelfAttentionTestValues"]
    model = ref.SelfAttention(values["input_size"], values["hidden"]).eval()
    _load(model, values, "q k v")
    torch.testing.assert_close(model(_tensor(values["x"])),
                               _tensor(values["output"]),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal, key", [(False, "output"),
                                         (True, "output_causal")])
def test_reproduces_2022_multi_head(ref, causal, key):
    """MultiHeadSelfAttention on the 2022 values, causal and not."""
    values = DATA_2022["MultiHeadAttentionTestValues"]
    model = ref.MultiHeadSelfAttention(values["input_size"],
                                       values["hidden"],
                                       values["num_heads"],
                                       causal=causal).eval()
    _load(model, values, "q k v mix")
    torch.testing.assert_close(model(_tensor(values["x"])),
                               _tensor(values[key]), rtol=1e-4, atol=1e-5)


def _oracle(model, x: torch.Tensor, causal: bool):
    """(att, probs) from SDPA on the model's own weights (float64)."""
    heads = model.num_heads

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (heads, -1)).transpose(1, 2)

    q, k, v = (split(getattr(model, n)(x)) for n in "qkv")
    eye = torch.eye(x.shape[1], dtype=x.dtype).expand(*q.shape[:2], -1, -1)
    probs = F.scaled_dot_product_attention(q, k, eye, is_causal=causal)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    att = model.mix(out.transpose(1, 2).flatten(2))
    return att, probs.flatten(0, 1)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_matches_sdpa_on_random_sizes(ref, seed, causal):
    """Random sizes, all different; probs batch-major; float64."""
    g = torch.Generator().manual_seed(seed)
    bs, seq, inp = (int(torch.randint(lo, hi, (1,), generator=g))
                    for lo, hi in ((1, 5), (1, 10), (1, 13)))
    heads = int(torch.randint(1, 5, (1,), generator=g))
    head = int(torch.randint(1, 7, (1,), generator=g))
    model = ref.MultiHeadSelfAttention(inp, heads * head, heads,
                                       causal=causal).double().eval()
    x = torch.randn(bs, seq, inp, dtype=torch.float64, generator=g)
    with torch.no_grad():
        att, probs = model(x, return_attention=True)
        want_att, want_probs = _oracle(model, x, causal)
    torch.testing.assert_close(att, want_att)
    torch.testing.assert_close(probs, want_probs)


@pytest.mark.parametrize("seed", range(4))
def test_self_attention_matches_sdpa_on_random_sizes(ref, seed):
    """SelfAttention = SDPA with scale 1 / sqrt(hidden)."""
    g = torch.Generator().manual_seed(100 + seed)
    bs, seq, inp, hidden = (int(torch.randint(1, 11, (1,), generator=g))
                            for _ in range(4))
    model = ref.SelfAttention(inp, hidden).double()
    x = torch.randn(bs, seq, inp, dtype=torch.float64, generator=g)
    with torch.no_grad():
        want = F.scaled_dot_product_attention(model.q(x), model.k(x),
                                              model.v(x))
        torch.testing.assert_close(model(x), want)


def test_causal_allows_the_diagonal_and_hides_the_future(ref):
    """Position i attends to j <= i: the first row is [1, 0, ..., 0]."""
    model = ref.MultiHeadSelfAttention(4, 6, 2, causal=True).eval()
    _, probs = model(torch.randn(2, 5, 4), return_attention=True)
    assert torch.all(probs[:, 0, 0] == 1)
    past = torch.ones(5, 5, dtype=torch.bool).tril()
    assert torch.all(probs[:, ~past] == 0)
    assert torch.all(probs[:, past] > 0)


def test_dropout_acts_on_returned_probabilities(ref):
    """Train mode, p=0.5: each prob is 0 or twice its eval value."""
    torch.manual_seed(0)
    model = ref.MultiHeadSelfAttention(5, 8, 2, dropout=0.5)
    x = torch.randn(3, 12, 5)
    _, kept = model.eval()(x, return_attention=True)
    _, dropped = model.train()(x, return_attention=True)
    zero = dropped == 0
    torch.testing.assert_close(dropped[~zero], 2 * kept[~zero])
    assert 0.3 < zero.float().mean().item() < 0.7


def test_value_error_names_both_sizes(ref):
    """The error a user sees when num_heads does not divide hidden."""
    with pytest.raises(ValueError, match=r"hidden=10 and num_heads=3"):
        ref.MultiHeadSelfAttention(7, 10, 3)
