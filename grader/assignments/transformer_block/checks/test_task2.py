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


def logits_ids(task2: TaskRun, depth: str) -> list[str]:
    """The forward probes of the model at ``depth`` that task2.logits
    judges: ``logits:`` and, last, the eval-mode model built with
    dropout (``logits-eval:``, a family of its own so that each of its
    autograd modes meets both states, red team 13:
    cases.add_mode_probes). The causality item reads ``logits:`` alone
    (a dropout re-armed by ``eval()`` is task2.logits' mistake)."""
    return (task2.probe_ids(f"logits:{depth}:")
            + task2.probe_ids(f"logits-eval:{depth}:"))


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
    """Embeddings + position embeddings, causal layers, out_proj (the
    ``logits:`` probes first, whose mistakes have diagnoses, then the
    eval-mode model built with dropout, ``logits-eval:``)."""
    for prefix in ("logits", "logits-eval"):
        probes = task2.probe_ids(f"{prefix}:{depth}:")
        require_ran(task2, probes, "TransformerLM.forward")
        for probe_id in probes:
            case, student = logits_of(task2, probe_id)
            _, w = case.float64()
            s = case.sizes
            expected = reference.lm_logits(case.x, w, s["num_heads"],
                                           s["num_layers"])
            if not close(student, expected):
                fail(f"TransformerLM.forward's logits on {case.describe()} "
                     f"do not match the reference "
                     f"({max_error(student, expected)})"
                     f"{depth_words(depth)}.",
                     *mistakes.lm_diagnoses(case, student))
    if depth == "d0":
        layers_reach_logits(task2, mistakes.layer_built_right(runs["task1"]),
                            substitutes_followed(task2))
        layers_combine_in_order(task2)


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


def layers_reach_logits(task2: TaskRun, layer_built: bool,
                        followed: bool) -> None:
    """Judged at depth 0 (the layer fails task 1), forward must still
    run its layers: with two of the student's own layers, redrawing the
    weights of either changes the logits. A depth-2 forward that raised
    (a layer that is a stub, or fails) is not judged here: its layers
    cannot be told from its other steps, and task 1 has paid for them
    (docs/rubric-decisions.md). But when the layer earns task1.layers
    (``layer_built``) and the two-layer model could not even take the
    contract's weights (one layer object listed twice, a ModuleList under
    another name), the model is at fault, not the layer: that fails.
    When the model provably runs each layer once, in order
    (``followed``: :func:`substitutes_followed`), a layer whose new
    weights change nothing ignores its weights itself (a layer that
    returns x): task 1's mistake, not charged here."""
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
        if close(changed, base) and not followed:
            fail(f"TransformerLM.forward's logits do not depend on "
                 f"layers[{layer}]: with num_layers=2 on "
                 f"{case.describe()}, new weights in that layer change "
                 f"nothing. Run every layer of self.layers on x, in order, "
                 f"between the embeddings and out_proj.")


def substitute_logits(task2: TaskRun, probe_id: str) -> torch.Tensor:
    """What a ``compose:d2:`` probe's model gives when it runs each of
    its substitute layers once, in order (the contract's composition)."""
    case = mistakes.loaded_case(task2, probe_id)
    _, w = case.float64()
    return reference.stacked_logits(case.x, w,
                                    substitute_maps(task2, probe_id))


def substitute_maps(task2: TaskRun, probe_id: str) -> list[dict]:
    """A ``compose:d2:`` probe's linear maps, in layer order."""
    return [{"weight": weight.double(), "bias": bias.double()}
            for weight, bias in
            task2.result(probe_id).info.params["substitutes"].values()]


def substitutes_followed(task2: TaskRun) -> bool:
    """True when every ``compose:d2:`` probe shows the model running
    its substitute layers once each, in order: its logits are the substitute
    composition's and not those of the student's own layers (so the
    substitutes did run)."""
    probes = task2.probe_ids("compose:d2:")
    for probe_id in probes:
        base_id = "logits:d2:" + probe_id.removeprefix("compose:d2:")
        if not (forward_ran(task2, probe_id) and forward_ran(task2, base_id)):
            return False
        student = task2.result(probe_id).value.tensor
        if close(student, task2.result(base_id).value.tensor) or \
                not close(student, substitute_logits(task2, probe_id)):
            return False
    return bool(probes)


def layers_combine_in_order(task2: TaskRun) -> None:
    """Judged at depth 0, forward must still combine its layers as the
    contract does, ``x = layer(x)`` for each layer in order: in the
    ``compose:d2:`` probes each of the student's two layers answers
    ``forward`` with a linear map the grader drew (the layer's own
    forward never runs), and the logits must be out_proj of the maps
    applied in order to the embeddings. This needs nothing of the
    layer's values, so a task-1 mistake is still paid once. Not judged
    when the two-layer model with the student's own layers already gives
    the reference's logits, nor when the substitute model did not return
    logits (a model that passes its layers more than x, or reads what a
    layer returns as something else), nor when its logits are those of
    the student's own layers (the model never calls its layers' forward
    through the layer objects, e.g. ``TransformerEncoderLayer.forward(
    layer, x)``: the substitutes never ran; docs/threat-model.md,
    principle 5)."""
    for probe_id in task2.probe_ids("compose:d2:"):
        name = probe_id.removeprefix("compose:d2:")
        base_id = f"logits:d2:{name}"
        if not forward_ran(task2, probe_id) or \
                matches_reference(task2, base_id):
            continue
        case, student = logits_of(task2, probe_id)
        if forward_ran(task2, base_id) and \
                close(student, logits_of(task2, base_id)[1]):
            continue
        _, w = case.float64()
        maps = substitute_maps(task2, probe_id)
        expected = substitute_logits(task2, probe_id)
        if close(student, expected):
            continue
        how = ""
        if close(student, reference.stacked_logits(case.x, w, maps,
                                                   residual=True)):
            how = (" They are those of x = x + layer(x): the layer adds "
                   "its own residuals, so the model adds none.")
        elif close(student, reference.stacked_logits(case.x, w,
                                                     maps[::-1])):
            how = " They are those of the layers in reverse order."
        fail(f"TransformerLM.forward does not combine its layers as the "
             f"contract does: with num_layers=2 on {case.describe()}, "
             f"each layer replaced by a fixed linear map (its own forward "
             f"not run), the logits are not out_proj(layers[1](layers[0]"
             f"(embeddings))) ({max_error(student, expected)}).{how} Run "
             f"every layer of self.layers once, in order: x = layer(x).")


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
    against the tokens at 1..n-1, the mean over them, in eval mode and,
    at depth 0 whatever the layer (no layer of the student's runs there),
    in train mode at dropout 0 (``loss-train:d0:``, judged against the
    same eval-mode logits: red team 11, B09)."""
    probes = [(probe_id, depth) for probe_id in
              task2.probe_ids(f"loss:{depth}:")] + [
        (probe_id, "d0") for probe_id in task2.probe_ids("loss-train:d0:")]
    require_ran(task2, [probe_id for probe_id, _ in probes],
                "TransformerLM.loss")
    for probe_id, at in probes:
        name = probe_id.rsplit(":", 1)[1]
        _, logits = logits_of(task2, f"logits:{at}:{name}")
        case = mistakes.loaded_case(task2, probe_id)
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
                 f"{depth_words(depth) if at == depth else ''}.", *ids)
    if depth == "d0":
        loss_runs_the_layers(task2)
    else:
        loss_follows_training(task2)


def _drawn(task2: TaskRun, prefix: str) -> list[torch.Tensor]:
    """The tensors the probes of ``prefix`` returned (all of them, or
    none when one did not run or returned no tensor)."""
    found = []
    for probe_id in task2.probe_ids(prefix):
        result = task2.result(probe_id)
        value = result.value if result.ok else None
        if value is None or value.kind != "tensor" or value.tensor is None:
            return []
        found.append(value.tensor.double())
    return found


def loss_follows_training(task2: TaskRun) -> None:
    """In train mode with dropout, the model's own logits differ from
    one torch seed to another; a loss computed from them does too (red
    team 13, b05: a loss that switches the model to eval mode for its
    logits gives one value under every seed, and trains without
    dropout). Judged only where the model's forward is random there
    (its layers' dropout is task 1's item) and the loss returned a
    scalar each time (its value is judged above)."""
    logits = _drawn(task2, "drop-logits:d2:")
    losses = _drawn(task2, "drop-loss:d2:")
    if len(logits) < 2 or len(losses) != len(logits) or any(
            loss.dim() != 0 for loss in losses):
        return
    if all(torch.equal(logits[0], other) for other in logits[1:]):
        return
    if all(torch.equal(losses[0], other) for other in losses[1:]):
        case = task2.case(task2.probe_ids("drop-loss:d2:")[0])
        fail(f"TransformerLM.loss on {case.describe()} gives "
             f"{float(losses[0]):.6g} under every torch seed, although "
             f"the model's own logits there differ from seed to seed "
             f"(dropout acts in training): the loss does not come from "
             f"the model as it is. Compute it from self(input_ids) "
             f"without changing the model's mode.")


def own_losses(task2: TaskRun, name: str) -> list[torch.Tensor]:
    """The next-token cross-entropies a loss on the case ``name`` at
    depth 2 may honestly be: of forward's logits on the text, or of its
    logits on the text without its last token (the two differ only
    behind a non-causal layer); empty when forward did not return finite
    logits there."""
    base_id, prefix_id = f"logits:d2:{name}", f"prefix:d2:{name}"
    if not forward_ran(task2, base_id):
        return []
    case, logits = logits_of(task2, base_id)
    if not bool(torch.isfinite(logits).all()):
        return []
    found = [reference.next_token_loss(logits.double(), case.x)]
    if forward_ran(task2, prefix_id):
        _, prefix = logits_of(task2, prefix_id)
        # A last row of no weight: next_token_loss drops it.
        padded = torch.cat([prefix, prefix[:, -1:]], 1).double()
        found.append(reference.next_token_loss(padded, case.x))
    return found


def loss_runs_the_layers(task2: TaskRun) -> None:
    """Judged at depth 0 (the layer fails task 1), loss must still be
    the cross-entropy of the model's own logits with two of the
    student's layers: on every case where the two-layer forward returns
    finite logits (whatever their values), ``loss:d2`` is the
    cross-entropy of those logits (:func:`own_losses`). A loss that
    never runs the layers (the embeddings straight into out_proj) fails,
    though at depth 0 it is forward's; this needs nothing of the layer's
    values. A loss that raises where forward on the same text (or on
    the text without its last token) runs fails too."""
    for probe_id in task2.probe_ids("loss:d2:"):
        name = probe_id.rsplit(":", 1)[1]
        expected = own_losses(task2, name)
        if not expected:
            continue
        case = mistakes.loaded_case(task2, f"logits:d2:{name}")
        result = task2.result(probe_id)
        if not result.ok:
            if forward_ran(task2, f"prefix:d2:{name}"):
                fail(f"TransformerLM.loss with num_layers=2 on "
                     f"{case.describe()} did not return a value, though "
                     f"forward runs there: {result.problem}.")
            continue
        value = tensor_of(result.value, "TransformerLM.loss's value", (),
                          "a scalar []", case)
        if not any(close(value, own) for own in expected):
            fail(f"TransformerLM.loss with num_layers=2 (two of your "
                 f"layers, whatever they compute) on {case.describe()} is "
                 f"{float(value):.6g}; the next-token cross-entropy of "
                 f"the model's own logits there is "
                 f"{float(expected[0]):.6g}. Compute the loss from "
                 f"forward's logits (self(input_ids)), so that it runs "
                 f"the layers.")


def layer_ignores_weights(task2: TaskRun) -> bool:
    """True when new weights in ``layers[0]`` of the two-layer model
    leave its logits unchanged (the ``reach:d2:<case>:0`` probe)."""
    for probe_id in task2.probe_ids("reach:d2:"):
        name, layer = probe_id.removeprefix("reach:d2:").rsplit(":", 1)
        base_id = f"logits:d2:{name}"
        if layer == "0" and forward_ran(task2, probe_id) and \
                forward_ran(task2, base_id):
            return close(task2.result(probe_id).value.tensor,
                         task2.result(base_id).value.tensor)
    return False


def forward_matches(task2: TaskRun, depth: str) -> bool:
    """True when TransformerLM.forward gives the reference's logits on
    every logits probe at ``depth`` (what task2.logits judges)."""
    probes = logits_ids(task2, depth)
    return bool(probes) and all(matches_reference(task2, probe_id)
                                for probe_id in probes)


def matches_reference(task2: TaskRun, probe_id: str) -> bool:
    """True when a forward probe returned the reference's logits."""
    if not forward_ran(task2, probe_id):
        return False
    case = mistakes.loaded_case(task2, probe_id)
    _, w = case.float64()
    s = case.sizes
    return close(task2.result(probe_id).value.tensor, reference.lm_logits(
        case.x, w, s["num_heads"], s["num_layers"]))


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
        groups = joined(unmoved)
        fail(f"{groups[0].upper()}{groups[1:]} never changed during "
             f"training with loss: the loss's gradient does not reach "
             f"them (is part of forward run under torch.no_grad(), "
             f"detached, or never called?); training must move every "
             f"parameter of the model{depth_words(depth)}. After "
             f"training, {loss}.")
    if not end < TRAIN_BOUND:
        fail(f"After training on the grader's corpus ({CORPUS[depth]}), "
             f"{loss}{depth_words(depth)}.")
    if matches:
        forward_follows_training(task2, depth, after)
    if depth == "d0":
        layer_trained_too(task2)


def forward_follows_training(task2: TaskRun, depth: str,
                             expected: torch.Tensor) -> None:
    """The trained model's own forward computes its logits from the
    parameters training left (red team 13, b07: a model that keeps a
    copy of ``out_proj.weight`` from its first call trains the
    parameter, which the grader's model on the trained weights judges,
    while its forward answers with the copy): its logits on the fresh
    text after training match the reference model's on the trained
    weights (``expected``, :func:`trained_logits`)."""
    _, own = logits_of(task2, f"trained:{depth}")
    if not close(own, expected):
        fail(f"After training with loss, TransformerLM.forward's logits "
             f"on fresh text are not those of the model's trained "
             f"parameters ({max_error(own, expected)}): forward "
             f"must compute the logits from the model's current "
             f"parameters at every call, not from values kept from an "
             f"earlier call{depth_words(depth)}.")


def joined(groups: list[str]) -> str:
    """``a, b and c`` (a sentence's list of parameter groups)."""
    return " and ".join([", ".join(groups[:-1]), groups[-1]]
                        if len(groups) > 1 else groups)


def layer_trained_too(task2: TaskRun) -> None:
    """Judged at depth 0 (the layer fails task 1), the loss's
    gradient must still reach the layer: whenever the one-layer model
    trains (``trained:d2`` ran, whatever the layer computes), every
    parameter group moved, ``layers[0]`` included (the position
    embeddings aside: task2.logits' point). A loss that never runs the
    layers fails, and so does a training the worker stopped because a
    parameter changed otherwise than by a gradient step. A layer that
    ignores its own weights (new weights in ``layers[0]`` change nothing
    although the model provably runs it: :func:`substitutes_followed`)
    cannot move them under any loss: task 1's mistake, not required."""
    result = task2.result("trained:d2")
    error = result.error or {}
    if not result.ok:
        if result.stopped is None and "line" not in error and \
                error.get("type") == "RuntimeError" and \
                "during training with" in error.get("message", ""):
            fail(f"Training the model with num_layers=1 stopped: "
                 f"{result.problem}.")
        return
    ignored = (group_words("layers.0") if substitutes_followed(task2)
               and layer_ignores_weights(task2) else None)
    unmoved = [group for group in unmoved_groups(task2, "d2")
               if group not in (POSITIONS, ignored)]
    if unmoved:
        groups = joined(unmoved)
        fail(f"{groups[0].upper()}{groups[1:]} never changed during "
             f"training with loss, with num_layers=1 (one of your layers, "
             f"whatever it computes): the loss's gradient does not reach "
             f"them. Compute the loss from forward's logits "
             f"(self(input_ids)), so that training moves every parameter "
             f"of the model.")


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
