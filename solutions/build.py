"""Generate every student-facing copy from the single source in solutions/.

Usage::

    python -m solutions.build           # rewrite every generated file
    python -m solutions.build --check   # list stale files, exit 1 if any
    python -m solutions.build student-repo ASSIGNMENT OUT_DIR
                                        # see solutions/student_repo.py

The reference solutions ``solutions/<module>.py`` are the single source. From
them this command writes the student stubs ``transformer_lm/<module>.py``
(every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block becomes
``raise NotImplementedError``), the public test values
``transformer_lm/test_values.py`` and, when their generators are present,
the notebooks. Generated files are committed; a test fails when one is stale.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import json
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
PACKAGE = ROOT / "transformer_lm"
DATA_2022 = SOLUTIONS / "data" / "hw4_2022_test_values.json"
PUBLIC_TESTS = ROOT / "tests" / "public"

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
_TASK_HEADER = re.compile(r"#\s*(Task\s+\d+(?:\.\d+)?)\b")
MAX_LINE = 79


class BuildError(Exception):
    """The single source is malformed (e.g. unbalanced solution markers)."""


@dataclass(frozen=True)
class Generated:
    """A generated file: where it goes and how to produce its text."""

    path: Path
    produce: Callable[[], str]


# --------------------------------------------------------------------------
# Student stubs


def _functions_by_line(tree: ast.Module) -> dict[int, str]:
    """Map each line inside a function to its qualified name."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, ast.FunctionDef):
                    for line in range(child.lineno, child.end_lineno + 1):
                        names[line] = name
                visit(child, name + ".")

    visit(tree, "")
    return names


def _raise_lines(indent: str, label: str) -> list[str]:
    line = f'{indent}raise NotImplementedError("{label}")'
    if len(line) <= MAX_LINE:
        return [line]
    return [f"{indent}raise NotImplementedError(",
            f'{indent}    "{label}")']


def make_stub(text: str, name: str = "<reference>") -> str:
    """Replace every solution block with ``raise NotImplementedError``.

    The message names the task (from the nearest ``# Task N.M`` comment
    above the block) and the function, e.g. ``"Task 1.2:
    SelfAttention.forward"``.
    """
    functions = _functions_by_line(ast.parse(text))
    out: list[str] = []
    task = None
    begin_line = None
    for number, line in enumerate(text.split("\n"), start=1):
        header = _TASK_HEADER.search(line)
        if header and line.lstrip().startswith("#") and begin_line is None:
            task = header.group(1)
        if BEGIN in line:
            if begin_line is not None:
                raise BuildError(f"{name}:{number}: nested {BEGIN}")
            begin_line = number
            where = functions.get(number)
            if where is None or task is None:
                raise BuildError(f"{name}:{number}: a solution block must "
                                 f"be inside a function, below a "
                                 f"'# Task N.M' header")
            indent = line[:len(line) - len(line.lstrip())]
            out.extend(_raise_lines(indent, f"{task}: {where}"))
        elif END in line:
            if begin_line is None:
                raise BuildError(f"{name}:{number}: {END} without {BEGIN}")
            begin_line = None
        elif begin_line is None:
            out.append(line)
    if begin_line is not None:
        raise BuildError(f"{name}:{begin_line}: {BEGIN} without {END}")
    return "\n".join(out)


def solution_blocks(text: str) -> list[str]:
    """The text of every solution block (used to check nothing leaks)."""
    blocks, current = [], None
    for line in text.split("\n"):
        if BEGIN in line:
            current = []
        elif END in line and current is not None:
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


# --------------------------------------------------------------------------
# Public test values


def _load_reference(module: str):
    """Import ``solutions.<module>`` (the trusted reference)."""
    return importlib.import_module(f"solutions.{module}")


def _float32_literal(value: float) -> str:
    """The shortest decimal that reads back as the same float32."""
    return np.format_float_positional(np.float32(value), unique=True,
                                      trim="0")


def _tensor_literal(name: str, tensor: torch.Tensor) -> list[str]:
    values = [_float32_literal(v) for v in
              tensor.detach().to(torch.float32).flatten().tolist()]
    shape = tuple(tensor.shape)
    lines = [f"    {name} = _Stored("]
    lines.append(f"        {shape!r},")
    lines.append("        (")
    row: list[str] = []
    for value in values:
        candidate = ", ".join(row + [value]) + ","
        if row and len("            " + candidate) > MAX_LINE:
            lines.append("            " + ", ".join(row) + ",")
            row = []
        row.append(value)
    if row:
        lines.append("            " + ", ".join(row) + ",")
    lines.append("        ))")
    return lines


def _as_tensor(entry: dict) -> torch.Tensor:
    return torch.tensor(entry["values"], dtype=torch.float32).reshape(
        entry["shape"])


def _linear_names(with_mix: bool) -> list[str]:
    names = ["q", "k", "v"] + (["mix"] if with_mix else [])
    return [f"{n}_{p}" for n in names for p in ("weight", "bias")]


def _load_weights(model: torch.nn.Module, tensors: dict) -> None:
    for name, tensor in tensors.items():
        layer, kind = name.rsplit("_", 1)
        getattr(getattr(model, layer), kind).data = tensor.to(torch.float64)


def _distinct_case() -> dict[str, torch.Tensor]:
    """Literal inputs and weights for sizes that are all different.

    Drawn once from Python's own ``random`` (stable across versions and
    platforms), rounded to 4 decimals, and stored as literals.
    """
    rng = random.Random(20241122)
    batch, seq, input_size, hidden = 2, 5, 7, 12

    def uniform(*shape: int, bound: float) -> torch.Tensor:
        count = int(np.prod(shape))
        return torch.tensor([round(rng.uniform(-bound, bound), 4)
                             for _ in range(count)]).reshape(shape)

    case = {"x": torch.tensor([round(rng.gauss(0.0, 1.0), 4)
                               for _ in range(batch * seq * input_size)]
                              ).reshape(batch, seq, input_size)}
    for layer, fan_in in (("q", input_size), ("k", input_size),
                          ("v", input_size), ("mix", hidden)):
        bound = 1 / fan_in ** 0.5
        case[f"{layer}_weight"] = uniform(hidden, fan_in, bound=bound)
        case[f"{layer}_bias"] = uniform(hidden, bound=bound)
    return case


def _mha_outputs(reference, sizes: dict, tensors: dict) -> dict:
    outputs = {}
    for causal, suffix in ((False, ""), (True, "_causal")):
        model = reference.MultiHeadSelfAttention(
            sizes["input_size"], sizes["hidden"], sizes["num_heads"],
            causal=causal).double().eval()
        _load_weights(model, {k: v for k, v in tensors.items() if k != "x"})
        with torch.no_grad():
            att, probs = model(tensors["x"].double(), return_attention=True)
        outputs["output" + suffix] = att
        outputs["probs" + suffix] = probs
    return outputs


_TEST_VALUES_HEADER = '''\
"""Public test values for the attention homework.

GENERATED by ``python -m solutions.build`` from the reference solution; do
not edit by hand (a test fails when this file is stale).

Every attribute access returns a fresh float32 tensor, so an in-place edit of
a model weight (``model.k.weight.data = SelfAttentionTestValues.k_weight``
followed by an in-place update) can never corrupt the values of the next
test. Inputs and weights are literals, not random draws, so they are the same
on every platform and torch version; expected outputs were computed by the
reference solution in float64 and are stored at full float32 precision.

``SelfAttentionTestValues`` and ``MultiHeadAttentionTestValues`` keep the
names, shapes, inputs and weights of the original 2022 kit (UMass Lowell Text
Machine Lab NLP class, HW4, Copyright 2022 Vladislav Lialin and Namrata
Shivagunde, Apache License 2.0; see NOTICE).
``MultiHeadAttentionDistinctTestValues`` uses sizes that are all different
(batch 2, seq 5, input 7, hidden 12, heads 3, head size 4), so that a mix-up
of the batch, head and head-size axes cannot hide behind equal sizes.
"""
import torch


class _Stored:
    """A stored tensor; every access returns a new float32 copy."""

    def __init__(self, shape: tuple[int, ...],
                 values: tuple[float, ...]) -> None:
        self._shape = shape
        self._values = values

    def __get__(self, instance: object, owner: type) -> torch.Tensor:
        return torch.tensor(self._values,
                            dtype=torch.float32).reshape(self._shape)
'''


def _values_class(name: str, doc: str, sizes: dict,
                  tensors: dict[str, torch.Tensor]) -> list[str]:
    lines = ["", "", f"class {name}:", f'    """{doc}"""', ""]
    for key, value in sizes.items():
        lines.append(f"    {key} = {value}")
    for key, tensor in tensors.items():
        lines.extend(_tensor_literal(key, tensor))
    return lines


def make_test_values() -> str:
    """The text of ``transformer_lm/test_values.py``."""
    reference = _load_reference("modeling_attention")
    data = json.loads(DATA_2022.read_text(encoding="utf-8"))
    lines = _TEST_VALUES_HEADER.rstrip("\n").split("\n")

    single = data["SelfAttentionTestValues"]
    tensors = {"x": _as_tensor(single["x"])}
    tensors.update({n: _as_tensor(single[n]) for n in _linear_names(False)})
    model = reference.SelfAttention(single["input_size"],
                                    single["hidden"]).double().eval()
    _load_weights(model, {k: v for k, v in tensors.items() if k != "x"})
    with torch.no_grad():
        tensors["output"] = model(tensors["x"].double())
    sizes = {"batch_size": 3, "seq_len": 5,
             "input_size": single["input_size"], "hidden": single["hidden"]}
    lines += _values_class(
        "SelfAttentionTestValues",
        "SelfAttention(input_size=7, hidden=9) on x of shape (3, 5, 7).",
        sizes, tensors)

    multi = data["MultiHeadAttentionTestValues"]
    sizes = {"batch_size": 3, "seq_len": 5,
             "input_size": multi["input_size"], "hidden": multi["hidden"],
             "num_heads": multi["num_heads"]}
    tensors = {"x": _as_tensor(multi["x"])}
    tensors.update({n: _as_tensor(multi[n]) for n in _linear_names(True)})
    tensors.update(_mha_outputs(reference, sizes, tensors))
    lines += _values_class(
        "MultiHeadAttentionTestValues",
        "MultiHeadSelfAttention(7, 9, num_heads=3) on x of shape "
        "(3, 5, 7).\n\n    ``output``/``probs``: causal=False; "
        "``output_causal``/``probs_causal``:\n    causal=True. probs are "
        "[batch_size * num_heads, seq_len, seq_len].\n    ",
        sizes, tensors)

    sizes = {"batch_size": 2, "seq_len": 5, "input_size": 7, "hidden": 12,
             "num_heads": 3}
    tensors = _distinct_case()
    tensors.update(_mha_outputs(reference, sizes, tensors))
    lines += _values_class(
        "MultiHeadAttentionDistinctTestValues",
        "MultiHeadSelfAttention(7, 12, num_heads=3) on x of shape "
        "(2, 5, 7).\n\n    Every size differs (head_size = 4), so an "
        "axis mix-up changes the shape\n    or the values. Same fields "
        "as MultiHeadAttentionTestValues.\n    ",
        sizes, tensors)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# The grader's flake8 configuration


def make_flake8_config() -> str:
    """``grader/flake8.cfg``: the ``[flake8]`` section of ``setup.cfg``.

    The grader ships this copy so that it lints with the kit's rules even
    where ``setup.cfg`` is absent (an installed wheel, a Gradescope bundle).
    """
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    lines = ["# GENERATED by python -m solutions.build from the [flake8] "
             "section of", "# setup.cfg: the rules PEP-8 grading uses. "
             "Edit setup.cfg, not this file.", "[flake8]"]
    for key, value in parser["flake8"].items():
        value = "\n    ".join(v.strip() for v in value.strip().split("\n"))
        lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# The public tests a homework ships

_NOT_SHIPPED = ("__pycache__", ".pytest_cache")


def public_test_files(folder_name: str) -> dict[Path, bytes]:
    """The public tests a homework ships, by path relative to the kit root.

    The seam every assignment shares (the files directly in
    ``tests/public/``: its conftest and adapters) and the assignment's own
    folder ``tests/public/<folder_name>/``, never another assignment's, so
    that ``python -m pytest tests/public`` in the homework runs its tests
    only. ``folder_name`` is the rubric's ``public_tests`` ("" for none).
    """
    if not folder_name:
        return {}
    own = PUBLIC_TESTS / folder_name
    if not own.is_dir():
        raise BuildError(f"no public tests in {own.relative_to(ROOT)}/")
    paths = [p for p in PUBLIC_TESTS.iterdir() if p.is_file()]
    paths += [p for p in own.rglob("*") if p.is_file()]
    return {path.relative_to(ROOT): path.read_bytes()
            for path in sorted(paths)
            if not any(part in _NOT_SHIPPED for part in path.parts)
            and path.suffix not in (".pyc", ".pyo")}


# --------------------------------------------------------------------------
# The list of generated files


def _stub_targets() -> list[Generated]:
    from grader.rubric import assignments

    targets = []
    for assignment in assignments():
        source = SOLUTIONS / f"{assignment.module}.py"
        if not source.is_file():
            continue
        produce = (lambda source=source: make_stub(
            source.read_text(encoding="utf-8"), str(source)))
        targets.append(Generated(PACKAGE / f"{assignment.module}.py",
                                 produce))
        # The grader's own copy of the released stub: code outside the
        # YOUR CODE markers that matches it is the kit's given code (see
        # grader.source.student_code), whatever the submission's folder
        # holds as transformer_lm/.
        targets.append(Generated(
            ROOT / "grader" / "assignments" / assignment.id / "stub.py",
            produce))
    return targets


def generated_files() -> list[Generated]:
    """Every generated file, with the function that produces it."""
    targets = _stub_targets()
    targets.append(Generated(PACKAGE / "test_values.py", make_test_values))
    targets.append(Generated(ROOT / "grader" / "flake8.cfg",
                             make_flake8_config))
    if not (SOLUTIONS / "notebook_build.py").is_file():
        return targets
    from solutions import notebook_build

    return targets + notebook_build.generated_files()


def stale_files() -> list[Path]:
    """Generated files whose committed text differs from a fresh build."""
    stale = []
    for target in generated_files():
        current = (target.path.read_text(encoding="utf-8")
                   if target.path.is_file() else None)
        if current != target.produce():
            stale.append(target.path)
    return stale


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["student-repo"]:
        from solutions import student_repo

        return student_repo.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m solutions.build",
        description="Regenerate the student stubs, the public test values "
                    "and the notebooks from the reference solutions.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; list stale generated files and "
                             "exit 1 if there are any")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)}")
        if stale:
            print("run: python -m solutions.build")
        return 1 if stale else 0
    for target in generated_files():
        text = target.produce()
        target.path.parent.mkdir(parents=True, exist_ok=True)
        old = (target.path.read_text(encoding="utf-8")
               if target.path.is_file() else None)
        if old != text:
            target.path.write_text(text, encoding="utf-8")
            print(f"wrote {target.path.relative_to(ROOT)}")
        else:
            print(f"unchanged {target.path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
