"""Where the build reads and writes (the single source in ``solutions/``,
the student package, the public tests), and what every builder shares."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.errors import GraderError

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
PACKAGE = ROOT / "transformer_lm"
PUBLIC_TESTS = ROOT / "tests" / "public"


class BuildError(GraderError):
    """The single source is malformed (e.g. unbalanced solution markers)."""


@dataclass(frozen=True)
class Generated:
    """A generated file: where it goes and how to produce its text."""

    path: Path
    produce: Callable[[], str]


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
