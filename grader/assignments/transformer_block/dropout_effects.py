"""Dropout in train mode, judged by its effect (docs/transformer_block.md,
"Dropout in train mode"; docs/threat-model.md, principle 5).

task1.forward: on the ``train-dropout:<kind>:<k>`` probes
(:func:`cases.sublayer_case`) one sublayer's dropout alone acts, so the
output is ``norm(low + mask * (high - low))`` for a 0/1 mask, where
``low`` is what the norm adds up without the sublayer and ``high`` with
it scaled by 1 / (1 - p): the grader reads the mask back from the output
row by row (a LayerNorm keeps a row up to a shift and a scale) and
requires a mask to exist, to drop a share of entries a correct dropout
drops, and to differ between the torch seeds. Each sublayer case comes
twice, the attention silenced by its value weights and by its output
projection (``cases.silenced_by_mix``), each a layer called under
``TRAIN_SEEDS`` seeds: every call's mask is read and judged together.
Masks differ across platforms: nothing here is a stored number.

task2.layers: every dropout rate of a model built with dropout
``LM_DROPOUT``, at any depth (the describe probe's ``numbers``), is the
one its layers report when the grader builds one with that rate, or
that rate outside the layers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from grader.api import (Case, TaskRun, close, fail, require_ran,
                        share_bounds, tensor_of)
from grader.assignments.attention import MaskWords, mask_dependence
from grader.assignments.transformer_block import reference
from grader.assignments.transformer_block.cases import (INIT_2, LM_DROPOUT,
                                                        SUBLAYER_WORDS)

CALL = "TransformerEncoderLayer.forward"
OUT = "[batch_size, seq_len, hidden]"
#: What each sublayer case drops, in words.
SUBLAYER = {"att": "the attention sublayer's output",
            "fcn": "the feed-forward sublayer's output"}
FORMULA = ("x = norm1(x + dropout(self_attention(x))), then "
           "x = norm2(x + dropout(fcn(x))), with self.dropout")


def candidates(case: Case, kind: str, p: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """What the last norm of a ``kind`` case normalises, per entry, when
    the sublayer's output is dropped (``low``) and when it is kept and
    scaled by 1 / (1 - p) (``high``), in float64, as [rows, hidden]."""
    x, w = case.float64()
    hidden = case.sizes["hidden"]
    if kind == "att":
        low = x
        sub = w["self_attention.mix.bias"].expand_as(x)
    else:
        low = F.layer_norm(x, (hidden,), w["norm1.weight"], w["norm1.bias"])
        sub = F.linear(torch.relu(F.linear(low, w["fcn.0.weight"],
                                           w["fcn.0.bias"])),
                       w["fcn.2.weight"], w["fcn.2.bias"])
    return (low.reshape(-1, hidden),
            (low + sub / (1 - p)).reshape(-1, hidden))


def read_row(u: torch.Tensor, low: torch.Tensor, high: torch.Tensor
             ) -> torch.Tensor | None:
    """The kept entries of one row (bool), or None when no mask fits:
    ``c + s * u`` (s > 0: a LayerNorm keeps the row up to a shift and a
    positive scale) must be, entry by entry, ``low`` or ``high``. The two
    entries farthest apart in ``u`` fix (c, s) for each of their four
    choices."""
    a, b = int(u.argmax()), int(u.argmin())
    if float(u[a] - u[b]) <= 1e-9:
        return None
    for va in (low[a], high[a]):
        for vb in (low[b], high[b]):
            s = (va - vb) / (u[a] - u[b])
            if s <= 0:
                continue
            guess = va + s * (u - u[a])
            to_low, to_high = (guess - low).abs(), (guess - high).abs()
            tol = 2e-4 * (1 + guess.abs() + s)
            if bool((torch.minimum(to_low, to_high) <= tol).all()):
                return to_high < to_low
    return None


def given_rate(task1: TaskRun, probe_id: str) -> float:
    """The rate a train-dropout probe built its layer with (drawn from
    the grading seed: ``cases.train_dropout``)."""
    return float(task1.result(probe_id).info.params["dropout"])


def own_rate(task1: TaskRun, probe_id: str) -> float:
    """The rate of the layer's own ``self.dropout`` in a train-dropout
    probe (its describe), or the rate given when it reports none: a layer
    that keeps another rate than the one given has lost task1.layers for
    it, and is judged here with the rate it has (one mistake, one
    point)."""
    describe = task1.result(probe_id).describe or {}
    child = (describe.get("children") or {}).get("dropout") or {}
    rate = child.get("p")
    return (float(rate) if isinstance(rate, (int, float))
            else given_rate(task1, probe_id))


def masks_of(task1: TaskRun, probe_id: str, rate: float) -> torch.Tensor:
    """A train-dropout probe's kept entries [rows, hidden], read back from
    its output (the layer's dropout at ``rate``); fails with the reason
    when it cannot be."""
    info = task1.result(probe_id).info
    case, kind = info.case, info.params["kind"]
    s = case.sizes
    out = tensor_of(task1.result(probe_id).value, f"{CALL}'s output",
                    (s["batch_size"], s["seq_len"], s["hidden"]), OUT, case)
    where = (f"in train mode, built with dropout="
             f"{given_rate(task1, probe_id):g}, on {case.describe()}")
    if not bool(torch.isfinite(out).all()):
        fail(f"{CALL}'s output {where} is not finite.")
    zeros = int((out == 0).sum())
    if zeros:
        fail(f"{CALL}'s output {where} has {zeros} exact zeros of "
             f"{out.numel()}: dropout acts after a LayerNorm (or on the "
             f"layer's output), where it zeroes what the norm returns. "
             f"Dropout goes on each sublayer's output, before the residual "
             f"sum: {FORMULA}.")
    x, w = case.float64()
    if close(out, reference.encoder_layer(x, w, s["num_heads"], True)):
        fail(f"{CALL} never drops {SUBLAYER[kind]} {where}: the output is "
             f"the eval-mode one. Apply self.dropout (an nn.Dropout, which "
             f"follows train()/eval()) to each sublayer's output: "
             f"{FORMULA}.")
    u = ((out.double() - w["norm2.bias"]) / w["norm2.weight"]).reshape(
        -1, s["hidden"])
    low, high = candidates(case, kind, rate)
    kept = []
    for row in range(u.shape[0]):
        found = read_row(u[row], low[row], high[row])
        if found is None:
            fail(f"{CALL}'s output {where} is not norm(x + dropout("
                 f"sublayer(x))) for any dropout mask (row {row} of the "
                 f"batch_size * seq_len rows): only {SUBLAYER[kind]} may be "
                 f"dropped there, each entry zeroed or scaled by 1 / (1 - p)"
                 f". Apply self.dropout to the sublayer's output, not to its "
                 f"input or to the residual sum: {FORMULA}.")
        kept.append(found)
    return torch.stack(kept)


def check_train_dropout(task1: TaskRun) -> None:
    """task1.forward in train mode: on each sublayer case, under both
    seeds, the output is the post-norm layer with that sublayer's output
    dropped by some mask; the masks drop a share of entries within the
    bounds of a correct dropout at p, differ between the seeds and, at
    the rate given, look element-wise independent with the sequences as
    blocks (``mask_dependence``: no mask shared by the batch, no whole
    positions or features dropped together, no kind of entry spared)."""
    probes = task1.probe_ids("train-dropout:")
    require_ran(task1, probes, CALL)
    for kind in SUBLAYER_WORDS:
        mine = [p for p in probes if p.startswith(f"train-dropout:{kind}:")]
        if not mine:
            continue
        rate = own_rate(task1, mine[0])
        if not 0 < rate < 1:
            continue  # no dropout to see: task1.layers judges the rate
        masks = [masks_of(task1, probe_id, rate) for probe_id in mine]
        case = task1.result(mine[0]).info.case
        kept = torch.stack(masks)
        count = kept.numel()
        dropped = count - int(kept.sum())
        low, high = share_bounds(rate, count)
        built = (f"in train mode, built with dropout="
                 f"{given_rate(task1, mine[0]):g}, on {case.describe()} "
                 f"under {len(masks)} seeds")
        if dropped == 0:
            fail(f"{CALL} never drops {SUBLAYER[kind]} {built}: the output "
                 f"is the eval-mode one. Apply self.dropout (an nn.Dropout, "
                 f"which follows train()/eval()) to each sublayer's output: "
                 f"{FORMULA}.")
        if not low <= dropped / count <= high:
            fail(f"{CALL} drops {dropped} of {count} entries of "
                 f"{SUBLAYER[kind]} {built} ({dropped / count:.0%}); a "
                 f"dropout at p={rate:g} drops between "
                 f"{low:.0%} and {high:.0%}. Use self.dropout, built with "
                 f"the rate given: {FORMULA}.")
        if any(torch.equal(masks[0], other) for other in masks[1:]):
            fail(f"{CALL} drops exactly the same entries of "
                 f"{SUBLAYER[kind]} under two torch seeds {built}: "
                 f"dropout must draw a new mask at every call. Use "
                 f"self.dropout: {FORMULA}.")
        if rate != given_rate(task1, mine[0]):
            continue  # the shared-block bound holds at the drawn rates
        problem = mask_dependence(*sequence_blocks(task1, kind, mine, masks,
                                                   rate),
                                  rate, mask_words(kind, built))
        if problem:
            fail(problem)


def mask_words(kind: str, built: str) -> MaskWords:
    """How the independence tests name the masks of a ``kind`` case."""
    return MaskWords(
        prefix=f"In {CALL} {built}:".replace("{", "{{").replace(
            "}", "}}"),
        blocks=f"[seq_len, hidden] blocks of {SUBLAYER[kind]}",
        of=f"of {SUBLAYER[kind]}", weights="entries",
        advice=(f"dropout must drop each entry on its own, in every "
                f"sequence anew: {FORMULA}"),
        lines=("positions (all their features)",
               "features (at all positions of a sequence)"))


def sequence_blocks(task1: TaskRun, kind: str, probe_ids: list[str],
                    masks: list[torch.Tensor], rate: float
                    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(judged, dropped) for the independence tests (red team 11, B07):
    each seed's dropped entries as [batch_size, seq_len, hidden] (the
    sequences are the blocks), judged where dropping the entry changes
    what the norm sees (``high`` and ``low`` apart: the sublayer's output
    is not 0 there, so the entry was read back)."""
    case = task1.result(probe_ids[0]).info.case
    s = case.sizes
    shape = (s["batch_size"], s["seq_len"], s["hidden"])
    low, high = candidates(case, kind, rate)
    judged = ((high - low).abs() > 1e-4).reshape(shape)
    return judged, [(~kept).reshape(shape) for kept in masks]


def rates(info: dict, what: str) -> dict[str, float]:
    """The dropout rates a describe reports at every depth, by dotted
    name; fails when the report is not complete or a rate is not a
    number (the plug-in's sandbox table names nn.Dropout's ``p`` alone)."""
    numbers = info.get("numbers")
    if not isinstance(numbers, dict) or info.get("numbers_complete") \
            is not True:
        fail(f"The grader could not read every dropout rate of {what} (it "
             f"nests more modules than the grader reads, or a module "
             f"inside itself): build the modules the docstring names.")
    found = {}
    for name, entry in numbers.items():
        rate = entry.get("p")
        if not isinstance(rate, (int, float)):
            fail(f"In {what}, the dropout module {name} has no numeric "
                 f"rate p.")
        found[name] = float(rate)
    return found


def layer_rates(task1: TaskRun) -> dict[str, float] | None:
    """The dropout rates of the student's layer built with dropout
    LM_DROPOUT (task 1's ``init-dropout`` probe), or None when it could
    not be built or read (task 1 pays for that; the model's layers are
    then not compared with it)."""
    layer = task1.result("init-dropout")
    info = layer.describe if layer.ok else None
    if not isinstance(info, dict) or info.get("numbers_complete") is not True:
        return None
    numbers = info.get("numbers")
    if not isinstance(numbers, dict):
        return None
    return {name: float(entry["p"]) for name, entry in numbers.items()
            if isinstance(entry.get("p"), (int, float))}


def check_model_rates(task1: TaskRun, task2: TaskRun) -> None:
    """task2.layers: TransformerLM built with dropout LM_DROPOUT and two
    layers: under ``layers.<i>.`` exactly the dropout modules and rates
    of the student's own layer built with that rate (``init-dropout``
    of task 1: whatever the layer does with its rate is task 1's), and
    every other dropout of the model at that rate."""
    sizes = INIT_2[0]
    built = (f"TransformerLM({sizes['vocab_size']}, {sizes['hidden']}, "
             f"{sizes['num_heads']}, {sizes['fcn_hidden']}, 2, "
             f"{sizes['max_seq_len']}, dropout={LM_DROPOUT:g})")
    result = task2.result("init-dropout:d2")
    if not result.ok:
        if not task1.result("init-dropout").ok:
            return  # the layer cannot be built: task 1 pays for it
        fail(f"{built} could not be built: {result.problem}")
    own = layer_rates(task1)
    if own is None and not (result.describe or {}).get("numbers_complete"):
        return  # the layer's own rates cannot be read: task 1's
    found = rates(result.describe or {}, built)
    wrong = []
    for index in range(2):
        prefix = f"layers.{index}."
        mine = {name.removeprefix(prefix): rate
                for name, rate in found.items() if name.startswith(prefix)}
        if own is not None and mine != own:
            wrong.append(f"layers[{index}] has {listed(mine)}")
    wrong += [f"{name} has p={rate:g}" for name, rate in found.items()
              if not name.startswith("layers.") and rate != LM_DROPOUT]
    if wrong:
        yours = ("" if own is None else
                 f" (your TransformerEncoderLayer built with dropout="
                 f"{LM_DROPOUT:g} has {listed(own)})")
        fail(f"In {built}, {'; '.join(wrong[:4])}{yours}: every dropout "
             f"of the model has the rate given. Build each layer as "
             f"TransformerEncoderLayer(hidden, num_heads, fcn_hidden, "
             f"dropout, causal=True).")


def listed(found: dict[str, float]) -> str:
    """Dropout modules and their rates, in words."""
    return ", ".join(f"{name} p={rate:g}" for name, rate in
                     found.items()) or "no nn.Dropout"
