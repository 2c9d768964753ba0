"""Public tests of Coding Task 2: MultiHeadSelfAttention.

Run: ``python -m pytest tests/public``. Shapes are checked before values;
the ``Distinct`` test values use sizes that are all different, so a mix-up
of the batch, head and head-size axes shows.
"""
import pytest
import torch
from adapters import expect_close, expect_shape
from builders import multi_head
from clues import hint, mask_clue, multi_head_clue

from transformer_lm.test_values import (MultiHeadAttentionDistinctTestValues,
                                        MultiHeadAttentionTestValues)

CASES = [pytest.param(MultiHeadAttentionTestValues, id="2022-values"),
         pytest.param(MultiHeadAttentionDistinctTestValues,
                      id="distinct-sizes")]
OUT = "[batch_size, seq_len, hidden]"
PROBS = "[batch_size * num_heads, seq_len, seq_len]"


def _close(actual, expected) -> bool:
    """True when ``actual`` matches (the tests' tolerance), so no clue
    need be looked for."""
    return (isinstance(actual, torch.Tensor)
            and actual.shape == expected.shape
            and torch.allclose(actual.detach().float(), expected,
                               rtol=1e-4, atol=1e-5))


def _sizes(values):
    return values.batch_size, values.seq_len, values.hidden, values.num_heads


def test_num_heads_must_divide_hidden(impl):
    """hidden % num_heads != 0 raises ValueError; a divisor works."""
    with pytest.raises(ValueError, match="divisible"):
        impl.MultiHeadSelfAttention(input_size=7, hidden=10, num_heads=3)
    model = impl.MultiHeadSelfAttention(input_size=7, hidden=10,
                                        num_heads=5).eval()
    expect_shape(model(torch.randn(2, 4, 7)), (2, 4, 10), "att", OUT)


@pytest.mark.parametrize("values", CASES)
def test_output_shape(impl, values):
    """Tasks 2.1 and 2.3: att is [batch_size, seq_len, hidden]."""
    bs, seq, hidden, _ = _sizes(values)
    att = multi_head(impl, values)(values.x)
    expect_shape(att, (bs, seq, hidden), "att", OUT)


@pytest.mark.parametrize("values", CASES)
def test_return_attention_layout(impl, values):
    """return_attention=True returns (att, probs), probs batch-major."""
    bs, seq, hidden, heads = _sizes(values)
    result = multi_head(impl, values)(values.x, return_attention=True)
    assert isinstance(result, tuple) and len(result) == 2, (
        "forward(x, return_attention=True) should return (att, probs), "
        f"got {type(result).__name__}")
    att, probs = result
    expect_shape(att, (bs, seq, hidden), "att", OUT)
    expect_shape(probs, (bs * heads, seq, seq), "probs", PROBS)


@pytest.mark.parametrize("values", CASES)
def test_probs_values(impl, values):
    """Task 2.1: the attention probabilities match the stored ones."""
    bs, seq, _, heads = _sizes(values)
    _, probs = multi_head(impl, values)(values.x, return_attention=True)
    expect_shape(probs, (bs * heads, seq, seq), "probs", PROBS)
    if _close(probs, values.probs):
        return
    expect_close(probs, values.probs, "probs", hint(
        multi_head_clue(impl, values),
        "Check the head split (view, then transpose, then reshape), the "
        "scale sqrt(head_size) and the softmax dimension. Row "
        "b * num_heads + h is head h of sequence b."))


@pytest.mark.parametrize("values", CASES)
def test_output_values(impl, values):
    """Tasks 2.1 and 2.3: att matches the stored output."""
    bs, seq, hidden, _ = _sizes(values)
    att = multi_head(impl, values)(values.x)
    expect_shape(att, (bs, seq, hidden), "att", OUT)
    if _close(att, values.output):
        return
    expect_close(att, values.output, "att", hint(
        multi_head_clue(impl, values),
        "If probs are right (test_probs_values), check how the heads are "
        "merged back (transpose before reshape) and that self.mix is "
        "applied."))


@pytest.mark.parametrize("values", CASES)
def test_causal_output_values(impl, values):
    """Task 2.2: with causal=True, att matches the stored output_causal."""
    bs, seq, hidden, _ = _sizes(values)
    att = multi_head(impl, values, causal=True)(values.x)
    expect_shape(att, (bs, seq, hidden), "att (causal)", OUT)
    if _close(att, values.output_causal):
        return
    expect_close(att, values.output_causal, "att (causal)", hint(
        multi_head_clue(impl, values, causal=True),
        "If att without the mask is right (test_output_values), look at "
        "the mask: position i may attend to every j <= i, so mask only "
        "j > i (torch.triu(..., diagonal=1)) and fill with -inf."))


@pytest.mark.parametrize("values", CASES)
def test_causal_probs_structure(impl, values):
    """Task 2.2: 0 above the diagonal, > 0 on and below it, rows sum to 1."""
    bs, seq, _, heads = _sizes(values)
    model = multi_head(impl, values, causal=True)
    _, probs = model(values.x, return_attention=True)
    expect_shape(probs, (bs * heads, seq, seq), "probs (causal)", PROBS)
    # triu(..., diagonal=0) hides the current token too (the first token
    # then sees nothing: NaN with -inf); diagonal=2 shows the next one.
    clue = mask_clue(probs.detach().float())
    if clue is not None:
        raise AssertionError(clue)
    future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
    assert torch.all(probs[:, ~future] > 0), (
        "causal probs must be > 0 on and below the diagonal: the current "
        "token is allowed (mask with diagonal=1, not diagonal=0)")
    torch.testing.assert_close(
        probs.sum(-1), torch.ones(bs * heads, seq), rtol=0, atol=1e-5,
        msg=hint(multi_head_clue(impl, values, causal=True),
                 "each row of probs must sum to 1"))


def test_causal_future_tokens_do_not_change_earlier_outputs(impl):
    """Task 2.2: changing tokens after position t leaves 0..t unchanged."""
    values = MultiHeadAttentionDistinctTestValues
    model = multi_head(impl, values, causal=True)
    x = values.x
    changed = x.clone()
    changed[:, 3:] = torch.randn_like(changed[:, 3:])
    before, after = model(x)[:, :3], model(changed)[:, :3]
    if _close(after, before):
        return
    expect_close(after, before, "att (causal) at positions 0..2", hint(
        multi_head_clue(impl, values, causal=True),
        "Changing tokens 3 and later changed earlier outputs, though "
        "probs give those tokens 0: something after the softmax mixes "
        "positions (look at how the heads are merged back)."))


def test_return_attention_false_returns_only_att(impl):
    """forward(x) returns the tensor att, not a tuple."""
    values = MultiHeadAttentionDistinctTestValues
    att = multi_head(impl, values)(values.x)
    assert isinstance(att, torch.Tensor), (
        f"forward(x) should return att only, got {type(att).__name__}")


def test_dropout_eval_mode_is_deterministic(impl):
    """Task 2.3: in eval mode dropout does nothing; two calls agree."""
    values = MultiHeadAttentionDistinctTestValues
    model = multi_head(impl, values, dropout=0.5).eval()
    first, probs1 = model(values.x, return_attention=True)
    second, probs2 = model(values.x, return_attention=True)
    assert torch.equal(first, second) and torch.equal(probs1, probs2), (
        "in eval mode two calls must give the same result: call "
        "self.dropout (an nn.Dropout), not F.dropout(..., training=True)")


def test_dropout_p0_train_equals_eval(impl):
    """Task 2.3: with dropout=0, train mode equals eval mode."""
    values = MultiHeadAttentionDistinctTestValues
    model = multi_head(impl, values, dropout=0.0)
    expected = model.eval()(values.x)
    expect_close(model.train()(values.x), expected, "att (train, p=0)",
                 "With dropout=0 training must not change the output.")


def test_dropout_train_mode_zeroes_probabilities(impl):
    """Task 2.3: train mode with p=0.5 drops attention probabilities.

    Each returned probability is either 0 or its eval value / (1 - p): the
    dropout acts on probs (after the softmax), and probs are returned after
    dropout.
    """
    values = MultiHeadAttentionDistinctTestValues
    model = multi_head(impl, values, dropout=0.5)
    _, kept = model.eval()(values.x, return_attention=True)
    att, dropped = model.train()(values.x, return_attention=True)
    assert not torch.equal(dropped, kept), (
        "in train mode with dropout=0.5 the returned probs equal the eval "
        "ones: apply self.dropout to probs (and return probs after it)")
    zero = dropped == 0
    torch.testing.assert_close(dropped[~zero], kept[~zero] * 2.0,
                               rtol=1e-4, atol=1e-5,
                               msg="kept probabilities must be scaled by "
                                   "1 / (1 - p): use nn.Dropout")
    share = zero.float().mean().item()
    assert 0.3 <= share <= 0.7, (
        f"{share:.0%} of the probabilities are 0 with p=0.5; expected about "
        f"half")
