"""The grader's reference: the transformer layer and language model as
functions of a state_dict (the naming contract of docs/transformer_block.md).

Built on torch's functional ops (``multi_head_attention_forward``, which
submissions may not use, does the attention), so shipping the grader reveals
nothing a student could hand in. A kit test checks that it agrees with the
reference solution in ``solutions/modeling_transformer.py``. Every function
takes and returns float64 tensors; the keyword variants compute the known
mistakes of :mod:`grader.assignments.transformer_block.mistakes`."""
from __future__ import annotations

import torch
import torch.nn.functional as F

Weights = dict[str, torch.Tensor]

#: The parameters of one TransformerEncoderLayer, by state_dict name.
LAYER_PARAMETERS = tuple(
    [f"self_attention.{n}.{kind}" for n in ("q", "k", "v", "mix")
     for kind in ("weight", "bias")]
    + [f"{n}.{kind}" for n in ("norm1", "norm2", "fcn.0", "fcn.2")
       for kind in ("weight", "bias")])


#: Contract names that may be one parameter (weight tying, GPT-2 style:
#: ``self.out_proj.weight = self.token_embeddings.weight``). A probe loads
#: a tied parameter with the value of the last of its names in the state's
#: order (out_proj.weight's, as load_state_dict would) and the grader
#: judges it with that value under both names (docs/transformer_block.md,
#: "Tied weights").
TIED = (("token_embeddings.weight", "out_proj.weight"),)


def layer_shapes(hidden: int, fcn_hidden: int) -> dict[str, tuple]:
    """The shape of every parameter of one layer."""
    shapes: dict[str, tuple] = {}
    for name in LAYER_PARAMETERS:
        module, kind = name.rsplit(".", 1)
        if module.startswith("self_attention."):
            shapes[name] = (hidden, hidden) if kind == "weight" \
                else (hidden,)
        elif module in ("norm1", "norm2"):
            shapes[name] = (hidden,)
        elif module == "fcn.0":
            shapes[name] = (fcn_hidden, hidden) if kind == "weight" \
                else (fcn_hidden,)
        else:
            shapes[name] = (hidden, fcn_hidden) if kind == "weight" \
                else (hidden,)
    return shapes


def lm_shapes(vocab_size: int, hidden: int, fcn_hidden: int,
              num_layers: int, max_seq_len: int) -> dict[str, tuple]:
    """The shape of every parameter of a TransformerLM."""
    shapes: dict[str, tuple] = {
        "token_embeddings.weight": (vocab_size, hidden),
        "position_embeddings.weight": (max_seq_len, hidden)}
    for index in range(num_layers):
        for name, shape in layer_shapes(hidden, fcn_hidden).items():
            shapes[f"layers.{index}.{name}"] = shape
    shapes["out_proj.weight"] = (vocab_size, hidden)
    shapes["out_proj.bias"] = (vocab_size,)
    return shapes


def _linear(x: torch.Tensor, w: Weights, name: str) -> torch.Tensor:
    return F.linear(x, w[f"{name}.weight"], w[f"{name}.bias"])


def attention(x: torch.Tensor, w: Weights, num_heads: int,
              causal: bool) -> torch.Tensor:
    """MultiHeadSelfAttention's output (eval mode) with weights ``w``
    (names q, k, v, mix)."""
    q, k, v = (_linear(x, w, n).transpose(0, 1) for n in "qkv")
    hidden, seq = q.shape[-1], q.shape[0]
    own = torch.eye(hidden, dtype=x.dtype)
    mask = (torch.ones(seq, seq, dtype=torch.bool).triu(1) if causal
            else None)
    out, _ = F.multi_head_attention_forward(
        q, k, v, hidden, num_heads, None, None, None, None, False, 0.0,
        w["mix.weight"], w["mix.bias"], training=False, need_weights=False,
        attn_mask=mask, use_separate_proj_weight=True, q_proj_weight=own,
        k_proj_weight=own, v_proj_weight=own)
    return out.transpose(0, 1)


def sub(weights: Weights, prefix: str) -> Weights:
    """The entries of ``weights`` under ``prefix.``, without it."""
    start = prefix + "."
    return {k[len(start):]: v for k, v in weights.items()
            if k.startswith(start)}


def encoder_layer(x: torch.Tensor, w: Weights, num_heads: int,
                  causal: bool = False, *, pre_norm: bool = False,
                  residual: tuple[bool, bool] = (True, True)
                  ) -> torch.Tensor:
    """TransformerEncoderLayer's output in eval mode (post-norm).

    ``pre_norm``: x + sublayer(norm(x)) instead; ``residual``: whether
    each sublayer (attention, feed-forward) adds x back; where it does not,
    its output replaces x (the two diagnosed mistakes).
    """
    def norm(t: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(t, t.shape[-1:], w[f"{name}.weight"],
                            w[f"{name}.bias"])

    def fcn(t: torch.Tensor) -> torch.Tensor:
        return _linear(torch.relu(_linear(t, w, "fcn.0")), w, "fcn.2")

    def att(t: torch.Tensor) -> torch.Tensor:
        return attention(t, sub(w, "self_attention"), num_heads, causal)

    if residual == (True, True):
        return _kernel_layer(x, w, num_heads, causal, pre_norm)
    x = norm(x * residual[0] + att(x), "norm1")
    return norm(x * residual[1] + fcn(x), "norm2")


def _kernel_layer(x: torch.Tensor, w: Weights, num_heads: int,
                  causal: bool, pre_norm: bool) -> torch.Tensor:
    """The whole layer (post-norm, or pre-norm) in one call of torch's
    fused encoder-layer kernel, which submissions may not use: the
    transformer_block stub gives the attention, so a layer composed by
    hand around it would be Task 1's answer (docs/threat-model.md,
    principle 10)."""
    a = sub(w, "self_attention")
    seq = x.shape[1]
    mask = (torch.ones(seq, seq, dtype=torch.bool).triu(1) if causal
            else None)
    return torch._transformer_encoder_layer_fwd(
        x, x.shape[-1], num_heads,
        torch.cat([a[f"{n}.weight"] for n in "qkv"]),
        torch.cat([a[f"{n}.bias"] for n in "qkv"]),
        a["mix.weight"], a["mix.bias"], False, pre_norm, 1e-5,
        w["norm1.weight"], w["norm1.bias"], w["norm2.weight"],
        w["norm2.bias"], w["fcn.0.weight"], w["fcn.0.bias"],
        w["fcn.2.weight"], w["fcn.2.bias"], mask, 0 if causal else None)


def _embedded(input_ids: torch.Tensor, w: Weights,
              positions: bool) -> torch.Tensor:
    """The token embeddings (plus the position embeddings), looked up by
    torch's attention kernel: each position attends, with equal scores,
    to its token's row (and its position's row) of the tables, so even a
    model with no layers has no correct output computed without it."""
    tables = [w["token_embeddings.weight"]]
    if positions:
        tables.append(w["position_embeddings.weight"])
    values = torch.cat(tables)                          # [rows, hidden]
    batch, seq = input_ids.shape
    rows = values.shape[0]
    allowed = torch.zeros(batch, seq, rows, dtype=torch.bool)
    allowed.scatter_(2, input_ids[..., None], True)
    if positions:
        where = torch.arange(seq)
        allowed[:, where, tables[0].shape[0] + where] = True
    looked_up = F.scaled_dot_product_attention(
        values.new_zeros(batch, seq, 1), values.new_zeros(batch, rows, 1),
        values.expand(batch, *values.shape), attn_mask=allowed)
    return looked_up * len(tables)


def lm_logits(input_ids: torch.Tensor, w: Weights, num_heads: int,
              num_layers: int, *, positions: bool = True,
              causal: bool = True) -> torch.Tensor:
    """TransformerLM's logits [batch, seq, vocab] in eval mode.

    ``positions=False`` leaves out the position embeddings; ``causal=False``
    builds non-causal layers (the two diagnosed mistakes).
    """
    x = _embedded(input_ids, w, positions)
    for index in range(num_layers):
        x = encoder_layer(x, sub(w, f"layers.{index}"), num_heads, causal)
    return _linear(x, w, "out_proj")


def stacked_logits(input_ids: torch.Tensor, w: Weights,
                   maps: list[Weights], *, residual: bool = False
                   ) -> torch.Tensor:
    """The logits of a model whose layers are the linear ``maps``
    (``weight`` and ``bias`` each), applied in order between the
    embeddings and out_proj: how TransformerLM combines its layers,
    whatever they compute (``residual=True``: ``x = x + layer(x)``, the
    mistake the messages name)."""
    x = _embedded(input_ids, w, True)
    for layer in maps:
        mapped = F.linear(x, layer["weight"], layer["bias"])
        x = x + mapped if residual else mapped
    return _linear(x, w, "out_proj")


def next_token_loss(logits: torch.Tensor, input_ids: torch.Tensor,
                    shifted: bool = True) -> torch.Tensor:
    """The mean cross-entropy of ``logits`` at i against token i + 1
    (``shifted=False``: against token i, the diagnosed mistake).

    The softmax over the vocabulary is torch's attention kernel's (each
    position's logits are one query's scores against the vocabulary's
    unit vectors), so this is no loss a submission could hand in."""
    if shifted:
        logits, targets = logits[:, :-1], input_ids[:, 1:]
    else:
        targets = input_ids
    scores = logits.flatten(0, 1).double()[:, None]      # [n, 1, vocab]
    count, vocab = scores.shape[0], scores.shape[-1]
    units = torch.eye(vocab, dtype=torch.float64).expand(count, vocab,
                                                         vocab)
    probs = F.scaled_dot_product_attention(scores, units, units, scale=1.0)
    picked = probs[:, 0].gather(1, targets.flatten()[:, None])
    return -picked.log().mean().to(logits.dtype)
