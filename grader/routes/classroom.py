"""GitHub Classroom's autograding: the grader's report as Classroom results.

Details: docs/internals.md, `grader.routes.classroom`.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import signal
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from grader.output.notebook import nbgrader_credits
from grader.output.report import out_of
from grader.output.text import clean, one_line
from grader.rubric import Assignment, Item, RubricError, get_assignment
from grader.routes.exits import exit_status_text
from grader.run.proctree import run_tree

REPORT_NAME = "report.json"
# The reporter's regular expression for its ``runners`` input, and the
# width of its table's first column (20, less a space either side).
RUNNER_ID = re.compile(r"^[A-Za-z0-9]+$")
RUNNER_ID_WIDTH = 18
PENALTY_LABELS = {"pep8": "PEP-8", "shapes": "shape-comment"}
_WHERE = re.compile(r"^\s*((?:cell \d+, )?line \d+(?: of the assembled "
                    r"notebook code)?)(?:, column \d+)?: (.+)$")
NAME_LIMIT = 300
EXIT_DEADLINE = 124


@dataclass(frozen=True)
class Runner:
    """One row of the reporter's table: a task, a bonus item, or the
    public tests."""

    id: str              # letters and digits: the step output and env name
    title: str           # what it stands for, for the workflow's comments
    max_score: int       # whole points (0 for a bonus and the public tests)
    optional: bool       # a bonus or the public tests: never fails the run
    tests: int = 0       # how many tests a 0-point runner has (a bonus's)

    @property
    def env(self) -> str:
        """The environment variable the reporter reads."""
        return f"{self.id.upper()}_RESULTS"


@dataclass(frozen=True)
class Test:
    """One test of a runner (a point of a task), named by why it passed
    or failed."""

    name: str
    passed: bool
    # A bonus point this test carries into Classroom's points (which sum
    # the tests' scores) beyond the table's share (which counts passed
    # tests): see :func:`carry_bonus`.
    extra: float = 0.0


@dataclass(frozen=True)
class RunnerResult:
    """What a runner reports: its tests, or an error for all of them."""

    runner: Runner
    tests: tuple[Test, ...]
    error: str | None = None

    @property
    def each(self) -> float:
        """What one passed test is worth (the reporter: max / tests)."""
        return self.runner.max_score / max(1, len(self.tests))

    @property
    def score(self) -> float:
        """The runner's score in the reporter's table (passed tests /
        tests x max_score)."""
        return 0 if self.error else \
            sum(t.passed for t in self.tests) * self.each

    @property
    def points(self) -> float:
        """What the runner adds to the points sent to Classroom: its
        tests' scores (bonus carried included), if it has a maximum."""
        if self.error or not self.runner.max_score:
            return 0.0
        return self.score + sum(t.extra for t in self.tests)

    @property
    def status(self) -> str:
        """``pass``, ``fail`` (turns the run red) or ``error``."""
        if self.error:
            return "error"
        if self.runner.optional or all(t.passed for t in self.tests):
            return "pass"
        return "fail"

    def as_json(self) -> dict:
        """The result in the command grader's format."""
        if self.error:
            tests = [{"name": f"{self.runner.id}: not graded",
                      "status": "error", "score": 0,
                      "message": self.error}]
        else:
            tests = [{"name": t.name, "status": "pass" if t.passed else "fail",
                      "score": (self.each if t.passed else 0) + t.extra}
                     for t in self.tests]
        for test in tests:
            test.update(test_code="", filename="", line_no=0, duration=0)
        return {"version": 1, "status": self.status,
                "max_score": self.runner.max_score, "tests": tests}

    def encoded(self) -> str:
        """The base64 JSON the reporter decodes."""
        text = json.dumps(self.as_json(), ensure_ascii=False)
        return base64.b64encode(text.encode("utf-8")).decode("ascii")


# The public tests' runner: the command grader's result for them, passed
# on by the grading step as a 0-point runner that never fails the run (the
# rubric's points decide its colour; a public test can check what the
# rubric does not, e.g. the output's dtype).
PUBLIC_TESTS = Runner("publictests", "Public tests (0 points)", 0, True)
PUBLIC_TESTS_ENV = "PUBLIC_TESTS_RESULT"


def public_tests_result(encoded: str | None) -> RunnerResult:
    """The public tests' runner from the command grader's ``result``."""
    where = "see the log of the step Public tests"
    try:
        result = json.loads(base64.b64decode(encoded or "", validate=True))
        (test,) = result["tests"]
        name, status = one_line(test["name"], 120), test["status"]
    except (ValueError, KeyError, TypeError):
        return RunnerResult(PUBLIC_TESTS, (Test(
            f"Public tests: no result ({where})", False),))
    if status == "pass":
        return RunnerResult(PUBLIC_TESTS, (Test(f"{name}: passed", True),))
    why = "failed" if status == "fail" else one_line(
        str(test.get("message") or status), 80)
    return RunnerResult(PUBLIC_TESTS, (Test(f"{name}: {why} ({where})",
                                            False),))


def _whole(points: float, what: str) -> int:
    if points != int(points):
        raise ValueError(f"{what} is worth {points:g} points; Classroom "
                         f"counts whole points")
    return int(points)


#: The sizes a Classroom test may be worth, largest first.
TEST_UNITS = (1.0, 0.5, 0.25)


def test_unit(assignment: Assignment, task_id: str) -> float:
    """What one Classroom test of ``task_id`` is worth: the largest of
    :data:`TEST_UNITS` that divides the points of every item, part and
    penalty of the task (1 for whole points)."""
    values = [abs(v) for i in assignment.items_of(task_id)
              for v in (i.points, *i.parts.values())]
    for unit in TEST_UNITS:
        if all(abs(v / unit - round(v / unit)) < 1e-9 for v in values):
            return unit
    raise ValueError(f"{task_id} has points that are not multiples of "
                     f"{TEST_UNITS[-1]:g}; Classroom cannot show them")


def _units(points: float, unit: float, what: str) -> int:
    """``points`` as a whole number of tests worth ``unit`` each."""
    return _whole(round(points / unit, 9), what)


def runner_id(name: str) -> str:
    """``task1.bonus`` -> ``task1bonus``: what the reporter accepts."""
    return re.sub(r"[^A-Za-z0-9]", "", name)


def runners(assignment: Assignment) -> list[Runner]:
    """The graded runners of ``assignment``: each task, then each bonus."""
    found = [Runner(runner_id(task.id), task.title,
                    _whole(task.max_score, task.id), False)
             for task in assignment.tasks]
    # A bonus is worth 0 in the table: Classroom's maximum is the
    # rubric's; an earned bonus is carried into the points (carry_bonus).
    found += [Runner(runner_id(item.id), item.title, 0, True,
                     _whole(item.points, item.id))
              for item in assignment.items if item.kind == "bonus"]
    ids = [r.id for r in found]
    bad = [i for i in ids if not RUNNER_ID.match(i)
           or len(i) > RUNNER_ID_WIDTH]
    if bad or len(set(ids)) != len(ids):
        raise ValueError(f"Classroom runner ids must be distinct, letters "
                         f"and digits, at most {RUNNER_ID_WIDTH} long: "
                         f"{ids}")
    return found


def penalty_reason(message: str) -> str:
    """The lines a penalty names: ``line 30: E501 line too long ...``."""
    found = []
    for line in clean(message).split("\n"):
        match = _WHERE.match(line)
        if match:
            found.append(f"{match.group(1)}: {match.group(2).strip()}")
    if not found:
        return one_line(message.split("\n")[0], 160)
    shown = "; ".join(found[:2])
    return shown + (f"; and {len(found) - 2} more" if len(found) > 2
                    else "")


def _reason(item: dict, limit: int = 200) -> str:
    """The first line of an item's message and its diagnoses."""
    text = one_line(str(item.get("message", "")).split("\n")[0], limit)
    tags = [one_line(d, 40) for d in item.get("diagnosis", [])]
    return text + "".join(f" [{tag}]" for tag in tags)


def _name(text: str) -> str:
    return one_line(text, NAME_LIMIT)


def _task_tests(assignment: Assignment, task_id: str, items: dict,
                credits: dict[str, float]) -> list[Test]:
    """One test per point (per half point, see :func:`test_unit`) of
    ``task_id``: kept, taken by a penalty, or not earned, in rubric
    order."""
    rubric = assignment.items_of(task_id)
    unit = test_unit(assignment, task_id)
    part = "point" if unit == 1 else f"{unit:g} point"
    penalties = []
    for item in rubric:
        if item.kind in PENALTY_LABELS:
            taken = _units(-float(items[item.id]["score"]), unit, item.id)
            penalties += [item] * taken
    tests = []
    for item in rubric:
        if item.kind != "checks":
            continue
        score = float(items[item.id]["score"])
        points = _units(item.points, unit, item.id)
        earned = _units(score, unit, item.id)
        kept = _units(credits[item.id], unit, item.id)
        grade = f"{item.id} {score:g}/{item.points:g}"
        for point in range(1, kept + 1):
            tests.append(Test(_name(f"{grade}: {part} {point} of {points} "
                                    f"- {item.title}"), True))
        for _ in range(earned - kept):
            penalty = penalties.pop(0)
            state = "correct" if earned == points else "earned"
            tests.append(Test(_name(
                f"{penalty.id} -{unit:g}: {PENALTY_LABELS[penalty.kind]} "
                f"penalty, takes {unit:g} point of {item.id} ({score:g}/"
                f"{item.points:g} {state}) - "
                f"{penalty_reason(items[penalty.id]['message'])}"), False))
        for point in range(earned + 1, points + 1):
            tests.append(Test(_name(
                f"{grade}: {part} {point} of {points} not earned - "
                f"{_reason(items[item.id])}"), False))
    return tests


def _bonus_tests(item: Item, entry: dict) -> list[Test]:
    points = _whole(item.points, item.id)
    earned = _whole(float(entry["score"]), item.id)
    reason = one_line(str(entry.get("message", "")).split("\n")[0], 160)
    reason = re.sub(r"^no bonus \(optional\):\s*", "", reason)
    return [Test(_name(f"{item.id} +1 (optional): "
                       f"{BONUS_EARNED if point <= earned else 'not earned'}"
                       f" - {reason}"), point <= earned)
            for point in range(1, points + 1)]


BONUS_EARNED = ("earned, +1 beyond the maximum in Classroom's points (the "
                "table shows the bonus as 0 / 0)")


def carry_bonus(task: RunnerResult, bonus: RunnerResult) -> RunnerResult:
    """``task`` with ``bonus``'s earned points carried on one of its
    tests (the first passed), so that Classroom's points are the grade
    (10 + the bonus) while its maximum stays the rubric's."""
    earned = float(sum(t.passed for t in bonus.tests))
    if not earned or not task.tests:
        return task
    tests = list(task.tests)
    at = next((i for i, t in enumerate(tests) if t.passed), 0)
    tests[at] = Test(tests[at].name, tests[at].passed,
                     tests[at].extra + earned)
    return RunnerResult(task.runner, tuple(tests), task.error)


def results(report: dict, assignment: Assignment) -> list[RunnerResult]:
    """The Classroom results of a grader report (``--format json``).

    Raises ``ValueError`` (or ``KeyError``) when the report does not fit
    the assignment's rubric.
    """
    items = {entry["id"]: entry for entry in report["items"]}
    missing = [i.id for i in assignment.items if i.id not in items]
    if missing:
        raise ValueError(f"the report has no item {', '.join(missing)}")
    credits = nbgrader_credits(report, assignment)
    # A task's score in the report includes its bonus.
    task_scores = {t["id"]: float(t["score"]) - float(t.get("bonus", 0))
                   for t in report["tasks"]}
    found = []
    for runner in runners(assignment):
        task = next((t for t in assignment.tasks
                     if runner_id(t.id) == runner.id), None)
        if task is not None:
            tests = _task_tests(assignment, task.id, items, credits)
        else:
            item = next(i for i in assignment.items
                        if runner_id(i.id) == runner.id)
            tests = _bonus_tests(item, items[item.id])
        result = RunnerResult(runner, tuple(tests))
        expected = task_scores[task.id] if task else result.score
        count = (_units(runner.max_score, test_unit(assignment, task.id),
                        task.id) if task else runner.tests)
        if len(tests) != count or abs(result.score - expected) > 1e-9:
            raise ValueError(f"{runner.id}: {result.score:g} points from "
                             f"{len(tests)} tests; the report says "
                             f"{expected:g} of {runner.max_score}")
        found.append(result)
    for item in assignment.items:
        if item.kind == "bonus":
            bonus = next(r for r in found
                         if r.runner.id == runner_id(item.id))
            at = next(i for i, r in enumerate(found)
                      if r.runner.id == runner_id(item.task))
            found[at] = carry_bonus(found[at], bonus)
    return found


def not_graded(assignment: Assignment, reason: str) -> list[RunnerResult]:
    """Every runner as an error: the grader produced no report."""
    return [RunnerResult(r, (), one_line(f"not graded: {reason}", 300))
            for r in runners(assignment)]


def _cell(text: str) -> str:
    """Submission-controlled text as one Markdown table cell."""
    text = one_line(text, 300)
    return re.sub(r"([\\`*_{}\[\]()#+!|~<>&])", r"\\\1", text)


def summary_markdown(report: dict | None, assignment: Assignment,
                     found: list[RunnerResult]) -> str:
    """The job summary: the grade, every item with its reason, and the
    Classroom points."""
    points = sum(r.points for r in found)
    most = sum(r.runner.max_score for r in found)
    lines = [f"## {_cell(assignment.title)}", ""]
    public = [t for r in found if r.runner == PUBLIC_TESTS for t in r.tests]
    if report is None:
        error = next((r.error for r in found if r.error), "")
        lines += [f"**Not graded**: {_cell(error)}", "",
                  "See the log of the step *Grade*.", ""]
        return "\n".join(lines) + "\n"
    grade = out_of(float(report["score"]), float(report["max_score"]),
                   float(report.get("bonus", 0)))
    bonus = float(report.get("bonus", 0))
    said = (": Classroom has no bonus, so its points count the bonus "
            "beyond the maximum" if bonus else "")
    lines += [f"**Grade: {grade}** (Classroom points: {points:g} / "
              f"{most}{said})", ""]
    lines += [f"{'✅' if t.passed else '❌'} {_cell(t.name)}, 0 points"
              for t in public] + ([""] if public else [])
    lines += ["| item | points | why |", "|---|---|---|"]
    items = {entry["id"]: entry for entry in report["items"]}
    for task in assignment.tasks:
        for item in assignment.items_of(task.id):
            entry = items[item.id]
            score = float(entry["score"])
            if item.kind == "checks":
                shown = f"{score:g} / {item.points:g}"
                why = "ok" if score == item.points else _reason(entry, 300)
                mark = "✅" if score == item.points else "❌"
            elif item.kind == "bonus":
                shown = f"+{score:g}"
                mark = "✅" if score > 0 else "➖"
                why = str(entry.get("message", "")).split("\n")[0]
            else:
                shown = f"{score:g}" if score else "0"
                mark = "❌" if score else "✅"
                why = (penalty_reason(entry["message"]) if score
                       else "no penalty")
            lines.append(f"| {mark} `{item.id}` | {shown} | {_cell(why)} |")
        entry = next((t for t in report["tasks"] if t["id"] == task.id),
                     {"score": 0})
        shown = out_of(float(entry["score"]), task.max_score,
                       float(entry.get("bonus", 0)))
        lines.append(f"| **{_cell(task.title)}** | **{shown}** | |")
    for error in report.get("errors", []):
        lines.append(f"| ⚠️ error | | {_cell(error)} |")
    lines += ["", "The full report, with every line a point was lost on, "
              "is in the log of the step *Grade*; the run's "
              "*grading-report* artifact holds it and the pictures of "
              "failing items.", ""]
    return "\n".join(lines)


def preview(found: list[RunnerResult]) -> str:
    """What the reporter will print, in short: each test, then the total."""
    lines = []
    for result in found:
        carried = sum(t.extra for t in result.tests)
        lines.append(f"{result.runner.id}: {result.score:g} / "
                     f"{result.runner.max_score} ({result.status})"
                     + (f", +{carried:g} bonus in the points" if carried
                        else ""))
        if result.error:
            lines.append(f"  Error: {result.error}")
        for test in result.tests:
            lines.append(f"  {'✅' if test.passed else '❌'} {test.name}")
    total = sum(r.points for r in found)
    most = sum(r.runner.max_score for r in found)
    lines.append(f"Classroom points: {total:g} / {most}")
    return "\n".join(lines)


def _append(variable: str, text: str) -> None:
    """Append ``text`` to the file named by ``$variable``, if set."""
    target = os.environ.get(variable)
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(text)


def _graded(run_error: str | None, report_path: Path,
            assignment: Assignment) -> tuple[dict | None, list, str]:
    """The report and results after the grader ran, or why there are
    none."""
    if run_error:
        return None, [], run_error
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        return report, results(report, assignment), ""
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, [], f"no usable report in {report_path} ({exc})"


def grade_for_classroom(path: Path, assignment_id: str, feedback: Path,
                        deadline: float) -> int:
    """Grade ``path`` once (``python -m grader grade``, stopped after
    ``deadline`` s) and write the Classroom results to ``$GITHUB_OUTPUT``
    and a job summary to ``$GITHUB_STEP_SUMMARY``.

    Returns 0 when graded, 1 when not (every runner then reports an error
    that says why), 2 for an unknown assignment.
    """
    try:
        assignment = get_assignment(assignment_id)
        runners(assignment)
    except (RubricError, ValueError) as exc:
        print(f"python -m grader.classroom grade: error: {exc}",
              file=sys.stderr)
        return 2
    report_path = feedback / REPORT_NAME
    report_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "grader", "grade", str(path),
               "--assignment", assignment.id, "--feedback", str(feedback)]
    # Nothing the grader prints (a submission's output included) can be
    # read by the runner as a workflow command.
    token = secrets.token_hex(16)
    on_github = os.environ.get("GITHUB_ACTIONS") == "true"
    if on_github:
        print(f"::stop-commands::{token}", flush=True)
    try:
        run = run_tree(command, deadline)
        error = (f"the grader did not finish within {deadline:g} s"
                 if run.timed_out
                 else f"the grading was stopped by {run.stopped_by}"
                 if run.stopped_by
                 else f"the grader could not grade (exit status "
                      f"{run.returncode}; its error is above)"
                 if run.returncode else None)
    except OSError as exc:
        error = f"the grader could not start ({exc})"
    if on_github:
        print(f"::{token}::", flush=True)
    report, found, error = _graded(error, report_path, assignment)
    if report is None:
        found = not_graded(assignment, f"{error}; see the log of the step "
                                       f"Grade")
    found.insert(0, public_tests_result(os.environ.get(PUBLIC_TESTS_ENV)))
    _append("GITHUB_OUTPUT", "".join(f"{r.runner.id}={r.encoded()}\n"
                                     for r in found))
    _append("GITHUB_STEP_SUMMARY", summary_markdown(report, assignment,
                                                    found))
    print("\nWhat GitHub Classroom will show:")
    if on_github or PUBLIC_TESTS_ENV in os.environ:
        print(preview(found))
    else:
        # A local preview: the public tests are a step of the workflow
        # on GitHub only, so this run has no result for them (no red
        # line for a step that did not run here).
        print(preview([r for r in found if r.runner != PUBLIC_TESTS]))
        print(f"{PUBLIC_TESTS.id}: a step of the workflow on GitHub only "
              f"(here: python -m pytest tests/public)")
    return 0 if report is not None else 1


def run_command(command: list[str], deadline: float,
                grace: float = 2.0) -> int:
    """Run ``command`` so that nothing it starts outlives it; stop it
    after ``deadline`` s (exit 124) or on SIGTERM/SIGINT/SIGHUP; say so on
    stderr. Otherwise return its exit status."""
    shown = " ".join(command)
    try:
        run = run_tree(command, deadline, grace)
    except OSError as exc:
        print(f"python -m grader.classroom run: error: cannot run "
              f"{shown}: {exc}", file=sys.stderr)
        return 127
    sys.stdout.flush()
    stopped = f"{run.leftovers + 1} process(es) stopped"
    if run.timed_out:
        print(f"\nStopped: {shown} did not finish within {deadline:g} s; "
              f"{stopped}. A test that never returns (an endless loop?) "
              f"fails this step.", file=sys.stderr)
        return EXIT_DEADLINE
    if run.stopped_by:
        print(f"\nStopped by {run.stopped_by}: {shown}; {stopped}.",
              file=sys.stderr)
        return 128 + int(getattr(signal, run.stopped_by))
    if run.leftovers:
        print(f"\n{shown} left {run.leftovers} process(es) running; they "
              f"were stopped.", file=sys.stderr)
    return run.returncode


GRADE_EXIT = (
    ("0", "graded (whatever the score): the results and the job summary "
          "are written"),
    ("1", "not graded (the grader failed or ran out of time): every "
          "runner reports an error that says why"),
    ("2", "an unknown assignment, bad options"))
RUN_EXIT = (
    ("N", "the command's own exit status"),
    (str(EXIT_DEADLINE), "it did not finish within --deadline seconds"),
    ("128+S", "it was stopped by signal S (e.g. 143 for SIGTERM)"),
    ("127", "it could not be started"),
    ("2", "bad options, or no command"))


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m grader.classroom grade|run ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m grader.classroom",
        description="GitHub Classroom autograding: grade once and write "
                    "the reporter's results, or run a command so that "
                    "nothing it started outlives it.",
        epilog="'python -m grader.classroom COMMAND --help' describes "
               "each command and its exit status.")
    commands = parser.add_subparsers(dest="command_name", required=True,
                                     metavar="COMMAND")
    grade = commands.add_parser(
        "grade", help="grade PATH and write the Classroom results "
                      "($GITHUB_OUTPUT) and a job summary",
        description=textwrap.fill(
            "Grade PATH once with 'python -m grader grade' and write one "
            "Classroom result per task and per bonus to $GITHUB_OUTPUT, a "
            "job summary to $GITHUB_STEP_SUMMARY and the report to "
            "--feedback.", width=79),
        epilog=exit_status_text(GRADE_EXIT),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    grade.add_argument("path", type=Path, metavar="PATH",
                       help="the submission (the workflow grades '.', the "
                            "student repository)")
    grade.add_argument("--assignment", required=True, metavar="ID",
                       help="the assignment (from the workflow, never "
                            "guessed from the submission)")
    grade.add_argument("--feedback", type=Path, default=Path("grading"),
                       metavar="DIR", help="where the grader writes "
                                           "report.json and pictures "
                                           "(default: grading)")
    grade.add_argument("--deadline", type=float, default=180.0,
                       metavar="S", help="stop the grader after S seconds "
                                         "(default: 180)")
    run = commands.add_parser(
        "run", help="run a command; stop it and everything it started "
                    "after --deadline seconds or on SIGTERM",
        description=textwrap.fill(
            "Run COMMAND; stop it and every process it started after "
            "--deadline seconds or on SIGTERM, SIGINT or SIGHUP, and say "
            "so on standard error.", width=79),
        epilog=exit_status_text(RUN_EXIT),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--deadline", type=float, required=True, metavar="S",
                     help="seconds the command may run")
    run.add_argument("--grace", type=float, default=2.0, metavar="S",
                     help="seconds between SIGTERM and SIGKILL (default: 2)")
    run.add_argument("command", nargs=argparse.REMAINDER,
                     metavar="-- COMMAND ...",
                     help="the command and its arguments, after --")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.classroom grade|run ...``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command_name == "grade":
        return grade_for_classroom(args.path, args.assignment,
                                   args.feedback, args.deadline)
    command = args.command[1:] if args.command[:1] == ["--"] \
        else args.command
    if not command:
        parser.error("run: no command")
    return run_command(command, args.deadline, args.grace)


if __name__ == "__main__":
    sys.exit(main())
