"""pytest as the correctness engine.

Details: docs/internals.md, `grader.judge.checking`.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import torch

from grader.plan import Case
from grader.run.observe import TaskRun
from grader.run.proctree import fork_with_pipe

if TYPE_CHECKING:
    from grader.rubric import Assignment

RTOL = 1e-4
ATOL = 1e-5


@dataclass(frozen=True)
class Failure:
    """Probes that failed the same way: one sentence, many cases.

    ``key`` says what "the same way" is (the exception type and the line
    it was raised at, or the problem's words when nothing was raised); the
    sentence is ``before`` + the cases in words + ``after``. ``cases`` are
    (short name, full description) pairs.
    """

    key: str
    before: str
    after: str
    cases: tuple[tuple[str, str], ...]

    def sentence(self) -> str:
        """The failure said once, with the number of cases."""
        return f"{self.before}{cases_phrase(self.cases)}{self.after}"


def cases_phrase(cases: Iterable[tuple[str, str]]) -> str:
    """'hidden case 'a' (sizes)' or '3 cases (hidden case 'a' (sizes),
    'b', 'c')': how many, and which (the first one in full; the others by
    their :meth:`grader.plan.Case.brief`, already quoted)."""
    # One entry per case, the first in full: a case met in several states
    # (grader.plan.Case.state) is named once, with the first one's.
    first: dict[str, tuple[str, str]] = {}
    for name, full in cases:
        first.setdefault(name, (name, full))
    unique = list(first.values())
    if len(unique) == 1:
        return unique[0][1]
    names = [unique[0][1]] + [name for name, _ in unique[1:]]
    shown = ", ".join(names[:3])
    more = len(names) - 3
    if more > 0:
        shown += f" and {more} more"
    return f"{len(unique)} cases ({shown})"


class CheckFailed(AssertionError):
    """A check's verdict: a message for the student and diagnosis ids.

    ``failures`` are the probe failures the message reports (see
    :class:`Failure`), so that the engine can say a failure shared by
    several checks of an item once; ``note`` is what the message adds to
    them.
    """

    def __init__(self, message: str, diagnoses: tuple[str, ...] = (),
                 failures: tuple[Failure, ...] = (), note: str = ""):
        """Keep the message, the diagnosis ids and the failures."""
        super().__init__(message)
        self.message = message
        self.diagnoses = tuple(diagnoses)
        self.failures = tuple(failures)
        self.note = note

    def extended(self, diagnoses: list[str], words: str) -> CheckFailed:
        """The same verdict with more diagnosis ids and words."""
        words = f" {words}" if words else ""
        ids = tuple(dict.fromkeys(self.diagnoses + tuple(diagnoses)))
        return CheckFailed(self.message + words, ids, self.failures,
                           self.note + words)


def fail(message: str, *diagnoses: str) -> None:
    """Fail the current check with a message and known-mistake ids."""
    raise CheckFailed(message, diagnoses)


def fail_probes(failures: list[Failure], *diagnoses: str,
                note: str = "") -> None:
    """Fail with probe failures, each said once with its cases."""
    message = " ".join(f.sentence() for f in failures) + note
    raise CheckFailed(message, diagnoses, tuple(failures), note)


@contextlib.contextmanager
def explained(extra: Callable[[], tuple[list[str], str]]) -> Iterator[None]:
    """Add ``extra()``'s diagnosis ids and words to a failing check.

    For explanations that hold for every way the check can fail (e.g. the
    code only works on the public sizes); ``extra`` runs only on failure.
    """
    try:
        yield
    except CheckFailed as exc:
        ids, words = extra()
        if not ids and not words:
            raise
        raise exc.extended(ids, words) from None


def close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """The rubric's "match": allclose in float32, rtol 1e-4, atol 1e-5."""
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    return bool(torch.allclose(actual.float(), expected.float(),
                               rtol=RTOL, atol=ATOL))


def failure_of(run: TaskRun, probe_id: str, what: str) -> Failure | None:
    """How a probe failed to run, as a :class:`Failure` (None if it ran).

    Two probes fail "the same way" when they raised the same exception
    type at the same line (or, when nothing was raised, for the same
    reason).
    """
    result = run.result(probe_id)
    if result.ok:
        return None
    case = result.info.case
    where = ((case.brief(), case.describe()) if case
             else (probe_id, "the grader's inputs"))
    error = result.error if isinstance(result.error, dict) else None
    if error:
        line = error.get("line")
        key = f"{error.get('type')}@{line}" if isinstance(line, int) \
            else f"{error.get('type')}:{result.problem}"
        return Failure(key, f"{what} raised {result.problem}, on ", ".",
                       (where,))
    return Failure(str(result.problem), f"{what} on ",
                   f": {result.problem}.", (where,))


def require_ran(run: TaskRun, probe_ids: list[str], what: str,
                *diagnoses: str) -> None:
    """Fail, each way once with its cases, unless every probe ran."""
    if run.import_error:
        fail(f"Not graded: {run.import_error}")
    groups: dict[str, Failure] = {}
    for probe_id in probe_ids:
        found = failure_of(run, probe_id, what)
        if found is None:
            continue
        known = groups.get(found.key)
        groups[found.key] = found if known is None else Failure(
            known.key, known.before, known.after,
            known.cases + found.cases)
    if groups:
        fail_probes(list(groups.values()), *diagnoses)


def returned(run: TaskRun, probe_id: str, what: str) -> Any:
    """The value a probe returned, or fail with why there is none."""
    require_ran(run, [probe_id], what)
    return run.result(probe_id).value


def tensor_of(value: Any, what: str, shape: tuple[int, ...],
              meaning: str, case: Case | None = None) -> torch.Tensor:
    """Check that ``value`` is a float tensor of ``shape``; return it.

    ``meaning`` names the dimensions, e.g. ``"[batch_size * num_heads,
    seq_len, seq_len]"``; the failure message shows both shapes with it.
    """
    where = f" on {case.describe()}" if case else ""
    if value is None or value.kind != "tensor":
        got = value.describe() if value is not None else "nothing"
        fail(f"{what}{where} should be a tensor {list(shape)} = {meaning}; "
             f"got {got}.")
    if value.too_large:
        fail(f"{what}{where} returned {value.describe()}: expected "
             f"{list(shape)} = {meaning}.")
    if value.tensor is None or not value.dtype.startswith(
            ("float", "bfloat")):
        fail(f"{what}{where} should be a floating-point tensor; got a "
             f"{value.dtype} tensor.")
    if tuple(value.shape) != tuple(shape):
        fail(f"{what}{where} has shape {list(value.shape)}; expected "
             f"{list(shape)} = {meaning}.")
    return value.tensor


def share_bounds(p: float, n: int, delta: float = 1e-9,
                 at_least: tuple[float, float] | None = None
                 ) -> tuple[float, float]:
    """Where the share of zeros of a correct dropout falls, p +- t.

    Each of ``n`` values is dropped independently with probability ``p``,
    so by Hoeffding's inequality the share of zeros lies outside
    ``[p - t, p + t]`` with probability at most
    ``2 exp(-2 n t^2) = delta`` when ``t = sqrt(ln(2 / delta) / (2 n))``:
    a correct dropout fails this bound once in a billion gradings.
    ``at_least`` widens the bounds (a rubric's own range).
    """
    t = math.sqrt(math.log(2 / delta) / (2 * max(n, 1)))
    low, high = p - t, p + t
    if at_least is not None:
        low, high = min(low, at_least[0]), max(high, at_least[1])
    return max(low, 0.0), min(high, 1.0)


def share_outside(p: float, dropped: torch.Tensor,
                  at_least: tuple[float, float] | None = None
                  ) -> tuple[float, float, float] | None:
    """``(share, low, high)`` when the share of True entries of
    ``dropped`` (which values a dropout zeroed) falls outside
    :func:`share_bounds` for rate ``p``; None when it falls inside."""
    share = dropped.float().mean().item()
    low, high = share_bounds(p, dropped.numel(), at_least=at_least)
    return None if low <= share <= high else (share, low, high)


def max_error(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """The largest absolute difference, in words."""
    diff = (actual.float() - expected.float()).abs()
    if torch.isnan(diff).any():
        return "the output contains NaN"
    return f"the largest difference is {diff.max().item():.3g}"


# --------------------------------------------------------------------------
# The plugin


@dataclass
class CheckOutcome:
    """One check's result."""

    nodeid: str
    item: str
    part: str
    passed: bool
    message: str = ""
    diagnoses: list[str] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    note: str = ""


def item_messages(failing: list[CheckOutcome]) -> list[str]:
    """The failing checks' messages, each failure said once.

    Checks of one item that report the same probe failure (the same
    exception at the same line) give one sentence with every case it
    happened on, not one sentence per check.
    """
    merged: dict[str, Failure] = {}
    order: list[tuple[str, str]] = []   # ("failure", key) or ("text", ..)
    for outcome in failing:
        if not outcome.failures:
            if outcome.message:
                order.append(("text", outcome.message))
            continue
        for raw in outcome.failures:
            found = Failure(raw["key"], raw["before"], raw["after"],
                            tuple(tuple(case) for case in raw["cases"]))
            known = merged.get(found.key)
            if known is None:
                merged[found.key] = found
                order.append(("failure", found.key))
            else:
                merged[found.key] = Failure(known.key, known.before,
                                            known.after,
                                            known.cases + found.cases)
        if outcome.note:
            order.append(("text", outcome.note.strip()))
    texts = [merged[value].sentence() if kind == "failure" else value
             for kind, value in order]
    return list(dict.fromkeys(texts))


#: The fixtures :class:`ChecksPlugin` provides; no task id may take them.
_CONTEXT_FIXTURES = ("plan", "public_only", "assignment", "runs")


class ChecksPlugin:
    """Hands observations to the checks and records their outcomes."""

    def __init__(self, context: dict[str, Any]) -> None:
        """``context``: task id -> TaskRun, plus plan/assignment/flags."""
        self._context = context
        self.outcomes: list[CheckOutcome] = []
        self.errors: list[str] = []

    def pytest_configure(self, config: pytest.Config) -> None:
        """Register the ``item`` marker."""
        config.addinivalue_line(
            "markers", "item(id, part='main'): the rubric item (and part) "
                       "this check decides")

    @pytest.fixture
    def plan(self) -> Any:
        """The plan the observations answer."""
        return self._context["plan"]

    @pytest.fixture
    def public_only(self) -> bool:
        """True when grading on the public test values alone."""
        return bool(self._context["public_only"])

    @pytest.fixture
    def assignment(self) -> Any:
        """The :class:`~grader.rubric.Assignment` being graded."""
        return self._context["assignment"]

    @pytest.fixture
    def runs(self) -> dict[str, TaskRun]:
        """Observations of every task, by task id."""
        return self._context["runs"]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo):
        """Record each check's verdict against its item and part."""
        report = yield
        if report.when == "call" or (report.when == "setup"
                                     and report.failed):
            marker = item.get_closest_marker("item")
            if marker is None:
                self.errors.append(f"{item.nodeid} has no item marker")
                return report
            item_id = marker.args[0]
            part = marker.kwargs.get("part", "main")
            outcome = CheckOutcome(item.nodeid, item_id, part,
                                   passed=report.passed)
            if call.excinfo is not None:
                exc = call.excinfo.value
                if isinstance(exc, CheckFailed):
                    outcome.message = exc.message
                    outcome.diagnoses = list(exc.diagnoses)
                    outcome.failures = [asdict(f) for f in exc.failures]
                    outcome.note = exc.note
                elif isinstance(exc, AssertionError):
                    outcome.message = str(exc).split("\nassert ")[0]
                else:
                    outcome.message = (f"the grader's check {item.name} "
                                       f"failed: {type(exc).__name__}: "
                                       f"{exc}")
                    trace = "".join(traceback.format_exception(exc))
                    self.errors.append(f"{item.nodeid}: {trace}")
            self.outcomes.append(outcome)
        return report


def task_fixtures(task_ids: list[str], runs: dict[str, TaskRun]
                  ) -> ModuleType:
    """A pytest plug-in with one fixture per task id of the rubric, each
    returning that task's observations (from ``runs``): a check of the
    task ``task3`` asks for the fixture ``task3``."""
    fixtures = ModuleType("grader_task_fixtures")

    def fixture_of(task_id: str) -> Callable[[], TaskRun]:
        def observations() -> TaskRun:
            return runs[task_id]

        observations.__doc__ = f"Observations of {task_id}."
        return observations

    for task_id in task_ids:
        if not task_id.isidentifier() or task_id in _CONTEXT_FIXTURES:
            raise ValueError(f"task id {task_id!r} cannot name a fixture")
        setattr(fixtures, task_id,
                pytest.fixture(name=task_id)(fixture_of(task_id)))
    return fixtures


# pytest plugins the checks do not need. unraisableexception and
# threadexception run gc.collect() several times per session, which costs
# most of a second with torch's heap; a check's message comes from its
# exception, so no traceback needs formatting: --tb=no formats the
# exception's last line only (native reads every frame's source lines).
_UNUSED_PLUGINS = ("cacheprovider", "warnings", "logging",
                   "unraisableexception", "threadexception", "faulthandler",
                   "doctest", "junitxml", "pastebin", "stepwise",
                   "legacypath", "tmpdir", "monkeypatch", "recwarn")


def _pytest_args(checks_dir: Path) -> list[str]:
    args = []
    for name in _UNUSED_PLUGINS:
        args += ["-p", f"no:{name}"]
    return args + ["-q", "--tb=no", "--import-mode=importlib",
                   "-c", os.devnull, "--rootdir", str(checks_dir),
                   str(checks_dir)]


#: What pytest takes from the environment that would change the grader's
#: own sessions: options (``--junitxml``, ``-p``) and plug-ins to load.
_PYTEST_ENVIRONMENT = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")


@contextlib.contextmanager
def _own_pytest() -> Iterator[None]:
    """The grader's own pytest: no option or plug-in of the environment's
    (a CI job's ``PYTEST_ADDOPTS`` is meant for its tests, not for the
    checks a grading runs), no plug-in loaded by entry point; the
    environment is as it was afterwards."""
    names = (*_PYTEST_ENVIRONMENT, "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    saved = {name: os.environ.get(name) for name in names}
    for name in _PYTEST_ENVIRONMENT:
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _pytest_session(checks_dir: Path, context: dict[str, Any]
                    ) -> tuple[list[CheckOutcome], list[str]]:
    """One pytest session over the checks, in this process (the one
    prepared here by :func:`warm_up`, when it was)."""
    prepared = _PREPARED.get(checks_dir)
    if prepared is not None and prepared.unused():
        return prepared.run(context)
    plugin = ChecksPlugin(context)
    sink = io.StringIO()
    with _own_pytest(), contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        status = pytest.main(
            _pytest_args(checks_dir),
            plugins=[plugin, task_fixtures(
                [task.id for task in context["assignment"].tasks],
                context["runs"])])
    errors = list(plugin.errors)
    if int(status) not in (0, 1):
        errors.append(f"pytest ended with status {int(status)}: "
                      f"{sink.getvalue()[-2000:]}")
    return list(plugin.outcomes), errors


class _PreparedSession:
    """A pytest session over one assignment's checks, configured and
    collected once, in a batch's coordinator; each judge (a fork of it)
    fills in its submission's observations and runs the tests.

    The same arguments and plug-ins as a plain session, plus
    ``-p no:capture`` (a session left configured must not hold the
    coordinator's stdout and stderr: the checks' own output goes to a
    sink either way). The session's start and its collection are
    pytest's own hooks; only their order is taken apart from
    :func:`pytest.main`.
    """

    def __init__(self, checks_dir: Path, task_ids: list[str]) -> None:
        from _pytest.config import _prepareconfig
        from _pytest.main import Session

        self.context: dict[str, Any] = {"runs": {}}
        self.plugin = ChecksPlugin(self.context)
        self.sink = io.StringIO()
        with contextlib.redirect_stdout(self.sink), \
                contextlib.redirect_stderr(self.sink):
            self.config = _prepareconfig(
                _pytest_args(checks_dir)[:-1] + ["-p", "no:capture",
                                                 str(checks_dir)],
                plugins=[self.plugin,
                         task_fixtures(task_ids, self.context["runs"])])
            self.config._do_configure()
            self.session = Session.from_config(self.config)
            self.config.hook.pytest_sessionstart(session=self.session)
            self.config.hook.pytest_collection(session=self.session)
        if self.session.testsfailed or not self.session.items:
            raise RuntimeError("the checks were not collected: "
                               + self.sink.getvalue()[-2000:])
        self.ran_in: set[int] = set()

    def unused(self) -> bool:
        """True until this process ran it (each fork of the process that
        prepared it may run it once)."""
        return os.getpid() not in self.ran_in

    def run(self, context: dict[str, Any]
            ) -> tuple[list[CheckOutcome], list[str]]:
        """Run every check on ``context`` (once: a judge runs one)."""
        self.ran_in.add(os.getpid())
        runs = self.context["runs"]
        runs.clear()
        runs.update(context["runs"])
        self.context.update({k: v for k, v in context.items()
                             if k != "runs"})
        with contextlib.redirect_stdout(self.sink), \
                contextlib.redirect_stderr(self.sink):
            self.config.hook.pytest_runtestloop(session=self.session)
        return list(self.plugin.outcomes), list(self.plugin.errors)


# checks folder -> its prepared session (see warm_up)
_PREPARED: dict[Path, _PreparedSession] = {}


def warm_up(assignment: Assignment) -> None:
    """Prepare, once, a session over ``assignment``'s checks in this
    process (nothing runs): pytest configured, its plug-ins and the check
    modules, with their assertions rewritten, imported, the tests
    collected. A judge forked from this process runs them
    (:func:`run_checks` with ``fork=False``). One assignment's checks per
    process: two assignments' checks share module names. When pytest
    cannot be prepared so, only the imports are done (each judge then
    runs a whole session)."""
    checks_dir = assignment.checks_dir
    with _own_pytest():
        try:
            _PREPARED[checks_dir] = _PreparedSession(
                checks_dir, [task.id for task in assignment.tasks])
            return
        except Exception:  # pytest internals moved: plain sessions
            _PREPARED.pop(checks_dir, None)
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink):
            pytest.main(_pytest_args(checks_dir)[:-1] + [
                "--collect-only", str(checks_dir)],
                plugins=[ChecksPlugin({})])


def run_checks(checks_dir: Path, context: dict[str, Any],
               fork: bool = True) -> tuple[list[CheckOutcome], list[str]]:
    """Run every check in a forked child; return outcomes and errors.

    The child is a copy of this trusted process (no student code runs in
    it); forking keeps pytest's global state out of the caller.
    ``fork=False`` runs them in this process, for a caller that is itself
    a disposable copy (a batch's judge, which ends after one submission).
    """
    if not fork:
        # Through JSON as from a child, so that both ways give the same
        # records (lists, never tuples).
        try:
            outcomes, errors = _pytest_session(checks_dir, context)
        except Exception as exc:  # as a child that failed would say
            return [], [f"the checks process failed "
                        f"({type(exc).__name__}: {exc})"]
        data = json.loads(json.dumps([asdict(o) for o in outcomes]))
        return [CheckOutcome(**o) for o in data], errors

    def checks(write_fd: int) -> None:
        outcomes, errors = _pytest_session(checks_dir, context)
        payload = json.dumps({"outcomes": [asdict(o) for o in
                                           outcomes],
                              "errors": errors}).encode()
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view):]

    pid, read_fd = fork_with_pipe(checks, show_errors=True)
    chunks = []
    while chunk := os.read(read_fd, 1 << 16):
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return [], [f"the checks process failed (status {status})"]
    data = json.loads(b"".join(chunks))
    outcomes = [CheckOutcome(**o) for o in data["outcomes"]]
    return outcomes, data["errors"]
