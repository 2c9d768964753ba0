"""The assignment "Attention from scratch" (the warm-up homework).

Its plug-in (:class:`grader.plugin.Plugin`): the plan of probes
(``cases.build``), the grader's reference, the known mistakes and the
attention-weight figures. Its public tests compute their values from the
reference solution, so it ships no test-values module. The rubric, the
checks and the stub are the files ``rubric.toml``, ``checks/`` and
``stub.py`` beside this one.
"""
from __future__ import annotations

from grader.api import Plugin
from grader.assignments.attention_basics import (cases, figures, mistakes,
                                                 reference)

PLUGIN = Plugin(id="attention_basics", build_plan=cases.build,
                reference=reference, mistakes=mistakes,
                figures=figures.figures, twin_input=cases.twin_input)
