"""The reference of the ``attention_basics`` assignment reproduces the seeds.

``solutions/attention_basics.py`` is loaded by path, as the grader loads a
submission. The first group of tests checks every number the seeds
(``../shared/seeds/000_60fb55e0ba870f80.txt``, ``001_74bcac3f9acb2dd5.txt``,
``002_90a7119fc9ea6a05.txt``, ``004_1cc9cce071820e7e.txt``) printed that
the reference can reproduce, one test per printed cell; the second group
checks properties the seeds teach (causal masks, the mask buffer, dropout,
weight splits, the fused head split) on random inputs in float64.

Printed numbers are compared with ``rtol=1e-4, atol=1e-4``: the seeds
printed 4 decimals, so a printed value is up to 5e-5 away from the float32
value it rounds, and float32 arithmetic adds a little more.

Printed numbers that are *not* reproduced, and why:

* seed 000 In[15]-In[31] ("The cat sleeps"): the three ``nn.Linear(6, 6)``
  were created without ``torch.manual_seed``, and W_key's bias and W_value
  were never printed in full, so the weights cannot be recreated. The
  printed queries, keys and values are used instead (see
  ``test_seed000_head_split_attention_weights``). Recomputing the printed
  queries from the printed (rounded) W_query, or the printed scores from the
  printed (rounded) queries and keys, is off by up to 4e-4, beyond the
  4-decimal tolerance, so those cells are not checked.
* seed 001 In[10] (``attention[0][0]``): ``x = torch.randn(...)`` and
  ``nn.Linear(input_dim, 3 * d_model)`` ran without ``torch.manual_seed``;
  only the printed shapes are reproducible.
* seed 004, the two dropout cells (``dropout(example)`` and
  ``dropout(attn_weights)`` after ``torch.manual_seed(123)``): the printed
  masks agree with each other but not with the mask torch's CPU generator
  draws for ``manual_seed(123)`` (torch 2.13 on CPU gives the first row
  ``[2., 2., 0., 2., 2., 0.]``, the seed printed ``[2., 2., 2., 2., 2.,
  2.]``): they come from another generator (another device or torch
  version). ``test_dropout_acts_on_the_attention_weights`` checks the same
  cell's claim on this platform instead.
* seed 004 ``masked_simple_norm`` was not printed; its first cell sets
  ``query = inputs.shape[0]`` (an int, which ``torch.dot`` rejects): the
  printed scores are those of ``query = inputs[1]``, as in seed 002.
"""
from __future__ import annotations

import importlib.util
import itertools
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "solutions" / "attention_basics.py"
RUBRIC = ROOT / "grader" / "assignments" / "attention_basics" / "rubric.toml"

PUBLIC_NAMES = {
    "simple_self_attention", "SelfAttention_v1", "SelfAttention_v2",
    "CausalAttention", "MultiHeadAttentionWrapper", "MultiHeadAttention",
    "QKVMultiheadAttention",
}


@pytest.fixture(scope="module")
def ref() -> ModuleType:
    """The reference solution, loaded from its file."""
    spec = importlib.util.spec_from_file_location(
        "attention_basics_reference", REFERENCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def inputs() -> torch.Tensor:
    """'Your journey starts with one step', embedded in 3 dimensions.

    The same tensor in seeds 000 (In[4]), 002 (In[4]) and 004.
    """
    return torch.tensor(
        [[0.43, 0.15, 0.89],   # Your
         [0.55, 0.87, 0.66],   # journey
         [0.57, 0.85, 0.64],   # starts
         [0.22, 0.58, 0.33],   # with
         [0.77, 0.25, 0.10],   # one
         [0.05, 0.80, 0.55]])  # step


@pytest.fixture
def batch(inputs: torch.Tensor) -> torch.Tensor:
    """Two copies of ``inputs``: [2, 6, 3], as in seeds 000 and 004."""
    return torch.stack((inputs, inputs), dim=0)


def close_to_printed(actual: torch.Tensor, printed: list) -> None:
    """Compare with numbers a seed printed with 4 decimals."""
    torch.testing.assert_close(actual.detach(), torch.tensor(printed),
                               rtol=1e-4, atol=1e-4)


def run_observing_dropout(module: nn.Module, x: torch.Tensor,
                          **kwargs: object) -> tuple[torch.Tensor,
                                                     torch.Tensor,
                                                     torch.Tensor]:
    """Run ``module``; return its output and ``module.dropout``'s in/out.

    Dropout acts on the attention weights, so its input is the softmax of
    the scaled, masked scores and its output the weights that multiply the
    values.
    """
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    handle = module.dropout.register_forward_hook(
        lambda _layer, args, output: seen.append((args[0], output)))
    try:
        output = module(x, **kwargs)
    finally:
        handle.remove()
    assert len(seen) == 1, "dropout should run once per forward"
    return output, seen[0][0], seen[0][1]


# --- The seeds' printed numbers ------------------------------------------

def test_seed002_context_vector_of_journey(ref: ModuleType,
                                           inputs: torch.Tensor) -> None:
    """Seed 002 In[19] (and seed 004): context_vec_2.

    The context vector of "journey" from the simplified self-attention.
    """
    close_to_printed(ref.simple_self_attention(inputs)[1],
                     [0.4419, 0.6515, 0.5683])


def test_seed002_all_context_vectors(ref: ModuleType,
                                     inputs: torch.Tensor) -> None:
    """Seed 002 In[10] (and seed 004): all_context_vecs."""
    close_to_printed(ref.simple_self_attention(inputs),
                     [[0.4421, 0.5931, 0.5790],
                      [0.4419, 0.6515, 0.5683],
                      [0.4431, 0.6496, 0.5671],
                      [0.4304, 0.6298, 0.5510],
                      [0.4671, 0.5910, 0.5266],
                      [0.4177, 0.6503, 0.5645]])


@pytest.fixture
def self_attention_v1_seed_123(ref: ModuleType) -> nn.Module:
    """``SelfAttention_v1(3, 2)`` created right after manual_seed(123).

    Seed 002 In[18] drew its standalone W_query, W_key, W_value with
    ``torch.rand`` in this order after the same seed, so the module's
    parameters are the same numbers.
    """
    torch.manual_seed(123)
    return ref.SelfAttention_v1(3, 2)


def test_seed002_query_key_value_of_journey(
        self_attention_v1_seed_123: nn.Module,
        inputs: torch.Tensor) -> None:
    """Seed 002 In[18]: query_2, key_2 and value_2."""
    sa = self_attention_v1_seed_123
    x_2 = inputs[1]
    close_to_printed(x_2 @ sa.W_query, [0.4306, 1.4551])
    close_to_printed(x_2 @ sa.W_key, [0.4433, 1.1419])
    close_to_printed(x_2 @ sa.W_value, [0.3951, 1.0037])


def test_seed002_attention_score_22(self_attention_v1_seed_123: nn.Module,
                                    inputs: torch.Tensor) -> None:
    """Seed 002 In[30]: attn_score_22 = query_2 . key_2."""
    sa = self_attention_v1_seed_123
    close_to_printed((inputs[1] @ sa.W_query) @ (inputs[1] @ sa.W_key),
                     1.8524)


def test_seed002_attention_scores_of_journey(
        self_attention_v1_seed_123: nn.Module,
        inputs: torch.Tensor) -> None:
    """Seed 002 In[31]: attn_scores_2 = query_2 @ keys.T."""
    sa = self_attention_v1_seed_123
    close_to_printed((inputs[1] @ sa.W_query) @ (inputs @ sa.W_key).T,
                     [1.2705, 1.8524, 1.8111, 1.0795, 0.5577, 1.5440])


def test_seed002_attention_weights_of_journey(
        self_attention_v1_seed_123: nn.Module,
        inputs: torch.Tensor) -> None:
    """Seed 002 In[32]: attn_weights_2, scaled by sqrt(d_k) = sqrt(2)."""
    sa = self_attention_v1_seed_123
    scores = (inputs[1] @ sa.W_query) @ (inputs @ sa.W_key).T
    close_to_printed(torch.softmax(scores / 2 ** 0.5, dim=-1),
                     [0.1500, 0.2264, 0.2199, 0.1311, 0.0906, 0.1820])


def test_seed002_trainable_context_vector_of_journey(
        self_attention_v1_seed_123: nn.Module,
        inputs: torch.Tensor) -> None:
    """Seed 002 In[33]: context_vec_2 with trainable weights."""
    close_to_printed(self_attention_v1_seed_123(inputs)[1],
                     [0.3061, 0.8210])


def test_seed002_seed004_self_attention_v1(
        self_attention_v1_seed_123: nn.Module,
        inputs: torch.Tensor) -> None:
    """Seed 002 In[37] ``sa(inputs)`` and seed 004 ``sa_v1(inputs)``."""
    close_to_printed(self_attention_v1_seed_123(inputs),
                     [[0.2996, 0.8053],
                      [0.3061, 0.8210],
                      [0.3058, 0.8203],
                      [0.2948, 0.7939],
                      [0.2927, 0.7891],
                      [0.2990, 0.8040]])


@pytest.fixture
def self_attention_v2_seed_789(ref: ModuleType) -> nn.Module:
    """``SelfAttention_v2(3, 2)`` created right after manual_seed(789)."""
    torch.manual_seed(789)
    return ref.SelfAttention_v2(3, 2)


# Seed 004, "Causal attention": the attention weights of sa_v2 (seed 789).
SA_V2_WEIGHTS = [[0.1921, 0.1646, 0.1652, 0.1550, 0.1721, 0.1510],
                 [0.2041, 0.1659, 0.1662, 0.1496, 0.1665, 0.1477],
                 [0.2036, 0.1659, 0.1662, 0.1498, 0.1664, 0.1480],
                 [0.1869, 0.1667, 0.1668, 0.1571, 0.1661, 0.1564],
                 [0.1830, 0.1669, 0.1670, 0.1588, 0.1658, 0.1585],
                 [0.1935, 0.1663, 0.1666, 0.1542, 0.1666, 0.1529]]
# Seed 004, the causal weights after masking with -inf (seed 789).
CAUSAL_WEIGHTS = [[1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
                  [0.5517, 0.4483, 0.0000, 0.0000, 0.0000, 0.0000],
                  [0.3800, 0.3097, 0.3103, 0.0000, 0.0000, 0.0000],
                  [0.2758, 0.2460, 0.2462, 0.2319, 0.0000, 0.0000],
                  [0.2175, 0.1983, 0.1984, 0.1888, 0.1971, 0.0000],
                  [0.1935, 0.1663, 0.1666, 0.1542, 0.1666, 0.1529]]


def test_seed004_self_attention_v2_weights(
        self_attention_v2_seed_789: nn.Module,
        inputs: torch.Tensor) -> None:
    """Seed 004 ``print(attn_weights)`` from sa_v2.W_query and sa_v2.W_key.

    Reproduced only if W_query is created before W_key.
    """
    sa = self_attention_v2_seed_789
    scores = sa.W_query(inputs) @ sa.W_key(inputs).T
    close_to_printed(torch.softmax(scores / 2 ** 0.5, dim=-1), SA_V2_WEIGHTS)


def test_seed004_masked_weights_simple(
        self_attention_v2_seed_789: nn.Module,
        inputs: torch.Tensor) -> None:
    """Seed 004 ``print(masked_simple)``: the weights times a tril mask."""
    sa = self_attention_v2_seed_789
    scores = sa.W_query(inputs) @ sa.W_key(inputs).T
    weights = torch.softmax(scores / 2 ** 0.5, dim=-1)
    close_to_printed(weights * torch.tril(torch.ones(6, 6)),
                     torch.tril(torch.tensor(SA_V2_WEIGHTS)).tolist())


def test_seed004_masked_scores(self_attention_v2_seed_789: nn.Module,
                               inputs: torch.Tensor) -> None:
    """Seed 004 ``print(masked)``: the scores with -inf above the diagonal.

    The printed -inf entries must be -inf exactly; assert_close compares
    infinities by equality.
    """
    sa = self_attention_v2_seed_789
    scores = sa.W_query(inputs) @ sa.W_key(inputs).T
    future = torch.triu(torch.ones(6, 6), diagonal=1).bool()
    inf = float("-inf")
    close_to_printed(scores.masked_fill(future, -torch.inf),
                     [[0.2899, inf, inf, inf, inf, inf],
                      [0.4656, 0.1723, inf, inf, inf, inf],
                      [0.4594, 0.1703, 0.1731, inf, inf, inf],
                      [0.2642, 0.1024, 0.1036, 0.0186, inf, inf],
                      [0.2183, 0.0874, 0.0882, 0.0177, 0.0786, inf],
                      [0.3408, 0.1270, 0.1290, 0.0198, 0.1290, 0.0078]])


def test_seed004_causal_attention_weights(ref: ModuleType,
                                          inputs: torch.Tensor) -> None:
    """Seed 004 ``print(attn_weights)`` after the -inf mask (seed 789).

    ``CausalAttention`` creates W_query and W_key in the same order as
    ``SelfAttention_v2``, so after manual_seed(789) it holds sa_v2's query
    and key projections; its attention weights (the input of its dropout)
    are the printed causal weights.
    """
    torch.manual_seed(789)
    ca = ref.CausalAttention(3, 2, context_length=6, dropout=0.0)
    _, weights, _ = run_observing_dropout(ca, inputs[None])
    close_to_printed(weights[0], CAUSAL_WEIGHTS)


def test_seed004_causal_context_vectors(
        ref: ModuleType, self_attention_v1_seed_123: nn.Module,
        inputs: torch.Tensor) -> None:
    """Seed 004 ``print(context_vec)`` after the causal weights.

    The seed mixes state from two cells: the causal weights of the seed-789
    sa_v2, and ``values`` left over from the seed-123 cell of trainable
    weights (``inputs @ W_value``; seed 002 In[29]). Both are recreated
    from the reference: the weights from ``CausalAttention`` built after
    manual_seed(789), the values from ``SelfAttention_v1`` built after
    manual_seed(123).
    """
    values = inputs @ self_attention_v1_seed_123.W_value
    torch.manual_seed(789)
    ca = ref.CausalAttention(3, 2, context_length=6, dropout=0.0)
    _, weights, _ = run_observing_dropout(ca, inputs[None])
    close_to_printed(weights[0] @ values,
                     [[0.1855, 0.8812],
                      [0.2795, 0.9361],
                      [0.3133, 0.9508],
                      [0.2994, 0.8595],
                      [0.2702, 0.7554],
                      [0.2772, 0.7618]])


# Seeds 000 In[6] and 004: the wrapper's output for each of the 2 sequences.
WRAPPER_OUTPUT = [[-0.4519, 0.2216, 0.4772, 0.1063],
                  [-0.5874, 0.0058, 0.5891, 0.3257],
                  [-0.6300, -0.0632, 0.6202, 0.3860],
                  [-0.5675, -0.0843, 0.5478, 0.3589],
                  [-0.5526, -0.0981, 0.5321, 0.3428],
                  [-0.5299, -0.1081, 0.5077, 0.3493]]


def test_seed004_causal_attention_class(ref: ModuleType,
                                        batch: torch.Tensor) -> None:
    """Seed 004 ``ca(batch)`` (seed 123): context_vecs.shape [2, 6, 2].

    The seed printed only the shape. Its values are the first two columns
    of the wrapper's printed output: the wrapper's head 0 is a
    ``CausalAttention`` created right after the same manual_seed(123).
    """
    torch.manual_seed(123)
    ca = ref.CausalAttention(3, 2, batch.shape[1], 0.0)
    context_vecs = ca(batch)
    assert context_vecs.shape == (2, 6, 2)
    close_to_printed(context_vecs,
                     [[row[:2] for row in WRAPPER_OUTPUT]] * 2)


def test_seed000_seed004_wrapper(ref: ModuleType,
                                 batch: torch.Tensor) -> None:
    """Seed 000 In[6]-In[7] and seed 004: the wrapper with 2 heads.

    ``MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2)`` after
    manual_seed(123); shape [2, 6, 4].
    """
    torch.manual_seed(123)
    mha = ref.MultiHeadAttentionWrapper(3, 2, batch.shape[1], 0.0,
                                        num_heads=2)
    context_vecs = mha(batch)
    assert context_vecs.shape == (2, 6, 4)
    close_to_printed(context_vecs, [WRAPPER_OUTPUT] * 2)


def test_seed004_multi_head_attention(ref: ModuleType,
                                      batch: torch.Tensor) -> None:
    """Seed 004: ``MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)``.

    After manual_seed(123); shape [2, 6, 2]. Reproduced only if W_query,
    W_key, W_value and out_proj are created in this order.
    """
    torch.manual_seed(123)
    mha = ref.MultiHeadAttention(3, 2, batch.shape[1], 0.0, num_heads=2)
    context_vecs = mha(batch)
    assert context_vecs.shape == (2, 6, 2)
    close_to_printed(context_vecs, [[[0.3190, 0.4858],
                                     [0.2943, 0.3897],
                                     [0.2856, 0.3593],
                                     [0.2693, 0.3873],
                                     [0.2639, 0.3928],
                                     [0.2575, 0.4028]]] * 2)


def test_seed000_head_split_attention_weights(ref: ModuleType) -> None:
    """Seed 000 In[32]: the causal weights of "The cat sleeps", 2 heads.

    The seed's weights cannot be recreated (see the module docstring), but
    it printed the queries, keys and values (In[21]). Each token is fed to
    ``MultiHeadAttention`` as its concatenated [query, key, value] (18
    numbers) with W_query, W_key and W_value selecting the three parts, so
    the reference's own view/transpose head split, -inf mask and
    sqrt(head_dim) scaling produce the printed weights.
    """
    queries = [[-1.4601, 1.6082, -0.4082, 0.1709, 2.5136, -0.9453],
               [-0.1715, -0.0334, 0.6383, -0.4673, -0.3364, -4.3318],
               [0.0160, 0.3210, 0.2834, -0.1095, 0.5651, -0.8929]]
    keys = [[1.7901, 2.8035, 0.7118, 0.9231, 2.7435, -1.2384],
            [1.5530, 3.4468, 3.1830, 2.3697, -0.0352, -3.1080],
            [0.6470, 0.8520, 0.4063, 0.4453, 0.4825, -0.7850]]
    values = [[-1.6174, 0.7487, 2.8835, 1.3917, -4.1323, -0.0449],
              [-2.5170, -0.6037, 5.2189, -2.5608, 0.6473, 2.7826],
              [-0.5924, -0.0637, 1.0161, -0.0302, -0.5233, 0.3333]]
    x = torch.cat([torch.tensor(queries), torch.tensor(keys),
                   torch.tensor(values)], dim=-1)[None]  # [1, 3, 18]
    mha = ref.MultiHeadAttention(18, 6, context_length=3, dropout=0.0,
                                 num_heads=2)
    eye, zero = torch.eye(6), torch.zeros(6, 6)
    with torch.no_grad():
        mha.W_query.weight.copy_(torch.cat([eye, zero, zero], dim=1))
        mha.W_key.weight.copy_(torch.cat([zero, eye, zero], dim=1))
        mha.W_value.weight.copy_(torch.cat([zero, zero, eye], dim=1))
    _, weights, _ = run_observing_dropout(mha, x)
    close_to_printed(weights, [[[[1.0000, 0.0000, 0.0000],
                                 [0.2846, 0.7154, 0.0000],
                                 [0.2994, 0.5043, 0.1963]],
                                [[1.0000, 0.0000, 0.0000],
                                 [0.0080, 0.9920, 0.0000],
                                 [0.4244, 0.4101, 0.1656]]]])


def test_seed001_shapes(ref: ModuleType) -> None:
    """Seed 001 In[2]-In[14]: the printed sizes of the fused QKV attention.

    In[4] qkv [1, 4, 1536] for input_dim = d_model = 512; In[14] qkv
    [30, 5, 1536], merged values [30, 5, 512] and out [30, 5, 512] for
    input_dim 1024, d_model 512, 8 heads. The values were never printed
    with a seed (see the module docstring).
    """
    for (batch_size, num_tokens, input_dim) in [(1, 4, 512), (30, 5, 1024)]:
        model = ref.QKVMultiheadAttention(input_dim, 512, num_heads=8)
        seen: dict[str, torch.Size] = {}
        model.qkv_layer.register_forward_hook(
            lambda _layer, _args, out: seen.update(qkv=out.shape))
        model.linear_layer.register_forward_hook(
            lambda _layer, args, _out: seen.update(values=args[0].shape))
        x = torch.randn(batch_size, num_tokens, input_dim)
        with torch.no_grad():
            out = model(x)
        assert model.head_dim == 64
        assert seen["qkv"] == (batch_size, num_tokens, 1536)
        assert seen["values"] == (batch_size, num_tokens, 512)
        assert out.shape == (batch_size, num_tokens, 512)


def test_seed001_causal_mask(ref: ModuleType) -> None:
    """Seed 001 In[9]: the additive mask ``mask[0][1]`` and its effect.

    The seed's mask (0 on and below the diagonal, -inf above) makes the
    fused attention causal: outputs of tokens before t do not change when
    the tokens from t on do. The seed merged the heads with a reshape
    without permuting back (In[12] and its forward), which breaks this:
    a token's output would read values of later tokens.
    """
    mask = torch.triu(torch.full((1, 8, 4, 4), float("-inf")), diagonal=1)
    inf = float("-inf")
    torch.testing.assert_close(mask[0][1], torch.tensor(
        [[0., inf, inf, inf],
         [0., 0., inf, inf],
         [0., 0., 0., inf],
         [0., 0., 0., 0.]]))
    torch.manual_seed(0)
    model = ref.QKVMultiheadAttention(16, 32, num_heads=8).double()
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    changed = x.clone()
    changed[:, 2:] = torch.randn(1, 2, 16, dtype=torch.float64)
    with torch.no_grad():
        out = model(x, mask=mask.double())
        out_changed = model(changed, mask=mask.double())
    torch.testing.assert_close(out[:, :2], out_changed[:, :2])
    assert not torch.allclose(out[:, 2:], out_changed[:, 2:])


# Cells that use no reference code. They check that the shared fixture is
# the seeds' inputs (every other test builds on it) and the arithmetic the
# notebook's questions discuss (sum normalisation vs softmax).
def _scores_2(x: torch.Tensor) -> torch.Tensor:
    return x @ x[1]


PLAIN_TORCH_CELLS: list[tuple[str, Callable[[torch.Tensor], torch.Tensor],
                              list]] = [
    ("seed002-In4-attn_scores_for_2", _scores_2,
     [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]),
    ("seed004-attn_scores_2-sum", lambda x: _scores_2(x).sum(), 6.5617),
    ("seed002-In5-sum-normalised-weights",
     lambda x: _scores_2(x) / _scores_2(x).sum(),
     [0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656]),
    ("seed002-In9-softmax-weights",
     lambda x: torch.softmax(_scores_2(x), dim=0),
     [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]),
    ("seed002-In9-attn_scores", lambda x: x @ x.T,
     [[0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310],
      [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865],
      [0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605],
      [0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565],
      [0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935],
      [0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450]]),
    ("seed004-attn_weights", lambda x: torch.softmax(x @ x.T, dim=-1),
     [[0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452],
      [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581],
      [0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565],
      [0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720],
      [0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295],
      [0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896]]),
]


@pytest.mark.parametrize("compute,printed", [
    pytest.param(compute, printed, id=cell)
    for cell, compute, printed in PLAIN_TORCH_CELLS])
def test_seed_cells_without_reference_code(
        inputs: torch.Tensor,
        compute: Callable[[torch.Tensor], torch.Tensor],
        printed: list) -> None:
    """Seeds 002 and 004, simplified attention by hand (ids name the cell)."""
    close_to_printed(compute(inputs), printed)


def test_seed004_batched_matmul_per_head() -> None:
    """Seed 004 ``print(a @ a.transpose(2, 3))`` and the per-head products.

    The batched product over [b, num_heads, num_tokens, head_dim] equals
    each head's own product, the fact the weight-split version relies on.
    """
    a = torch.tensor([[[[0.2745, 0.6584, 0.2775, 0.8573],
                        [0.8993, 0.0390, 0.9268, 0.7388],
                        [0.7179, 0.7058, 0.9156, 0.4340]],
                       [[0.0772, 0.3565, 0.1479, 0.5331],
                        [0.4066, 0.2318, 0.4545, 0.9737],
                        [0.4606, 0.5159, 0.4220, 0.5786]]]])
    printed = [[[[1.3208, 1.1631, 1.2879],
                 [1.1631, 2.2150, 1.8424],
                 [1.2879, 1.8424, 2.0402]],
                [[0.4391, 0.7003, 0.5903],
                 [0.7003, 1.3737, 1.0620],
                 [0.5903, 1.0620, 0.9912]]]]
    close_to_printed(a @ a.transpose(2, 3), printed)
    for head in range(2):
        close_to_printed(a[0, head] @ a[0, head].T, printed[0][head])


# --- Properties ------------------------------------------------------------

# Sizes that are all different, so no axis mix-up can hide.
B, N, CONTEXT, D_IN, HEADS, HEAD_DIM = 2, 5, 7, 3, 3, 4
D_OUT = HEADS * HEAD_DIM


def random_batch(num_tokens: int = N, seed: int = 0) -> torch.Tensor:
    """A float64 batch [B, num_tokens, D_IN]."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(B, num_tokens, D_IN, generator=generator,
                       dtype=torch.float64)


def causal_modules(ref: ModuleType, dropout: float = 0.0
                   ) -> dict[str, nn.Module]:
    """One CausalAttention and one MultiHeadAttention, float64, eval."""
    torch.manual_seed(1)
    return {
        "CausalAttention": ref.CausalAttention(
            D_IN, D_OUT, CONTEXT, dropout, qkv_bias=True),
        "MultiHeadAttention": ref.MultiHeadAttention(
            D_IN, D_OUT, CONTEXT, dropout, HEADS, qkv_bias=True),
    }


@pytest.mark.parametrize("name", ["CausalAttention", "MultiHeadAttention"])
def test_causal_weights_hide_only_the_future(ref: ModuleType,
                                             name: str) -> None:
    """Weights are 0 strictly above the diagonal, > 0 on and below it."""
    module = causal_modules(ref)[name].double().eval()
    _, weights, _ = run_observing_dropout(module, random_batch())
    future = torch.triu(torch.ones(N, N, dtype=torch.bool), diagonal=1)
    assert torch.all(weights[..., future] == 0)
    assert torch.all(weights[..., ~future] > 0)
    torch.testing.assert_close(weights.sum(-1),
                               torch.ones(weights.shape[:-1],
                                          dtype=torch.float64))


@pytest.mark.parametrize("name", ["CausalAttention", "MultiHeadAttention"])
def test_mask_is_a_buffer(ref: ModuleType, name: str) -> None:
    """``mask`` is a [context_length, context_length] buffer, not a weight.

    It is 1 strictly above the diagonal, saved in the state dict, and moved
    by ``.double()`` / ``.to()`` with the module.
    """
    module = causal_modules(ref)[name]
    buffers = dict(module.named_buffers())
    assert set(buffers) == {"mask"}
    assert "mask" in module.state_dict()
    assert all("mask" not in p for p, _ in module.named_parameters())
    torch.testing.assert_close(
        buffers["mask"], torch.triu(torch.ones(CONTEXT, CONTEXT), 1))
    assert module.double().mask.dtype == torch.float64


@pytest.mark.parametrize("name", ["CausalAttention", "MultiHeadAttention"])
def test_mask_is_sliced_to_the_input_length(ref: ModuleType,
                                            name: str) -> None:
    """Inputs shorter than context_length use the mask's top-left corner.

    A module built for context_length 7 gives, on 5 tokens, what the same
    weights give when built for exactly 5 tokens, and the first 5 outputs
    of a 7-token input that starts with those 5 tokens.
    """
    long_module = causal_modules(ref)[name].double().eval()
    torch.manual_seed(2)
    args = (D_IN, D_OUT, N, 0.0) + ((HEADS,) if name != "CausalAttention"
                                    else ())
    exact_module = getattr(ref, name)(*args, qkv_bias=True).double().eval()
    weights = {k: v for k, v in long_module.state_dict().items()
               if k != "mask"}
    exact_module.load_state_dict(weights, strict=False)
    x_long = random_batch(CONTEXT)
    x = x_long[:, :N]
    with torch.no_grad():
        out = long_module(x)
        torch.testing.assert_close(out, exact_module(x))
        torch.testing.assert_close(out, long_module(x_long)[:, :N])


@pytest.mark.parametrize("name", ["CausalAttention", "MultiHeadAttention",
                                  "MultiHeadAttentionWrapper"])
def test_dropout_only_in_training(ref: ModuleType, name: str) -> None:
    """Eval mode is deterministic and dropout-free; training mode is not."""
    args = (D_IN, D_OUT, CONTEXT)
    torch.manual_seed(3)
    extra = () if name == "CausalAttention" else (HEADS,)
    module = getattr(ref, name)(*args, 0.5, *extra).double()
    torch.manual_seed(3)
    no_dropout = getattr(ref, name)(*args, 0.0, *extra).double().eval()
    x = random_batch()
    with torch.no_grad():
        module.eval()
        evaluated = module(x)
        torch.testing.assert_close(module(x), evaluated, rtol=0, atol=0)
        torch.testing.assert_close(evaluated, no_dropout(x))
        module.train()
        torch.manual_seed(4)
        first = module(x)
        torch.manual_seed(5)
        second = module(x)
    assert not torch.allclose(first, evaluated)
    assert not torch.allclose(first, second)


@pytest.mark.parametrize("name", ["CausalAttention", "MultiHeadAttention"])
def test_dropout_acts_on_the_attention_weights(ref: ModuleType,
                                               name: str) -> None:
    """Seed 004's claim: dropout zeroes weights and scales the rest by 2.

    In training with p = 0.5, the weights that multiply the values are
    ``nn.Dropout(0.5)`` applied to the eval-mode weights under the same
    manual_seed, as in the seed's ``torch.manual_seed(123);
    dropout(attn_weights)`` cell.
    """
    module = causal_modules(ref, dropout=0.5)[name].double()
    x = random_batch()
    with torch.no_grad():
        _, eval_weights, _ = run_observing_dropout(module.eval(), x)
        torch.manual_seed(123)
        _, train_in, train_out = run_observing_dropout(module.train(), x)
        torch.manual_seed(123)
        expected = nn.Dropout(0.5)(eval_weights)
    torch.testing.assert_close(train_in, eval_weights)
    torch.testing.assert_close(train_out, expected)
    assert set(torch.unique(train_out / eval_weights.clamp_min(1e-300))
               .tolist()) <= {0.0, 2.0}


def tie_split_to_wrapper(wrapper: nn.Module, split: nn.Module) -> None:
    """Give ``split`` (MultiHeadAttention) the function of ``wrapper``.

    Head h of ``split`` reads rows h * head_dim to (h + 1) * head_dim - 1 of
    each projection's weight (nn.Linear stores [out, in]); so stacking the
    wrapper's heads' W_query (W_key, W_value) rows, head 0 first, gives the
    split version the same heads. ``out_proj`` becomes the identity with a
    zero bias, since the wrapper has no output projection.
    """
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            layers = [getattr(head, name) for head in wrapper.heads]
            target = getattr(split, name)
            target.weight.copy_(torch.cat([lay.weight for lay in layers]))
            if target.bias is not None:
                target.bias.copy_(torch.cat([lay.bias for lay in layers]))
        split.out_proj.weight.copy_(torch.eye(split.out_proj.in_features))
        split.out_proj.bias.zero_()


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_wrapper_and_split_compute_the_same_function(
        ref: ModuleType, qkv_bias: bool) -> None:
    """Once tied, the wrapper and the weight-split version agree.

    The wrapper's heads each output HEAD_DIM values; the split version
    outputs HEADS * HEAD_DIM. Untied, they differ (so the tie matters).
    """
    torch.manual_seed(6)
    wrapper = ref.MultiHeadAttentionWrapper(
        D_IN, HEAD_DIM, CONTEXT, 0.0, HEADS, qkv_bias).double().eval()
    split = ref.MultiHeadAttention(
        D_IN, D_OUT, CONTEXT, 0.0, HEADS, qkv_bias).double().eval()
    x = random_batch()
    with torch.no_grad():
        assert not torch.allclose(split(x), wrapper(x))
        tie_split_to_wrapper(wrapper, split)
        torch.testing.assert_close(split(x), wrapper(x))


def test_wrapper_heads(ref: ModuleType) -> None:
    """``heads`` is a ModuleList of CausalAttention, concatenated in order."""
    torch.manual_seed(7)
    wrapper = ref.MultiHeadAttentionWrapper(
        D_IN, HEAD_DIM, CONTEXT, 0.0, HEADS).double().eval()
    assert isinstance(wrapper.heads, nn.ModuleList)
    assert len(wrapper.heads) == HEADS
    assert all(isinstance(head, ref.CausalAttention)
               for head in wrapper.heads)
    x = random_batch()
    with torch.no_grad():
        torch.testing.assert_close(
            wrapper(x), torch.cat([head(x) for head in wrapper.heads], -1))


def qkv_per_head(model: nn.Module, x: torch.Tensor,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """QKVMultiheadAttention computed head by head, from its weights.

    For head h, rows 3 * head_dim * h onwards of ``qkv_layer`` hold the
    head's query (head_dim rows), then its key, then its value.
    """
    weight, bias = model.qkv_layer.weight, model.qkv_layer.bias
    size = model.head_dim
    outputs = []
    for head in range(model.num_heads):
        rows = [slice((3 * head + part) * size, (3 * head + part + 1) * size)
                for part in range(3)]
        q, k, v = (x @ weight[r].T + bias[r] for r in rows)
        scores = q @ k.transpose(-2, -1) / size ** 0.5
        if mask is not None:
            scores = scores + mask
        outputs.append(torch.softmax(scores, dim=-1) @ v)
    return model.linear_layer(torch.cat(outputs, dim=-1))


def test_qkv_head_split_matches_a_per_head_computation(
        ref: ModuleType) -> None:
    """The fused projection, split as in seed 001, is num_heads heads.

    Checked without a mask and with a causal [num_tokens, num_tokens] mask
    (broadcast over batch and heads).
    """
    torch.manual_seed(8)
    model = ref.QKVMultiheadAttention(D_IN, D_OUT, HEADS).double()
    x = random_batch()
    causal = torch.triu(torch.full((N, N), float("-inf"),
                                   dtype=torch.float64), diagonal=1)
    with torch.no_grad():
        for mask in (None, causal):
            out = model(x, mask=mask)
            assert out.shape == (B, N, D_OUT)
            torch.testing.assert_close(out, qkv_per_head(model, x, mask))


def test_qkv_seed_merge_is_a_different_function(ref: ModuleType) -> None:
    """Seed 001's merge without permuting back is not the per-head result.

    This is the bug the reference fixes: reshaping [b, heads, tokens,
    head_dim] straight to [b, tokens, d_model] interleaves tokens and heads.
    """
    torch.manual_seed(9)
    model = ref.QKVMultiheadAttention(D_IN, D_OUT, HEADS).double()
    x = random_batch()
    with torch.no_grad():
        qkv = model.qkv_layer(x).reshape(B, N, HEADS, 3 * HEAD_DIM)
        q, k, v = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-2, -1) / HEAD_DIM ** 0.5, -1)
        seed_merge = model.linear_layer((weights @ v).reshape(B, N, D_OUT))
        assert not torch.allclose(seed_merge, model(x))


def test_self_attention_v1_and_v2_are_the_same_function(
        ref: ModuleType) -> None:
    """v2 with nn.Linear weights = v1's matrices transposed equals v1.

    nn.Linear stores its weight as [d_out, d_in] and computes x @ W.T.
    """
    torch.manual_seed(10)
    v1 = ref.SelfAttention_v1(D_IN, D_OUT).double()
    v2 = ref.SelfAttention_v2(D_IN, D_OUT).double()
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(v2, name).weight.copy_(getattr(v1, name).T)
        x = random_batch()[0]
        torch.testing.assert_close(v2(x), v1(x))


def test_simple_self_attention_is_unscaled_softmax(ref: ModuleType) -> None:
    """softmax(x x^T) x, without scaling, on a random [num_tokens, d_in]."""
    x = random_batch()[0] * 3
    expected = torch.softmax(x @ x.T, dim=-1) @ x
    torch.testing.assert_close(ref.simple_self_attention(x), expected)


@pytest.mark.parametrize("name,args", [
    ("MultiHeadAttention", (3, 10, 6, 0.0, 4)),
    ("QKVMultiheadAttention", (3, 10, 4)),
])
def test_heads_must_divide_the_output_size(ref: ModuleType, name: str,
                                           args: tuple) -> None:
    """A width the heads cannot share is rejected with a clear message."""
    with pytest.raises(ValueError, match="must be divisible by num_heads"):
        getattr(ref, name)(*args)


def test_only_the_public_names_are_defined(ref: ModuleType) -> None:
    """The module defines exactly the assignment's public names."""
    defined = {name for name, value in vars(ref).items()
               if not name.startswith("_")
               and getattr(value, "__module__", None) == ref.__name__}
    assert defined == PUBLIC_NAMES


# --- The rubric, as data -------------------------------------------------

def test_rubric_matches_the_reference() -> None:
    """Tasks target the public names; points add up; size sets are sound.

    Within a size set no two dimensions and no two products of two
    dimensions coincide (d_out = num_heads * head_dim by definition), and
    context_length > num_tokens, so an unsliced mask is caught.
    """
    rubric = tomllib.loads(RUBRIC.read_text())
    tasks = {task["id"]: task for task in rubric["tasks"]}
    assert {task["target"] for task in tasks.values()} == PUBLIC_NAMES
    assert sum(task["max_score"] for task in tasks.values()) == 10
    assert rubric["max_score"] == 10
    for task_id, task in tasks.items():
        items = [item for item in rubric["items"]
                 if item["task"] == task_id and item["kind"] == "checks"]
        assert sum(item["points"] for item in items) == task["max_score"]
        for item in items:
            parts = item["parts"].values()
            combine = max if item.get("combine") == "max" else sum
            assert combine(parts) == item["points"], item["id"]
    dimensions = rubric["shapes"]["dimensions"]
    aliases = [a for names in dimensions.values() for a in names]
    assert len(aliases) == len(set(aliases))
    assert not set(aliases) & set(dimensions)
    for sizes in rubric["shapes"]["size_sets"]:
        assert set(sizes) == set(dimensions)
        assert sizes["d_out"] == sizes["num_heads"] * sizes["head_dim"]
        assert sizes["context_length"] > sizes["num_tokens"]
        assert len(set(sizes.values())) == len(sizes)
        products = [sizes[a] * sizes[b] for a, b in
                    itertools.combinations_with_replacement(sorted(sizes), 2)
                    if {a, b} != {"num_heads", "head_dim"}]
        assert len(set(products)) == len(products)
        assert not set(products) & set(sizes.values())
