"""Dropout in train mode, by its effect (issue 24, principle 5; red team
10, R3).

``hostile/effects/layer_dropout/`` attacks ``transformer_block``: a
``TransformerEncoderLayer`` right in eval mode whose own dropout never
drops, or drops the wrong thing in train mode (task1.forward), and a
``TransformerLM`` whose layers do not get its dropout rate, at any depth
(task2.layers); red team 11: a layer that applies a rate of its own
(the train-mode rate is drawn from the seed) or one mask for every
sequence (task1.forward), a model that drops in eval mode with
``F.dropout`` (task2.logits, its eval-mode probe built with dropout) and
a loss that sums in train mode (task2.loss, its train-mode probe at
dropout 0). The folder is graded once, by one real ``batch``, and
every row is checked item by item, with the words of the judged item's
message; the controls (``nn.functional.dropout(out, self.dropout.p,
self.training)``; a layer that ignores its rate, charged once) keep what
they should. docs/threat-model.md ("Principle 5") gives the argument.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from derived import materialize, names_in
from grader.api import share_bounds
from grader.assignments.attention import mask_dependence
from grader.assignments.transformer_block import cases, dropout_effects
from grader.routes.rows import read_csv
from grader.wire import check_frame

KIT = Path(__file__).resolve().parents[2]
FOLDER = Path(__file__).resolve().parent / "hostile" / "effects" / \
    "layer_dropout"
ITEMS = ("task1.layers", "task1.forward", "task1.pep8", "task1.shapes",
         "task2.layers", "task2.logits", "task2.causal", "task2.loss",
         "task2.training", "task2.pep8", "task2.shapes")
FULL = (1, 3, 0, 0, 1, 2, 1, 1, 1, 0, 0)
NO_FORWARD = (1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0)
NO_LM_RATE = (1, 3, 0, 0, 0, 2, 1, 1, 1, 0, 0)
NO_LOGITS = (1, 3, 0, 0, 1, 0, 1, 1, 1, 0, 0)
NO_LOSS = (1, 3, 0, 0, 1, 2, 1, 0, 1, 0, 0)
NEVER = "never drops the"
NO_MASK = "for any dropout mask"
ZEROS = "exact zeros"
LM_RATE = "every dropout of the model has the rate given"
#: Each file: its item scores, the item whose message is read, and words
#: it must hold ("" for a full item: its message is not read).
TABLE = {
    "drop_f_training_false": (NO_FORWARD, "task1.forward",
                              NEVER + " attention sublayer's output"),
    "drop_sublayer_input": (NO_FORWARD, "task1.forward",
                            NEVER + " attention sublayer's output"),
    "drop_residual_sum": (NO_FORWARD, "task1.forward", NO_MASK),
    "drop_attention_only": (NO_FORWARD, "task1.forward",
                            NEVER + " feed-forward sublayer's output"),
    "drop_once_at_end": (NO_FORWARD, "task1.forward", ZEROS),
    "drop_rate_hardcoded": (NO_FORWARD, "task1.forward", NO_MASK),
    "lm_dropout_zero": (NO_LM_RATE, "task2.layers",
                        "layers[0] has dropout p=0, self_attention.dropout"
                        " p=0"),
    "lm_dropout_reset_deep": (NO_LM_RATE, "task2.layers",
                              "layers[0] has dropout p=0.2, "
                              "self_attention.dropout p=0;"),
    "lm_dropout_embeddings_only": (NO_LM_RATE, "task2.layers", LM_RATE),
    # Principle 2: past the describe's depth cap, nothing is passed.
    "lm_dropout_hidden_deep": (NO_LM_RATE, "task2.layers",
                               "could not read every dropout rate"),
    # Red team 10, R2: masks kept from the layer's first call (a
    # sublayer's seeds call one layer).
    "drop_mask_kept": (NO_FORWARD, "task1.forward",
                       "drops exactly the same entries of the attention "
                       "sublayer's output under two torch seeds"),
    # A causal mask kept from the layer's first call: the same layer
    # called again on a longer input (``forward:hidden-0-longer``).
    "mask_first_call": (NO_FORWARD, "task1.forward",
                        "on a longer input, the same layer called again"),
    # Red team 11, B01: the rate applied is 0.5 whatever the rate given
    # (the train-mode probes' rate is drawn from the seed); B07: one
    # [seq_len, hidden] mask shared by every sequence of the batch.
    "rt11_rate_hardcoded_half": (NO_FORWARD, "task1.forward", NO_MASK),
    "rt11_mask_shared_over_batch": (
        NO_FORWARD, "task1.forward",
        "blocks of the attention sublayer's output (two heads or two "
        "sequences) drop exactly the same entries"),
    # Red team 11, B02: the model's F.dropout (training=True by default)
    # drops in eval mode; B09: the loss sums in train mode only.
    "rt11_lm_f_dropout_in_eval": (
        NO_LOGITS, "task2.logits",
        "with the model built with dropout=0.2 and run in eval mode"),
    "rt11_loss_sum_in_train": (
        NO_LOSS, "task2.loss", "in train mode (model.train(), dropout=0)"),
    # Red team 14, b07: the residual dropout right only while the value
    # weights are zero (the sublayer cases also silence the attention by
    # its output projection): tested on the weights, on the value
    # vectors, by a module-level helper.
    "b07_values_zero_attribute": (NO_FORWARD, "task1.forward",
                                  NEVER + " attention sublayer's output"),
    "b07_values_zero_output": (NO_FORWARD, "task1.forward", NO_MASK),
    "b07_values_zero_helper": (NO_FORWARD, "task1.forward",
                               NEVER + " attention sublayer's output"),
    "honest_f_dropout": (FULL, "task1.forward", ""),
    # One mistake, one point: the rate is task1.layers' alone.
    "honest_rate_ignored": ((0, 3, 0, 0, 1, 2, 1, 1, 1, 0, 0),
                            "task1.layers", "got Dropout p=0.1"),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[dict[str, dict], Path]:
    """The folder graded by one batch: its rows by file, and where the
    reports are."""
    out = tmp_path_factory.mktemp("layer_dropout") / "rows.csv"
    folder = out.parent / "class"
    materialize(FOLDER, folder)
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env["PYTHONPATH"] = str(KIT)
    run = subprocess.run(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(out), "--jobs", "2", "--assignment", "transformer_block"],
        cwd=KIT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = {Path(row["student"]).stem: row for row in read_csv(out)}
    return rows, out.with_name(out.name + ".reports")


def test_the_table_lists_every_file() -> None:
    assert names_in(FOLDER) == sorted(TABLE)


def test_every_derived_file_builds_from_its_solution() -> None:
    """Each file of derived.DERIVED is its solution with its own
    docstring and edits: no committed file of that name shadows it, its
    folder exists, each edit finds its text (``apply`` raises otherwise),
    the result differs from the solution's body and is PEP-8 clean (the
    tables that grade them charge pep8 nothing)."""
    from derived import DERIVED, HOSTILE, derived_in
    from grader.catalog import reference_text

    assert sorted(derived_in(FOLDER)) == sorted(
        Path(path).name for path in DERIVED
        if Path(path).parent.name == FOLDER.name)
    for path, entry in DERIVED.items():
        assert not (HOSTILE / path).exists(), path
        assert (HOSTILE / path).parent.is_dir(), path
        solution = reference_text((KIT / entry.base).read_text(
            encoding="utf-8"))
        text = entry.text(path)
        assert solution.split('"""', 2)[2] not in text, path
        done = subprocess.run(
            [sys.executable, "-m", "flake8", "--config",
             str(KIT / "setup.cfg"), "-"], input=text, capture_output=True,
            text=True, cwd=KIT, timeout=120)
        assert done.returncode == 0, (path, done.stdout)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_dropout_in_train_mode_is_judged(graded, name: str) -> None:
    """Exact item scores, no flag, and the judged item's words."""
    scores, item_id, words = TABLE[name]
    rows, reports = graded
    row = rows[name]
    assert row["status"] == "graded", row
    assert {item: float(row[item]) for item in ITEMS} == dict(
        zip(ITEMS, map(float, scores))), row
    assert row["flags"] == "", row["flags"]
    report = json.loads((reports / f"{name}.py" / "report.json").read_text(
        encoding="utf-8"))
    item = next(i for i in report["items"] if i["id"] == item_id)
    assert item["diagnosis"] == [], item
    assert words in item["message"], item["message"]


def _describe_frame(**describe: object) -> dict:
    return {"type": "probe", "id": "init", "ok": True,
            "describe": {"type": "M", "is_module": True, **describe}}


@pytest.mark.parametrize("describe", [
    {"numbers": [1, 2]},
    {"numbers": {"a.b.c": {"is_linear": False, "p": 0.2}}},
    {"numbers": {"a.b.c": {"type": "Dropout", "is_linear": False,
                           "p": "0.2"}}},
    {"numbers": {f"m{i}": {"type": "Dropout", "is_linear": False}
                 for i in range(129)}},
    {"numbers": {}, "numbers_complete": "yes"},
])
def test_a_malformed_numbers_map_is_refused_at_the_boundary(
        describe: dict) -> None:
    """The describe's map of numbers at any depth is checked like its
    children: a forged one never reaches the plug-in."""
    assert check_frame(_describe_frame(**describe))


def test_a_numbers_map_passes_the_boundary() -> None:
    assert check_frame(_describe_frame(
        numbers={"layers.0.self_attention.dropout": {
            "type": "Dropout", "is_linear": False, "p": 0.2}},
        numbers_complete=False)) is None


def _solution_layer_class() -> type:
    spec = importlib.util.spec_from_file_location(
        "tbdrop_solution", KIT / "solutions" / "modeling_transformer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TransformerEncoderLayer


@pytest.mark.parametrize("seed", range(12))
def test_an_honest_dropout_is_read_back_exactly(seed: int) -> None:
    """The reference layer in train mode (nn.Dropout) on every
    train-dropout case: every row is read back, and the mask read
    rebuilds the output it was read from (norm of low + mask * (high -
    low)); its share of drops is within the bounds the check uses, and
    each sublayer's masks pass the independence tests (sequences as
    blocks, red team 11, B07)."""
    layer_class = _solution_layer_class()
    plan = cases.build(seed, False, ())
    kept_all = []
    by_kind: dict[str, list[torch.Tensor]] = {}
    judged_by_kind: dict[str, torch.Tensor] = {}
    for wire in plan.probes["task1"]:
        if not wire["id"].startswith("train-dropout:"):
            continue
        info = plan.info[("task1", wire["id"])]
        case, s = info.case, info.case.sizes
        rate = info.params["dropout"]
        assert rate == cases.train_dropout(seed)
        layer = layer_class(s["hidden"], s["num_heads"], s["fcn_hidden"],
                            dropout=rate, causal=True)
        layer.load_state_dict(case.weights)
        layer.train()
        torch.manual_seed(wire["seed"] % 2 ** 31)
        with torch.no_grad():
            out = layer(case.x)
        assert not (out == 0).any()
        _, w = case.float64()
        u = ((out.double() - w["norm2.bias"]) / w["norm2.weight"]).reshape(
            -1, s["hidden"])
        low, high = dropout_effects.candidates(case, info.params["kind"],
                                               rate)
        kept = torch.stack([dropout_effects.read_row(u[r], low[r], high[r])
                            for r in range(u.shape[0])])
        rebuilt = F.layer_norm(torch.where(kept, high, low),
                               (s["hidden"],))
        if info.params["kind"] == "fcn":
            rebuilt = rebuilt * w["norm2.weight"] + w["norm2.bias"]
        else:  # norm2 after the identity norm1
            rebuilt = F.layer_norm(rebuilt, (s["hidden"],),
                                   w["norm2.weight"], w["norm2.bias"])
        assert torch.allclose(rebuilt.float(), out.reshape(rebuilt.shape),
                              rtol=1e-4, atol=1e-5)
        kept_all.append(kept)
        shape = (s["batch_size"], s["seq_len"], s["hidden"])
        judged = ((high - low).abs() > 1e-4).reshape(shape)
        judged_by_kind[info.params["kind"]] = judged
        by_kind.setdefault(info.params["kind"], []).append(
            (~kept).reshape(shape))
    for kind, masks in by_kind.items():
        assert mask_dependence(judged_by_kind[kind], masks, rate,
                               dropout_effects.mask_words(kind, "")) is None
    kept = torch.cat([k.flatten() for k in kept_all])
    low_share, high_share = share_bounds(cases.train_dropout(seed),
                                         kept.numel())
    assert low_share <= 1 - kept.double().mean() <= high_share
