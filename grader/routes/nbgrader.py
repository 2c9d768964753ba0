"""``python -m grader nbgrader ASSIGNMENT_ID``: every submission of an
nbgrader course graded outside the kernel by the batch engine (forked
judges, sandboxed workers) and recorded, as the judges finish, by a
recording process of its own through nbgrader's ``Autograde`` converter
(:mod:`grader.routes.nbgrader_steps`). The course, the route and the
verdicts: :mod:`grader.routes.nbgrader_course`. The whole story:
docs/nbgrader.md.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from grader.errors import BatchError
from grader.output.files import write_atomic
from grader.output.text import clean, one_line
from grader.routes.batch import Progress, check_writable, summarise
from grader.routes.classfolder import Entry
from grader.routes.judges import JudgeOptions, judge_all, prewarm
from grader.routes.nbgrader_course import (CourseError, Route, Submitted,
                                           course_verdict, find_submissions,
                                           replaced, resolve_route, stage,
                                           timestamp_problem)
from grader.routes.rows import (RECORD, STATUS_ERROR, error_row,
                                row_from_report, write_csv)
from grader.rubric import RubricError
from grader.run.proctree import fork_with_pipe
from grader.run.tempdirs import make, remove_tree


def _kept_rows(everyone: list[Submitted], chosen: set[str],
               reports: Path) -> dict[str, dict]:
    """The CSV rows of the students not graded by this run, from their
    saved reports (a ``--student`` run keeps the others' rows)."""
    rows = {}
    for other in everyone:
        if other.student in chosen:
            continue
        try:
            record = json.loads((reports / other.key / RECORD)
                                .read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if "report" in record:
            rows[other.student] = row_from_report(
                other.student, other.notebook, record["report"])
        elif record.get("errors") or record.get("error"):
            rows[other.student] = error_row(
                other.student, other.notebook,
                record.get("error") or record["errors"])
    return rows


class Recorder:
    """The nbgrader side of the route, in a process of its own, forked from
    the grader (so trusted) before anything heavy is imported: it opens the
    course and resolves the route (while the grader imports torch), then
    records the students one by one as their judges finish, fed through a
    pipe, so that the judges' loop never waits for nbgrader and nothing
    nbgrader does can stop the grading.

    ``plan()`` returns the route and the submissions (or raises
    :class:`CourseError`); ``send()`` queues a student; ``close()`` waits
    for the queue to drain and returns each student's recording problem.
    """

    END = b"end\n"

    def __init__(self, args: argparse.Namespace, root: Path,
                 stage_root: Path, reports: Path) -> None:
        self.stage_root, self.reports = stage_root, reports
        self.results = stage_root / "recorded.jsonl"
        self.sent: dict[str, str] = {}
        self.verdicts: dict[str, dict] = {}
        queue_read, self.send_fd = os.pipe()

        def serve(plan_write: int) -> None:
            # Ctrl-C reaches the whole process group: finish the queue.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self._serve(args, root, plan_write, queue_read)

        self.pid, plan_read = fork_with_pipe(serve, close=[self.send_fd])
        os.close(queue_read)
        self.plan_fd: int | None = plan_read

    # -- in the recording process ----------------------------------------

    def _serve(self, args: argparse.Namespace, root: Path, plan_fd: int,
               queue_fd: int) -> None:
        # jsonschema (under nbformat) would build the grammars of its
        # optional "iri" format checker at import, a second of the wait for
        # the plan; no notebook or nbgrader schema uses that format.
        sys.modules.setdefault("rfc3987_syntax", None)
        try:
            try:
                from grader.routes.nbgrader_steps import (
                    one_engine_per_database, open_course, recorder)
            except ImportError as exc:
                raise CourseError("nbgrader is not installed: pip install "
                                  "-e '.[dev]'") from exc
            app = open_course(root)
            route = resolve_route(app.coursedir, args.assignment_id,
                                  args.kit_assignment)
            chosen = find_submissions(app.coursedir, route, args.student)
            for submitted in chosen:
                submitted.warnings = timestamp_problem(submitted.folder)
            everyone = (find_submissions(app.coursedir, route)
                        if args.student else chosen)
            plan = {"route": route.as_json(),
                    "chosen": [s.as_json() for s in chosen],
                    "everyone": [s.as_json() for s in everyone],
                    "db_url": app.coursedir.db_url,
                    "root": str(Path(app.coursedir.root).resolve()),
                    "autograded": app.coursedir.autograded_directory}
        except (CourseError, RubricError) as exc:
            plan = {"error": str(exc)}
        except Exception as exc:
            plan = {"error": f"nbgrader could not open the course: "
                             f"{type(exc).__name__}: {one_line(str(exc))}"}
        with os.fdopen(plan_fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(plan))
        if "error" in plan:
            return
        real = str(Path(app.coursedir.root).resolve())
        with one_engine_per_database(), os.fdopen(queue_fd, "rb") as queue:
            converter = None if getattr(args, "verdicts", None) \
                else recorder(app, route)
            for line in queue:
                if line == self.END:
                    return
                self._record(int(line), route, real, converter)

    def _record(self, index: int, route: Route, real: str,
                converter: Any) -> None:
        """Record student ``index`` with ``converter`` (or, without one,
        keep the verdict for :meth:`close`)."""
        message = json.loads((self.stage_root / f"{index}.json")
                             .read_text(encoding="utf-8"))
        submitted = Submitted.from_json(message["submitted"])
        result: dict[str, Any] = {"student": submitted.student,
                                  "problem": ""}
        try:
            verdict = course_verdict(
                route, submitted, message["row"], message["record"],
                str(self.stage_root / str(index)), real, self.reports)
            if converter is None:
                result["verdict"] = verdict.as_json()
            else:
                result["problem"] = converter.record(submitted, verdict)
        except (Exception, SystemExit) as exc:
            result["problem"] = (f"could not record in the gradebook: "
                                 f"{type(exc).__name__}: "
                                 f"{one_line(str(exc), 300)}")
        with self.results.open("a", encoding="utf-8") as out:
            out.write(json.dumps(result) + "\n")

    # -- in the grader ------------------------------------------------------

    def plan(self) -> dict:
        """The route and the submissions; CourseError if there are none."""
        with os.fdopen(self.plan_fd, "r", encoding="utf-8") as stream:
            self.plan_fd = None
            text = stream.read()
        try:
            plan = json.loads(text)
        except json.JSONDecodeError:
            raise CourseError("the nbgrader process ended before it read "
                              "the course") from None
        if "error" in plan:
            raise CourseError(plan["error"])
        return plan

    def send(self, index: int, submitted: Submitted, row: dict,
             record: dict | None) -> None:
        """Queue student ``index`` with the judge's row and record."""
        write_atomic(self.stage_root / f"{index}.json", json.dumps(
            {"submitted": submitted.as_json(), "row": row,
             "record": record}))
        self.sent[submitted.student] = str(index)
        try:
            os.write(self.send_fd, f"{index}\n".encode())
        except BrokenPipeError:
            pass  # reported by close(): never recorded

    def close(self) -> dict[str, str]:
        """Wait for everything sent; student -> problem (none: absent)."""
        if self.plan_fd is not None:
            os.close(self.plan_fd)  # it may be blocked writing the plan
            self.plan_fd = None
        try:
            os.write(self.send_fd, self.END)
        except BrokenPipeError:
            pass
        os.close(self.send_fd)
        os.waitpid(self.pid, 0)
        problems = {student: "the recording process ended before "
                    "recording it" for student in self.sent}
        try:
            lines = self.results.read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        for line in lines:
            result = json.loads(line)
            problems[result["student"]] = result["problem"]
            if "verdict" in result:
                self.verdicts[result["student"]] = result["verdict"]
        return {s: p for s, p in problems.items() if p}


class ClassRun:
    """One run of the route over a class: grade, queue for recording, keep
    the grader's rows."""

    def __init__(self, route: Route, submissions: list[Submitted],
                 root: Path, out: Path, recorder: Recorder,
                 judges: JudgeOptions) -> None:
        self.route, self.submissions, self.judges = route, submissions, judges
        self.root, self.out = root, out
        self.recorder = recorder
        self.real = str(root.resolve())
        self.rows: dict[str, dict] = {}
        self.index = {s.student: i for i, s in enumerate(submissions)}
        self.progress = Progress(len(submissions), 0)

    def run(self) -> list[int]:
        """Grade everyone; the signals that interrupted it."""
        todo = []
        for index, submitted in enumerate(self.submissions):
            stage(submitted, self.route, self.root,
                  self.recorder.stage_root, index)
            if submitted.problem:
                self.not_graded(submitted)
            else:
                # The staged folder holds the submission's own notebook
                # and module only: the judge grades the folder, so that a
                # module beside the notebook is graded as `grade` does.
                todo.append(Entry(submitted.student, submitted.staged.parent,
                                  key=submitted.key))
        return judge_all(todo, self.recorder.reports, self.judges,
                         self.judged)

    def not_graded(self, submitted: Submitted) -> None:
        """A submission the grader cannot even start on: 0, and why."""
        row = error_row(submitted.student, submitted.notebook,
                        f"could not grade: {submitted.problem}")
        write_atomic(self.recorder.reports / submitted.key / RECORD,
                     json.dumps({**row, "error": row["errors"]},
                                indent=2) + "\n")
        self.finish(submitted, row, None, 0.0)

    def judged(self, entry: Entry, row: dict, record: dict | None,
               seconds: float) -> None:
        """A judge finished (the callback of
        :func:`grader.routes.judges.judge_all`)."""
        index = self.index[entry.student]
        staged = str(self.recorder.stage_root / str(index))
        self.finish(self.submissions[index],
                    replaced(row, staged, self.real), record, seconds)

    def finish(self, submitted: Submitted, row: dict, record: dict | None,
               seconds: float) -> None:
        """Keep the row; queue the student for recording."""
        row["path"] = str(submitted.notebook)
        self.rows[submitted.student] = row
        write_csv(self.out, list(self.rows.values()))
        self.recorder.send(self.index[submitted.student], submitted, row,
                           record)
        self.progress.update(row, seconds)


def run_nbgrader(args: argparse.Namespace) -> int:
    """Grade and record every submission of ``args.assignment_id``."""
    from grader.errors import CliError

    root = Path(args.course)
    if not any((root / name).exists() for name in
               ("nbgrader_config.py", "gradebook.db", "submitted")):
        raise CliError(f"{root} is not an nbgrader course root (no "
                       f"nbgrader_config.py, gradebook.db or submitted/)")
    out = Path(args.out) if args.out else \
        root / "grader_results" / f"{args.assignment_id}.csv"
    reports = out.with_name(out.name + ".reports")
    try:
        check_writable(out.parent)
        check_writable(reports)
    except BatchError as exc:
        raise CliError(str(exc)) from exc
    stage_root = make("nbgrader-")
    nbgrader = Recorder(args, root, stage_root, reports)
    unrecorded: dict[str, str] = {}
    try:
        judges = JudgeOptions(seed=args.seed, timeout=args.timeout,
                              memory=args.memory, jobs=args.jobs)
        prewarm(judges)  # while nbgrader reads the course
        try:
            plan = nbgrader.plan()
        except CourseError as exc:
            raise CliError(str(exc)) from exc
        route = Route.from_json(plan["route"])
        judges.assignment = route.kit.id
        submissions = [Submitted.from_json(s) for s in plan["chosen"]]
        if not submissions:
            raise CliError(f"no submissions of {args.assignment_id} in "
                           f"{root / 'submitted'}")
        run = ClassRun(route, submissions, Path(plan["root"]), out,
                       nbgrader, judges)
        if args.student:
            run.rows = _kept_rows(
                [Submitted.from_json(s) for s in plan["everyone"]],
                set(run.index), reports)
        stop = run.run()
    finally:
        unrecorded = nbgrader.close()
        remove_tree(stage_root)
    verdicts = getattr(args, "verdicts", None)
    if verdicts:
        write_atomic(Path(verdicts), json.dumps(nbgrader.verdicts))
    write_csv(out, list(run.rows.values()))
    ran = [run.rows[s.student] for s in submissions
           if s.student in run.rows]
    errors = [r for r in ran if r["status"] == STATUS_ERROR]
    if stop:
        sys.stderr.write(f"\ninterrupted: {len(ran)} of "
                         f"{len(submissions)} submissions graded and "
                         f"recorded; run the command again to grade "
                         f"them all\n")
        return 130
    where = (f"verdicts in {verdicts}" if verdicts else
             f"{plan['db_url']} and {plan['autograded']}/")
    sys.stdout.write(
        f"graded {len(ran) - len(errors)} of {len(submissions)} "
        f"submissions of {args.assignment_id} ({route.kit.id}, "
        f"{route.notebook_name}) outside the kernel -> {where}; grader "
        f"rows in {out}\n")
    for row in errors:
        sys.stdout.write(f"  0 points, not graded: {clean(row['student'])}:"
                         f" {row['errors']}\n")
    for submitted in submissions:
        for warning in submitted.warnings:
            sys.stdout.write(f"  note: {clean(submitted.student)}: "
                             f"{warning}\n")
    for student, problem in unrecorded.items():
        sys.stdout.write(f"  not recorded: {clean(student)}: {problem}\n")
    summarise(out, list(run.rows.values()), reports)
    return 0 if not (errors or unrecorded) else 1
