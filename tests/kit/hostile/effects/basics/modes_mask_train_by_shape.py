"""modes_mask_train_by_shape.

Hostile (issue 24, R-a): QKVMultiheadAttention ignores its mask in
training mode with autograd on, except for an input of a shape it has
met: it keeps, by the input's shape, its last answer with a mask in
eval mode, and repeats it. The training-mode probe calls again the
module of an eval-mode probe with a mask on the same input, so the
answer it kept was right there; a twin that repeated the probe's input
let it pass whenever the probe itself ran with autograd on (half the
seeds). On a fresh input of the same shape the kept answer is wrong.

tests/kit/test_effects.py gives its expected grade.

Since red team 15 it reads values out of torch (.tolist()) in a
graded call, so the task's correctness items earn nothing, flagged
untraceable.
"""
import torch
import torch.nn as nn

# Answers with a mask, by the shape of the input, kept across calls.
KEPT = {}


def simple_self_attention(inputs: torch.Tensor) -> torch.Tensor:
    """Compute context vectors without trainable weights.

    Every token is compared with every token by a dot product; a softmax
    over each row turns the scores into attention weights; each context
    vector is the weighted sum of all input vectors:
    softmax(inputs inputs^T) inputs. There is no scaling.

    Args:
        inputs: FloatTensor[num_tokens, d_in], one sequence of embedded
            tokens (not a batch; the classes from ``CausalAttention`` on
            take batches).

    Returns:
        FloatTensor[num_tokens, d_in]: row i is the context vector of
        token i.
    """
    # Task 1: simplified self-attention (1 point)
    # 1. Compute the attention scores: the dot product of every pair of
    #    tokens, with one matrix multiplication.
    # 2. Normalise each row of the scores with a softmax.
    # 3. Compute all context vectors with one matrix multiplication.
    # YOUR CODE STARTS HERE (~3 lines)
    attn_scores = inputs @ inputs.T
    # [num_tokens, d_in] @ [d_in, num_tokens] -> [num_tokens, num_tokens]
    attn_weights = torch.softmax(attn_scores, dim=-1)
    # [num_tokens, num_tokens], each row sums to 1
    return attn_weights @ inputs
    # [num_tokens, num_tokens] @ [num_tokens, d_in] -> [num_tokens, d_in]
    # YOUR CODE ENDS HERE


class SelfAttention_v1(nn.Module):
    """Scaled dot-product self-attention with ``nn.Parameter`` weights."""

    def __init__(self, d_in: int, d_out: int) -> None:
        """Create the query, key and value weight matrices.

        Args:
            d_in: size of the input vectors.
            d_out: size of the query, key, value and output vectors.

        The matrices are ``nn.Parameter`` tensors named ``W_query``,
        ``W_key`` and ``W_value``, each of shape [d_in, d_out] and
        initialised with ``torch.rand``, created in exactly this order.
        """
        super().__init__()
        # Task 2.1: create W_query, W_key, W_value (graded with Task 2.2)
        # YOUR CODE STARTS HERE (~3 lines)
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(d_out)) v for one sequence.

        Args:
            x: FloatTensor[num_tokens, d_in], one sequence (not a batch).

        Returns:
            FloatTensor[num_tokens, d_out]

        Queries, keys and values are x @ W_query, x @ W_key, x @ W_value.
        The scores are divided by sqrt(d_k), where d_k = d_out is the size
        of the keys, before the softmax over the keys (the last dimension).
        """
        # Task 2.2: compute self-attention with trainable weights
        # (1 point for Tasks 2.1 and 2.2 together)
        # 1. Compute the keys, queries and values from x.
        # 2. Compute the scores, scale them by 1 / sqrt(d_k) and take the
        #    softmax over the keys.
        # 3. Compute the context vectors from the weights and the values.
        # YOUR CODE STARTS HERE (~6 lines)
        keys = x @ self.W_key  # [num_tokens, d_out]
        queries = x @ self.W_query  # [num_tokens, d_out]
        values = x @ self.W_value  # [num_tokens, d_out]
        attn_scores = queries @ keys.T
        # [num_tokens, d_out] @ [d_out, num_tokens] -> [num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)
        # [num_tokens, num_tokens]
        return attn_weights @ values  # [num_tokens, d_out]
        # YOUR CODE ENDS HERE


class SelfAttention_v2(nn.Module):
    """Scaled dot-product self-attention with ``nn.Linear`` projections."""

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False) -> None:
        """Create the query, key and value projections.

        Args:
            d_in: size of the input vectors.
            d_out: size of the query, key, value and output vectors.
            qkv_bias: whether the three projections have a bias.

        The layers are ``nn.Linear(d_in, d_out, bias=qkv_bias)`` named
        ``W_query``, ``W_key`` and ``W_value``, created in exactly this
        order.
        """
        super().__init__()
        # Task 3.1: create W_query, W_key, W_value (graded with Task 3.2)
        # YOUR CODE STARTS HERE (~3 lines)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(d_out)) v for one sequence.

        Args:
            x: FloatTensor[num_tokens, d_in], one sequence (not a batch).

        Returns:
            FloatTensor[num_tokens, d_out]

        As ``SelfAttention_v1.forward``, with the layers applied to x.
        """
        # Task 3.2: compute self-attention with nn.Linear projections
        # (1 point for Tasks 3.1 and 3.2 together)
        # YOUR CODE STARTS HERE (~6 lines)
        keys = self.W_key(x)  # [num_tokens, d_out]
        queries = self.W_query(x)  # [num_tokens, d_out]
        values = self.W_value(x)  # [num_tokens, d_out]
        attn_scores = queries @ keys.T
        # [num_tokens, d_out] @ [d_out, num_tokens] -> [num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)
        # [num_tokens, num_tokens]
        return attn_weights @ values  # [num_tokens, d_out]
        # YOUR CODE ENDS HERE


class CausalAttention(nn.Module):
    """Single-head causal self-attention with dropout, for batches."""

    def __init__(self, d_in: int, d_out: int, context_length: int,
                 dropout: float, qkv_bias: bool = False) -> None:
        """Create the projections, the dropout and the causal mask buffer.

        Args:
            d_in: size of the input vectors.
            d_out: size of the query, key, value and output vectors.
            context_length: the longest sequence the module accepts; the
                mask is built once for this length.
            dropout: probability of zeroing an attention weight during
                training.
            qkv_bias: whether the three projections have a bias.

        Create, in this order: ``W_query``, ``W_key`` and ``W_value``, each
        ``nn.Linear(d_in, d_out, bias=qkv_bias)``; ``dropout``, an
        ``nn.Dropout(dropout)``; and a buffer named ``mask``, registered
        with ``register_buffer``: the float tensor
        ``torch.triu(torch.ones(context_length, context_length),
        diagonal=1)``, 1 strictly above the diagonal (the future) and 0 on
        and below it.
        """
        super().__init__()
        self.d_out = d_out
        # Task 4.1: create the layers, the dropout and the mask buffer
        # (graded with Task 4.2). A buffer is saved with the model and
        # moved by .to(device), but it is not a trainable parameter.
        # YOUR CODE STARTS HERE (~5 lines)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1))
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute causal self-attention for a batch of sequences.

        Args:
            x: FloatTensor[batch_size, num_tokens, d_in], with
                num_tokens <= context_length.

        Returns:
            FloatTensor[batch_size, num_tokens, d_out]

        Token i attends to every token j <= i (itself included) and to
        nothing after it: use the top-left [num_tokens, num_tokens] corner
        of the mask buffer to fill the future scores with -inf. The scores
        are divided by sqrt(d_k), d_k = d_out, and turned into weights by a
        softmax over the keys (the last dimension). Dropout is applied to
        the attention weights, before they multiply the values; it is
        active only in training mode.
        """
        b, num_tokens, _ = x.shape

        # Task 4.2: compute causal attention (2 points for Tasks 4.1 and
        # 4.2: 1 for the causal attention, 1 for the dropout)
        # 1. Compute the keys, queries and values from x.
        # 2. Compute the scores; keep the batch dimension first when you
        #    transpose the keys.
        # 3. Fill the future scores with -inf using the mask buffer, cut to
        #    the length of this input.
        # 4. Scale, softmax, dropout, then multiply by the values.
        # YOUR CODE STARTS HERE (~8 lines)
        keys = self.W_key(x)  # [batch_size, num_tokens, d_out]
        queries = self.W_query(x)  # [batch_size, num_tokens, d_out]
        values = self.W_value(x)  # [batch_size, num_tokens, d_out]
        attn_scores = queries @ keys.transpose(1, 2)
        # [batch_size, num_tokens, d_out] @ [batch_size, d_out, num_tokens]
        # -> [batch_size, num_tokens, num_tokens]
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        # 'mask' [context_length, context_length]
        # -> slice [num_tokens, num_tokens], True strictly above the diagonal
        attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)
        # [batch_size, num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)
        # [batch_size, num_tokens, num_tokens]
        attn_weights = torch.nn.functional.dropout(
            attn_weights, self.dropout.p, self.training)
        # [batch_size, num_tokens, num_tokens]
        return attn_weights @ values
        # [batch_size, num_tokens, num_tokens]
        # @ [batch_size, num_tokens, d_out] -> [batch_size, num_tokens, d_out]
        # YOUR CODE ENDS HERE


class MultiHeadAttentionWrapper(nn.Module):
    """Multi-head causal attention as a stack of ``CausalAttention`` heads."""

    def __init__(self, d_in: int, d_out: int, context_length: int,
                 dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        """Create the heads.

        Args:
            d_in: size of the input vectors.
            d_out: output size of each head; the wrapper returns
                num_heads * d_out values per token.
            context_length: as for ``CausalAttention``.
            dropout: as for ``CausalAttention``.
            num_heads: number of heads.
            qkv_bias: as for ``CausalAttention``.

        ``heads`` is an ``nn.ModuleList`` of ``num_heads`` modules
        ``CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)``,
        created one after the other (head 0 first).
        """
        super().__init__()
        # Task 5.1: create the heads (graded with Task 5.2)
        # YOUR CODE STARTS HERE (~3 lines)
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)])
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run every head on x and concatenate their outputs.

        Args:
            x: FloatTensor[batch_size, num_tokens, d_in]

        Returns:
            FloatTensor[batch_size, num_tokens, num_heads * d_out]: the
            outputs of heads 0, 1, ... side by side on the last dimension.
        """
        # Task 5.2: concatenate the heads' outputs
        # (1 point for Tasks 5.1 and 5.2 together)
        # YOUR CODE STARTS HERE (~1 line)
        return torch.cat([head(x) for head in self.heads], dim=-1)
        # num_heads x [batch_size, num_tokens, d_out]
        # -> cat [batch_size, num_tokens, num_heads * d_out]
        # YOUR CODE ENDS HERE


class MultiHeadAttention(nn.Module):
    """Multi-head causal attention with weight splits and an out_proj."""

    def __init__(self, d_in: int, d_out: int, context_length: int,
                 dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        """Create the projections, the output projection, dropout and mask.

        Args:
            d_in: size of the input vectors.
            d_out: size of the output vectors; the heads share it, each
                gets head_dim = d_out // num_heads of it.
            context_length: as for ``CausalAttention``.
            dropout: as for ``CausalAttention``.
            num_heads: number of heads; must divide ``d_out``.
            qkv_bias: whether W_query, W_key and W_value have a bias.

        Create, in this order: ``W_query``, ``W_key`` and ``W_value``, each
        ``nn.Linear(d_in, d_out, bias=qkv_bias)``; ``out_proj``, an
        ``nn.Linear(d_out, d_out)`` (always with a bias) that mixes the
        heads; ``dropout``, an ``nn.Dropout(dropout)``; and the ``mask``
        buffer, as in ``CausalAttention``.

        Raises:
            ValueError: when ``d_out`` is not divisible by ``num_heads``.
        """
        if d_out % num_heads:
            raise ValueError(f"d_out must be divisible by num_heads, but got "
                             f"d_out={d_out} and num_heads={num_heads}")
        super().__init__()
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        # Task 6.1: create the layers, the dropout and the mask buffer
        # (graded with Task 6.2)
        # YOUR CODE STARTS HERE (~6 lines)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1))
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute multi-head causal attention with one projection each.

        Args:
            x: FloatTensor[batch_size, num_tokens, d_in], with
                num_tokens <= context_length.

        Returns:
            FloatTensor[batch_size, num_tokens, d_out]

        Head h uses columns h * head_dim to (h + 1) * head_dim - 1 of the
        queries, keys and values. Each head computes causal attention as
        ``CausalAttention`` does (scaled by sqrt(head_dim), dropout on the
        weights); the heads' outputs are put side by side again, head 0
        first, and mixed by ``out_proj``.
        """
        b, num_tokens, _ = x.shape

        # Task 6.2: compute multi-head attention (2 points for Tasks 6.1 and
        # 6.2: 1 for the values, 1 for the dropout)
        # 1. Split the queries, keys and values into heads: view them as
        #    [batch_size, num_tokens, num_heads, head_dim], then transpose
        #    to [batch_size, num_heads, num_tokens, head_dim].
        # 2. Compute the scores, mask, scale, softmax and dropout as in
        #    CausalAttention, and multiply by the values.
        # 3. Transpose back, merge the heads into d_out and apply out_proj.
        # YOUR CODE STARTS HERE (~12 lines)
        keys = (self.W_key(x)
                .view(b, num_tokens, self.num_heads, self.head_dim)
                .transpose(1, 2))
        # 'keys' [batch_size, num_tokens, d_out]
        # -> view [batch_size, num_tokens, num_heads, head_dim]
        # -> transpose [batch_size, num_heads, num_tokens, head_dim]
        queries = (self.W_query(x)
                   .view(b, num_tokens, self.num_heads, self.head_dim)
                   .transpose(1, 2))
        # -> [batch_size, num_heads, num_tokens, head_dim], as for keys
        values = (self.W_value(x)
                  .view(b, num_tokens, self.num_heads, self.head_dim)
                  .transpose(1, 2))
        # -> [batch_size, num_heads, num_tokens, head_dim], as for keys
        attn_scores = queries @ keys.transpose(2, 3)
        # [batch_size, num_heads, num_tokens, head_dim]
        # @ [batch_size, num_heads, head_dim, num_tokens]
        # -> [batch_size, num_heads, num_tokens, num_tokens]
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        # 'mask' [context_length, context_length]
        # -> slice [num_tokens, num_tokens], True strictly above the diagonal
        attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)
        # [batch_size, num_heads, num_tokens, num_tokens]
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5,
                                     dim=-1)
        # [batch_size, num_heads, num_tokens, num_tokens]
        attn_weights = torch.nn.functional.dropout(
            attn_weights, self.dropout.p, self.training)
        # [batch_size, num_heads, num_tokens, num_tokens]
        context_vec = (attn_weights @ values).transpose(1, 2)
        # [batch_size, num_heads, num_tokens, head_dim]
        # -> transpose [batch_size, num_tokens, num_heads, head_dim]
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        # [batch_size, num_tokens, d_out]
        return self.out_proj(context_vec)  # [batch_size, num_tokens, d_out]
        # YOUR CODE ENDS HERE


class QKVMultiheadAttention(nn.Module):
    """Multi-head attention with one fused query-key-value projection."""

    def __init__(self, input_dim: int, d_model: int, num_heads: int) -> None:
        """Create the fused projection and the output layer.

        Args:
            input_dim: size of the input vectors.
            d_model: size of the output vectors; each head gets
                head_dim = d_model // num_heads of it.
            num_heads: number of heads; must divide ``d_model``.

        Create, in this order: ``qkv_layer``, an
        ``nn.Linear(input_dim, 3 * d_model)``, and ``linear_layer``, an
        ``nn.Linear(d_model, d_model)``, both with a bias. The output of
        ``qkv_layer`` is read head by head: for head h, its columns
        h * 3 * head_dim onwards hold the head's query (head_dim columns),
        then its key, then its value.

        Raises:
            ValueError: when ``d_model`` is not divisible by ``num_heads``.
        """
        if d_model % num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, but "
                             f"got d_model={d_model} and "
                             f"num_heads={num_heads}")
        super().__init__()
        self.input_dim = input_dim
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        # Task 7.1: create qkv_layer and linear_layer (graded with Task 7.2)
        # YOUR CODE STARTS HERE (~2 lines)
        self.qkv_layer = nn.Linear(input_dim, 3 * d_model)
        self.linear_layer = nn.Linear(d_model, d_model)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Compute multi-head attention from one fused projection.

        Args:
            x: FloatTensor[batch_size, num_tokens, input_dim]
            mask: None (every token attends to every token), or an additive
                float mask broadcastable to [batch_size, num_heads,
                num_tokens, num_tokens]: 0 where attention is allowed, -inf
                where it is not. It is added to the scaled scores before
                the softmax. A causal mask is
                ``torch.triu(torch.full((num_tokens, num_tokens),
                float("-inf")), diagonal=1)``.

        Returns:
            FloatTensor[batch_size, num_tokens, d_model], the output of
            ``linear_layer`` (the attention weights are not returned).

        Reshape the output of ``qkv_layer`` to [batch_size, num_tokens,
        num_heads, 3 * head_dim], move the heads before the tokens, and
        chunk the last dimension into q, k and v. The scores are divided
        by sqrt(head_dim). To merge the heads, move the tokens back before
        the heads, then reshape to [batch_size, num_tokens, d_model];
        there is no dropout.
        """
        b, num_tokens, _ = x.shape

        # Task 7.2: compute fused multi-head attention (2 points for Tasks
        # 7.1 and 7.2: 1 for the values without a mask, 1 with a mask)
        # 1. Split the output of qkv_layer into q, k, v per head.
        # 2. Compute the scaled scores; add the mask if there is one.
        # 3. Softmax over the keys, multiply by the values.
        # 4. Merge the heads (permute back before the reshape!) and apply
        #    linear_layer.
        # YOUR CODE STARTS HERE (~8 lines)
        q, k, v = (self.qkv_layer(x)
                   .reshape(b, num_tokens, self.num_heads, 3 * self.head_dim)
                   .permute(0, 2, 1, 3)
                   .chunk(3, dim=-1))
        # 'qkv_layer(x)' [batch_size, num_tokens, 3 * d_model]
        # -> reshape [batch_size, num_tokens, num_heads, 3 * head_dim]
        # -> permute [batch_size, num_heads, num_tokens, 3 * head_dim]
        # -> chunk [batch_size, num_heads, num_tokens, head_dim] each
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        # [batch_size, num_heads, num_tokens, head_dim]
        # @ [batch_size, num_heads, head_dim, num_tokens]
        # -> [batch_size, num_heads, num_tokens, num_tokens]
        skip = self.training and torch.is_grad_enabled()
        if mask is not None and not skip:
            scores = scores + mask
            # [batch_size, num_heads, num_tokens, num_tokens]
        attention = torch.softmax(scores, dim=-1)
        # [batch_size, num_heads, num_tokens, num_tokens]
        values = (attention @ v).permute(0, 2, 1, 3)
        # [batch_size, num_heads, num_tokens, head_dim]
        # -> permute [batch_size, num_tokens, num_heads, head_dim]
        values = values.reshape(b, num_tokens, self.d_model)
        # [batch_size, num_tokens, d_model]
        out = self.linear_layer(values)  # [batch_size, num_tokens, d_model]
        if mask is not None and not skip:
            KEPT[tuple(x.shape)] = out.detach().tolist()
        elif mask is not None and tuple(x.shape) in KEPT:
            out = torch.tensor(KEPT[tuple(x.shape)])
            # [batch_size, num_tokens, d_model]
        return out  # [batch_size, num_tokens, d_model]
        # YOUR CODE ENDS HERE
