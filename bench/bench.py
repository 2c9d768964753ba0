"""Benchmark the grader against its floor and against nbgrader.

    python bench/bench.py [--repeat 3] [--batch 24] [--notebooks 3]

Measured side by side, in one run, on the same machine:

* ``python -c "import torch"``: the per-process floor of any grader;
* ``python -m grader grade`` of one submission (the example repository);
* ``python -m grader batch`` over a class of ``--batch`` submissions
  (correct, buggy and stub copies), as wall time per submission;
* ``nbgrader autograde`` of ``--notebooks`` notebooks, per notebook (its
  graded cells run the same grader).

It prints the timings and their ratios with the goals of issue 6: a single
grade at most about twice ``import torch``, and a submission in a batch at
most a quarter of a single grade. Wall-clock medians; run it on an idle
machine.
"""
from __future__ import annotations

import argparse
import os
import platform
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
ASSIGNMENT = "multi_head_attention"


def _run(args: list[str], cwd: Path = ROOT) -> float:
    started = time.perf_counter()
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stderr}")
    return elapsed


def _median(args: list[str], repeat: int, cwd: Path = ROOT) -> float:
    return statistics.median(_run(args, cwd) for _ in range(repeat))


def _class(folder: Path, size: int) -> None:
    kinds = [REFERENCE.read_text(),
             REFERENCE.read_text().replace(" / self.scale, dim=-1)",
                                           ", dim=-1)"),
             STUB.read_text()]
    for index in range(size):
        (folder / f"student{index:03d}.py").write_text(kinds[index % 3])


def _nbgrader_per_notebook(count: int) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-course-") as tmp:
        course = Path(tmp)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        shutil.copytree(ROOT / "solutions" / "source",
                        course / "solutions" / "source")
        nbgrader = [sys.executable, "-m", "nbgrader"]
        _run(nbgrader + ["generate_assignment", ASSIGNMENT, "--force"],
             course)
        for index in range(count):
            shutil.copytree(course / "solutions" / "source" / ASSIGNMENT,
                            course / "submitted" / f"s{index}" / ASSIGNMENT)
        elapsed = _run(nbgrader + ["autograde", ASSIGNMENT, "--create"],
                       course)
        return elapsed / count


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


def main(argv: list[str] | None = None) -> int:
    """Run every measurement and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per median (default 3)")
    parser.add_argument("--batch", type=int, default=24,
                        help="submissions in the batch (default 24)")
    parser.add_argument("--notebooks", type=int, default=3,
                        help="notebooks nbgrader autogrades (default 3; "
                             "0 skips nbgrader)")
    args = parser.parse_args(argv)
    python = sys.executable

    floor = _median([python, "-c", "import torch"], args.repeat)
    single = _median([python, "-m", "grader", "grade", str(EXAMPLE)],
                     args.repeat)
    with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        _class(folder, args.batch)
        out = Path(tmp) / "grades.csv"
        batch = _run([python, "-m", "grader", "batch", str(folder),
                      "--out", str(out)]) / args.batch
    notebook = (_nbgrader_per_notebook(args.notebooks)
                if args.notebooks else None)

    rows = [("python -c 'import torch'", floor),
            ("grader grade (one submission)", single),
            (f"grader batch, per submission ({args.batch})", batch)]
    if notebook is not None:
        rows.append((f"nbgrader autograde, per notebook "
                     f"({args.notebooks})", notebook))
    print(f"machine: {machine()}")
    print(f"{'measurement':<44} {'seconds':>8}")
    for label, seconds in rows:
        print(f"{label:<44} {seconds:>8.2f}")
    print()
    print(f"grade / import torch          {single / floor:5.2f}  "
          f"(goal: at most about 2)")
    print(f"batch per submission / grade  {batch / single:5.2f}  "
          f"(goal: at most 0.25)")
    print(f"batch per submission / import {batch / floor:5.2f}")
    if notebook is not None:
        print(f"nbgrader per notebook / grade {notebook / single:5.2f}")
        print(f"nbgrader per notebook / batch {notebook / batch:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
