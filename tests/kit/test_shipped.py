"""What ships to students carries no other homework and solves nothing
(issue 24, principle 10).

The student repository of an assignment ships the grader for
self-checks, with that assignment's plug-in only: another homework's
reference, cases and mistake catalog never ship. The nbgrader release
ships no grader at all. Both are read file by file, as a student gets
them.
"""
from __future__ import annotations

import ast
import json
import importlib
import importlib.util
import inspect
import warnings
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
import torch

from grader.assignments import attention
from grader.engine import build_plan
from grader.rubric import assignments, get_assignment
from solutions.student_repo import student_files

KIT = Path(__file__).resolve().parents[2]
RELEASED = [a.id for a in assignments()
            if (KIT / "assignment" / a.id).is_dir()]


@pytest.mark.parametrize("assignment", RELEASED)
def test_a_student_repo_ships_its_own_plugin_only(assignment):
    """grader/assignments/ holds the shared modules and this assignment's
    folder; no file anywhere names another plug-in's folder."""
    files = student_files(assignment)
    plugins = {p.parts[2] for p in files
               if len(p.parts) > 3 and p.parts[:2] == ("grader",
                                                       "assignments")}
    assert plugins == {assignment}
    assert Path("grader", "assignments", assignment, "rubric.toml") in files
    others = [a.id for a in assignments() if a.id != assignment]
    for path in files:
        assert not any(f"assignments/{other}" in path.as_posix()
                       for other in others), path


@pytest.mark.parametrize("assignment", RELEASED)
def test_the_nbgrader_release_ships_no_grader(assignment):
    """assignment/<id>/ holds the notebook, the student package and the
    public tests: no grader file, no plug-in, nothing of solutions/."""
    release = KIT / "assignment" / assignment
    shipped = [p.relative_to(release) for p in release.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts]
    assert shipped
    for path in shipped:
        assert path.parts[0] in ("transformer_lm", "tests") or (
            path.suffix == ".ipynb" and len(path.parts) == 1), path
        assert "grader" not in path.parts and "solutions" not in path.parts


# --------------------------------------------------------------------------
# Second half: nothing shipped computes a task's correct answer without a
# forbidden kernel (docs/threat-model.md, principle 10).

#: The rubric's forbidden kernels the grader's own references run on.
KERNELS = [(torch.nn.functional, "scaled_dot_product_attention"),
           (torch.nn.functional, "multi_head_attention_forward"),
           (torch._C._nn, "scaled_dot_product_attention"),
           (torch.nn.MultiheadAttention, "forward"),
           (torch, "_transformer_encoder_layer_fwd")]


def _given_attention(x: torch.Tensor, weights: dict, num_heads: int,
                     causal: bool) -> torch.Tensor:
    """The reference's attention as the transformer_block stub gives it
    (its MultiHeadSelfAttention, the previous homework's solution: no
    kernel), for :func:`tripped_kernels`."""
    from transformer_lm.modeling_transformer import MultiHeadSelfAttention

    layer = MultiHeadSelfAttention(x.shape[-1], weights["q.weight"].shape[0],
                                   num_heads, causal=causal)
    layer.load_state_dict(weights)
    with torch.no_grad():
        return layer.double().eval()(x)


#: What an assignment's stub gives, in place of the reference function
#: that computes it with a kernel (module, name, stand-in): a layer
#: composed by hand around the given attention is transformer_block's
#: Task 1 answer, and must be caught.
GIVEN = {"transformer_block": (
    "grader.assignments.transformer_block.reference", "attention",
    _given_attention)}
#: Each assignment's correct answers, as the grader's reference (which
#: the kit's tests tie to solutions/) computes them: module, functions.
TARGETS = {
    "multi_head_attention": ("reference", ["self_attention", "multi_head"]),
    "attention_basics": ("reference", [
        "simple_self_attention", "self_attention_v1", "self_attention_v2",
        "causal_attention", "causal_weights", "wrapper",
        "multi_head_attention", "qkv_attention"]),
    "transformer_block": ("reference", ["encoder_layer", "lm_logits",
                                        "next_token_loss"]),
}
#: Argument names a candidate call fills from a case.
_HEADS = ("num_heads", "heads")
#: Cases per task tried (the public values and hidden ones).
PER_TASK = 3


class Tripped(Exception):
    """A forbidden kernel was called."""


@contextmanager
def tripped_kernels(assignment: str = ""):
    """Every forbidden kernel raises :class:`Tripped`, what the
    assignment's stub gives is computed as the stub does (GIVEN), and
    the head layout's cache, read off a kernel, is empty."""
    saved = [(owner, name, getattr(owner, name)) for owner, name in KERNELS]
    stand_ins = []
    if assignment in GIVEN:
        module, name, stand_in = GIVEN[assignment]
        owner = importlib.import_module(module)
        saved.append((owner, name, getattr(owner, name)))
        stand_ins.append((owner, name, stand_in))

    def trip(*args, **kwargs):
        raise Tripped

    attention._layout.cache_clear()
    try:
        for owner, name, _ in saved:
            setattr(owner, name, trip)
        for owner, name, stand_in in stand_ins:
            setattr(owner, name, stand_in)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        attention._layout.cache_clear()


def _modules(assignment: str) -> dict[str, ModuleType]:
    """Every shipped Python module of the grader's plug-ins (the
    assignment's folder, checks included, and the shared modules), read
    from the student repository and checked to be the kit's own."""
    files = student_files(assignment)
    found = {}
    for path, data in files.items():
        if path.suffix != ".py" or path.parts[:2] != ("grader",
                                                      "assignments"):
            continue
        assert (KIT / path).read_bytes() == data, path
        name = ".".join(path.with_suffix("").parts)
        if "checks" in path.parts:
            spec = importlib.util.spec_from_file_location(
                f"shipped_{assignment}_{path.stem}", KIT / path)
            module = importlib.util.module_from_spec(spec)
            with warnings.catch_warnings():  # the checks' item marks
                warnings.simplefilter("ignore",
                                      pytest.PytestUnknownMarkWarning)
                spec.loader.exec_module(module)
        else:
            module = importlib.import_module(name)
        found[".".join(path.with_suffix("").parts[2:])
              .removeprefix(f"{assignment}.")] = module
    return found


def _cases(assignment: str) -> list:
    """The distinct cases of a grading's plan (public and hidden)."""
    plan = build_plan(get_assignment(assignment), seed=24)
    cases: dict[tuple[str, str], object] = {}
    for info in plan.info.values():
        if info.case is not None and sum(
                task == info.task for task, _ in cases) < PER_TASK:
            cases.setdefault((info.task, info.case.name), info.case)
    return list(cases.values())


def _fill(name: str, case, extra: dict):
    """A value for argument ``name`` from ``case`` (KeyError: none)."""
    x, weights = case.float64()
    s = case.sizes
    table = {"case": case, "weights": weights, "w": weights,
             "x": x if case.x.is_floating_point() else case.x,
             "input_ids": case.x, "inputs": x, "t": x,
             "num_layers": s.get("num_layers"), **extra}
    for heads in _HEADS:
        table[heads] = s.get("num_heads")
    if table.get(name) is None:
        raise KeyError(name)
    return table[name]


def _calls(func, case, extra: dict):
    """Argument sets for ``func`` on ``case``: its fillable arguments,
    with each boolean flag flipped in turn and each scale tried."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    base, flags, scales = {}, [], []
    for name, parameter in signature.parameters.items():
        try:
            base[name] = _fill(name, case, extra)
            continue
        except KeyError:
            pass
        if name in ("causal", "is_causal") and \
                parameter.default is inspect.Parameter.empty:
            base[name] = False
            flags.append((name, True))
            continue
        if parameter.default is inspect.Parameter.empty:
            return
        if isinstance(parameter.default, bool):
            flags.append((name, not parameter.default))
        elif name in ("scale", "divisor"):
            scales = [float(v) ** 0.5 for v in case.sizes.values()] + [
                (case.sizes.get("hidden", 1)
                 // case.sizes.get("num_heads", 1)) ** 0.5, 1.0]
            scales = [(name, v) for v in scales]
    if base.get("num_layers"):  # a model with no layers is one too
        flags.append(("num_layers", 0))
    yield base
    for name, value in flags + scales:
        yield {**base, name: value}


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _answers(modules: dict[str, ModuleType], assignment: str, case
             ) -> list[torch.Tensor]:
    """The correct answers on ``case`` (kernels allowed)."""
    module, names = TARGETS[assignment]
    found = []
    logits = {}
    for name in names:
        for kwargs in _calls(getattr(modules[module], name), case, logits):
            try:
                found += _tensors(getattr(modules[module], name)(**kwargs))
            except (KeyError, RuntimeError, ValueError, IndexError,
                    TypeError, AssertionError):
                continue
            if name == "lm_logits" and found:
                logits = {"logits": found[-1]}
    return [t for t in found if t.numel() > 1 or t.dim() == 0]


def _solves(value, answers: list[torch.Tensor]) -> bool:
    return any(t.shape == a.shape and t.is_floating_point()
               and bool(torch.allclose(t.double(), a.double(), rtol=1e-4,
                                       atol=1e-5))
               for t in _tensors(value) for a in answers)


def _offenders(functions: dict[str, object], assignment: str,
               modules: dict[str, ModuleType]) -> set[str]:
    """The functions that return a correct answer with the kernels
    tripped."""
    found = set()
    for case in _cases(assignment):
        answers = _answers(modules, assignment, case)
        extra = {"logits": answers[-1]} if answers else {}
        with tripped_kernels(assignment):
            for label, func in functions.items():
                if _answers_any(func, case, extra, answers):
                    found.add(label)
    return found


def _answers_any(func, case, extra: dict, answers: list[torch.Tensor],
                 depth: int = 2) -> bool:
    """True when ``func``, called with any argument set :func:`_calls`
    gives, returns a correct answer; or returns a function (a closure
    such as a judge it builds) that does, up to ``depth`` levels."""
    for kwargs in _calls(func, case, extra):
        try:
            value = func(**kwargs)
        except Exception:  # noqa: BLE001 - any failure: no answer
            continue
        if _solves(value, answers):
            return True
        if depth and inspect.isfunction(value) and _answers_any(
                value, case, extra, answers, depth - 1):
            return True
    return False


def _functions(modules: dict[str, ModuleType]) -> dict[str, object]:
    """Every function (and method of a class) the modules define."""
    found = {}
    for label, module in modules.items():
        for name, value in vars(module).items():
            if getattr(value, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(value):
                found[f"{label}.{name}"] = value
            elif inspect.isclass(value):
                for attr, member in vars(value).items():
                    if inspect.isfunction(member):
                        found[f"{label}.{name}.{attr}"] = member
    return found


def _by_hand(x: torch.Tensor, weights: dict, num_heads: int,
             causal: bool) -> torch.Tensor:
    """A control: multi-head probabilities written out by hand (what the
    old mistake catalog computed by default)."""
    def split(t):
        return t.unflatten(-1, (num_heads, -1)).transpose(1, 2)

    q, k = (split(torch.nn.functional.linear(x, weights[f"{n}.weight"],
                                             weights[f"{n}.bias"]))
            for n in "qk")
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        seq = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(seq, seq).triu(1).bool(),
                                    float("-inf"))
    return torch.softmax(scores, dim=-1).flatten(0, 1)


def _builds_by_hand(num_heads: int, causal: bool):
    """A control: a function that returns the hand-written computation
    as a closure (what the walk missed once: a judge built by a shipped
    function, never called by name)."""
    def judge(x: torch.Tensor, weights: dict) -> torch.Tensor:
        return _by_hand(x, weights, num_heads, causal)
    return judge


def _layer_by_hand(x: torch.Tensor, weights: dict, num_heads: int,
                   causal: bool) -> torch.Tensor:
    """A control: transformer_block's post-norm layer composed by hand
    around the attention its stub gives (what the reference's
    ``encoder_layer`` computed before red team 16's principle-10 round)."""
    from grader.assignments.transformer_block import reference

    def norm(t, name):
        return torch.nn.functional.layer_norm(
            t, t.shape[-1:], weights[f"{name}.weight"],
            weights[f"{name}.bias"])

    def linear(t, name):
        return torch.nn.functional.linear(t, weights[f"{name}.weight"],
                                          weights[f"{name}.bias"])

    h = norm(x + reference.attention(
        x, reference.sub(weights, "self_attention"), num_heads, causal),
        "norm1")
    return norm(h + linear(torch.relu(linear(h, "fcn.0")), "fcn.2"),
                "norm2")


@pytest.mark.parametrize("assignment", RELEASED)
def test_no_shipped_function_computes_an_answer_without_a_kernel(
        assignment):
    """Every function and method of every shipped plug-in module is
    called on the grading's cases with every argument it can be given
    (each flag flipped, each scale tried), the forbidden kernels
    tripped, and so is every function such a call returns (a closure it
    builds): none returns a task's correct answer. A function written by
    hand is caught, and so is one a function returns (the controls)."""
    modules = _modules(assignment)
    functions = _functions(modules)
    assert any(label.startswith("reference.") for label in functions)
    controls = {"multi_head_attention": {
        "control._by_hand": _by_hand,
        "control._builds_by_hand": _builds_by_hand},
        "transformer_block": {"control._layer_by_hand": _layer_by_hand}
    }.get(assignment, {})
    functions.update(controls)
    found = _offenders(functions, assignment, modules)
    assert found == set(controls)


#: Calls that normalise scores.
NORMALISERS = ("softmax", "Softmax", "log_softmax")
#: Calls that compute transformer_block's loss: no public test or file of
#: the student package makes one (the fork server's warm-up runs the
#: kernel once on unrelated values, in the generic grader).
LOSSES = ("cross_entropy", "CrossEntropyLoss", "nll_loss")


def _calls_softmax(tree: ast.AST, names: tuple[str, ...] = NORMALISERS
                   ) -> list[int]:
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and (
                getattr(node.func, "attr", None) in names
                or getattr(node.func, "id", None) in names)]


@pytest.mark.parametrize("assignment", RELEASED)
def test_no_other_shipped_file_normalises_scores(assignment):
    """Outside the plug-ins (checked by running them, above), no shipped
    Python file calls a softmax: the generic grader, the public tests and
    the student package hold no attention computation; and no public test
    or file of the student package computes a cross-entropy (red team 16:
    transformer_block's public test of the loss wrote the loss out). The
    one exception is the transformer_block stub's given
    MultiHeadSelfAttention, the previous homework's solution that the
    stub gives on purpose."""
    release = KIT / "assignment" / assignment
    files = {p: d for p, d in student_files(assignment).items()
             if p.suffix == ".py"}
    files.update({p.relative_to(release): p.read_bytes()
                  for p in release.rglob("*.py")})
    offenders = []
    for path, data in files.items():
        if path.parts[:2] == ("grader", "assignments"):
            continue
        tree = ast.parse(data)
        for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)
                    and n.name == "MultiHeadSelfAttention"
                    and assignment == "transformer_block"]:
            tree.body.remove(cls)
        offenders += [f"{path}:{line}" for line in _calls_softmax(
            tree, NORMALISERS + (() if path.parts[0] == "grader"
                                 else LOSSES))]
    assert offenders == []


def _child_names(assignment: str) -> set[str]:
    """The names of the modules the assignment's classes build (``self.<name>
    = ...(...)`` in an ``__init__`` of its reference solution): the
    student's sublayers, by contract."""
    module = get_assignment(assignment).module
    tree = ast.parse((KIT / "solutions" / f"{module}.py").read_text(
        encoding="utf-8"))
    names = set()
    for function in ast.walk(tree):
        if not (isinstance(function, ast.FunctionDef)
                and function.name == "__init__"):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and isinstance(
                    node.value, ast.Call):
                names.update(target.attr for target in node.targets
                             if isinstance(target, ast.Attribute)
                             and isinstance(target.value, ast.Name)
                             and target.value.id == "self")
    return names


def _shipped_checks(assignment: str) -> dict[str, str]:
    """The code that checks a student's work, as a student gets it: every
    Python file of the release's tests, and every code cell of its
    notebook that defines no class (a class cell is the stub, or the
    code the stub gives on purpose)."""
    release = KIT / "assignment" / assignment
    found = {str(path.relative_to(release)): path.read_text(
        encoding="utf-8") for path in sorted((release / "tests").rglob(
            "*.py"))}
    for notebook in release.glob("*.ipynb"):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "class " in source:
                continue
            text = "\n".join(line for line in source.splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            cell_id = cell["metadata"].get("nbgrader", {}).get(
                "grade_id", index)
            found[f"{notebook.name} cell {cell_id}"] = text
    return found


#: Cells that reproduce the course's own lecture code on purpose: the
#: lecture notes every student has print sa_v2's attention weights from
#: ``sa_v2.W_query(inputs)`` and ``sa_v2.W_key(inputs)``, and the cell
#: checks those printed numbers (the layers' creation order). The notes
#: give the whole SelfAttention_v2 besides; attention_basics asks for the
#: lecture's classes (docs/threat-model.md, principle 10, residual).
LECTURE = {("attention_basics",
            "attention_basics.ipynb cell public_test_self_attention_v2")}


@pytest.mark.parametrize("assignment", RELEASED)
def test_no_shipped_check_composes_the_students_modules(assignment):
    """A check that computes its expected value from the student's own
    sublayers (``layer.norm2(h + layer.fcn(h))``) writes the task's
    answer out for the student to hand in (red team 16: transformer_block's
    public tests did, 10 of 10 points). No public test file and no
    notebook cell outside the classes calls a sublayer of the contract;
    they compare with stored values, or call the student's whole module."""
    children = _child_names(assignment)
    assert children, assignment
    offenders = []
    for where, text in _shipped_checks(assignment).items():
        if (assignment, where) in LECTURE:
            continue
        offenders += [f"{where}:{node.lineno} calls .{node.func.attr}()"
                      for node in ast.walk(ast.parse(text))
                      if isinstance(node, ast.Call)
                      and isinstance(node.func, ast.Attribute)
                      and node.func.attr in children]
    assert offenders == []
