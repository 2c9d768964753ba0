"""The grader on the third assignment, ``transformer_block``, item by item.

Every file in ``submissions/transformer_block/`` is a complete student
module: correct variants (one with the student's own attention, one whose
out_proj is tied to the token embeddings), each diagnosed mistake written
three different ways, penalties, broken code and hostile code (a model
that peeks at the next token through a module-level side channel, one that
returns the grader's reference logits by importing it or by reading it
from disk, losses faked by a constant, training that memorises the text
in a dict instead of moving the weights, a layer whose k and q share one
weight, a tie the contract does not allow), and red team 9's routes (dropout
applied in eval mode, an attention built without the dropout rate, one layer
object repeated in the model behind a pre-norm layer). The table
gives, for each, the score of every item that does not earn full points,
the diagnoses of the failing items and the total, as
``grader/assignments/transformer_block/rubric.toml`` and
docs/transformer_block.md say. Further tests: the reference earns 10 under
several seeds and with ``--public-only``, the stub earns 0, the grader's
functional reference agrees with ``solutions/modeling_transformer.py``,
the plan's cases have the properties the docs promise, and task 2 is
judged without the student's layer when that layer fails task 1.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
import torch

from grader.assignments.transformer_block import cases, reference
from grader.output.report import Report
from grader.rubric import get_assignment

KIT = Path(__file__).resolve().parents[2]
SUBMISSIONS = Path(__file__).resolve().parent / "submissions" / \
    "transformer_block"
SOLUTION = KIT / "solutions" / "modeling_transformer.py"
STUB = KIT / "transformer_lm" / "modeling_transformer.py"
ASSIGNMENT = get_assignment("transformer_block")
FULL = {item.id: item.points if item.kind == "checks" else 0.0
        for item in ASSIGNMENT.items}
DEFAULT_SEED = 7
SEEDS = (0, 1, 2024)


@dataclass(frozen=True)
class Expected:
    """What a submission earns: the items that differ from full marks."""

    changes: dict[str, float] = field(default_factory=dict)
    diagnoses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    why: str = ""

    @property
    def scores(self) -> dict[str, float]:
        """Item id -> expected score."""
        return {**FULL, **self.changes}

    @property
    def total(self) -> float:
        """The rubric's total: each task's items clamped to [0, max]."""
        scores = self.scores
        return sum(min(max(sum(scores[i.id] for i in
                               ASSIGNMENT.items_of(task.id)), 0.0),
                       task.max_score) for task in ASSIGNMENT.tasks)


def lost(*items: str, diagnosis: str | None = None, why: str = "",
         flags: tuple[str, ...] = ()) -> Expected:
    """``items`` earn 0, each with the diagnosis id ``diagnosis``."""
    return Expected({item: 0.0 for item in items},
                    {item: (diagnosis,) for item in items}
                    if diagnosis else {}, flags, why)


TASK2 = ("task2.logits", "task2.causal", "task2.loss", "task2.training")
LAYER_WHY = ("task 2 is then judged with num_layers=0 models, which do not "
             "run the student's layer, and earns its 6 points")
CORPUS: dict[str, Expected] = {
    # ---------------------------------------------------------- correct
    "correct_reference_style": Expected(),
    "correct_functional": Expected(
        why="F.cross_entropy on reshaped logits, appended modules, "
            "seq_len - 1 in a shape comment"),
    "correct_own_attention": Expected(
        why="the student's own attention replaces the given one; its "
            "statements run for the layer and carry right comments"),
    "correct_tied_weights": Expected(
        why="out_proj.weight is the token embeddings' parameter (weight "
            "tying): loaded and judged with one value under both names"),
    # ---------------------------------------------------------- pre_norm
    "mistake_pre_norm_a": lost("task1.forward", diagnosis="pre_norm",
                               why=LAYER_WHY),
    "mistake_pre_norm_b": lost("task1.forward", diagnosis="pre_norm",
                               why=LAYER_WHY),
    "mistake_pre_norm_c": lost("task1.forward", diagnosis="pre_norm",
                               why=LAYER_WHY),
    # ---------------------------------------------------------- residual
    "mistake_no_residual_attention": lost(
        "task1.forward", diagnosis="missing_residual", why=LAYER_WHY),
    "mistake_no_residual_fcn": lost(
        "task1.forward", diagnosis="missing_residual", why=LAYER_WHY),
    "mistake_no_residual_both": lost(
        "task1.forward", diagnosis="missing_residual", why=LAYER_WHY),
    "penalties_own_attention": Expected(
        {"task1.pep8": -1.0, "task1.shapes": -1.0},
        why="the student's own attention runs beneath the layer and is "
            "judged with it alone (companions), not again with the model"),
    # ------------------------------------- layers unused behind a bad layer
    "mistake_layers_skipped": Expected(
        {"task1.forward": 0.0, "task2.logits": 0.0, "task2.training": 0.0},
        {"task1.forward": ("pre_norm",)},
        why="judged at num_layers=0, but with two of its own layers new "
            "weights in layers[0] change nothing (red team 8); trained "
            "with one of its layers, layers[0] never moves (red team 9, "
            "U8): a model that never calls its layers is not the model "
            "the training item trains, as with a right layer"),
    "mistake_layers_first_only": Expected(
        {"task1.forward": 0.0, "task2.logits": 0.0},
        {"task1.forward": ("pre_norm",)},
        why="layers[1] never reaches the logits"),
    # ------------------------------------------ dropout (red team 9, U1)
    "mistake_dropout_in_eval": lost(
        "task1.forward",
        why="F.dropout(..., self.dropout.p) drops in eval mode too: the "
            "eval-mode probes built with dropout 0.3 differ from the "
            "reference; " + LAYER_WHY),
    "mistake_attention_without_dropout": lost(
        "task1.layers",
        why="self_attention's own nn.Dropout has rate 0, not the layer's "
            "rate (the describe probe's numbers, at depth 2)"),
    # ------------------------ one layer object repeated (red team 9, U3)
    "mistake_shared_layers_pre_norm": Expected(
        {"task1.forward": 0.0, "task2.layers": 0.0, "task2.logits": 0.0},
        {"task1.forward": ("pre_norm",)},
        why="the layer earns task1.layers, so task2.layers is judged with "
            "two layers (one parameter under both names fails it) and the "
            "two-layer model that cannot take the contract's weights "
            "fails task2.logits; below the same LM with a right layer"),
    # ---------------------------------------------------------- positions
    "mistake_no_positions_unused": lost(
        "task2.logits", diagnosis="no_position_embeddings",
        why="causal, and a bigram corpus is learnt without positions"),
    "mistake_no_positions_typo": lost(
        "task2.logits", diagnosis="no_position_embeddings"),
    "mistake_no_positions_sequential": lost(
        "task2.logits", diagnosis="no_position_embeddings"),
    # ---------------------------------------------------------- loss
    "mistake_loss_not_shifted_view": lost(
        "task2.loss", "task2.training",
        why="training on the unshifted loss teaches copying, so the next "
            "token is not learnt"),
    "mistake_loss_not_shifted_gather": lost("task2.loss", "task2.training"),
    "mistake_loss_not_shifted_transpose": lost("task2.loss",
                                               "task2.training"),
    # ---------------------------------------------------------- causality
    "mistake_lm_not_causal_flag": lost(
        "task2.logits", "task2.causal", diagnosis="lm_not_causal",
        why="the logits are the reference's with causal=False layers; "
            "the loss is its own logits' and training lowers it"),
    "mistake_lm_not_causal_mean": Expected(
        {"task2.logits": 0.0, "task2.causal": 0.0},
        {"task2.causal": ("lm_not_causal",)}),
    "mistake_pre_norm_lm_not_causal": Expected(
        {"task1.forward": 0.0, "task2.causal": 0.0},
        {"task1.forward": ("pre_norm",), "task2.causal": ("lm_not_causal",)},
        why="a pre-norm layer built with causal=True is still causal, so "
            "task2.causal is judged with the student's layers and the "
            "non-causal model is caught; the logits are judged without "
            "layers (docs/transformer_block.md, Isolation)"),
    "hostile_peeks_next_token": Expected(
        {"task2.logits": 0.0, "task2.causal": 0.0},
        {"task2.causal": ("lm_not_causal",)},
        why="the side channel is the future of the same call: the "
            "causality probes see it; training on it is what the code "
            "does, and the grader's loss on its logits is low"),
    # ---------------------------------------------------------- penalties
    "penalties": Expected({"task1.pep8": -1.0, "task2.shapes": -1.0},
                          why="a long line in the layer; seq_len where "
                              "loss's sliced logits have seq_len - 1"),
    # ---------------------------------------------------------- broken
    "broken_syntax_error": Expected({i: 0.0 for i in FULL}),
    "broken_lm_forward_raises": lost(*TASK2),
    # ---------------------------------------------------------- hostile
    "hostile_constant_loss": lost(
        "task2.loss", "task2.training",
        why="a constant has no gradient: the weights never move, and the "
            "grader computes the loss from the returned logits"),
    "hostile_constant_loss_graph": lost("task2.loss", "task2.training"),
    "hostile_memorises_training": lost(
        "task2.layers", *TASK2, flags=("untraceable",),
        why="its loss has no gradient and keeps pairs read out of torch "
            "(tolist) in a dict its forward replays: values a graded "
            "call took out of torch, with a tensor answer, cost the "
            "task's correctness items (threat model, principle 4); the "
            "grader's own model on the weights training left would "
            "have taken the training item anyway"),
    "hostile_imports_reference": lost(
        "task2.layers", *TASK2, diagnosis="forbidden_api",
        flags=("forbidden",)),
    "hostile_reads_reference_file": lost(
        *TASK2, flags=("refused",),
        why="the sandbox refuses to read the kit's files"),
    "hostile_tied_projections": lost(
        "task1.layers", "task1.forward",
        why="only token_embeddings.weight and out_proj.weight may be one "
            "parameter: a layer whose k and q share a weight fails both "
            "items of task 1 as it did (task 2 is judged without layers)"),
}
# The diagnoses of the loss_not_shifted files (on task2.loss only).
for _name in ("mistake_loss_not_shifted_view",
              "mistake_loss_not_shifted_gather",
              "mistake_loss_not_shifted_transpose"):
    CORPUS[_name] = Expected(CORPUS[_name].changes,
                             {"task2.loss": ("loss_not_shifted",)},
                             why=CORPUS[_name].why)
TOTALS = {"correct_reference_style": 10, "correct_functional": 10,
          "correct_own_attention": 10, "correct_tied_weights": 10,
          "hostile_tied_projections": 6, "mistake_no_positions_unused": 8,
          "mistake_no_positions_typo": 8,
          "mistake_no_positions_sequential": 8,
          "mistake_loss_not_shifted_view": 8,
          "mistake_loss_not_shifted_gather": 8,
          "mistake_loss_not_shifted_transpose": 8, "penalties": 8,
          "mistake_pre_norm_lm_not_causal": 6,
          "mistake_layers_skipped": 4, "mistake_layers_first_only": 5,
          "mistake_attention_without_dropout": 9,
          "mistake_shared_layers_pre_norm": 4,
          "penalties_own_attention": 8,
          "broken_syntax_error": 0, "broken_lm_forward_raises": 5,
          "hostile_constant_loss": 8, "hostile_constant_loss_graph": 8,
          "hostile_memorises_training": 4,
          "hostile_imports_reference": 4,
          "hostile_reads_reference_file": 5}
# Every diagnosis of the rubric, and the files written to trigger it.
TRIGGERS = {
    "pre_norm": ("mistake_pre_norm_a", "mistake_pre_norm_b",
                 "mistake_pre_norm_c"),
    "missing_residual": ("mistake_no_residual_attention",
                         "mistake_no_residual_fcn",
                         "mistake_no_residual_both"),
    "no_position_embeddings": ("mistake_no_positions_unused",
                               "mistake_no_positions_typo",
                               "mistake_no_positions_sequential"),
    "loss_not_shifted": ("mistake_loss_not_shifted_view",
                         "mistake_loss_not_shifted_gather",
                         "mistake_loss_not_shifted_transpose"),
    "lm_not_causal": ("mistake_lm_not_causal_flag",
                      "mistake_lm_not_causal_mean",
                      "hostile_peeks_next_token"),
    "forbidden_api": ("hostile_imports_reference",),
}


# --------------------------------------------------------------------------
# Grading, once per (file, options), in two processes


Key = tuple[str, bool, int]        # (name or path, public_only, seed)


def _path(name: str) -> Path:
    path = Path(name)
    return path if path.suffix else SUBMISSIONS / f"{name}.py"


def _needed() -> list[Key]:
    keys = [(name, False, DEFAULT_SEED) for name in sorted(CORPUS)]
    keys += [(str(SOLUTION), False, seed) for seed in (DEFAULT_SEED,)
             + SEEDS]
    keys += [(str(SUBMISSIONS / "correct_functional.py"), False, seed)
             for seed in SEEDS]
    keys += [(str(SOLUTION), True, DEFAULT_SEED),
             (str(STUB), False, DEFAULT_SEED)]
    return keys


def _grade(grade_path: Callable, key: Key) -> object:
    try:
        return grade_path(_path(key[0]), public_only=key[1], seed=key[2],
                          assignment="transformer_block")
    except Exception as exc:  # reported by the test
        return f"{type(exc).__name__}: {exc}"


def _grade_all(grade_path: Callable, keys: list[Key]) -> dict[Key, object]:
    """Grade ``keys``: half here, half in a forked copy of this process."""
    theirs, mine = keys[1::2], keys[0::2]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            found = {key: _grade(grade_path, key) for key in theirs}
            with os.fdopen(write_fd, "wb") as pipe:
                pickle.dump(found, pipe)
        finally:
            os._exit(0)
    os.close(write_fd)
    results: dict[Key, object] = {}
    try:
        for key in mine:
            results[key] = _grade(grade_path, key)
    finally:
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
    if data:
        results.update(pickle.loads(data))
    return results


@pytest.fixture(scope="module")
def graded(grade_path) -> Callable[..., Report]:
    """Grade a corpus file (by name) or a path; cached for the module."""
    cache = _grade_all(grade_path, _needed())

    def run(name: str | Path, *, public_only: bool = False,
            seed: int = DEFAULT_SEED) -> Report:
        key = (str(name), public_only, seed)
        if key not in cache:
            cache[key] = _grade(grade_path, key)
        report = cache[key]
        if isinstance(report, str):
            pytest.fail(f"grading {name} raised {report}")
        return report
    return run


def describe(report: Report) -> str:
    """Every item's score, diagnoses and message, for a failure."""
    return "\n".join(f"{i.id}: {i.score:g} {i.diagnosis} {i.message[:300]}"
                     for i in report.items)


# --------------------------------------------------------------------------
# The table


def test_corpus_covers_every_submission_file() -> None:
    """Every file in submissions/transformer_block/ has a row."""
    assert {p.stem for p in SUBMISSIONS.glob("*.py")} == set(CORPUS)


def test_table_follows_the_rubric() -> None:
    """Items and diagnoses in the table exist; totals agree; every
    diagnosis of the rubric is triggered, the behavioural ones by at least
    three differently written files."""
    triggered: dict[str, set[str]] = {}
    for name, expected in CORPUS.items():
        assert set(expected.changes) <= set(FULL), name
        for item, ids in expected.diagnoses.items():
            assert set(ids) <= set(ASSIGNMENT.diagnoses), (name, item)
            for found in ids:
                triggered.setdefault(found, set()).add(name)
        assert expected.total == TOTALS.get(name, 7), name
    assert set(triggered) == set(ASSIGNMENT.diagnoses)
    for diagnosis, names in TRIGGERS.items():
        assert set(names) <= triggered[diagnosis], diagnosis
        if diagnosis != "forbidden_api":
            assert len(names) >= 3, diagnosis
            texts = {(SUBMISSIONS / f"{n}.py").read_text() for n in names}
            assert len(texts) == len(names), diagnosis


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_submission_scores_and_diagnoses(graded, name: str) -> None:
    """Every item's score, the failing items' diagnoses, flags, total."""
    expected = CORPUS[name]
    report = graded(name)
    assert report.assignment == "transformer_block"
    assert [item.id for item in report.items] == list(FULL)
    assert report.scores() == pytest.approx(expected.scores), (
        f"expected because: {expected.why or 'see the file'}\n"
        + describe(report))
    diagnoses = {item.id: sorted(item.diagnosis) for item in report.items
                 if item.diagnosis}
    assert diagnoses == {k: sorted(v) for k, v in
                         expected.diagnoses.items()}, describe(report)
    assert sorted({f.kind for f in report.flags}) == sorted(
        expected.flags), report.flags
    assert report.score == expected.total
    assert report.max_score == 10
    assert report.errors == [] or name.startswith("broken"), report.errors


def test_no_correct_submission_is_diagnosed(graded) -> None:
    """No diagnosis fires on a correct file (nor on the reference)."""
    for name in [n for n in CORPUS if n.startswith("correct")] + [
            str(SOLUTION)]:
        report = graded(name)
        assert not any(item.diagnosis for item in report.items), name


# --------------------------------------------------------------------------
# Reference, stub, seeds, public-only


@pytest.mark.parametrize("seed", (DEFAULT_SEED,) + SEEDS)
def test_reference_earns_full_marks(graded, seed: int) -> None:
    """solutions/modeling_transformer.py: 10 under every seed."""
    report = graded(str(SOLUTION), seed=seed)
    assert report.score == 10, describe(report)
    assert all(item.passed for item in report.items), describe(report)
    assert report.errors == []


@pytest.mark.parametrize("seed", SEEDS)
def test_correct_submission_earns_full_marks_under_every_seed(
        graded, seed: int) -> None:
    """Another correct submission: 10 whatever the hidden cases."""
    report = graded(str(SUBMISSIONS / "correct_functional.py"), seed=seed)
    assert report.score == 10, describe(report)


def test_reference_earns_full_marks_public_only(graded) -> None:
    """--public-only: one case per kind, the grader's own, gives 10."""
    report = graded(str(SOLUTION), public_only=True)
    assert report.public_only
    assert report.score == 10, describe(report)


def test_stub_earns_nothing(graded) -> None:
    """The generated stub: 0, every correctness item failed."""
    report = graded(str(STUB))
    assert report.score == 0
    assert not any(item.passed for item in report.items
                   if item.max_score > 0), describe(report)


def test_training_messages_give_the_grader_s_loss(graded) -> None:
    """A failed training item says the loss the grader computed before
    and after training, and the bound."""
    item = next(i for i in graded("hostile_constant_loss").items
                if i.id == "task2.training")
    assert f"below {cases.TRAIN_BOUND:g}" in item.message
    assert "before training" in item.message


# --------------------------------------------------------------------------
# The reference and the plan


def _load_solution() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tb_solution", SOLUTION)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("causal", (False, True))
def test_functional_reference_agrees_with_the_solution(causal: bool
                                                       ) -> None:
    """reference.encoder_layer / lm_logits / next_token_loss equal the
    solution's modules on their own state_dict (float64)."""
    solution = _load_solution()
    torch.manual_seed(3)
    layer = solution.TransformerEncoderLayer(12, 3, 7, causal=causal)
    layer = layer.double().eval()
    for parameter in layer.parameters():   # norms away from 1 and 0
        parameter.data.uniform_(-0.7, 0.7)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    weights = {k: v.detach() for k, v in layer.state_dict().items()}
    with torch.no_grad():
        assert torch.allclose(layer(x), reference.encoder_layer(
            x, weights, 3, causal))
    model = solution.TransformerLM(11, 12, 3, 7, 2, 9).double().eval()
    ids = torch.randint(0, 11, (3, 6))
    weights = {k: v.detach() for k, v in model.state_dict().items()}
    assert set(weights) == set(reference.lm_shapes(11, 12, 7, 2, 9))
    with torch.no_grad():
        logits = model(ids)
        assert torch.allclose(logits, reference.lm_logits(ids, weights, 3,
                                                          2))
        assert torch.allclose(model.loss(ids), reference.next_token_loss(
            logits, ids))


def test_diagnosis_variants_differ_from_the_reference() -> None:
    """Each mistake variant of the reference changes the output, so a
    correct output can never match one."""
    rng = cases._rng(0, "test")
    case = cases.layer_case(rng, "t")
    x, w = case.float64()
    heads = case.sizes["num_heads"]
    right = reference.encoder_layer(x, w, heads)
    for kwargs in ({"pre_norm": True}, {"residual": (False, True)},
                   {"residual": (True, False)},
                   {"residual": (False, False)}):
        assert not torch.allclose(right, reference.encoder_layer(
            x, w, heads, **kwargs), atol=1e-3), kwargs
    lm = cases.lm_case(rng, "t", 2)
    _, w = lm.float64()
    right = reference.lm_logits(lm.x, w, lm.sizes["num_heads"], 2)
    for kwargs in ({"positions": False}, {"causal": False}):
        assert not torch.allclose(right, reference.lm_logits(
            lm.x, w, lm.sizes["num_heads"], 2, **kwargs), atol=1e-3)


@pytest.mark.parametrize("seed", (0, 7, 2024))
def test_plan_cases_keep_sizes_apart(seed: int) -> None:
    """Hidden sizes differ from each other; max_seq_len > seq_len; the
    causality probes change only the tokens after their position; the
    prefix probes drop the last token; the training text follows one
    permutation, fresh text included."""
    plan = cases.build(seed, False, ASSIGNMENT.size_sets)
    for (task, probe_id), info in plan.info.items():
        if info.case is None or probe_id.startswith("trace"):
            continue
        sizes = {k: v for k, v in info.case.sizes.items()
                 if k != "num_layers"}
        if probe_id.startswith("prefix:"):
            # The text without its last token (a loss's other reading):
            # seq_len - 1 may equal another size; judged at d2 only.
            base = plan.info[(task, "logits:d2:" + info.case.name)].case
            assert torch.equal(info.case.x, base.x[:, :-1])
            assert sizes["seq_len"] == base.sizes["seq_len"] - 1
            continue
        if task == "task2" and "max_seq_len" in sizes and \
                not probe_id.startswith(("before", "trained")):
            assert cases.all_distinct(sizes), (probe_id, sizes)
            assert sizes["max_seq_len"] > sizes["seq_len"]
        if probe_id.startswith("future:"):
            depth, name, position = probe_id.split(":")[1:]
            base = plan.info[(task, f"logits:{depth}:{name}")].case
            position = int(position)
            assert torch.equal(info.case.x[:, :position + 1],
                               base.x[:, :position + 1])
            assert (info.case.x[:, position + 1:]
                    != base.x[:, position + 1:]).all()
    for depth in cases.TRAIN_DEPTHS:
        batches, fresh, successor = cases.corpus(seed, depth)
        for ids in batches + [fresh.x]:
            for i in range(ids.shape[1] - 1):
                assert torch.equal(cases.next_tokens(
                    successor, ids[:, i], i, depth), ids[:, i + 1])
        assert len(batches) == cases.TRAIN_STEPS[depth]
        assert {len(b) for b in batches} == {cases.TRAIN_BATCH[depth]}
    # d0: the successor of the token alone; d2: of token and position.
    ids = torch.arange(12)
    _, _, successor = cases.corpus(seed, "d2")
    assert not torch.equal(cases.next_tokens(successor, ids, 0, "d2"),
                           cases.next_tokens(successor, ids, 1, "d2"))


def test_training_probe_is_bounded_and_fresh() -> None:
    """The trained model's judged input is the fresh text, not a training
    batch, and the probe carries the steps the docs state."""
    plan = cases.build(7, False, ())
    wires = {w["id"]: w for w in plan.probes["task2"]}
    for depth in cases.TRAIN_DEPTHS:
        fit = wires[f"trained:{depth}"]["fit"]
        assert fit["method"] == "loss"
        assert len(fit["batches"]) == cases.TRAIN_STEPS[depth]
        assert "fit" not in wires[f"before:{depth}"]
        info = plan.info[("task2", f"trained:{depth}")]
        assert info.case.sizes["num_layers"] == cases.TRAIN_DEPTHS[depth]
        assert info.case.x.shape == (cases.TRAIN["fresh"],
                                     cases.TRAIN["max_seq_len"])
