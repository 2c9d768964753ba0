"""Compare the CPU a batch costs under two copies of the kit's code.

    python bench/ab.py BASELINE [--class 30] [--rounds 3] [--jobs N]

``BASELINE`` is another checkout of the kit (for instance ``git archive
main | tar -x -C /tmp/base``); the candidate is this file's own kit. Both
grade the same class (copied from ``tests/kit/submissions`` as
``bench/bench.py`` does), in interleaved rounds (a change in the
machine's load touches them alike), each with ``PYTHONPATH`` at its own
kit. Prints, per round and as medians, the CPU seconds a submission of
each (the whole process tree: this process is a child subreaper) and
their ratio, and whether the two runs wrote the same CSV and reports.
CPU, not wall: the machine may be shared. docs/internals.md describes
what a batch runs.
"""
from __future__ import annotations

import argparse
import filecmp
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> object:
    """bench/bench.py, loaded by path (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("kit_bench",
                                                  ROOT / "bench" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grade(kit: Path, folder: Path, out: Path, jobs: int | None,
          bench: object) -> float:
    """CPU seconds of one ``batch`` of ``folder`` under ``kit``'s code."""
    env = dict(os.environ, PYTHONPATH=str(kit))
    env.pop("GRADER_FORK_SERVER", None)
    command = [sys.executable, "-m", "grader", "batch", str(folder),
               "--out", str(out), "--seed", "7"]
    if jobs:
        command += ["--jobs", str(jobs)]
    before = bench._children_cpu()
    result = subprocess.run(command, cwd=kit, env=env, capture_output=True,
                            text=True)
    bench._reap()
    if result.returncode not in (0, 1):
        raise SystemExit(f"{kit}: batch failed ({result.returncode}):\n"
                         f"{result.stderr[-3000:]}")
    return bench._children_cpu() - before


def _timeless(value: object) -> object:
    """A JSON value without its timings (every "seconds" key)."""
    if isinstance(value, dict):
        return {key: _timeless(item) for key, item in value.items()
                if key != "seconds"}
    if isinstance(value, list):
        return [_timeless(item) for item in value]
    return value


def _same(path: Path, other: Path) -> bool:
    """Whether two output files are alike (JSON: but for timings)."""
    if not other.is_file():
        return False
    if path.suffix == ".json":
        return _timeless(json.loads(path.read_text())) == \
            _timeless(json.loads(other.read_text()))
    return filecmp.cmp(path, other, shallow=False)


def same_output(first: Path, second: Path) -> list[str]:
    """The files that differ between two batches' outputs (the CSV and
    every report and feedback file below ``first``.reports/; a JSON
    file's "seconds" are left out: they are timings)."""
    differ = [] if filecmp.cmp(first, second, shallow=False) else [first.name]
    ours = Path(str(first) + ".reports")
    theirs = Path(str(second) + ".reports")
    for path in sorted(ours.rglob("*")):
        if path.is_file() and not _same(path, theirs /
                                        path.relative_to(ours)):
            differ.append(str(path.relative_to(ours)))
    return differ


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("--class", dest="size", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args(argv)
    bench = _bench()
    bench._subreaper()
    kits = {"baseline": args.baseline.resolve(), "candidate": ROOT}
    cpu: dict[str, list[float]] = {name: [] for name in kits}
    print(bench.load_line("start")[0])
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        bench.corpus_class(folder, args.size)
        for index in range(args.rounds):
            order = list(kits) if index % 2 == 0 else list(kits)[::-1]
            line = []
            for name in order:
                started = time.perf_counter()
                seconds = grade(kits[name], folder,
                                Path(tmp) / f"{name}{index}.csv",
                                args.jobs, bench)
                cpu[name].append(seconds / args.size)
                line.append(f"{name} {seconds / args.size:.3f} CPU-s "
                            f"({time.perf_counter() - started:.1f} s wall)")
            print(f"round {index + 1}: " + ", ".join(line), flush=True)
        differ = same_output(Path(tmp) / "baseline0.csv",
                             Path(tmp) / "candidate0.csv")
    base = statistics.median(cpu["baseline"])
    cand = statistics.median(cpu["candidate"])
    paired = statistics.median(c / b for b, c in zip(cpu["baseline"],
                                                     cpu["candidate"]))
    print(f"median CPU a submission: baseline {base:.3f} s, candidate "
          f"{cand:.3f} s, ratio {cand / base:.2f} (median of the rounds' "
          f"ratios {paired:.2f})")
    print("outputs: " + ("identical" if not differ else
                         f"{len(differ)} file(s) differ: {differ[:10]}"))
    print(bench.load_line("end")[0])
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
