"""The grader's command line, run as students and CI scripts run it.

``python -m grader grade PATH [--format text|json|gradescope]
[--public-only]`` in a subprocess: exit codes (0 for any grade, 2 with a
one-line error when nothing could be graded), the JSON contract of
docs/rubric.md, a Gradescope ``results.json``, and that only the grader writes
to standard output. Each grading subprocess imports torch (seconds), so
they are all started at once by one fixture and every test reads their
results; ``--help`` needs no torch and runs on its own.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2]
SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
STUB = KIT / "transformer_lm" / "modeling_attention.py"

ITEMS = ["task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes"]
PENALTIES_AND_BONUS = {"task1.pep8", "task1.shapes", "task1.bonus",
                       "task2.pep8", "task2.shapes"}
DIAGNOSES = {"no_scaling", "wrong_scale", "softmax_dim",
             "reshape_not_transpose", "mask_diagonal", "mask_zero_fill",
             "mask_ignored", "no_mix", "probs_shape", "dropout_misplaced",
             "forbidden_api", "heads_not_split", "head_order",
             "merge_wrong_axes", "mask_inverted", "hardcoded_size",
             "mask_from_scores"}

# How a report speaks of hidden cases (``hidden`` alone is a dimension).
HIDDEN_CASES = re.compile(r"hidden\s+(random\s+)?(case|input|value|test)",
                          re.IGNORECASE)


@dataclass(frozen=True)
class Run:
    """One finished ``python -m grader`` process."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "grader", *args]


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Paths the grader cannot grade."""
    folder = tmp_path_factory.mktemp("bad_inputs")
    binary = folder / "modeling_attention.py"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00binary\x00data")
    notebook = folder / "homework.ipynb"
    notebook.write_text('{"cells": [{"cell_type": "code", "source": "x = 1"',
                        encoding="utf-8")
    empty = folder / "empty_repository"
    empty.mkdir()
    (empty / "README.md").write_text("nothing to grade here\n")
    return {"missing": folder / "no_such_submission.py", "binary": binary,
            "notebook": notebook, "empty": empty}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the commands that write files write them."""
    return tmp_path_factory.mktemp("outputs")


@pytest.fixture(scope="module")
def runs(bad_inputs: dict[str, Path], outputs: Path) -> dict[str, Run]:
    """Every grading command, started together, by name (under the usual
    umask 022, which files the grader writes must honour)."""
    commands = {
        "json": ("grade", str(SUBMISSIONS / "correct_prints.py"),
                 "--format", "json"),
        "gradescope": ("grade", str(SUBMISSIONS / "clamp_penalties.py"),
                       "--format", "gradescope"),
        "stub": ("grade", str(STUB), "--public-only"),
        "stub-gradescope": ("grade", str(STUB), "--public-only",
                            "--format", "gradescope"),
        "files": ("grade", str(SUBMISSIONS / "mistake_mask_diagonal.py"),
                  "--public-only", "--feedback", str(outputs / "feedback"),
                  "--output", str(outputs / "report.txt")),
        **{name: ("grade", str(path)) for name, path in bad_inputs.items()},
    }
    started = {name: (args, subprocess.Popen(
        _command(*args), cwd=KIT, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        umask=0o022))
        for name, args in commands.items()}
    finished = {}
    for name, (args, process) in started.items():
        try:
            stdout, stderr = process.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        finished[name] = Run(args, process.returncode, stdout, stderr)
    return finished


# --------------------------------------------------------------------------
# Exit codes


def test_a_zero_grade_exits_zero(runs: dict[str, Run]) -> None:
    """The untouched stub gets a grade (0 / 10), so the exit code is 0.
    An untouched class is no error: the report says so as a note of its
    task, under the task's heading, never as "Error:" in the header."""
    run = runs["stub"]
    assert run.returncode == 0, run.stderr
    assert "Total: 0 / 10" in run.stdout
    assert "public test values only" in run.stdout
    lines = run.stdout.splitlines()
    assert not [line for line in lines if line.startswith("Error:")]
    for heading, target in (("Coding Task 1: SelfAttention: 0 / 4",
                             "SelfAttention"),
                            ("Coding Task 2: MultiHeadSelfAttention: 0 / 6",
                             "MultiHeadSelfAttention")):
        assert (f"{heading}\n  Note: {target} is still the untouched "
                f"stub: write your code between the YOUR CODE") in run.stdout


@pytest.mark.parametrize("name, words", [
    ("missing", "no such file or folder"),
    ("binary", "binary"),
    ("notebook", "not a valid notebook"),
    ("empty", "no submission found"),
])
def test_ungradable_input_exits_two_with_one_line(runs: dict[str, Run],
                                                  name: str,
                                                  words: str) -> None:
    """Exit 2, nothing on stdout, one line on stderr that says why."""
    run = runs[name]
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("python -m grader grade: error:")
    assert words in lines[0]
    assert "Traceback" not in run.stderr


# --------------------------------------------------------------------------
# --format json


def test_json_follows_the_rubric_contract(runs: dict[str, Run]) -> None:
    """score, max_score, the 10 items in order with their six fields,
    errors; penalties and the bonus have max_score 0."""
    run = runs["json"]
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["score"] == 10.0 and data["max_score"] == 10.0
    assert isinstance(data["errors"], list)
    assert [item["id"] for item in data["items"]] == ITEMS
    for item in data["items"]:
        assert set(item) == {"id", "score", "max_score", "passed",
                             "message", "diagnosis"}
        assert isinstance(item["score"], float)
        assert isinstance(item["max_score"], float)
        assert isinstance(item["passed"], bool)
        assert isinstance(item["message"], str) and item["message"]
        assert isinstance(item["diagnosis"], list)
        assert set(item["diagnosis"]) <= DIAGNOSES
        if item["id"] in PENALTIES_AND_BONUS:
            assert item["max_score"] == 0.0
        else:
            assert item["max_score"] > 0
    maxima = {i["id"]: i["max_score"] for i in data["items"]}
    assert sum(maxima.values()) == data["max_score"]


def test_submission_output_never_reaches_stdout(runs: dict[str, Run]) -> None:
    """What the submission prints (stdout and stderr, at import and in
    forward) is inside the report, never around it."""
    run = runs["json"]
    data = json.loads(run.stdout)  # the whole of stdout is one object
    printed = "\n".join(data["output"].values())
    for words in ("loading my attention module", "a warning on stderr",
                  "SelfAttention.forward input",
                  "MultiHeadSelfAttention probs"):
        assert words in printed
        assert words not in run.stderr
        # every occurrence on stdout is one inside the report's output
        assert run.stdout.count(words) == sum(
            json.dumps(text).count(words)
            for text in data["output"].values())


# --------------------------------------------------------------------------
# --format gradescope


def test_gradescope_results_have_the_documented_fields(
        runs: dict[str, Run]) -> None:
    """Top-level score and execution_time numbers; one test per item
    with name, score, max_score, status, output and visibility."""
    run = runs["gradescope"]
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert isinstance(data["score"], float)
    assert isinstance(data["execution_time"], (int, float))
    assert data["execution_time"] > 0
    assert data["score"] == 3.0
    assert len(data["tests"]) == len(ITEMS)
    for test, item_id in zip(data["tests"], ITEMS):
        assert {"name", "score", "max_score", "status", "output",
                "visibility"} <= set(test)
        assert test["name"].startswith(item_id)
        assert isinstance(test["score"], float)
        assert isinstance(test["max_score"], float)
        assert test["status"] in ("passed", "failed")
        assert test["visibility"] in ("hidden", "after_due_date",
                                      "after_published", "visible")
        assert isinstance(test["output"], str)
    by_id = dict(zip(ITEMS, data["tests"]))
    assert by_id["task2.pep8"]["score"] == -1.0
    assert by_id["task2.pep8"]["max_score"] == 0.0
    assert by_id["task2.pep8"]["status"] == "failed"
    assert "E501" in by_id["task2.pep8"]["output"]
    assert by_id["task1.bonus"]["score"] == 1.0
    assert "[no_mix]" in by_id["task2.output"]["output"]


def test_gradescope_shows_an_optional_bonus_not_earned_as_passed(
        runs: dict[str, Run]) -> None:
    """Gradescope has no neutral status: a bonus not earned is a passed
    test worth 0 of 0 that says it is optional (a failed test would read
    as a lost point); an untouched task is a note, not an error; a
    public-only grade speaks of no hidden case."""
    run = runs["stub-gradescope"]
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    by_id = {test["number"]: test for test in data["tests"]}
    bonus = by_id["task1.bonus"]
    assert (bonus["status"], bonus["score"], bonus["max_score"]) == (
        "passed", 0.0, 0.0)
    assert bonus["name"].endswith("(optional bonus)")
    assert bonus["output"].startswith("Optional bonus, not earned (it costs "
                                      "no points): ")
    assert "did not earn full points" in bonus["output"]
    assert by_id["task1.forward"]["status"] == "failed"
    assert "  Note: SelfAttention is still the untouched stub" in \
        data["output"]
    texts = [data["output"]] + [t["output"] for t in data["tests"]]
    assert not [t for t in texts if HIDDEN_CASES.search(t)]
    earned = {t["number"]: t for t in json.loads(
        runs["gradescope"].stdout)["tests"]}["task1.bonus"]
    assert (earned["status"], earned["score"]) == ("passed", 1.0)


# --------------------------------------------------------------------------
# Files the grader writes


def test_report_files_are_readable_like_the_pictures(
        runs: dict[str, Run], outputs: Path) -> None:
    """--output and --feedback files get 0666 less the umask (0644 here),
    as the attention-map PNGs do, not mkstemp's private 0600."""
    assert runs["files"].returncode == 0, runs["files"].stderr
    feedback = outputs / "feedback"
    written = sorted(feedback.iterdir())
    assert {p.name for p in written} >= {"report.txt", "report.json"}
    assert [p for p in written if p.suffix == ".png"], written
    for path in written + [outputs / "report.txt"]:
        assert oct(path.stat().st_mode & 0o777) == oct(0o644), path
    assert not [p for p in outputs.rglob(".*.tmp")]


# --------------------------------------------------------------------------
# --help and --version


@pytest.mark.parametrize("args", [
    (), ("grade",), ("batch",), ("shapes",), ("assignments",),
    ("nbgrader",), ("gradescope-bundle",),
])
def test_help_works_for_every_subcommand(args: tuple[str, ...]) -> None:
    """``--help`` exits 0 and prints a usage line."""
    run = subprocess.run(_command(*args, "--help"), cwd=KIT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: python -m grader")
    if args:
        assert f"python -m grader {args[0]}" in run.stdout
    if args == ("grade",):
        for option in ("--format", "--public-only", "--seed"):
            assert option in run.stdout
    if args == ("batch",):
        for option in ("--out", "--jobs", "DIR"):
            assert option in run.stdout


# The exit statuses each command returns (grader/routes/cli.py,
# grader/routes/batch.py, grader/routes/nbgrader.py,
# grader/routes/classroom.py): its --help must explain each.
EXIT_CODES = {
    ("grader", "grade"): ("0", "2"),
    ("grader", "shapes"): ("0", "1", "2"),
    ("grader", "batch"): ("0", "1", "2", "130"),
    ("grader", "nbgrader"): ("0", "1", "2", "130"),
    ("grader", "gradescope-bundle"): ("0", "2"),
    ("grader", "assignments"): ("0",),
    ("grader", "audit"): ("0", "1", "2", "130"),
    ("grader.classroom", "grade"): ("0", "1", "2"),
    ("grader.classroom", "run"): ("124", "127", "128+S", "2"),
}


@pytest.mark.parametrize("module, command", list(EXIT_CODES))
def test_help_documents_every_argument_and_exit_status(
        module: str, command: str) -> None:
    """Every argument has a help text, and the help ends with an "exit
    status:" block with one entry for each status the command returns."""
    run = subprocess.run(
        [sys.executable, "-m", module, command, "--help"], cwd=KIT,
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"usage: python -m {module} {command}")
    block = run.stdout.split("\nexit status:\n")[1]
    codes = [line.split()[0] for line in block.splitlines()
             if line.startswith("  ") and not line.startswith("      ")]
    for code in EXIT_CODES[(module, command)]:
        assert code in codes, (code, block)
    import argparse

    from grader.routes import classroom, cli

    parser = (cli if module == "grader" else classroom).build_parser()
    (subparsers,) = [a for a in parser._actions
                     if isinstance(a, argparse._SubParsersAction)]
    # Internal options the kit's own steps pass (nbgrader's autograde runs
    # `nbgrader --verdicts FILE`) are hidden on purpose; everything a
    # person types has a help text.
    internal = {("nbgrader", "verdicts")}
    for action in subparsers.choices[command]._actions:
        if isinstance(action, argparse._HelpAction) or (
                command, action.dest) in internal:
            continue
        assert action.help and action.help != argparse.SUPPRESS, \
            action.dest


def test_version() -> None:
    """``python -m grader --version`` prints the kit's version (the
    [metadata] version of setup.cfg) and exits 0, without grading."""
    import configparser

    from grader import __version__

    config = configparser.ConfigParser(interpolation=None)
    config.read(KIT / "setup.cfg", encoding="utf-8")
    assert __version__ == config["metadata"]["version"]
    run = subprocess.run(_command("--version"), cwd=KIT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"python -m grader {__version__}\n"


def test_the_environments_pytest_options_never_reach_the_checks(
        tmp_path: Path) -> None:
    """A CI job's ``PYTEST_ADDOPTS`` and ``PYTEST_PLUGINS`` are meant for
    its own tests: a grade run under them (an option the checks' pytest
    does not know, a plug-in that does not exist) is the grade without
    them, item by item, and they are still there for what the command
    starts after."""
    import os

    solution = KIT / "tests" / "kit" / "submissions" / "correct_matmul.py"
    reports = {}
    for name, extra in (("plain", {}), ("ci", {
            "PYTEST_ADDOPTS": f"--junitxml={tmp_path / 'x.xml'}",
            "PYTEST_PLUGINS": "no_such_plugin_of_a_ci_job"})):
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith("PYTEST_") and k != "GRADER_SEED"}
        done = subprocess.run(
            _command("grade", str(solution), "--format", "json"), cwd=KIT,
            env={**environment, **extra}, capture_output=True, text=True,
            timeout=300)
        assert done.returncode == 0, done.stderr
        reports[name] = {item["id"]: item["score"]
                         for item in json.loads(done.stdout)["items"]}
    assert reports["ci"] == reports["plain"]
    assert reports["plain"]["task1.forward"] == 3
    assert reports["plain"]["task2.output"] == 2
