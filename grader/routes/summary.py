"""The instructor's view of a class: what a batch's CSV and reports say
about the class as a whole.

Details: docs/internals.md, `grader.routes.summary`.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from grader.output.files import write_atomic
from grader.output.text import clean, one_line
from grader.routes.rows import read_csv

SUMMARY_JSON = ".summary.json"  # after the CSV's name
SUMMARY_PNG = ".summary.png"
RECORD = "record.json"
SLOWEST = 5          # the slowest submissions listed
MISTAKES_DRAWN = 10  # the most frequent mistakes drawn


def summary_paths(csv_path: Path) -> tuple[Path, Path]:
    """``FILE.csv.summary.json`` and ``FILE.csv.summary.png``, beside
    ``FILE.csv`` and named after it: two CSVs in one folder (a batch and
    a merge, two assignments' results) never share a summary."""
    csv_path = Path(csv_path)
    return (csv_path.with_name(csv_path.name + SUMMARY_JSON),
            csv_path.with_name(csv_path.name + SUMMARY_PNG))


def read_records(reports: Path) -> dict[str, dict]:
    """Student name -> the graded report of each record under
    ``reports`` (records that are unreadable or not graded are left
    out)."""
    found: dict[str, dict] = {}
    if not reports.is_dir():
        return found
    for record_file in sorted(reports.glob(f"*/{RECORD}")):
        try:
            record = json.loads(record_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (isinstance(record, dict) and record.get("status") == "graded"
                and isinstance(record.get("report"), dict)):
            found[str(record.get("student", ""))] = record["report"]
    return found


def _number(text: object) -> float | None:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _titles(assignment_id: str) -> tuple[dict[str, str], dict[str, str]]:
    """Item titles and diagnosis texts of the rubric (empty if unknown)."""
    from grader.rubric import RubricError, get_assignment

    try:
        assignment = get_assignment(assignment_id)
    except RubricError:
        return {}, {}
    return ({item.id: item.title for item in assignment.items},
            dict(assignment.diagnoses))


def summarise(rows: list[dict], reports: Path) -> dict[str, Any]:
    """The class summary of a batch's ``rows`` (from its CSV or its run)
    and the records in its ``reports`` folder (see the module
    docstring)."""
    records = read_records(reports)
    graded = [r for r in rows if r.get("status") == "graded"]
    errors = [r for r in rows if r.get("status") != "graded"]
    totals = sorted(t for t in (_number(r.get("score")) for r in graded)
                    if t is not None)
    maxima = {_number(r.get("max_score")) for r in graded} - {None}
    assignments = sorted({str(r.get("assignment", "")) for r in graded}
                         - {""})
    titles, texts = _titles(assignments[0]) if len(assignments) == 1 \
        else ({}, {})
    items: dict[str, dict[str, Any]] = {}
    diagnoses: dict[str, list[str]] = {}
    flags: dict[str, list[str]] = {}
    timings: list[tuple[float, str]] = []
    for row in sorted(graded, key=lambda r: str(r.get("student", ""))):
        student = str(row.get("student", ""))
        report = records.get(student)
        if report is None:
            continue
        for item in report.get("items", []):
            entry = items.setdefault(item["id"], {
                "title": titles.get(item["id"], ""), "passed": 0,
                "graded": 0, "max_score": item.get("max_score", 0.0)})
            entry["graded"] += 1
            entry["passed"] += bool(item.get("passed"))
            for mistake in item.get("diagnosis", []):
                who = diagnoses.setdefault(str(mistake), [])
                if student not in who:
                    who.append(student)
        for flag in report.get("flags", []):
            who = flags.setdefault(clean(str(flag.get("kind", "?"))), [])
            if student not in who:
                who.append(student)
        seconds = _number(report.get("grader", {}).get("seconds"))
        if seconds is not None:
            timings.append((seconds, student))
    for entry in items.values():
        entry["pass_rate"] = round(entry["passed"] / entry["graded"], 4) \
            if entry["graded"] else None
    timings.sort(key=lambda t: (-t[0], t[1]))
    return {
        "students": len(rows),
        "graded": len(graded),
        "errors": len(errors),
        "not_graded": sorted(clean(str(r.get("student", "")))
                             for r in errors),
        "assignment": assignments[0] if len(assignments) == 1
        else assignments,
        "max_score": maxima.pop() if len(maxima) == 1 else None,
        "totals": {
            "mean": round(statistics.fmean(totals), 3) if totals else None,
            "median": statistics.median(totals) if totals else None,
            "min": totals[0] if totals else None,
            "max": totals[-1] if totals else None,
            "all": totals},
        "items": items,
        "diagnoses": {
            mistake: {"text": texts.get(mistake, ""), "count": len(who),
                      "students": [clean(s) for s in who]}
            for mistake, who in sorted(diagnoses.items(),
                                       key=lambda d: (-len(d[1]), d[0]))},
        "slowest": [{"student": clean(student), "seconds": seconds}
                    for seconds, student in timings[:SLOWEST]],
        "flags": {kind: {"count": len(who),
                         "students": [clean(s) for s in who]}
                  for kind, who in sorted(flags.items())},
    }


def table(summary: dict[str, Any]) -> str:
    """The summary as a short text table (a terminal's width)."""
    totals = summary["totals"]
    lines = [f"Class summary: {summary['graded']} graded, "
             f"{summary['errors']} not graded, of {summary['students']}"]
    if totals["mean"] is not None:
        most = summary["max_score"]
        out_of = f" (of {most:g})" if isinstance(most, float) else ""
        lines.append(f"  totals{out_of}: mean {totals['mean']:g}, median "
                     f"{totals['median']:g}, min {totals['min']:g}, max "
                     f"{totals['max']:g}")
    if summary["items"]:
        lines.append("  item                 passed")
        for item_id, item in summary["items"].items():
            rate = item["pass_rate"]
            lines.append(f"  {one_line(item_id, 20):<20} "
                         f"{item['passed']:>4}/{item['graded']:<4} "
                         f"{100 * rate:5.1f}%" if rate is not None else
                         f"  {one_line(item_id, 20):<20}    -")
    if summary["diagnoses"]:
        lines.append("  mistakes (diagnosis: students)")
        for mistake, entry in list(summary["diagnoses"].items())[:10]:
            lines.append(f"    {one_line(mistake, 40)}: {entry['count']}")
    if summary["flags"]:
        lines.append("  integrity flags (kind: students)")
        for kind, entry in summary["flags"].items():
            lines.append(f"    {one_line(kind, 40)}: {entry['count']}")
    if summary["slowest"]:
        slow = ", ".join(f"{one_line(s['student'], 40)} {s['seconds']:g} s"
                         for s in summary["slowest"])
        lines.append(f"  slowest: {slow}")
    return "\n".join(lines) + "\n"


def _histogram(axes: Any, summary: dict[str, Any]) -> None:
    """One bar per reachable total (whole or half points, as the totals
    are), whole students on the axis, the mean and the median marked."""
    from matplotlib.ticker import MaxNLocator

    totals = summary["totals"]["all"]
    most = summary["max_score"]
    step = 1.0 if all(float(t).is_integer() for t in totals) else 0.5
    top = max([most if isinstance(most, float) else 0.0, *totals, 1.0])
    values = [step * i for i in range(int(round(top / step)) + 1)]
    counts = [sum(1 for t in totals if abs(t - v) < step / 2)
              for v in values]
    colours = ["#dd8452" if isinstance(most, float) and v > most
               else "#4c72b0" for v in values]
    axes.bar(values, counts, width=0.8 * step, color=colours)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylim(0, max(counts + [1]) + 0.5)
    if totals:
        mean, median = summary["totals"]["mean"], summary["totals"]["median"]
        axes.axvline(mean, color="black", linestyle="--",
                     label=f"mean {mean:g}")
        axes.axvline(median, color="#c44e52", linestyle=":",
                     label=f"median {median:g}")
        axes.legend(fontsize=8, loc="upper left")
    out_of = f" out of {most:g}" if isinstance(most, float) else ""
    bonus = " (orange: with the bonus)" if isinstance(most, float) and \
        any(t > most for t in totals) else ""
    axes.set_title(f"Totals{out_of}{bonus}", fontsize=10)
    axes.set_xlabel("points")
    axes.set_ylabel("students")


def figure(summary: dict[str, Any], day: str | None = None) -> Any:
    """The summary's figure (matplotlib, Agg): a title (assignment, date,
    graded and not graded), a histogram of the totals, the items' pass
    rates and the most frequent mistakes. The caller closes it."""
    import datetime

    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    canvas, (left, middle, right) = plt.subplots(
        1, 3, figsize=(15, 5.2), gridspec_kw={"width_ratios": [1, 1.2, 1.2]})
    assignment = summary["assignment"]
    name = assignment if isinstance(assignment, str) else \
        ", ".join(assignment)
    day = day or datetime.date.today().isoformat()
    canvas.suptitle(f"{one_line(name, 60) or 'class'}, {day}: "
                    f"{summary['graded']} graded, {summary['errors']} not "
                    f"graded, of {summary['students']}", fontsize=12)
    _histogram(left, summary)
    items = list(summary["items"].items())
    rates = [100 * (item["pass_rate"] or 0.0) for _, item in items]
    middle.barh(range(len(items)), rates, color="#55a868")
    middle.set_yticks(range(len(items)), [one_line(i, 24) for i, _ in items],
                      fontsize=8)
    middle.invert_yaxis()
    middle.set_xlim(0, 100)
    middle.set_xlabel("% of graded submissions that passed")
    middle.set_title("Rubric items", fontsize=10)
    mistakes = list(summary["diagnoses"].items())[:MISTAKES_DRAWN]
    right.barh(range(len(mistakes)), [m["count"] for _, m in mistakes],
               color="#c44e52")
    right.set_yticks(range(len(mistakes)),
                     [one_line(m, 30) for m, _ in mistakes], fontsize=8)
    right.invert_yaxis()
    if mistakes:
        right.xaxis.set_major_locator(
            matplotlib.ticker.MaxNLocator(integer=True))
    else:
        right.set_xticks([])
    right.set_xlabel("students")
    right.set_title("Most frequent mistakes" if mistakes else
                    "Most frequent mistakes (none)", fontsize=10)
    canvas.tight_layout()
    return canvas


def draw(summary: dict[str, Any], path: Path) -> Path:
    """Draw the summary (:func:`figure`) as a PNG at ``path``."""
    import matplotlib.pyplot as plt

    canvas = figure(summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.savefig(path, dpi=80)
    plt.close(canvas)
    return path


def write_summary(csv_path: Path, rows: list[dict] | None = None,
                  reports: Path | None = None, stream: Any = None
                  ) -> dict[str, Any]:
    """Summarise the batch whose CSV is ``csv_path`` (its ``rows``, read
    from the CSV when not given; its reports folder, ``FILE.csv.reports``
    unless given), print the table on ``stream`` (standard output), write
    ``FILE.csv.summary.json`` and draw ``FILE.csv.summary.png`` beside it."""
    csv_path = Path(csv_path)
    if rows is None:
        rows = read_csv(csv_path)
    if reports is None:
        reports = csv_path.with_name(csv_path.name + ".reports")
    summary = summarise(rows, reports)
    json_path, png_path = summary_paths(csv_path)
    write_atomic(json_path, json.dumps(summary, indent=2) + "\n")
    draw(summary, png_path)
    (stream or sys.stdout).write(
        table(summary) + f"  summary: {json_path}, {png_path}\n")
    return summary
