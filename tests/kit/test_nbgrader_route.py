"""The nbgrader route, end to end: a class graded outside the kernel.

A scratch course holds the repository's ``nbgrader_config.py`` and the
kit's source assignments: the homework under its own id and the warm-up
under another id (``warmup``, its notebook keeping the kit's name). Every
step runs for real with nbgrader 0.9.6: ``generate_assignment``; a class in
``submitted/`` (the solution notebook, the untouched release, a partly
correct notebook, the release with the classes in the module, a notebook
that hijacks its kernel, one with forged graded cells, one whose class
cell does not parse, no notebook, a
notebook that is not JSON, a module that is a link to the reference
solution, a timestamp that is not a date); a plain ``nbgrader autograde``
of the class first (with the kit's configuration it grades outside the
kernel, through the kit's steps); a TA's manual grade and an override of
an automatic score; then ``python -m grader nbgrader`` (a regrade),
``generate_feedback`` and ``export``. Both must record the same: the
gradebook's automatic scores, per cell and per student, are the credits of
``python -m grader grade`` on the same notebook, with the instructor's
secret seed. Slow: a few minutes.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from in_process import grade_command

from grader.output.notebook import grade_id, nbgrader_credits
from grader.rubric import get_assignment

ROOT = Path(__file__).resolve().parents[2]
HIJACK = Path(__file__).resolve().parent / "submissions" / "nbgrader" / \
    "hijack_cell.py"
HW = "multi_head_attention"
KIT = get_assignment(HW)
NOTEBOOK = KIT.notebook
WARMUP = "warmup"
WARMUP_KIT = get_assignment("attention_basics")
SEED = "course-secret-7"
ENV = {**os.environ, "GRADER_SEED": SEED,
       "PYTHONPATH": os.pathsep.join(
           [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
pytestmark = pytest.mark.slow

CELLS = ("task1_init", "task1_forward", "task1_bonus", "task2_scores",
         "task2_causal", "task2_output")
FULL = dict(zip(CELLS, (1, 3, 1, 3, 1, 2)))
ZERO = dict.fromkeys(CELLS, 0)
# Each student's automatic score per autograded cell.
EXPECTED = {
    "alice": FULL,                       # the solution notebook
    "bob": ZERO,                         # the release, untouched
    "carol": dict(zip(CELLS, (1, 2, 0, 3, 0, 2))),  # unscaled, bad mask
    "dave": FULL,                        # the release + a written module
    "mallory": ZERO,                     # the release + a kernel hijack
    "trudy": ZERO,                       # the release + forged graded cells
    "oscar": ZERO,                       # a class cell that does not parse
    "eve": ZERO,                         # no notebook at all
    "frank": ZERO,                       # a notebook that is not JSON
    "grace": ZERO,                       # module: a link to the solution
    "ivan": FULL,                        # timestamp.txt is not a date
}
# Graded from their notebook: the same points as `python -m grader grade`.
GRADED = ("alice", "bob", "carol", "dave", "mallory", "trudy",
          "oscar")
MANUAL = ("alice", "q1", 1.0)            # a TA's grade that must survive
OVERRIDE = ("carol", "task1_forward", 3.0)   # a TA's override of a score
# What a plain `nbgrader autograde` cannot take in (nbgrader's own
# limits): no notebook to convert, a notebook that is not JSON, a
# timestamp.txt that is not a date.
PLAIN_SKIPS = ("eve", "frank", "ivan")


def _run(course: Path, *args: str, check: bool = True
         ) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", *args], cwd=course,
                            capture_output=True, text=True, timeout=900,
                            env=ENV)
    if check:
        assert result.returncode == 0, (result.stdout[-3000:]
                                        + result.stderr[-5000:])
    return result


def _edit_cell(notebook: dict, cell_id: str, old: str, new: str) -> None:
    for cell in notebook["cells"]:
        if cell.get("id") == cell_id:
            source = "".join(cell["source"])
            assert old in source, f"{old!r} not in cell {cell_id}"
            cell["source"] = source.replace(old, new)
            return
    raise KeyError(cell_id)


def _cell(notebook: dict, cell_id: str) -> dict:
    return next(c for c in notebook["cells"] if c.get("id") == cell_id)


def _auto_scores(course: Path, assignment: str, student: str,
                 notebook: str = HW) -> dict[str, float | None]:
    """Each cell's automatic points: its automatic score, plus its extra
    credit (where nbgrader keeps the bonus: the bonus cell is worth 0)."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        found = gradebook.find_submission_notebook(notebook, assignment,
                                                   student)
        return {g.name: None if g.auto_score is None
                else g.auto_score + (g.extra_credit or 0.0)
                for g in found.grades}


def _submit_class(course: Path) -> None:
    source = course / "solutions" / "source" / HW
    release = course / "assignment" / HW

    def submit(student: str, folder: Path) -> Path:
        target = course / "submitted" / student / HW
        shutil.copytree(folder, target, symlinks=True)
        return target

    submit("alice", source)
    shutil.copytree(course / "solutions" / "source" / WARMUP,
                    course / "submitted" / "alice" / WARMUP)
    submit("bob", release)
    carol = submit("carol", release)
    written = json.loads((source / NOTEBOOK).read_text())
    _edit_cell(written, "self_attention", " / self.scale, dim=-1)",
               ", dim=-1)")
    _edit_cell(written, "multi_head_self_attention", ".triu(diagonal=1)",
               ".triu(diagonal=0)")
    notebook = json.loads((carol / NOTEBOOK).read_text())
    for cell_id in ("self_attention", "multi_head_self_attention"):
        _cell(notebook, cell_id)["source"] = _cell(written,
                                                   cell_id)["source"]
    (carol / NOTEBOOK).write_text(json.dumps(notebook))
    dave = submit("dave", release)
    shutil.copy(ROOT / "solutions" / "modeling_attention.py",
                dave / "transformer_lm" / "modeling_attention.py")

    mallory = submit("mallory", release)
    notebook = json.loads((mallory / NOTEBOOK).read_text())
    first = next(i for i, c in enumerate(notebook["cells"])
                 if c.get("id") == "task1_init")
    notebook["cells"].insert(first, {
        "cell_type": "code", "execution_count": None, "id": "hijack",
        "metadata": {}, "outputs": [], "source": HIJACK.read_text()})
    notebook["cells"] = [c for c in notebook["cells"]
                         if c.get("id") != "task2_output"]
    _cell(notebook, "task1_forward")["metadata"]["nbgrader"]["points"] = 100
    (mallory / NOTEBOOK).write_text(json.dumps(notebook))

    trudy = submit("trudy", release)
    notebook = json.loads((trudy / NOTEBOOK).read_text())
    forged = {"grade": True, "grade_id": "extra_points", "locked": False,
              "points": 50.0, "schema_version": 3, "solution": False,
              "task": False}
    copied = dict(_cell(notebook, "task1_init")["metadata"]["nbgrader"])
    for meta, code in ((forged, "50.0"), (copied, "1.0")):
        notebook["cells"].append({
            "cell_type": "code", "execution_count": None,
            "metadata": {"nbgrader": meta}, "outputs": [], "source": code})
    (trudy / NOTEBOOK).write_text(json.dumps(notebook))

    oscar = submit("oscar", release)
    notebook = json.loads((oscar / NOTEBOOK).read_text())
    _edit_cell(notebook, "self_attention", "# YOUR CODE STARTS HERE",
               "# YOUR CODE STARTS HERE\n        scores = (q @ k\n")
    (oscar / NOTEBOOK).write_text(json.dumps(notebook))

    eve = course / "submitted" / "eve" / HW
    eve.mkdir(parents=True)
    (eve / "answers.txt").write_text("I wrote it in a text file.\n")
    frank = submit("frank", release)
    (frank / NOTEBOOK).write_text("{ this is not a notebook")
    ivan = submit("ivan", source)
    (ivan / "timestamp.txt").write_text("the day before the deadline\n")
    grace = submit("grace", release)
    module = grace / "transformer_lm" / "modeling_attention.py"
    module.unlink()
    module.symlink_to(ROOT / "solutions" / "modeling_attention.py")


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> SimpleNamespace:
    """A course where the whole route has run; what happened before it."""
    from nbgrader.api import Gradebook

    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / "source" / HW,
                    course / "solutions" / "source" / HW)
    shutil.copytree(ROOT / "solutions" / "source" / "attention_basics",
                    course / "solutions" / "source" / WARMUP)
    for assignment in (HW, WARMUP):
        _run(course, "nbgrader", "generate_assignment", assignment,
             "--force", "--log-level=ERROR")
    _submit_class(course)

    # A plain `nbgrader autograde` of the class first, as nbgrader's
    # documentation says: the kit's configuration grades outside the kernel.
    plain_run = _run(course, "nbgrader", "autograde", HW, "--create",
                     check=False)
    graded = [s for s in EXPECTED if s not in PLAIN_SKIPS]
    plain = {s: _auto_scores(course, HW, s) for s in graded}
    outputs = {s: _graded_outputs(_autograded(course, s)) for s in graded}
    stolen = course / "stolen_seed.txt"
    stolen_text = stolen.read_text() if stolen.exists() else None
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student, cell, points in (MANUAL, OVERRIDE):
            gradebook.find_grade(cell, HW, HW, student).manual_score = points
        gradebook.db.commit()

    route = _run(course, "grader", "nbgrader", HW, check=False)
    warmup = _run(course, "grader", "nbgrader", WARMUP, "--student",
                  "alice")
    _run(course, "nbgrader", "generate_feedback", HW, "--log-level=ERROR")
    _run(course, "nbgrader", "export", "--log-level=ERROR")
    return SimpleNamespace(path=course, plain=plain, stolen=stolen_text,
                           plain_run=plain_run, plain_outputs=outputs,
                           route=route, warmup=warmup)


def _autograded(course: Path, student: str) -> dict:
    return json.loads((course / "autograded" / student / HW / NOTEBOOK)
                      .read_text())


def _graded_outputs(notebook: dict) -> dict[str, list]:
    """Each autograded cell's outputs (grade id -> outputs)."""
    return {c["metadata"]["nbgrader"]["grade_id"]: c["outputs"]
            for c in notebook["cells"]
            if c["metadata"].get("nbgrader", {}).get("grade")
            and c["cell_type"] == "code"}


def _feedback(course: Path, student: str) -> str:
    return (course / "feedback" / student / HW / f"{HW}.html").read_text()


def test_release_equals_the_committed_one(course):
    """generate_assignment reproduces the committed release exactly."""
    made = course.path / "assignment" / HW
    committed = ROOT / "assignment" / HW
    names = sorted(p.relative_to(made) for p in made.rglob("*")
                   if p.is_file())
    assert names == sorted(p.relative_to(committed)
                           for p in committed.rglob("*") if p.is_file())
    for name in names:
        assert (made / name).read_text() == (committed / name).read_text()


def test_plain_autograde_records_what_the_route_records(course):
    """``nbgrader autograde`` with the kit's configuration: every cell's
    score and message are the route's, no kernel ran (the hijacker stole
    nothing), and what nbgrader itself cannot take in is refused, never
    scored."""
    assert course.stolen is None
    for student, scores in course.plain.items():
        assert {c: scores[c] for c in CELLS} == EXPECTED[student], student
        after = _graded_outputs(_autograded(course.path, student))
        assert course.plain_outputs[student] == after, student
    log = course.plain_run.stdout + course.plain_run.stderr
    assert course.plain_run.returncode != 0
    assert "No notebooks were matched" in log or "eve" not in log
    for student in ("frank", "ivan"):
        assert f"for student '{student}'" in log, log[-3000:]


def test_an_override_survives_a_regrade(course):
    """The TA's override of an automatic score stays through the route's
    regrade, flagged for review; the automatic score is the grader's."""
    from nbgrader.api import Gradebook

    student, cell, points = OVERRIDE
    with Gradebook(f"sqlite:///{course.path / 'gradebook.db'}") as gb:
        grade = gb.find_grade(cell, HW, HW, student)
        assert grade.manual_score == points
        assert grade.auto_score == EXPECTED[student][cell]
        assert grade.needs_manual_grade
        assert grade.score == points


def test_route_reports_every_student(course):
    """Exit 1 (some could not be graded); each of them named, with why."""
    route = course.route
    assert route.returncode == 1, route.stderr[-3000:]
    assert "graded 9 of 11 submissions of multi_head_attention" in \
        route.stdout
    lines = route.stdout.splitlines()
    assert any("eve" in line and f"no {NOTEBOOK}" in line
               and "answers.txt" in line for line in lines)
    # the file named in the submission (the line names the student)
    assert any("frank" in line and f"{NOTEBOOK} is not a valid notebook: "
               f"invalid JSON" in line and str(course.path) not in line
               for line in lines), lines
    assert "not recorded" not in route.stdout
    assert any(line.startswith("  note: ivan: timestamp.txt is not a date")
               for line in lines), lines


def test_gradebook_scores_per_cell(course):
    """Each autograded cell's automatic score, for every student."""
    for student, cells in EXPECTED.items():
        scores = _auto_scores(course.path, HW, student)
        assert {c: scores[c] for c in CELLS} == cells, student


def test_the_bonus_is_extra_credit_and_the_maximum_is_ten(course):
    """nbgrader's maximum is the rubric's: the automatic cells are worth
    10, the bonus cell 0, and the bonus is that cell's extra credit
    (counted in the score, as nbgrader counts extra credit); the feedback
    page says so."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.path / 'gradebook.db'}") as gb:
        for student, cells in EXPECTED.items():
            grade = gb.find_grade("task1_bonus", HW, HW, student)
            assert (grade.max_score, grade.auto_score) == (0.0, 0.0)
            assert (grade.extra_credit or 0.0) == cells["task1_bonus"]
            assert grade.score == cells["task1_bonus"], student
            notebook = gb.find_submission_notebook(HW, HW, student)
            assert notebook.max_code_score == 10.0
        assert gb.find_submission_notebook(HW, HW, "alice").code_score \
            == 11.0
    alice = _feedback(course.path, "alice")
    # 10 automatic points + the bonus + the TA's Q1, out of 10 + Q1-Q5
    assert f"{HW} (Score: 12.0 / 15.0)" in alice
    assert "Test cell</a> (Score: 1.0 / 0.0)" in alice
    assert ("task1.bonus: +1 bonus, extra credit beyond the 10 points "
            "(this cell is worth 0 of them)") in alice


def test_same_points_as_the_grade_command(course):
    """``python -m grader grade`` on each submitted notebook, with the same
    secret seed: its credits are the gradebook's cells, its total the
    submission's automatic score. (The command runs by its main in this
    process, in_process.py: seven torch imports fewer.)"""
    from nbgrader.api import Gradebook

    for student in GRADED:
        result = grade_command(str(course.path / "submitted" / student / HW
                                   / NOTEBOOK), "--format", "json",
                               unset=(), GRADER_SEED=SEED)
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        credits = {grade_id(k): v for k, v in
                   nbgrader_credits(report, KIT).items()}
        scores = _auto_scores(course.path, HW, student)
        assert credits == {c: scores[c] for c in CELLS}, student
        assert credits == EXPECTED[student], student
        with Gradebook(f"sqlite:///{course.path / 'gradebook.db'}") as gb:
            submission = gb.find_submission(HW, student)
            overridden = (OVERRIDE[2] - credits[OVERRIDE[1]]
                          if student == OVERRIDE[0] else 0.0)
            assert submission.code_score == report["score"] + overridden, \
                student


def test_manual_grades_survive_and_count(course):
    """The TA's manual grade is kept; export adds it to the automatic
    points; every student is exported, max 10 automatic + Q1-Q5 (the
    bonus is extra credit, in the score and never in the maximum)."""
    from nbgrader.api import Gradebook

    student, cell, points = MANUAL
    with Gradebook(f"sqlite:///{course.path / 'gradebook.db'}") as gb:
        grade = gb.find_grade(cell, HW, HW, student)
        assert grade.manual_score == points
    rows = {(row["assignment"], row["student_id"]): row for row in
            csv.DictReader((course.path / "grades.csv").open())}
    for student, cells in EXPECTED.items():
        row = rows[(HW, student)]
        manual = points if student == MANUAL[0] else 0.0
        if student == OVERRIDE[0]:
            manual += OVERRIDE[2] - cells[OVERRIDE[1]]
        assert float(row["raw_score"]) == sum(cells.values()) + manual
        assert float(row["max_score"]) == 15.0
    assert float(rows[(WARMUP, "alice")]["raw_score"]) == 10.0


def test_the_kernel_never_ran(course):
    """No student code ran as the instructor: the hijack cell wrote
    nothing, and the secret seed is in no file the route wrote."""
    assert not (course.path / "stolen_seed.txt").exists()
    for folder in ("autograded", "feedback", "grader_results"):
        for path in (course.path / folder).rglob("*"):
            if path.is_file() and path.suffix in (".ipynb", ".html",
                                                  ".json", ".txt", ".csv"):
                assert SEED not in path.read_text(errors="replace"), path


def test_autograded_cells_hold_the_grader_verdict(course):
    """Every autograded cell: the grader's message on stdout, figures,
    then its credit; never stderr or an error (nbgrader would score 0)."""
    for student, cells in EXPECTED.items():
        notebook = _autograded(course.path, student)
        graded = {c["metadata"]["nbgrader"]["grade_id"]: c
                  for c in notebook["cells"]
                  if c["metadata"].get("nbgrader", {}).get("grade")
                  and c["cell_type"] == "code"}
        assert set(graded) == set(CELLS), student
        assert len(graded) == sum(
            1 for c in notebook["cells"]
            if c["metadata"].get("nbgrader", {}).get("grade")
            and c["cell_type"] == "code"), student
        for name, cell in graded.items():
            kinds = [o["output_type"] for o in cell["outputs"]]
            assert kinds[0] == "stream" and kinds[-1] == "execute_result"
            assert set(kinds[1:-1]) <= {"display_data"}, (student, kinds)
            assert cell["outputs"][0]["name"] == "stdout"
            text = "".join(cell["outputs"][0]["text"])
            item = name.replace("_", ".", 1)
            said = (f"{item}: +{cells[name]:g} bonus"
                    if KIT.item(item).kind == "bonus"
                    else f"{item}: {cells[name]:g} / ")
            assert f"\n{said}" in "\n" + text, text
            value = "".join(cell["outputs"][-1]["data"]["text/plain"])
            bonus = KIT.item(item).kind == "bonus"
            # A bonus cell is worth 0: its value is 0, the bonus is its
            # extra credit.
            assert float(value) == (0.0 if bonus else cells[name])
    mallory = {c["metadata"]["nbgrader"]["grade_id"]: c
               for c in _autograded(course.path, "mallory")["cells"]
               if "grade_id" in c["metadata"].get("nbgrader", {})}
    assert "".join(mallory["task2_output"]["outputs"][0]["text"]) \
        .startswith("This graded cell was missing from the submission")
    assert mallory["task1_forward"]["metadata"]["nbgrader"]["points"] == 3


def test_feedback_shows_messages_and_attention_maps(course):
    """generate_feedback: carol's failing causal mask with its maps and
    diagnosis; the full report in the first graded cell; the reasons of
    those who could not be graded."""
    def causal_images(student: str) -> int:
        notebook = _autograded(course.path, student)
        cell = _cell(notebook, "task2_causal")
        return sum("image/png" in o.get("data", {})
                   for o in cell["outputs"])

    assert causal_images("carol") == 1
    assert causal_images("alice") == 0
    pages = {s: _feedback(course.path, s) for s in EXPECTED}
    assert "task2.causal: 0 / 1" in pages["carol"]
    assert "mask_diagonal" in pages["carol"]
    assert "no_scaling" in pages["carol"]
    assert (pages["carol"].count("data:image/png;base64")
            == pages["alice"].count("data:image/png;base64") + 1)
    assert "The grader&#39;s report on this submission:" in \
        pages["alice"] or "The grader's report on this submission:" in \
        pages["alice"]
    assert "Total: 10 / 10 + 1 bonus" in pages["alice"]
    # A student's feedback and autograded notebook name no folder of the
    # instructor's (the course, the route's staging folders).
    for student, page in pages.items():
        notebook = (course.path / "autograded" / student / HW / NOTEBOOK)
        shown = page + (notebook.read_text() if notebook.exists() else "")
        for folder in (str(course.path.resolve()), str(course.path),
                       "grader-nbgrader-", "grader-verdicts-"):
            assert folder not in shown, (student, folder)
    assert "Submission: " + HW in pages["alice"]
    assert f"Not graded: no {NOTEBOOK} in the submission" in pages["eve"]
    assert "Not graded:" in pages["frank"]
    assert "is not a valid notebook: invalid JSON" in pages["frank"]
    assert "shown here instead: the released notebook" in pages["frank"]
    assert "link to a file outside the submission" in pages["grace"]


def test_warm_up_under_another_id(course):
    """``warmup`` is graded by the kit assignment whose notebook it has
    (attention_basics.ipynb): the solution earns every cell's points."""
    assert course.warmup.returncode == 0
    assert "(attention_basics, attention_basics.ipynb)" in \
        course.warmup.stdout
    scores = _auto_scores(course.path, WARMUP, "alice",
                          notebook="attention_basics")
    for item in WARMUP_KIT.items:
        if item.kind in ("checks", "bonus"):
            assert scores[grade_id(item.id)] == item.points, item.id


def test_student_option_regrades_only_them(course, tmp_path):
    """--student carol after carol fixed her notebook: her cells change,
    nobody else's; the grader's CSV keeps every student's row."""
    copy = tmp_path / "course"
    shutil.copytree(course.path, copy, symlinks=True)
    source = course.path / "solutions" / "source" / HW / NOTEBOOK
    (copy / "submitted" / "carol" / HW / NOTEBOOK).chmod(0o644)
    shutil.copy(source, copy / "submitted" / "carol" / HW / NOTEBOOK)
    bob_before = (copy / "autograded" / "bob" / HW / NOTEBOOK).stat()
    _run(copy, "grader", "nbgrader", HW, "--student", "carol")
    assert {c: v for c, v in _auto_scores(copy, HW, "carol").items()
            if c in CELLS} == FULL
    for student in ("alice", "bob", "dave"):
        assert {c: v for c, v in _auto_scores(copy, HW, student).items()
                if c in CELLS} == EXPECTED[student]
    bob_after = (copy / "autograded" / "bob" / HW / NOTEBOOK).stat()
    assert bob_after.st_mtime_ns == bob_before.st_mtime_ns
    rows = {row["student"]: row for row in csv.DictReader(
        (copy / "grader_results" / f"{HW}.csv").open())}
    assert set(rows) == set(EXPECTED)
    assert float(rows["carol"]["score"]) == 11.0
    assert rows["eve"]["status"] == "error"
    # The class summary at the end covers the whole class, kept rows too.
    summary = json.loads((copy / "grader_results" / f"{HW}.csv.summary.json")
                         .read_text())
    assert summary["students"] == len(rows)
    assert summary["errors"] == sum(r["status"] == "error"
                                    for r in rows.values())
    assert (copy / "grader_results" / f"{HW}.csv.summary.png").is_file()


def test_validate_says_what_to_run_instead(course):
    """``nbgrader validate`` in the course runs no kernel (the hijacker
    steals nothing) and prints no "Success": one line saying what to run
    instead, exit status 1."""
    folder = course.path / "submitted" / "mallory" / HW
    result = _run(course.path, "nbgrader", "validate",
                  str(folder / NOTEBOOK), check=False)
    said = result.stdout + result.stderr
    assert result.returncode == 1, said
    assert "Success" not in said and "passes" not in said, said
    line = f"`python -m grader grade {folder} --public-only`"
    assert [x for x in said.splitlines() if "INFO" not in x] == [
        "nbgrader validate runs no kernel here: the kit's notebooks are "
        f"graded outside the notebook; check this one with {line} (a "
        "class: `python -m grader nbgrader ASSIGNMENT`)"], said
    assert not (course.path / "stolen_seed.txt").exists()


def test_without_the_grader_nbgrader_refuses_in_one_line(tmp_path):
    """Where the kit's grader cannot be imported, the course's
    configuration stops every nbgrader command with one line, instead of
    letting nbgrader fall back to grading in a kernel."""
    planted = tmp_path / "elsewhere" / "grader"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text(
        'raise ImportError("No module named grader (planted)")\n')
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", HW], cwd=course,
        capture_output=True, text=True, timeout=300,
        env={**ENV, "PYTHONPATH": str(planted.parent)})
    said = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 1
    assert said == [
        "nbgrader_config.py: the kit's grader cannot be imported here (No "
        "module named grader (planted)); install the kit (pip install -e "
        "KIT) or run nbgrader from the kit's root: nothing was done"], said
    assert not (course / "gradebook.db").exists()


# An LMS download: files named <student>_<YYYY-MM-DD-HH-MM-SS>_<file>.
# Canvas's comes flat; Moodle's holds a folder. yuki uploaded twice (the
# release, then carol's partly right notebook: the newer one counts);
# zack uploaded the release and the module he wrote.
LMS = {"canvas.zip": (("", "yuki", "2026-11-20-09-00-00", "release"),
                      ("", "yuki", "2026-11-21-17-05-00", "carol")),
       "moodle.zip": (("hw-submissions/", "zack", "2026-11-21-18-30-00",
                       "release"),
                      ("hw-submissions/", "zack", "2026-11-21-18-30-00",
                       "module"))}


def test_zip_collect_from_an_lms_download(course, tmp_path):
    """``nbgrader zip_collect`` with the kit's configuration takes a
    Canvas- and a Moodle-style zip into submitted/ (the newer upload wins,
    timestamp.txt written); the route grades them (the module beside the
    notebook counts); ``nbgrader export`` writes their rows."""
    copy = tmp_path / "course"
    shutil.copytree(course.path, copy, symlinks=True)
    files = {"release": copy / "assignment" / HW / NOTEBOOK,
             "carol": course.path / "submitted" / "carol" / HW / NOTEBOOK,
             "module": ROOT / "solutions" / "modeling_attention.py"}
    archive = copy / "downloaded" / HW / "archive"
    archive.mkdir(parents=True)
    for name, entries in LMS.items():
        with zipfile.ZipFile(archive / name, "w") as bundle:
            for folder, student, stamp, what in entries:
                bundle.write(files[what], f"{folder}{student}_{stamp}_"
                                          f"{files[what].name}")
    collected = _run(copy, "nbgrader", "zip_collect", HW)
    log = collected.stdout + collected.stderr
    yuki, zack = (copy / "submitted" / s / HW for s in ("yuki", "zack"))
    assert (yuki / NOTEBOOK).read_bytes() == files["carol"].read_bytes(), \
        log[-3000:]
    assert (yuki / "timestamp.txt").read_text().startswith(
        "2026-11-21 17:05:00")
    assert (zack / NOTEBOOK).read_bytes() == files["release"].read_bytes()
    assert (zack / "modeling_attention.py").read_bytes() == \
        files["module"].read_bytes()

    route = _run(copy, "grader", "nbgrader", HW, "--student", "yuki",
                 "zack")
    assert "graded 2 of 2 submissions" in route.stdout, route.stdout
    for student, cells in (("yuki", EXPECTED["carol"]), ("zack", FULL)):
        scores = _auto_scores(copy, HW, student)
        assert {c: scores[c] for c in CELLS} == cells, student
    _run(copy, "nbgrader", "export", "--to", "lms.csv", "--log-level=ERROR")
    rows = {row["student_id"]: row for row in csv.DictReader(
        (copy / "lms.csv").open()) if row["assignment"] == HW}
    assert float(rows["yuki"]["score"]) == sum(EXPECTED["carol"].values())
    assert float(rows["zack"]["score"]) == sum(FULL.values())
    assert rows["yuki"]["timestamp"].startswith("2026-11-21 17:05:00")
    # 10 for the code and 5 for Q1-Q5; the bonus is extra credit beyond.
    assert float(rows["zack"]["max_score"]) == 15.0


@pytest.mark.parametrize("args, message", [
    (("homework9",), "'homework9' is not in the gradebook"),
    ((HW, "--student", "nobody"), "no submission of multi_head_attention "
                                  "for nobody"),
    ((HW, "--kit-assignment", "nope"), "unknown assignment 'nope'"),
])
def test_clear_errors_before_grading(course, args, message):
    """Exit 2 with one line, before anything is graded or recorded."""
    result = _run(course.path, "grader", "nbgrader", *args, check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_plain_autograde_grades_the_class_in_one_run(tmp_path):
    """``nbgrader autograde`` asks the grader once for every student it
    will convert (those not autograded yet; all with --force), whether
    nbgrader is sanitizing (reading submitted/) or autograding (reading
    autograded/): not one grading command per student."""
    from nbgrader.converters import Autograde
    from nbgrader.coursedir import CourseDirectory

    from grader.routes.nbgrader_steps import pending_students

    converter = Autograde(coursedir=CourseDirectory(root=str(tmp_path)))
    converter.assignments = {
        str(tmp_path / "submitted" / student / HW): []
        for student in ("ann", "ben", "cat")}
    done = tmp_path / "autograded" / "ben" / HW
    done.mkdir(parents=True)
    (done / NOTEBOOK).write_text("{}")
    for sanitizing in (True, False):
        converter._sanitizing = sanitizing
        converter.force = False
        assert pending_students(converter, HW, HW) == ["ann", "cat"]
        converter.force = True
        assert pending_students(converter, HW, HW) == ["ann", "ben",
                                                       "cat"]


def test_not_a_course(tmp_path):
    """A folder without nbgrader_config.py is not a course."""
    result = _run(tmp_path, "grader", "nbgrader", HW, check=False)
    assert result.returncode == 2
    assert "not an nbgrader course root" in result.stderr


def test_the_release_says_what_the_self_check_needs():
    """Every released notebook's Grading section names the self-check and
    plainly what it needs: the grader's folder beside the notebook (the
    release does not hold it) and the packages to install."""
    from grader.rubric import assignments

    for kit in assignments():
        notebook = json.loads((ROOT / "assignment" / kit.id / kit.notebook)
                              .read_text())
        grading = next("".join(c["source"]) for c in notebook["cells"]
                       if "".join(c["source"]).startswith("## Grading"))
        said = " ".join(grading.split())
        assert "python -m grader grade . " in said, kit.id
        assert "put the kit's `grader/` folder beside this notebook" in \
            said, kit.id
        assert 'pip install "torch==2.13.0" numpy pytest flake8 ' \
            'matplotlib' in said, kit.id
        assert not (ROOT / "assignment" / kit.id / "grader").exists()


def test_the_docs_show_formgrader_screenshots():
    """The README's nbgrader section and docs/nbgrader.md show the
    screenshots tests/kit/test_formgrader_browser.py took: each exists,
    is a PNG and is small (scaled down, 64 colours)."""
    import re

    for page in (ROOT / "README.md", ROOT / "docs" / "nbgrader.md"):
        shown = re.findall(r"!\[[^]]*\]\(([^)]+formgrader/[^)]+\.png)\)",
                           page.read_text())
        assert len(shown) >= 2, page
        for link in shown:
            image = page.parent / link
            assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", link
            assert image.stat().st_size < 120_000, link


# What a course run from the kit's root writes: grades and students' work.
COURSE_FILES = (
    "gradebook.db", ".nbgrader.log", f"submitted/alice/{HW}/{NOTEBOOK}",
    f"autograded/alice/{HW}/{NOTEBOOK}", f"feedback/alice/{HW}/{HW}.html",
    f"downloaded/{HW}/archive/canvas.zip",
    f"downloaded/{HW}/extracted/alice_{NOTEBOOK}", "grades.csv",
    f"grader_results/{HW}.csv", f"grader_results/{HW}.csv.summary.png",
    f"grader_results/{HW}.csv.reports/alice/report.json",
    "grades.csv.summary.json", "grades.csv.reports/alice/report.json",
    "similarity.html", f"release/{HW}/{NOTEBOOK}")


def test_course_grade_files_are_git_ignored():
    """Every file a course run in the kit's root writes (nbgrader's and
    the grader's) is git-ignored: no grade is committed by mistake."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin", "-z"],
        cwd=ROOT, input="\0".join(COURSE_FILES), capture_output=True,
        text=True, timeout=60)
    ignored = set(filter(None, result.stdout.split("\0")))
    assert ignored == set(COURSE_FILES), set(COURSE_FILES) - ignored


def test_solution_notebook_counts_zero_in_a_kernel(tmp_path):
    """The source notebook runs top to bottom in a real kernel; its
    autograded cells say where their points come from and count 0."""
    import nbformat
    from nbclient import NotebookClient

    folder = tmp_path / HW
    shutil.copytree(ROOT / "solutions" / "source" / HW, folder)
    notebook = nbformat.read(folder / NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert errors == []
    plots = [o for c in notebook.cells if c.cell_type == "code"
             for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(plots) >= 2
    credits = {c.id: o["data"]["text/plain"] for c in notebook.cells
               for o in c.get("outputs", [])
               if o.output_type == "execute_result"
               and c.id.startswith("task")}
    assert credits == dict.fromkeys(CELLS, "0.0")
    said = {c.id: "".join(o.get("text", "") for o in c.outputs)
            for c in notebook.cells if c.id in CELLS}
    assert all("graded outside the notebook" in text
               for text in said.values()), said
