"""``grade --feedback DIR``: the report as files a student can open.

Writes ``report.txt`` (the text report), ``report.json`` (the JSON
contract) and, for each failing item that has a picture, a PNG named
``<item id>__<n>.png`` (e.g. ``task2.causal__1.png``). Paths in them are
relative to the submission (:func:`relative`).
"""
from __future__ import annotations

from pathlib import Path

from grader.output.figures import draw
from grader.output.files import write_atomic
from grader.output.report import Report


def relative(text: str, submission: str) -> str:
    """``text`` with the folder that holds the ``submission`` taken out of
    every path: a student's feedback names their files relative to their
    submission (``alice/transformer_lm/modeling_attention.py``), never
    the instructor's folders."""
    path = Path(submission)
    folders = {str(path.parent), str(path.resolve().parent)}
    for folder in sorted(folders, key=len, reverse=True):
        if folder not in ("", ".", path.anchor):
            text = text.replace(folder.rstrip("/\\") + "/", "")
    return text


def write_feedback(report: Report, folder: Path) -> list[Path]:
    """Write the feedback files into ``folder``; return their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "report.txt", folder / "report.json"]
    write_atomic(written[0], relative(report.as_text(), report.path))
    write_atomic(written[1], relative(report.to_json() + "\n",
                                      report.path))
    counts: dict[str, int] = {}
    for figure in report.figures:
        counts[figure.item] = counts.get(figure.item, 0) + 1
        path = folder / f"{figure.item}__{counts[figure.item]}.png"
        written.append(draw(figure, path))
    return written
