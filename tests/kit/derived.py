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

#: Every derived file, by its path below tests/kit/hostile/.
DERIVED: dict[str, Derived] = {
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
}


def derived_in(folder: Path) -> dict[str, str]:
    """The derived files of a hostile ``folder``: file name -> source."""
    below = folder.resolve().relative_to(HOSTILE).as_posix()
    return {Path(path).name: entry.text(path)
            for path, entry in DERIVED.items()
            if Path(path).parent.as_posix() == below}


def names_in(folder: Path) -> list[str]:
    """Every hostile file of ``folder`` by stem, committed and derived."""
    return sorted([path.stem for path in folder.glob("*.py")]
                  + [Path(name).stem for name in derived_in(folder)])


def materialize(folder: Path, into: Path) -> Path:
    """``folder``'s committed files and its derived ones, written to the
    new folder ``into`` (returned)."""
    into.mkdir(parents=True)
    for path in folder.glob("*.py"):
        shutil.copy(path, into / path.name)
    for name, text in derived_in(folder).items():
        (into / name).write_text(text, encoding="utf-8")
    return into
