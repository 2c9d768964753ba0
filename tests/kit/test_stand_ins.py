"""The stand-ins are inert, and their calls are seen by their code alone.

docs/threat-model.md, principle 2 ("Stand-ins"): what a submission can
reach of the grader includes the functions that replace forbidden
kernels, refused calls and compilers. Each holds nothing but its error's
class and text, and the trace function reports its call by the identity
of its code object, so rewriting anything the stand-in holds cannot
silence the report. The graded side of the same wall is
``hostile/walls_batch/cells_*.py`` (tests/kit/test_walls_batch.py).

The checks install the tripwires for real, which replaces library
functions in every loaded module: they run in a child interpreter.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]

CHILD = r'''
import json
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

from grader.worker import agent

SDPA = "torch.nn.functional.scaled_dot_product_attention"
stand_ins, agent_codes = {}, set()
agent.install_tripwires(
    torch, stand_ins, agent_codes, {id(F.scaled_dot_product_attention): SDPA},
    [("torch.nn.MultiheadAttention", nn.MultiheadAttention)], None, (), [],
    [])
GRADER = str(agent.__file__).rsplit("/", 2)[0]

# Every stand-in the loaded modules hold, found by its code.
found = {}
for module in list(sys.modules.values()):
    namespace = getattr(module, "__dict__", None)
    if type(namespace) is not dict:
        continue
    values = list(namespace.values())
    values += [v for c in values if isinstance(c, type)
               for v in list(vars(c).values())]
    for value in values:
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        if type(value) is types.FunctionType and \
                id(value.__code__) in stand_ins:
            found[id(value.__code__)] = value


def held(function):
    """What the function's cells hold, transitively."""
    out, queue = [], [function]
    while queue:
        for cell in queue.pop().__closure__ or ():
            out.append(cell.cell_contents)
            if type(cell.cell_contents) is types.FunctionType:
                queue.append(cell.cell_contents)
    return out


bad = sorted({type(v).__name__ + ":" + getattr(v, "__name__", "")
              for f in found.values() for v in held(f)
              if not (type(v) is str or (isinstance(v, type) and
                                         issubclass(v, BaseException)))})
kinds = sorted({entry[1] for entry in stand_ins.values()})
every_code_own = len({id(e[0]) for e in stand_ins.values()}) == \
    len(stand_ins) and all(i in agent_codes for i in stand_ins)

# The trace function reports a call by the code alone: rewrite every cell
# of the stand-in first.
notes = []
phase = {"name": "use", "stage": "forward", "ran": set(), "held": [],
         "foreign": [], "foreign_left_out": 0, "records": None,
         "left_out": {}, "tracing": False, "returns": 0, "calls": 0,
         "silenced": False, "grader_off": False}


def classify(code):
    return "agent" if id(code) in agent_codes else "library"


tracer, _ = agent.shape_tracer(
    [], {}, phase, classify, {}, agent.value_readers(torch),
    lambda *event: notes.append(list(event)), None, None, stand_ins)
sdpa = F.scaled_dot_product_attention
for cell in sdpa.__closure__:
    cell.cell_contents = "rewritten"
raised = None
sys.settrace(tracer)
try:
    sdpa(torch.ones(1, 2, 2), torch.ones(1, 2, 2), torch.ones(1, 2, 2))
except BaseException as error:
    raised = type(error).__name__
finally:
    sys.settrace(None)
print(json.dumps({"count": len(found), "tabled": len(stand_ins),
                  "bad": bad, "kinds": kinds, "own": every_code_own,
                  "notes": notes, "raised": raised,
                  "grader_file": found and next(iter(found.values()))
                  .__code__.co_filename.startswith(GRADER)}))
'''


def test_stand_ins_are_inert_and_reported_by_their_code() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=KIT,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(KIT), "PATH": "/usr/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Hundreds of stand-ins are installed (kernels, refused calls, every
    # TorchScript binding), each with a code object of its own that the
    # grader counts as its own.
    assert seen["count"] > 200 and seen["tabled"] >= seen["count"]
    assert seen["own"] and seen["grader_file"]
    assert seen["kinds"] == ["forbidden", "refused", "untraceable"]
    # Nothing a stand-in holds is a function, a binding or a class other
    # than an exception: no reporter, no original.
    assert seen["bad"] == []
    # Its cells rewritten, the forbidden kernel's stand-in still raises
    # (a str is no exception) and its call is reported all the same.
    assert seen["raised"] == "TypeError"
    assert seen["notes"] == [
        ["forbidden", "use",
         "torch.nn.functional.scaled_dot_product_attention"]]
