"""The grader's command line: ``python -m grader COMMAND ...``.

Only the grader writes to standard output; whatever a submission prints is
captured in its sandbox and shown inside the report. Every command's
``--help`` lists its arguments and what its exit status means.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

from grader import __version__
from grader.errors import CliError
from grader.routes.exits import EXIT_STATUS, exit_status_text
from grader.routes.shards import parse_shard

# Examples, per command (the top-level help shows them all).
EXAMPLES = {
    "grade": (
        "python -m grader grade transformer_lm/MODULE.py",
        "python -m grader grade . --public-only          # quick self-check",
        "python -m grader grade notebook.ipynb --format json",
        "python -m grader grade submission/ --format gradescope "
        "> results.json",
        "python -m grader grade . --feedback feedback/   # report + PNGs",
        "python -m grader grade . --public-only --watch  # regrade on save"),
    "shapes": ("python -m grader shapes transformer_lm/MODULE.py",),
    "batch": ("python -m grader batch submissions/ --out grades.csv "
              "--jobs 2",
              "python -m grader batch course/ --resume     # after Ctrl-C",
              "python -m grader batch submissions/ --only alice bob",
              "python -m grader batch submissions/ --shard 2/8 "
              "--out part-2.csv"),
    "summary": ("python -m grader summary grades.csv",),
    "merge": ("python -m grader merge grades.csv part-*.csv",),
    "similarity": ("python -m grader similarity submissions/ "
                   "--out similarity.html",),
    "nbgrader": ("python -m grader nbgrader ASSIGNMENT_ID   "
                 "# in an nbgrader course",
                 "python -m grader nbgrader hw3 --student alice bob"),
    "gradescope-bundle": ("python -m grader gradescope-bundle autograder.zip "
                          "\\\n      --assignment ASSIGNMENT_ID",),
    "assignments": ("python -m grader assignments",),
    "audit": ("python -m grader audit ASSIGNMENT_ID",
              "python -m grader audit ASSIGNMENT_ID --pairs --jobs 2 "
              "--out audit/",
              "python -m grader audit ASSIGNMENT_ID --catalog draft.toml",
              "python -m grader audit ASSIGNMENT_ID --pairs --only MUTANT "
              "MUTANT ..."),
}


def _epilog(command: str) -> str:
    examples = "\n".join(f"  {line}" for line in EXAMPLES[command])
    return (f"examples:\n{examples}\n\n"
            f"{exit_status_text(EXIT_STATUS[command])}\n")


def _top_epilog() -> str:
    examples = "\n".join(f"  {line}" for lines in EXAMPLES.values()
                         for line in lines)
    summary = exit_status_text((
        ("0", "done (grade: a grade was produced, whatever the score)"),
        ("1", "done, but some submissions could not be graded (batch, "
              "nbgrader), the code does not parse (shapes), or the rubric "
              "misses a known mistake (audit)"),
        ("2", "nothing was done: a bad path, an unreadable file, bad "
              "options"),
        ("130", "interrupted (batch, nbgrader, audit)")))
    return (f"examples:\n{examples}\n\n{summary}\n"
            f"'python -m grader COMMAND --help' says what each command's "
            f"exit status means.\n")


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
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
    _add_limits(parser, "each task's code")


def _command(commands, name: str, help: str, description: str
             ) -> argparse.ArgumentParser:
    """A subcommand whose help ends with its examples and exit status."""
    return commands.add_parser(
        name, help=help, description=textwrap.fill(description, width=79),
        epilog=_epilog(name),
        formatter_class=argparse.RawDescriptionHelpFormatter)


def _add_limits(parser: argparse.ArgumentParser, what: str) -> None:
    from grader.run.sandbox import WALL_FACTOR

    parser.add_argument(
        "--timeout", type=_positive(float), default=20.0, metavar="S",
        help=f"seconds {what} may run (default: 20): wall-clock time, "
             f"or its own CPU time while a busy machine starves it (up to "
             f"{WALL_FACTOR:g} x S of wall-clock time, as long as it "
             f"computes)")
    parser.add_argument(
        "--memory", type=_positive(int), default=2048, metavar="MB",
        help=f"memory {what} may allocate (default: 2048)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="python -m grader",
        description="Grade homework submissions exactly as the "
                    "rubric says: correctness (pytest checks in a sandbox), "
                    "PEP-8 (flake8) and verified tensor-shape comments.",
        epilog=_top_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {__version__}",
                        help="print the grader's version and exit (0)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    grade = _command(
        commands, "grade", "grade one submission",
        "Grade one submission and print its report (standard output, or "
        "--output FILE).")
    grade.add_argument(
        "path", type=Path, metavar="PATH",
        help="a Python file of any name holding the classes, a notebook "
             "(.ipynb) or a student repository folder")
    grade.add_argument(
        "--format", choices=("text", "json", "gradescope"), default="text",
        help="text (default): a readable report; json: the rubric's JSON "
             "object; gradescope: a Gradescope results.json")
    grade.add_argument(
        "--output", "-o", type=Path, metavar="FILE",
        help="write the report to FILE instead of standard output")
    grade.add_argument(
        "--feedback", type=Path, metavar="DIR",
        help="also write feedback files into DIR: report.txt, report.json "
             "and PNG pictures of failing items (when the assignment "
             "draws them)")
    grade.add_argument(
        "--watch", action="store_true",
        help="stay warm and regrade whenever a graded file is saved, "
             "printing the items gained and lost (text only; Ctrl-C "
             "stops)")
    _add_grading_options(grade)

    shapes = _command(
        commands, "shapes", "check the shape comments of a submission",
        "Run the shape-comment verifier alone and print every offending "
        "line, exactly as the grade's shapes items see it.")
    shapes.add_argument(
        "path", type=Path, metavar="PATH",
        help="a Python file, a notebook or a student repository folder, "
             "as for grade")
    shapes.add_argument(
        "--assignment", metavar="ID",
        help="the assignment whose classes are checked (default: "
             "recognised from what the submission defines)")
    _add_limits(shapes, "the traced forward calls")

    batch = _command(
        commands, "batch", "grade a whole class, in parallel",
        "Grade every submission in DIR: an nbgrader course root (with "
        "nbgrader_config.py) or its submitted/ folder, one student per "
        "submitted/<student>/; or a flat folder with one entry per student "
        "(a folder, a .py file or a notebook, any name). Every student is "
        "graded against one assignment: --assignment, else the course's "
        "assignment id, else the one the class as a whole fits. Writes one "
        "CSV row per entry (atomically) and, next to the CSV, a record and "
        "a feedback folder per student.")
    batch.add_argument(
        "dir", type=Path, metavar="DIR",
        help="the class: an nbgrader course root, its submitted/ folder, "
             "or a folder with one entry per student")
    batch.add_argument("--out", type=Path, default=Path("grades.csv"),
                       metavar="FILE.csv",
                       help="the CSV to write (default: grades.csv); JSON "
                            "reports and feedback go to FILE.csv.reports/")
    batch.add_argument("--jobs", type=_positive(int), metavar="N",
                       help="submissions graded at once (default: one more "
                            "than the usable cores, a cgroup's CPU quota "
                            "counted)")
    batch.add_argument("--resume", action="store_true",
                       help="keep the rows of an interrupted batch and "
                            "grade only the submissions without one")
    batch.add_argument("--no-feedback", action="store_true",
                       help="write no feedback folders (faster)")
    batch.add_argument("--only", nargs="+", metavar="STUDENT",
                       help="regrade these students only (their CSV names "
                            "or entry names): their rows and reports are "
                            "replaced, every other row is kept as it is")
    batch.add_argument("--roster", type=Path, metavar="FILE",
                       help="the class list, one student per line (a "
                            "CSV's first column; # starts a comment): "
                            "each student with no entry in DIR gets a "
                            "row of 0 saying they submitted nothing")
    batch.add_argument("--shard", type=parse_shard, metavar="I/N",
                       help="grade the I-th of N deterministic parts of "
                            "the class (1 <= I <= N), for a cluster's "
                            "array job; 'merge' joins the parts")
    _add_grading_options(batch)

    summary = _command(
        commands, "summary", "summarise a finished batch",
        "Print the class summary of a finished batch (counts, totals, "
        "each item's pass rate, the known mistakes, the slowest "
        "submissions, integrity flags) from its CSV and its reports "
        "folder, and write FILE.csv.summary.json and FILE.csv.summary.png "
        "beside it.")
    summary.add_argument("csv", type=Path, metavar="FILE.csv",
                         help="the batch's CSV (its reports are in "
                              "FILE.csv.reports/)")

    merge = _command(
        commands, "merge", "merge the CSVs of a sharded batch",
        "Merge the CSVs (and report folders) of 'batch --shard' parts into "
        "one CSV and write the class summary; refuses a student graded in "
        "two parts and names the students no part graded.")
    merge.add_argument("out", type=Path, metavar="FILE.csv",
                       help="the merged CSV to write")
    merge.add_argument("parts", type=Path, nargs="+", metavar="PART.csv",
                       help="the shards' CSVs")

    similar = _command(
        commands, "similarity", "rank similar pairs of submissions",
        "Compare the students' own code (what their graded methods "
        "execute, their own helpers inlined; not the stub's given code) "
        "across a class and write an HTML report of the most similar "
        "pairs and their shared lines. Names and layout are normalised "
        "and statements compared one by one, so renaming, reordering "
        "or moving code into helpers hides nothing. Short solutions are "
        "similar by nature: a rank, not an accusation.")
    similar.add_argument("dir", type=Path, metavar="DIR",
                         help="the class folder, as for batch")
    similar.add_argument("--out", type=Path,
                         default=Path("similarity.html"), metavar="FILE",
                         help="the HTML report (default: similarity.html)")
    similar.add_argument("--assignment", metavar="ID",
                         help="the assignment (default: as batch chooses)")
    similar.add_argument("--pairs", type=_positive(int), default=20,
                         metavar="N",
                         help="the most similar pairs listed (default 20)")

    course = _command(
        commands, "nbgrader",
        "grade an nbgrader assignment outside the kernel",
        "Grade every submitted/<student>/ASSIGNMENT_ID/ of an nbgrader "
        "course with the sandboxed grader (no student code runs in a "
        "kernel) and record the result in the course's gradebook and "
        "autograded/ notebooks, as 'nbgrader autograde --create' would: "
        "then run 'nbgrader generate_feedback' and 'nbgrader export'. "
        "Replaces the automatic scores of a plain 'nbgrader autograde'; "
        "manual grades are kept.")
    course.add_argument("assignment_id", metavar="ASSIGNMENT_ID",
                        help="the nbgrader assignment")
    course.add_argument("--student", nargs="+", action="extend",
                        metavar="ID",
                        help="grade only these students (default: every "
                             "submission)")
    course.add_argument("--jobs", type=_positive(int), metavar="N",
                        help="submissions graded at once (default: one "
                             "more than the usable cores, a cgroup's CPU "
                             "quota counted)")
    course.add_argument("--course", type=Path, default=Path("."),
                        metavar="DIR",
                        help="the course root, where nbgrader_config.py "
                             "is (default: the current folder)")
    course.add_argument("--kit-assignment", metavar="KIT_ID",
                        help="the kit assignment that grades it (default: "
                             "the one whose notebook the assignment has, "
                             "by the notebook's file name)")
    course.add_argument("--out", type=Path, metavar="FILE.csv",
                        help="the grader's CSV (default: grader_results/"
                             "ASSIGNMENT_ID.csv in the course); JSON "
                             "reports and feedback go to FILE.csv.reports/")
    course.add_argument(
        "--seed", type=int, metavar="N",
        help="seed of the hidden cases (default: $GRADER_SEED if set, "
             "else 2024)")
    # Used by the kit's steps inside `nbgrader autograde` (formgrader's
    # button): grade, write each student's verdict, record nothing.
    course.add_argument("--verdicts", type=Path, help=argparse.SUPPRESS)
    _add_limits(course, "each task's code")

    bundle = _command(
        commands, "gradescope-bundle", "write a Gradescope autograder zip",
        "Write an autograder zip for Gradescope (setup.sh, "
        "run_autograder, the grader, pinned requirements).")
    bundle.add_argument("out", type=Path, metavar="OUT.zip",
                        help="the zip to write (replaced atomically)")
    bundle.add_argument("--assignment", metavar="ID",
                        help="the assignment every upload is graded "
                             "against, baked into the zip (required when "
                             "the kit has more than one; see 'python -m "
                             "grader assignments')")
    bundle.add_argument("--seed", type=int, metavar="N",
                        help="secret seed of the hidden cases, baked into "
                             "the bundle (default: $GRADER_SEED if set, "
                             "else the grader's default)")
    bundle.add_argument("--hidden-details", metavar="VISIBILITY",
                        choices=("visible", "after_due_date",
                                 "after_published", "hidden"),
                        default="after_due_date",
                        help="who sees the hidden cases' sizes in "
                             "Gradescope: visible, after_due_date "
                             "(default), after_published or hidden")

    audit = _command(
        commands, "audit",
        "prove what an assignment's rubric catches (mutation testing)",
        "Grade every known mistake of the assignment's catalog (its "
        "audit.toml: small named edits of the reference solution) and "
        "every correct variant through the real pipeline, in parallel as "
        "a batch does, and print what each lost and which diagnosis was "
        "named. A mutant must lose the items it declares and be named; a "
        "variant must earn full marks. Writes audit.json and audit.md "
        "into --out (docs/adding-an-assignment.md, 'The audit').")
    audit.add_argument("assignment", metavar="ASSIGNMENT_ID",
                       help="the assignment to audit (python -m grader "
                            "assignments lists them)")
    audit.add_argument(
        "--pairs", action="store_true",
        help="also grade every pair of mutants that touch different "
             "lines: each mistake must be named on one of its items")
    audit.add_argument(
        "--jobs", type=_positive(int), metavar="N",
        help="submissions graded at once (default: the usable cores + 1)")
    audit.add_argument(
        "--out", type=Path, metavar="DIR",
        help="where the submissions, reports, audit.json and audit.md go "
             "(default: ./audit-ASSIGNMENT_ID)")
    audit.add_argument(
        "--catalog", type=Path, metavar="FILE",
        help="audit this draft catalog instead of the assignment's "
             "audit.toml (it need not cover every diagnosis)")
    audit.add_argument(
        "--only", nargs="+", metavar="MUTANT",
        help="grade only these mutants (and their pairs with --pairs), "
             "with every variant: a bounded audit, e.g. in CI")
    audit.add_argument(
        "--seed", type=int, metavar="N",
        help="seed of the hidden cases (default: as grade)")

    _command(commands, "assignments",
             "list the assignments the grader knows",
             "List the assignments the grader knows: id, title, points "
             "and the classes or functions students write.")
    return parser


def _grade(args: argparse.Namespace) -> int:
    if args.watch:
        if args.format != "text" or args.output is not None:
            raise CliError("--watch prints text reports on the terminal: "
                           "drop --format and --output")
        from grader.routes.watch import watch

        return watch(args)
    from grader.locate.submission import locate

    submission = locate(args.path, args.assignment)
    from grader.engine import Options, grade_submission
    from grader.run.sandbox import Limits

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
        from grader.output.feedback import write_feedback

        write_feedback(report, args.feedback)
    if args.output is not None:
        from grader.output.files import write_atomic

        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _shapes(args: argparse.Namespace) -> int:
    from grader.engine import Options, ShapesUnparsable, shape_report
    from grader.output.text import one_line
    from grader.run.sandbox import Limits

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
    from grader.routes.batch import BatchOptions, run_batch

    return run_batch(BatchOptions.from_args(args))


def _summary(args: argparse.Namespace) -> int:
    from grader.routes.rows import RowsError
    from grader.routes.summary import write_summary

    try:
        write_summary(args.csv)
    except RowsError as exc:
        raise CliError(str(exc)) from exc
    return 0


def _merge(args: argparse.Namespace) -> int:
    from grader.routes.shards import MergeError, merge

    try:
        return merge(args.out, args.parts)
    except MergeError as exc:
        raise CliError(str(exc)) from exc


def _similarity(args: argparse.Namespace) -> int:
    from grader.routes.similarity import SimilarityOptions, run_similarity

    return run_similarity(SimilarityOptions.from_args(args))


def _nbgrader(args: argparse.Namespace) -> int:
    from grader.routes.nbgrader import run_nbgrader

    return run_nbgrader(args)


def _bundle(args: argparse.Namespace) -> int:
    from solutions.gradescope_bundle import write_bundle

    path = write_bundle(args.out, assignment=args.assignment,
                        seed=args.seed, hidden_details=args.hidden_details)
    sys.stdout.write(f"wrote {path}\n")
    return 0


def _audit(args: argparse.Namespace) -> int:
    from grader.routes.audit import AuditOptions, run_audit

    return run_audit(AuditOptions.from_args(args))


def _assignments(args: argparse.Namespace) -> int:
    from grader.plugin import plugins

    for plugin in plugins():
        assignment = plugin.rubric
        tasks = ", ".join(t.target for t in assignment.tasks)
        sys.stdout.write(f"{assignment.id}: {assignment.title} "
                         f"({assignment.max_score:g} points; {tasks})\n")
    return 0


#: The commands that need no sandbox (they run no submission).
NO_SANDBOX = ("assignments", "gradescope-bundle")
#: The commands that run submissions in workers of the fork server.
WORKERS = ("grade", "shapes", "batch", "nbgrader", "audit")


def platform_problem() -> str | None:
    """Why this machine cannot run the grader's sandbox (None when it can):
    workers are forked (``os.fork``) and limited (``resource``), which
    Windows does not have (docs/architecture.md, "Operating systems")."""
    if hasattr(os, "fork") and os.name == "posix":
        return None
    return ("the grader needs Linux (or macOS) to run submissions in its "
            "sandbox; on Windows run the public tests with 'python -m "
            "pytest tests/public', and the grader in WSL or through your "
            "course's Classroom or Gradescope route")


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    problem = None if args.command in NO_SANDBOX else platform_problem()
    if problem:
        sys.stderr.write(f"python -m grader {args.command}: error: "
                         f"{problem}\n")
        return 2
    from grader.locate.submission import SubmissionError
    from grader.plugin import plugins
    from grader.rubric import RubricError

    handlers = {"grade": _grade, "shapes": _shapes, "batch": _batch,
                "summary": _summary, "merge": _merge,
                "similarity": _similarity,
                "nbgrader": _nbgrader, "gradescope-bundle": _bundle,
                "assignments": _assignments, "audit": _audit}
    if args.command in WORKERS:
        from grader.run import forkserver

        # The fork server imports torch in a process of its own while
        # this one loads the plug-ins (torch too): on two cores a grade
        # waits for one import, not two in a row.
        forkserver.start()
    try:
        # Start-up: every plug-in is loaded and validated first, so a
        # broken one stops every command with one line naming it. The
        # collector pauses meanwhile: importing torch makes objects in the
        # hundreds of thousands and no garbage worth a collection, and
        # its collections cost about a tenth of that import's CPU.
        gc.disable()
        try:
            plugins()
        finally:
            gc.enable()
        return handlers[args.command](args)
    except (SubmissionError, RubricError, CliError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else repr(exc)
        sys.stderr.write(f"python -m grader {args.command}: error: "
                         f"{message}\n")
        return 2
