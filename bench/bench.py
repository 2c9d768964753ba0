"""Benchmark the grader against its floor and against nbgrader.

    python bench/bench.py [--repeat 3] [--class 24] [--notebooks 24]
                          [--autograde 3]

Measured side by side, in one run, on the same machine:

* ``python -c "import torch"``: the per-process floor of any grader;
* ``python -m grader grade`` of one submission (the example repository);
* ``python -m grader batch`` over a class of ``--class`` submissions
  (correct, unscaled, stub and two known mistakes; no two files alike),
  as wall time per submission and for the whole class: hidden cases,
  flake8 and shape verification, feedback files, as an instructor runs
  it;
* ``python -m grader nbgrader`` on an nbgrader course of ``--notebooks``
  submitted notebooks (solution, partly correct and untouched copies), as
  wall time per notebook: the route a course follows (grading outside the
  kernel and recording in the gradebook and autograded/);
* ``nbgrader autograde`` of ``--autograde`` of those notebooks, per
  notebook (a kernel per notebook; its graded cells count 0 there);
* ``python -m grader batch`` of a class of one: with the class of
  ``--class``, the batch's warm-up (what a run pays once: torch, flake8,
  the fork server, the checks) and its cost per submission (the slope),
  from which it prints the wall time of a class of 300, 3,000 and 30,000
  cut into N shards on nodes like this one (docs/cluster.md).
* ``python -m grader audit`` of ``--audit`` (default the homework): its
  singles and variants, once (issue 27's goal: under a minute on 2
  cores).

The first four are measured in rounds (``--repeat`` of them), interleaved
so that a change in the machine's load touches them alike; medians.

It prints the timings and their ratios with the goals of issues 6, 11
and 15: a single grade at most about twice ``import torch``; a submission
in a batch at most a tenth of a single grade, and a class of 300
(``--class 300``) in under a minute on 2 cores; a notebook through the
nbgrader route at most a quarter of a single grade. Wall-clock medians;
run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "modeling_attention.py"
STUB = ROOT / "transformer_lm" / "modeling_attention.py"
EXAMPLE = ROOT / "examples" / "submission"
MISTAKES = ROOT / "tests" / "kit" / "submissions"
ASSIGNMENT = "multi_head_attention"


# CPU seconds a run cost: the whole machine's busy time while it ran
# (/proc/stat), so that the fork server's workers, which no process of the
# run waits for, are counted too. Only meaningful on an otherwise idle
# machine; the bench prints the machine's load beside it.
CPU: dict[str, list[float]] = {}
LOAD = 0.0


def _cpu() -> float:
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime
    ticks = [int(v) for v in fields[1:]]
    busy = sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def _run(args: list[str], cwd: Path = ROOT, name: str = "") -> float:
    started, cpu = time.perf_counter(), _cpu()
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    CPU.setdefault(name, []).append(_cpu() - cpu)
    if result.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stderr}")
    return elapsed


def _class(folder: Path, size: int) -> None:
    """A class of ``size`` submissions, no two alike: correct, unscaled,
    untouched stubs and two known mistakes, each with its own comment
    line (so that nothing could be shared between identical files)."""
    reference = REFERENCE.read_text()
    kinds = [reference,
             reference.replace(" / self.scale, dim=-1)", ", dim=-1)"),
             STUB.read_text()]
    kinds += [(MISTAKES / name).read_text() for name in
              ("mistake_softmax_dim.py", "mistake_mask_diagonal.py")
              if (MISTAKES / name).is_file()]
    for index in range(size):
        text = kinds[index % len(kinds)].rstrip("\n")
        (folder / f"student{index:03d}.py").write_text(
            f"{text}\n# submitted by student {index:03d}\n")


def _course(folder: Path, size: int) -> None:
    """An nbgrader course with ``size`` submitted notebooks."""
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(ROOT / "solutions" / "source",
                    folder / "solutions" / "source")
    _run([sys.executable, "-m", "nbgrader", "generate_assignment",
          ASSIGNMENT, "--force"], folder)
    source = folder / "solutions" / "source" / ASSIGNMENT
    release = folder / "assignment" / ASSIGNMENT
    notebook = f"{ASSIGNMENT}.ipynb"
    unscaled = (source / notebook).read_text().replace(
        " / self.scale, dim=-1)", ", dim=-1)")
    for index in range(size):
        target = folder / "submitted" / f"s{index:03d}" / ASSIGNMENT
        shutil.copytree(release if index % 3 == 2 else source, target)
        if index % 3 == 1:
            (target / notebook).write_text(unscaled)


def _autograde(course: Path, count: int) -> float:
    """Per notebook: plain ``nbgrader autograde`` of ``count`` notebooks
    of ``course`` (in a copy of it)."""
    with tempfile.TemporaryDirectory(prefix="bench-plain-") as tmp:
        plain = Path(tmp) / "plain"
        shutil.copytree(course, plain)
        for extra in sorted((plain / "submitted").iterdir())[count:]:
            shutil.rmtree(extra)
        return _run([sys.executable, "-m", "nbgrader", "autograde",
                     ASSIGNMENT, "--create", "--force"], plain) / count


def _audited(report: Path) -> str:
    """What an audit graded, in words, from its audit.json."""
    try:
        summary = json.loads(report.read_text(encoding="utf-8"))["summary"]
    except (OSError, ValueError, KeyError):
        return "(no audit.json)"
    return (f"{summary['mutants']} mutants, {summary['variants']} "
            f"variants and the reference")


def _judges() -> str:
    """How many judges the batch ran at once (its default ``--jobs``)."""
    result = subprocess.run(
        [sys.executable, "-c", "from grader.run.cores import default_jobs; "
                               "print(default_jobs())"],
        cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip() or "?"


def machine() -> str:
    """One line about this machine."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return (f"{model}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, torch {torch.__version__}, "
            f"{platform.system()} {platform.release()}")


SIZES = (300, 3_000, 30_000)
SHARDS = (1, 4, 16, 64, 256)


def shard_wall(students: int, shards: int, warm_up: float,
               each: float) -> float:
    """Seconds until the last of ``shards`` shards of a class of
    ``students`` is done, every shard on a node of its own: its warm-up,
    then its students (the largest shard has ceil(students / shards))."""
    return warm_up + -(-students // shards) * each


def scale(one: float, whole: float, size: int) -> None:
    """Print the batch's warm-up and cost per submission (from a class of
    one, ``one`` s, and of ``size``, ``whole`` s) and the wall time of the
    classes of SIZES in N shards on nodes like this one."""
    each = (whole - one) / max(size - 1, 1)
    warm_up = max(one - each, 0.0)
    print(f"batch warm-up {warm_up:.2f} s, then {each:.3f} s a submission "
          f"(a class of 1: {one:.2f} s; of {size}: {whole:.2f} s)")
    print("wall time, N shards, a node like this one each (minutes:seconds)")
    print(f"{'students':>9} " + " ".join(f"{f'N={n}':>8}" for n in SHARDS))
    for students in SIZES:
        cells = []
        for shards in SHARDS:
            wall = round(shard_wall(students, shards, warm_up, each))
            cells.append(f"{wall // 60:>5}:{wall % 60:02d}")
        print(f"{students:>9} " + " ".join(cells))


def main(argv: list[str] | None = None) -> int:
    """Run every measurement and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per median (default 3)")
    parser.add_argument("--class", "--batch", dest="batch", type=int,
                        default=24, metavar="N",
                        help="submissions in the batch's class (default "
                             "24; --class 300 checks the goal of a class "
                             "of 300 in under 60 s)")
    parser.add_argument("--notebooks", type=int, default=24,
                        help="notebooks in the nbgrader course that "
                             "'python -m grader nbgrader' grades (default "
                             "24; 0 skips nbgrader)")
    parser.add_argument("--autograde", type=int, default=3,
                        help="of those, how many plain 'nbgrader "
                             "autograde' runs (default 3; 0 skips it)")
    parser.add_argument("--audit", default=ASSIGNMENT, metavar="ID",
                        help="the assignment whose audit (singles and "
                             "variants) is timed once (default "
                             f"{ASSIGNMENT}; '' skips it)")
    args = parser.parse_args(argv)
    global LOAD
    LOAD = os.getloadavg()[0]
    python = sys.executable

    # The measurements are interleaved, round after round, so that a
    # change in the machine's load affects them all alike; medians.
    times: dict[str, list[float]] = {"floor": [], "single": [], "batch": [],
                                     "route": [], "one": []}
    with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        _class(folder, args.batch)
        alone = Path(tmp) / "alone"
        alone.mkdir()
        _class(alone, 1)
        course = Path(tmp) / "course"
        if args.notebooks:
            course.mkdir()
            _course(course, args.notebooks)
        out = Path(tmp) / "grades.csv"
        for _ in range(args.repeat):
            times["floor"].append(_run([python, "-c", "import torch"]))
            times["single"].append(_run([python, "-m", "grader", "grade",
                                         str(EXAMPLE)]))
            times["batch"].append(_run([python, "-m", "grader", "batch",
                                        str(folder), "--out", str(out)],
                                       name="batch") / args.batch)
            times["one"].append(_run([python, "-m", "grader", "batch",
                                      str(alone), "--out",
                                      str(Path(tmp) / "one.csv")]))
            if args.notebooks:
                times["route"].append(_run(
                    [python, "-m", "grader", "nbgrader", ASSIGNMENT],
                    course) / args.notebooks)
        notebook = (_autograde(course, args.autograde)
                    if args.notebooks and args.autograde else None)
        audit = (_run([python, "-m", "grader", "audit", args.audit,
                       "--out", str(Path(tmp) / "audit")], name="audit")
                 if args.audit else None)
        entries = (_audited(Path(tmp) / "audit" / "audit.json")
                   if args.audit else "")
    floor, single, batch = (statistics.median(times[k])
                            for k in ("floor", "single", "batch"))
    route = statistics.median(times["route"]) if times["route"] else None

    rows = [("python -c 'import torch'", floor),
            ("grader grade (one submission)", single),
            (f"grader batch, per submission ({args.batch})", batch)]
    if route is not None:
        rows.append((f"grader nbgrader, per notebook ({args.notebooks})",
                     route))
    if notebook is not None:
        rows.append((f"nbgrader autograde, per notebook "
                     f"({args.autograde})", notebook))
    if audit is not None:
        rows.append((f"grader audit {args.audit} (once)", audit))
    print(f"machine: {machine()}")
    print(f"{'measurement':<44} {'seconds':>8}")
    for label, seconds in rows:
        print(f"{label:<44} {seconds:>8.2f}")
    print()
    print(f"grade / import torch          {single / floor:5.2f}  "
          f"(goal: at most about 2)")
    print(f"batch per submission / grade  {batch / single:5.2f}  "
          f"(goal: at most 0.1)")
    print(f"class of {args.batch} in one batch "
          f"{batch * args.batch:7.1f} s  (goal for 300: under 60 s)")
    print(f"batch per submission / import {batch / floor:5.2f}")
    # The CPU time the class cost (the machine's busy time during the
    # batch: coordinator, judges, fork server, workers, flake8; anything
    # else the machine ran too, hence the load average beside it), and the
    # share of the cores the batch kept busy.
    cpu = statistics.median(CPU["batch"])
    cores = os.cpu_count() or 1
    wall = batch * args.batch
    print(f"class of {args.batch}: CPU {cpu:7.1f} s in all, "
          f"{cpu / args.batch:.2f} s a submission, the {cores} cores "
          f"{100 * cpu / (cores * wall):.0f}% busy with {_judges()} judges "
          f"(load average before: {LOAD:.2f})")
    scale(statistics.median(times["one"]), batch * args.batch, args.batch)
    if audit is not None:
        print(f"audit of {args.audit}: {entries} in {audit:.1f} s "
              f"(goal: under 60 s on 2 cores)")
    if route is not None:
        print(f"grader nbgrader per notebook / grade "
              f"{route / single:5.2f}  (goal: at most 0.25)")
    if notebook is not None:
        print(f"nbgrader autograde per notebook / grade "
              f"{notebook / single:5.2f}")
        if route is not None:
            print(f"nbgrader autograde / grader nbgrader, per notebook "
                  f"{notebook / route:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
