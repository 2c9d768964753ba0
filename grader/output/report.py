"""A grade, and its three renderings: text, the JSON contract, Gradescope.

The JSON form is the contract of docs/rubric.md: ``score``, ``max_score``,
``items`` (one per rubric item: ``id``, ``score``, ``max_score``,
``passed``, ``message``, ``diagnosis``) and ``errors``. It also carries, as
additions that change no score, ``assignment``, ``tasks`` (each task's
clamped subtotal), ``notes``, ``output`` (what the submission printed, per
task) and ``grader`` (seed label, public-only flag, seconds).
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Any

from grader.output.text import clean, indented, one_line


def out_of(score: float, max_score: float, bonus: float = 0.0) -> str:
    """A score as every report shows it: the points out of the maximum,
    the bonus apart (``10 / 10 + 1 bonus``, never ``11 / 10``)."""
    text = f"{score - bonus:g} / {max_score:g}"
    return text + (f" + {bonus:g} bonus" if bonus else "")


@dataclass
class ItemReport:
    """One rubric item's result."""

    id: str
    task: str
    title: str
    score: float
    max_score: float
    passed: bool
    message: str
    diagnosis: list[str] = field(default_factory=list)
    details: str = ""
    # An optional bonus: not earning it is no failure (Gradescope shows it
    # as a passed test worth 0 of 0, see :meth:`Report.as_gradescope`).
    optional: bool = False
    # False when the grader could not check the item at all (code that
    # does not parse, an untouched stub): neither passed nor failed.
    checked: bool = True

    def as_json(self) -> dict[str, Any]:
        """The item as docs/rubric.md's JSON shows it."""
        message = self.message + (f"\n{self.details}" if self.details
                                  else "")
        return {"id": self.id, "score": float(self.score),
                "max_score": float(self.max_score), "passed": self.passed,
                "message": message, "diagnosis": list(self.diagnosis)}


@dataclass(frozen=True)
class Flag:
    """An integrity flag: what a submission tried that the instructor should
    see (a refused action, code the grader could not attribute, a
    submission that fits another assignment). A flag costs nothing by
    itself; the items it touched say what they earned."""

    kind: str
    message: str
    task: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The flag as the JSON ``flags`` list shows it."""
        return {"kind": self.kind, "task": self.task,
                "message": clean(self.message)}


@dataclass
class TaskReport:
    """One task's subtotal (clamped) and what its code printed."""

    id: str
    title: str
    score: float
    max_score: float
    bonus: float
    raw: float
    source: str
    output: str = ""
    problems: list[str] = field(default_factory=list)
    # What the student should know that is no error (an untouched stub).
    notes: list[str] = field(default_factory=list)
    # Python's words when the task's code does not compile ("" when it
    # does): the CSV's ``syntax_error`` column, for a TA to filter on.
    syntax_error: str = ""


@dataclass
class Report:
    """The whole grade of one submission."""

    assignment: str
    title: str
    path: str
    score: float
    max_score: float
    items: list[ItemReport]
    tasks: list[TaskReport]
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    diagnoses: dict[str, str] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)
    seed_label: str = ""
    public_only: bool = False
    seconds: float = 0.0
    figures: list[Any] = field(default_factory=list)  # not in the JSON

    def item(self, item_id: str) -> ItemReport:
        """The result of one item."""
        for item in self.items:
            if item.id == item_id:
                return item
        raise KeyError(item_id)

    @property
    def bonus(self) -> float:
        """The bonus points the total includes."""
        return float(sum(task.bonus for task in self.tasks))

    def scores(self) -> dict[str, float]:
        """Item id -> score (handy for tests and CSV rows)."""
        return {item.id: item.score for item in self.items}

    # -- JSON --------------------------------------------------------------

    def as_json(self) -> dict[str, Any]:
        """The JSON object of docs/rubric.md (plus informative extras)."""
        return {
            "score": float(self.score), "max_score": float(self.max_score),
            "bonus": self.bonus,
            "items": [item.as_json() for item in self.items],
            # The sentence of every diagnosis id the items carry.
            "diagnoses": {mistake: self.diagnoses.get(mistake, "")
                          for item in self.items
                          for mistake in item.diagnosis},
            "errors": list(self.errors),
            "flags": [flag.as_json() for flag in self.flags],
            "assignment": self.assignment,
            "tasks": [{"id": t.id, "score": float(t.score),
                       "max_score": float(t.max_score),
                       "bonus": float(t.bonus), "source": t.source,
                       "problems": list(t.problems),
                       "notes": list(t.notes),
                       "syntax_error": t.syntax_error}
                      for t in self.tasks],
            "notes": list(self.notes),
            "output": {t.id: clean(t.output) for t in self.tasks
                       if t.output},
            "grader": {"seed": self.seed_label,
                       "public_only": self.public_only,
                       "seconds": round(self.seconds, 3)},
        }

    def to_json(self) -> str:
        """:meth:`as_json`, serialised."""
        return json.dumps(self.as_json(), indent=2)

    # -- Gradescope ----------------------------------------------------------

    def as_gradescope(self) -> dict[str, Any]:
        """A Gradescope ``results.json``: one test per rubric item.

        Gradescope colours a test by its status, passed or failed, and has
        no third state. An optional bonus that was not earned costs
        nothing, so it is a passed test worth 0 of 0 whose output says it
        is optional and why it was not earned, never a failed test."""
        tests = []
        for item in self.items:
            body = item.message
            for mistake in item.diagnosis:
                body += f"\n[{mistake}] {self.diagnoses.get(mistake, '')}"
            if item.details:
                body += f"\n\n{item.details}"
            name = f"{item.id}: {item.title}"
            passed = item.passed
            if item.optional:
                name += " (optional bonus)"
                if not item.passed:
                    passed = True
                    body = (f"Optional bonus, not earned (it costs no "
                            f"points): {body}")
            tests.append({"name": name, "number": item.id,
                          "score": float(item.score),
                          "max_score": float(item.max_score),
                          "status": "passed" if passed else "failed",
                          "output": body, "visibility": "visible"})
        summary = [f"Integrity flag: {clean(f.message)}" for f in self.flags]
        for task in self.tasks:
            summary.append(f"{task.title}: "
                           f"{out_of(task.score, task.max_score, task.bonus)}")
            summary += [f"  Note: {note}" for note in task.notes]
        summary += self.errors + self.notes
        for task in self.tasks:
            if task.output:
                summary.append(f"Output of your code ({task.id}):\n"
                               + "\n".join(indented(task.output)))
        return {"score": float(self.score),
                "execution_time": round(self.seconds, 3),
                "output": "\n".join(summary),
                "stdout_visibility": "hidden",
                "tests": tests}

    # -- Text ----------------------------------------------------------------

    def total_text(self) -> str:
        """The total out of the maximum, the bonus apart."""
        return out_of(self.score, self.max_score, self.bonus)

    def as_text(self) -> str:
        """A readable per-task table with messages and captured output."""
        lines = [f"{self.title} ({self.assignment})",
                 f"Submission: {one_line(self.path)}"]
        mode = ("public test values only" if self.public_only
                else f"public and hidden cases, seed {self.seed_label}")
        lines.append(f"Graded on: {mode}")
        for flag in self.flags:
            lines.append(_wrap(f"Integrity flag: {clean(flag.message)}",
                               "", "    "))
        for note in self.notes:
            lines.append(f"Note: {note}")
        for error in self.errors:
            lines.append(f"Error: {error}")
        for task in self.tasks:
            lines += ["", f"{task.title}: "
                          f"{out_of(task.score, task.max_score, task.bonus)}"]
            lines += [_wrap(f"Note: {note}", "  ", "    ")
                      for note in task.notes]
            if task.raw < 0:
                lines.append("  (penalties beyond the task's points are "
                             "clamped at 0)")
            for item in (i for i in self.items if i.task == task.id):
                lines += _item_lines(item, self.diagnoses)
            for problem in task.problems:
                lines.append(_wrap(f"! {problem}", "  ", "    "))
            if task.output:
                lines.append(f"  Output of your code while grading "
                             f"{task.id}:")
                lines += indented(task.output)
        lines += ["", f"Total: {self.total_text()}"]
        return "\n".join(lines) + "\n"


def _wrap(text: str, first: str, rest: str) -> str:
    paragraphs = text.split("\n")
    out = []
    for index, paragraph in enumerate(paragraphs):
        prefix = first if index == 0 else rest
        out.append(textwrap.fill(paragraph, width=100,
                                 initial_indent=prefix,
                                 subsequent_indent=rest,
                                 break_on_hyphens=False) or prefix)
    return "\n".join(out)


def _item_lines(item: ItemReport, diagnoses: dict[str, str]) -> list[str]:
    if item.max_score > 0:
        points = f"{item.score:g} / {item.max_score:g}"
        mark = "PASS" if item.passed else "FAIL"
    else:
        points = f"{item.score:+g}" if item.score else "0"
        mark = "PASS" if item.passed else ("INFO" if item.score == 0
                                           else "FAIL")
    if not item.checked:
        mark = "----"
    lines = [f"  [{mark}] {item.id:<14} {points:>7}  {item.title}"]
    if item.message and not (item.passed and item.message == "ok"):
        lines.append(_wrap(clean(item.message), "      ", "      "))
    for mistake in item.diagnosis:
        text = diagnoses.get(mistake, "")
        lines.append(_wrap(f"diagnosis {mistake}: {text}", "      ",
                           "        "))
    if item.details:
        lines += ["      " + line for line in clean(item.details).split("\n")]
    return lines
