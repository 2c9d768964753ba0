"""The assignment "Self-attention and multi-head self-attention".

Its plug-in (:class:`grader.plugin.Plugin`): the plan of probes
(``cases.build``), the grader's reference, the known mistakes, the
attention-map figures and the public test values
(``transformer_lm/test_values.py``). The rubric, the checks and the stub
are the files ``rubric.toml``, ``checks/`` and ``stub.py`` beside this one.
"""
from __future__ import annotations

from grader.api import Plugin
from grader.assignments.multi_head_attention import (cases, figures, mistakes,
                                                     reference)


def public_values() -> dict[str, str]:
    """``transformer_lm/test_values.py``, made from the reference solution
    (``solutions/``, which only the kit's build has)."""
    from solutions.build import make_test_values

    return {"test_values.py": make_test_values()}


PLUGIN = Plugin(id="multi_head_attention", build_plan=cases.build,
                reference=reference, mistakes=mistakes,
                figures=figures.figures, public_values=public_values,
                public_files=("test_values.py",),
                twin_input=cases.twin_input)
