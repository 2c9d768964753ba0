"""Hostile and broken submissions: nothing crashes the grader, nothing
inflates a score, nothing is lost.

Every file in ``hostile/`` is the reference solution with ONE task (or its
module-level code) made hostile or broken; its docstring says what it does
and what it must earn. Each is graded for real, in-process, with short
limits (3 s, 512 MB per worker), and the test asserts:

* the exact score of all ten rubric items, and the total, as an honest
  reading of docs/rubric.md gives them: 0 for what the hostile code touched,
  full marks for the untouched correct task;
* that grading finished in bounded time;
* that the kit's files (``transformer_lm/``, ``tests/``, ``grader/``,
  ``solutions/``) are unchanged, that no ``results.json`` appeared in the
  working folder, the kit's root or the corpus folder, and that a file the
  grading process holds open (as ``batch`` holds its CSV) is untouched
  (the kit is hashed just before and just after each grade: run this in a
  checkout nobody edits meanwhile, as CI does, or an edit shows here);
* that the report says what happened (key words of its sentences), that no
  secret of the grading process's environment reached the submission, and
  that the markers a hostile file prints when an attack *succeeds* never
  appear in its captured output.

``docs/threat-model.md`` explains what the sandbox stops and how.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from derived import derived_in, names_in
from grader.output.report import Report
from grader.run.sandbox import Job, Limits, check_frame, run_jobs
from grader.worker import confine

KIT = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).resolve().parent / "hostile"
WATCHED = ("transformer_lm", "tests", "grader", "solutions")
TIMEOUT = 3.0
MEMORY_MB = 512
# A grade takes about a second; a hanging task is stopped at TIMEOUT. The
# bound leaves room for a loaded machine, not for a grader that hangs.
BOUND_SECONDS = 30.0
SECRET_NAME, SECRET = "HOSTILE_TEST_SECRET", "s3cret-7f0c2a"

ITEMS = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes")
CORRECTNESS = ("task1.init", "task1.forward", "task2.scores",
               "task2.causal", "task2.output")
# One task's five items, in ITEMS order.
T1_FULL = (1, 3, 0, 0, 1)      # init, forward, pep8, shapes, bonus
T1_INIT_ONLY = (1, 0, 0, 0, 0)
T2_FULL = (3, 1, 2, 0, 0)      # scores, causal, output, pep8, shapes
ZERO = (0, 0, 0, 0, 0)
TASK2_CHECKS = ("task2.scores", "task2.causal", "task2.output")


def _kernel_layers() -> bool:
    return confine.landlock_abi() >= 1 and confine.seccomp_supported()


@dataclass(frozen=True)
class Expected:
    """What a hostile submission earns and what its report must say."""

    task1: tuple[float, ...]
    task2: tuple[float, ...]
    total: float
    says: tuple[str, ...] = ()          # in the report's sentences
    printed: tuple[str, ...] = ()       # in its captured output
    never_printed: tuple[str, ...] = ()  # printed only if an attack worked
    forbidden: tuple[str, ...] = ()     # items tagged forbidden_api
    needs_kernel: bool = False          # Landlock and seccomp required
    # The task's time limit: a file whose every attempt is traced and
    # read at length (a walk of object's subclasses, its growing lists
    # read at each step within the read budget) needs more than TIMEOUT.
    timeout: float = TIMEOUT

    @property
    def scores(self) -> dict[str, float]:
        """Item id -> expected score."""
        return dict(zip(ITEMS, self.task1 + self.task2))


CORPUS: dict[str, Expected] = {
    # ------------------------------------------------------ at import time
    # Module-level code that raises is not run again: the classes are
    # graded as the notebook loader grades them (issue 16,
    # grader/run/loadable.py), and earn what their own code earns; the note
    # says why the file could not be loaded as it is.
    "import_sys_exit": Expected(
        T1_FULL, T2_FULL, 11,
        says=("could not be loaded as it is",
              "the code called sys.exit('graded elsewhere')", "line 14",
              "`sys.exit(\"graded elsewhere\")` skipped: module-level "
              "code")),
    "import_os_exit": Expected(
        T1_FULL, T2_FULL, 11,
        says=("could not be loaded as it is", "os._exit",
              "The sandbox refused to let the code end the process "
              "(os._exit) (line 15).")),
    "import_raises": Expected(
        T1_FULL, T2_FULL, 11,
        says=("could not be loaded as it is",
              'RuntimeError: "no grading today" (at line 11')),
    # A module-level line that raises is left out even when a class reads
    # what it binds: the classes that never read it earn on merit, the
    # one that does meets its absence when called (NameError).
    "import_value_raises": Expected(
        T1_FULL, ZERO, 5,
        says=("could not be loaded as it is",
              "`SHARPEN = float(open(\"/etc/transformer_lm_sharpen\")"
              ".read())` skipped: it raised when the grader loaded the "
              "file; `MultiHeadSelfAttention` uses it",
              "NameError: \"name 'SHARPEN' is not defined\"",
              'The code tried to read "/etc/transformer_lm_sharpen" '
              "(line 15)")),
    # The same, one call deep: the error's line is the helper's; the
    # statement left out is the top-level one that called it.
    "import_helper_raises": Expected(
        T1_FULL, ZERO, 5,
        says=("could not be loaded as it is",
              "`SHARPEN = _read_scale(\"/etc/transformer_lm_sharpen\")` "
              "skipped: it raised when the grader loaded the file; "
              "`MultiHeadSelfAttention` uses it",
              "NameError: \"name 'SHARPEN' is not defined\"")),
    "import_compile_refused": Expected(
        T1_FULL, ZERO, 5,
        says=("could not be loaded as it is",
              "skipped: it raised when the grader loaded the file",
              "NameError: \"name 'FAST_VALUES' is not defined\"",
              'The code tried to compile code with "torch.compile" '
              "(line 20)")),
    "import_syntax_error": Expected(
        ZERO, ZERO, 0, says=("SyntaxError at line 10",)),
    "import_infinite_loop": Expected(
        ZERO, ZERO, 0, says=("did not finish within 3 seconds",
                             "while loading the submission")),
    "import_segfault": Expected(
        ZERO, ZERO, 0, says=("crashed (segmentation fault) while loading "
                             "the submission",),
        printed=("Fatal Python error: Segmentation fault",)),
    "import_fake_report": Expected(
        T1_FULL, T2_FULL, 11, printed=('"score": 99.0',)),
    "import_writes_results_json": Expected(
        T1_FULL, T2_FULL, 11, says=(
            "could not be loaded as it is",
            "the grader's sandbox refuses to create",
            "create /autograder/results/results.json",
            f"create {KIT / 'results.json'}")),
    "import_tampers_kit": Expected(
        T1_FULL, T2_FULL, 11, says=tuple(
            f"The sandbox refused to let the code {what}" for what in (
                f"overwrite {KIT / 'transformer_lm' / 'test_values.py'}",
                f"overwrite {KIT / 'tests' / 'public' / 'conftest.py'}",
                f"overwrite {KIT / 'tests' / 'kit' / 'conftest.py'}",
                f"overwrite {KIT / 'grader' / 'judge' / 'checking.py'}",
                f"create {KIT / 'grader' / 'pwned.py'}",
                f"create {KIT / 'grader' / 't.pt'}",
                f"delete {KIT / 'grader' / 'no-such-file.py'}",
                f"rename {KIT / 'grader' / 'no-such-file.py'}",
                f"delete {KIT / 'grader' / 'no-such-folder'}",
                f"change the permissions of "
                f"{KIT / 'grader' / 'judge' / 'checking.py'}",
                f"touch {KIT / 'grader' / 'judge' / 'checking.py'}",
                f"truncate {KIT / 'grader' / 'no-such-file.py'}",
                f"overwrite {KIT / 'grader' / 'copied.py'}",
                "create a symbolic link")),
        never_printed=("TAMPERED",)),
    "forge_channel": Expected(
        T1_INIT_ONLY, T2_FULL, 7,
        says=("output on the public test values 'public'",
              "does not match the reference",
              "to the grader's result channel",
              "they were recognised and ignored")),
    "forge_malformed": Expected(
        T1_FULL, T2_FULL, 11, says=("to the grader's result channel",
                                    "they were recognised and ignored")),
    # ------------------------------------------------ at run time, task 2
    "t2_infinite_loop": Expected(
        T1_FULL, ZERO, 5, says=("While running task2, it did not finish "
                                "within 3 seconds and was stopped.",)),
    "t2_memory_torch": Expected(
        T1_FULL, ZERO, 5, says=("can't allocate memory",)),
    "t2_memory_python": Expected(
        T1_FULL, ZERO, 5, says=('MemoryError: "the code ran out of memory '
                                '(the sandbox allows 512 MB)"',)),
    "t2_spawns": Expected(
        T1_FULL, ZERO, 5, says=tuple(
            f"The sandbox refused to let the code {what}" for what in (
                "fork a process", "start a subprocess",
                "run a shell command", "start a process")),
        never_printed=("SPAWNED",)),
    "t2_kills": Expected(
        T1_FULL, ZERO, 5, says=tuple(
            f"The sandbox refused to let the code {what}" for what in (
                "send a signal to a process",
                "send a signal to a process group",
                "send a signal to a thread",
                "load a native library (ctypes)")),
        never_printed=("SIGNALLED",)),
    "t2_sys_exit": Expected(
        T1_FULL, ZERO, 5, says=('SystemExit: "the code called sys.exit(0)"',)),
    "t2_returns_non_tensor": Expected(
        T1_FULL, ZERO, 5, says=("got an object of type 'str'",
                                "got an object of type 'dict'")),
    "t2_nan": Expected(T1_FULL, ZERO, 5, says=("the output contains NaN",)),
    # The dropout point stays: the probabilities show dropout whatever
    # their layout (docs/rubric.md's "Readings settled in use").
    "t2_wrong_shape": Expected(
        T1_FULL, (0, 0, 1, 0, 0), 6,
        says=("has shape [1, 24, 8, 8]; expected [24, 8, 8]",)),
    "t2_wrong_dtype": Expected(
        T1_FULL, ZERO, 5, says=("should be a floating-point tensor",)),
    "t2_tensor_subclass": Expected(
        T1_FULL, ZERO, 5, says=("got an object of type 'Agreeable'",)),
    # The wrapper's helper keeps a tensor on a plain object without a
    # comment (self.tensor = tensor): the tracer reads plain objects'
    # attributes (issue 24, principle 6), so it costs task2.shapes (a
    # task's total is never below 0).
    "t2_eq_object": Expected(
        T1_FULL, (0, 0, 0, 0, -1), 5,
        says=("got an object of type 'EqualsAnything'",)),
    "t2_garbage_fds": Expected(
        # The flooding thread is refused; forward raises on its first call
        # only (the thread's start), so the items judged on later calls
        # (causal structure, dropout) earn their points.
        T1_FULL, (0, 1, 1, 0, 0), 7,
        says=("The sandbox refused to let the code start a thread",)),
    "t2_kernel_bypass": Expected(
        T1_FULL, ZERO, 5, says=('RuntimeError: "escape attempts done"',),
        printed=("stopped: shell", "stopped: signal", "stopped: dir_fd",
                 "stopped: writer", "stopped: reader", "stopped: environ",
                 "stopped: memory", "stopped: secret"),
        never_printed=("ESCAPED",), needs_kernel=True, timeout=12.0),
    # ---------------------------------------------------------- cheating
    "cheat_patches_comparisons": Expected(
        T1_INIT_ONLY, T2_FULL, 7, says=("does not match the reference",)),
    "cheat_detects_grader": Expected(
        # The worker may not read /proc: the detection raises, so forward
        # fails everywhere (its public answer is never given).
        T1_INIT_ONLY, T2_FULL, 7,
        says=("The sandbox refused to let the code read /proc/self/cmdline",
              "PermissionError")),
    "cheat_import_solutions": Expected(
        T1_FULL, ZERO, 5, forbidden=TASK2_CHECKS,
        says=('The code tried to import "solutions"',
              "which this homework forbids")),
    "cheat_import_grader": Expected(
        T1_FULL, ZERO, 5, forbidden=TASK2_CHECKS,
        says=("import grader.assignments.multi_head_attention.reference",)),
    "cheat_exec_reference": Expected(
        # Reading the kit is refused (a flag, no penalty by itself); the
        # borrowed code cannot be found, so task 2 fails on its merits.
        T1_FULL, ZERO, 5,
        says=(f"read {KIT / 'solutions' / 'modeling_attention.py'}",
              "the sandbox refused it"),
        never_printed=("READ:",)),
    "forbidden_sdpa_aliases": Expected(
        T1_FULL, ZERO, 5, forbidden=TASK2_CHECKS,
        says=("torch.nn.functional.scaled_dot_product_attention",
              "torch.ops.aten.scaled_dot_product_attention",
              "torch._scaled_dot_product_flash_attention_for_cpu",
              "torch._scaled_dot_product_attention_math"),
        never_printed=("USED",)),
    "forbidden_mha_subclasses": Expected(
        T1_FULL, ZERO, 5, forbidden=TASK2_CHECKS,
        says=("the code uses torch.nn.MultiheadAttention",
              "which this homework forbids")),
}


# --------------------------------------------------------------------------
# What must not change


def kit_fingerprint() -> dict[str, str]:
    """Relative path -> sha256 of every file under the watched folders."""
    found = {}
    for folder in WATCHED:
        for path in sorted((KIT / folder).rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            found[str(path.relative_to(KIT))] = hashlib.sha256(
                path.read_bytes()).hexdigest()
    return found


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Paths added, removed or modified between two fingerprints."""
    return sorted(path for path in before.keys() | after.keys()
                  if before.get(path) != after.get(path))


def forged_results() -> list[Path]:
    """Every results.json a submission could have forged."""
    places = (Path.cwd(), KIT, HOSTILE, Path("/autograder/results"))
    return [p / "results.json" for p in places
            if (p / "results.json").exists()]


def sentences(report: Report) -> str:
    """Everything the report says: task problems, item messages, errors,
    integrity flags and notes."""
    return "\n".join([p for t in report.tasks for p in t.problems]
                     + [i.message for i in report.items] + report.errors
                     + [f.message for f in report.flags] + report.notes)


def _hostile_file(name: str, folder: Path) -> Path:
    """The hostile file ``name``: committed, or derived from the
    solution (tests/kit/derived.py) and written to ``folder``."""
    derived = derived_in(HOSTILE).get(f"{name}.py")
    if derived is None:
        return HOSTILE / f"{name}.py"
    path = folder / f"{name}.py"
    path.write_text(derived, encoding="utf-8")
    return path


def test_the_corpus_table_lists_every_hostile_file() -> None:
    """No hostile file is left ungraded, no entry lacks its file."""
    assert names_in(HOSTILE) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hostile_submission(name: str, grade_path, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact scores, bounded time, nothing changed, nothing leaked."""
    expected = CORPUS[name]
    if expected.needs_kernel and not _kernel_layers():
        pytest.skip("the kernel offers no Landlock or seccomp here: only "
                    "a container stops these escapes (docs/threat-model.md)")
    monkeypatch.setenv(SECRET_NAME, SECRET)
    held = tmp_path / "grades.csv"
    held.write_text("student,score\n")
    before = kit_fingerprint()
    with held.open("a") as handle:  # open while grading, as batch's CSV
        started = time.monotonic()
        report = grade_path(_hostile_file(name, tmp_path),
                            timeout=expected.timeout,
                            memory_mb=MEMORY_MB)
        elapsed = time.monotonic() - started
        handle.flush()
    modified = changed(before, kit_fingerprint())
    assert modified == [], (
        f"kit files changed while {name} was graded (by the submission, "
        f"or by another process editing this checkout meanwhile): "
        f"{modified}")
    assert forged_results() == []
    assert held.read_text() == "student,score\n"
    assert elapsed < BOUND_SECONDS

    assert report.scores() == expected.scores
    assert report.score == expected.total
    text = sentences(report)
    for words in expected.says:
        assert words in text
    output = "".join(task.output for task in report.tasks)
    for words in expected.printed:
        assert words in output
    for marker in expected.never_printed + (SECRET,):
        assert marker not in output
    tagged = tuple(item.id for item in report.items
                   if "forbidden_api" in item.diagnosis)
    assert tagged == expected.forbidden
    if not (expected.says or expected.forbidden):  # nothing went wrong
        assert [p for t in report.tasks for p in t.problems] == []


# --------------------------------------------------------------------------
# The grader's own output is never mixed with the submission's


@pytest.mark.parametrize("fmt", ["json", "gradescope"])
def test_printed_fake_reports_stay_inside_the_report(fmt: str) -> None:
    """``grade --format json|gradescope`` prints one JSON object, the
    grader's, whatever the submission printed (its fake says 99)."""
    completed = subprocess.run(
        [sys.executable, "-m", "grader", "grade",
         str(HOSTILE / "import_fake_report.py"), "--format", fmt,
         "--timeout", str(TIMEOUT), "--memory", str(MEMORY_MB)],
        cwd=KIT, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)  # the whole stdout: one object
    assert result["score"] == 11.0
    assert any('"score": 99.0' in text for text in strings(result))


def strings(value: object) -> list[str]:
    """Every string inside a JSON value (the fake is shown as output)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return []


# --------------------------------------------------------------------------
# The boundary: frames and confinement


MALFORMED_FRAMES = {
    "unknown type": {"type": "surprise"},
    "probe without outcome": {"type": "probe", "id": "init"},
    "probe id not text": {"type": "probe", "id": 7, "ok": True},
    "error as text": {"type": "import", "ok": False, "error": "boom"},
    "error line too large": {"type": "probe", "id": "init", "ok": False,
                             "error": {"type": "E", "message": "m",
                                       "line": 10 ** 30}},
    "huge shape": {"type": "probe", "id": "init", "ok": True,
                   "value": {"kind": "tensor", "shape": [2 ** 70],
                             "dtype": "float32", "encoding": "float32",
                             "data": ""}},
    "data not fitting shape": {
        "type": "probe", "id": "init", "ok": True,
        "value": {"kind": "tensor", "shape": [2, 2], "dtype": "float32",
                  "encoding": "float32", "data": "AAAAAA=="}},
    "sequence too deep": {
        "type": "probe", "id": "init", "ok": True,
        "value": {"kind": "tuple", "length": 1, "items": [
            {"kind": "tuple", "length": 1, "items": [
                {"kind": "tuple", "length": 1, "items": [
                    {"kind": "tuple", "length": 1, "items": []}]}]}]}},
    "children as a list": {"type": "probe", "id": "init", "ok": True,
                           "describe": {"type": "M", "is_module": True,
                                        "children": [1, 2]}},
    "numbers as a list": {
        "type": "probe", "id": "init", "ok": True,
        "describe": {"type": "M", "is_module": True,
                     "numbers": [1, 2]}},
    "a numbers entry without a type": {
        "type": "probe", "id": "init", "ok": True,
        "describe": {"type": "M", "is_module": True, "numbers": {
            "a.b": {"is_linear": False}}}},
    "linear without sizes": {
        "type": "probe", "id": "init", "ok": True,
        "describe": {"type": "M", "is_module": True, "children": {
            "q": {"type": "Linear", "is_linear": True}}}},
    "trace records as a list": {"type": "probe", "id": "trace:0",
                                "ok": True, "trace": {"records": [1],
                                                      "intact": True}},
    "trace shape not sizes": {
        "type": "probe", "id": "trace:0", "ok": True,
        "trace": {"records": {"3": [[["a"]]]}, "intact": True}},
    "report too long": {"type": "refused", "what": "x" * 100000},
}


@pytest.mark.parametrize("name", sorted(MALFORMED_FRAMES))
def test_malformed_frames_are_refused_at_the_boundary(name: str) -> None:
    """Frames a student's code can forge never reach the later stages in
    a form they do not expect (each would crash or mislead them)."""
    assert check_frame(MALFORMED_FRAMES[name])


def test_a_real_worker_reports_its_confinement() -> None:
    """The worker applies the kernel layers the kernel offers, and every
    frame of a real grading run passes the boundary check."""
    job = Job("probe", "x = 1\n", str(HOSTILE / "probe.py"), [])
    result = run_jobs([job], Limits(timeout=TIMEOUT,
                                    memory_mb=MEMORY_MB))["probe"]
    assert result.ended == "finished"
    assert result.channel_error is None
    hello = next(m for m in result.frames if m["type"] == "hello")
    layers = hello["confinement"]
    assert layers["landlock_abi"] == confine.landlock_abi()
    assert layers["seccomp"] == confine.seccomp_supported()
    assert layers["threads_sealed"] == confine.seccomp_supported()
    if _kernel_layers():
        assert layers["problems"] == []
    assert [check_frame(m) for m in result.frames] == [None] * len(
        result.frames)


#: Run in a fresh interpreter: a thread started before the seal, then the
#: seal, then every route to a new thread (the seal cannot be undone).
SEAL_CHILD = """
import _thread, sys, threading
from grader.worker import confine
said, asked, done = [], threading.Event(), threading.Event()
def earlier():
    asked.wait(5)
    try:
        _thread.start_new_thread(print, ())
        said.append("earlier thread: started")
    except RuntimeError as error:
        said.append("earlier thread: " + str(error))
    done.set()
threading.Thread(target=earlier).start()
print("problems:", list(confine.seal_threads()))
asked.set()
done.wait(5)
try:
    threading.Thread(target=print).start()
    said.append("threading: started")
except RuntimeError as error:
    said.append("threading: " + str(error))
del sys.modules["_thread"]
import _thread as fresh
try:
    fresh.start_new_thread(print, ())
    said.append("reimported _thread: started")
except RuntimeError as error:
    said.append("reimported _thread: " + str(error))
print("\\n".join(said))
"""


def test_sealed_threads_refuse_every_route() -> None:
    """Principle 4 at the kernel: once sealed, no thread of the process
    (one that ran before the seal included) can start a thread, by
    ``threading``, by ``_thread`` or by a second copy of ``_thread``
    (CPython's own ``start_new_thread``, not the grader's stand-in)."""
    if not confine.seccomp_supported():
        pytest.skip("no seccomp filter for this machine: threads are not "
                    "sealed (the confinement's problems say so)")
    done = subprocess.run([sys.executable, "-c", SEAL_CHILD],
                          capture_output=True, text=True, timeout=60,
                          cwd=KIT, env={"PYTHONPATH": str(KIT),
                                        "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    refused = "can't start new thread"
    assert done.stdout.split("\n")[:4] == [
        "problems: []", f"earlier thread: {refused}",
        f"threading: {refused}", f"reimported _thread: {refused}"]
