"""Hostile at import time: tries to change the kit through its paths (the
public test values, the public and the kit's tests, the grader), by every
Python means: ``write_text``, ``open`` in append mode, ``os.open``,
``os.remove``, ``os.rename``, ``shutil.rmtree``, ``os.chmod``,
``os.utime``, ``os.truncate``, ``shutil.copyfile``, ``torch.save`` and a
symbolic link. Each attempt is caught, and printed when it succeeds.

Expected: every attempt is refused and reported; the kit is unchanged; the
code itself is correct, so it earns full marks (11): an attempt that failed
changes no score, and the report lists each one.
"""
import os
import shutil
from pathlib import Path

import transformer_lm.test_values

import torch
import torch.nn as nn


# This file sits in tests/kit/hostile/ of the kit.
KIT = Path(__file__).resolve().parents[3]

VALUES = Path(transformer_lm.test_values.__file__)
MARK = "\n# tampered by a submission\n"
CHECKING = KIT / "grader" / "judge" / "checking.py"
MISSING = KIT / "grader" / "no-such-file.py"


def append(path: Path) -> None:
    """Append the mark to a file."""
    with open(path, "a") as handle:
        handle.write(MARK)


def os_append(path: Path) -> None:
    """Append the mark with os.open."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, MARK.encode())
    os.close(fd)


ATTEMPTS = {
    "test values": lambda: VALUES.write_text(VALUES.read_text() + MARK),
    "public tests": lambda: append(KIT / "tests" / "public" / "conftest.py"),
    "kit tests": lambda: append(KIT / "tests" / "kit" / "conftest.py"),
    "grader": lambda: os_append(CHECKING),
    "new grader file": lambda: (KIT / "grader" / "pwned.py").write_text(MARK),
    "remove": lambda: os.remove(MISSING),
    "rename": lambda: os.rename(MISSING, "stolen.py"),
    "rmtree": lambda: shutil.rmtree(KIT / "grader" / "no-such-folder"),
    "chmod": lambda: os.chmod(CHECKING, os.stat(CHECKING).st_mode),
    "utime": lambda: os.utime(CHECKING),
    "truncate": lambda: os.truncate(MISSING, 0),
    "copy": lambda: shutil.copyfile(VALUES, KIT / "grader" / "copied.py"),
    "torch.save": lambda: torch.save(torch.zeros(1), KIT / "grader" / "t.pt"),
    "symlink": lambda: os.symlink(CHECKING, "checking.py"),
}
for what, attempt in ATTEMPTS.items():
    try:
        attempt()
    except Exception as exc:
        print(f"refused: {what}: {type(exc).__name__}")
    else:
        print(f"TAMPERED: {what}")


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
