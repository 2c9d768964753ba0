"""Shape comments: which statements need one, what they claim, and the truth.

The rubric asks for a shape comment on every statement in a student region of
``forward`` whose value is a tensor, and checks it by running the code. This
module gathers the trusted side's two parts (each a module of its own);
the third runs in the sandbox:

1. **Static analysis** (trusted grader process): :class:`DimensionTable`
   (the rubric's dimension names and aliases) and :func:`parse_shapes` (the
   bracketed shapes of a comment) in :mod:`grader.shapes.grammar`;
   :func:`collect_statements` in :mod:`grader.shapes.statements` (the
   statements of a method's student regions, what to watch after each one
   runs, and the comment that belongs to it). :meth:`Statement.to_plain` is
   the plan handed to the sandbox.
2. **Tracing** (untrusted sandbox worker): the agent's line tracer
   (:func:`grader.worker.agent.line_tracer`) runs ``forward`` under
   ``sys.settrace`` and records the shape of every watched value each time
   a planned statement completes; its records are plain data.
3. **Verification** (trusted grader process, :mod:`grader.shapes.verify`):
   :func:`verify` compares the
   claims with the records of every size set and returns :class:`Finding`
   records; :func:`format_findings` turns them into a report a student can
   act on.

The grammar and the attribution rules are documented for students in
``docs/shape-comments.md``.
"""
from __future__ import annotations

from grader.shapes.grammar import (MAX_COMMENT_SCAN, MAX_DIM_OPERATORS, BinOp,
                                   Dim, DimensionTable, Int, Name, ShapeClaim,
                                   ShapeEvalError, ShapeSyntaxError,
                                   ignored_brackets, parse_shapes)
from grader.shapes.statements import (RETURN_VALUE, Statement,
                                      collect_statements, function_statements,
                                      merge_records)
from grader.shapes.verify import (NOTE_KINDS, PENALISED_KINDS, Execution,
                                  Finding, RealShapes, Shape, ShapeRecordError,
                                  format_findings, observed_tensors, penalised,
                                  shape_fix, size_set_collisions, verify)

__all__ = [
    "BinOp", "Dim", "DimensionTable", "Execution", "Finding", "Int",
    "MAX_COMMENT_SCAN", "MAX_DIM_OPERATORS", "NOTE_KINDS", "Name",
    "PENALISED_KINDS", "RETURN_VALUE", "RealShapes", "Shape", "ShapeClaim",
    "ShapeEvalError", "ShapeRecordError", "ShapeSyntaxError", "Statement",
    "collect_statements", "format_findings", "function_statements",
    "ignored_brackets", "merge_records", "observed_tensors", "parse_shapes",
    "penalised", "shape_fix", "size_set_collisions", "verify",
]
