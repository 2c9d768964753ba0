"""Generate the student repository of an assignment (GitHub Classroom).

Usage::

    python -m solutions.build student-repo ASSIGNMENT OUT_DIR

writes into ``OUT_DIR`` (created if needed; files already there are
overwritten, others, such as ``.git``, are left alone):

* the release notebook ``<assignment>.ipynb`` and the student package
  ``transformer_lm/``, both from the nbgrader release ``assignment/<id>/``,
  except the package's generated files (the stub, the test values), which
  are built afresh from ``solutions/`` whatever the working tree holds;
* the assignment's public tests, as the release holds them: the shared
  seam of ``tests/public/`` and the assignment's own folder
  ``tests/public/<assignment>/``, no other assignment's (so ``python -m
  pytest tests/public`` runs this homework's tests only), and the grader
  ``grader/`` (the same grader the instructor grades with, for
  self-checks) with this assignment's plug-in only: no other
  homework's ``grader/assignments/<id>/`` folder ships;
* ``requirements.txt`` (the CPU torch and the grader's tools, pinned as in
  the Gradescope bundle, and what the notebook needs to open and run:
  ``notebook`` and ``ipykernel``, pinned the same way), a student
  ``setup.cfg`` (the kit's ``[flake8]``
  section and pytest settings), ``pyproject.toml``, ``LICENSE``,
  ``NOTICE``, ``.gitignore`` and a student ``README.md``;
* ``.github/workflows/classroom.yml``: on every push it installs the
  pinned requirements, runs the public tests, grades the repository once
  and reports the rubric's points in GitHub Classroom's autograding format
  (see :mod:`grader.routes.classroom` for how penalties and the bonus are
  represented).

Nothing from ``solutions/`` is copied: only the generated release, the
public tests and the grader.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grader import __version__
from grader.constants import TORCH_CPU_INDEX, TORCH_VERSION
from grader.errors import GraderError
from grader.routes.classroom import PUBLIC_TESTS as PUBLIC_RUNNER
from grader.routes.classroom import PUBLIC_TESTS_ENV, runners
from grader.rubric import Assignment, RubricError, get_assignment
from solutions.gradescope_bundle import (BundleError, generated_package,
                                         kit_files, pinned_requirements)
from solutions.paths import ROOT, BuildError, public_test_files

RELEASE = ROOT / "assignment"
WORKFLOW = Path(".github") / "workflows" / "classroom.yml"
FEEDBACK_DIR = "grading"
PUBLIC_TESTS_RUNNER = PUBLIC_RUNNER.id  # its command-grader step's id
PUBLIC_TESTS_RUN = "python -m pytest tests/public -q"


@dataclass(frozen=True)
class Action:
    """A GitHub Action pinned to a full commit SHA (the tag it carries)."""

    repo: str
    sha: str
    tag: str

    @property
    def uses(self) -> str:
        """The ``uses:`` value, with the tag in a comment."""
        return f"{self.repo}@{self.sha}  # {self.tag}"


# Every action the kit's workflows use, pinned to the commit its tag named
# when pinned (read from the action's repository: git rev-parse TAG^{commit}).
# A tag can move; a commit cannot. .github/workflows/ci.yml uses the same.
CHECKOUT = Action("actions/checkout",
                  "3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1")
SETUP_PYTHON = Action("actions/setup-python",
                      "5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0")
UPLOAD = Action("actions/upload-artifact",
                "bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0")
COMMAND_GRADER = Action("classroom-resources/autograding-command-grader",
                        "d5b3fa6f50f7f629b7bfae0cc3e4c58852b412d5", "v1")
REPORTER = Action("classroom-resources/autograding-grading-reporter",
                  "d13b5912daf5042ac1b71bc38bdb4a6bcd61d8ca", "v1")
ACTIONS = (CHECKOUT, SETUP_PYTHON, UPLOAD, COMMAND_GRADER, REPORTER)

# Time limits, in minutes unless named _S. Each step has its own; they add
# up to less than the job's, which also covers setting up the job and the
# post steps (the pip cache is saved after the last step). Inside a step,
# the command stops itself before the step's limit: the public tests after
# PUBLIC_TESTS_DEADLINE_S (their whole process tree, see grader.run.proctree),
# then the command grader's own timeout (SIGTERM to its shell) is the
# backstop, then the step's; the grader after GRADE_DEADLINE_S.
STEP_MINUTES = {"checkout": 2, "python": 4, "install": 10,
                "public tests": 4, "grade": 4, "upload": 2, "report": 1}
JOB_MINUTES = 30
PUBLIC_TESTS_TIMEOUT = 3
PUBLIC_TESTS_DEADLINE_S = 150
GRADE_DEADLINE_S = 180
_SKIPPED_PARTS = ("__pycache__", ".pytest_cache", ".ipynb_checkpoints")
# What the notebook needs besides the grader's tools: a Jupyter front end
# (``notebook`` gives ``jupyter notebook``, and ``jupyter lab`` through its
# JupyterLab components) and the Python kernel (``ipykernel``, which VS
# Code needs too). The ``jupyter`` meta-package would add a console and
# widgets nobody uses here. matplotlib, which the notebook imports, is
# already one of the grader's tools.
NOTEBOOK_PACKAGES = ("notebook", "ipykernel")


class StudentRepoError(GraderError):
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
version = {__version__}
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
    bonus_text = (
        f"The maximum is {assignment.max_score:g}, as in your grade. The "
        f"bonus is a line of its own (`✅ ... earned` or `❌ ... not "
        f"earned`, never a red run); Classroom has no bonus, so an earned "
        f"bonus shows as points beyond the maximum "
        f"({assignment.max_score + bonus:g} / {assignment.max_score:g}) "
        f"while the table's bonus row stays 0 / 0.\n" if bonus else "")
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
may download a multi-GB CUDA build); the second the grader's tools and
Jupyter. Open the notebook with `jupyter notebook {assignment.notebook}`
(or in JupyterLab or VS Code).

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
requirements, runs the public tests (0 points) and the grader (public and
hidden cases) once, and reports the points in the Actions tab. Open the
run: its summary page lists every rubric item with its points and, for a
point lost, the reason and the line. In the log of the step *Autograding
Reporter* each task is one row worth the task's points, with one line per
point: `✅` a point you keep, `❌` a point lost, named after the reason:
the item that was not earned
(`task1.forward 2/3: point 3 of 3 not earned - ...`) or the PEP-8 or
shape-comment penalty that took it
(`task1.pep8 -1: PEP-8 penalty, ... - line 30: E501 line too long ...`).
{bonus_text}A public test that never returns is stopped after
{PUBLIC_TESTS_DEADLINE_S} s, with everything it started. To see what
Classroom will show before you push:
`python -m grader.classroom grade . --assignment {assignment.id}`.

These points are a self-check. Your instructor computes the final grade
separately, on hidden cases you cannot see; a correct solution earns full
marks on them too. Do not edit `.github/`, `grader/` or `tests/`.
"""


def student_requirements() -> str:
    """The student repository's ``requirements.txt``: the Gradescope
    bundle's pins and the notebook's packages, pinned the same way."""
    return pinned_requirements(
        NOTEBOOK_PACKAGES, "To open and run the notebook: a Jupyter front "
                           "end and the Python kernel.")


def public_tests_command() -> str:
    """The public tests, stopped with everything they started.

    ``exec``: the command grader's timeout sends SIGTERM to its shell, and
    the step ends when that process does. So the process it signals is
    the one that stops the tree, and it ends only once nothing is left.
    """
    return (f"exec python -m grader.classroom run --deadline "
            f"{PUBLIC_TESTS_DEADLINE_S} -- {PUBLIC_TESTS_RUN}")


def grade_command(assignment: Assignment) -> str:
    """The grading step: grade once, write the Classroom results."""
    return (f"python -m grader.classroom grade . --assignment "
            f"{assignment.id} --feedback {FEEDBACK_DIR} --deadline "
            f"{GRADE_DEADLINE_S}")


def _step(lines: list[str], name: str, minutes: int,
          *fields: tuple[str, str]) -> None:
    """Append a step: its name, ``key: value`` lines, its time limit."""
    lines.append(f"      - name: {_quote(name)}")
    lines += [f"        {key}: {value}" for key, value in fields]
    lines.append(f"        timeout-minutes: {minutes}")


def _with(lines: list[str], *fields: tuple[str, str]) -> None:
    lines.append("        with:")
    lines += [f"          {key}: {value}" for key, value in fields]


def classroom_workflow(assignment: Assignment) -> str:
    """The text of ``.github/workflows/classroom.yml``."""
    graded = runners(assignment)
    after_install = ("if", "${{ !cancelled() }}")
    lines = [
        "# GitHub Classroom autograding, generated by",
        f"# python -m solutions.build student-repo {assignment.id}.",
        "# The public tests (0 points), then one grading step that writes "
        "one",
        "# result per task and per bonus for the reporter (see "
        "grader/routes/classroom.py).",
        "# These points are a self-check: the instructor grades "
        "separately.",
        "name: Autograding Tests",
        "\"on\":",
        "  push:",
        "  workflow_dispatch:",
        "  repository_dispatch:",
        "permissions: {}",
        "# A newer push supersedes a run still going: only the newest "
        "commit counts.",
        "concurrency:",
        "  group: ${{ github.workflow }}-${{ github.ref }}",
        "  cancel-in-progress: true",
        "jobs:",
        "  run-autograding-tests:",
        "    name: Autograding",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        f"    timeout-minutes: {JOB_MINUTES}",
        "    permissions:",
        "      contents: read",
        "    steps:",
    ]
    _step(lines, "Check out the repository", STEP_MINUTES["checkout"],
          ("uses", CHECKOUT.uses))
    _with(lines, ("persist-credentials", "false"))
    _step(lines, "Set up Python 3.11", STEP_MINUTES["python"],
          ("uses", SETUP_PYTHON.uses))
    _with(lines, ("python-version", '"3.11"'), ("cache", "pip"),
          ("cache-dependency-path", "requirements.txt"))
    _step(lines, "Install the CPU build of torch and the pinned tools",
          STEP_MINUTES["install"], ("run", "|"))
    lines[-1:-1] = [
        f"          python -m pip install \"torch=={TORCH_VERSION}\" "
        f"--index-url {TORCH_CPU_INDEX}",
        "          python -m pip install -r requirements.txt"]
    _step(lines, "Public tests (0 points)", STEP_MINUTES["public tests"],
          ("id", PUBLIC_TESTS_RUNNER), after_install,
          ("uses", COMMAND_GRADER.uses))
    _with(lines, ("test-name", _quote(f"Public tests ({PUBLIC_TESTS_RUN})")),
          ("command", _quote(public_tests_command())),
          ("timeout", str(PUBLIC_TESTS_TIMEOUT)), ("max-score", "0"))
    _step(lines, "Grade", STEP_MINUTES["grade"], ("id", "grade"),
          after_install, ("run", _quote(grade_command(assignment))))
    lines[-1:-1] = [
        "        env:",
        f"          {PUBLIC_TESTS_ENV}: \"${{{{ steps.{PUBLIC_TESTS_RUNNER}"
        f".outputs.result }}}}\""]
    _step(lines, "Keep the grader's report and pictures",
          STEP_MINUTES["upload"], after_install, ("uses", UPLOAD.uses))
    _with(lines, ("name", "grading-report"),
          ("path", f"{FEEDBACK_DIR}/"), ("if-no-files-found", "ignore"))
    _step(lines, "Autograding Reporter", STEP_MINUTES["report"],
          after_install, ("uses", REPORTER.uses))
    results = [(r.id, f"steps.grade.outputs.{r.id}")
               for r in [PUBLIC_RUNNER] + graded]
    lines[-1:-1] = ["        env:"] + [
        f"          {name.upper()}_RESULTS: \"${{{{ {value} }}}}\""
        for name, value in results]
    _with(lines, ("runners", ",".join(name for name, _ in results)))
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
    generated = generated_package(assignment.id)
    for relative in list(files):
        if relative.as_posix() in generated:
            files[relative] = generated[relative.as_posix()]
    # The public tests, fresh from tests/public/ like the generated files
    # (the release holds the same copies; a test checks they agree).
    files.update(public_test_files(assignment.public_tests))
    for relative in kit_files(ROOT):
        if (relative.parts[0] == "grader" and _own_plugin(relative,
                                                          assignment)) \
                or relative.name in ("LICENSE", "NOTICE", "pyproject.toml"):
            files[relative] = (ROOT / relative).read_bytes()
    texts = {
        Path("README.md"): student_readme(assignment),
        Path("setup.cfg"): student_setup_cfg(assignment),
        Path("requirements.txt"): student_requirements(),
        Path(".gitignore"): _GITIGNORE,
        WORKFLOW: classroom_workflow(assignment),
    }
    files.update({path: text.encode("utf-8") for path, text in texts.items()})
    leaked = [p for p in files if p.parts[0] == "solutions"]
    if leaked:
        raise StudentRepoError(f"refusing to ship {leaked}")
    return files


def _own_plugin(relative: Path, assignment: Assignment) -> bool:
    """Whether a file of ``grader/`` ships with ``assignment``'s student
    repository: everything but another assignment's plug-in folder
    (its reference, cases and mistakes are another homework's)."""
    parts = relative.parts
    if len(parts) < 4 or parts[1] != "assignments":
        return True
    return parts[2] == assignment.id


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
    except (StudentRepoError, BundleError, BuildError, RubricError,
            ValueError, OSError) as exc:
        print(f"python -m solutions.build student-repo: error: {exc}",
              file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
