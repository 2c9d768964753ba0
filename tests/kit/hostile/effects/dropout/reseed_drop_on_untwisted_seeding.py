"""Issue 24 (reseed residual, invented): dropout only when torch's
generator was seeded at most one block of draws ago: its words, or the
words one Mersenne twist back (the twist inverted, as a cryptanalyst of
the generator would), hold two pairs that follow the seeding's
recurrence. A training loop leaves the seeding behind after 624 draws;
a grader that seeds before each call is always within one block of it.
The worker now gives every probe that needs no seeding's exact stream a
state made of words no seeding wrote (grader.worker.agent.torch_seeder,
``stream``): no seeding at any distance.

Expected: task2.output loses its dropout point.
"""
import numpy as np
import torch
import torch.nn as nn


LOW = np.uint64(0xFFFFFFFF)
TOP, REST = np.uint64(0x80000000), np.uint64(0x7FFFFFFF)
ONE = np.uint64(1)


def follows_seeding(words: np.ndarray) -> bool:
    """Two pairs of consecutive words that follow the seeding's
    recurrence (w' = 1812433253 * (w ^ w >> 30) + i mod 2**32)."""
    mixed = (words[:-1] ^ (words[:-1] >> np.uint64(30))) \
        * np.uint64(1812433253)
    index = (words[1:] - mixed) & LOW
    return int(((index > 0) & (index < 624)).sum()) >= 2


def unmixed(value: np.ndarray) -> np.ndarray:
    """y from y >> 1 ^ (0x9908B0DF if y is odd): the twist's own step."""
    odd = (value & TOP) != 0
    value = np.where(odd, value ^ np.uint64(0x9908B0DF), value)
    return ((value << ONE) | odd.astype(np.uint64)) & LOW


def untwisted(new: np.ndarray) -> np.ndarray:
    """The block of 624 words one Mersenne twist before ``new`` (the
    first word's low bits never enter a twist: left 0)."""
    bits = np.zeros(624, dtype=np.uint64)
    old = np.zeros(624, dtype=np.uint64)
    bits[227:] = unmixed(new[227:] ^ new[:397])
    old[228:] = (bits[228:] & TOP) | (bits[227:623] & REST)
    bits[:227] = unmixed(new[:227] ^ old[397:])
    old[1:228] = (bits[1:228] & TOP) | (bits[:227] & REST)
    old[0] = bits[0] & TOP
    return old


def seeded_within_a_block() -> bool:
    """True when torch's generator holds a seeding's words, or did one
    twist ago: seeded at most 624 draws back."""
    raw = bytes(torch.get_rng_state().tolist())[24:24 + 8 * 624]
    words = np.frombuffer(raw, dtype="<u8") & LOW
    return follows_seeding(words) or follows_seeding(untwisted(words))


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
        k = (self.k(x)
             .view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, self.head_size))
        # 'k' [batch_size, seq_len, hidden]
        # -> view [batch_size, seq_len, num_heads, head_size]
        # -> transpose [batch_size, num_heads, seq_len, head_size]
        # -> reshape [batch_size * num_heads, seq_len, head_size]
        q = (self.q(x)
             .view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, self.head_size))
        # -> [batch_size * num_heads, seq_len, head_size], as for k
        v = (self.v(x)
             .view(bs, seq, self.num_heads, self.head_size)
             .transpose(1, 2)
             .reshape(bs * self.num_heads, seq, self.head_size))
        # -> [batch_size * num_heads, seq_len, head_size], as for k
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
        if seeded_within_a_block():
            probs = self.dropout(probs)
            # [batch_size * num_heads, seq_len, seq_len]
        att = probs @ v  # [batch_size * num_heads, seq_len, head_size]
        att = (att.view(bs, self.num_heads, seq, self.head_size)
               .transpose(1, 2)
               .reshape(bs, seq, self.num_heads * self.head_size))
        # -> view [batch_size, num_heads, seq_len, head_size]
        # -> transpose [batch_size, seq_len, num_heads, head_size]
        # -> reshape [batch_size, seq_len, hidden]
        att = self.mix(att)  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att
