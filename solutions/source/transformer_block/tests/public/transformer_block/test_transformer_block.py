"""Public tests of the homework "A transformer block and a causal language
model".

Run: ``python -m pytest tests/public`` (the ``impl`` fixture imports
``transformer_lm.modeling_transformer``; choose another file with
``--impl path/to/modeling_transformer.py``). Shapes and parameter names
are checked before values. The values are compared with stored outputs
(``transformer_lm/transformer_values.py``, computed by the reference
solution): the layer with and without the causal mask and with both
sublayers silenced, the model with 0, 1 and 2 layers, and the loss with
0 and 2 layers, so a test that fails points at the step that is wrong.
The grader compares with its own reference on hidden sizes and weights.
"""
import pytest
import torch
from adapters import expect_close, expect_shape

from transformer_lm.transformer_values import LayerTestValues, LMTestValues

HIDDEN, HEADS, FCN = 12, 3, 20
VOCAB, MAX_LEN = 11, 9
OUT = "[batch_size, seq_len, hidden]"
LOGITS = "[batch_size, seq_len, vocab_size]"


def layer_parameters(hidden: int, fcn: int) -> dict[str, tuple]:
    """The state_dict names and shapes of one TransformerEncoderLayer."""
    shapes = {}
    for name in ("q", "k", "v", "mix"):
        shapes[f"self_attention.{name}.weight"] = (hidden, hidden)
        shapes[f"self_attention.{name}.bias"] = (hidden,)
    for name in ("norm1", "norm2"):
        shapes[f"{name}.weight"] = (hidden,)
        shapes[f"{name}.bias"] = (hidden,)
    shapes.update({"fcn.0.weight": (fcn, hidden), "fcn.0.bias": (fcn,),
                   "fcn.2.weight": (hidden, fcn), "fcn.2.bias": (hidden,)})
    return shapes


def randomised(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` in eval mode with every parameter drawn anew (LayerNorm
    weights away from 1, biases away from 0), so no step can hide."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.uniform_(-0.8, 0.8)
    return module.eval()


def test_layer_parameters_follow_the_contract(impl) -> None:
    """self_attention, norm1, norm2, fcn = Linear, ReLU, Linear; dropout."""
    layer = impl.TransformerEncoderLayer(HIDDEN, HEADS, FCN, dropout=0.25)
    found = {k: tuple(v.shape) for k, v in layer.state_dict().items()}
    assert found == layer_parameters(HIDDEN, FCN), (
        f"the parameters should be named and shaped as the docstring says; "
        f"got {found}")
    assert isinstance(layer.fcn[1], torch.nn.ReLU), "fcn[1] should be ReLU"
    assert isinstance(layer.dropout, torch.nn.Dropout)
    assert layer.dropout.p == 0.25


@pytest.mark.parametrize("bs, seq, hidden, heads, fcn",
                         [(2, 5, 12, 3, 20), (3, 4, 10, 2, 7),
                          (1, 7, 18, 6, 5)])
def test_layer_output_shape(impl, bs, seq, hidden, heads, fcn) -> None:
    """[batch_size, seq_len, hidden] in, the same shape out."""
    layer = impl.TransformerEncoderLayer(hidden, heads, fcn).eval()
    x = torch.randn(bs, seq, hidden)
    expect_shape(layer(x), (bs, seq, hidden), "the layer's output", OUT)


def stored_layer(impl, causal: bool = False,
                 silent: bool = False) -> torch.nn.Module:
    """The layer of LayerTestValues, in eval mode (``silent``: its
    self_attention.mix and fcn.2 set to zero)."""
    tv = LayerTestValues
    layer = impl.TransformerEncoderLayer(tv.hidden, tv.num_heads,
                                         tv.fcn_hidden, causal=causal)
    weights = tv.weights()
    if silent:
        for name in ("self_attention.mix", "fcn.2"):
            for kind in ("weight", "bias"):
                weights[f"{name}.{kind}"].zero_()
    layer.load_state_dict(weights)
    return layer.eval()


@pytest.mark.parametrize("causal", (False, True))
def test_layer_is_post_norm(impl, causal) -> None:
    """The stored output of the layer (post-norm), causal or not."""
    layer = stored_layer(impl, causal)
    with torch.no_grad():
        out = layer(LayerTestValues.x)
    expect_shape(out, tuple(LayerTestValues.x.shape), "the layer's output",
                 OUT)
    hint = ("Check the order: attention, dropout, residual (add x), "
            "norm1; then fcn, dropout, residual (add what norm1 gave), "
            "norm2.")
    if causal:
        with torch.no_grad():
            plain = stored_layer(impl)(LayerTestValues.x)
        if torch.allclose(plain, LayerTestValues.output, rtol=1e-4,
                          atol=1e-5):
            hint = ("It is right with causal=False: build self_attention "
                    "with causal=causal.")
    expected = (LayerTestValues.output_causal if causal
                else LayerTestValues.output)
    expect_close(out, expected, "the layer's output", hint)


def test_layer_keeps_the_residuals(impl) -> None:
    """With both sublayers silenced (zero output weights) only the
    residual connections and the two LayerNorms carry x through."""
    layer = stored_layer(impl, silent=True)
    with torch.no_grad():
        out = layer(LayerTestValues.x)
    expect_close(out, LayerTestValues.output_silent,
                 "the layer's output with silent sublayers",
                 "Add x back after each sublayer (x + sublayer(x)) before "
                 "its LayerNorm, and apply norm1 and norm2 in that order.")


def lm(impl, num_layers: int = 2) -> torch.nn.Module:
    """A small TransformerLM with random weights, in eval mode."""
    return randomised(impl.TransformerLM(VOCAB, HIDDEN, HEADS, FCN,
                                         num_layers, MAX_LEN))


def test_lm_parameters_follow_the_contract(impl) -> None:
    """token_embeddings, position_embeddings, layers.<i>, out_proj."""
    model = impl.TransformerLM(VOCAB, HIDDEN, HEADS, FCN, 2, MAX_LEN)
    found = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    expected = {"token_embeddings.weight": (VOCAB, HIDDEN),
                "position_embeddings.weight": (MAX_LEN, HIDDEN),
                "out_proj.weight": (VOCAB, HIDDEN), "out_proj.bias": (VOCAB,)}
    for index in range(2):
        expected.update({f"layers.{index}.{k}": v for k, v in
                         layer_parameters(HIDDEN, FCN).items()})
    assert found == expected, f"parameters: {sorted(found)}"


@pytest.mark.parametrize("bs, seq", [(2, 7), (3, 9), (1, 1)])
def test_lm_logits_shape(impl, bs, seq) -> None:
    """[batch_size, seq_len] token ids in, logits out (seq_len may be
    anything up to max_seq_len)."""
    ids = torch.randint(0, VOCAB, (bs, seq))
    expect_shape(lm(impl)(ids), (bs, seq, VOCAB), "the logits", LOGITS)


def stored_lm(impl, num_layers: int) -> torch.nn.Module:
    """The model of LMTestValues with its first ``num_layers`` layers, in
    eval mode."""
    tv = LMTestValues
    model = impl.TransformerLM(tv.vocab_size, tv.hidden, tv.num_heads,
                               tv.fcn_hidden, num_layers, tv.max_seq_len)
    model.load_state_dict(tv.weights(num_layers))
    return model.eval()


@pytest.mark.parametrize("num_layers", (0, 1, 2))
def test_lm_composes_its_modules(impl, num_layers) -> None:
    """The stored logits with 0, 1 and 2 layers: the embeddings and
    out_proj alone, then each layer in turn."""
    with torch.no_grad():
        logits = stored_lm(impl, num_layers)(LMTestValues.ids)
    expect_shape(logits, (3, 6, LMTestValues.vocab_size), "the logits",
                 LOGITS)
    expect_close(logits, getattr(LMTestValues, f"logits_{num_layers}"),
                 "the logits",
                 "Add the position embeddings of positions 0..seq_len-1 "
                 "to the token embeddings, run every layer in order, then "
                 "out_proj." if num_layers else
                 "With no layer, the logits are out_proj of the token "
                 "embeddings plus the position embeddings of positions "
                 "0..seq_len-1.")


@pytest.mark.parametrize("position", (0, 3, 6))
def test_lm_is_causal(impl, position) -> None:
    """Changing the tokens after position i leaves the logits at 0..i."""
    model = lm(impl)
    ids = torch.randint(0, VOCAB, (2, 8))
    changed = ids.clone()
    after = position + 1
    changed[:, after:] = (changed[:, after:] + 1) % VOCAB
    with torch.no_grad():
        expect_close(model(changed)[:, :after], model(ids)[:, :after],
                     f"the logits at positions 0..{position}",
                     "They changed when later tokens changed: build every "
                     "layer with causal=True, and mix positions only "
                     "through the causal attention.")


@pytest.mark.parametrize("num_layers", (0, 2))
def test_lm_loss_is_next_token_cross_entropy(impl, num_layers) -> None:
    """The stored loss of the model on two sequences of 9 tokens (with no
    layer too, so a layer's mistake does not hide the loss's)."""
    with torch.no_grad():
        loss = stored_lm(impl, num_layers).loss(LMTestValues.loss_ids)
    expect_shape(loss, (), "the loss", "a scalar []")
    expect_close(loss, getattr(LMTestValues, f"loss_{num_layers}"),
                 "the loss",
                 "The logits at position i predict token i + 1: compare "
                 "logits[:, :-1] with input_ids[:, 1:], averaged over "
                 "every predicted token (if the logits test fails too, "
                 "fix the logits first).")


def test_training_lowers_the_loss(impl) -> None:
    """Thirty Adam steps on a text where each token has one successor."""
    torch.manual_seed(0)
    model = impl.TransformerLM(VOCAB, 16, 2, 32, 1, 8)
    successor = torch.randperm(VOCAB)
    ids = torch.empty(8, 8, dtype=torch.long)
    ids[:, 0] = torch.arange(8)
    for i in range(1, 8):
        ids[:, i] = successor[ids[:, i - 1]]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    first = model.loss(ids).item()
    for _ in range(30):
        optimizer.zero_grad()
        model.loss(ids).backward()
        optimizer.step()
    last = model.loss(ids).item()
    assert last < 0.5 * first, (
        f"the loss went from {first:.3f} to {last:.3f} in 30 steps; it "
        f"should at least halve")
