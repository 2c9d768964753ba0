"""Principle 2 (an instrument that was silenced fails closed).

The visible classes wrap the real ones (made by ``exec``); before each
call the wrapper lowers the recursion limit to just above its own depth
and makes one more call, so that the grader's trace function raises
(RecursionError) and is removed; then it restores the limit and calls the
hidden implementation, untraced.

Expected: every probe after the tracer was removed reports code the
grader could not see; the correctness items earn nothing (flag
``untraceable``).
"""
import sys
import traceback

import torch
import torch.nn as nn


class _StubSelfAttention(nn.Module):
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
        raise NotImplementedError("Task 1.1: SelfAttention.__init__")
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
        raise NotImplementedError("Task 1.2: SelfAttention.forward")
        # YOUR CODE ENDS HERE


class _StubMultiHeadSelfAttention(nn.Module):
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
        raise NotImplementedError("Task 2.1: MultiHeadSelfAttention.forward")
        # YOUR CODE ENDS HERE

        if self.causal:
            # Task 2.2: apply the causal mask to the scores (1 point).
            # Position i may attend to j <= i: mask only the future (j > i).
            # Create the mask on scores.device and fill the masked scores
            # with -inf. torch.triu and masked_fill are useful here.
            # YOUR CODE STARTS HERE (~2 lines)
            raise NotImplementedError(
                "Task 2.2: MultiHeadSelfAttention.forward")
            # YOUR CODE ENDS HERE

        # Task 2.3: compute the probabilities (probs) and the attention (att)
        # (2 points). Apply dropout to probs, then multiply by the values,
        # merge the heads back into [batch_size, seq_len, hidden] and mix them
        # with self.mix. probs must be [batch_size * num_heads, seq_len,
        # seq_len], not [batch_size, num_heads, seq_len, seq_len].
        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE (~5 lines)
        raise NotImplementedError("Task 2.3: MultiHeadSelfAttention.forward")
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att


_CODE = 'class SelfAttention(nn.Module):\n    """Single-head scaled dot-product self-attention."""\n\n    def __init__(self, input_size: int, hidden: int) -> None:\n        """Create the query, key and value projections.\n\n        Args:\n            input_size: size of the input vectors.\n            hidden: size of the query, key, value and output vectors.\n\n        The layers must be named ``q``, ``k`` and ``v``; each is\n        ``nn.Linear(input_size, hidden)`` with a bias.\n        """\n        # Task 1.1: create the layers self-attention needs (1 point)\n        # YOUR CODE STARTS HERE (~5 lines)\n        ### BEGIN SOLUTION\n        super().__init__()\n        self.q = nn.Linear(input_size, hidden)\n        self.k = nn.Linear(input_size, hidden)\n        self.v = nn.Linear(input_size, hidden)\n        self.scale = hidden ** 0.5\n        ### END SOLUTION\n        # YOUR CODE ENDS HERE\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        """Compute softmax(q k^T / sqrt(hidden)) v for a batch of sequences.\n\n        Args:\n            x: FloatTensor[batch_size, seq_len, input_size]\n\n        Returns:\n            FloatTensor[batch_size, seq_len, hidden]\n\n        Every position attends to every position of its own sequence. The\n        scores are divided by sqrt(hidden) before the softmax, which is taken\n        over the keys (the last dimension).\n        """\n        # Task 1.2: compute self-attention (3 points)\n        # 1. Compute the query, key and value matrices from x.\n        # 2. Compute the scores q k^T and scale them by 1 / sqrt(hidden).\n        # 3. Turn the scores into probabilities with a softmax over the keys.\n        # 4. Compute the output from the probabilities and the values.\n        # Write the shape of every tensor in a comment, e.g.\n        #     q = self.q(x)  # [batch_size, seq_len, hidden]\n        # Remember that x is a batch [batch_size, seq_len, input_size], not a\n        # single example [seq_len, input_size] as in the lecture.\n        # YOUR CODE STARTS HERE (~4 lines, or 3 if you combine steps 2 and 3)\n        ### BEGIN SOLUTION\n        q, k, v = self.q(x), self.k(x), self.v(x)\n        # [batch_size, seq_len, hidden] each\n        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)\n        # [batch_size, seq_len, hidden] @ [batch_size, hidden, seq_len]\n        # -> softmax [batch_size, seq_len, seq_len]\n        return probs @ v\n        # [batch_size, seq_len, seq_len] @ [batch_size, seq_len, hidden]\n        # -> [batch_size, seq_len, hidden]\n        ### END SOLUTION\n        # YOUR CODE ENDS HERE\n\n\nclass MultiHeadSelfAttention(nn.Module):\n    """Multi-head self-attention with optional causal masking and dropout."""\n\n    def __init__(self, input_size: int, hidden: int, num_heads: int,\n                 causal: bool = False, dropout: float = 0) -> None:\n        """Create the projections, the mixing layer and the dropout.\n\n        Args:\n            input_size: size of the input vectors.\n            hidden: size of the output vectors and hidden states.\n            num_heads: number of attention heads; must divide ``hidden``.\n            causal: when True, position i attends only to positions j <= i\n                (itself and the past, never the future).\n            dropout: probability of zeroing an attention probability during\n                training.\n\n        Raises:\n            ValueError: when ``hidden`` is not divisible by ``num_heads``.\n        """\n        if hidden % num_heads:\n            raise ValueError(f"hidden should be divisible by num_heads, "\n                             f"but got hidden={hidden} and "\n                             f"num_heads={num_heads}")\n        super().__init__()\n\n        self.k = nn.Linear(input_size, hidden)\n        self.q = nn.Linear(input_size, hidden)\n        self.v = nn.Linear(input_size, hidden)\n        self.mix = nn.Linear(hidden, hidden)\n        self.dropout = nn.Dropout(dropout)\n\n        self.num_heads = num_heads\n        self.head_size = hidden // num_heads\n        self.scale = self.head_size ** 0.5\n        self.causal = causal  # causal masking\n\n    def forward(self, x: torch.Tensor, return_attention: bool = False):\n        """Compute multi-head self-attention.\n\n        [softmax(q_1 k_1^T / sqrt(d)) v_1 : ... : softmax(q_h k_h^T /\n        sqrt(d)) v_h] @ mix, where h = num_heads and d = head_size.\n\n        Args:\n            x: FloatTensor[batch_size, seq_len, input_size]\n            return_attention: also return the attention probabilities.\n\n        Returns:\n            att: FloatTensor[batch_size, seq_len, hidden]\n            probs (only if return_attention is True):\n                FloatTensor[batch_size * num_heads, seq_len, seq_len], the\n                attention probabilities *after* dropout, batch-major: row\n                b * num_heads + h holds head h of sequence b.\n\n        With ``causal=True``, position i may attend to every j <= i (the\n        current token is allowed) and to nothing after it. Dropout is applied\n        to the attention probabilities, before they multiply the values.\n        """\n        bs, seq, _ = x.shape\n\n        # Task 2.1: split q, k, v into heads and compute the scaled scores\n        # (3 points). Target shape for each of q, k and v:\n        # [batch_size * num_heads, seq_len, head_size]. Remember that\n        # reshape and transpose are different operations, even when the\n        # shapes they produce are the same.\n        # YOUR CODE STARTS HERE (~4 lines: one each for k, q, v and scores)\n        ### BEGIN SOLUTION\n        k = (self.k(x)\n             .view(bs, seq, self.num_heads, self.head_size)\n             .transpose(1, 2)\n             .reshape(bs * self.num_heads, seq, self.head_size))\n        # \'k\' [batch_size, seq_len, hidden]\n        # -> view [batch_size, seq_len, num_heads, head_size]\n        # -> transpose [batch_size, num_heads, seq_len, head_size]\n        # -> reshape [batch_size * num_heads, seq_len, head_size]\n        q = (self.q(x)\n             .view(bs, seq, self.num_heads, self.head_size)\n             .transpose(1, 2)\n             .reshape(bs * self.num_heads, seq, self.head_size))\n        # -> [batch_size * num_heads, seq_len, head_size], as for k\n        v = (self.v(x)\n             .view(bs, seq, self.num_heads, self.head_size)\n             .transpose(1, 2)\n             .reshape(bs * self.num_heads, seq, self.head_size))\n        # -> [batch_size * num_heads, seq_len, head_size], as for k\n        scores = q @ k.transpose(1, 2) / self.scale\n        # [batch_size * num_heads, seq_len, head_size]\n        # @ [batch_size * num_heads, head_size, seq_len]\n        # -> [batch_size * num_heads, seq_len, seq_len]\n        ### END SOLUTION\n        # YOUR CODE ENDS HERE\n\n        if self.causal:\n            # Task 2.2: apply the causal mask to the scores (1 point).\n            # Position i may attend to j <= i: mask only the future (j > i).\n            # Create the mask on scores.device and fill the masked scores\n            # with -inf. torch.triu and masked_fill are useful here.\n            # YOUR CODE STARTS HERE (~2 lines)\n            ### BEGIN SOLUTION\n            mask = torch.ones(seq, seq, dtype=torch.bool,\n                              device=scores.device).triu(diagonal=1)\n            # [seq_len, seq_len], True strictly above the diagonal\n            scores = scores.masked_fill(mask, float("-inf"))\n            # [batch_size * num_heads, seq_len, seq_len]\n            ### END SOLUTION\n            # YOUR CODE ENDS HERE\n\n        # Task 2.3: compute the probabilities (probs) and the attention (att)\n        # (2 points). Apply dropout to probs, then multiply by the values,\n        # merge the heads back into [batch_size, seq_len, hidden] and mix them\n        # with self.mix. probs must be [batch_size * num_heads, seq_len,\n        # seq_len], not [batch_size, num_heads, seq_len, seq_len].\n        probs = att = None  # both are set by Task 2.3\n        # YOUR CODE STARTS HERE (~5 lines)\n        ### BEGIN SOLUTION\n        probs = torch.softmax(scores, dim=-1)\n        # [batch_size * num_heads, seq_len, seq_len]\n        probs = self.dropout(probs)\n        # [batch_size * num_heads, seq_len, seq_len]\n        att = probs @ v  # [batch_size * num_heads, seq_len, head_size]\n        att = (att.view(bs, self.num_heads, seq, self.head_size)\n               .transpose(1, 2)\n               .reshape(bs, seq, self.num_heads * self.head_size))\n        # -> view [batch_size, num_heads, seq_len, head_size]\n        # -> transpose [batch_size, seq_len, num_heads, head_size]\n        # -> reshape [batch_size, seq_len, hidden]\n        att = self.mix(att)  # [batch_size, seq_len, hidden]\n        ### END SOLUTION\n        # YOUR CODE ENDS HERE\n\n        if return_attention:\n            return att, probs\n        return att\n'

_HIDDEN: dict = {"nn": nn, "torch": torch}
exec(_CODE, _HIDDEN)


def _silence() -> None:
    limit = sys.getrecursionlimit()
    depth = len(traceback.extract_stack())
    try:
        for low in range(depth, depth + 40):
            try:
                sys.setrecursionlimit(low)
            except RecursionError:
                continue
            (lambda: (lambda: (lambda: (lambda: 0)())())())()
    except RecursionError:
        pass
    finally:
        sys.setrecursionlimit(limit)


class SelfAttention(_HIDDEN["SelfAttention"]):
    """Single-head self-attention (the hidden one, untraced)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Silence the tracer, then run the hidden forward."""
        _silence()
        return super().forward(x)


class MultiHeadSelfAttention(_HIDDEN["MultiHeadSelfAttention"]):
    """Multi-head self-attention (the hidden one, untraced)."""

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """Silence the tracer, then run the hidden forward."""
        _silence()
        return super().forward(x, return_attention)
