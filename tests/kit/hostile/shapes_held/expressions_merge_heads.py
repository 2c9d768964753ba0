"""Honest (issue 24, principle 6): the heads are merged by a list
comprehension, a generator expression and a lambda that read ``att``
on the line that rebinds it. Python 3.11 runs each in a frame of its
own, where ``att`` is still the value from before the statement: the
statement's own frame records it, so every comment here is right."""
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections.

        Args:
            input_size: size of the input vectors.
            hidden: size of the query, key, value and output vectors.

        The layers must be named ``q``, ``k`` and ``v``; each is
        ``nn.Linear(input_size, hidden)`` with a bias.
        """
        # Task 1.1: create the layers self-attention needs (1 point)
        # YOUR CODE STARTS HERE (~5 lines)
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v for a batch of sequences.

        Args:
            x: FloatTensor[batch_size, seq_len, input_size]

        Returns:
            FloatTensor[batch_size, seq_len, hidden]

        Every position attends to every position of its own sequence. The
        scores are divided by sqrt(hidden) before the softmax, which is taken
        over the keys (the last dimension).
        """
        # Task 1.2: compute self-attention (3 points)
        # 1. Compute the query, key and value matrices from x.
        # 2. Compute the scores q k^T and scale them by 1 / sqrt(hidden).
        # 3. Turn the scores into probabilities with a softmax over the keys.
        # 4. Compute the output from the probabilities and the values.
        # Write the shape of every tensor in a comment, e.g.
        #     q = self.q(x)  # [batch_size, seq_len, hidden]
        # Remember that x is a batch [batch_size, seq_len, input_size], not a
        # single example [seq_len, input_size] as in the lecture.
        # YOUR CODE STARTS HERE (~4 lines, or 3 if you combine steps 2 and 3)
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, hidden] @ [batch_size, hidden, seq_len]
        # -> softmax [batch_size, seq_len, seq_len]
        return probs @ v
        # [batch_size, seq_len, seq_len] @ [batch_size, seq_len, hidden]
        # -> [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking and dropout."""

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        """Create the projections, the mixing layer and the dropout.

        Args:
            input_size: size of the input vectors.
            hidden: size of the output vectors and hidden states.
            num_heads: number of attention heads; must divide ``hidden``.
            causal: when True, position i attends only to positions j <= i
                (itself and the past, never the future).
            dropout: probability of zeroing an attention probability during
                training.

        Raises:
            ValueError: when ``hidden`` is not divisible by ``num_heads``.
        """
        if hidden % num_heads:
            raise ValueError(f"hidden should be divisible by num_heads, "
                             f"but got hidden={hidden} and "
                             f"num_heads={num_heads}")
        super().__init__()

        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.scale = self.head_size ** 0.5
        self.causal = causal  # causal masking

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """Compute multi-head self-attention.

        [softmax(q_1 k_1^T / sqrt(d)) v_1 : ... : softmax(q_h k_h^T /
        sqrt(d)) v_h] @ mix, where h = num_heads and d = head_size.

        Args:
            x: FloatTensor[batch_size, seq_len, input_size]
            return_attention: also return the attention probabilities.

        Returns:
            att: FloatTensor[batch_size, seq_len, hidden]
            probs (only if return_attention is True):
                FloatTensor[batch_size * num_heads, seq_len, seq_len], the
                attention probabilities *after* dropout, batch-major: row
                b * num_heads + h holds head h of sequence b.

        With ``causal=True``, position i may attend to every j <= i (the
        current token is allowed) and to nothing after it. Dropout is applied
        to the attention probabilities, before they multiply the values.
        """
        bs, seq, _ = x.shape

        # Task 2.1: split q, k, v into heads and compute the scaled scores
        # (3 points). Target shape for each of q, k and v:
        # [batch_size * num_heads, seq_len, head_size]. Remember that
        # reshape and transpose are different operations, even when the
        # shapes they produce are the same.
        # YOUR CODE STARTS HERE (~4 lines: one each for k, q, v and scores)
        heads = []
        for layer in (self.k, self.q, self.v):
            heads.append(layer(x)  # [bs * h, seq, d_k]
                         .view(bs, seq, self.num_heads, self.head_size)
                         .transpose(1, 2)
                         .reshape(bs * self.num_heads, seq, self.head_size))
        k, q, v = heads  # [batch_size * num_heads, seq_len, head_size]
        parts = {"k": k, "v": v}
        # {'k': [batch_size * num_heads, seq_len, head_size], 'v': the same}
        pair = (q, self.q(x))
        # [batch_size * num_heads, seq_len, head_size], [bs, seq, hidden]
        k = pair[0] if parts["k"] is None else k
        # [batch_size * num_heads, seq_len, head_size]
        scores = q @ k.transpose(1, 2) / self.scale
        # [batch_size * num_heads, seq_len, head_size]
        # @ [batch_size * num_heads, head_size, seq_len]
        # -> [batch_size * num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # Task 2.2: apply the causal mask to the scores (1 point).
            # Position i may attend to j <= i: mask only the future (j > i).
            # Create the mask on scores.device and fill the masked scores
            # with -inf. torch.triu and masked_fill are useful here.
            # YOUR CODE STARTS HERE (~2 lines)
            mask = torch.ones(seq, seq, dtype=torch.bool,
                              device=scores.device).triu(diagonal=1)
            # [seq_len, seq_len], True strictly above the diagonal
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size * num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        # Task 2.3: compute the probabilities (probs) and the attention (att)
        # (2 points). Apply dropout to probs, then multiply by the values,
        # merge the heads back into [batch_size, seq_len, hidden] and mix them
        # with self.mix. probs must be [batch_size * num_heads, seq_len,
        # seq_len], not [batch_size, num_heads, seq_len, seq_len].
        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE (~5 lines)
        probs = torch.softmax(scores, dim=-1)
        # [batch_size * num_heads, seq_len, seq_len]
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
        att = probs @ v  # [batch_size * num_heads, seq_len, head_size]
        att = att.view(bs, self.num_heads, seq, self.head_size)
        # [batch_size, num_heads, seq_len, head_size]
        att = torch.cat([att[:, h] for h in range(self.num_heads)], dim=-1)
        # [batch_size, seq_len, hidden]
        att = att.view(bs, seq, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        att = torch.cat(tuple(att[:, :, h] for h in range(self.num_heads)),
                        dim=-1)  # [batch_size, seq_len, hidden]
        att = att.view(bs, seq, self.num_heads, self.head_size)
        # [batch_size, seq_len, num_heads, head_size]
        att = torch.cat(list(map(lambda h: att[:, :, h],
                                 range(self.num_heads))), dim=-1)
        # [batch_size, seq_len, hidden]
        att = self.mix(att)  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
