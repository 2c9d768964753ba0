"""What a new instructor, student and TA meet (issue 30), through the
routes they use: ``python -m grader ...`` as the README shows it, the
student repository's public tests, the Gradescope dry run.

Each test grades real files once and asserts everything it can about them.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from in_process import grade_command

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "modeling_attention.py"
MARKER = re.compile(r"^\s*# YOUR CODE (STARTS|ENDS) HERE.*\n", re.M)
SOLUTION_TAG = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.M)


def solution_text(markers: bool = True) -> str:
    """The reference solution as a student would hand it in: the stub with
    its regions filled, with or without the ``# YOUR CODE`` markers."""
    text = SOLUTION_TAG.sub("", SOLUTION.read_text())
    return text if markers else MARKER.sub("", text)


def environment() -> dict[str, str]:
    """This interpreter's environment, without a seed from outside."""
    return {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}


def start(*args: str, cwd: Path = ROOT) -> subprocess.Popen:
    """Start ``python -m grader ARGS`` as a person types it."""
    return subprocess.Popen([sys.executable, "-m", "grader", *args],
                            cwd=cwd, env=environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen, code: int = 0) -> str:
    """The standard output of a started command that exited with
    ``code``."""
    out, err = process.communicate(timeout=300)
    assert process.returncode == code, err
    return out


def grade(*args: str) -> str:
    """The standard output of ``python -m grader grade ARGS`` that exited
    0, by the command's main in this process (in_process.py: for tests
    whose subject is the grade; the refusals, batch, similarity and the
    other commands run as processes)."""
    run = grade_command(*args)
    assert run.returncode == 0, run.stderr
    return run.stdout


def items(report: dict[str, Any]) -> dict[str, tuple[float, bool]]:
    """Each rubric item's (score, passed) in a JSON report."""
    return {i["id"]: (i["score"], i["passed"]) for i in report["items"]}


# --------------------------------------------------------------------------
# 1. One grade for one piece of code


def test_markers_do_not_change_the_grade(tmp_path):
    """The correct classes score the same, item by item, with the stub's
    markers and without them (an upload of any name): the stub's own
    closing lines (``return att, probs``) are not the student's."""
    marked = tmp_path / "modeling_attention.py"
    marked.write_text(solution_text(markers=True))
    bare = tmp_path / "my homework v2.py"
    bare.write_text(solution_text(markers=False))
    assert not MARKER.search(bare.read_text())
    with_markers, without = (json.loads(grade(str(path), "--format",
                                              "json"))
                             for path in (marked, bare))
    assert items(without) == items(with_markers)
    assert without["score"] == with_markers["score"] == 11.0
    shapes = next(i for i in without["items"] if i["id"] == "task2.shapes")
    assert shapes["passed"] and "return att" not in shapes["message"]


# --------------------------------------------------------------------------
# 2. The public tests point at the real fix

SUBMISSIONS = Path(__file__).resolve().parent / "submissions"
HOMEWORK = ROOT / "assignment" / "multi_head_attention"
NO_SCALING = ("The scores are not divided by the square root of the key "
              "size. Divide q k^T by sqrt(d_k) before the softmax.")
SOFTMAX_DIM = ("The softmax runs over the wrong dimension. Take it over the "
               "keys, the last dimension of the scores (dim=-1).")
MASK_DIAGONAL = ("The causal mask also hides the current token. Mask only "
                 "j > i: torch.triu(..., diagonal=1).")
MASK_SEES_NEXT = ("The causal mask lets each token see the next one. Look "
                  "at the mask's diagonal: mask every j > i, "
                  "torch.triu(..., diagonal=1), not diagonal=2.")
WRONG = "the shape is right but the values are not."
# What each classic mistake's public tests say, word for word; and what
# they must not say (a cause the mistake is not).
CLASSIC = {
    "mistake_no_scaling": (
        [f"AssertionError: SelfAttention output: {WRONG} {NO_SCALING}",
         f"AssertionError: probs: {WRONG} {NO_SCALING}",
         f"AssertionError: att: {WRONG} {NO_SCALING}",
         f"AssertionError: att (causal): {WRONG} {NO_SCALING}"],
        "7 failed, 16 passed"),
    "mistake_softmax_dim": (
        [f"AssertionError: SelfAttention output: {WRONG} {SOFTMAX_DIM}",
         f"AssertionError: probs: {WRONG} {SOFTMAX_DIM}",
         f"AssertionError: att (causal): {WRONG} {SOFTMAX_DIM}",
         f"AssertionError: att (causal) at positions 0..2: {WRONG} "
         f"{SOFTMAX_DIM}",
         f"AssertionError: {SOFTMAX_DIM}"],
        "10 failed, 13 passed"),
    "mistake_mask_diagonal": (
        [f"AssertionError: att (causal): {WRONG} {MASK_DIAGONAL}",
         f"AssertionError: {MASK_DIAGONAL}",
         f"AssertionError: att (causal) at positions 0..2: {WRONG} "
         f"{MASK_DIAGONAL}"],
        "5 failed, 18 passed"),
    "diagnoses/mask_sees_next_triu2": (
        [f"AssertionError: att (causal): {WRONG} {MASK_SEES_NEXT}",
         f"AssertionError: {MASK_SEES_NEXT}"],
        None),
}
MISLEADING = ("lets tokens see the future", "Position i may attend",
              "check the mask", "Check the head split")


def test_classic_mistakes_get_their_cause_in_the_public_tests(tmp_path):
    """In the released homework, ``python -m pytest tests/public`` on the
    three classic mistakes (and a diagonal=2 mask) names the cause the
    grader's diagnosis names, in the grader's words, and nothing else."""
    import shutil

    from grader.rubric import get_assignment

    rubric = get_assignment("multi_head_attention").diagnoses
    for sentence, mistake in ((NO_SCALING, "no_scaling"),
                              (SOFTMAX_DIM, "softmax_dim"),
                              (MASK_DIAGONAL, "mask_diagonal"),
                              (MASK_SEES_NEXT, "mask_sees_next")):
        assert rubric[mistake] == sentence
    runs = {}
    for name in CLASSIC:
        folder = tmp_path / name.replace("/", "_")
        shutil.copytree(HOMEWORK, folder)
        shutil.copy(SUBMISSIONS / f"{name}.py",
                    folder / "transformer_lm" / "modeling_attention.py")
        runs[name] = subprocess.Popen(
            [sys.executable, "-m", "pytest", "tests/public", "-q",
             "-p", "no:cacheprovider", "-p", "no:xdist"], cwd=folder,
            env={k: v for k, v in environment().items()
                 if k != "PYTHONPATH"},
            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for name, run in runs.items():
        out, _ = run.communicate(timeout=300)
        lines, tally = CLASSIC[name]
        assert run.returncode == 1, out
        for line in lines:
            assert line in out, (name, line, out[-3000:])
        said = "\n".join(line for line in out.splitlines()
                         if line.startswith("E "))
        for words in MISLEADING:
            assert words not in said, (name, words)
        if tally is not None:
            assert tally in out, (name, out[-500:])


# --------------------------------------------------------------------------
# A class folder as a TA grades it, graded once for the tests below.

STUB = ROOT / "transformer_lm" / "modeling_attention.py"


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    """The rows of a batch's CSV by student."""
    import csv

    with path.open(newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> Path:
    """``python -m grader batch submissions/ --out grades.csv`` on a class:
    alice is correct (with the bonus), bob's file does not parse, carol
    handed in the untouched stub, dave's repository does not scale the
    scores, erin's LMS download is a zip of her repository, zoe (on the
    roster) handed in nothing. Returns the output folder."""
    folder = tmp_path_factory.mktemp("class")
    submissions = folder / "submissions"
    submissions.mkdir()
    (submissions / "alice.py").write_text(solution_text())
    (submissions / "bob.py").write_text(
        (SUBMISSIONS / "broken_syntax_error.py").read_text())
    (submissions / "carol.py").write_text(STUB.read_text())
    dave = submissions / "dave" / "transformer_lm"
    dave.mkdir(parents=True)
    (dave / "modeling_attention.py").write_text(
        (SUBMISSIONS / "mistake_no_scaling.py").read_text())
    with zipfile.ZipFile(submissions / "erin.zip", "w") as archive:
        archive.writestr("erin-hw4-main/transformer_lm/modeling_attention.py",
                         solution_text())
        archive.writestr("__MACOSX/._modeling_attention.py", "junk")
    (folder / "roster.csv").write_text(
        "student,email\nalice,a@x\nbob,b@x\ncarol,c@x\ndave,d@x\n"
        "erin,e@x\nzoe,z@x\n# yves withdrew\n")
    out = folder / "out"
    finish(start("batch", "submissions", "--out", "out/grades.csv",
                 "--jobs", "2", "--roster", "roster.csv", cwd=folder))
    return out


# --------------------------------------------------------------------------
# 3. Reports say only what is true


def test_unchecked_items_are_not_passes_and_a_syntax_error_is_filterable(
        graded_class):
    """Items the grader could not check say "not checked" and why, never
    [PASS], and the class summary does not count them as passed; the
    CSV's ``syntax_error`` column holds Python's words for bob alone."""
    rows = read_csv(graded_class / "grades.csv")
    assert rows["bob"]["syntax_error"] == \
        "SyntaxError at line 73: '(' was never closed"
    assert {rows[s]["syntax_error"] for s in ("alice", "carol", "dave")} \
        == {""}
    reports = graded_class / "grades.csv.reports"
    bob = (reports / "bob.py" / "report.txt").read_text()
    for item in ("task1.pep8", "task1.shapes", "task2.pep8",
                 "task2.shapes"):
        assert f"[PASS] {item}" not in bob
        assert re.search(rf"\[----\] {re.escape(item)} .*\n      not "
                         rf"checked: the code does not parse", bob), item
    carol = json.loads((reports / "carol.py" / "report.json").read_text())
    shapes = next(i for i in carol["items"] if i["id"] == "task2.shapes")
    assert not shapes["passed"]
    assert shapes["message"] == ("not checked: MultiHeadSelfAttention."
                                 "forward has no code of yours yet")
    summary = json.loads(
        (graded_class / "grades.csv.summary.json").read_text())
    shapes = summary["items"]["task1.shapes"]
    pep8 = summary["items"]["task1.pep8"]
    # alice, dave, erin; and carol's stub for pep8
    assert (shapes["passed"], shapes["graded"]) == (3, 5)
    assert (pep8["passed"], pep8["graded"]) == (4, 5)


def test_a_line_that_ran_is_not_said_never_to_have_run(tmp_path):
    """Dropout only in training mode ran for the dropout point; the shape
    checks do not run it, but every run records shapes, so the line is
    verified where it ran (the graded dropout cases): no note says it did
    not run, and its comment counts as checked."""
    text = solution_text().replace(
        "        probs = self.dropout(probs)\n"
        "        # [batch_size * num_heads, seq_len, seq_len]\n",
        "        if self.training:\n"
        "            probs = self.dropout(probs)\n"
        "            # [batch_size * num_heads, seq_len, seq_len]\n")
    assert "if self.training:" in text
    path = tmp_path / "modeling_attention.py"
    path.write_text(text)
    report = grade(str(path))
    assert "never ran" not in report
    assert "not run in any of the grader's runs" not in report
    assert ("every tensor statement in MultiHeadSelfAttention.forward has "
            "a correct shape comment") in report


def test_a_helper_module_of_ones_own_is_named_with_what_to_do(tmp_path):
    """A repository whose file imports a module of its own package (red
    team 6): only the graded file reaches the sandbox, and the report
    says so and what to do, besides Python's own error; the classes that
    do not need the module are graded on merit (red team 9)."""
    package = tmp_path / "repo" / "transformer_lm"
    package.mkdir(parents=True)
    (package / "attn_utils.py").write_text("SCALE = 2\n")
    text = solution_text().replace(
        "import torch\n",
        "import torch\n\nfrom transformer_lm.attn_utils import SCALE\n", 1)
    assert "attn_utils" in text
    (package / "modeling_attention.py").write_text(text)
    report = json.loads(grade(str(tmp_path / "repo"), "--public-only",
                              "--format", "json"))
    # The import is module-level code that fails: it costs only what
    # needs it (nothing here), and the report says why it was skipped.
    assert report["score"] == 11
    notes = " ".join(report["notes"])
    assert "No module named 'transformer_lm.attn_utils'" in notes
    assert ("skipped: not a module of transformer_lm as the homework "
            "ships it (one file is graded, alone: put the helper in the "
            "file)") in notes


def test_similarity_gives_the_true_reason(graded_class, tmp_path):
    """``similarity`` says bob's file does not parse (not that he wrote
    nothing) and carol has nothing of her own."""
    folder = graded_class.parent
    out = finish(start("similarity", "submissions", "--out",
                       str(tmp_path / "similarity.html"), cwd=folder))
    assert "compared" in out
    html = (tmp_path / "similarity.html").read_text()
    assert ("bob: SelfAttention: the code does not parse (SyntaxError at "
            "line 73: &#x27;(&#x27; was never closed)") in html
    assert "carol: no code of their own beyond the stub&#x27;s" in html


# --------------------------------------------------------------------------
# 4. One maximum everywhere


def test_one_maximum_with_the_bonus_apart(graded_class, tmp_path):
    """alice earns every point and the bonus: every rendering says 10 out
    of 10 with +1 bonus apart, never 11 / 10 or a maximum of 11."""
    reports = graded_class / "grades.csv.reports" / "alice.py"
    text = (reports / "report.txt").read_text()
    assert "Total: 10 / 10 + 1 bonus\n" in text
    assert "Coding Task 1: SelfAttention: 4 / 4 + 1 bonus\n" in text
    assert "11 / 10" not in text and "5 / 4" not in text
    report = json.loads((reports / "report.json").read_text())
    assert (report["score"], report["max_score"], report["bonus"]) == \
        (11.0, 10.0, 1.0)
    row = read_csv(graded_class / "grades.csv")["alice"]
    assert (row["score"], row["max_score"], row["bonus"]) == \
        ("11.0", "10.0", "1.0")
    assert read_csv(graded_class / "grades.csv")["bob"]["bonus"] == "0.0"
    path = tmp_path / "modeling_attention.py"
    path.write_text(solution_text())
    gradescope = json.loads(grade(str(path), "--format", "gradescope",
                                  "--public-only"))
    assert gradescope["score"] == 11.0
    assert sum(t["max_score"] for t in gradescope["tests"]) == 10.0
    assert "Coding Task 1: SelfAttention: 4 / 4 + 1 bonus" in \
        gradescope["output"]


# --------------------------------------------------------------------------
# 9. Gradescope visibility (and 1. through a Gradescope upload of any name)


def test_gradescope_keeps_hidden_sizes_until_the_due_date(tmp_path):
    """The README's bundle, dry-run as docs/gradescope.md shows: an upload
    without markers, under any name, with a diagonal=2 mask. The visible
    test names no hidden case's sizes; a 0-point details test shows them
    after the due date; the markers cost nothing (10, as with them)."""
    import zipfile

    bundle = tmp_path / "autograder.zip"
    finish(start("gradescope-bundle", str(bundle), "--assignment",
                 "multi_head_attention", "--seed", "4242"))
    root = tmp_path / "ag"
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    assert "--hidden-details after_due_date" in \
        (root / "source" / "run_autograder").read_text()
    (root / "submission").mkdir()
    (root / "results").mkdir()
    text = MARKER.sub("", (SUBMISSIONS / "diagnoses"
                           / "mask_sees_next_triu2.py").read_text())
    assert not MARKER.search(text)
    (root / "submission" / "HW4 final (1).py").write_text(text)
    env = {k: v for k, v in environment().items() if k != "PYTHONPATH"}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable)
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")],
                         cwd=root, env=env, text=True, capture_output=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 10.0
    tests = {t["number"]: t for t in results["tests"]}
    assert tests["task2.shapes"]["status"] == "passed"
    causal = tests["task2.causal"]
    assert causal["visibility"] == "visible" and causal["score"] == 0.0
    assert "hidden case '" not in causal["output"]
    assert "a hidden case" in causal["output"]
    details = tests["task2.causal.details"]
    assert details["visibility"] == "after_due_date"
    assert (details["score"], details["max_score"]) == (0.0, 0.0)
    assert re.search(r"hidden case 'hidden-\d+' \(batch_size=\d+",
                     details["output"])
    assert "mask_sees_next" in details["output"]
    assert sum(t["max_score"] for t in results["tests"]) == 10.0


# --------------------------------------------------------------------------
# 6. Reports fit every reader


def test_feedback_names_files_relative_to_the_submission(graded_class):
    """dave's feedback (a repository) names his file from his folder, never
    the instructor's; its JSON carries the sentence of each diagnosis."""
    folder = graded_class / "grades.csv.reports" / "dave"
    instructor = str(graded_class.parent.resolve())
    text = (folder / "report.txt").read_text()
    raw = (folder / "report.json").read_text()
    assert instructor not in text and instructor not in raw
    assert "Submission: dave\n" in text
    report = json.loads(raw)
    assert {t["source"] for t in report["tasks"]} == {
        "dave/transformer_lm/modeling_attention.py"}
    assert report["diagnoses"] == {"no_scaling": (
        "The scores are not divided by the square root of the key size. "
        "Divide q k^T by sqrt(d_k) before the softmax.")}
    forward = next(i for i in report["items"] if i["id"] == "task1.forward")
    assert forward["message"].startswith(
        "2 of 3 points: your output matches the reference with the "
        "scaling removed (the seed's -1 for not scaling). ")
    assert "credit" not in forward["message"]
    row = read_csv(graded_class / "grades.csv")["dave"]
    assert row["path"] == "submissions/dave"  # the TA's CSV: as typed
    carol = (graded_class / "grades.csv.reports" / "carol.py"
             / "report.txt").read_text()
    assert "zero-qk" not in carol and "equal-scores" not in carol
    assert re.search(r"'(public|hidden-\d+)' with zero query and key "
                     r"weights", " ".join(carol.split()))


# --------------------------------------------------------------------------
# 7. Class folders as LMS downloads come


def test_a_zip_is_graded_and_the_roster_names_who_sent_nothing(
        graded_class):
    """erin's zip is graded like her folder; zoe, on the roster with no
    entry, is a row of 0 saying why; nobody else is added."""
    rows = read_csv(graded_class / "grades.csv")
    assert sorted(rows) == ["alice", "bob", "carol", "dave", "erin", "zoe"]
    assert (rows["erin"]["status"], rows["erin"]["score"]) == \
        ("graded", "11.0")
    assert (rows["zoe"]["status"], rows["zoe"]["score"]) == ("error", "0.0")
    assert rows["zoe"]["errors"] == (
        "submitted nothing: zoe is on the roster roster.csv but has no "
        "entry in the class folder")
    summary = json.loads(
        (graded_class / "grades.csv.summary.json").read_text())
    assert (summary["graded"], summary["not_graded"]) == (5, ["zoe"])


def _zip(path: Path, members: dict[str, bytes], link: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = 0o120777 << 16
            archive.writestr(info, "/etc/passwd")
    return path


def test_hostile_zips_are_refused_in_one_line(tmp_path):
    """``grade`` refuses a zip that escapes its folder, holds a link or
    inflates past the bound, in one line, and writes nothing outside."""
    good = solution_text().encode()
    cases = {
        "escape": ({"../../escaped.py": good}, "", "points outside"),
        "absolute": ({"/tmp/absolute.py": good}, "", "absolute"),
        "link": ({"hw/modeling_attention.py": good}, "hw/link.py",
                 "symbolic link"),
        "bomb": ({"hw/modeling_attention.py": good,
                  "hw/zeros.py": b"0" * (5 * 1024 * 1024)}, "",
                 "larger than 4 MB"),
    }
    runs = {}
    for name, (members, link, _) in cases.items():
        path = _zip(tmp_path / f"{name}.zip", members, link)
        runs[name] = start("grade", str(path), "--public-only")
    for name, run in runs.items():
        out, err = run.communicate(timeout=120)
        assert run.returncode == 2 and out == "", (name, out, err)
        assert len(err.strip().splitlines()) == 1, err
        assert cases[name][2] in err, (name, err)
    assert not (tmp_path.parent / "escaped.py").exists()


# --------------------------------------------------------------------------
# 5. A class summary people can read exactly


def test_summary_png_reads_exactly(graded_class):
    """The batch's summary.png: its title names the assignment, the date
    and who was and was not graded; one bar per reachable total (10 and
    11 apart); whole students on the axis; the mean and median marked."""
    import matplotlib.pyplot as plt

    from grader.routes.summary import figure

    assert (graded_class / "grades.csv.summary.png").stat().st_size > 10_000
    summary = json.loads(
        (graded_class / "grades.csv.summary.json").read_text())
    canvas = figure(summary, day="2026-11-27")
    try:
        title = canvas._suptitle.get_text()
        assert title == ("multi_head_attention, 2026-11-27: 5 graded, 1 "
                         "not graded, of 6")
        histogram = canvas.axes[0]
        bars = {round(p.get_x() + p.get_width() / 2, 3): p.get_height()
                for p in histogram.patches}
        assert sorted(bars) == [float(v) for v in range(12)]
        # bob and carol 0, dave 6, alice and erin 11 (10 + the bonus)
        seen = {v: h for v, h in bars.items() if h}
        assert seen == {0.0: 2, 6.0: 1, 11.0: 2}
        ticks = [t for t in histogram.get_yticks() if t >= 0]
        assert all(float(t).is_integer() for t in ticks)
        labels = [t.get_text() for t in histogram.get_legend().get_texts()]
        assert labels == ["mean 5.6", "median 6"]
        assert histogram.get_title() == \
            "Totals out of 10 (orange: with the bonus)"
    finally:
        plt.close(canvas)


# --------------------------------------------------------------------------
# 8. Docs that match the kit

# Every command a person types: (module, subcommand); "" for the module's
# own options.
COMMANDS = [("grader", command) for command in (
    "", "grade", "batch", "summary", "merge", "similarity", "nbgrader",
    "gradescope-bundle", "shapes", "assignments", "audit")] + [
    ("grader.classroom", "grade"), ("grader.classroom", "run"),
    ("solutions.build", ""), ("solutions.build", "student-repo")]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


def usage_blocks(readme: str, module: str, command: str) -> str:
    """The README's usage lines of ``python -m MODULE [COMMAND]``: each
    ``python -m`` line of a code block that starts that command, with its
    continuation lines, comments left out."""
    head = re.escape(" ".join(["python -m", module,
                               *filter(None, [command])]))
    # the module alone: not followed by one of its commands
    start = re.compile(head + (r"(\s|$)" if command
                               else r"(?!\S)(?! +[a-z])"))
    found = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", readme, re.S | re.M):
        for part in re.split(r"(?=python -m )", block):
            if start.match(part):
                found.append(re.sub(r"#.*", "", part))
    return "\n".join(found)


def test_the_readme_usage_blocks_list_every_option_help_lists(capsys):
    """For every command, the options in the usage paragraph of its
    ``--help`` (argparse's, printed in this process) are the options of
    the README's usage block of that command (a block exists for each)."""
    from grader.routes import classroom, cli
    from solutions import build

    mains = {"grader": cli.main, "grader.classroom": classroom.main,
             "solutions.build": build.main}
    readme = (ROOT / "README.md").read_text()
    missing = {}
    for module, command in COMMANDS:
        with pytest.raises(SystemExit) as done:
            mains[module]([*filter(None, [command]), "--help"])
        assert done.value.code == 0
        usage = capsys.readouterr().out.split("\n\n")[0]
        assert usage.startswith(f"usage: python -m {module}"), usage
        options = set(OPTION.findall(usage)) - {"--help"}
        block = usage_blocks(readme, module, command)
        assert block, f"no usage block for python -m {module} {command}"
        gone = sorted(options - set(OPTION.findall(block)))
        if gone:
            missing[f"{module} {command}"] = gone
    assert missing == {}


def test_the_layout_names_every_file_and_notebook():
    """The README's layout block names every top-level entry of the
    repository, every notebook of the three releases, every student
    module and reference solution, and every notebook template."""
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):readme.index(
        "## Regenerating generated files")]
    named = set(re.findall(r"[\w.-]+", layout))
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, text=True,
                             capture_output=True, check=True).stdout.split()
    wanted = {path.split("/")[0] for path in tracked}
    for path in map(Path, tracked):
        parts = path.parts
        if (parts[0] == "assignment" and path.suffix == ".ipynb") or \
                (parts[0] in ("transformer_lm", "solutions")
                 and len(parts) == 2 and path.suffix == ".py") or \
                parts[:2] == ("solutions", "notebooks") or \
                (parts[0] == "grader" and len(parts) == 2) or \
                (parts[:2] == ("tests", "public") and len(parts) == 3):
            wanted.add(path.name)
    assert len([n for n in wanted if n.endswith(".ipynb")]) == 3
    assert sorted(wanted - named) == []


def test_the_readme_counts_three_assignments_and_guides_installs():
    """Three assignments wherever the docs count them; the quick start
    says what the pinned torch pulls and how to get the CPU build; the
    student section suggests a virtual environment."""
    docs = {path.name: path.read_text()
            for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    for name, text in docs.items():
        assert not re.search(r"\b(two|both) assignments\b|kit has two",
                             text), name
    assert "three assignments" in docs["README.md"]
    readme = docs["README.md"]
    quick = " ".join(readme[readme.index("## Quick start"):
                            readme.index("## For students")].split())
    assert "CUDA build on Linux x86-64" in quick
    assert ('pip install "torch==2.13.0" --index-url '
            'https://download.pytorch.org/whl/cpu') in quick
    students = readme[readme.index("## For students"):
                      readme.index("### Shape comments")]
    assert "python -m venv .venv" in students


def test_impl_across_several_assignments_refuses_in_one_line():
    """In the kit, ``pytest tests/public --impl FILE`` collects three
    assignments' tests: one line says to run one folder, no test runs."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/public", "--impl",
         "solutions/modeling_attention.py", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist"], cwd=ROOT, env=environment(), text=True,
        capture_output=True, timeout=120)
    assert run.returncode == 4
    errors = [line for line in (run.stdout + run.stderr).splitlines()
              if line.startswith("ERROR")]
    assert errors == [
        "ERROR: --impl tests one implementation, but these tests belong to "
        "3 assignments (attention_basics, multi_head_attention, "
        "transformer_block): run one folder, e.g. python -m pytest "
        "tests/public/attention_basics --impl FILE"]


def test_local_classroom_preview_has_no_red_line_for_a_github_step(
        tmp_path):
    """``python -m grader.classroom grade`` run locally (as
    docs/github-classroom.md shows) on full marks: every line is green,
    and the public tests, a GitHub-only step, are said to be so."""
    env = {k: v for k, v in environment().items()
           if k not in ("GITHUB_ACTIONS", "PUBLIC_TESTS_RESULT",
                        "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
    path = tmp_path / "modeling_attention.py"
    path.write_text(solution_text())
    run = subprocess.run(
        [sys.executable, "-m", "grader.classroom", "grade", str(path),
         "--assignment", "multi_head_attention", "--feedback",
         str(tmp_path / "grading")], cwd=ROOT, env=env, text=True,
        capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr
    preview = run.stdout[run.stdout.index("What GitHub Classroom will show"):]
    assert "❌" not in preview and "no result" not in preview
    assert ("publictests: a step of the workflow on GitHub only (here: "
            "python -m pytest tests/public)") in preview
    # One maximum (point 4): Classroom's is the rubric's 10; the earned
    # bonus counts beyond it, as Gradescope's 11 of 10.
    assert "task1: 4 / 4 (pass), +1 bonus in the points\n" in preview
    assert "task1bonus: 0 / 0 (pass)\n" in preview
    assert "Classroom points: 11 / 10" in preview
