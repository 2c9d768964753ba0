"""Public tests of the warm-up homework "Attention from scratch":
``python -m pytest tests/public``.

They test ``transformer_lm.attention_basics`` unless ``--impl`` names
another module or file (see ``tests/public/conftest.py``).
"""
import pytest


@pytest.fixture(scope="session")
def homework_module() -> str:
    """The module these tests import unless ``--impl`` names another."""
    return "transformer_lm.attention_basics"
