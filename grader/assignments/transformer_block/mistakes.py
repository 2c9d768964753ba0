"""Known mistakes of transformer_block, recognised by behaviour.

Each diagnosis compares what the submission returned with what the
reference computes when it makes the mistake (:mod:`.reference`'s
keyword variants), on the same case and weights, in the grader's own
process; a causality failure is ``lm_not_causal`` by definition. Nothing
here reads the submission's text.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from grader.api import Case, CheckFailed, TaskRun, close, fail
from grader.assignments.transformer_block import reference
from grader.assignments.transformer_block.cases import INIT_1

LAYER_CALL = "TransformerEncoderLayer.forward"


def missing_residual(case: Case, causal: bool,
                     student: torch.Tensor) -> bool:
    """Whether the output is the layer's with a residual left out."""
    x, w = case.float64()
    heads = case.sizes["num_heads"]
    return any(close(student, reference.encoder_layer(
        x, w, heads, causal, residual=pair))
        for pair in ((False, True), (True, False), (False, False)))


def layer_diagnoses(case: Case, causal: bool,
                    student: torch.Tensor) -> list[str]:
    """The diagnosis ids that explain a wrong layer output."""
    x, w = case.float64()
    heads = case.sizes["num_heads"]
    found = []
    if close(student, reference.encoder_layer(x, w, heads, causal,
                                              pre_norm=True)):
        found.append("pre_norm")
    if missing_residual(case, causal, student):
        found.append("missing_residual")
    return found


def layer_output(task1: TaskRun, probe_id: str) -> torch.Tensor | None:
    """A forward probe's output when it is a float tensor of the contract
    shape [batch_size, seq_len, hidden], else None."""
    result = task1.result(probe_id)
    value = result.value
    case = result.info.case
    if not result.ok or value is None or value.kind != "tensor" \
            or value.tensor is None or case is None:
        return None
    s = case.sizes
    if tuple(value.shape) != (s["batch_size"], s["seq_len"], s["hidden"]) \
            or not value.dtype.startswith(("float", "bfloat")):
        return None
    return value.tensor


def layer_passes(task1: TaskRun) -> bool:
    """Whether the student's TransformerEncoderLayer earns task1.forward:
    every forward probe returned the reference's output. Task 2 is judged
    with two encoder layers when it does, with none otherwise."""
    probes = task1.probe_ids("forward:")
    if task1.import_error or not probes:
        return False
    for probe_id in probes:
        student = layer_output(task1, probe_id)
        if student is None:
            return False
        info = task1.result(probe_id).info
        x, w = info.case.float64()
        if not close(student, reference.encoder_layer(
                x, w, info.case.sizes["num_heads"], info.params["causal"])):
            return False
    return True


def layer_keeps_causal(task1: TaskRun) -> bool:
    """Whether the student's layer built with ``causal=True`` is causal,
    whatever its values: on every ``layer-future`` probe the output at
    0..i equals the output on the unchanged input, and the output after i
    changes on some probe (the layer reads its input). task2.causal is
    then judged with the student's layers even when they fail
    task1.forward (docs/transformer_block.md, "Isolation")."""
    probes = task1.probe_ids("layer-future:")
    if task1.import_error or not probes:
        return False
    reads_input = False
    for probe_id in probes:
        name, position = probe_id.split(":")[1:]
        position = int(position)
        base = layer_output(task1, f"forward:{name}:causal=True")
        changed = layer_output(task1, probe_id)
        if base is None or changed is None:
            return False
        if not close(changed[:, :position + 1], base[:, :position + 1]):
            return False
        reads_input = reads_input or not close(changed[:, position + 1:],
                                               base[:, position + 1:])
    return reads_input


def lm_diagnoses(case: Case, student: torch.Tensor) -> list[str]:
    """The diagnosis ids that explain wrong logits (each mistake alone,
    or both together)."""
    _, w = case.float64()
    s = case.sizes

    def matches(**mistakes: bool) -> bool:
        return close(student, reference.lm_logits(
            case.x, w, s["num_heads"], s["num_layers"], **mistakes))

    if matches(positions=False):
        return ["no_position_embeddings"]
    if not s["num_layers"]:
        return []
    if matches(causal=False):
        return ["lm_not_causal"]
    if matches(positions=False, causal=False):
        return ["no_position_embeddings", "lm_not_causal"]
    return []


def tied(name: str, other: str) -> bool:
    """Whether the contract lets ``name`` and ``other`` be one parameter
    (:data:`reference.TIED`)."""
    return any(name in group and other in group
               for group in reference.TIED)


def loaded_case(task: TaskRun, probe_id: str) -> Case:
    """The trusted case of a probe with the values its model was given:
    a tied parameter holds the value of the last of its names, so each
    earlier name (``ProbeResult.aliases``) is judged with that value."""
    case = task.case(probe_id)
    aliases = {name: holder for name, holder in
               task.result(probe_id).aliases.items()
               if name in case.weights and holder in case.weights
               and tied(name, holder)}
    if not aliases:
        return case
    weights = dict(case.weights)
    for name, holder in aliases.items():
        weights[name] = weights[holder]
    return replace(case, weights=weights)


def check_parameters(what: str, info: dict, expected: dict) -> None:
    """The described object's parameters are exactly ``expected``; a
    name that is another's parameter (tied) counts only where the
    contract allows it (:data:`reference.TIED`)."""
    if not info.get("is_module"):
        fail(f"{what} is not an nn.Module: call super().__init__() first "
             f"in __init__.")
    found = {name: tuple(shape) for name, shape in
             (info.get("parameters") or {}).items()}
    for name, first in (info.get("aliases") or {}).items():
        if first in found and name in expected:
            if not tied(name, first):
                fail(f"In {what}, {name} is the same parameter as {first} "
                     f"(tied weights): the contract has them as separate "
                     f"parameters.")
            found[name] = found[first]
    missing = [name for name in expected if name not in found]
    if missing:
        fail(f"{what} has no parameter {', '.join(missing[:4])}: name the "
             f"modules as the docstring says (state_dict names).")
    extra = [name for name in found if name not in expected]
    if extra:
        fail(f"{what} has parameters the contract does not have: "
             f"{', '.join(extra[:4])}.")
    for name, shape in expected.items():
        if found[name] != tuple(shape):
            fail(f"In {what}, {name} has shape {list(found[name])}; "
                 f"expected {list(shape)}.")


def check_layers(task1: TaskRun) -> None:
    """task1.layers: the layer built at each of ``INIT_1``'s sizes has
    the contract's parameters and its dropout module the given rate
    (fails the check otherwise)."""
    if task1.import_error:
        fail(f"Not graded: {task1.import_error}")
    for index, sizes in enumerate(INIT_1):
        built = (f"TransformerEncoderLayer({sizes['hidden']}, "
                 f"{sizes['num_heads']}, {sizes['fcn_hidden']}, "
                 f"dropout={sizes['dropout']})")
        result = task1.result(f"init:{index}")
        if not result.ok:
            fail(f"{built} could not be built: {result.problem}")
        info = result.describe or {}
        check_parameters(built, info, reference.layer_shapes(
            sizes["hidden"], sizes["fcn_hidden"]))
        dropout = (info.get("children") or {}).get("dropout") or {}
        if dropout.get("p") != sizes["dropout"]:
            fail(f"In {built}, self.dropout should be "
                 f"nn.Dropout({sizes['dropout']}); got "
                 f"{dropout.get('type', 'nothing')}"
                 f"{'' if 'p' not in dropout else ' p=%g' % dropout['p']}"
                 f".")
        check_attention_dropout(built, info, sizes["dropout"])


def check_attention_dropout(built: str, info: dict, rate: float) -> None:
    """self_attention is built with the layer's dropout rate: when it has
    nn.Dropout modules of its own (the given attention's self.dropout,
    read from the describe probe's ``numbers`` at depth 2), one of them
    has ``rate``. An attention of the student's own without an nn.Dropout
    module is not judged here."""
    rates = [child["p"] for name, child in
             (info.get("numbers") or {}).items()
             if name.startswith("self_attention.") and name.count(".") == 1
             and isinstance(child, dict) and "p" in child]
    if rates and rate not in rates:
        fail(f"In {built}, self_attention's dropout has rate "
             f"{', '.join('%g' % r for r in rates)}; it should be "
             f"{rate:g}: build MultiHeadSelfAttention(hidden, hidden, "
             f"num_heads, causal=causal, dropout=dropout).")


def layer_built_right(task1: TaskRun) -> bool:
    """Whether the student's TransformerEncoderLayer earns task1.layers:
    task2.layers is then judged with two of them (its parameters can be
    counted without charging task 1 again; docs/transformer_block.md,
    "Isolation")."""
    try:
        check_layers(task1)
    except CheckFailed:
        return False
    return True
