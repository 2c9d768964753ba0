"""The seam between the public tests and the implementation under test.

By default the public tests import your ``transformer_lm.modeling_attention``.
``--impl`` chooses another implementation, as a module name or a file path
(the kit runs these same tests against its reference solution this way)::

    python -m pytest tests/public
    python -m pytest tests/public --impl path/to/modeling_attention.py

The warm-up assignment's tests (``test_attention_basics.py``) import
``transformer_lm.attention_basics`` the same way; ``--basics-impl`` chooses
another implementation of it::

    python -m pytest tests/public --basics-impl path/to/attention_basics.py

A method that still raises ``NotImplementedError`` fails its tests with one
short line saying which task is not written yet, not a traceback.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_IMPL = "transformer_lm.modeling_attention"
DEFAULT_BASICS_IMPL = "transformer_lm.attention_basics"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--impl`` and ``--basics-impl``."""
    parser.addoption(
        "--impl", default=os.environ.get("TRANSFORMER_LM_IMPL",
                                         DEFAULT_IMPL),
        help="the module (dotted name or .py path) whose SelfAttention and "
             "MultiHeadSelfAttention are tested (default: "
             f"{DEFAULT_IMPL}, or $TRANSFORMER_LM_IMPL)")
    parser.addoption(
        "--basics-impl", default=os.environ.get("ATTENTION_BASICS_IMPL",
                                                DEFAULT_BASICS_IMPL),
        help="the module (dotted name or .py path) whose attention_basics "
             "functions and classes are tested (default: "
             f"{DEFAULT_BASICS_IMPL}, or $ATTENTION_BASICS_IMPL)")


def _load(impl: str) -> ModuleType:
    if impl.endswith(".py"):
        path = Path(impl).resolve()
        spec = importlib.util.spec_from_file_location(
            "impl_under_test", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(impl)


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> ModuleType:
    """The module under test; a clear one-line failure if it won't import."""
    name = pytestconfig.getoption("impl")
    try:
        return _load(name)
    except Exception as exc:  # the student's module may raise anything
        pytest.fail(f"cannot import {name}: {type(exc).__name__}: {exc}",
                    pytrace=False)


@pytest.fixture(scope="session")
def basics(pytestconfig: pytest.Config) -> ModuleType:
    """The attention_basics module under test (``--basics-impl``)."""
    name = pytestconfig.getoption("basics_impl")
    try:
        return _load(name)
    except Exception as exc:  # the student's module may raise anything
        pytest.fail(f"cannot import {name}: {type(exc).__name__}: {exc}",
                    pytrace=False)


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    """Same random inputs on every run; one thread (tiny tensors)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Turn a stub's NotImplementedError into one actionable line."""
    try:
        return (yield)
    except NotImplementedError as exc:
        where = str(exc) or "a method"
    # Raised outside the except block, so no exception chain is printed.
    pytest.fail(f"not implemented yet: {where}. Write it between "
                f"'# YOUR CODE STARTS HERE' and '# YOUR CODE ENDS HERE'.",
                pytrace=False)
