"""The assignment "A transformer block and a causal language model".

Its plug-in (:class:`grader.plugin.Plugin`): the plan of probes
(``cases.build``), the grader's reference and the known mistakes. Its
public tests compute their values from the reference solution, so it
ships no test-values module, and it draws no pictures. The rubric, the
checks and the stub are the files ``rubric.toml``, ``checks/`` and
``stub.py`` beside this one (docs/transformer_block.md).
"""
from __future__ import annotations

from grader.api import Plugin
from grader.assignments.transformer_block import cases, mistakes, reference

PLUGIN = Plugin(id="transformer_block", build_plan=cases.build,
                reference=reference, mistakes=mistakes,
                twin_input=cases.twin_input)
