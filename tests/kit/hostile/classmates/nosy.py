"""A submission that looks for its classmates while a batch grades it: the
batch folder and the files beside it, the grading process's stack frames,
its objects, environment and command line, and the seed of the hidden
cases. It prints whatever it finds.

Expected (test_integrity.py): nothing of any classmate, nor the secret
seed, reaches its output; the frame and object look-ups are refused and
flagged; the rest of the file is the reference solution's task 1 and a
correct task 2, graded on their merits.
"""
import gc
import os
import sys
from pathlib import Path

import torch
import torch.nn as nn


def look() -> None:
    """Print everything that could belong to someone else."""
    here = Path(__file__).resolve().parent
    for folder in (here, here.parent, Path.cwd()):
        try:
            print("LISTED", folder, sorted(os.listdir(folder)))
        except OSError as exc:
            print("no listing:", type(exc).__name__)
    print("ENVIRON", dict(os.environ))
    print("ARGV", sys.argv)
    print("SEED", torch.initial_seed())
    try:
        frame = sys._getframe()
        while frame is not None:
            print("FRAME", frame.f_code.co_name, list(frame.f_locals))
            frame = frame.f_back
    except PermissionError:
        print("no frames")
    try:
        print("OBJECTS", len(gc.get_objects()))
    except PermissionError:
        print("no objects")


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections."""
        # YOUR CODE STARTS HERE
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(hidden)) v, after a look around."""
        # YOUR CODE STARTS HERE
        look()
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        scores = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5
        # [batch_size, seq_len, seq_len]
        return torch.softmax(scores, dim=-1) @ v
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    """Not written: this student only looked around."""

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        """Nothing."""
        super().__init__()

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """Nothing."""
        raise NotImplementedError
