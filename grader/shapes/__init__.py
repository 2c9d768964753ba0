"""Shape comments: which statements need one, what they claim, and the truth.

Details: docs/internals.md, `grader.shapes`.
"""
from __future__ import annotations

from grader.shapes.calls import CallInputs, for_caller
from grader.shapes.grammar import (MAX_COMMENT_SCAN, MAX_DIM_OPERATORS, BinOp,
                                   Dim, DimensionTable, Int, Name, ShapeClaim,
                                   ShapeEvalError, ShapeSyntaxError,
                                   ignored_brackets, parse_shapes)
from grader.shapes.everywhere import (GradedRun, known_sizes,
                                      verify_everywhere)
from grader.shapes.statements import (RETURN_VALUE, SPAN_KIND, Statement,
                                      collect_statements, function_statements,
                                      merge_records)
from grader.shapes.verify import (NOTE_KINDS, PENALISED_KINDS, Execution,
                                  Finding, RealShapes, Shape, ShapeRecordError,
                                  format_findings, observed_tensors, penalised,
                                  shape_fix, size_set_collisions, verify)

__all__ = [
    "BinOp", "CallInputs", "Dim", "DimensionTable", "Execution", "Finding",
    "GradedRun",
    "Int", "known_sizes",
    "MAX_COMMENT_SCAN", "MAX_DIM_OPERATORS", "NOTE_KINDS", "Name",
    "PENALISED_KINDS", "RETURN_VALUE", "RealShapes", "SPAN_KIND", "Shape",
    "ShapeClaim",
    "ShapeEvalError", "ShapeRecordError", "ShapeSyntaxError", "Statement",
    "collect_statements", "for_caller", "format_findings",
    "function_statements",
    "ignored_brackets", "merge_records", "observed_tensors", "parse_shapes",
    "penalised", "shape_fix", "size_set_collisions", "verify",
    "verify_everywhere",
]
