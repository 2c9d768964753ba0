"""Principle 1 (nothing of the grader is reachable from student code).

Correct, clean classes; the first time SelfAttention.forward runs (inside
a probe, where the stack below holds the grader's probe runner and the
probe plan), a walker starts from everything the code can get: its
globals and builtins, every module, its frames by every route the
standard library offers, the traceback of an error a grader stand-in
raised (a refused thread's), the locals ``traceback`` captures as text,
a generator's frame, gc, threads, torch's hook dicts, mode stacks and
operator registries, the interpreter's hooks and signal handlers. It
follows every attribute, slot, closure cell, function globals and
defaults, bound self, partial's parts, frame link, frame locals and
container item it can read, breadth first, for up to 2,000 objects (a
bound on objects, not on time: it walks alike on any machine). Any
function or frame of the grader's worker code it reaches
(or a frame's locals as text), other than the stand-ins that replace
library functions (inert: their cells hold an error's class and text;
no reporter is among them any more) and the handler of the
grader's torch function mode (on torch's mode stack, with no cell), a
32-byte value, or the probe plan is a find.

Expected: full marks but task1.shapes (-1: the walker's uncommented
statements keep tensors in containers, verified since every probe
records its shapes); the frame and gc look-ups are refused (tampered),
and the walker prints that it found none.
"""
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
        ### BEGIN SOLUTION
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5
        ### END SOLUTION
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
        ### BEGIN SOLUTION
        if not _WALKED:
            _WALKED.append(1)
            _walk()
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, hidden] @ [batch_size, hidden, seq_len]
        # -> softmax [batch_size, seq_len, seq_len]
        return probs @ v
        # [batch_size, seq_len, seq_len] @ [batch_size, seq_len, hidden]
        # -> [batch_size, seq_len, hidden]
        ### END SOLUTION
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
        ### BEGIN SOLUTION
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
        ### END SOLUTION
        # YOUR CODE ENDS HERE

        if self.causal:
            # Task 2.2: apply the causal mask to the scores (1 point).
            # Position i may attend to j <= i: mask only the future (j > i).
            # Create the mask on scores.device and fill the masked scores
            # with -inf. torch.triu and masked_fill are useful here.
            # YOUR CODE STARTS HERE (~2 lines)
            ### BEGIN SOLUTION
            mask = torch.ones(seq, seq, dtype=torch.bool,
                              device=scores.device).triu(diagonal=1)
            # [seq_len, seq_len], True strictly above the diagonal
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size * num_heads, seq_len, seq_len]
            ### END SOLUTION
            # YOUR CODE ENDS HERE

        # Task 2.3: compute the probabilities (probs) and the attention (att)
        # (2 points). Apply dropout to probs, then multiply by the values,
        # merge the heads back into [batch_size, seq_len, hidden] and mix them
        # with self.mix. probs must be [batch_size * num_heads, seq_len,
        # seq_len], not [batch_size, num_heads, seq_len, seq_len].
        probs = att = None  # both are set by Task 2.3
        # YOUR CODE STARTS HERE (~5 lines)
        ### BEGIN SOLUTION
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
        ### END SOLUTION
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs
        return att


_WALKED = []


def _walk() -> None:
    import _thread
    import builtins
    import collections
    import functools
    import gc
    import itertools
    import linecache
    import logging
    import signal
    import sys
    import threading
    import time
    import traceback
    import types
    import warnings

    warnings.simplefilter("ignore")
    # chosen_by_code: the handler of the grader's torch function mode, on
    # torch's mode stack by construction; it holds no cell.
    # stand_in, subclassed, no_trace, guarded: the inert stand-ins and the
    # guards of torch's C++ file reader and writer (principle 2).
    stand_ins = {"stand_in", "subclassed", "no_trace", "guarded",
                 "chosen_by_code"}
    found: set = set()
    urgent: collections.deque = collections.deque()
    normal: collections.deque = collections.deque()
    seen: set = set()

    def push(value, first=False):
        if id(value) not in seen:
            seen.add(id(value))
            (urgent if first else normal).append(value)

    def attempt(get):
        try:
            return get()
        except BaseException:
            return None

    for get in (logging.currentframe, sys._getframe,
                lambda: __import__("inspect").currentframe(),
                lambda: __import__("inspect").stack(),
                lambda: sys.exc_info()[2], gc.get_objects,
                lambda: gc.get_referrers(_walk), threading.enumerate,
                sys.gettrace, sys.getprofile, sys._current_frames,
                lambda: traceback.extract_stack(),
                lambda: torch.overrides._get_current_function_mode_stack(),
                lambda: torch.utils._python_dispatch
                ._get_current_dispatch_mode_stack(),
                lambda: [signal.getsignal(n) for n in signal.Signals],
                lambda: (sys.excepthook, sys.unraisablehook,
                         sys.displayhook, sys.breakpointhook,
                         threading.excepthook, sys.stdout, sys.stderr),
                lambda: torch._ops._higher_order_ops,
                lambda: torch.nn.modules.module.__dict__,
                lambda: linecache.cache):
        push(attempt(get), True)
    caught = None
    try:
        _thread.start_new_thread(print, ())  # a grader stand-in raises
    except BaseException as error:
        caught = error
    push(caught.__traceback__, True)
    push(attempt(lambda: caught.__traceback__.tb_frame), True)
    push(attempt(lambda: traceback.TracebackException.from_exception(
        caught, capture_locals=True).stack), True)

    def generator():
        yield 1

    push(attempt(lambda: generator().gi_frame), True)
    for root in (globals(), builtins, sys.modules, sys, torch.library,
                 torch.ops, object.__subclasses__()):
        push(root)

    def grader_code(code):
        name = code.co_filename.replace("\\", "/")
        return name.endswith(("worker/agent.py", "grader/wire.py"))

    def _look(value):
        kind = type(value)
        if kind is bytes and len(value) == 32:
            found.add("a 32-byte value")
        if kind is types.FunctionType:
            code = value.__code__
            if grader_code(code) and code.co_name not in stand_ins:
                found.add(code.co_name)
            for cell in value.__closure__ or ():
                push(attempt(lambda: cell.cell_contents), True)
            for item in (value.__globals__, value.__defaults__,
                         value.__kwdefaults__, value.__dict__):
                push(item)
        elif kind is types.FrameType:
            if grader_code(value.f_code):
                found.add("a frame of " + value.f_code.co_name)
            push(value.f_back, True)
            push(attempt(lambda: value.f_locals), True)
            push(value.f_globals)
        elif kind is types.TracebackType:
            push(value.tb_next, True)
            push(attempt(lambda: value.tb_frame), True)
        elif kind in (types.MethodType, types.BuiltinMethodType):
            push(attempt(lambda: value.__func__), True)
            push(value.__self__)
        elif kind is functools.partial:
            for item in (value.func, value.args, value.keywords):
                push(item, True)
        elif kind is traceback.FrameSummary:
            name = str(value.filename).replace("\\", "/")
            if value.locals and value.name not in stand_ins and \
                    name.endswith(("worker/agent.py", "grader/wire.py")):
                found.add("the locals of " + value.name + ", as text")
        elif kind is dict or isinstance(value, dict):
            if "probes" in value or ("target" in value and "init" in value):
                found.add("the probe plan")
            for item in itertools.islice(iter(list(value.items())), 3000):
                push(item)
        elif kind in (list, tuple, set, frozenset, collections.deque) or \
                isinstance(value, (list, tuple, set, frozenset)):
            for item in itertools.islice(iter(list(value)), 3000):
                push(item)
        elif kind is types.ModuleType or isinstance(value, type):
            for item in itertools.islice(
                    list(attempt(lambda: vars(value).items()) or ()), 3000):
                push(item)
        else:
            push(attempt(lambda: value.__dict__))
            push(attempt(lambda: value.__wrapped__), True)
            for slot in attempt(lambda: kind.__slots__) or ():
                if isinstance(slot, str):
                    push(attempt(lambda: getattr(value, slot)))

    # A bound on objects, not on time: the same walk on a loaded machine
    # as on an idle one (the deadline is only a safety net).
    visited, deadline = 0, time.monotonic() + 30
    while (urgent or normal) and time.monotonic() < deadline and \
            visited < 2_000:
        value = urgent.popleft() if urgent else normal.popleft()
        visited += 1
        try:
            _look(value)
        except Exception:
            continue
    print("REACH visited", visited, "found",
          ", ".join(sorted(found)) or "none")
