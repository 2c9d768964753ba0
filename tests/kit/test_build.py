"""The single source: generated files are fresh, and no solution leaks.

Students receive ``transformer_lm/`` and ``assignment/``; both are generated
from ``solutions/`` by ``python -m solutions.build``.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grader.rubric import assignments, get_assignment
from solutions import build, paths, stubs

ROOT = Path(__file__).resolve().parents[2]
STUDENT_FOLDERS = (ROOT / "transformer_lm", ROOT / "assignment")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_file_is_fresh():
    """A committed generated file that differs from a rebuild is stale."""
    stale = [str(p.relative_to(ROOT)) for p in build.stale_files()]
    assert stale == [], (f"stale generated files {stale}: run "
                         f"python -m solutions.build")


def test_build_check_mode_reports_staleness(tmp_path, monkeypatch):
    """``--check`` exits 1 and names a stale file; 0 when all are fresh."""
    target = tmp_path / "generated.py"
    target.write_text("old\n")
    monkeypatch.setattr(build, "generated_files", lambda: [
        build.Generated(target, lambda: "new\n")])
    monkeypatch.setattr(build, "ROOT", tmp_path)
    assert build.main(["--check"]) == 1
    assert target.read_text() == "old\n"
    assert build.main([]) == 0
    assert target.read_text() == "new\n"
    assert build.main(["--check"]) == 0


def _solution_only_lines() -> dict[str, list[str]]:
    """Per reference: lines that occur only inside solution blocks.

    A line that any stub gives away (given code) is not a secret.
    """
    from grader.rubric import assignments

    references = [ROOT / "solutions" / f"{a.module}.py"
                  for a in assignments()]
    given = {line.strip() for reference in references
             for line in build.make_stub(reference.read_text()).split("\n")}
    found = {}
    for reference in references:
        blocks = stubs.solution_blocks(reference.read_text())
        lines = {line.strip() for block in blocks
                 for line in block.split("\n")}
        found[reference.name] = sorted(
            line for line in lines
            if line and line not in given and not line.startswith("#"))
    return found


def _student_texts() -> list[tuple[Path, str]]:
    texts = []
    for folder in STUDENT_FOLDERS:
        for path in sorted(folder.rglob("*")):
            if path.suffix == ".py":
                texts.append((path, path.read_text()))
            elif path.suffix == ".ipynb":
                cells = json.loads(path.read_text())["cells"]
                texts.append((path, "\n".join(
                    "".join(c["source"]) if isinstance(c["source"], list)
                    else c["source"] for c in cells)))
    return texts


def test_solutions_never_reach_students():
    """No line unique to a solution block is in a student-facing file."""
    secret = _solution_only_lines()
    assert secret["modeling_attention.py"], "no solution lines found"
    texts = _student_texts()
    assert any(p.name == "modeling_attention.py" for p, _ in texts)
    for path, text in texts:
        present = {line.strip() for line in text.split("\n")}
        for reference, lines in secret.items():
            leaked = [line for line in lines if line in present]
            assert not leaked, (f"{path.relative_to(ROOT)} contains "
                                f"solution lines of {reference}: {leaked}")


def test_stub_imports_and_each_task_raises_not_implemented():
    """The stub imports; each region says which task is missing."""
    stub = _load(ROOT / "transformer_lm" / "modeling_attention.py",
                 "stub_under_test")
    with pytest.raises(NotImplementedError, match=r"Task 1\.1"):
        stub.SelfAttention(7, 9)
    model = stub.MultiHeadSelfAttention(7, 9, 3)  # given __init__ code
    with pytest.raises(NotImplementedError, match=r"Task 2\.1"):
        model(torch.zeros(2, 5, 7))
    with pytest.raises(ValueError, match="divisible"):
        stub.MultiHeadSelfAttention(7, 10, 3)


def test_kit_is_flake8_clean():
    """The kit passes the flake8 configuration it grades students with."""
    result = subprocess.run([sys.executable, "-m", "flake8", "."],
                            cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.stdout == "" and result.returncode == 0, result.stdout


@pytest.mark.parametrize("text, error", [
    ("def f():\n    # Task 1.1\n    ### BEGIN SOLUTION\n    pass\n",
     "without ### END"),
    ("def f():\n    # Task 1.1\n    ### END SOLUTION\n    pass\n",
     "without ### BEGIN"),
    ("def f():\n    # Task 1.1\n    ### BEGIN SOLUTION\n"
     "    ### BEGIN SOLUTION\n    pass\n", "nested"),
    ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n", "inside a function"),
])
def test_malformed_markers_are_rejected(text, error):
    """Unbalanced or misplaced solution markers stop the build."""
    with pytest.raises(paths.BuildError, match=error):
        build.make_stub(text)


def test_stub_message_names_task_and_function():
    """The raise names the task header above it and the function."""
    text = ("class A:\n    def go(self):\n        # Task 3.2: go (1 point)\n"
            "        ### BEGIN SOLUTION\n        return 1\n"
            "        ### END SOLUTION\n")
    stub = build.make_stub(text)
    assert 'raise NotImplementedError("Task 3.2: A.go")' in stub
    assert "return 1" not in stub


def test_flake8_config_copy_matches_setup_cfg():
    """The grader lints with exactly setup.cfg's [flake8] settings."""
    copy = (ROOT / "grader" / "flake8.cfg").read_text()
    assert "max-line-length = 79" in copy
    assert copy == build.make_flake8_config()


@pytest.mark.parametrize("kind, source, error", [
    ("solution", "Given", "has no ### BEGIN SOLUTION block"),
    ("given", "Solved", "holds a ### BEGIN SOLUTION block"),
])
def test_definition_cells_must_match_their_markers(kind, source, error):
    """A solution cell without a solution block would be released as
    nbgrader's bare placeholder (given code lost); a given cell with one
    would ship the solution: the template is refused, naming the class."""
    from solutions.notebook_build import TemplateError, build_notebook

    reference = ("class Given:\n    x = 1\n\n\nclass Solved:\n"
                 "    ### BEGIN SOLUTION\n    x = 1\n"
                 "    ### END SOLUTION\n")
    template = f"<!-- {kind} id=cell source={source} -->\n"
    with pytest.raises(TemplateError, match=f"{source} {error}"):
        build_notebook(get_assignment("transformer_block"), template,
                       reference)


def test_release_ships_given_code_whole():
    """Every class a template marks as given is in the release verbatim:
    nbgrader's placeholder never replaces given code."""
    from solutions.notebook_build import (RELEASE, TEMPLATES,
                                          definition_source,
                                          parse_template)

    checked = 0
    for assignment in assignments():
        specs = parse_template((TEMPLATES / f"{assignment.id}.md")
                               .read_text(encoding="utf-8"))
        released = {cell["id"]: "".join(cell["source"]) for cell in
                    json.loads((RELEASE / assignment.id
                                / assignment.notebook).read_text(
                                    encoding="utf-8"))["cells"]}
        reference = (ROOT / "solutions" / f"{assignment.module}.py"
                     ).read_text(encoding="utf-8")
        for spec in specs:
            if spec.kind == "given":
                assert released[spec.options["id"]] == definition_source(
                    reference, spec.options["source"])
                checked += 1
    assert checked >= 1
