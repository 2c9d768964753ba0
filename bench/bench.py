"""Benchmark the grader against its floor, ``python -c "import torch"``.

    python bench/bench.py [--quick] [--repeat 3] [--class 300]
                          [--notebooks 24] [--autograde 0] [--audit ID]

Measured side by side, in one run, on the same machine, each as a ratio
of the floor measured in the same run (issue 28's targets beside it):

* ``python -c "import torch"``: the per-process floor of any grader;
* ``python -m grader grade FILE --public-only`` and ``grade FILE`` (one
  file: a copy of the reference solution), and ``grade FILE`` handed to a
  command server started for the run (``grader.routes.warm``: what a
  student's repeated self-checks cost once it is warm; its CPU is the
  client's, the server's forks' and their workers');
* ``python -m pytest tests/public/<id>`` on the stub (the kit's
  ``transformer_lm``) and on a solution (``--impl``);
* ``python -m grader batch`` over a class of ``--class`` submissions
  copied from the kit's corpus (``tests/kit/submissions``: correct,
  mistaken, broken, partial, the stub; no two files alike), wall and CPU
  time a submission, and a class of one, from which the batch's warm-up
  and its cost a submission give a class of 300 (and of 3,000 and 30,000
  in N shards, docs/cluster.md);
* ``python -m grader nbgrader`` on a course of ``--notebooks`` submitted
  notebooks, per notebook (plain ``nbgrader autograde`` of
  ``--autograde`` of them beside it, when asked);
* ``python -m grader audit ID`` once (singles and variants).

Every command but the class and the audit runs ``--repeat`` times, in
interleaved rounds (a change in the machine's load touches them alike);
medians. CPU time is the command's whole process tree (this process is a
child subreaper: the fork server's workers and anything orphaned are
reaped here and counted). The machine's load average and cores are
printed at the start and the end, and the run is called **loaded** when
the load exceeds the cores: wall-clock ratios then say little, CPU ratios
more. ``--quick``: a class of 30, 6 notebooks, 2 rounds.
"""
from __future__ import annotations

import argparse
import ctypes
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
CORPUS = ROOT / "tests" / "kit" / "submissions"
ASSIGNMENT = "multi_head_attention"
# The corpus files a class is copied from: every kind a class holds
# (nothing that hangs or sleeps on purpose).
CORPUS_PREFIXES = ("correct_", "mistake_", "partial_", "broken_")
CLASS_OF = 300


class Measure:
    """One command's wall and CPU seconds, run after run. (No dataclass
    here: tests/kit/test_cluster.py loads this file without registering
    it as a module.)"""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def median(self, per: int = 1) -> tuple[float, float]:
        """(wall, CPU) medians, divided by ``per``."""
        return (statistics.median(self.wall) / per,
                statistics.median(self.cpu) / per)


MEASURES: dict[str, Measure] = {}


def _subreaper() -> None:
    """Make this process the reaper of its orphaned descendants (Linux),
    so that their CPU time is counted in RUSAGE_CHILDREN."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


#: Children that outlive the commands (a command server started for
#: the run): not waited for.
KEPT: set[int] = set()


def _children(pid: int | str = "self") -> set[int]:
    """The live children of ``pid`` (this process by default)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(c) for c in (task / "children").read_text().split())
    return found


def _reap(deadline: float = 10.0) -> None:
    """Wait for every descendant that is left (at most ``deadline``),
    but those in :data:`KEPT`."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if not _children() - KEPT:
                return
            time.sleep(0.02)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _stat_cpu(pid: int) -> float:
    """A process's CPU seconds and its reaped children's (its
    ``/proc/PID/stat`` utime, stime, cutime and cstime)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int) -> float:
    """The CPU seconds of a command server's tree: itself, the commands
    it forked and reaped, and its fork server with the workers that one
    reaped."""
    return _stat_cpu(pid) + sum(_stat_cpu(c) for c in _children(pid))


def run(name: str, args: list[str], cwd: Path = ROOT,
        ok: tuple[int, ...] = (0, 1),
        env: dict[str, str] | None = None,
        beside: int | None = None) -> float:
    """Run ``args``; record its wall and CPU seconds under ``name``
    (with ``beside``, a command server's pid: what its tree spent too)."""
    before = server_cpu(beside) if beside else 0.0
    cpu, started = _children_cpu(), time.perf_counter()
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                            env=env)
    wall = time.perf_counter() - started
    _reap()
    if beside:
        cpu -= server_cpu(beside) - before
    if result.returncode not in ok:
        raise SystemExit(f"{' '.join(args)} failed ({result.returncode}):"
                         f"\n{result.stderr[-3000:]}")
    measure = MEASURES.setdefault(name, Measure())
    measure.wall.append(wall)
    measure.cpu.append(_children_cpu() - cpu)
    return wall


def corpus_class(folder: Path, size: int) -> None:
    """A class of ``size`` files copied from the corpus (and the stub and
    the reference), each with its own last line, so that no two alike."""
    kinds = [REFERENCE.read_text(), STUB.read_text()]
    kinds += [path.read_text() for path in sorted(CORPUS.glob("*.py"))
              if path.name.startswith(CORPUS_PREFIXES)]
    for index in range(size):
        text = kinds[index % len(kinds)].rstrip("\n")
        (folder / f"student{index:03d}.py").write_text(
            f"{text}\n# submitted by student {index:03d}\n")


def course(folder: Path, size: int) -> None:
    """An nbgrader course with ``size`` submitted notebooks (solutions,
    partly correct and untouched copies)."""
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(ROOT / "solutions" / "source",
                    folder / "solutions" / "source")
    run("setup", [sys.executable, "-m", "nbgrader", "generate_assignment",
                  ASSIGNMENT, "--force"], folder, ok=(0,))
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


def autograde(folder: Path, count: int) -> None:
    """Plain ``nbgrader autograde`` of ``count`` notebooks of a copy of
    the course ``folder``."""
    with tempfile.TemporaryDirectory(prefix="bench-plain-") as tmp:
        plain = Path(tmp) / "plain"
        shutil.copytree(folder, plain)
        for extra in sorted((plain / "submitted").iterdir())[count:]:
            shutil.rmtree(extra)
        run("autograde", [sys.executable, "-m", "nbgrader", "autograde",
                          ASSIGNMENT, "--create", "--force"], plain)


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
    version = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True).stdout.strip()
    return (f"{model}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, torch {version}, "
            f"{platform.system()} {platform.release()}")


def load_line(when: str) -> tuple[str, bool]:
    """The load average and cores now, and whether the machine is
    loaded (its 1-minute load above its cores)."""
    one, five, fifteen = os.getloadavg()
    cores = os.cpu_count() or 1
    loaded = one > cores
    return (f"{when}: load average {one:.2f} {five:.2f} {fifteen:.2f} on "
            f"{cores} cores{' (loaded)' if loaded else ''}", loaded)


SIZES = (300, 3_000, 30_000)
SHARDS = (1, 4, 16, 64, 256)


def shard_wall(students: int, shards: int, warm_up: float,
               each: float) -> float:
    """Seconds until the last of ``shards`` shards of a class of
    ``students`` is done, every shard on a node of its own: its warm-up,
    then its students (the largest shard has ceil(students / shards))."""
    return warm_up + -(-students // shards) * each


def scale(one: float, whole: float, size: int) -> tuple[float, float]:
    """Print the batch's warm-up and cost a submission (from a class of
    one, ``one`` s, and of ``size``, ``whole`` s) and the wall time of the
    classes of SIZES in N shards on nodes like this one; return
    (warm-up, each)."""
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
    return warm_up, each


class Row:
    """A line of the table: a measurement, its ratios of the floor, its
    target in words and whether it is met (None: no target)."""

    def __init__(self, label: str, wall: float, cpu: float,
                 floor: tuple[float, float], target: str = "",
                 met: bool | None = None) -> None:
        self.label, self.wall, self.cpu = label, wall, cpu
        self.floor, self.target, self.met = floor, target, met

    def line(self) -> str:
        ratio = self.wall / self.floor[0]
        cpu_ratio = self.cpu / self.floor[1]
        verdict = {None: "", True: "met", False: "NOT met"}[self.met]
        return (f"| {self.label} | {self.wall:.2f} | {ratio:.2f} | "
                f"{self.cpu:.2f} | {cpu_ratio:.2f} | {self.target} | "
                f"{verdict} |")


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smaller run: --class 30 --notebooks 6 "
                             "--repeat 2 (unless given)")
    parser.add_argument("--repeat", type=int, help="rounds (default 3)")
    parser.add_argument("--class", "--batch", dest="batch", type=int,
                        metavar="N", help="submissions in the class "
                                          f"(default {CLASS_OF})")
    parser.add_argument("--notebooks", type=int,
                        help="notebooks of the nbgrader course (default "
                             "24; 0 skips the route)")
    parser.add_argument("--autograde", type=int, default=0,
                        help="plain 'nbgrader autograde' of this many of "
                             "them, for comparison (default 0: skipped)")
    parser.add_argument("--audit", default=ASSIGNMENT, metavar="ID",
                        help=f"the assignment audited once (default "
                             f"{ASSIGNMENT}; '' skips it)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.repeat = args.repeat or (2 if quick else 3)
    args.batch = args.batch or (30 if quick else CLASS_OF)
    if args.notebooks is None:
        args.notebooks = 6 if quick else 24
    return args


def rounds(args: argparse.Namespace, tmp: Path,
           server: tuple[int, dict[str, str]] | None = None) -> None:
    """Every repeated measurement, round after round (``server``: a
    command server's pid and an environment that names it)."""
    python = sys.executable
    single = tmp / "single" / "modeling_attention.py"
    single.parent.mkdir()
    shutil.copy(REFERENCE, single)
    public = str(ROOT / "tests" / "public" / ASSIGNMENT)
    pytest = [python, "-m", "pytest", public, "-q", "-p", "no:cacheprovider",
              "-p", "no:xdist", "-o", "addopts="]
    for _ in range(args.repeat):
        run("floor", [python, "-c", "import torch"])
        run("public-only", [python, "-m", "grader", "grade", str(single),
                            "--public-only"])
        run("grade", [python, "-m", "grader", "grade", str(single)])
        if server is not None:
            run("warm grade", [python, "-m", "grader", "grade",
                               str(single)], env=server[1], beside=server[0])
        run("pytest stub", pytest)
        run("pytest solution", pytest + ["--impl", str(REFERENCE)])
        if args.notebooks:
            run("route", [python, "-m", "grader", "nbgrader", ASSIGNMENT],
                tmp / "course")
        run("one", [python, "-m", "grader", "batch", str(tmp / "alone"),
                    "--out", str(tmp / "one.csv")])


def measure(args: argparse.Namespace, tmp: Path) -> None:
    """Build the class and the course, then measure everything."""
    python = sys.executable
    for name, size in (("class", args.batch), ("alone", 1)):
        (tmp / name).mkdir()
        corpus_class(tmp / name, size)
    if args.notebooks:
        (tmp / "course").mkdir()
        course(tmp / "course", args.notebooks)
    sys.path.insert(0, str(ROOT))
    from grader.routes import warm

    environment = {k: v for k, v in os.environ.items()
                   if k not in (warm.ADDRESS, "GRADER_FORK_SERVER")}
    server = warm.listen(str(tmp / "commands"))
    KEPT.add(server.pid)
    try:
        # One grade first: the server's fork server is started and warm.
        run("warm-up", [python, "-m", "grader", "grade", str(REFERENCE),
                        "--public-only"],
            env={**environment, warm.ADDRESS: str(tmp / "commands")})
        rounds(args, tmp, (server.pid, {**environment,
                                        warm.ADDRESS: str(tmp / "commands")}))
    finally:
        server.kill()
        server.wait()
    run("class", [python, "-m", "grader", "batch", str(tmp / "class"),
                  "--out", str(tmp / "grades.csv")])
    if args.notebooks and args.autograde:
        autograde(tmp / "course", args.autograde)
    if args.audit:
        run("audit", [python, "-m", "grader", "audit", args.audit,
                      "--out", str(tmp / "audit")])


def table(args: argparse.Namespace) -> list[Row]:
    """The rows of the table, with their targets (issue 28)."""
    floor = MEASURES["floor"].median()
    grade = MEASURES["grade"].median()
    rows = [Row("`python -c \"import torch\"` (the floor)", *floor, floor)]

    def ratio(name: str, label: str, limit: float, per: int = 1) -> None:
        wall, cpu = MEASURES[name].median(per)
        rows.append(Row(label, wall, cpu, floor, f"<= {limit:g} x floor",
                        wall / floor[0] <= limit))

    ratio("public-only", "`grade FILE --public-only`", 1.3)
    ratio("grade", "`grade FILE`", 1.3)
    ratio("warm grade", "`grade FILE` through a command server", 1.3)
    ratio("pytest stub", f"`pytest tests/public/{ASSIGNMENT}` (stub)", 1.3)
    ratio("pytest solution",
          f"`pytest tests/public/{ASSIGNMENT} --impl` (solution)", 1.3)
    size = args.batch
    wall, cpu = MEASURES["class"].median(size)
    rows.append(Row(f"`batch`, a submission (class of {size}, start-up "
                    f"shared by {size})", wall, cpu, floor))
    one_wall, one_cpu = MEASURES["one"].median()
    each_wall = (wall * size - one_wall) / max(size - 1, 1)
    each_cpu = (cpu * size - one_cpu) / max(size - 1, 1)
    warm_wall = max(one_wall - each_wall, 0.0)
    warm_cpu = max(one_cpu - each_cpu, 0.0)
    projected = (warm_wall + CLASS_OF * each_wall,
                 warm_cpu + CLASS_OF * each_cpu)
    label = ("class of 300, measured" if size == CLASS_OF else
             f"class of 300, from the class of {size} and of 1")
    rows.append(Row(label, *projected, floor, "wall < 40 s",
                    projected[0] < 40.0))
    each = (projected[0] / CLASS_OF, projected[1] / CLASS_OF)
    rows.append(Row("class of 300, a submission", *each, floor,
                    "CPU <= 0.25 s", each[1] <= 0.25))
    if args.notebooks:
        wall, cpu = MEASURES["route"].median(args.notebooks)
        rows.append(Row(f"`nbgrader` route, a notebook ({args.notebooks}"
                        f", start-up shared by {args.notebooks})", wall,
                        cpu, floor,
                        "<= 0.15 x grade", wall <= 0.15 * grade[0]))
    if "autograde" in MEASURES:
        wall, cpu = MEASURES["autograde"].median(args.autograde)
        rows.append(Row(f"plain `nbgrader autograde`, a notebook "
                        f"({args.autograde})", wall, cpu, floor))
    if args.audit:
        wall, cpu = MEASURES["audit"].median()
        rows.append(Row(f"`audit {args.audit}` (once)", wall, cpu, floor,
                        "wall < 60 s", wall < 60.0))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run every measurement and print the table."""
    args = parse(argv)
    _subreaper()
    start, loaded_before = load_line("start")
    print(f"machine: {machine()}")
    print(start, flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        measure(args, Path(tmp))
    end, loaded_after = load_line("end")
    print(end)
    print(f"command: python bench/bench.py "
          f"{' '.join(sys.argv[1:]) if argv is None else ' '.join(argv)}")
    print(f"medians of {args.repeat} rounds (the class and the audit: "
          f"once); CPU: the command's whole process tree")
    if loaded_before or loaded_after:
        print("LOADED: the load exceeded the cores while measuring; "
              "wall-clock figures are slowed by other jobs, CPU ratios "
              "are the better guide")
    print()
    print("| measurement | wall s | x floor | CPU s | CPU x floor | target "
          "| met |")
    print("|---|---:|---:|---:|---:|---|---|")
    for row in table(args):
        print(row.line())
    print()
    wall, _ = MEASURES["class"].median()
    scale(MEASURES["one"].median()[0], wall, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
