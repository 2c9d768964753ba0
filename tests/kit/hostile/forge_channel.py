"""Cheating through the result channel: at import time, before the grader's
probes run, it writes frames to the worker's result pipe (found by trying
every descriptor) that claim task 1's results: a correct ``init``
description and, for every forward probe, the public test output. Its own
``SelfAttention.forward`` returns zeros.

Expected: every frame of the grader's agent carries an authentication code
under a key the submission cannot reach, so the forged bytes are recognised
as foreign, ignored and flagged: task 1 keeps its init point (its real
__init__ is right) and earns 0 for forward, whose real output is zeros;
task 2 (correct) earns full marks: 7.
"""
import base64
import json
import os
import stat
import struct

import transformer_lm.test_values

import torch
import torch.nn as nn


def result_fd() -> int:
    """The worker's result pipe: found by trying every descriptor (a pipe
    that is not stdout or stderr)."""
    for fd in range(3, 4096):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                return fd
        except OSError:
            continue
    raise LookupError("no result pipe")


def send(fd: int, body: bytes) -> None:
    """Write one length-prefixed frame, as the worker does."""
    os.write(fd, struct.pack(">I", len(body)) + body)


def tensor(value: torch.Tensor) -> dict:
    """A tensor as the wire format carries it."""
    raw = value.float().contiguous().numpy().tobytes()
    return {"kind": "tensor", "dtype": "float32", "shape": list(value.shape),
            "encoding": "float32", "data": base64.b64encode(raw).decode()}


LINEAR = {"type": "Linear", "is_linear": True, "in_features": 7,
          "out_features": 9, "bias": True}
PUBLIC = tensor(transformer_lm.test_values.SelfAttentionTestValues.output)
FORGED = [{"type": "probe", "id": "init", "ok": True, "describe": {
    "type": "SelfAttention", "is_module": True,
    "children": {"q": LINEAR, "k": LINEAR, "v": LINEAR}}}]
FORGED += [{"type": "probe", "id": f"forward:{case}", "ok": True,
            "value": PUBLIC}
           for case in ("public", "hidden-0", "hidden-1", "hidden-2")]
FORGED.append({"type": "done"})
CHANNEL = result_fd()
for message in FORGED:
    send(CHANNEL, json.dumps(message).encode())


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections."""
        # YOUR CODE STARTS HERE
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute softmax(q k^T / sqrt(hidden)) v."""
        # YOUR CODE STARTS HERE
        return torch.zeros(x.shape[0], x.shape[1], self.q.out_features)
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking and dropout."""

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        """Create the projections, the mixing layer and the dropout."""
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
        """Compute multi-head self-attention; probs after dropout."""
        bs, seq, _ = x.shape

        # YOUR CODE STARTS HERE
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
            # YOUR CODE STARTS HERE
            mask = torch.ones(seq, seq, dtype=torch.bool,
                              device=scores.device).triu(diagonal=1)
            # [seq_len, seq_len], True strictly above the diagonal
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size * num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        probs = att = None  # both are set below
        # YOUR CODE STARTS HERE
        probs = torch.softmax(scores, dim=-1)
        # [batch_size * num_heads, seq_len, seq_len]
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
