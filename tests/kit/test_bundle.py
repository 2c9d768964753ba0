"""The Gradescope autograder bundle, built and run for real.

The zip is unpacked into a scratch folder shaped like Gradescope's
``/autograder`` (``source/``, ``submission/``, ``results/``) and its
``run_autograder`` is run with ``AUTOGRADER_ROOT`` pointing there and
``AUTOGRADER_PYTHON`` at this interpreter (``setup.sh`` is only checked
for syntax: it would reinstall torch). Its ``results.json`` must satisfy
Gradescope's documented format and give exactly the scores of
``python -m grader grade`` on the same file.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from in_process import grade_command

from grader.routes import gradescope_driver
from solutions import gradescope_bundle as bundle

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "submission" / "transformer_lm" \
    / "modeling_attention.py"
SEED = 987654
ASSIGNMENT = "multi_head_attention"
# A generic line that the grader's public known-mistake variants
# (grader/assignments/multi_head_attention/mistakes.py, shipped to students
# with the grader) share with a solution block; it reveals nothing.
# Lines so generic that the grader's own known-mistake variants must use
# them too; a leak is a solution's distinctive code, never these.
SHARED_WITH_GRADER = {"return probs @ v", "if mask is not None:"}

# --------------------------------------------------------------------------
# Gradescope's results.json, as documented in "Autograder Specifications"
# (gradescope-autograders.readthedocs.io/en/latest/specs/, source:
# github.com/gradescope/autograder_samples, docs/specs.md): the output
# format, "Controlling Test Case Visibility", "Controlling standard output
# visibility", "Test case status" and "Output String Formatting".

VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}
STATUSES = {"passed", "failed"}
NUMBER, TEXT, OBJECT, ARRAY = "number", "text", "object", "array"
TOP_LEVEL = {"score": NUMBER, "execution_time": NUMBER, "output": TEXT,
             "output_format": FORMATS, "test_output_format": FORMATS,
             "test_name_format": FORMATS, "visibility": VISIBILITIES,
             "stdout_visibility": VISIBILITIES, "extra_data": OBJECT,
             "tests": ARRAY, "leaderboard": ARRAY}
TEST_FIELDS = {"score": NUMBER, "max_score": NUMBER, "status": STATUSES,
               "name": TEXT, "name_format": FORMATS, "number": (TEXT, NUMBER),
               "output": TEXT, "output_format": FORMATS, "tags": ARRAY,
               "visibility": VISIBILITIES, "extra_data": OBJECT}
LEADERBOARD_FIELDS = {"name": TEXT, "value": (NUMBER, TEXT),
                      "order": {"asc", "desc"}}


def _conforms(value: Any, kind: Any) -> bool:
    if isinstance(kind, tuple):
        return any(_conforms(value, k) for k in kind)
    if isinstance(kind, set):
        return value in kind
    if kind == NUMBER:
        return (isinstance(value, (int, float))
                and not isinstance(value, bool) and math.isfinite(value))
    return isinstance(value, {TEXT: str, OBJECT: dict, ARRAY: list}[kind])


def _fields(where: str, value: Any, fields: dict[str, Any]) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where} is not an object"]
    problems = [f"{where} has an undocumented field {key!r}"
                for key in value if key not in fields]
    problems += [f"{where}.{key} = {value[key]!r} is not {fields[key]}"
                 for key in value
                 if key in fields and not _conforms(value[key], fields[key])]
    return problems


def gradescope_problems(text: str) -> list[str]:
    """Every way ``text`` breaks Gradescope's documented results.json.

    Rules: strict JSON (no NaN or Infinity); a top-level object with only
    the documented fields, each of its documented type or value set;
    ``score`` at the top level, or else ``tests`` with a ``score`` on every
    test ("optional, but required if not on each test case"); each test an
    object with only the documented fields; ``tags`` a list of strings;
    ``status`` passed/failed; visibilities hidden, after_due_date,
    after_published or visible; formats text, html, simple_format, md or
    ansi; leaderboard entries with a name and a number or text value.
    """
    def reject(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    try:
        results = json.loads(text, parse_constant=reject)
    except ValueError as exc:
        return [f"not valid JSON: {exc}"]
    problems = _fields("results", results, TOP_LEVEL)
    if problems and not isinstance(results, dict):
        return problems
    tests = results.get("tests", [])
    if "score" not in results:
        if "tests" not in results:
            problems.append("neither a top-level score nor tests")
        elif not (isinstance(tests, list)
                  and all(isinstance(t, dict) and "score" in t
                          for t in tests)):
            problems.append("no top-level score and a test without one")
    for index, test in enumerate(tests if isinstance(tests, list) else []):
        problems += _fields(f"tests[{index}]", test, TEST_FIELDS)
        if isinstance(test, dict) and not (
                isinstance(test.get("tags", []), list)
                and all(isinstance(t, str) for t in test.get("tags", []))):
            problems.append(f"tests[{index}].tags is not a list of strings")
    board = results.get("leaderboard", [])
    for index, entry in enumerate(board if isinstance(board, list) else []):
        problems += _fields(f"leaderboard[{index}]", entry,
                            LEADERBOARD_FIELDS)
        if isinstance(entry, dict) and not {"name", "value"} <= set(entry):
            problems.append(f"leaderboard[{index}] needs a name and a value")
    return problems


@pytest.mark.parametrize("text, problem", [
    ('{"score": NaN}', "not valid JSON"),
    ("[]", "not an object"),
    ('{"output": "x"}', "neither a top-level score nor tests"),
    ('{"tests": [{"name": "a"}]}', "a test without one"),
    ('{"score": "9"}', "results.score"),
    ('{"score": true}', "results.score"),
    ('{"score": 1, "stdout_visibility": "students"}', "stdout_visibility"),
    ('{"score": 1, "scores": 2}', "undocumented field 'scores'"),
    ('{"score": 1, "tests": [{"score": 1, "status": "ok"}]}', "status"),
    ('{"score": 1, "tests": [{"score": 1, "visibility": "public"}]}',
     "visibility"),
    ('{"score": 1, "tests": [{"score": 1, "tags": ["a", 1]}]}', "tags"),
    ('{"score": 1, "tests": [{"score": 1, "output_format": "rst"}]}',
     "output_format"),
    ('{"score": 1, "leaderboard": [{"name": "t"}]}', "name and a value"),
])
def test_validator_rejects_what_gradescope_does_not_document(text, problem):
    """The validator itself fails on each documented rule's violation."""
    problems = gradescope_problems(text)
    assert any(problem in p for p in problems), problems


def test_validator_accepts_the_documented_example_shape():
    """A results.json using every documented field passes."""
    example = {"score": 44.0, "execution_time": 136, "output": "x",
               "output_format": "simple_format", "test_output_format": "text",
               "test_name_format": "text", "visibility": "after_due_date",
               "stdout_visibility": "visible", "extra_data": {},
               "tests": [{"score": 2.0, "max_score": 2.0, "status": "passed",
                          "name": "n", "name_format": "text", "number": "1.1",
                          "output": "o", "output_format": "md",
                          "tags": ["a"], "visibility": "visible",
                          "extra_data": {}},
                         {"name": "Compilation", "status": "failed"}],
               "leaderboard": [{"name": "Accuracy", "value": 0.926},
                               {"name": "Time", "value": 15.1,
                                "order": "asc"}]}
    assert gradescope_problems(json.dumps(example)) == []
    assert gradescope_problems(json.dumps({"tests": [{"score": 1}]})) == []


# --------------------------------------------------------------------------
# Building


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The bundle, built once with a baked seed."""
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    assert bundle.write_bundle(out, assignment=ASSIGNMENT, seed=SEED) \
        == out
    return out


def _solution_only_lines() -> dict[str, list[str]]:
    """tests/kit/test_build.py's definition of a solution-only line."""
    spec = importlib.util.spec_from_file_location(
        "kit_test_build", Path(__file__).with_name("test_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._solution_only_lines()


def assert_no_solution(files: dict[str, str]) -> None:
    """No file from solutions/, no line unique to a solution block."""
    assert not [n for n in files if n.startswith("solutions/")
                or "/solutions/" in n]
    secret = _solution_only_lines()
    assert secret["modeling_attention.py"], "no solution lines found"
    for name, text in files.items():
        present = {line.strip() for line in text.split("\n")}
        for reference, lines in secret.items():
            leaked = sorted(set(lines) & present - SHARED_WITH_GRADER)
            assert not leaked, (f"{name} holds solution lines of "
                                f"{reference}: {leaked}")


def test_zip_layout_scripts_and_pins(built, tmp_path):
    """setup.sh and run_autograder at the root, executable, valid bash;
    requirements pin the CPU torch and the installed tools."""
    with zipfile.ZipFile(built) as archive:
        names = archive.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
        archive.extractall(tmp_path)
    for script in ("setup.sh", "run_autograder"):
        assert script in names
        assert modes[script] & 0o111, f"{script} is not executable"
        text = (tmp_path / script).read_text()
        assert text.startswith("#!/usr/bin/env bash\n") and "\r" not in text
        check = subprocess.run(["bash", "-n", str(tmp_path / script)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    for needed in ("grader/engine.py", "grader/routes/cli.py",
                   "grader/routes/gradescope_driver.py", "grader/flake8.cfg",
                   "grader/assignments/multi_head_attention/rubric.toml",
                   "grader/assignments/multi_head_attention/checks/"
                   "test_task1.py",
                   "transformer_lm/modeling_attention.py",
                   "transformer_lm/notebook.py", "setup.cfg",
                   "pyproject.toml", "README.md", "LICENSE", "NOTICE"):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # Of the student package, only what the assignment's release ships:
    # never another homework's module (transformer_block's stub gives a
    # complete attention layer; principles 3 and 10).
    from grader.plugin import load

    package = {n.split("/", 1)[1] for n in names
               if n.startswith("transformer_lm/")}
    assert package == set(load(ASSIGNMENT).package_files)
    assert "modeling_transformer.py" not in package

    requirements = (tmp_path / "requirements.txt").read_text().split("\n")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" \
        in requirements
    assert "torch==2.13.0" in requirements
    for package in ("numpy", "pytest", "flake8", "matplotlib"):
        version = importlib.metadata.version(package)
        assert f"{package}=={version}" in requirements
    setup = (tmp_path / "setup.sh").read_text()
    assert ('pip install "torch==2.13.0" \\\n'
            '    --index-url https://download.pytorch.org/whl/cpu') in setup
    assert 'pip install -r "$SOURCE/requirements.txt"' in setup
    assert 'pip install --no-deps -e "$SOURCE"' in setup

    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["secret_seed"] == "baked in"
    assert str(SEED) not in json.dumps(manifest)
    listed = set(manifest["files"])
    assert listed == set(names) - {"manifest.json", bundle.SEED_FILE}


def test_torch_pin_matches_the_kit():
    """The bundle pins the torch the README and CI install."""
    pin = f"torch=={bundle.TORCH_VERSION}"
    assert pin in (ROOT / "README.md").read_text()
    assert pin in (ROOT / ".ci" / "run").read_text()


def test_zip_ships_no_solution(built):
    """Nothing from solutions/ and no solution-only line is in the zip."""
    with zipfile.ZipFile(built) as archive:
        files = {name: archive.read(name).decode("utf-8", "replace")
                 for name in archive.namelist()}
    assert_no_solution(files)


def test_zip_is_reproducible_and_bakes_the_seed_privately(built, tmp_path,
                                                          monkeypatch):
    """Same kit and options give the same bytes; the seed sits in the
    grader's private folder and reaches the grader's environment only."""
    again = tmp_path / "again.zip"
    bundle.write_bundle(again, assignment=ASSIGNMENT, seed=SEED)
    assert again.read_bytes() == built.read_bytes()
    with zipfile.ZipFile(built) as archive:
        assert archive.read(bundle.SEED_FILE).decode().strip() == str(SEED)
        archive.extractall(tmp_path / "source")
    from grader.run.sandbox import sandbox_paths

    # The seed file lies in a folder no sandboxed submission may read.
    seed_path = str((ROOT / bundle.SEED_FILE).resolve())
    assert any(seed_path.startswith(hidden + os.sep)
               for hidden in sandbox_paths()["hidden"])
    monkeypatch.delenv(bundle.SEED_ENV, raising=False)
    env = gradescope_driver._environment(tmp_path / "source")
    assert env[bundle.SEED_ENV] == str(SEED)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "source")
    monkeypatch.setenv(bundle.SEED_ENV, "4242")
    again = gradescope_driver._environment(tmp_path / "source")
    assert again[bundle.SEED_ENV] == "4242"

    monkeypatch.delenv(bundle.SEED_ENV)
    unseeded = tmp_path / "unseeded.zip"
    bundle.write_bundle(unseeded, assignment=ASSIGNMENT)
    with zipfile.ZipFile(unseeded) as archive:
        assert bundle.SEED_FILE not in archive.namelist()
    monkeypatch.setenv(bundle.SEED_ENV, "from-the-shell")
    bundle.write_bundle(unseeded, assignment=ASSIGNMENT)
    with zipfile.ZipFile(unseeded) as archive:
        assert archive.read(bundle.SEED_FILE) == b"from-the-shell\n"


def test_every_upload_draws_hidden_cases_of_its_own(tmp_path, monkeypatch):
    """The course's seed is mixed with a digest of the upload: the same
    upload gets the same hidden cases (a regrade agrees), an edited one
    other sizes (what a report showed of the hidden cases says nothing
    about the next upload's); the digest opens no FIFO and follows no
    link."""
    from grader.engine import resolve_seed
    from grader.rubric import get_assignment
    from grader.shapes.sizes import secret_size_sets

    source = tmp_path / "source"
    (source / bundle.SEED_FILE).parent.mkdir(parents=True)
    (source / bundle.SEED_FILE).write_text(f"{SEED}\n")
    monkeypatch.delenv(bundle.SEED_ENV, raising=False)
    upload = tmp_path / "submission"
    upload.mkdir()
    module = upload / "modeling_attention.py"
    module.write_text("VERSION = 1\n")

    def secret_sets() -> tuple[str, list[dict[str, int]]]:
        text = gradescope_driver._environment(source, upload)[
            bundle.SEED_ENV]
        monkeypatch.setenv(bundle.SEED_ENV, text)
        seed, label = resolve_seed(None)
        monkeypatch.delenv(bundle.SEED_ENV)
        assert str(SEED) not in label
        sets = get_assignment(ASSIGNMENT).size_sets
        return text, list(secret_size_sets(sets, seed, ASSIGNMENT))

    first, first_sets = secret_sets()
    assert first.startswith(f"{SEED}:")
    assert secret_sets() == (first, first_sets)
    module.write_text("VERSION = 2\n")
    second, second_sets = secret_sets()
    assert second != first and second_sets != first_sets
    os.mkfifo(upload / "pipe")
    (upload / "zero").symlink_to("/dev/zero")
    third, _ = secret_sets()
    assert third not in (first, second)
    # Without a baked seed, the public default is mixed the same way.
    (source / bundle.SEED_FILE).unlink()
    assert gradescope_driver._environment(source, upload)[
        bundle.SEED_ENV].startswith("2024:")


def test_cli_writes_the_bundle_and_rejects_an_unknown_assignment(tmp_path):
    """``python -m grader gradescope-bundle`` is wired to write_bundle."""
    out = tmp_path / "ag.zip"
    made = subprocess.run([sys.executable, "-m", "grader",
                           "gradescope-bundle", str(out), "--assignment",
                           "multi_head_attention"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert made.stdout == f"wrote {out}\n"
    with zipfile.ZipFile(out) as archive:
        script = archive.read("run_autograder").decode()
    assert "--assignment multi_head_attention" in script
    bad = subprocess.run([sys.executable, "-m", "grader",
                          "gradescope-bundle", str(tmp_path / "x.zip"),
                          "--assignment", "nope"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown assignment" in bad.stderr
    assert not (tmp_path / "x.zip").exists()


# --------------------------------------------------------------------------
# Running run_autograder against scratch /autograder folders


def _autograder_root(built: Path, folder: Path,
                     submission: dict[str, str]) -> Path:
    """Unpack the bundle as Gradescope does, with ``submission`` files."""
    with zipfile.ZipFile(built) as archive:
        archive.extractall(folder / "source")
    for name, text in submission.items():
        path = folder / "submission" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (folder / "submission").mkdir(parents=True, exist_ok=True)
    (folder / "results").mkdir()
    return folder


def _start_autograder(root: Path, **env: str) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("GRADER_SEED", "PYTHONPATH")}
    environment.update({"AUTOGRADER_ROOT": str(root),
                        "AUTOGRADER_PYTHON": sys.executable, **env})
    return subprocess.Popen(["bash", str(root / "source" / "run_autograder")],
                            cwd=root, env=environment, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _results(root: Path, process: subprocess.Popen) -> dict[str, Any]:
    log, _ = process.communicate(timeout=240)
    assert process.returncode == 0, log
    text = (root / "results" / "results.json").read_text()
    problems = gradescope_problems(text)
    assert problems == [], problems
    return json.loads(text)


def test_run_autograder_grades_exactly_like_the_cli(built, tmp_path):
    """A real run on a good and a broken submission: valid results.json,
    the bundle's own grader, the baked seed, the CLI's scores."""
    example = EXAMPLE.read_text()
    broken = example.replace("def forward(", "def forward(:", 1)
    assert broken != example
    (tmp_path / "broken").mkdir()
    broken_file = tmp_path / "broken" / "modeling_attention.py"
    broken_file.write_text(broken)
    good = _autograder_root(built, tmp_path / "good",
                            {"modeling_attention.py": example})
    bad = _autograder_root(built, tmp_path / "bad",
                           {"transformer_lm/modeling_attention.py": broken})
    # The bundle must grade with its own copy of the grader: mark it.
    rubric = good / "source" / "grader" / "assignments" \
        / "multi_head_attention" / "rubric.toml"
    rubric.write_text(rubric.read_text().replace(
        'title = "SelfAttention.__init__ builds',
        'title = "[bundle copy] SelfAttention.__init__ builds', 1))

    runs = [(good, _start_autograder(good)), (bad, _start_autograder(bad))]
    # The CLI's grades, by its main in this process (in_process.py)
    # while the bundle's runs go on.
    expected = []
    for path in (EXAMPLE, broken_file):
        done = grade_command(str(path), "--format", "json", "--seed",
                             str(SEED))
        assert done.returncode == 0, done.stderr
        expected.append(json.loads(done.stdout))
    results = [_results(root, process) for root, process in runs]

    for got, want in zip(results, expected):
        assert got["score"] == want["score"]
        assert {t["number"]: (t["score"], t["max_score"])
                for t in got["tests"]} == {
            i["id"]: (i["score"], i["max_score"]) for i in want["items"]}
        assert all(t["visibility"] == "visible" for t in got["tests"])
    assert results[0]["score"] == 9.0
    assert results[1]["score"] < results[0]["score"]
    assert any("[bundle copy]" in t["name"] for t in results[0]["tests"])
    assert "syntax" in json.dumps(results[1]).lower()
    assert not (good / "results" / ".results.grader.json").exists()


def test_run_autograder_always_leaves_a_valid_results_json(built, tmp_path):
    """Nothing gradable, a broken interpreter, a grading timeout: each
    still yields a valid results.json with score 0 and the reason."""
    empty = _autograder_root(built, tmp_path / "empty", {"notes.txt": "hi"})
    no_python = _autograder_root(built, tmp_path / "nopython", {})
    slow = _autograder_root(built, tmp_path / "slow",
                            {"modeling_attention.py": EXAMPLE.read_text()})
    stale = no_python / "results" / "results.json"
    stale.write_text('{"score": 10.0}')
    runs = [(empty, _start_autograder(empty)),
            (no_python, _start_autograder(no_python,
                                          AUTOGRADER_PYTHON="/bin/false")),
            (slow, _start_autograder(slow, AUTOGRADER_TIMEOUT="0.5"))]
    outcomes = [_results(root, process) for root, process in runs]
    assert [o["score"] for o in outcomes] == [0.0, 0.0, 0.0]
    assert re.search(r"could not be graded: no submission found",
                     outcomes[0]["output"])
    assert "exit status 1" in outcomes[1]["output"]
    assert "longer than 0.5 s" in outcomes[2]["output"]
