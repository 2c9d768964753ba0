"""Public tests of the warm-up homework "Attention from scratch".

Run: ``python -m pytest tests/public`` (the ``impl`` fixture imports
``transformer_lm.attention_basics``; choose another file with ``--impl
path/to/attention_basics.py``). For each
task, shapes are checked before values, so the first failure tells you
where to look. Expected numbers are the lecture's (printed with 4
decimals) and, for sizes that are all different, numbers the reference
solution printed the same way; they are compared at 1e-4.

Inputs for the "distinct sizes" tests are ``sin(0.7 * k)`` laid out in the
shape asked for (see :func:`wave`), and every module is built right after
``torch.manual_seed(123)``, so its weights are the documented ones only if
you create its parameters in the documented order.
"""
import pytest
import torch
from adapters import expect_shape

# "Your journey starts with one step", as in the lecture notes.
INPUTS = torch.tensor(
    [[0.43, 0.15, 0.89],   # Your
     [0.55, 0.87, 0.66],   # journey
     [0.57, 0.85, 0.64],   # starts
     [0.22, 0.58, 0.33],   # with
     [0.77, 0.25, 0.10],   # one
     [0.05, 0.80, 0.55]])  # step
BATCH = torch.stack((INPUTS, INPUTS), dim=0)
TOKENS = "[num_tokens, d_in]"
OUT_2D = "[num_tokens, d_out]"
OUT = "[batch_size, num_tokens, d_out]"
# The lecture's wrapper output (2 heads of CausalAttention(3, 2), seed 123);
# the first two columns are CausalAttention(3, 2, 6, 0.0) after the seed.
WRAPPER = [[-0.4519, 0.2216, 0.4772, 0.1063],
           [-0.5874, 0.0058, 0.5891, 0.3257],
           [-0.6300, -0.0632, 0.6202, 0.3860],
           [-0.5675, -0.0843, 0.5478, 0.3589],
           [-0.5526, -0.0981, 0.5321, 0.3428],
           [-0.5299, -0.1081, 0.5077, 0.3493]]


def wave(*shape: int) -> torch.Tensor:
    """A deterministic input: sin(0.7 * k) for k = 0, 1, ... in ``shape``."""
    count = 1
    for size in shape:
        count *= size
    return torch.sin(torch.arange(count, dtype=torch.float32) * 0.7
                     ).reshape(shape)


def seeded(cls, *args, seed: int = 123, **kwargs) -> torch.nn.Module:
    """``cls(*args, **kwargs)`` built right after torch.manual_seed(seed),
    in eval mode."""
    torch.manual_seed(seed)
    return cls(*args, **kwargs).eval()


def expect_printed(actual: torch.Tensor, printed: list, what: str,
                   hint: str) -> None:
    """Compare with numbers printed with 4 decimals (rtol/atol 1e-4)."""
    expected = torch.tensor(printed)
    expect_shape(actual, tuple(expected.shape), what,
                 f"{list(expected.shape)}")
    try:
        torch.testing.assert_close(actual.detach().float(), expected,
                                   rtol=1e-4, atol=1e-4)
    except AssertionError as exc:
        detail = str(exc).split("\n")[1:4]
        raise AssertionError(f"{what}: the shape is right but the values "
                             f"are not. {hint}\n" + "\n".join(detail)
                             ) from None


def run(module: torch.nn.Module, *args: torch.Tensor) -> torch.Tensor:
    """Call ``module`` without tracking gradients."""
    with torch.no_grad():
        return module(*args)


# --- Task 1: simple_self_attention ----------------------------------------

def test_simple_self_attention_shape(impl):
    """Task 1: one sequence in, one context vector per token out."""
    expect_shape(impl.simple_self_attention(INPUTS), (6, 3),
                 "simple_self_attention(inputs)", TOKENS)
    expect_shape(impl.simple_self_attention(wave(4, 5)), (4, 5),
                 "simple_self_attention on [4, 5]", TOKENS)


def test_simple_self_attention_lecture_values(impl):
    """Task 1: the lecture's all_context_vecs; row 2 is "journey"."""
    expect_printed(impl.simple_self_attention(INPUTS),
                   [[0.4421, 0.5931, 0.5790],
                    [0.4419, 0.6515, 0.5683],
                    [0.4431, 0.6496, 0.5671],
                    [0.4304, 0.6298, 0.5510],
                    [0.4671, 0.5910, 0.5266],
                    [0.4177, 0.6503, 0.5645]],
                   "simple_self_attention(inputs)",
                   "The scores are the dot products of every pair of "
                   "inputs (no scaling); each row of weights is the "
                   "softmax of its token's scores, and each context "
                   "vector is that row's weighted sum of the inputs.")


def test_simple_self_attention_negative_scores(impl):
    """Task 1: with negative scores only the softmax gives the weights."""
    expect_printed(impl.simple_self_attention(wave(4, 5)),
                   [[0.1986, 0.7081, 0.8847, 0.6451, 0.1022],
                    [-0.5384, -0.8854, -0.8160, -0.3629, 0.2610],
                    [0.4312, 0.8530, 0.8736, 0.4834, -0.1342],
                    [-0.6953, -0.9052, -0.6893, -0.1493, 0.4610]],
                   "simple_self_attention on [4, 5]",
                   "Normalise with torch.softmax over the last dimension, "
                   "not by dividing by the sum of the scores.")


# --- Task 2: SelfAttention_v1 ---------------------------------------------

def test_self_attention_v1_parameters(impl):
    """Task 2.1: W_query, W_key, W_value are nn.Parameter [d_in, d_out]."""
    model = impl.SelfAttention_v1(d_in=7, d_out=4)
    for name in ("W_query", "W_key", "W_value"):
        weight = getattr(model, name, None)
        assert isinstance(weight, torch.nn.Parameter), (
            f"SelfAttention_v1.{name} should be nn.Parameter(torch.rand("
            f"d_in, d_out)), got {type(weight).__name__}")
        assert tuple(weight.shape) == (7, 4), (
            f"SelfAttention_v1.{name} has shape {list(weight.shape)}; "
            f"expected [d_in, d_out] = [7, 4]")


def test_self_attention_v1_shape(impl):
    """Task 2.2: the output is [num_tokens, d_out]."""
    output = run(impl.SelfAttention_v1(d_in=7, d_out=4), wave(5, 7))
    expect_shape(output, (5, 4), "SelfAttention_v1 output", OUT_2D)


def test_self_attention_v1_lecture_values(impl):
    """Task 2: torch.manual_seed(123); SelfAttention_v1(3, 2)(inputs)."""
    expect_printed(run(seeded(impl.SelfAttention_v1, 3, 2), INPUTS),
                   [[0.2996, 0.8053],
                    [0.3061, 0.8210],
                    [0.3058, 0.8203],
                    [0.2948, 0.7939],
                    [0.2927, 0.7891],
                    [0.2990, 0.8040]],
                   "SelfAttention_v1 after manual_seed(123)",
                   "Create W_query, W_key, W_value in this order with "
                   "torch.rand, and divide the scores by sqrt(d_out).")


def test_self_attention_v1_distinct_sizes(impl):
    """Task 2: d_in = 7, d_out = 4, 5 tokens (seed 123)."""
    expect_printed(run(seeded(impl.SelfAttention_v1, 7, 4), wave(5, 7)),
                   [[0.0346, 0.1921, 0.4020, 0.4479],
                    [-0.0386, 0.6891, 0.6179, 0.6362],
                    [-0.0955, 0.3715, -0.0455, -0.1030],
                    [-0.0650, -0.3623, -0.7569, -0.8433],
                    [0.0227, -0.3047, -0.2443, -0.2473]],
                   "SelfAttention_v1(7, 4) output",
                   "The scale is sqrt(d_out), the size of the keys.")


# --- Task 3: SelfAttention_v2 ---------------------------------------------

@pytest.mark.parametrize("qkv_bias", [False, True])
def test_self_attention_v2_layers(impl, qkv_bias):
    """Task 3.1: nn.Linear(d_in, d_out, bias=qkv_bias) layers."""
    model = impl.SelfAttention_v2(d_in=7, d_out=4, qkv_bias=qkv_bias)
    for name in ("W_query", "W_key", "W_value"):
        layer = getattr(model, name, None)
        assert isinstance(layer, torch.nn.Linear), (
            f"SelfAttention_v2.{name} should be nn.Linear(d_in, d_out, "
            f"bias=qkv_bias), got {type(layer).__name__}")
        assert (layer.in_features, layer.out_features) == (7, 4), (
            f"SelfAttention_v2.{name} maps {layer.in_features} -> "
            f"{layer.out_features}; expected d_in -> d_out = 7 -> 4")
        assert (layer.bias is not None) == qkv_bias, (
            f"SelfAttention_v2.{name} should have a bias exactly when "
            f"qkv_bias=True")


def test_self_attention_v2_lecture_values(impl):
    """Task 3: torch.manual_seed(789); SelfAttention_v2(3, 2)(inputs)."""
    expect_printed(run(seeded(impl.SelfAttention_v2, 3, 2, seed=789),
                       INPUTS),
                   [[-0.0739, 0.0713],
                    [-0.0748, 0.0703],
                    [-0.0749, 0.0702],
                    [-0.0760, 0.0685],
                    [-0.0763, 0.0679],
                    [-0.0754, 0.0693]],
                   "SelfAttention_v2 after manual_seed(789)",
                   "Create W_query, W_key, W_value in this order and "
                   "divide the scores by sqrt(d_out).")


def test_self_attention_v2_distinct_sizes_with_bias(impl):
    """Task 3: SelfAttention_v2(7, 4, qkv_bias=True), seed 123."""
    model = seeded(impl.SelfAttention_v2, 7, 4, qkv_bias=True)
    expect_printed(run(model, wave(5, 7)),
                   [[0.0427, 0.2460, -0.0576, 0.0658],
                    [-0.0399, 0.2382, 0.0193, 0.1089],
                    [-0.0603, 0.2349, 0.0416, 0.1107],
                    [0.0131, 0.2413, -0.0253, 0.0692],
                    [0.0635, 0.2472, -0.0751, 0.0503]],
                   "SelfAttention_v2(7, 4, qkv_bias=True) output",
                   "Pass bias=qkv_bias to the three nn.Linear layers.")


# --- Task 4: CausalAttention ----------------------------------------------

def test_causal_attention_layers_and_mask_buffer(impl):
    """Task 4.1: three nn.Linear, an nn.Dropout and a mask buffer."""
    model = impl.CausalAttention(7, 4, context_length=9, dropout=0.5)
    for name in ("W_query", "W_key", "W_value"):
        assert isinstance(getattr(model, name, None), torch.nn.Linear), (
            f"CausalAttention.{name} should be nn.Linear(d_in, d_out)")
    assert isinstance(getattr(model, "dropout", None), torch.nn.Dropout), (
        "CausalAttention.dropout should be nn.Dropout(dropout)")
    buffers = dict(model.named_buffers())
    assert "mask" in buffers, (
        "CausalAttention has no buffer 'mask': create it with "
        "self.register_buffer('mask', ...)")
    assert tuple(buffers["mask"].shape) == (9, 9), (
        f"the mask buffer has shape {list(buffers['mask'].shape)}; "
        f"expected [context_length, context_length] = [9, 9]")


def test_causal_attention_shape(impl):
    """Task 4.2: a batch in, [batch_size, num_tokens, d_out] out."""
    output = run(impl.CausalAttention(7, 4, 9, 0.0), wave(2, 5, 7))
    expect_shape(output, (2, 5, 4), "CausalAttention output", OUT)


@pytest.mark.parametrize("context_length", [6, 10])
def test_causal_attention_lecture_values(impl, context_length):
    """Task 4: CausalAttention(3, 2, context_length, 0.0) after seed 123;
    a mask longer than the input gives the same numbers."""
    model = seeded(impl.CausalAttention, 3, 2, context_length, 0.0)
    expect_printed(run(model, BATCH), [[row[:2] for row in WRAPPER]] * 2,
                   f"CausalAttention(3, 2, {context_length}, 0.0) output",
                   "Mask with the top-left [num_tokens, num_tokens] corner "
                   "of the mask buffer, fill with -inf, then scale by "
                   "sqrt(d_out) and take the softmax over the last "
                   "dimension.")


def test_causal_attention_distinct_sizes(impl):
    """Task 4: CausalAttention(7, 4, 9, 0.0, qkv_bias=True), seed 123."""
    model = seeded(impl.CausalAttention, 7, 4, 9, 0.0, qkv_bias=True)
    expect_printed(run(model, wave(2, 5, 7))[0],
                   [[-0.4691, 0.1947, 0.4263, 0.3125],
                    [-0.2217, 0.2491, 0.1192, 0.3843],
                    [-0.0256, 0.2698, -0.0688, 0.2965],
                    [0.1405, 0.2670, -0.1777, 0.0911],
                    [0.0635, 0.2472, -0.0751, 0.0503]],
                   "CausalAttention(7, 4, 9, 0.0) output (sequence 0)",
                   "Transpose the keys with keys.transpose(1, 2): the "
                   "batch stays first.")


def test_causal_attention_hides_the_future(impl):
    """Task 4: changing tokens 3.. does not change the outputs of 0..2."""
    model = impl.CausalAttention(7, 4, 9, 0.0).eval()
    x = wave(2, 5, 7)
    changed = x.clone()
    changed[:, 3:] = -changed[:, 3:]
    before, after = run(model, x), run(model, changed)
    assert torch.allclose(before[:, :3], after[:, :3], atol=1e-6), (
        "the outputs of tokens 0-2 depend on tokens 3-4: mask the scores "
        "strictly above the diagonal with -inf")


@pytest.mark.parametrize("name", ["CausalAttention", "MultiHeadAttention"])
def test_dropout_only_in_training(impl, name):
    """Tasks 4 and 6: dropout changes nothing in eval mode, and in
    training zeroes attention weights (the output changes)."""
    extra = () if name == "CausalAttention" else (2,)
    with_dropout = seeded(getattr(impl, name), 7, 4, 9, 0.5, *extra)
    without = seeded(getattr(impl, name), 7, 4, 9, 0.0, *extra)
    x = wave(2, 5, 7)
    assert torch.allclose(run(with_dropout.eval(), x), run(without, x)), (
        f"{name} with dropout=0.5 in eval mode differs from dropout=0: "
        f"use self.dropout (nn.Dropout), which is off after model.eval()")
    assert not torch.allclose(run(with_dropout.train(), x),
                              run(without, x)), (
        f"{name} with dropout=0.5 in training mode gives the eval output: "
        f"apply self.dropout to the attention weights")


@pytest.mark.parametrize("name", ["CausalAttention", "MultiHeadAttention"])
def test_dropout_acts_on_the_attention_weights(impl, name):
    """Tasks 4 and 6: self.dropout receives the attention weights (each
    row sums to 1, 0 above the diagonal) and returns each weight zeroed or
    doubled (p = 0.5)."""
    extra = () if name == "CausalAttention" else (2,)
    model = seeded(getattr(impl, name), 7, 4, 9, 0.5, *extra).train()
    seen = []
    model.dropout.register_forward_hook(
        lambda _layer, args, output: seen.append((args[0], output)))
    run(model, wave(2, 5, 7))
    assert len(seen) == 1, (
        f"self.dropout ran {len(seen)} times in one forward; apply it once, "
        f"to the attention weights")
    weights, dropped = seen[0]
    assert weights.shape[-2:] == (5, 5), (
        f"self.dropout received a tensor of shape {list(weights.shape)}; "
        f"the attention weights end with [num_tokens, num_tokens] = [5, 5]")
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]),
                          atol=1e-5), (
        "self.dropout received numbers whose rows do not sum to 1: apply it "
        "after the softmax, to the attention weights")
    kept = torch.isclose(dropped, 2 * weights, atol=1e-6)
    assert torch.all(kept | (dropped == 0)), (
        "self.dropout should zero each weight or double it (p = 0.5)")


# --- Task 5: MultiHeadAttentionWrapper ------------------------------------

def test_wrapper_heads(impl):
    """Task 5.1: heads is an nn.ModuleList of num_heads CausalAttention."""
    model = impl.MultiHeadAttentionWrapper(7, 4, 9, 0.0, num_heads=3)
    heads = getattr(model, "heads", None)
    assert isinstance(heads, torch.nn.ModuleList), (
        f"MultiHeadAttentionWrapper.heads should be an nn.ModuleList, got "
        f"{type(heads).__name__}")
    assert len(heads) == 3, f"{len(heads)} heads; expected num_heads = 3"
    assert all(isinstance(h, impl.CausalAttention) for h in heads), (
        "every head should be a CausalAttention")


def test_wrapper_shape(impl):
    """Task 5.2: [batch_size, num_tokens, num_heads * d_out]."""
    model = impl.MultiHeadAttentionWrapper(7, 4, 9, 0.0, num_heads=3)
    expect_shape(run(model, wave(2, 5, 7)), (2, 5, 12), "wrapper output",
                 "[batch_size, num_tokens, num_heads * d_out]")


def test_wrapper_lecture_values(impl):
    """Task 5: MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2) after seed 123."""
    model = seeded(impl.MultiHeadAttentionWrapper, 3, 2, 6, 0.0, 2)
    expect_printed(run(model, BATCH), [WRAPPER] * 2,
                   "MultiHeadAttentionWrapper after manual_seed(123)",
                   "Concatenate the heads' outputs on the last dimension, "
                   "head 0 first.")


# --- Task 6: MultiHeadAttention -------------------------------------------

def test_multi_head_attention_layers(impl):
    """Task 6.1: W_query, W_key, W_value, then out_proj (with a bias)."""
    model = impl.MultiHeadAttention(7, 12, 9, 0.0, num_heads=3)
    for name, sizes in (("W_query", (7, 12)), ("W_key", (7, 12)),
                        ("W_value", (7, 12)), ("out_proj", (12, 12))):
        layer = getattr(model, name, None)
        assert isinstance(layer, torch.nn.Linear), (
            f"MultiHeadAttention.{name} should be an nn.Linear")
        assert (layer.in_features, layer.out_features) == sizes, (
            f"MultiHeadAttention.{name} maps {layer.in_features} -> "
            f"{layer.out_features}; expected {sizes[0]} -> {sizes[1]}")
    assert model.out_proj.bias is not None, "out_proj needs a bias"
    assert "mask" in dict(model.named_buffers()), "mask should be a buffer"


def test_multi_head_attention_shape(impl):
    """Task 6.2: [batch_size, num_tokens, d_out]."""
    model = impl.MultiHeadAttention(7, 12, 9, 0.0, num_heads=3)
    expect_shape(run(model, wave(2, 5, 7)), (2, 5, 12),
                 "MultiHeadAttention output", OUT)


def test_multi_head_attention_lecture_values(impl):
    """Task 6: MultiHeadAttention(3, 2, 6, 0.0, 2) after seed 123."""
    model = seeded(impl.MultiHeadAttention, 3, 2, 6, 0.0, 2)
    expect_printed(run(model, BATCH),
                   [[[0.3190, 0.4858],
                     [0.2943, 0.3897],
                     [0.2856, 0.3593],
                     [0.2693, 0.3873],
                     [0.2639, 0.3928],
                     [0.2575, 0.4028]]] * 2,
                   "MultiHeadAttention after manual_seed(123)",
                   "Create W_query, W_key, W_value, out_proj in this "
                   "order; apply out_proj to the merged heads.")


def test_multi_head_attention_distinct_sizes(impl):
    """Task 6: 3 heads of head_dim 4 (seed 123); head_dim > 1 shows the
    scale and the view/transpose split."""
    model = seeded(impl.MultiHeadAttention, 7, 12, 9, 0.0, 3)
    expect_printed(
        run(model, wave(2, 5, 7))[0],
        [[-0.0950, 0.0030, 0.0457, -0.3686, 0.0401, 0.0493, -0.3063,
          0.1182, -0.2923, -0.0955, 0.3559, 0.1092],
         [-0.3245, -0.0038, -0.1677, -0.2733, 0.2513, 0.1125, -0.3606,
          0.2763, -0.3097, -0.0342, 0.3392, 0.1027],
         [-0.4027, 0.0770, -0.2653, -0.1693, 0.3355, -0.0357, -0.3181,
          0.2991, -0.2231, 0.0178, 0.3159, -0.0317],
         [-0.3507, 0.1492, -0.2356, -0.1548, 0.2803, -0.1735, -0.2665,
          0.2321, -0.1640, 0.0406, 0.2954, -0.1021],
         [-0.2617, 0.1264, -0.1966, -0.1822, 0.2385, -0.1424, -0.2555,
          0.2322, -0.1645, 0.0164, 0.2781, -0.0690]],
        "MultiHeadAttention(7, 12, 9, 0.0, 3) output (sequence 0)",
        "Split with view to [b, num_tokens, num_heads, head_dim] then "
        "transpose(1, 2); scale by sqrt(head_dim); transpose back before "
        "merging.")


# --- Task 7: QKVMultiheadAttention ----------------------------------------

def test_qkv_layers(impl):
    """Task 7.1: qkv_layer = nn.Linear(input_dim, 3 * d_model), then
    linear_layer = nn.Linear(d_model, d_model)."""
    model = impl.QKVMultiheadAttention(input_dim=7, d_model=8,
                                       num_heads=2)
    for name, sizes in (("qkv_layer", (7, 24)), ("linear_layer", (8, 8))):
        layer = getattr(model, name, None)
        assert isinstance(layer, torch.nn.Linear), (
            f"QKVMultiheadAttention.{name} should be an nn.Linear")
        assert (layer.in_features, layer.out_features) == sizes, (
            f"QKVMultiheadAttention.{name} maps {layer.in_features} -> "
            f"{layer.out_features}; expected {sizes[0]} -> {sizes[1]}")


def test_qkv_shapes_of_the_lecture(impl):
    """Task 7.2: input_dim 1024, d_model 512, 8 heads: [30, 5, 512]."""
    model = impl.QKVMultiheadAttention(1024, 512, num_heads=8)
    expect_shape(run(model, torch.randn(30, 5, 1024)), (30, 5, 512),
                 "QKVMultiheadAttention output",
                 "[batch_size, num_tokens, d_model]")


def test_qkv_values(impl):
    """Task 7.2: QKVMultiheadAttention(3, 4, 2) after seed 123 on the
    lecture's batch, no mask."""
    model = seeded(impl.QKVMultiheadAttention, 3, 4, 2)
    expect_printed(run(model, BATCH)[0],
                   [[-0.4928, -0.3725, -0.2634, -0.6290],
                    [-0.4930, -0.3729, -0.2650, -0.6300],
                    [-0.4930, -0.3728, -0.2649, -0.6299],
                    [-0.4921, -0.3709, -0.2643, -0.6281],
                    [-0.4927, -0.3699, -0.2627, -0.6272],
                    [-0.4921, -0.3719, -0.2653, -0.6290]],
                   "QKVMultiheadAttention(3, 4, 2) output",
                   "Reshape qkv_layer's output to [b, num_tokens, "
                   "num_heads, 3 * head_dim], permute, chunk into q, k, v; "
                   "permute back before merging.")


@pytest.mark.parametrize("masked", [False, True])
def test_qkv_distinct_sizes(impl, masked):
    """Task 7: QKVMultiheadAttention(7, 8, 2), seed 123, with and without
    the additive causal mask."""
    model = seeded(impl.QKVMultiheadAttention, 7, 8, 2)
    mask = torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
    args = (wave(2, 5, 7), mask) if masked else (wave(2, 5, 7),)
    printed = ([[0.1121, -0.5845, 0.6369, 0.4182, -0.0903, 0.2095, -0.1595,
                 0.7859],
                [-0.0315, -0.5159, 0.5025, 0.3065, -0.2161, 0.2436,
                 -0.0973, 0.5546],
                [-0.1436, -0.3535, 0.4015, 0.2700, -0.2975, 0.2339,
                 -0.1660, 0.4431],
                [-0.1304, -0.3020, 0.4133, 0.3146, -0.2792, 0.1920,
                 -0.2297, 0.4845],
                [-0.0895, -0.3249, 0.4504, 0.3471, -0.2423, 0.1791,
                 -0.2424, 0.5455]] if masked else
               [[-0.1120, -0.3067, 0.4266, 0.3396, -0.2552, 0.1710,
                 -0.2371, 0.5081],
                [-0.1318, -0.2842, 0.4068, 0.3358, -0.2727, 0.1562,
                 -0.2394, 0.4717],
                [-0.1018, -0.3037, 0.4392, 0.3474, -0.2599, 0.1624,
                 -0.2516, 0.5196],
                [-0.0717, -0.3330, 0.4703, 0.3554, -0.2380, 0.1788,
                 -0.2535, 0.5722],
                [-0.0895, -0.3249, 0.4504, 0.3471, -0.2423, 0.1791,
                 -0.2424, 0.5455]])
    expect_printed(run(model, *args)[0], printed,
                   f"QKVMultiheadAttention(7, 8, 2) output "
                   f"({'with' if masked else 'without'} a causal mask)",
                   "Add the mask to the scaled scores before the softmax."
                   if masked else "The scale is sqrt(head_dim).")
