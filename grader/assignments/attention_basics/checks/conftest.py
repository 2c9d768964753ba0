"""Fixtures of this assignment's checks beyond the engine's task1/task2.

The engine's checks plugin provides ``task1``, ``task2`` and ``runs`` (every
task's observations, by id); tasks 3 to 7 are taken from ``runs``.
"""
import pytest

from grader.observe import TaskRun


@pytest.fixture
def task3(runs: dict[str, TaskRun]) -> TaskRun:
    """Observations of task 3 (SelfAttention_v2)."""
    return runs["task3"]


@pytest.fixture
def task4(runs: dict[str, TaskRun]) -> TaskRun:
    """Observations of task 4 (CausalAttention)."""
    return runs["task4"]


@pytest.fixture
def task5(runs: dict[str, TaskRun]) -> TaskRun:
    """Observations of task 5 (MultiHeadAttentionWrapper)."""
    return runs["task5"]


@pytest.fixture
def task6(runs: dict[str, TaskRun]) -> TaskRun:
    """Observations of task 6 (MultiHeadAttention)."""
    return runs["task6"]


@pytest.fixture
def task7(runs: dict[str, TaskRun]) -> TaskRun:
    """Observations of task 7 (QKVMultiheadAttention)."""
    return runs["task7"]
