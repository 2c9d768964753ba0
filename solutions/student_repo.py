"""Generate the student repository of an assignment (GitHub Classroom).

Usage::

    python -m solutions.build student-repo ASSIGNMENT OUT_DIR

writes into ``OUT_DIR`` (created if needed; files already there are
overwritten, others, such as ``.git``, are left alone):

* the release notebook ``<assignment>.ipynb`` and the student package
  ``transformer_lm/``, both from the nbgrader release ``assignment/<id>/``,
  except the package's generated files (the stub, the test values), which
  are built afresh from ``solutions/`` whatever the working tree holds;
* the public tests ``tests/public/`` and the grader ``grader/`` (the same
  grader the instructor grades with, for self-checks);
* ``requirements.txt`` (the CPU torch and the grader's tools, pinned as in
  the Gradescope bundle), a student ``setup.cfg`` (the kit's ``[flake8]``
  section and pytest settings), ``pyproject.toml``, ``LICENSE``,
  ``NOTICE``, ``.gitignore`` and a student ``README.md``;
* ``.github/workflows/classroom.yml``: on every push it installs the
  pinned requirements, runs the public tests, grades the repository once
  and reports the rubric's points in GitHub Classroom's autograding format
  (see :mod:`grader.classroom` for how penalties and the bonus are
  represented).

Nothing from ``solutions/`` is copied: only the generated release, the
public tests and the grader.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grader.bundle import (TORCH_CPU_INDEX, TORCH_VERSION, BundleError,
                           generated_package, kit_files, pinned_requirements)
from grader.classroom import REPORT, classroom_tests
from grader.rubric import Assignment, RubricError, get_assignment
from solutions.build import ROOT

RELEASE = ROOT / "assignment"
PUBLIC_TESTS = ROOT / "tests" / "public"
# The seam every assignment's public tests share (each rubric lists its own
# test modules in ``public_tests``).
SHARED_PUBLIC_FILES = ("conftest.py", "adapters.py")
WORKFLOW = Path(".github") / "workflows" / "classroom.yml"
FEEDBACK_DIR = REPORT.split("/")[0]
PUBLIC_TEST_COMMAND = "python -m pytest tests/public -q"
GRADE_COMMAND = f"python -m grader grade . --feedback {FEEDBACK_DIR}"
# Actions, pinned to their major-version tags.
CHECKOUT = "actions/checkout@v4"
SETUP_PYTHON = "actions/setup-python@v5"
UPLOAD = "actions/upload-artifact@v4"
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
_SKIPPED_PARTS = ("__pycache__", ".pytest_cache", ".ipynb_checkpoints")


class StudentRepoError(Exception):
    """The student repository cannot be generated."""


def _files_under(folder: Path, base: Path) -> dict[Path, bytes]:
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(base)
        if path.is_file() and not any(part in _SKIPPED_PARTS
                                      for part in relative.parts) \
                and path.suffix not in (".pyc", ".pyo"):
            files[relative] = path.read_bytes()
    return files


def _quote(text: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text)


def _flake8_section() -> str:
    """The kit's ``[flake8]`` section of setup.cfg, verbatim."""
    lines = (ROOT / "setup.cfg").read_text(encoding="utf-8").split("\n")
    start = lines.index("[flake8]")
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("[")), len(lines))
    while end > start and (not lines[end - 1].strip()
                           or lines[end - 1].startswith("#")):
        end -= 1
    return "\n".join(lines[start:end])


def student_setup_cfg(assignment: Assignment) -> str:
    """The student repository's ``setup.cfg``."""
    return f"""\
# Settings of the homework repository "{assignment.title}".
# [flake8] holds the rules PEP-8 grading uses (the grader lints with its own
# copy, grader/flake8.cfg, so editing this section changes no grade).
[metadata]
name = transformer-lm-{assignment.id.replace("_", "-")}
version = 1.0.0
license = Apache-2.0
license_files = LICENSE, NOTICE

[options]
python_requires = >=3.11
packages = find:

[options.packages.find]
include =
    grader
    grader.*
    transformer_lm
    transformer_lm.*

[options.package_data]
grader = flake8.cfg, assignments/*/rubric.toml

{_flake8_section()}

[tool:pytest]
testpaths = tests/public
addopts = -ra
"""


def _rubric_table(assignment: Assignment) -> str:
    rows = ["| item | points | what earns them |", "|---|---|---|"]
    for item in assignment.items:
        if item.kind == "checks":
            points = f"{item.points:g}"
        elif item.kind == "bonus":
            points = f"+{item.points:g} bonus"
        else:
            points = f"{item.points:g} (penalty)"
        rows.append(f"| `{item.id}` | {points} | {item.title} |")
    return "\n".join(rows)


def student_readme(assignment: Assignment) -> str:
    """The student repository's ``README.md``."""
    module = f"transformer_lm/{assignment.module}.py"
    bonus = sum(i.points for i in assignment.items if i.kind == "bonus")
    return f"""\
# {assignment.title}

Write your code in `{module}` (or in the notebook
`{assignment.notebook}`), between `# YOUR CODE STARTS HERE` and
`# YOUR CODE ENDS HERE`. The docstrings say what each class must do.

## Set up (Python 3.11 or newer)

```bash
python -m pip install "torch=={TORCH_VERSION}" --index-url {TORCH_CPU_INDEX}
python -m pip install -r requirements.txt
```

The first line installs the CPU build of torch (a plain `pip install torch`
may download a multi-GB CUDA build).

## Check your work

```bash
python -m pytest tests/public                 # the public tests
python -m grader grade . --public-only        # quick self-check (seconds)
python -m grader grade .                      # adds hidden random cases
python -m grader shapes {module}   # your shape comments
```

A task you have not written yet fails its public tests with one line,
`not implemented yet: ...`. The grader prints a report per rubric item;
`--feedback DIR` also writes it to `DIR/` with pictures of your attention
maps when they are wrong. Every statement of yours that produces a tensor
needs a comment with its shape, e.g. `q = self.q(x)  # [batch_size, seq_len,
hidden]`.

## Rubric ({assignment.max_score:g} points, +{bonus:g} bonus)

{_rubric_table(assignment)}

A task's score is clamped to [0, its points] before its bonus is added.

## GitHub Classroom

Every push runs `.github/workflows/classroom.yml`: it installs the
requirements, runs the public tests and the grader (public and hidden
cases), and reports the points in the Actions tab ("Autograding Tests").
Each rubric point is one test there; PEP-8 and shape-comment penalties are
taken from the task's points, and the bonus is one extra test, so the
maximum shown is {assignment.max_score + bonus:g}.

These points are a self-check. Your instructor computes the final grade
separately, on hidden cases you cannot see; a correct solution earns full
marks on them too. Do not edit `.github/`, `grader/` or `tests/`.
"""


def _step(lines: list[str], name: str, *fields: tuple[str, str]) -> None:
    """Append a step: its name, then ``key: value`` lines in order."""
    lines.append(f"      - name: {_quote(name)}")
    lines += [f"        {key}: {value}" for key, value in fields]


def _grader_step(lines: list[str], step_id: str, name: str,
                 test_name: str, command: str, timeout: int,
                 max_score: int) -> None:
    """Append an ``autograding-command-grader`` step."""
    _step(lines, name, ("id", step_id), ("uses", COMMAND_GRADER))
    lines += ["        with:",
              f"          test-name: {_quote(test_name)}",
              f"          command: {_quote(command)}",
              f"          timeout: {timeout}",
              f"          max-score: {max_score}"]


def classroom_workflow(assignment: Assignment) -> str:
    """The text of ``.github/workflows/classroom.yml``."""
    tests = classroom_tests(assignment)
    lines = [
        "# GitHub Classroom autograding, generated by",
        f"# python -m solutions.build student-repo {assignment.id}.",
        "# One test per rubric point (see grader/classroom.py). These points "
        "are a",
        "# self-check: the instructor computes the final grade "
        "separately.",
        "name: Autograding Tests",
        "\"on\":",
        "  push:",
        "  workflow_dispatch:",
        "  repository_dispatch:",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    timeout-minutes: 30",
        "    steps:",
    ]
    _step(lines, "Check out the repository", ("uses", CHECKOUT))
    _step(lines, "Set up Python 3.11", ("uses", SETUP_PYTHON))
    lines += ["        with:",
              "          python-version: \"3.11\"",
              "          cache: pip",
              "          cache-dependency-path: requirements.txt"]
    _step(lines, "Install the CPU build of torch and the pinned tools",
          ("run", "|"))
    lines += [f"          python -m pip install \"torch=={TORCH_VERSION}\" "
              f"--index-url {TORCH_CPU_INDEX}",
              "          python -m pip install -r requirements.txt"]
    _grader_step(lines, "public_tests", "Public tests",
                 f"Public tests ({PUBLIC_TEST_COMMAND})",
                 PUBLIC_TEST_COMMAND, 10, 0)
    _step(lines, "Grade (public and hidden cases)", ("id", "grade"),
          ("continue-on-error", "true"), ("run", _quote(GRADE_COMMAND)))
    for test in tests:
        _grader_step(lines, test.id, test.step_name, test.name,
                     test.command(), 2, test.max_score)
    _step(lines, "Keep the grader's report and pictures",
          ("if", "always()"), ("uses", UPLOAD))
    lines += ["        with:",
              "          name: grading-report",
              f"          path: {FEEDBACK_DIR}/",
              "          if-no-files-found: ignore"]
    runners = ["public_tests"] + [t.id for t in tests]
    _step(lines, "Autograding Reporter", ("if", "always()"),
          ("uses", REPORTER))
    lines.append("        env:")
    for runner in runners:
        lines.append(f"          {runner.upper()}_RESULTS: "
                     f"\"${{{{steps.{runner}.outputs.result}}}}\"")
    lines += ["        with:", f"          runners: {','.join(runners)}"]
    return "\n".join(lines) + "\n"


_GITIGNORE = f"""\
__pycache__/
*.py[cod]
*.egg-info/
.pytest_cache/
.ipynb_checkpoints/
.venv/
{FEEDBACK_DIR}/
"""


def student_files(assignment_id: str) -> dict[Path, bytes]:
    """Every file of the student repository: relative path -> bytes."""
    assignment = get_assignment(assignment_id)
    release = RELEASE / assignment.id
    notebook = release / assignment.notebook
    if not notebook.is_file() or not (release / "transformer_lm").is_dir():
        raise StudentRepoError(
            f"no nbgrader release of {assignment.id} in {release}/ "
            f"(a notebook and transformer_lm/)"
            f": is it an assignment with a notebook? Run python -m "
            f"solutions.build")
    files = {Path(assignment.notebook): notebook.read_bytes()}
    files.update(_files_under(release / "transformer_lm", release))
    # The stubs and test values as a fresh build makes them, whatever the
    # working tree holds (the same rule as the Gradescope bundle).
    generated = generated_package()
    for relative in list(files):
        if relative.as_posix() in generated:
            files[relative] = generated[relative.as_posix()]
    for name in SHARED_PUBLIC_FILES + assignment.public_tests:
        path = PUBLIC_TESTS / name
        files[path.relative_to(ROOT)] = path.read_bytes()
    for relative in kit_files(ROOT):
        if relative.parts[0] == "grader" or relative.name in (
                "LICENSE", "NOTICE", "pyproject.toml"):
            files[relative] = (ROOT / relative).read_bytes()
    texts = {
        Path("README.md"): student_readme(assignment),
        Path("setup.cfg"): student_setup_cfg(assignment),
        Path("requirements.txt"): pinned_requirements(),
        Path(".gitignore"): _GITIGNORE,
        WORKFLOW: classroom_workflow(assignment),
    }
    files.update({path: text.encode("utf-8") for path, text in texts.items()})
    leaked = [p for p in files if p.parts[0] == "solutions"]
    if leaked:
        raise StudentRepoError(f"refusing to ship {leaked}")
    return files


def write_student_repo(assignment_id: str, out: Path) -> list[Path]:
    """Write the student repository into ``out``; return the files."""
    out = Path(out)
    written = []
    for relative, data in sorted(student_files(assignment_id).items()):
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m solutions.build student-repo ASSIGNMENT OUT_DIR``."""
    parser = argparse.ArgumentParser(
        prog="python -m solutions.build student-repo",
        description="Write the student repository of ASSIGNMENT into "
                    "OUT_DIR: the release notebook and package, the public "
                    "tests, the grader and a GitHub Classroom workflow.")
    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("out", type=Path, metavar="OUT_DIR")
    args = parser.parse_args(argv)
    try:
        written = write_student_repo(args.assignment, args.out)
    except (StudentRepoError, BundleError, RubricError, ValueError,
            OSError) as exc:
        print(f"python -m solutions.build student-repo: error: {exc}",
              file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
