"""The shapes item fails closed when the process stopped before the shape
checks ran (issue 24, principle 2): traces that were never taken are not
"no problem found". Synthetic runs, read by the grader's own scoring."""
from __future__ import annotations

import torch

from grader.judge.scoring import _trace_runs
from grader.plan import Case, ProbeInfo
from grader.rubric import get_assignment
from grader.run.observe import ProbeResult, TaskRun

ASSIGNMENT = get_assignment("multi_head_attention")
TASK = next(t for t in ASSIGNMENT.tasks if t.id == "task2")


def _run(stopped_from: int | None) -> TaskRun:
    """A task run that graded one case, then traced every size set; the
    traces from ``stopped_from`` on were cut when the process stopped."""
    run = TaskRun(task="task2", source=None)
    case = Case(name="hidden-0", public=False, sizes={},
                x=torch.zeros(1), weights={})
    graded = ProbeInfo(id="probs:hidden-0", task="task2",
                       target="MultiHeadSelfAttention", case=case)
    run.results[graded.id] = ProbeResult(info=graded)
    for index, sizes in enumerate(ASSIGNMENT.size_sets):
        info = ProbeInfo(id=f"trace:{index}:causal=False", task="task2",
                         target="MultiHeadSelfAttention", sizes=dict(sizes),
                         trace="forward")
        if stopped_from is not None and index >= stopped_from:
            run.results[info.id] = ProbeResult(
                info=info, problem="it never ran", stopped="it did not "
                "finish within 20 seconds and was stopped")
        else:
            run.results[info.id] = ProbeResult(
                info=info, trace={"records": {}, "intact": True})
    return run


def test_traces_cut_by_a_stopped_process_are_a_problem() -> None:
    runs, problems = _trace_runs(_run(stopped_from=1), ASSIGNMENT, TASK)
    assert len(runs) == len(ASSIGNMENT.size_sets)
    assert problems == [
        "the shape checks under size set(s) "
        + ", ".join(str(i + 1) for i in range(1, len(ASSIGNMENT.size_sets)))
        + " did not run to the end (it did not finish within 20 seconds "
        "and was stopped), so the comments could not be verified at those "
        "sizes"]


def test_every_trace_taken_is_no_problem() -> None:
    assert _trace_runs(_run(stopped_from=None), ASSIGNMENT, TASK)[1] == []


def test_a_run_where_nothing_ended_is_judged_as_written() -> None:
    """When no graded call of the task ran to the end (the code hangs
    from its first call), the correctness items earned nothing; the
    comments are judged statically, as before."""
    run = _run(stopped_from=0)
    graded = run.results["probs:hidden-0"]
    run.results["probs:hidden-0"] = ProbeResult(
        info=graded.info, problem="it never ran", stopped="stopped")
    assert _trace_runs(run, ASSIGNMENT, TASK)[1] == []
