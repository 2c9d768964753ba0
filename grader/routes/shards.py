"""A class graded in shards (a Slurm array, a Kubernetes Indexed Job) and
merged back into one CSV and summary.

Details: docs/internals.md, `grader.routes.shards`.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from grader.errors import GraderError
from grader.output.files import write_atomic
from grader.output.text import listing, one_line

if TYPE_CHECKING:
    from grader.routes.classfolder import Entry

MANIFEST = "shard.json"


class MergeError(GraderError):
    """Shards that cannot be merged (one line, exit status 2)."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as (I, N), with ``1 <= I <= N`` (argparse type)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not I/N (e.g. 2/8)") from None
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError(
            f"{text!r}: I must be between 1 and N (e.g. 2/8)")
    return index, count


def shard_of(entries: list[Entry], index: int, count: int) -> list[Entry]:
    """The ``index``-th of ``count`` parts of ``entries`` (1-based): in
    the order of their report keys, every ``count``-th from the
    ``index``-th."""
    ordered = sorted(entries, key=lambda e: e.key)
    return ordered[index - 1::count]


def write_manifest(reports: Path, shard: tuple[int, int],
                   everyone: list[Entry], graded: list[Entry]) -> None:
    """``shard.json`` in a shard's reports: who the class is, which part
    this is, and whom it graded."""
    reports.mkdir(parents=True, exist_ok=True)
    write_atomic(reports / MANIFEST, json.dumps({
        "shard": shard[0], "shards": shard[1],
        "class": sorted(e.student for e in everyone),
        "graded": sorted(e.student for e in graded)}, indent=2) + "\n")


def _manifest(part: Path) -> dict:
    path = part.with_name(part.name + ".reports") / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def merge(out: Path, parts: list[Path], stream=None) -> int:
    """Merge the shards' CSVs ``parts`` into ``out`` (see the module
    docstring); return the exit status: 0 when every student of the
    class has a row, 1 when some are missing (named). Raises
    :class:`MergeError` for duplicates or unreadable parts."""
    from grader.routes.rows import (STATUS_ERROR, RowsError, read_csv,
                                    write_csv)
    from grader.routes.summary import write_summary

    stream = stream or sys.stdout
    out = Path(out)
    reports = out.with_name(out.name + ".reports")
    if out.resolve() in {p.resolve() for p in parts}:
        raise MergeError(f"{out} is one of the parts: merge into a new CSV")
    rows: list[dict] = []
    owner: dict[str, Path] = {}
    folders: dict[str, Path] = {}
    everyone: set[str] = set()
    shards: dict[int, Path] = {}
    counts: set[int] = set()
    for part in parts:
        try:
            part_rows = read_csv(part)
        except RowsError as exc:
            raise MergeError(str(exc)) from exc
        duplicates = sorted(r["student"] for r in part_rows
                            if r["student"] in owner)
        if duplicates:
            raise MergeError(
                f"{listing([one_line(d, 60) for d in duplicates])} graded "
                f"in both {owner[duplicates[0]]} and {part}: merge each "
                f"shard once")
        for row in part_rows:
            owner[row["student"]] = part
        rows += part_rows
        manifest = _manifest(part)
        everyone |= set(manifest.get("class", []))
        if isinstance(manifest.get("shard"), int):
            if manifest["shard"] in shards:
                raise MergeError(f"{part} and {shards[manifest['shard']]} "
                                 f"are both shard {manifest['shard']}")
            shards[manifest["shard"]] = part
            counts.add(int(manifest.get("shards", 0)))
        source = part.with_name(part.name + ".reports")
        if source.is_dir():
            for folder in sorted(source.iterdir()):
                if not folder.is_dir() or folder.is_symlink():
                    continue
                if folder.name in folders:
                    raise MergeError(f"the report folder {folder.name} is "
                                     f"in both {folders[folder.name]} and "
                                     f"{part}")
                folders[folder.name] = part
    if reports.exists():
        shutil.rmtree(reports)
    reports.mkdir(parents=True)
    for name, part in folders.items():
        shutil.copytree(part.with_name(part.name + ".reports") / name,
                        reports / name, symlinks=True)
    write_csv(out, rows)
    graded = {r["student"] for r in rows}
    missing = sorted(everyone - graded)
    absent = sorted(set(range(1, max(counts) + 1)) - set(shards)) \
        if len(counts) == 1 else []
    errors = sum(r["status"] == STATUS_ERROR for r in rows)
    stream.write(f"merged {len(parts)} parts: {len(rows)} rows "
                 f"({errors} not graded) -> {out} (reports in {reports})\n")
    if len(counts) > 1:
        stream.write(f"  warning: the parts were cut into different "
                     f"numbers of shards ({sorted(counts)})\n")
    if absent:
        stream.write(f"  missing shards: {', '.join(map(str, absent))} "
                     f"of {max(counts)}\n")
    for student in missing:
        stream.write(f"  missing: {one_line(student, 80)}: no part graded "
                     f"this student\n")
    write_summary(out, rows, reports, stream)
    return 1 if missing or absent else 0
