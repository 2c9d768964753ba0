"""Public tests of the homework "Self-attention and multi-head
self-attention": ``python -m pytest tests/public``.

They test ``transformer_lm.modeling_attention`` unless ``--impl`` names
another module or file (see ``tests/public/conftest.py``).
"""
import pytest


@pytest.fixture(scope="session")
def homework_module() -> str:
    """The module these tests import unless ``--impl`` names another."""
    return "transformer_lm.modeling_attention"
