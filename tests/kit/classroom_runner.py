"""An offline GitHub Actions runner for the Classroom workflow (tests).

It runs a parsed ``classroom.yml`` job step by step in a student
repository, as the hosted runner and the two Classroom actions do:

* ``run:`` steps: ``bash --noprofile --norc -eo pipefail`` with the
  runner's environment (``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY``,
  ``GITHUB_ACTIONS=true``, ``RUNNER_TRACKING_ID``...), stopped at the
  step's ``timeout-minutes``;
* ``autograding-command-grader``: ``/bin/sh -c COMMAND`` with the action's
  stripped environment (``PATH``, ``HOME``, ``FORCE_COLOR``, ``DOTNET_*``)
  and, past ``timeout`` minutes, SIGTERM to that shell only, then waiting
  for it (node's ``execSync``); its result is the action's base64 JSON
  (``pass``, ``fail`` "failed with exit code 1", ``error`` "Command timed
  out");
* ``autograding-grading-reporter``: the ``runners`` check, the table
  (``passed / tests * max_score`` per runner), the points sent to
  Classroom (the tests' ``score`` over runners with a ``max_score``) and
  the verdict ("Some tests failed." when a runner's status is ``fail``,
  "Some tests errored." for ``error``).

With ``actions_dir`` (a folder holding the two actions' repositories, as
``autograding-command-grader/dist/main.js`` and
``autograding-grading-reporter/dist/main.js``, e.g. from the environment
variable ``CLASSROOM_ACTIONS_DIR``) those two steps run the real actions
under ``node`` instead, with ``INPUT_*`` variables and a ``GITHUB_OUTPUT``
file, and their output is parsed. Other ``uses:`` steps (checkout,
setup-python, upload-artifact) are recorded as done: the repository is
already there and the test's Python is the job's. A ``skip`` predicate
names the steps to leave out (the network install).

After every step it lists the processes the step left running (by the
workspace in their working folder or command line, by the runner's
tracking id in their environment, and by the ids a test submission writes
to ``hanging_pids.txt``).
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

COMMAND_GRADER = "classroom-resources/autograding-command-grader"
REPORTER = "classroom-resources/autograding-grading-reporter"
ACTIONS_ENV = "CLASSROOM_ACTIONS_DIR"
PID_FILE = "hanging_pids.txt"
# The reporter's own check of its runners input.
RUNNERS_PATTERN = re.compile(r"^([a-zA-Z0-9]+,)*[a-zA-Z0-9]+$")
RUNNERS_ERROR = "The runners input must be a comma-separated list of strings."
NO_RESULT = ("The first argument must be of type string or an instance of "
             "Buffer, ArrayBuffer, or Array or an Array-like Object. "
             "Received undefined")
_EXPRESSION = re.compile(r"\$\{\{\s*steps\.([A-Za-z0-9_-]+)\.outputs\."
                         r"([A-Za-z0-9_-]+)\s*\}\}")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class StepRun:
    """One step as the runner ran it."""

    name: str
    id: str | None
    outcome: str                      # success, failure or skipped
    outputs: dict[str, str] = field(default_factory=dict)
    log: str = ""
    seconds: float = 0.0
    leftovers: list[str] = field(default_factory=list)
    summary: str = ""

    def result(self) -> dict:
        """The decoded ``result`` output of a command-grader step."""
        return json.loads(base64.b64decode(self.outputs["result"]))


@dataclass
class ReporterRun:
    """What the reporter printed and decided."""

    rows: list[tuple[str, float, float]]      # runner, score, max score
    tests: list[tuple[str, str, str]]         # runner, status, text
    # (the text is the test's name, or for an error its message)
    points: tuple[float, float] | None        # sent to Classroom
    failed: str | None                        # its setFailed message
    log: str

    @property
    def green(self) -> bool:
        """Whether the run ends green."""
        return self.failed is None

    @property
    def table_total(self) -> float:
        """The table's total row."""
        return sum(score for _, score, _ in self.rows)


@dataclass
class JobRun:
    """Every step, and the reporter's verdict."""

    steps: list[StepRun]
    reporter: ReporterRun | None

    def step(self, key: str) -> StepRun:
        """The step with this id or name."""
        return next(s for s in self.steps if key in (s.id, s.name))

    @property
    def leftovers(self) -> list[str]:
        """Every process a step left running."""
        return [p for s in self.steps for p in s.leftovers]


def reporter_verdict(runners_input: str, env: dict[str, str]
                     ) -> ReporterRun:
    """The reporter's computation (its ``src/``), re-done in Python."""
    lines: list[str] = []
    try:
        runs = []
        for runner in runners_input.split(","):
            encoded = env.get(f"{runner.strip().upper()}_RESULTS")
            if encoded is None:             # node's Buffer.from(undefined)
                raise TypeError(NO_RESULT)
            text = base64.b64decode(encoded + "=" * (-len(encoded) % 4))
            if not text.strip():            # node's JSON.parse("")
                raise ValueError("Unexpected end of JSON input")
            runs.append((runner, json.loads(text.decode("utf-8"))))
    except (TypeError, ValueError) as exc:
        message = (str(exc) if RUNNERS_PATTERN.match(runners_input)
                   else RUNNERS_ERROR)
        return ReporterRun([], [], None, message, message)
    rows, tests = [], []
    points = most = 0.0
    for runner, result in runs:
        maximum = result.get("max_score") or 0
        passed = sum(t["status"] == "pass" for t in result["tests"])
        rows.append((runner.strip(), passed / len(result["tests"])
                     * maximum, maximum))
        for test in result["tests"]:
            # An errored test is printed as its message, not its name.
            shown = test["name"] if test["status"] != "error" else (
                test.get("message")
                or f"Failed to run test '{test['name']}'")
            tests.append((runner, test["status"], shown))
            lines.append(f"{test['status']} {shown}")
        if result.get("max_score"):
            most += result["max_score"]
            points += sum(t["score"] for t in result["tests"])
    failed = ("Some tests failed." if any(r["status"] == "fail"
                                          for _, r in runs)
              else "Some tests errored." if any(r["status"] == "error"
                                                for _, r in runs)
              else None)
    return ReporterRun(rows, tests, (points, most) if most else None,
                       failed, "\n".join(lines))


def parse_reporter_log(log: str, exit_code: int) -> ReporterRun:
    """The real reporter's stdout, read back into a :class:`ReporterRun`."""
    rows, tests, points, failed = [], [], None, None
    runner = ""
    for raw in log.splitlines():
        line = _ANSI.sub("", raw)
        if line.startswith("🔄 Processing: "):
            runner = line[len("🔄 Processing: "):]
        elif line.startswith("✅ "):
            tests.append((runner, "pass", line[2:]))
        elif line.startswith("❌ "):
            tests.append((runner, "fail", line[2:]))
        elif line.startswith("Error: "):
            tests.append((runner, "error", line[len("Error: "):]))
        elif line.startswith("│") and "Test Runner Name" not in line:
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0] != "Total:":
                rows.append((cells[0], float(cells[1]), float(cells[2])))
        elif line.startswith("::notice title=Autograding report::"):
            data = json.loads(line.split("::", 2)[2])
            points = (float(data["totalPoints"]), float(data["maxPoints"]))
        elif line.startswith("::error::"):
            failed = line[len("::error::"):]
    if exit_code and failed is None:
        failed = f"exit status {exit_code}"
    return ReporterRun(rows, tests, points, failed, log)


def _read_outputs(path: Path) -> dict[str, str]:
    """A ``GITHUB_OUTPUT`` file: ``name=value`` and heredoc entries."""
    outputs: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines() \
        if path.exists() else []
    index = 0
    while index < len(lines):
        line = lines[index]
        if "<<" in line and ("=" not in line
                             or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, index + 1)
            outputs[name] = "\n".join(lines[index + 1:end])
            index = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            outputs[name] = value
        index += 1
    return outputs


def _start_ticks() -> int:
    """Now, in the clock ticks /proc/PID/stat counts start times in."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return int(uptime * os.sysconf("SC_CLK_TCK"))


class ClassroomRunner:
    """Runs the Classroom job of a workflow in ``workspace``."""

    def __init__(self, workspace: Path, actions_dir: Path | None = None,
                 skip: Callable[[dict], bool] = lambda step: False) -> None:
        self.workspace = Path(workspace).resolve()
        self.actions_dir = actions_dir
        self.skip = skip
        self.tracking = f"github_{uuid.uuid4()}"
        self.temp = self.workspace.parent / f"runner-{uuid.uuid4().hex}"
        self.temp.mkdir()
        self.started = _start_ticks()
        self.outputs: dict[str, dict[str, str]] = {}

    # -- environment ----------------------------------------------------
    def _job_env(self) -> dict[str, str]:
        path = os.pathsep.join([str(Path(sys.executable).parent),
                                "/usr/local/bin", "/usr/bin", "/bin"])
        return {"PATH": path, "HOME": str(Path.home()), "LANG": "C.UTF-8",
                "CI": "true", "GITHUB_ACTIONS": "true",
                "GITHUB_WORKSPACE": str(self.workspace),
                "RUNNER_TEMP": str(self.temp), "RUNNER_OS": "Linux",
                "RUNNER_TRACKING_ID": self.tracking}

    def _files(self, index: int) -> dict[str, str]:
        files = {}
        for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_ENV",
                     "GITHUB_PATH"):
            path = self.temp / f"{index}_{name.lower()}"
            path.write_text("")
            files[name] = str(path)
        return files

    def _expand(self, value: object) -> str:
        text = str(value)

        def output(match: re.Match) -> str:
            return self.outputs.get(match.group(1), {}).get(match.group(2),
                                                            "")
        text = _EXPRESSION.sub(output, text)
        if "${{" in text:
            raise ValueError(f"unsupported expression in {text!r}")
        return text

    # -- processes --------------------------------------------------------
    def leftovers(self) -> list[str]:
        """Processes started during this job that are still running."""
        mine = {os.getpid()}
        pids_file = self.workspace / PID_FILE
        listed = set()
        if pids_file.exists():
            listed = {int(p) for p in pids_file.read_text().split()}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in mine:
                continue
            pid = int(entry.name)
            try:
                stat = (entry / "stat").read_text()
                fields = stat[stat.rfind(")") + 2:].split()
                if fields[0] in ("Z", "X") or \
                        int(fields[19]) < self.started:
                    continue
                command = (entry / "cmdline").read_bytes().replace(
                    b"\0", b" ").decode(errors="replace").strip()
                environ = (entry / "environ").read_bytes()
                cwd = os.readlink(entry / "cwd")
            except (OSError, IndexError, ValueError):
                continue
            if (pid in listed or self.tracking.encode() in environ
                    or cwd.startswith(str(self.workspace))
                    or str(self.workspace) in command):
                found.append(f"{pid} {command}")
        return found

    # -- steps --------------------------------------------------------
    def _log(self) -> Path:
        return self.temp / f"log-{uuid.uuid4().hex}"

    def _run_script(self, step: dict, env: dict[str, str],
                    timeout: float) -> tuple[str, str]:
        script = self.temp / f"step-{uuid.uuid4().hex}.sh"
        script.write_text(self._expand(step["run"]))
        log = self._log()
        with log.open("wb") as output:
            process = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail",
                 str(script)], cwd=self.workspace, env=env, stdout=output,
                stderr=subprocess.STDOUT, start_new_session=True)
            try:
                process.wait(timeout=timeout)
                outcome = "success" if process.returncode == 0 \
                    else "failure"
            except subprocess.TimeoutExpired:
                # The runner cancels a step past its timeout-minutes.
                os.killpg(process.pid, signal.SIGINT)
                time.sleep(1)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                outcome = "failure"
        return outcome, log.read_text(errors="replace")

    def _command_grader(self, inputs: dict[str, str]) -> tuple[str, str]:
        """The command grader's ``run()``, as its source does it."""
        env = {"PATH": self._job_env()["PATH"], "FORCE_COLOR": "true",
               "DOTNET_CLI_HOME": "/tmp", "DOTNET_NOLOGO": "true",
               "HOME": str(Path.home())}
        timeout = float(inputs.get("timeout") or 10) * 60
        max_score = int(float(inputs.get("max-score") or 0))
        command = inputs["command"]
        started = time.monotonic()
        log = self._log()
        with log.open("wb") as output:
            process = subprocess.Popen(["/bin/sh", "-c", command],
                                       cwd=self.workspace, env=env,
                                       stdout=output,
                                       stderr=subprocess.STDOUT)
            try:
                process.wait(timeout=timeout)
                status, message = (
                    ("pass", None) if process.returncode == 0
                    else ("fail", "failed with exit code 1"))
            except subprocess.TimeoutExpired:
                # execSync's timeout: SIGTERM to the shell only, then it
                # waits for the shell to exit.
                process.send_signal(signal.SIGTERM)
                process.wait()
                status, message = "error", "Command timed out"
        duration = int((time.monotonic() - started) * 1000)
        test = {"name": inputs["test-name"], "status": status,
                "score": max_score if status == "pass" else 0}
        if message is not None:
            test["message"] = message
        test.update(test_code=command, filename="", line_no=0,
                    duration=duration)
        result = {"version": 1, "status": status, "max_score": max_score,
                  "tests": [test]}
        encoded = base64.b64encode(json.dumps(
            result, separators=(",", ":")).encode()).decode()
        return encoded, log.read_text(errors="replace")

    def _node(self, action: str, inputs: dict[str, str],
              env: dict[str, str], timeout: float
              ) -> tuple[int, str, dict[str, str]]:
        main = self.actions_dir / action.split("/")[1] / "dist" / "main.js"
        env = dict(env)
        env.update({f"INPUT_{k.replace(' ', '_').upper()}": str(v)
                    for k, v in inputs.items()})
        log = self._log()
        with log.open("wb") as output:
            process = subprocess.Popen(
                [shutil.which("node") or "node", str(main)],
                cwd=self.workspace, env=env, stdout=output,
                stderr=subprocess.STDOUT)
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
        return (code, log.read_text(errors="replace"),
                _read_outputs(Path(env["GITHUB_OUTPUT"])))

    def run(self, workflow: dict) -> JobRun:
        """Run the workflow's single job."""
        (job,) = workflow["jobs"].values()
        steps: list[StepRun] = []
        reporter = None
        failed = False
        for index, step in enumerate(job["steps"]):
            name = step.get("name", step.get("uses", step.get("run", "")))
            record = StepRun(name, step.get("id"), "skipped")
            steps.append(record)
            condition = str(step.get("if", "success()"))
            condition = condition.replace("${{", "").replace("}}", "")
            condition = condition.strip()
            if condition not in ("success()", "always()", "!cancelled()",
                                 "failure()"):
                raise ValueError(f"unsupported if: {condition}")
            if (condition == "success()" and failed) or (
                    condition == "failure()" and not failed):
                continue
            if self.skip(step):
                record.outcome = "success"
                record.log = "(skipped by the test: offline)"
                continue
            env = self._job_env()
            env.update(self._files(index))
            env.update({k: self._expand(v)
                        for k, v in step.get("env", {}).items()})
            inputs = {k: self._expand(v)
                      for k, v in step.get("with", {}).items()}
            timeout = float(step.get("timeout-minutes", 360)) * 60
            uses = str(step.get("uses", "")).split("@")[0]
            started = time.monotonic()
            if "run" in step:
                record.outcome, record.log = self._run_script(step, env,
                                                              timeout)
                record.outputs = _read_outputs(Path(env["GITHUB_OUTPUT"]))
            elif uses == COMMAND_GRADER and self.actions_dir:
                code, record.log, record.outputs = self._node(
                    uses, inputs, env, timeout)
                record.outcome = "success" if code == 0 else "failure"
            elif uses == COMMAND_GRADER:
                encoded, record.log = self._command_grader(inputs)
                record.outputs = {"result": encoded}
                record.outcome = "success"
            elif uses == REPORTER and self.actions_dir:
                inputs.setdefault("token", "offline")
                code, log, _ = self._node(uses, inputs, env, timeout)
                reporter = parse_reporter_log(log, code)
                record.log = log
                record.outcome = "success" if code == 0 else "failure"
            elif uses == REPORTER:
                reporter = reporter_verdict(inputs["runners"], env)
                record.log = reporter.log
                record.outcome = "failure" if reporter.failed else "success"
            else:
                record.outcome = "success"
                record.log = f"(not run offline: {uses})"
            record.seconds = time.monotonic() - started
            summary = Path(env["GITHUB_STEP_SUMMARY"])
            record.summary = summary.read_text() if summary.exists() else ""
            if record.id:
                self.outputs[record.id] = record.outputs
            record.leftovers = self.leftovers()
            if record.outcome == "failure" and not step.get(
                    "continue-on-error"):
                failed = True
        return JobRun(steps, reporter)


def actions_dir() -> Path | None:
    """The folder of the real actions, from ``$CLASSROOM_ACTIONS_DIR``,
    when both ``dist/main.js`` and ``node`` are there."""
    folder = os.environ.get(ACTIONS_ENV)
    if not folder or not shutil.which("node"):
        return None
    folder = Path(folder)
    needed = [folder / name.split("/")[1] / "dist" / "main.js"
              for name in (COMMAND_GRADER, REPORTER)]
    return folder if all(p.is_file() for p in needed) else None
