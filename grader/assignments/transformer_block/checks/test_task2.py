"""Checks of Coding Task 2: TransformerLM.

Isolation (docs/transformer_block.md): every item of task 2 is judged on
models with two encoder layers when the student's TransformerEncoderLayer
earns task1.forward, and on models with no layer (embeddings and output
projection alone) otherwise, so a mistake in task 1 is not paid twice;
task2.layers is judged with two layers whenever the layer earns
task1.layers, and task2.causal whenever it keeps causal=True causal.
The loss item compares ``loss`` with the cross-entropy the grader computes
from the student's own logits on the same weights; the training item
computes the loss itself on fresh text: with its own reference model on
the weights training left when the student's forward passes task2.logits,
else from the logits the trained model returns. No number the submission
reports is taken as it is.
"""
import pytest
import torch

from grader.api import (Case, TaskRun, close, fail, max_error, require_ran,
                        tensor_of)
from grader.assignments.transformer_block import (dropout_effects,
                                                  mistakes, reference)
from grader.assignments.transformer_block.cases import INIT_2, TRAIN_BOUND
from grader.assignments.transformer_block.mistakes import check_parameters

LOGITS = "[batch_size, seq_len, vocab_size]"


@pytest.fixture
def depth(runs: dict[str, TaskRun]) -> str:
    """"d2" when the student's layer passes task1.forward, else "d0"."""
    return "d2" if mistakes.layer_passes(runs["task1"]) else "d0"


@pytest.fixture
def causal_depth(runs: dict[str, TaskRun], depth: str) -> str:
    """task2.causal's depth: also "d2" when the layer fails task1.forward
    but keeps ``causal=True`` causal (mistakes.layer_keeps_causal) and the
    model runs with two of them, so that a non-causal model is caught
    behind a wrong layer; "d0" otherwise."""
    task2 = runs["task2"]
    if depth == "d2" or not mistakes.layer_keeps_causal(runs["task1"]):
        return depth
    probes = task2.probe_ids("future:d2:") + task2.probe_ids("logits:d2:")
    return "d2" if probes and all(forward_ran(task2, probe_id)
                                  for probe_id in probes) else "d0"


@pytest.fixture
def layers_depth(runs: dict[str, TaskRun], depth: str) -> str:
    """task2.layers' depth: also "d2" when the layer fails task1.forward
    but earns task1.layers (its parameters are the contract's, so counting
    two of them charges nothing of task 1 again), so that a model that
    builds its layers wrong (one layer object listed twice) is caught
    behind a wrong layer; "d0" otherwise."""
    if depth == "d2" or not mistakes.layer_built_right(runs["task1"]):
        return depth
    return "d2"


def forward_ran(task2: TaskRun, probe_id: str) -> bool:
    """True when a forward probe returned logits of the contract shape."""
    result = task2.result(probe_id)
    value = result.value if result.ok else None
    s = task2.case(probe_id).sizes
    return (value is not None and value.kind == "tensor"
            and value.tensor is not None and tuple(value.shape) == (
                s["batch_size"], s["seq_len"], s["vocab_size"]))


def depth_words(depth: str) -> str:
    """How a message says which models were used."""
    return ("" if depth == "d2" else " (judged with num_layers=0, since "
            "TransformerEncoderLayer does not pass task1.forward)")


def logits_of(task2: TaskRun, probe_id: str) -> tuple[Case, torch.Tensor]:
    """A forward probe's logits, checked to be [bs, seq, vocab_size], and
    its case with the weights the model was given (tied ones as loaded)."""
    case = mistakes.loaded_case(task2, probe_id)
    s = case.sizes
    require_ran(task2, [probe_id], "TransformerLM.forward")
    return case, tensor_of(task2.result(probe_id).value,
                           "TransformerLM.forward's logits",
                           (s["batch_size"], s["seq_len"],
                            s["vocab_size"]), LOGITS, case)


@pytest.mark.item("task2.layers")
def test_layers_follow_the_contract(task2: TaskRun, layers_depth: str,
                                    runs: dict[str, TaskRun]) -> None:
    """token_embeddings, position_embeddings, layers, out_proj (with two
    layers whenever the student's layer earns task1.layers), and every
    dropout of the model built with a rate has it, at any depth."""
    depth = layers_depth
    if task2.import_error:
        fail(f"Not graded: {task2.import_error}")
    layers = 2 if depth == "d2" else 0
    for index, sizes in enumerate(INIT_2):
        built = (f"TransformerLM({sizes['vocab_size']}, {sizes['hidden']}, "
                 f"{sizes['num_heads']}, {sizes['fcn_hidden']}, {layers}, "
                 f"{sizes['max_seq_len']})")
        result = task2.result(f"init:{depth}:{index}")
        if not result.ok:
            fail(f"{built} could not be built: {result.problem}")
        check_parameters(built, result.describe or {}, reference.lm_shapes(
            sizes["vocab_size"], sizes["hidden"], sizes["fcn_hidden"],
            layers, sizes["max_seq_len"]))
    dropout_effects.check_model_rates(runs["task1"], task2)


@pytest.mark.item("task2.logits")
def test_logits_match_reference(task2: TaskRun, depth: str,
                                runs: dict[str, TaskRun]) -> None:
    """Embeddings + position embeddings, causal layers, out_proj."""
    probes = task2.probe_ids(f"logits:{depth}:")
    require_ran(task2, probes, "TransformerLM.forward")
    for probe_id in probes:
        case, student = logits_of(task2, probe_id)
        _, w = case.float64()
        s = case.sizes
        expected = reference.lm_logits(case.x, w, s["num_heads"],
                                       s["num_layers"])
        if not close(student, expected):
            fail(f"TransformerLM.forward's logits on {case.describe()} do "
                 f"not match the reference ({max_error(student, expected)})"
                 f"{depth_words(depth)}.",
                 *mistakes.lm_diagnoses(case, student))
    if depth == "d0":
        layers_reach_logits(task2, mistakes.layer_built_right(runs["task1"]))


def load_failed(task2: TaskRun, probe_id: str) -> bool:
    """True when a probe stopped before the model's code was called,
    on the worker's LookupError, which none of the submission's lines
    raised: the model, built, could not take the contract's weights (a
    name it lacks, or two names that are one parameter)."""
    result = task2.result(probe_id)
    error = result.error or {}
    return (not result.ok and result.stopped is None
            and error.get("type") == "LookupError" and "line" not in error
            and not any(ran[-1] == "call" for ran in result.ran))


def layers_reach_logits(task2: TaskRun, layer_built: bool) -> None:
    """Judged at depth 0 (the layer fails task 1), forward must still
    run its layers: with two of the student's own layers, redrawing the
    weights of either changes the logits. A depth-2 forward that raised
    (a layer that is a stub, or fails) is not judged here: its layers
    cannot be told from its other steps, and task 1 has paid for them
    (docs/rubric-decisions.md). But when the layer earns task1.layers
    (``layer_built``) and the two-layer model could not even take the
    contract's weights (one layer object listed twice, a ModuleList under
    another name), the model is at fault, not the layer: that fails."""
    for probe_id in task2.probe_ids("reach:d2:"):
        name, layer = probe_id.removeprefix("reach:d2:").rsplit(":", 1)
        base_id = f"logits:d2:{name}"
        if layer_built and load_failed(task2, base_id):
            fail(f"TransformerLM(..., num_layers=2, ...) could not take "
                 f"the contract's weights: "
                 f"{task2.result(base_id).problem}. Build self.layers as "
                 f"an nn.ModuleList of num_layers new "
                 f"TransformerEncoderLayer objects (not one layer "
                 f"repeated); your TransformerEncoderLayer earns "
                 f"task1.layers, so the model is at fault.")
        if not (forward_ran(task2, base_id) and forward_ran(task2, probe_id)):
            return
        case, base = logits_of(task2, base_id)
        _, changed = logits_of(task2, probe_id)
        if close(changed, base):
            fail(f"TransformerLM.forward's logits do not depend on "
                 f"layers[{layer}]: with num_layers=2 on "
                 f"{case.describe()}, new weights in that layer change "
                 f"nothing. Run every layer of self.layers on x, in order, "
                 f"between the embeddings and out_proj.")


@pytest.mark.item("task2.causal")
def test_logits_ignore_the_future(task2: TaskRun, depth: str,
                                  causal_depth: str) -> None:
    """Changing the tokens after i leaves the logits at 0..i unchanged,
    and changes the logits after i somewhere (the model reads its input).
    Judged with the student's layers whenever they keep causal=True
    causal, even if their values are wrong (``causal_depth``)."""
    words = depth_words(depth) if causal_depth == depth else (
        " (judged with two of your layers: they fail task1.forward, but "
        "built with causal=True they are causal)")
    depth = causal_depth
    probes = task2.probe_ids(f"future:{depth}:")
    require_ran(task2, probes + task2.probe_ids(f"logits:{depth}:"),
                "TransformerLM.forward")
    reads_input = False
    for probe_id in probes:
        name, position = probe_id.rsplit(":", 2)[1:]
        position = int(position)
        case, base = logits_of(task2, f"logits:{depth}:{name}")
        _, changed = logits_of(task2, probe_id)
        kept = slice(0, position + 1)
        if not close(changed[:, kept], base[:, kept]):
            fail(f"On {case.describe()}, changing the tokens after "
                 f"position {position} changes the logits at positions "
                 f"0..{position} "
                 f"({max_error(changed[:, kept], base[:, kept])})"
                 f"{words}.", "lm_not_causal")
        if not close(changed[:, position + 1:], base[:, position + 1:]):
            reads_input = True
    if not reads_input:
        fail("TransformerLM.forward's logits do not change when the tokens "
             "change: the model does not read its input.")


@pytest.mark.item("task2.loss")
def test_loss_is_next_token_cross_entropy(task2: TaskRun,
                                          depth: str) -> None:
    """loss(ids) = cross-entropy of the model's own logits at 0..n-2
    against the tokens at 1..n-1."""
    probes = task2.probe_ids(f"loss:{depth}:")
    require_ran(task2, probes, "TransformerLM.loss")
    for probe_id in probes:
        name = probe_id.rsplit(":", 1)[1]
        case, logits = logits_of(task2, f"logits:{depth}:{name}")
        value = tensor_of(task2.result(probe_id).value,
                          "TransformerLM.loss's value", (), "a scalar []",
                          case)
        own = logits.double()
        expected = reference.next_token_loss(own, case.x)
        if not close(value, expected):
            ids = (["loss_not_shifted"] if close(
                value, reference.next_token_loss(own, case.x, False))
                else [])
            fail(f"TransformerLM.loss on {case.describe()} is "
                 f"{float(value):.6g}; the next-token cross-entropy of "
                 f"the model's own logits is {float(expected):.6g}"
                 f"{depth_words(depth)}.", *ids)


def forward_matches(task2: TaskRun, depth: str) -> bool:
    """True when TransformerLM.forward gives the reference's logits on
    every logits probe at ``depth`` (what task2.logits judges)."""
    probes = task2.probe_ids(f"logits:{depth}:")
    for probe_id in probes:
        result = task2.result(probe_id)
        value = result.value if result.ok else None
        case = mistakes.loaded_case(task2, probe_id)
        s = case.sizes
        if value is None or value.kind != "tensor" or \
                value.tensor is None or tuple(value.shape) != (
                    s["batch_size"], s["seq_len"], s["vocab_size"]):
            return False
        _, w = case.float64()
        if not close(value.tensor, reference.lm_logits(
                case.x, w, s["num_heads"], s["num_layers"])):
            return False
    return bool(probes)


def trained_logits(task2: TaskRun, depth: str, case: Case
                   ) -> torch.Tensor:
    """The reference model's logits on the fresh text, with the weights
    training left (every parameter of the contract, by name and shape)."""
    state = task2.result(f"trained:{depth}").state or {}
    s = case.sizes
    weights = {}
    for name, shape in reference.lm_shapes(
            s["vocab_size"], s["hidden"], s["fcn_hidden"], s["num_layers"],
            s["max_seq_len"]).items():
        weights[name] = tensor_of(
            state.get(name), f"The trained parameter {name}", shape,
            "its shape in the contract", case).double()
    return reference.lm_logits(case.x, weights, s["num_heads"],
                               s["num_layers"])


@pytest.mark.item("task2.training")
def test_training_lowers_the_loss(task2: TaskRun, depth: str) -> None:
    """Adam steps on loss() move every parameter group (checked first, so
    the message names the groups the gradient never reached) and bring
    the loss on fresh text below the bound (at depth 1 on a corpus only a
    trained layer learns, cases.next_tokens); the grader computes that
    loss itself. When forward passes task2.logits
    it runs its own reference model on the weights training left (what an
    honest forward gives too), so nothing the object keeps besides its
    parameters can lower it; otherwise it uses the logits the trained
    model returns."""
    what = "TransformerLM trained with its loss"
    require_ran(task2, [f"before:{depth}", f"trained:{depth}"], what)
    case, before = logits_of(task2, f"before:{depth}")
    matches = forward_matches(task2, depth)
    if matches:
        after = trained_logits(task2, depth, case)
    else:
        _, after = logits_of(task2, f"trained:{depth}")
    start = float(reference.next_token_loss(before.double(), case.x))
    end = float(reference.next_token_loss(after.double(), case.x))
    loss = (f"the next-token loss on fresh text is {end:.3f} (it was "
            f"{start:.3f} before training)") + (
        "" if end < TRAIN_BOUND else f"; it should fall below "
                                     f"{TRAIN_BOUND:g}")
    unmoved = [group for group in unmoved_groups(task2, depth)
               if matches or group != POSITIONS]
    if unmoved:
        groups = " and ".join([", ".join(unmoved[:-1]), unmoved[-1]]
                              if len(unmoved) > 1 else unmoved)
        fail(f"{groups[0].upper()}{groups[1:]} never changed during "
             f"training with loss: the loss's gradient does not reach "
             f"them (is part of forward run under torch.no_grad(), "
             f"detached, or never called?); training must move every "
             f"parameter of the model{depth_words(depth)}. After "
             f"training, {loss}.")
    if not end < TRAIN_BOUND:
        fail(f"After training on the grader's corpus ({CORPUS[depth]}), "
             f"{loss}{depth_words(depth)}.")


#: What the training corpus at each depth is, in words (cases.corpus).
CORPUS = {"d2": "the next token follows from the current token and its "
                "position", "d0": "the next token follows from the "
                                  "current token"}


#: A parameter moved by training when some entry of it differs from its
#: initial value by more than this (an Adam step moves it by about lr).
MOVED = 1e-5


#: Not required when forward already fails task2.logits: forgetting the
#: position embeddings is that item's mistake (no_position_embeddings),
#: and a model without positions still trains (docs/rubric-decisions.md).
POSITIONS = "the position embeddings"


def group_words(name: str) -> str:
    """The parameter group ``name`` belongs to, in words."""
    parts = name.split(".")
    if parts[0] == "layers":
        return f"the parameters of layers[{parts[1]}]"
    return {"token_embeddings": "the token embeddings",
            "position_embeddings": POSITIONS,
            "out_proj": "the parameters of out_proj"}.get(
                parts[0], f"the parameters of {parts[0]}")


def unmoved_groups(task2: TaskRun, depth: str) -> list[str]:
    """The contract's parameter groups (token and position embeddings,
    each layer, out_proj) none of whose parameters training moved from
    its initial value (as loaded: a tied parameter starts from the value
    of the first of its names); groups the trained state does not hold
    are left to the other checks."""
    state = task2.result(f"trained:{depth}").state or {}
    moved: dict[str, bool] = {}
    loaded = mistakes.loaded_case(task2, f"trained:{depth}")
    for name, initial in loaded.weights.items():
        value = state.get(name)
        if value is None or value.kind != "tensor" or value.tensor is None \
                or tuple(value.shape) != tuple(initial.shape):
            continue
        group = group_words(name)
        diff = (value.tensor.double() - initial.double()).abs()
        moved[group] = moved.get(group, False) or not bool(
            (diff <= MOVED).all())
    return [group for group, did in moved.items() if not did]
