"""The generic grader names no assignment, and its modules import cleanly.

* ``grader/*.py`` (outside ``grader/assignments/``) contains no assignment
  concept **in its code**: identifiers (names, attributes, definitions,
  arguments, keywords, imports) and string constants that are not
  docstrings. Comments and docstrings may use the homework as an example;
  code may not. A word of torch's own API (``torch.nn.Dropout``,
  ``F.dropout``) is the library's vocabulary, not the assignment's, unless
  it is attention itself (docs/architecture.md, "Generic modules").
* The values the kit shares are defined once (grader/constants.py).

The imports between modules (no cycle, each module alone) are
tests/kit/test_layout.py's.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

KIT = Path(__file__).resolve().parents[2]
GRADER = KIT / "grader"

#: Words of the assignments (any case; ``task3`` is a rubric's task id).
CONCEPT = re.compile(r"(?i)attention|causal|num_?heads?\b|head_?size|"
                     r"multi_?head|scaled_dot|sdpa|dropout|"
                     r"\btask_?\d|modeling_|transformer_?block")
#: Concepts that are never torch vocabulary, even where torch names them.
NEVER_LIBRARY = re.compile(r"(?i)attention|causal|num_?heads?\b|head_?size|"
                           r"multi_?head|scaled_dot|sdpa|\btask_?\d")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def generic_modules() -> list[Path]:
    """Every module of grader/ and its subpackages that is not an
    assignment's (grader/assignments/ holds the plug-ins)."""
    return sorted(path for path in GRADER.rglob("*.py")
                  if "assignments" not in path.relative_to(GRADER).parts)


def _torch_name(word: str) -> bool:
    return any(hasattr(holder, word) for holder in (
        torch, torch.nn, torch.nn.functional, torch.Tensor))


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or bare string
    statements (documentation, not code)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(
                node.value, ast.Constant) and isinstance(node.value.value,
                                                         str):
            found.add(id(node.value))
    return found


def _words_of_code(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, word) for every identifier and every word of a non-doc
    string constant."""
    docs = _docstrings(tree)
    words: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            words.append((line, node.id))
        elif isinstance(node, ast.Attribute):
            words.append((line, node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                               ast.ClassDef)):
            words.append((line, node.name))
        elif isinstance(node, ast.arg):
            words.append((line, node.arg))
        elif isinstance(node, ast.keyword) and node.arg:
            words.append((line, node.arg))
        elif isinstance(node, ast.alias):
            words += [(line, part) for part in
                      (node.name.split(".") + [node.asname or ""]) if part]
        elif isinstance(node, ast.Constant) and isinstance(
                node.value, str) and id(node) not in docs:
            words += [(line, word) for word in _WORD.findall(node.value)]
    return words


def concepts_in_code(text: str) -> list[tuple[int, str]]:
    """The assignment words the code of ``text`` uses, with their lines."""
    found = []
    for line, word in _words_of_code(ast.parse(text)):
        if not CONCEPT.search(word):
            continue
        if _torch_name(word) and not NEVER_LIBRARY.search(word):
            continue
        found.append((line, word))
    return sorted(set(found))


def test_the_scan_walks_every_subpackage() -> None:
    folders = {p.parent.relative_to(GRADER).as_posix()
               for p in generic_modules()}
    assert {".", "routes", "run", "worker", "shapes", "judge"} <= folders
    assert not [p for p in generic_modules() if "assignments" in p.parts]


@pytest.mark.parametrize("path", generic_modules(),
                         ids=lambda p: p.relative_to(GRADER).as_posix())
def test_a_generic_module_names_no_assignment_concept(path: Path) -> None:
    found = concepts_in_code(path.read_text(encoding="utf-8"))
    assert found == [], (f"{path.name} names assignment concepts in its "
                         f"code: {found}")


def sandbox_side() -> list[Path]:
    """The worker's modules and the wire they share with the trusted side."""
    return [GRADER / "wire.py", *sorted((GRADER / "worker").glob("*.py"))]


@pytest.mark.parametrize("path", sandbox_side(),
                         ids=lambda p: p.relative_to(GRADER).as_posix())
def test_the_sandbox_side_names_no_concept_even_as_torch_names(
        path: Path) -> None:
    """Not even torch's vocabulary (``nn.Dropout``): what the worker knows
    of an assignment's library classes is the rubric's ``[sandbox]``
    table, which the job carries."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = sorted({(line, word) for line, word in _words_of_code(tree)
                    if CONCEPT.search(word)})
    assert found == [], f"{path.name} names assignment concepts: {found}"


def test_the_scan_sees_code_and_skips_documentation() -> None:
    text = '''"""Docstring: SelfAttention, causal, num_heads."""
import torch  # a comment: scaled_dot_product_attention

def f(x, num_heads):
    """dropout in a docstring is fine."""
    y = torch.nn.functional.dropout(x, 0.5)
    layer = torch.nn.Dropout(0.1)
    message = "write the attention yourself"
    return run["task2"], x.causal, dropout_rate, SelfAttention
'''
    words = {word for _, word in concepts_in_code(text)}
    assert words == {"num_heads", "attention", "task2", "causal",
                     "dropout_rate", "SelfAttention"}
    torch_api = "torch.nn.functional.scaled_dot_product_attention(q, k, v)"
    assert [w for _, w in concepts_in_code(torch_api)] == [
        "scaled_dot_product_attention"]


# --------------------------------------------------------------------------
# Shared constants


def test_the_torch_pin_is_the_one_of_grader_constants_everywhere() -> None:
    """The pin is defined once (grader/constants.py); the texts that must
    spell it out (the README's quick start, CI, the docs) spell it the
    same."""
    from grader.constants import TORCH_VERSION

    texts = [KIT / "README.md", KIT / ".ci" / "run",
             *sorted((KIT / "docs").glob("*.md"))]
    pins = {(path.name, pin) for path in texts for pin in re.findall(
        r"torch==([0-9][0-9.]*[0-9])", path.read_text(encoding="utf-8"))}
    assert ("README.md", TORCH_VERSION) in pins
    assert [p for p in pins if p[1] != TORCH_VERSION] == []


def test_shared_values_are_defined_in_one_module() -> None:
    """No grader module assigns a shared constant of its own."""
    shared = ("TORCH_VERSION", "TORCH_CPU_INDEX", "SEED_ENV", "DEFAULT_SEED",
              "START_MARKER", "END_MARKER", "NBGRADER_MARKERS")
    defined = []
    for path in [*generic_modules(), *sorted((KIT / "solutions").glob(
            "*.py"))]:
        if path.name == "constants.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, ast.AnnAssign)
                       else [])
            defined += [(path.name, t.id) for t in targets
                        if isinstance(t, ast.Name) and t.id in shared]
    assert defined == []
