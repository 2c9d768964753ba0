"""Public tests of Coding Task 1: SelfAttention.

Run: ``python -m pytest tests/public``. Shapes are checked before values, so
the first failure tells you where to look.
"""
import torch
from adapters import expect_close, expect_shape
from builders import self_attention
from clues import hint, self_attention_clue

from transformer_lm.test_values import SelfAttentionTestValues as Values

MEANING = "[batch_size, seq_len, hidden]"


def test_init_creates_q_k_v_linear_layers(impl):
    """Task 1.1: q, k and v are nn.Linear(input_size, hidden) with bias."""
    model = impl.SelfAttention(input_size=7, hidden=9)
    for name in ("q", "k", "v"):
        layer = getattr(model, name, None)
        assert isinstance(layer, torch.nn.Linear), (
            f"SelfAttention.{name} should be nn.Linear(input_size, hidden), "
            f"got {type(layer).__name__}")
        assert (layer.in_features, layer.out_features) == (7, 9), (
            f"SelfAttention.{name} maps {layer.in_features} -> "
            f"{layer.out_features}; expected input_size -> hidden = 7 -> 9")
        assert layer.bias is not None, f"SelfAttention.{name} needs a bias"


def test_forward_output_shape(impl):
    """Task 1.2: the output is [batch_size, seq_len, hidden]."""
    output = self_attention(impl, Values)(Values.x)
    expect_shape(output, (3, 5, 9), "SelfAttention output", MEANING)


def test_forward_output_shape_other_sizes(impl):
    """Task 1.2: the shape follows the sizes (batch 2, seq 4, hidden 10)."""
    model = impl.SelfAttention(input_size=6, hidden=10).eval()
    output = model(torch.randn(2, 4, 6))
    expect_shape(output, (2, 4, 10), "SelfAttention output", MEANING)


def test_forward_values(impl):
    """Task 1.2: the output matches the stored expected output."""
    output = self_attention(impl, Values)(Values.x)
    expect_shape(output, (3, 5, 9), "SelfAttention output", MEANING)
    try:
        expect_close(output, Values.output, "SelfAttention output", "")
    except AssertionError:
        expect_close(output, Values.output, "SelfAttention output", hint(
            self_attention_clue(impl, Values),
            "Check the scaling by sqrt(hidden) and the softmax dimension "
            "(over the keys, dim=-1)."))


def test_forward_each_sequence_is_independent(impl):
    """Task 1.2: sequences of a batch do not attend to each other."""
    model = self_attention(impl, Values)
    together = model(Values.x)
    alone = model(Values.x[1:2])
    expect_close(together[1:2], alone, "SelfAttention output of sequence 1",
                 "Sequence 1 alone gives another result than inside the "
                 "batch: the batch dimension is mixed into the attention.")
