"""The public tests, run as a student runs them, on the reference and on
the untouched stub."""
from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run_public(tmp_path: Path, *extra: str):
    report = tmp_path / "junit.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/public", "-q",
         "-p", "no:cacheprovider", f"--junitxml={report}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    cases = ElementTree.parse(report).getroot().iter("testcase")
    return result, list(cases)


def test_public_tests_pass_on_the_reference(tmp_path):
    """Every public test passes against the reference solutions."""
    result, cases = _run_public(
        tmp_path, "--impl", "solutions/modeling_attention.py",
        "--basics-impl", "solutions/attention_basics.py")
    assert result.returncode == 0, result.stdout[-3000:]
    assert len(cases) >= 50
    assert all(list(case) == [] for case in cases)


def test_public_tests_fail_shortly_on_the_stub(tmp_path):
    """On the stub every test fails with one "not implemented yet" line."""
    result, cases = _run_public(tmp_path)
    assert result.returncode == 1
    assert len(cases) >= 20
    for case in cases:
        failures = case.findall("failure")
        assert failures, f"{case.get('name')} did not fail on the stub"
        message = failures[0].get("message", "").removeprefix("Failed: ")
        assert message.startswith("not implemented yet: Task "), message
        assert "\n" not in message
    assert "Traceback" not in result.stdout
    assert "raise NotImplementedError" not in result.stdout
