"""Near-miss names (issue 16): a missing graded name points at the
definition that was most likely meant (grader/analyse/static.py). Scores stay
0:
the contract's names are fixed. Graded end to end in test_learners.py."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from grader.analyse.static import NearMiss, near_miss
from grader.locate.source import SourceFile
from grader.rubric import get_assignment

WARM_UP = get_assignment("attention_basics")
TARGETS = {task.target for task in WARM_UP.tasks}

CODE = textwrap.dedent("""
    class CausalSelfAttention:
        pass


    class SelfAttentionV1:
        pass


    class SelfAttention_v2:
        pass


    class MultiheadAttentionWrapper:
        pass


    def simple_attention(inputs):
        return inputs


    class SimpleSelfAttention:
        pass


    def build():
        class MultiHeadAttention:
            pass
        return MultiHeadAttention


    class Tokenizer:
        pass
    """)
TREE = ast.parse(CODE)


def miss(target: str) -> NearMiss | None:
    """The near miss of a warm-up target in CODE."""
    kind = ast.FunctionDef if target[0].islower() else ast.ClassDef
    return near_miss(TREE, target, kind, frozenset(TARGETS - {target}))


@pytest.mark.parametrize("target,found", [
    ("CausalAttention", NearMiss("CausalSelfAttention", 2)),
    ("SelfAttention_v1", NearMiss("SelfAttentionV1", 6)),
    ("MultiHeadAttentionWrapper", NearMiss("MultiheadAttentionWrapper", 14)),
    ("MultiHeadAttention", NearMiss("MultiHeadAttention", 27, "build")),
    ("simple_self_attention", NearMiss("simple_attention", 18)),
    ("QKVMultiheadAttention", None),
])
def test_the_closest_definition_is_proposed(target: str,
                                            found: NearMiss | None) -> None:
    """Alike names (case and underscores aside), a graded name nested in a
    function, a function for a function; never another task's class (the
    wrapper's near miss is not MultiHeadAttention's), never a class for a
    function."""
    assert miss(target) == found


def test_the_sentence_names_both() -> None:
    """What the item says: where the definition is and what is asked."""
    source = SourceFile(text=CODE, path=Path("/tmp/x.py"))
    assert miss("CausalAttention").sentence(source, "CausalAttention") == (
        "found `CausalSelfAttention` at line 2; the assignment asks for "
        "`CausalAttention`")
    assert miss("MultiHeadAttention").sentence(
        source, "MultiHeadAttention") == (
        "found `MultiHeadAttention` at line 27, inside `build`; the "
        "assignment asks for `MultiHeadAttention` at the top level of the "
        "file")


SDPA = "scaled_dot_product_attention"
OWN_HELPER = f"""
def {SDPA}(q, k, v):
    return q


class Model:
    def multi_head_attention_forward(self, x):
        return x

    def forward(self, x):
        return self.multi_head_attention_forward({SDPA}(x, x, x))
"""


@pytest.mark.parametrize("rebinding", [
    "", f"{SDPA} = 1", f"import torch.nn.functional.{SDPA}",
    f"from torch.nn.functional import {SDPA}",
    f"def g({SDPA}):\n    return {SDPA}",
    f"for {SDPA} in ():\n    pass", f"global {SDPA}",
    f"x = getattr(object, '{SDPA}', None)",
    "self.multi_head_attention_forward = None"])
def test_only_a_name_the_file_binds_by_def_alone_is_its_own(
        rebinding: str) -> None:
    """A helper named like a forbidden kernel is the file's own code; a
    name bound any other way (an import, an assignment, a parameter, a
    loop target, ``global``, a string, an attribute stored) is not."""
    from grader.analyse.static import forbidden_uses, own_definitions

    tree = ast.parse(OWN_HELPER + rebinding + "\n")
    own = own_definitions(tree)
    forbidden = frozenset({SDPA, "multi_head_attention_forward"})
    model = next(node for node in tree.body
                 if isinstance(node, ast.ClassDef))
    found = set(forbidden_uses(model, forbidden, own))
    method_rebound = "self." in rebinding
    assert (SDPA in found) == (bool(rebinding) and not method_rebound)
    assert ("multi_head_attention_forward" in found) == method_rebound


OWN_STATIC = f"""
import torch.nn.functional as F


class Model:
    @staticmethod
    def {SDPA}(q, k, v):
        return q

    def forward(self, x):
        return CALL
"""


@pytest.mark.parametrize("call, rebinding, forbidden_named", [
    (f"Model.{SDPA}(x, x, x)", "", False),
    (f"Model.{SDPA}(x, x, x)", f"Model.{SDPA} = F.{SDPA}", True),
    (f"Model.{SDPA}(x, x, x)", "Model = F", True),
    (f"F.{SDPA}(x, x, x)", "", True),
    (f"Other.{SDPA}(x, x, x)", "", True)])
def test_a_static_helper_called_through_its_own_class_is_its_own(
        call: str, rebinding: str, forbidden_named: bool) -> None:
    """``Model.helper(...)`` reaches the file's own code when both names
    are the file's own (bound by ``def``/``class`` alone); through an
    import, another name, or a class or attribute rebound anywhere, the
    name counts as the forbidden API."""
    from grader.analyse.static import forbidden_uses, own_definitions

    tree = ast.parse(OWN_STATIC.replace("CALL", call) + rebinding + "\n")
    model = next(node for node in tree.body
                 if isinstance(node, ast.ClassDef))
    found = forbidden_uses(model, frozenset({SDPA}), own_definitions(tree))
    assert (SDPA in found) == forbidden_named
