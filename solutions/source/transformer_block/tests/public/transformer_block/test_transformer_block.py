"""Public tests of the homework "A transformer block and a causal language
model".

Run: ``python -m pytest tests/public`` (the ``impl`` fixture imports
``transformer_lm.modeling_transformer``; choose another file with
``--impl path/to/modeling_transformer.py``). Shapes and parameter names
are checked before values. The values are checked against formulas
written with your own modules (``layer.norm1``, ``model.out_proj``, ...),
so a test that fails points at the step that is wrong; the grader compares
with its own reference on hidden sizes and weights.
"""
import pytest
import torch
import torch.nn.functional as F
from adapters import expect_close, expect_shape

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


@pytest.mark.parametrize("causal", (False, True))
def test_layer_is_post_norm(impl, causal) -> None:
    """norm2(h + fcn(h)) with h = norm1(x + self_attention(x))."""
    layer = randomised(impl.TransformerEncoderLayer(HIDDEN, HEADS, FCN,
                                                    causal=causal))
    x = torch.randn(3, 6, HIDDEN)
    with torch.no_grad():
        h = layer.norm1(x + layer.self_attention(x))
        expected = layer.norm2(h + layer.fcn(h))
        expect_close(layer(x), expected, "the layer's output",
                     "Check the order: attention, dropout, residual (add "
                     "x), norm1; then fcn, dropout, residual, norm2.")


@pytest.mark.parametrize("causal", (False, True))
def test_layer_keeps_the_residuals(impl, causal) -> None:
    """With both sublayers silenced (zero output weights), the layer is
    norm2(norm1(x)): the residuals carry x through."""
    layer = impl.TransformerEncoderLayer(HIDDEN, HEADS, FCN,
                                         causal=causal).eval()
    with torch.no_grad():
        for module in (layer.self_attention.mix, layer.fcn[2]):
            module.weight.zero_()
            module.bias.zero_()
    x = torch.randn(2, 4, HIDDEN)
    with torch.no_grad():
        expected = layer.norm2(layer.norm1(x))
        expect_close(layer(x), expected, "the layer's output with silent "
                     "sublayers", "Add x back after each sublayer (x + "
                     "sublayer(x)) before its LayerNorm.")


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


@pytest.mark.parametrize("num_layers", (0, 1, 2))
def test_lm_composes_its_modules(impl, num_layers) -> None:
    """out_proj(layers(token_embeddings + position_embeddings))."""
    model = lm(impl, num_layers)
    ids = torch.randint(0, VOCAB, (3, 6))
    with torch.no_grad():
        x = model.token_embeddings(ids) + model.position_embeddings(
            torch.arange(ids.shape[1]))
        for layer in model.layers:
            x = layer(x)
        expect_close(model(ids), model.out_proj(x), "the logits",
                     "Add the position embeddings of positions 0..seq_len-1 "
                     "to the token embeddings, run every layer, then "
                     "out_proj.")


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


@pytest.mark.parametrize("bs, seq", [(3, 7), (2, 9)])
def test_lm_loss_is_next_token_cross_entropy(impl, bs, seq) -> None:
    """loss(ids) = cross-entropy of the logits at i against token i + 1."""
    model = lm(impl)
    ids = torch.randint(0, VOCAB, (bs, seq))
    with torch.no_grad():
        logits = model(ids)
        expected = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB),
                                   ids[:, 1:].reshape(-1))
        loss = model.loss(ids)
    expect_shape(loss, (), "the loss", "a scalar []")
    expect_close(loss, expected, "the loss",
                 "The logits at position i predict token i + 1: compare "
                 "logits[:, :-1] with input_ids[:, 1:].")


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
