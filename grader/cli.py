"""The grader's command line: ``python -m grader COMMAND ...``.

Only the grader writes to standard output; whatever a submission prints is
captured in its sandbox and shown inside the report.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXAMPLES = """\
examples:
  python -m grader grade transformer_lm/modeling_attention.py
  python -m grader grade . --public-only          # quick self-check
  python -m grader grade notebook.ipynb --format json
  python -m grader grade submission/ --format gradescope > results.json
  python -m grader shapes transformer_lm/modeling_attention.py
  python -m grader batch submissions/ --out grades.csv --jobs 2
  python -m grader nbgrader multi_head_attention   # in an nbgrader course

exit status: 0 when a grade was produced (whatever the score), 2 when the
submission could not be graded (bad path, unreadable file, bad options).
"""


class CliError(Exception):
    """A problem with the command line or its input: one line, exit 2."""


def _positive(kind: type) -> callable:
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text}")
        return value
    return parse


def _add_grading_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--assignment", metavar="ID",
        help="the assignment to grade against (grade: default recognised "
             "from what the submission defines; batch: the course's, else "
             "the one the class fits). A submission that fits another "
             "better is flagged wrong_assignment")
    parser.add_argument(
        "--public-only", action="store_true",
        help="grade on the public test values alone (a quick self-check); "
             "the default adds hidden random cases")
    parser.add_argument(
        "--seed", type=int, metavar="N",
        help="seed of the hidden cases (default: $GRADER_SEED if set, "
             "else 2024). A correct submission passes under every seed")
    parser.add_argument(
        "--timeout", type=_positive(float), default=20.0, metavar="S",
        help="wall-clock seconds each task's code may run (default: 20)")
    parser.add_argument(
        "--memory", type=_positive(int), default=2048, metavar="MB",
        help="memory each task's code may allocate (default: 2048)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="python -m grader",
        description="Grade attention homework submissions exactly as the "
                    "rubric says: correctness (pytest checks in a sandbox), "
                    "PEP-8 (flake8) and verified tensor-shape comments.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    grade = commands.add_parser(
        "grade", help="grade one submission",
        description="Grade one submission: a Python file of any name "
                    "holding the classes, a notebook (.ipynb), or a student "
                    "repository folder.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    grade.add_argument("path", type=Path, metavar="PATH")
    grade.add_argument(
        "--format", choices=("text", "json", "gradescope"), default="text",
        help="text (default): a readable report; json: the rubric's JSON "
             "object; gradescope: a Gradescope results.json")
    grade.add_argument(
        "--output", "-o", type=Path, metavar="FILE",
        help="write the report to FILE instead of standard output")
    grade.add_argument(
        "--feedback", type=Path, metavar="DIR",
        help="also write feedback files (report and attention-map PNGs "
             "for failing attention items) into DIR")
    _add_grading_options(grade)

    shapes = commands.add_parser(
        "shapes", help="check the shape comments of a submission",
        description="Run the shape-comment verifier alone and print every "
                    "offending line, exactly as the grade's shapes items "
                    "see it. Exits 0 with a report, 1 when the code does "
                    "not parse (the line is named), 2 when the path "
                    "cannot be read.")
    shapes.add_argument("path", type=Path, metavar="PATH")
    shapes.add_argument("--assignment", metavar="ID")
    shapes.add_argument("--timeout", type=_positive(float), default=20.0,
                        metavar="S", help=argparse.SUPPRESS)
    shapes.add_argument("--memory", type=_positive(int), default=2048,
                        metavar="MB", help=argparse.SUPPRESS)

    batch = commands.add_parser(
        "batch", help="grade a whole class, in parallel",
        description="Grade every submission in DIR: an nbgrader course "
                    "root (with nbgrader_config.py) or its submitted/ "
                    "folder, one student per submitted/<student>/; or a "
                    "flat folder with one entry per student (a folder, a "
                    ".py file or a notebook, any name). Every student is "
                    "graded against one assignment: --assignment, else "
                    "the course's assignment id, else the one the class "
                    "as a whole fits. Writes one CSV row per entry "
                    "(atomically) and, next to the CSV, a record and a "
                    "feedback folder per student. Exits 0 when every "
                    "submission was graded, whatever the scores.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    batch.add_argument("dir", type=Path, metavar="DIR")
    batch.add_argument("--out", type=Path, default=Path("grades.csv"),
                       metavar="FILE.csv",
                       help="the CSV to write (default: grades.csv); JSON "
                            "reports and feedback go to FILE.reports/")
    batch.add_argument("--jobs", type=_positive(int), metavar="N",
                       help="submissions graded at once (default: the "
                            "number of cores)")
    batch.add_argument("--resume", action="store_true",
                       help="keep the rows of an interrupted batch and "
                            "grade only the submissions without one")
    batch.add_argument("--no-feedback", action="store_true",
                       help="write no feedback folders (faster)")
    _add_grading_options(batch)

    course = commands.add_parser(
        "nbgrader", help="grade an nbgrader assignment outside the kernel",
        description="Grade every submitted/<student>/ASSIGNMENT_ID/ of an "
                    "nbgrader course with the sandboxed grader (no student "
                    "code runs in a kernel) and record the result in the "
                    "course's gradebook and autograded/ notebooks, as "
                    "'nbgrader autograde --create' would: then run "
                    "'nbgrader generate_feedback' and 'nbgrader export'. "
                    "Replaces the automatic scores of a plain 'nbgrader "
                    "autograde'; manual grades are kept. Exits 0 when "
                    "every submission was graded, 1 when some got 0 "
                    "because they could not be graded (each with its "
                    "reason), 2 when nothing could start.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    course.add_argument("assignment_id", metavar="ASSIGNMENT_ID",
                        help="the nbgrader assignment")
    course.add_argument("--student", nargs="+", action="extend",
                        metavar="ID",
                        help="grade only these students (default: every "
                             "submission)")
    course.add_argument("--jobs", type=_positive(int), metavar="N",
                        help="submissions graded at once (default: the "
                             "number of cores)")
    course.add_argument("--course", type=Path, default=Path("."),
                        metavar="DIR",
                        help="the course root, where nbgrader_config.py "
                             "is (default: the current folder)")
    course.add_argument("--kit-assignment", metavar="KIT_ID",
                        help="the kit assignment that grades it (default: "
                             "the one whose notebook the assignment has, "
                             "e.g. multi_head_attention.ipynb)")
    course.add_argument("--out", type=Path, metavar="FILE.csv",
                        help="the grader's CSV (default: grader_results/"
                             "ASSIGNMENT_ID.csv in the course); JSON "
                             "reports and feedback go to FILE.csv.reports/")
    course.add_argument(
        "--seed", type=int, metavar="N",
        help="seed of the hidden cases (default: $GRADER_SEED if set, "
             "else 2024)")
    course.add_argument(
        "--timeout", type=_positive(float), default=20.0, metavar="S",
        help="wall-clock seconds each task's code may run (default: 20)")
    course.add_argument(
        "--memory", type=_positive(int), default=2048, metavar="MB",
        help="memory each task's code may allocate (default: 2048)")

    bundle = commands.add_parser(
        "gradescope-bundle", help="write a Gradescope autograder zip",
        description="Write an autograder zip for Gradescope (setup.sh, "
                    "run_autograder, the grader, pinned requirements).")
    bundle.add_argument("out", type=Path, metavar="OUT.zip")
    bundle.add_argument("--assignment", metavar="ID",
                        help="the assignment every upload is graded "
                             "against, baked into the zip (required when "
                             "the kit has more than one; see 'python -m "
                             "grader assignments')")
    bundle.add_argument("--seed", type=int, metavar="N",
                        help="secret seed of the hidden cases, baked into "
                             "the bundle (default: $GRADER_SEED if set, "
                             "else the grader's default)")

    commands.add_parser("assignments",
                        help="list the assignments the grader knows")
    return parser


def _grade(args: argparse.Namespace) -> int:
    from grader.submission import locate

    # Locate first: a bad path is reported before torch is imported.
    submission = locate(args.path, args.assignment)
    from grader import forkserver

    forkserver.start()  # warms up while this process imports torch
    from grader.engine import Options, grade_submission
    from grader.sandbox import Limits

    options = Options(seed=args.seed, public_only=args.public_only,
                      limits=Limits(timeout=args.timeout,
                                    memory_mb=args.memory))
    report = grade_submission(submission, options)
    if args.format == "json":
        text = report.to_json() + "\n"
    elif args.format == "gradescope":
        import json

        text = json.dumps(report.as_gradescope(), indent=2) + "\n"
    else:
        text = report.as_text()
    if args.feedback is not None:
        from grader.feedback import write_feedback

        write_feedback(report, args.feedback)
    if args.output is not None:
        from grader.files import write_atomic

        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _shapes(args: argparse.Namespace) -> int:
    from grader.engine import Options, ShapesUnparsable, shape_report
    from grader.sandbox import Limits
    from grader.text import one_line

    options = Options(limits=Limits(timeout=args.timeout,
                                    memory_mb=args.memory))
    try:
        text, _ = shape_report(args.path, args.assignment, options)
    except ShapesUnparsable as exc:
        sys.stderr.write(f"python -m grader shapes: {one_line(str(exc))}\n")
        return 1
    sys.stdout.write(text)
    return 0


def _batch(args: argparse.Namespace) -> int:
    from grader.batch import run_batch

    return run_batch(args)


def _nbgrader(args: argparse.Namespace) -> int:
    from grader.course import run_nbgrader

    return run_nbgrader(args)


def _bundle(args: argparse.Namespace) -> int:
    from grader.bundle import write_bundle

    path = write_bundle(args.out, assignment=args.assignment,
                        seed=args.seed)
    sys.stdout.write(f"wrote {path}\n")
    return 0


def _assignments(args: argparse.Namespace) -> int:
    from grader.rubric import assignments

    for assignment in assignments():
        tasks = ", ".join(t.target for t in assignment.tasks)
        sys.stdout.write(f"{assignment.id}: {assignment.title} "
                         f"({assignment.max_score:g} points; {tasks})\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from grader.rubric import RubricError
    from grader.submission import SubmissionError

    handlers = {"grade": _grade, "shapes": _shapes, "batch": _batch,
                "nbgrader": _nbgrader, "gradescope-bundle": _bundle,
                "assignments": _assignments}
    try:
        return handlers[args.command](args)
    except (SubmissionError, RubricError, CliError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else repr(exc)
        sys.stderr.write(f"python -m grader {args.command}: error: "
                         f"{message}\n")
        return 2
