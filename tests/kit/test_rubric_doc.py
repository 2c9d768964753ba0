"""docs/rubric.md is the kit's own contract, and it agrees with the data.

Each assignment's section has its item table (id, points) and its
diagnosis table; both must list exactly what the assignment's
``rubric.toml`` holds, in the same order, with the same points. Nothing in
the kit cites a contract outside it (the course's upper-case rubric file,
which a clone of the kit does not have).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from grader.plugin import plugins

KIT = Path(__file__).resolve().parents[2]
DOC = KIT / "docs" / "rubric.md"


def table_after(text: str, marker: str) -> list[list[str]]:
    """The rows (cells) of the markdown table right after ``marker``."""
    start = text.index(marker) + len(marker)
    rows = []
    for line in text[start:].lstrip("\n").splitlines():
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    return rows[1:]  # without the header


@pytest.mark.parametrize("plugin", plugins(), ids=lambda p: p.id)
def test_the_item_table_is_the_rubric(plugin) -> None:
    text = DOC.read_text(encoding="utf-8")
    marker = f"<!-- items: {plugin.id} -->"
    assert marker in text, f"docs/rubric.md has no item table of {plugin.id}"
    rows = table_after(text, marker)
    documented = [(row[0], float(row[1])) for row in rows]
    assert documented == [(item.id, item.points)
                          for item in plugin.rubric.items]


@pytest.mark.parametrize("plugin", plugins(), ids=lambda p: p.id)
def test_the_diagnosis_table_is_the_rubric(plugin) -> None:
    text = DOC.read_text(encoding="utf-8")
    marker = f"<!-- diagnoses: {plugin.id} -->"
    assert marker in text
    documented = [row[0] for row in table_after(text, marker)]
    assert documented == list(plugin.rubric.diagnoses)


def test_the_table_reader_reads_a_table() -> None:
    text = "x\n<!-- m -->\n| id | points |\n|---|---|\n| a.b | -0.5 |\n\nz"
    assert table_after(text, "<!-- m -->") == [["a.b", "-0.5"]]


def test_nothing_in_the_kit_cites_a_contract_outside_it() -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=KIT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    pattern = re.compile(r"RUBRIC\.md")
    found = []
    for name in files:
        path = KIT / name
        if not name or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{name}:{n}" for n, line in
                  enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert found == []
