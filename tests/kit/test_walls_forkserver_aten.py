"""The forbidden operators' tripwires, registered once by the fork server.

The fork server registers the tripwires of every forbidden ATen operator
before it forks a worker (``agent.preinstall_aten``); each worker adopts
that registration when its job forbids the same operators, or removes it
and registers its job's own (docs/threat-model.md, principle 3,
"Registered once, in the fork server"). One child interpreter plays the
server and forks one worker per case, as the fork server does; each
worker reads torch's own dispatch table and calls a forbidden operator
under a trace function, as the agent's would see it. The end-to-end
proof (hostile files that reach the operators, graded through the real
fork server) is ``test_walls_batch.py`` and ``test_hostile.py``.
"""
from __future__ import annotations

from forked import run_child

SERVER = r'''
import json
import os
import sys
import weakref

import torch
import torch.library

from forked import in_fork
from grader.worker import agent

PATTERN = ("attention|multi_head|transformer_encoder|_fused_sdp|"
           "_transform_bias_rescale_qkv")
OTHER = "multi_head"


def active(pattern):
    """Each (overload, key) of the operators ``pattern`` matches, with
    whether its active kernel is the grader's tripwire."""
    found = {}
    for name, _ in agent.aten_kernels(pattern):
        for line in torch._C._dispatch_dump("aten::" + name).splitlines():
            key, _, where = line.partition(": registered at ")
            if where and key != "debug" and not key.endswith("(inactive)"):
                found[name + " " + key] = where.startswith(
                    agent.ATEN_TRIPWIRE)
    return found


def worker(pattern):
    """What a worker whose job forbids ``pattern`` ends with."""
    before = set(id(f) for f in weakref.finalize._registry)
    impls = set(torch.library._impls)
    server_codes = set(agent._ATEN_READY.get("codes", ()))
    stand_ins, agent_codes, holder = {}, set(), []
    agent.install_tripwires(torch, stand_ins, agent_codes, {}, [], pattern,
                            (), [], holder)
    seen = []

    def tracer(frame, event, arg):
        entry = stand_ins.get(id(frame.f_code))
        if event == "call" and entry is not None and \
                entry[0] is frame.f_code:
            seen.append(list(entry[1:]))
        return None

    q = torch.randn(1, 2, 3, 4)
    sys.settrace(tracer)
    try:
        torch.ops.aten.scaled_dot_product_attention(q, q, q)
        error = None
    except RuntimeError as exc:
        error = str(exc)
    finally:
        sys.settrace(None)
    mine = active(PATTERN)
    handles = [item for f, info in weakref.finalize._registry.items()
               if id(f) not in before for item in info.args
               if type(item) is torch._C._DispatchModule]
    return {
        "tripped": sorted(k for k, on in mine.items() if on),
        "untripped": sorted(k for k, on in mine.items() if not on),
        "seen": seen, "error": error,
        "server handle held": bool(holder) and
        holder[0] is SERVER_HANDLE,
        "held": [type(h).__name__ for h in holder],
        "server codes entered": bool(server_codes) and
        server_codes <= set(stand_ins) and server_codes <= agent_codes,
        "left in the module": len(agent._ATEN_READY),
        "new finalizers": len(handles),
        "impls changed": torch.library._impls != impls}


agent.preinstall_aten(PATTERN)
agent.index_aliases(agent.KIT_PACKAGES)  # as the server does
SERVER_HANDLE = agent._ATEN_READY["handle"]
results = {"server": active(PATTERN)}
for case, pattern in (("same", PATTERN), ("other", OTHER), ("none", None)):
    results[case] = in_fork(lambda: worker(pattern))
results["server after"] = active(PATTERN)
print(json.dumps(results))
'''

SDPA = "torch.ops.aten.scaled_dot_product_attention"


def test_a_worker_adopts_or_removes_the_servers_tripwires() -> None:
    """The same rules: every key of every forbidden operator holds the
    tripwire (the server's registration, now in the worker's holder
    alone), a call of the operator is refused and seen by the trace
    function as a forbidden use, nothing the submission can reach holds
    the handle. Other rules: only the job's operators are tripped (the
    server's registration is gone from that worker); no rules: none.
    The server itself is untouched by what its workers did."""
    seen = run_child(SERVER)
    server = seen["server"]
    assert server and all(server.values())
    assert seen["server after"] == server

    same = seen["same"]
    assert same["untripped"] == []
    assert same["tripped"] == sorted(server)
    assert "_native_multi_head_attention NestedTensorCPU" in same["tripped"]
    assert same["seen"] == [["forbidden", "use", SDPA]]
    assert same["error"] and "not allowed in this homework" in same["error"]
    assert same["server handle held"] is True
    assert same["server codes entered"] is True
    assert same["left in the module"] == 0
    assert same["new finalizers"] == 0 and same["impls changed"] is False

    other = seen["other"]
    assert other["held"] == ["_DispatchModule"]
    assert other["server handle held"] is False
    assert other["left in the module"] == 0
    assert other["new finalizers"] == 0 and other["impls changed"] is False
    assert other["seen"] == [] and other["error"] is None
    assert any(key.startswith("_native_multi_head_attention ")
               for key in other["tripped"])
    assert not any(key.startswith(("scaled_dot_product_attention ",
                                   "_fused_sdp_choice "))
                   for key in other["tripped"])
    assert any(key.startswith("scaled_dot_product_attention ")
               for key in other["untripped"])

    none = seen["none"]
    assert none["tripped"] == [] and none["held"] == []
    assert none["seen"] == [] and none["error"] is None
    assert none["left in the module"] == 0
