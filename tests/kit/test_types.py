"""mypy over the kit's code with the [mypy] section of setup.cfg.

The kit type-checks clean, and a planted type error makes mypy fail (so
the first test can fail). Skipped when mypy is not installed (the ``dev``
extra installs it).
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (pip install -e '.[dev]')")


def _mypy(cwd: Path, cache: Path, *targets: str
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "setup.cfg",
         "--cache-dir", str(cache), *targets],
        cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_kit_type_checks(tmp_path: Path) -> None:
    result = _mypy(KIT, tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


def test_a_planted_type_error_fails(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    (kit / "grader" / "run").mkdir(parents=True)
    shutil.copy(KIT / "setup.cfg", kit / "setup.cfg")
    (kit / "grader" / "__init__.py").write_text("")
    (kit / "grader" / "run" / "__init__.py").write_text("")
    module = kit / "grader" / "run" / "cores.py"
    shutil.copy(KIT / "grader" / "run" / "cores.py", module)
    clean = _mypy(kit, tmp_path / "cache", "grader/run/cores.py")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    module.write_text(module.read_text() + "\n\ndef _planted() -> int:\n"
                      "    return 'not an int'\n")
    planted = _mypy(kit, tmp_path / "cache", "grader/run/cores.py")
    assert planted.returncode == 1, planted.stdout + planted.stderr
    assert "cores.py" in planted.stdout
    assert "Incompatible return value type" in planted.stdout
