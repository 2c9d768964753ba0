"""The assignment "A transformer block and a causal language model".

Its plug-in (:class:`grader.plugin.Plugin`): the plan of probes
(``cases.build``), the grader's reference, the known mistakes and the
public test values (``transformer_lm/transformer_values.py``: the public
tests compare with stored outputs, never with a formula written with the
student's own modules; docs/threat-model.md, principle 10). It draws no
pictures. The rubric, the
checks and the stub are the files ``rubric.toml``, ``checks/`` and
``stub.py`` beside this one (docs/transformer_block.md).
"""
from __future__ import annotations

from grader.api import Plugin
from grader.assignments.transformer_block import cases, mistakes, reference


def public_values() -> dict[str, str]:
    """``transformer_lm/transformer_values.py``, made from the reference
    solution (``solutions/``, which only the kit's build has)."""
    from solutions.build import make_transformer_values

    return {"transformer_values.py": make_transformer_values()}


PLUGIN = Plugin(id="transformer_block", build_plan=cases.build,
                reference=reference, mistakes=mistakes,
                public_values=public_values,
                public_files=("transformer_values.py",),
                twin_input=cases.twin_input)
