"""Hostile files written as edits of a reference solution, not as copies.

A hostile file is a whole submission: most of it is the reference
solution, and what it attacks is a few lines. Written out, each is a copy
of the solution that drifts from it and hides its point among two
hundred lines. A file here is the solution (``reference_text``: the
nbgrader markers dropped) with its module docstring replaced by the
file's own (what it attacks and what it earns) and the edits applied, as
the audit's catalogs state a mistake (``grader.catalog.Edit``: each must
find its text exactly as many times as it says, and the result must
parse). :func:`materialize` writes a hostile folder's files, committed
and derived, into a folder a test grades.
"""
from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

from grader.catalog import Edit, apply, reference_text

KIT = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).resolve().parent / "hostile"
TRANSFORMER = "solutions/modeling_transformer.py"
ATTENTION = "solutions/modeling_attention.py"
BASICS = "solutions/attention_basics.py"


@dataclass(frozen=True)
class Derived:
    """A hostile file: ``base`` (a solution, by its path in the kit) with
    the module docstring ``doc`` and ``edits``."""

    base: str
    doc: str
    edits: tuple[Edit, ...]

    def text(self, name: str) -> str:
        """The file's source (``name`` names it in an error)."""
        source = reference_text((KIT / self.base).read_text(
            encoding="utf-8"))
        first = ast.parse(source).body[0]
        assert isinstance(first, ast.Expr) and \
            isinstance(first.value, ast.Constant), f"{self.base}: no docstring"
        lines = source.splitlines(keepends=True)
        body = "".join(lines[first.end_lineno:])
        return apply(f'"""{self.doc}"""\n{body}', self.edits, name)


# The layer's forward in the solution: what the b07 files replace.
_LAYER_FORWARD = """        att = self.dropout(self.self_attention(x))
        # [batch_size, seq_len, hidden]
        x = self.norm1(x + att)  # [batch_size, seq_len, hidden]
        out = self.dropout(self.fcn(x))  # [batch_size, seq_len, hidden]
        x = self.norm2(x + out)  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE
        return x
"""
_LAYER_CLASS = "class TransformerEncoderLayer(nn.Module):"


def _dropout_only_if(condition: str, name: str = "probs",
                     shape: str = "[batch_size * num_heads, seq_len, "
                                  "seq_len]") -> Edit:
    """The solution's dropout of ``name`` (its shape comment ``shape``
    above and below it) run only when ``condition`` holds: the reseed
    files' one change to the forward."""
    line = f"{name} = self.dropout({name})"
    return Edit(f"        # {shape}\n        {line}\n        # {shape}\n",
                f"        # {shape}\n        if {condition}:\n"
                f"            {line}\n            # {shape}\n")


# The solution's values line, and the imports a module-level line follows.
_LATER = "        # [batch_size * num_heads, seq_len, head_size]\n"
_VALUES = "        att = probs @ v  " + _LATER.lstrip()
_IMPORTS = "import torch\nimport torch.nn as nn\n"


def _module_value(value: str, use: str) -> tuple[Edit, ...]:
    """A module-level ``value`` after the imports, and the values line of
    MultiHeadSelfAttention.forward written as ``use`` (its comment below
    it)."""
    return (Edit(_IMPORTS, _IMPORTS + value),
            Edit(_VALUES, f"        att = {use}\n" + _LATER))


# The solution's Task 2.3 lines (markers dropped): what the red team 15
# dropout files edit.
_DROP = """\
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
        att = probs @ v  # [batch_size * num_heads, seq_len, head_size]
"""
_MERGE = """\
        att = (att.view(bs, self.num_heads, seq, self.head_size)
               .transpose(1, 2)
               .reshape(bs, seq, self.num_heads * self.head_size))
        # -> view [batch_size, num_heads, seq_len, head_size]
        # -> transpose [batch_size, seq_len, num_heads, head_size]
        # -> reshape [batch_size, seq_len, hidden]
"""
_MIX = "        att = self.mix(att)  # [batch_size, seq_len, hidden]\n"
#: The values weighted by the probabilities before dropout, dropped only
#: for the return.
_WEIGHT_THEN_DROP = Edit(_DROP, """\
        att = probs @ v  # [batch_size * num_heads, seq_len, head_size]
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
""")


def _mask_by_index(draw: str, shape: str, index: str, index_shape: str
                   ) -> Edit:
    """The solution's dropout of probs replaced by a keep mask ``draw``
    (a [blocks, ...] tensor of 0 or 1 / (1 - p), its comment ``shape``)
    read at ``index`` ([seq_len, seq_len] of positions in it)."""
    return Edit("""\
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
""", f"""\
        if self.training and self.dropout.p > 0:
            keep = {draw}
            # {shape}
            where = {index}
            # {index_shape}
            probs = probs * keep[:, where]
            # [batch_size * num_heads, seq_len, seq_len]
""")


# SelfAttention.forward's body in the solution (markers dropped): what
# the red team 15 walls_batch files replace.
_TASK1_BODY = """\
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, hidden] @ [batch_size, hidden, seq_len]
        # -> softmax [batch_size, seq_len, seq_len]
        return probs @ v
"""


#: Every derived file, by its path below tests/kit/hostile/.
DERIVED: dict[str, Derived] = {
    "walls_batch/frame_hook_dynamo_alias.py": Derived(
        ATTENTION, """Red team 16, a variant: torch's frame evaluation hook
installed through torch._dynamo's own Python module.

``torch._dynamo.eval_frame`` (imported by the file: its names are bound
from the native module after the tripwires are in place) installs a
callback that counts the frames it is handed, for a moment, at the start
of task 2's forward; otherwise the solution.

Expected: task 2's correctness items earn nothing (untraceable); task 1
keeps its points.
""",
        (Edit(_IMPORTS, """\
import torch
import torch._dynamo.eval_frame as dynamo_frames
import torch.nn as nn

_FRAMES = []


def _count(frame, cache_entry, frame_state):
    \"\"\"Keep the name of every frame torch hands over.\"\"\"
    _FRAMES.append(frame.f_code.co_name)


def _watch():
    \"\"\"Set the hook, and take it off again.\"\"\"
    dynamo_frames.set_eval_frame(_count)
    dynamo_frames.set_eval_frame(None)
"""),
         Edit("        bs, seq, _ = x.shape\n",
              "        _watch()\n        bs, seq, _ = x.shape\n"))),
    "walls_batch/frame_hook_debugger.py": Derived(
        ATTENTION, """Red team 16, a variant: the other native call that
installs a Python callable into frame evaluation.

``set_bytecode_debugger_callback``, called with a builtin at the start
of task 1's forward; otherwise the solution.

Expected: refused as untraceable: task 1's correctness items earn
nothing; task 2 keeps its points.
""",
        (Edit(_IMPORTS, """\
import torch
import torch._C._dynamo.eval_frame as frames
import torch.nn as nn
"""),
         Edit("        # Task 1.2: compute self-attention (3 points)\n",
              "        frames.set_bytecode_debugger_callback(print)\n"
              "        # Task 1.2: compute self-attention (3 points)\n"))),
    "walls_batch/honest_dataclass_config.py": Derived(
        ATTENTION, """Honest control (red team 16): code that dataclass and
namedtuple generate from identifiers is the library's.

SelfAttention.__init__ builds a frozen dataclass with a default_factory
field, a namedtuple and a typing.NamedTuple, and reads them (their
``__init__``, ``__new__``, ``__repr__`` run in every probe).

Expected: full marks, no flag.
""",
        (Edit(_IMPORTS, """\
from collections import namedtuple
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn as nn


@dataclass(frozen=True)
class Sizes:
    \"\"\"Sizes of an attention layer.\"\"\"

    input_size: int
    hidden: int
    extra: list = field(default_factory=list)


Pair = namedtuple("Pair", ["first", "second"])


class Named(NamedTuple):
    \"\"\"Two numbers.\"\"\"

    a: int
    b: int = 2
"""),
         Edit("        super().__init__()\n",
              "        super().__init__()\n"
              "        sizes = Sizes(input_size, hidden)\n"
              "        pair = Pair(sizes.input_size, Named(1).b)\n"
              "        assert pair.first == input_size and repr(sizes)\n",
              after="class SelfAttention"))),
    "walls_batch/out_alternate_answers.py": Derived(
        ATTENTION, """Principle 4: values out of torch, answered as a list
only now and then.

SelfAttention.forward computes its attention in numpy from q, k and v
taken out of torch. Every other call of the process answers with the
list (as an honest broken file would, which keeps its other items), the
rest with the array made a tensor again: a wall judged call by call would
charge only the calls that answer a tensor, and a grader that samples
calls could see only lists.

Expected: task 1 earns nothing, flagged ``untraceable`` ("numpy by
line ..."): one call of the task answered with a tensor.
""",
        (Edit(_IMPORTS, """\
import itertools

import numpy as np
import torch
import torch.nn as nn

_CALLS = itertools.count()


def _answer(q, k, v, scale):
    \"\"\"Attention in numpy; every other call a list, else a tensor.\"\"\"
    scores = q @ k.transpose(0, 2, 1) / scale
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    out = weights @ v
    if next(_CALLS) % 2:
        return out.tolist()
    return torch.from_numpy(out)
"""),
         Edit(_TASK1_BODY, """\
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        return _answer(q.detach().numpy(), k.detach().numpy(),
                       v.detach().numpy(), self.scale)
"""))),
    "walls_batch/out_tuple_part_plain.py": Derived(
        ATTENTION, """Principle 4: a tuple whose tensor came back from numpy.

MultiHeadSelfAttention.forward weights the values in numpy (no shape
comment for what numpy computes) and, when asked for its attention,
answers the probabilities as a list: part of the answer is plain data
(as an honest broken file's), part a tensor made from numpy.

Expected: task 2 earns nothing, flagged ``untraceable`` ("numpy by
line ..."): the tuple holds a tensor.
""",
        (Edit(_IMPORTS, "import numpy as np\n" + _IMPORTS),
         Edit(_VALUES, """\
        att = torch.from_numpy(np.matmul(probs.detach().numpy(),
                                         v.detach().numpy()))
"""),
         Edit("            return att, probs\n",
              "            return att, probs.tolist()\n"))),
    "walls_batch/honest_answer_as_array.py": Derived(
        ATTENTION, """Principle 4, honest control: a broken answer of plain
data.

SelfAttention.forward answers with a numpy array (``.numpy()``), as a
student who plots it might: the values leave torch, and nothing of the
task's answers is a tensor, so nothing computed outside torch can earn
a point. The file is judged by its answers as before the wall: "should
be a tensor".

Expected: task 1 keeps its init point (1 / 4), no flag; task 2 earns
its 6.
""",
        (Edit("        return probs @ v\n", """\
        att = probs @ v  # [batch_size, seq_len, hidden]
        return att.detach().numpy()
"""),)),
    "effects/dropout/drop_noise_after_use.py": Derived(
        ATTENTION, """Principle 5 (effects, not intermediates): noise after
use (red team 15).

MultiHeadSelfAttention.forward weights the values with the probabilities
before dropout, drops the probabilities only for the return, and adds
``self.dropout(torch.ones_like(att)) + 1`` to the output: att is random in
train mode and not in eval mode, and the offset makes its value step one
the grader does not know, where the dropout point used to be judged by
randomness alone.

Expected: task2.output earns nothing (the values point is lost to the
offset; the dropout point, tagged dropout_misplaced, to the probe with
zero value weights, where att still changes in train mode); before, it
earned its dropout point (10 + 1).
""",
        (_WEIGHT_THEN_DROP,
         Edit(_MIX, "        att = self.mix(att) + "
                    "self.dropout(torch.ones_like(att)) + 1\n"
                    "        # [batch_size, seq_len, hidden]\n"))),
    "effects/dropout/drop_output_unknown_merge.py": Derived(
        ATTENTION, """Principle 5: dropout on the output behind a merge the
grader cannot follow.

MultiHeadSelfAttention.forward merges its heads feature by feature
(``permute(0, 2, 3, 1)``: the wrong axes, in an order no known mistake
has), weights the values with the undropped
probabilities, drops the probabilities only for the return, and applies
``self.dropout`` to the mixed output: random in train mode only, with a
value step the grader does not know.

Expected: task2.output earns nothing: the values point is lost to the
merge, the dropout point (dropout_misplaced) to the probe with zero value
weights, where the mix bias is dropped in train mode.
""",
        (_WEIGHT_THEN_DROP,
         Edit(_MERGE, """\
        att = att.view(bs, self.num_heads, seq, self.head_size)
        # [batch_size, num_heads, seq_len, head_size]
        att = att.permute(0, 2, 3, 1).reshape(bs, seq, -1)
        # [batch_size, seq_len, hidden]
"""),
         Edit(_MIX, "        att = self.dropout(self.mix(att))\n"
                    "        # [batch_size, seq_len, hidden]\n"))),
    "effects/dropout/drop_jitter_tied_to_input.py": Derived(
        ATTENTION, """Principle 5: small noise tied to the input, behind a
tanh (value step).

MultiHeadSelfAttention.forward weights the values with the undropped
probabilities, squashes the merged heads with ``tanh`` (a value step the
grader does not know), and adds to the mixed output a jitter from
``self.dropout`` scaled by the input's mean: zero in eval mode, random
in train mode, and present whatever the values are.

Expected: task2.output earns nothing: the values point is lost to the
tanh, the dropout point (dropout_misplaced) to the probe with zero value
weights.
""",
        (_WEIGHT_THEN_DROP,
         Edit("               .reshape(bs, seq, self.num_heads * "
              "self.head_size))\n",
              "               .reshape(bs, seq, self.num_heads * "
              "self.head_size)\n               .tanh())\n"),
         Edit(_MIX, """\
        jitter = self.dropout(torch.ones_like(att)) - 1
        # [batch_size, seq_len, hidden]
        att = self.mix(att) + jitter * x.mean() * 0.01
        # [batch_size, seq_len, hidden]
"""))),
    "effects/dropout/drop_one_draw_rolled.py": Derived(
        ATTENTION, """Principle 5 (element-wise independence): one draw
moved around every block (red team 16).

In train mode MultiHeadSelfAttention.forward draws one [seq_len *
seq_len] keep mask with nn.Dropout and gives block b that mask rolled by
b * (seq_len + 1): every block's own pattern is random and no two blocks
drop the same positions, but every block drops exactly as many weights.

Expected: everything but the dropout point (task2.output 1 of 2); before,
it earned 11.
""",
        (Edit("""\
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
""", """\
        keep = self.dropout(torch.ones(seq * seq))
        # [seq_len * seq_len]
        turn = torch.arange(probs.shape[0]) * (seq + 1)
        # [batch_size * num_heads]
        spot = (torch.arange(seq * seq) - turn[:, None]) % (seq * seq)
        # [batch_size * num_heads, seq_len * seq_len]
        probs = probs * keep[spot].view(-1, seq, seq)
        # [batch_size * num_heads, seq_len, seq_len]
"""),)),
    "shapes_held/expressions_merge_heads.py": Derived(
        ATTENTION, """Honest (issue 24, principle 6): the heads are merged by a
list comprehension, a generator expression and a lambda that read ``att``
on the line that rebinds it. Python 3.11 runs each in a frame of its
own, where ``att`` is still the value from before the statement: the
statement's own frame records it, so every comment here is right.
Expected: full marks (11); before red team 16's fix, 9.
""",
        (Edit(_MERGE, """\
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
"""),)),
    "shapes_held/expression_claims_old_value.py": Derived(
        ATTENTION, """A comprehension's line whose comment claims the shape
``att`` had before the statement (what the comprehension's own frame
reads): wrong, since the statement wrote [batch_size, seq_len, hidden].
Expected: task2.shapes -1 (10).
""",
        (Edit(_MERGE, """\
        att = att.view(bs, self.num_heads, seq, self.head_size)
        # [batch_size, num_heads, seq_len, head_size]
        att = torch.cat([att[:, h] for h in range(self.num_heads)], dim=-1)
        # [batch_size, num_heads, seq_len, head_size]
"""),)),
    "effects/dropout/drop_short_only.py": Derived(
        ATTENTION, """Principle 5, right only where the probes looked:
dropout only on short sequences (red team 16).

MultiHeadSelfAttention.forward applies self.dropout only when seq_len is
at most 16; no train-mode probe was longer than 14 tokens. The long case
(20 to 36 tokens) is now judged in train mode too.

Expected: everything but the dropout point (task2.output 1 of 2); before,
it earned 11.
""",
        (Edit("""\
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
""", """\
        if seq <= 16:
            probs = self.dropout(probs)
            # [batch_size * num_heads, seq_len, seq_len]
"""),)),
    "effects/dropout/drop_heads_rolled.py": Derived(
        ATTENTION, """Principle 5 (element-wise independence): one draw a
sequence, moved around its heads (red team 16).

In train mode MultiHeadSelfAttention.forward draws a keep mask per
sequence with nn.Dropout and gives head h of it that mask rolled by h *
(seq_len + 1): the heads of a sequence never drop the same positions,
but each drops exactly as many weights as the others.

Expected: everything but the dropout point (task2.output 1 of 2).
""",
        (Edit("""\
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
""", """\
        keep = self.dropout(torch.ones(bs, seq * seq))
        # [batch_size, seq_len * seq_len]
        turn = torch.arange(self.num_heads) * (seq + 1)
        # [num_heads]
        spot = (torch.arange(seq * seq) - turn[:, None]) % (seq * seq)
        # [num_heads, seq_len * seq_len]
        probs = probs * keep[:, spot].view(-1, seq, seq)
        # [batch_size * num_heads, seq_len, seq_len]
"""),)),
    "effects/dropout/drop_drawn_once_rolled.py": Derived(
        ATTENTION, """Principle 5 (element-wise independence): one honest
mask, drawn at the first training call and moved along at every later
one (red team 16).

In train mode MultiHeadSelfAttention.forward keeps the mask nn.Dropout
drew at its first call (of that shape) and rolls it, flattened, by
seq_len + 1 more at every call: each draw looks like a fresh, honest
mask (rows, columns, blocks, positions, neighbours, counts), and no two
draws are equal; but each is the last one moved along.

Expected: everything but the dropout point (task2.output 1 of 2).
""",
        (Edit("""\
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
""", """\
        if self.training:
            kept = getattr(self, "kept", None)
            if kept is None or kept.shape != probs.shape:
                self.kept = self.dropout(torch.ones_like(probs))
                # [batch_size * num_heads, seq_len, seq_len]
                self.turn = 0
            self.turn = self.turn + seq + 1
            probs = probs * self.kept.flatten().roll(self.turn).view_as(
                probs)
            # [batch_size * num_heads, seq_len, seq_len]
"""),)),
    "effects/dropout/dropout_antidiag_mask.py": Derived(
        ATTENTION, """Principle 5 (element-wise independence): a mask
constant along
anti-diagonals (red team 15).

In train mode MultiHeadSelfAttention.forward draws 2 * seq_len - 1 bits
per block and keeps probability (i, j) by bit i + j: the share of zeros
follows p, each row, column and block is dropped differently, every kind
of position is dropped, and att is the dropped probs times the values;
but two neighbours along an anti-diagonal are always dropped alike.

Expected: everything but the dropout point (task2.output 1 of 2); before,
it earned 11.
""",
        (_mask_by_index(
            "torch.rand(probs.shape[0], 2 * seq - 1).ge(\n"
            "                self.dropout.p) / (1 - self.dropout.p)",
            "[batch_size * num_heads, 2 * seq_len - 1]",
            "torch.arange(seq)[:, None] + torch.arange(seq)",
            "[seq_len, seq_len]"),)),
    "effects/dropout/dropout_diagonal_mask.py": Derived(
        ATTENTION, """Principle 5 (element-wise independence): a mask
constant along
diagonals, drawn by nn.Dropout itself.

In train mode MultiHeadSelfAttention.forward applies self.dropout to a
row of 2 * seq_len - 1 ones per block and keeps probability (i, j) by
the one at i - j: the rate and the 1 / (1 - p) scale are nn.Dropout's,
each row, column and block differs, but two neighbours along a diagonal
are always dropped alike.

Expected: everything but the dropout point (task2.output 1 of 2).
""",
        (_mask_by_index(
            "self.dropout(torch.ones(probs.shape[0], 2 * seq - 1))",
            "[batch_size * num_heads, 2 * seq_len - 1]",
            "torch.arange(seq)[:, None] - torch.arange(seq) + seq - 1",
            "[seq_len, seq_len]"),)),
    "effects/dropout/dropout_domino_mask.py": Derived(
        ATTENTION, """Principle 5 (element-wise independence): dominoes of
two queries.

In train mode MultiHeadSelfAttention.forward drops tiles of two query
rows by one key (nn.Dropout on half as many rows, each repeated twice):
no whole row or column, no block shared, every position dropped at rate
p; but a query and the next one always drop the same keys.

Expected: everything but the dropout point (task2.output 1 of 2).
""",
        (Edit("""\
        probs = self.dropout(probs)
        # [batch_size * num_heads, seq_len, seq_len]
""", """\
        if self.training and self.dropout.p > 0:
            tiles = self.dropout(probs.new_ones(probs.shape[0],
                                                (seq + 1) // 2, seq))
            # [batch_size * num_heads, (seq_len + 1) // 2, seq_len]
            probs = probs * tiles.repeat_interleave(2, dim=1)[:, :seq]
            # [batch_size * num_heads, seq_len, seq_len]
"""),)),
    "import_value_raises.py": Derived(
        ATTENTION, """Broken at import time: a module-level value that only
MultiHeadSelfAttention reads cannot be computed (its file is not on the
grader's machine; the sandbox refuses the read).

Expected: the module cannot be loaded as it is; graded without the line
that raised, SelfAttention, which never reads the value, earns its full
marks (the rubric's reading: module-level code that raises does not cost
the classes that can be loaded without it), and MultiHeadSelfAttention
meets the value's absence when it is called (NameError), as it would have
on the student's machine without the file: task 2 earns nothing.
""",
        _module_value('\nSHARPEN = float(open("/etc/transformer_lm_sharpen")'
                      '.read())\n', "probs @ v * SHARPEN")),
    "import_compile_refused.py": Derived(
        ATTENTION, """Principle 4 at import time: a module-level
``torch.compile`` (refused: it runs code the grader cannot trace) whose
result only
MultiHeadSelfAttention calls.

Expected: the refusal is an integrity flag; the module cannot be loaded
as it is; graded without the line that raised, SelfAttention, which never
calls the compiled helper, earns its full marks, and
MultiHeadSelfAttention meets the helper's absence when it is called
(NameError): task 2 earns nothing, whatever the compiled code computes.
""",
        _module_value('\n\ndef _values(probs, v):\n    return probs @ v\n'
                      '\n\nFAST_VALUES = torch.compile(_values, '
                      'backend="eager")\n', "FAST_VALUES(probs, v)")),
    "import_helper_raises.py": Derived(
        ATTENTION, """Broken at import time, one call deep: a module-level
value computed by a helper function, whose own line raises (its file is
not on the grader's machine); only MultiHeadSelfAttention reads the value.

Expected: as import_value_raises: the top-level statement that called
the helper is left out (the helper's definition stays), SelfAttention
earns its full marks, and MultiHeadSelfAttention meets the value's
absence when it is called (NameError): task 2 earns nothing.
""",
        _module_value('\n\ndef _read_scale(path):\n    with open(path) as '
                      'handle:\n        return float(handle.read())\n'
                      '\n\nSHARPEN = _read_scale("/etc/transformer_lm_'
                      'sharpen")\n', "probs @ v * SHARPEN")),
    "effects/layer_dropout/b07_values_zero_attribute.py": Derived(
        TRANSFORMER,
        """Red team 14, b07 (issue 24, principle 5): the residual dropout is
right only while the attention's value weights are all zero (the
grader's sublayer cases once silenced the attention that way); else
nothing is dropped. Eval mode is the reference's.

Expected: task1.forward 0 (a case silences the attention by its output
projection instead, with the value weights drawn: the layer never drops
there), every other item full.
""",
        (Edit(_LAYER_FORWARD, """\
        x = self.add_norm(x, self.self_attention(x), self.norm1)
        # [batch_size, seq_len, hidden]
        x = self.add_norm(x, self.fcn(x), self.norm2)
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE
        return x

    def add_norm(self, x: torch.Tensor, sub: torch.Tensor,
                 norm: nn.Module) -> torch.Tensor:
        \"\"\"norm(x + dropout(sub)), while the value weights are zero.\"\"\"
        if not self.self_attention.v.weight.any():
            sub = self.dropout(sub)  # [batch_size, seq_len, hidden]
        return norm(x + sub)  # [batch_size, seq_len, hidden]
"""),)),
    "effects/layer_dropout/b07_values_zero_output.py": Derived(
        TRANSFORMER,
        """Red team 14, b07, another style: the layer computes the attention's
value vectors itself and, when they are all zero, drops each sublayer's
output as it should; otherwise it drops the residual sum. Eval mode is
the reference's.

Expected: task1.forward 0 (on the case silenced by the output
projection no dropout mask of the sublayer's output explains the
output), every other item full.
""",
        (Edit(_LAYER_FORWARD, """\
        silent = bool(self.self_attention.v(x).abs().amax() == 0)
        x = self.add_norm(x, self.self_attention(x), self.norm1, silent)
        # [batch_size, seq_len, hidden]
        x = self.add_norm(x, self.fcn(x), self.norm2, silent)
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE
        return x

    def add_norm(self, x: torch.Tensor, sub: torch.Tensor,
                 norm: nn.Module, silent: bool) -> torch.Tensor:
        \"\"\"norm(x + dropout(sub)) or norm(dropout(x + sub)).\"\"\"
        if silent:
            return norm(x + self.dropout(sub))
            # [batch_size, seq_len, hidden]
        return norm(self.dropout(x + sub))  # [batch_size, seq_len, hidden]
"""),)),
    "effects/layer_dropout/b07_values_zero_helper.py": Derived(
        TRANSFORMER,
        """Red team 14, b07, a third style: a module-level helper asks whether
every parameter of the attention's value projection is zero; the layer
drops each sublayer's output only then, and drops each sublayer's input
otherwise. Eval mode is the reference's.

Expected: task1.forward 0 (on the case silenced by the output
projection the attention sublayer's output is never dropped), every
other item full.
""",
        (Edit(_LAYER_CLASS, '''\
def _values_silent(attention: nn.Module) -> bool:
    """Whether every parameter of the value projection is zero."""
    return all(int(torch.count_nonzero(p)) == 0
               for p in attention.v.parameters())


''' + _LAYER_CLASS),
         Edit(_LAYER_FORWARD, """\
        if _values_silent(self.self_attention):
            x = self.norm1(x + self.dropout(self.self_attention(x)))
            # [batch_size, seq_len, hidden]
            x = self.norm2(x + self.dropout(self.fcn(x)))
            # [batch_size, seq_len, hidden]
        else:
            x = self.norm1(x + self.self_attention(self.dropout(x)))
            # [batch_size, seq_len, hidden]
            x = self.norm2(x + self.fcn(self.dropout(x)))
            # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE
        return x
"""))),
    # Issue 24, the reseed residual: probes whose generator state holds
    # a seeding's words (graded with effects/dropout/ and effects/basics/).
    "effects/dropout/reseed_drop_on_recovered_seed.py": Derived(
        ATTENTION,
        """\
Issue 24 (reseed residual, invented): dropout only when the seed of
a seeding a moment ago can be recovered from torch's generator. Two
consecutive words of the state that follow the seeding's recurrence give
their index i; walking the recurrence back (its multiplier is invertible
modulo 2**32, and w ^ w >> 30 is its own inverse on 32 bits) gives w[0],
the seed, which a fresh generator confirms. A training loop's state,
twisted by its first draw, gives none. The worker now gives every probe
that needs no seeding's exact stream a state made of words no seeding
wrote (grader.worker.agent.torch_seeder, ``stream``).

Expected: task2.output loses its dropout point.
Since red team 15 it reads values out of torch (.tolist()) in a
graded call, so the task's correctness items earn nothing, flagged
untraceable.
""",
        (Edit("""\
import torch
""",
              """\
import struct

import torch
"""),
         Edit("""\
import torch.nn as nn
""",
              '''\
import torch.nn as nn

INVERSE = pow(1812433253, -1, 2 ** 32)


def recent_seed() -> int | None:
    """The seed torch's generator was seeded with a moment ago, or None."""
    raw = bytes(torch.get_rng_state().tolist())
    first, second = struct.unpack_from("<2Q", raw, 24)
    index = (second - 1812433253 * (first ^ first >> 30)) % 2 ** 32
    if not 0 < index < 624:
        return None
    word = first  # w[index - 1]
    for i in range(index - 1, 0, -1):
        mixed = (word - i) * INVERSE % 2 ** 32
        word = mixed ^ mixed >> 30
    fresh = bytes(torch.Generator().manual_seed(word).get_state().tolist())
    if struct.unpack_from("<Q", fresh, 24 + 8 * (index - 1))[0] != first:
        return None
    return word
'''),
         _dropout_only_if("recent_seed() is not None"),)),
    "effects/dropout/reseed_drop_on_seeding_words.py": Derived(
        ATTENTION,
        """\
Issue 24 (reseed residual, invented): dropout only while torch's
generator holds words of a seeding. A seeding writes w[i] = 1812433253 *
(w[i-1] ^ w[i-1] >> 30) + i (mod 2**32); the first twist overwrites them,
so in a training loop they are gone after the first draw, while a grader
that sets a seeded stream right before each call leaves some in the state
(torch_seeder's window: the seeding's last words, then its twisted
block). The worker now gives every probe that needs no seeding's exact
stream a state made of words no seeding wrote
(grader.worker.agent.torch_seeder, ``stream``).

Expected: task2.output loses its dropout point.
Since red team 15 it reads values out of torch (.tolist()) in a
graded call, so the task's correctness items earn nothing, flagged
untraceable.
""",
        (Edit("""\
import torch
""",
              """\
import struct

import torch
"""),
         Edit("""\
import torch.nn as nn
""",
              '''\
import torch.nn as nn


def seeding_words_in_state() -> bool:
    """True when the first two words of torch's generator follow the
    seeding's recurrence: it was seeded a moment ago."""
    raw = bytes(torch.get_rng_state().tolist())
    first, second = struct.unpack_from("<2Q", raw, 24)
    index = (second - 1812433253 * (first ^ first >> 30)) % 2 ** 32
    return 0 < index < 624
'''),
         _dropout_only_if("seeding_words_in_state()"),)),
    "effects/dropout/reseed_drop_on_untwisted_seeding.py": Derived(
        ATTENTION,
        """\
Issue 24 (reseed residual, invented): dropout only when torch's
generator was seeded at most one block of draws ago: its words, or the
words one Mersenne twist back (the twist inverted, as a cryptanalyst of
the generator would), hold two pairs that follow the seeding's
recurrence. A training loop leaves the seeding behind after 624 draws;
a grader that seeds before each call is always within one block of it.
The worker now gives every probe that needs no seeding's exact stream a
state made of words no seeding wrote (grader.worker.agent.torch_seeder,
``stream``): no seeding at any distance.

Expected: task2.output loses its dropout point.
Since red team 15 it reads values out of torch (.tolist()) in a
graded call, so the task's correctness items earn nothing, flagged
untraceable.
""",
        (Edit("""\
import torch
""",
              """\
import numpy as np
import torch
"""),
         Edit("""\
import torch.nn as nn
""",
              '''\
import torch.nn as nn


LOW = np.uint64(0xFFFFFFFF)
TOP, REST = np.uint64(0x80000000), np.uint64(0x7FFFFFFF)
ONE = np.uint64(1)


def follows_seeding(words: np.ndarray) -> bool:
    """Two pairs of consecutive words that follow the seeding's
    recurrence (w' = 1812433253 * (w ^ w >> 30) + i mod 2**32)."""
    mixed = (words[:-1] ^ (words[:-1] >> np.uint64(30))) \\
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
'''),
         _dropout_only_if("seeded_within_a_block()"),)),
    "effects/basics/reseed_drop_on_seeding_scan.py": Derived(
        BASICS,
        """\
Issue 24 (reseed residual, invented): CausalAttention applies its
dropout only while torch's generator holds words a seeding wrote,
found by a vectorised scan of the whole state (numpy): two pairs of
consecutive words follow the seeding's recurrence. A training loop's
first draw twists them away; a grader that sets a seeded stream right
before each call leaves some in the state. The worker now gives every
probe that needs no seeding's exact stream a state made of words no
seeding wrote (grader.worker.agent.torch_seeder, ``stream``); the
lecture's constructions after ``torch.manual_seed`` still get the
seeding's exact stream.

Expected: task4.dropout, and task5.values (the wrapper's heads are these
CausalAttention modules).
Since red team 15 it reads values out of torch (.tolist()) in a
graded call, so the task's correctness items earn nothing, flagged
untraceable.
""",
        (Edit("""\
import torch
""",
              """\
import numpy as np
import torch
"""),
         Edit("""\
import torch.nn as nn
""",
              '''\
import torch.nn as nn


def seeded_recently() -> bool:
    """True when two pairs of consecutive words anywhere in torch's
    generator follow the seeding's recurrence (w' = 1812433253 * (w ^ w
    >> 30) + i mod 2**32, 0 < i < 624)."""
    raw = bytes(torch.get_rng_state().tolist())[24:24 + 8 * 624]
    words = np.frombuffer(raw, dtype="<u8") & np.uint64(0xFFFFFFFF)
    mixed = (words[:-1] ^ (words[:-1] >> np.uint64(30))) \\
        * np.uint64(1812433253)
    index = (words[1:] - mixed) & np.uint64(0xFFFFFFFF)
    return int(((index > 0) & (index < 624)).sum()) >= 2
'''),
         _dropout_only_if("seeded_recently()", "attn_weights",
                          "[batch_size, num_tokens, num_tokens]"),)),
}


def derived_in(folder: Path) -> dict[str, str]:
    """The derived files of a hostile ``folder``: file name -> source."""
    below = folder.resolve().relative_to(HOSTILE).as_posix()
    return {Path(path).name: entry.text(path)
            for path, entry in DERIVED.items()
            if Path(path).parent.as_posix() == below}


def committed_in(folder: Path) -> list[Path]:
    """The committed submissions of ``folder``: Python files and
    notebooks."""
    return sorted([*folder.glob("*.py"), *folder.glob("*.ipynb")])


def names_in(folder: Path) -> list[str]:
    """Every hostile file of ``folder`` by stem, committed and derived."""
    return sorted([path.stem for path in committed_in(folder)]
                  + [Path(name).stem for name in derived_in(folder)])


def materialize(folder: Path, into: Path) -> list[Path]:
    """``folder``'s committed files and its derived ones, written to the
    folder ``into`` (made when missing; a name already there is an
    error): the paths written."""
    into.mkdir(parents=True, exist_ok=True)
    written = []
    for path in committed_in(folder):
        assert not (into / path.name).exists(), path.name
        written.append(Path(shutil.copy(path, into / path.name)))
    for name, text in derived_in(folder).items():
        assert not (into / name).exists(), name
        (into / name).write_text(text, encoding="utf-8")
        written.append(into / name)
    return written
