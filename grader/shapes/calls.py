"""Shape comments, part 5: whose call a line ran in (trusted grader
process). :class:`CallInputs` gives the sizes of a declared call's own
input; :func:`for_caller` reads a helper's comment for one graded class.
Details: docs/shape-comments.md ("A method's comments describe its own
input", "A helper several classes call") and docs/internals.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from grader.shapes.grammar import DimensionTable, parse_shapes

if TYPE_CHECKING:
    from grader.shapes.statements import Statement

#: An execution's marker: the declared call's index and its input's shape
#: (None when the input was no tensor).
Marker = tuple[int, tuple[int, ...] | None]


@dataclass(frozen=True)
class CallInputs:
    """The declared inputs of a task's methods, by call index, and the
    rubric's identities (``(c, a, b)``: c = a * b)."""

    methods: tuple[tuple[str, tuple[str, ...]], ...] = ()
    identities: tuple[tuple[str, str, str], ...] = ()

    def bind(self, sizes: dict[str, int],
             marker: Marker | None) -> dict[str, int] | None:
        """The sizes of the call ``marker`` names: ``sizes`` with the
        declared names of its input bound from the input's real shape;
        None when it binds nothing (no marker, no tensor input, an input
        of another rank, a size below 1, a name bound to two sizes, or
        an identity the bound sizes break)."""
        if marker is None:
            return None
        index, shape = marker
        if shape is None or not 0 <= index < len(self.methods):
            return None
        names = self.methods[index][1]
        if len(shape) != len(names) or min(shape, default=1) < 1:
            return None
        bound = dict(sizes)
        seen: dict[str, int] = {}
        for name, size in zip(names, shape):
            if seen.setdefault(name, size) != size:
                return None
            bound[name] = size
        for c, a, b in self.identities:
            if all(k in bound for k in (c, a, b)) and \
                    bound[c] != bound[a] * bound[b]:
                return None
        return bound

    def describe(self, marker: Marker) -> str:
        """How a report names the call: "in the calls of loss on an input
        of shape [2, 4]"."""
        index, shape = marker
        method = self.methods[index][0]
        shown = ", ".join(str(size) for size in shape or ())
        return f"in the calls of {method} on an input of shape [{shown}]"


def for_caller(statements: list[Statement], target: str,
               table: DimensionTable) -> list[Statement]:
    """``statements`` as the task whose graded class (or function) is
    ``target`` reads their comments: a comment with lines that name
    ``target`` (as a whole word) and give a shape claims, in this task,
    what those lines claim (``# [b, t, t] in CausalAttention``); any
    other comment is read whole, as always. The claim is chosen by the
    task's name, never by what the line's tensors turned out to be."""
    name = re.compile(rf"(?<!\w){re.escape(target)}(?!\w)")
    read: list[Statement] = []
    for statement in statements:
        lines = (statement.comment or "").split("\n")
        named = [line for line in lines if name.search(line)
                 and parse_shapes(line, table)]
        if named and len(named) < len(lines):
            statement = replace(statement, comment="\n".join(named))
        read.append(statement)
    return read
