"""The seam between the public tests and the implementation under test.

Each assignment's public tests live in a folder of their own,
``tests/public/<assignment>/``, whose ``conftest.py`` names the module
they test (``homework_module``). A homework ships only its own folder, so
in a homework::

    python -m pytest tests/public

runs that homework's tests only. ``--impl`` tests another implementation,
given as a module name or a file path (the kit runs the same tests
against its reference solutions this way, one folder at a time)::

    python -m pytest tests/public --impl path/to/modeling_attention.py

A method that still raises ``NotImplementedError`` fails its tests with one
short line saying which task is not written yet, not a traceback.
"""
from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

HERE = Path(__file__).resolve().parent
# The homework's root: where its ``transformer_lm`` package is.
ROOT = HERE.parents[1]
for folder in (ROOT, HERE):  # the package, and the shared adapters
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

IMPL_ENV = "TRANSFORMER_LM_IMPL"

# Speed, not behaviour. torch's own objects are never garbage: out of the
# garbage collector's sight (gc.freeze), pytest's collections at the end
# of the session cost nothing instead of walking torch's heap. And
# torch.testing.assert_close looks for distributed tensors, importing
# torch.distributed.tensor on its first call (a third of the cost of
# importing torch); these tests never compare one.
gc.freeze()
_COMPARISON = importlib.import_module("torch.testing._comparison")
if getattr(_COMPARISON, "_HAS_DTENSOR", False):
    _COMPARISON._HAS_DTENSOR = False


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--impl``."""
    parser.addoption(
        "--impl", default=os.environ.get(IMPL_ENV),
        help="the module (dotted name or .py path) the public tests "
             "import (default: the homework's own transformer_lm module, "
             f"or ${IMPL_ENV})")


def load_module(impl: str) -> ModuleType:
    """Import ``impl``: a dotted module name or the path of a .py file."""
    if impl.endswith(".py"):
        path = Path(impl).resolve()
        spec = importlib.util.spec_from_file_location(
            "impl_under_test", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(impl)


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """``--impl`` names one implementation: refuse, in one line, to run
    it against the tests of several assignments at once."""
    if not config.getoption("impl"):
        return
    mine = [item.path for item in items if HERE in item.path.parents]
    folders = sorted({path.relative_to(HERE).parts[0] for path in mine
                      if path.parent != HERE})
    if len(folders) > 1:
        raise pytest.UsageError(
            f"--impl tests one implementation, but these tests belong to "
            f"{len(folders)} assignments ({', '.join(folders)}): run one "
            f"folder, e.g. python -m pytest tests/public/{folders[0]} "
            f"--impl FILE")


@pytest.fixture(scope="module")
def impl(pytestconfig: pytest.Config, homework_module: str) -> ModuleType:
    """The module under test (``--impl``, else the folder's
    ``homework_module``); a clear one-line failure if it won't import."""
    name = pytestconfig.getoption("impl") or homework_module
    try:
        return load_module(name)
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
