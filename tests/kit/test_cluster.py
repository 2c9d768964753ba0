"""Issue 26, a class on a cluster (docs/cluster.md): merge and ``batch
--only`` change no cell of what one plain batch writes, whatever a row
holds; the shard arithmetic; the recipes the kit ships as files
(``cluster/``), quoted exactly by the docs; the Kubernetes manifests
validated offline; and the kit's own sbatch files run on a real
one-node Slurm cluster (skipped where Slurm is not installed)."""
from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from in_process import merge_command

ROOT = Path(__file__).resolve().parents[2]
SUBMISSIONS = ROOT / "tests" / "kit" / "submissions"
STUB = ROOT / "transformer_lm" / "modeling_attention.py"
# Distinctive, so that finding it in a file or a log means it leaked.
SEED = "5550123987"
SLURM = ROOT / "cluster" / "slurm"

# Every kind of value a row can hold: negative penalties (clamp_penalties:
# task1.pep8 = -1.0), the bonus, a syntax error (a graded row with
# errors), an untouched stub (notes), an entry that is no submission (an
# error row, empty items), and names with commas, quotes, non-ASCII,
# leading = + - @, and names that look like numbers.
HOSTILE_CLASS = {
    "=cmd.py": "correct_matmul.py",
    "+plus.py": "clamp_penalties.py",
    "-1.0.py": "clamp_penalties.py",
    "@at.py": "mistake_softmax_dim.py",
    "3.py": "broken_syntax_error.py",
    'o\'neil, "jr".py': "mistake_mask_diagonal.py",
    "zoë ünïcode.py": "clamp_penalties.py",
    "amy.py": "correct_matmul.py",
}


def grader(*args: str, env: dict | None = None,
           timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m grader ARGS`` from the kit's root."""
    return subprocess.run([sys.executable, "-m", "grader", *args],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def seeded() -> dict[str, str]:
    """This process's environment with the secret seed in it."""
    return {**os.environ, "GRADER_SEED": SEED}


def make_class(folder: Path) -> Path:
    """The hostile class (see HOSTILE_CLASS), plus a stub and a .zip."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in HOSTILE_CLASS.items():
        shutil.copy(SUBMISSIONS / source, folder / name)
    shutil.copy(STUB, folder / "fay.py")
    (folder / "gus.zip").write_bytes(b"PK\x03\x04")
    return folder


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> tuple[Path, Path]:
    """The hostile class and one plain batch of it."""
    base = tmp_path_factory.mktemp("plain")
    folder = make_class(base / "class")
    out = base / "out" / "grades.csv"
    result = grader("batch", str(folder), "--out", str(out), "--jobs", "2",
                    env=seeded())
    assert result.returncode == 1, result.stdout + result.stderr  # gus.zip
    return folder, out


def test_the_class_holds_every_kind_of_cell(plain):
    """The plain batch's CSV really has what the merge must keep: a
    negative number, the bonus, guarded names, an error row with empty
    items, a name with a comma and quotes, non-ASCII."""
    _, out = plain
    text = out.read_text(encoding="utf-8")
    assert ",-1.0," in text           # a penalty, a number
    assert "'=cmd,graded,11.0," in text  # guarded once; the bonus
    assert "'-1.0,graded," in text     # a name that looks like a number
    assert "'+plus," in text and "'@at," in text
    assert '"o\'neil, ""jr""",graded' in text
    assert "zoë ünïcode,graded" in text
    assert "\n3,graded," in text
    assert re.search(r"\ngus,error,0\.0,,,+", text)  # a broken .zip
    assert "''" not in text


def test_merge_and_only_change_no_cell(plain, tmp_path):
    """Two shards merged (three in the Slurm test), the merge of a merge
    and ``batch --only`` of one student equal one plain batch byte for
    byte; each CSV's summary is its own, beside it, never another's in
    the same folder."""
    folder, out = plain
    expected = out.read_text(encoding="utf-8")
    parts = [tmp_path / f"part-{i}.csv" for i in (1, 2)]
    for index, part in enumerate(parts, 1):
        result = grader("batch", str(folder), "--out", str(part),
                        "--shard", f"{index}/2", "--jobs", "2",
                        env=seeded())
        assert result.returncode in (0, 1), result.stderr
    merged = tmp_path / "grades.csv"
    # The merges by the command's main here (in_process.py); the Slurm
    # test below runs merge.sbatch, a process of its own.
    result = merge_command(str(merged), *map(str, parts))
    assert result.returncode == 0, result.stdout + result.stderr
    assert merged.read_text(encoding="utf-8") == expected
    # A merge of the merged CSV alone reads it back and writes it again.
    again = tmp_path / "again.csv"
    shutil.copytree(merged.with_name("grades.csv.reports"),
                    tmp_path / "copy.csv.reports")
    shutil.copy(merged, tmp_path / "copy.csv")
    result = merge_command(str(again), str(tmp_path / "copy.csv"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert again.read_text(encoding="utf-8") == expected
    summaries = sorted(p.name for p in tmp_path.glob("*summary*"))
    assert summaries == ["again.csv.summary.json", "again.csv.summary.png",
                         "grades.csv.summary.json", "grades.csv.summary.png"]
    # --only regrades one student and keeps every other row as it was.
    result = grader("batch", str(folder), "--out", str(merged), "--only",
                    "-1.0", "--jobs", "2", env=seeded())
    assert result.returncode == 0, result.stdout + result.stderr
    assert merged.read_text(encoding="utf-8") == expected


def test_the_reader_is_the_writers_inverse(tmp_path):
    """read_csv(write_csv(rows)) writes the same bytes, for every kind of
    cell, without grading anything."""
    from grader.routes.rows import read_csv, write_csv

    rows = [{"student": "-1.0", "status": "graded", "score": 3.0,
             "max_score": 10.0, "task1.pep8": -1.0, "task1.bonus": 1.0,
             "task1.count": 3, "errors": "=HYPERLINK(x)", "notes": "@a",
             "flags": "+b", "diagnoses": "'already quoted", "path": "p",
             "assignment": "a"},
            {"student": "3", "status": "error", "score": 0.0,
             "max_score": "", "errors": "a, \"quoted\"\tand\nlines",
             "path": "zoë, 'x'", "assignment": ""},
            {"student": "1.50", "status": "graded", "score": 1e-05,
             "max_score": 10, "task1.pep8": "-0", "task1.bonus": "nan",
             "task1.count": "1.50", "path": "q", "assignment": "a"}]
    first, second = tmp_path / "1.csv", tmp_path / "2.csv"
    write_csv(first, rows)
    back = read_csv(first)
    write_csv(second, back)
    assert second.read_bytes() == first.read_bytes()
    by_name = {row["student"]: row for row in back}
    assert set(by_name) == {"-1.0", "3", "1.50"}  # names stay text
    assert by_name["-1.0"]["task1.pep8"] == -1.0
    assert by_name["-1.0"]["task1.count"] == 3
    assert by_name["-1.0"]["errors"] == "=HYPERLINK(x)"
    assert by_name["1.50"]["task1.count"] == "1.50"
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    from grader.routes.rows import RowsError

    with pytest.raises(RowsError, match="not a batch's CSV"):
        read_csv(tmp_path / "bad.csv")


@pytest.mark.parametrize("count", [1, 2, 3, 7, 8, 16, 64])
def test_every_student_is_in_exactly_one_shard(count):
    """For many class sizes and N: every student in exactly one shard,
    shards of floor or ceil of size/N, the same cut every time."""
    from grader.routes.shards import shard_of

    class Entry:
        def __init__(self, key: str) -> None:
            self.key = key

    for size in (0, 1, 2, 5, 7, 8, 9, 63, 64, 65, 300, 1001):
        entries = [Entry(f"s{(i * 7919) % 100003:06d}") for i in
                   range(size)]
        cut = [shard_of(entries, i, count) for i in range(1, count + 1)]
        seen = [e.key for shard in cut for e in shard]
        assert sorted(seen) == sorted(e.key for e in entries)
        assert len(seen) == len(set(seen))
        sizes = {len(shard) for shard in cut}
        assert sizes <= {size // count, math.ceil(size / count)}
        assert max(sizes) - min(sizes) <= 1
        again = [shard_of(list(reversed(entries)), i, count)
                 for i in range(1, count + 1)]
        assert [[e.key for e in s] for s in again] == \
            [[e.key for e in s] for s in cut]
        # The docs' wall times count the largest shard as the bench does.
        assert bench().shard_wall(size, count, 0.0, 1.0) == \
            max(len(shard) for shard in cut)


def bench():
    """bench/bench.py, imported (its scale model)."""
    spec = importlib.util.spec_from_file_location(
        "kit_bench", ROOT / "bench" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------
# The recipes as files, and the docs that quote them

DOCS = ROOT / "docs" / "cluster.md"
K8S = ROOT / "cluster" / "k8s"
QUOTE = re.compile(r"<!-- quote: (\S+) -->\n```[a-z]*\n(.*?)```\n", re.S)


def test_the_docs_quote_the_recipe_files_exactly():
    """Every quote of a recipe in docs/cluster.md is the file, byte for
    byte; every recipe file is named there; no other code block holds a
    copy of one (a batch script, a manifest, a Dockerfile)."""
    text = DOCS.read_text(encoding="utf-8")
    quoted = QUOTE.findall(text)
    assert {path for path, _ in quoted} >= {
        "cluster/slurm/grade.sbatch", "cluster/k8s/grade-job.yaml",
        "cluster/Dockerfile"}
    for path, body in quoted:
        assert body == (ROOT / path).read_text(encoding="utf-8"), path
    files = [p.relative_to(ROOT).as_posix() for p in
             (ROOT / "cluster").rglob("*") if p.is_file()]
    assert len(files) >= 10
    for name in files + [".dockerignore"]:
        assert f"`{name}`" in text or f"`{Path(name).name}`" in text, name
    rest = QUOTE.sub("", text)
    for block in re.findall(r"```[a-z]*\n(.*?)```", rest, re.S):
        for copied in ("#SBATCH", "apiVersion:", "FROM ", "kind: Job"):
            assert copied not in block, block


def _manifests() -> list[tuple[str, dict]]:
    yaml = pytest.importorskip("yaml")
    return [(path.name, doc) for path in sorted(K8S.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))]


def test_the_kubernetes_manifests_validate_offline():
    """The Job, the merge Job, the volumes, the Secret and the
    NetworkPolicy validate (strict: no unknown field) against the
    Kubernetes 1.29 and 1.37 schemas that kubernetes-validate ships
    (offline); 1.27's rejects backoffLimitPerIndex, as the docs say; a
    planted mistake is caught; the names that tie them together agree."""
    validator = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is not installed "
        "(pip install -e .[dev])")
    manifests = _manifests()
    assert sorted(doc["kind"] for _, doc in manifests) == [
        "Job", "Job", "NetworkPolicy", "PersistentVolumeClaim",
        "PersistentVolumeClaim", "Secret"]
    for version in ("1.29.0", "1.37.0"):
        for name, doc in manifests:
            validator.validate(doc, version, strict=True)
    by_name = {doc["metadata"]["name"]: doc for _, doc in manifests}
    job = by_name["grade-hw3"]
    with pytest.raises(validator.ValidationError,
                       match="backoffLimitPerIndex"):
        validator.validate(job, "1.27.0", strict=True)
    planted = {**job, "spec": {**job["spec"], "completion": 8}}
    with pytest.raises(validator.ValidationError):
        validator.validate(planted, "1.37.0", strict=True)
    # What ties them together.
    spec = job["spec"]
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    shards = spec["completions"]
    assert spec["parallelism"] == shards and spec["completionMode"] == \
        "Indexed" and pod["restartPolicy"] == "Never"
    assert f"/{shards} " in container["args"][0]
    assert "--resume" in container["args"][0]
    claims = {v["persistentVolumeClaim"]["claimName"]
              for _, doc in manifests if doc["kind"] == "Job"
              for v in doc["spec"]["template"]["spec"]["volumes"]}
    volumes = {n for n, d in by_name.items()
               if d["kind"] == "PersistentVolumeClaim"}
    assert claims == volumes
    for claim in volumes:
        assert by_name[claim]["spec"]["accessModes"] == ["ReadWriteMany"]
    secret = container["env"][0]["valueFrom"]["secretKeyRef"]
    assert by_name[secret["name"]]["stringData"] == {
        secret["key"]: "${GRADER_SEED}"}  # filled from the shell only
    policy = by_name["grader-no-network"]["spec"]
    for _, doc in manifests:
        if doc["kind"] == "Job":
            labels = doc["spec"]["template"]["metadata"]["labels"]
            assert policy["podSelector"]["matchLabels"].items() <= \
                labels.items()
    assert policy["egress"] == [] and "Egress" in policy["policyTypes"]


def _docker_pattern(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (without its "!") as a regular expression
    (Go's filepath.Match, plus ``**`` for any number of folders); it
    matches a path when it matches the path or a folder above it."""
    parts = []
    for piece in pattern.strip("/").split("/"):
        if piece == "**":
            parts.append("(?:[^/]+/)*")
            continue
        body = re.escape(piece).replace(r"\*", "[^/]*").replace(
            r"\?", "[^/]")
        body = re.sub(r"\\\[(.*?)\\\]", r"[\1]", body)
        parts.append(body + "/")
    return re.compile("".join(parts).rstrip("/") + "(?:/.*)?$")


def test_the_dockerignore_keeps_course_data_out_and_the_kit_in():
    """Course data (.git, nbgrader's folders and database, grade CSVs, their
    reports and summaries, a cluster run's parts and logs) is left out of
    the image; every file of the kit is kept."""
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8")
    patterns = [(line.startswith("!"), _docker_pattern(line.lstrip("!")))
                for line in lines.splitlines()
                if line.strip() and not line.startswith("#")]

    def ignored(path: str) -> bool:
        """Docker's rule: the last pattern that matches decides, and an
        exception ("!") keeps the path."""
        verdict = False
        for exception, pattern in patterns:
            if pattern.match(path):
                verdict = not exception
        return verdict

    for path in (".git/config", "submitted/ann/hw3/hw3.ipynb",
                 "course/autograded/ann/hw3/hw3.ipynb", "feedback/ann/x",
                 "gradebook.db", "course/gradebook.db", "release/hw3/a",
                 "source/hw3/hw3.ipynb", "grades.csv",
                 "grades.csv.reports/ann/record.json",
                 "grades.csv.summary.json", "grades.csv.summary.png",
                 "grader_results/hw3.csv", "hw3/grading/parts/part-1.csv",
                 "hw3/grading/logs/grade-1_1.out", ".nbgrader.log",
                 "tests/kit/__pycache__/x.pyc"):
        assert ignored(path), path
    assert not ignored("tests/kit/hostile/course/submitted/zed/a.py")
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT,
                            capture_output=True, text=True)
    kit = listed.stdout.split() if listed.returncode == 0 else [
        p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
        if p.is_file() and ".git" not in p.parts]
    assert len(kit) > 100
    kept_out = [path for path in kit if ignored(path)]
    assert kept_out == []


# --------------------------------------------------------------------------
# A real one-node Slurm cluster


def _run(*command: str, env: dict | None = None, cwd: Path | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def _one_node() -> None:
    """Start the kit's one-node cluster, or skip with one line."""
    if not shutil.which("sbatch") or not Path("/usr/sbin/slurmd").exists():
        pytest.skip("Slurm is not installed (apt-get install slurm-wlm "
                    "munge; .ci/run does)")
    if os.geteuid() != 0:
        pytest.skip("starting a one-node Slurm cluster needs root")
    started = _run(str(SLURM / "one-node.sh"), timeout=120)
    if started.returncode == 3:  # a Slurm of the machine's own
        pytest.skip(started.stderr.strip().splitlines()[-1])
    assert started.returncode == 0, started.stdout + started.stderr


def _job_ids(submitted: subprocess.CompletedProcess) -> tuple[str, str]:
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    found = re.search(r"shards: job (\d+) .*; merge: job (\d+)",
                      submitted.stdout)
    assert found, submitted.stdout
    return found.group(1), found.group(2)


def _wait(*jobs: str, timeout: float = 300) -> None:
    """Until no job of ``jobs`` (nor a task of their arrays) is queued."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = _run("squeue", "--noheader", "--jobs", ",".join(jobs))
        if queued.returncode == 0 and not queued.stdout.strip():
            return
        time.sleep(1)
    _run("scancel", *jobs)
    pytest.fail(f"Slurm jobs {jobs} still queued after {timeout} s")


def _exit_code(job: str) -> str:
    shown = _run("scontrol", "show", "job", job).stdout
    found = re.search(r"\bExitCode=(\d+:\d+)", shown)
    assert found, shown
    return found.group(1)


def test_the_kits_sbatch_files_on_a_real_slurm_cluster(plain, tmp_path):
    """submit.sh puts an array of 3 shards (grade.sbatch) and the merge
    (merge.sbatch, afterany) on a one-node cluster; shard 2 is cancelled,
    the merge names it (exit 1), ``ARRAY=2 submit.sh`` reruns it and
    merges again: the CSV equals one plain batch byte for byte. The kit
    runs from a virtual environment (no container); the seed reaches the
    jobs through the environment only and is in no file and no log."""
    _one_node()
    folder, out = plain
    venv = tmp_path / "venv"  # on the "shared file system": this machine
    subprocess.run([sys.executable, "-m", "venv", "--without-pip",
                    "--system-site-packages", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "grading-kit.pth").write_text(f"{ROOT}\n")  # as pip install -e
    python = venv / "bin" / "python"
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    found = _run(str(python), "-c", "import grader; print(grader.__file__)",
                 env=env, cwd=tmp_path)
    assert found.stdout.strip() == str(ROOT / "grader" / "__init__.py")
    work = tmp_path / "work"
    env.update(CLASS=str(folder), WORK=str(work), SHARDS="3",
               ASSIGNMENT="multi_head_attention", PYTHON=str(python),
               GRADER_SEED=SEED)
    submit = str(SLURM / "submit.sh")
    # One CPU a shard so that two run at once on a 2-core machine; held,
    # so that shard 2 is cancelled before it starts.
    array, merge = _job_ids(_run(submit, "--cpus-per-task=1", "--hold",
                                 env=env, cwd=tmp_path))
    assert _run("scancel", f"{array}_2").returncode == 0
    assert _run("scontrol", "release", array, merge).returncode == 0
    _wait(array, merge)
    assert _exit_code(merge) == "1:0"
    first_merge = (work / "logs" / f"merge-{merge}.out").read_text()
    assert "missing shards: 2 of 3" in first_merge
    assert not (work / "parts" / "part-2.csv").exists()
    rerun, again = _job_ids(_run(submit, "--cpus-per-task=1",
                                 env={**env, "ARRAY": "2"}, cwd=tmp_path))
    _wait(rerun, again)
    assert _exit_code(again) == "0:0", \
        (work / "logs" / f"merge-{again}.out").read_text()
    assert (work / "grades.csv").read_bytes() == out.read_bytes()
    logs = sorted(p.name for p in (work / "logs").iterdir())
    assert logs == sorted([f"grade-{array}_1.out", f"grade-{array}_3.out",
                           f"grade-{rerun}_2.out", f"merge-{merge}.out",
                           f"merge-{again}.out"])
    # The seed: in no file the jobs wrote, no log, no recipe, nothing
    # Slurm shows of the jobs.
    places = [work, *SLURM.iterdir(), *Path("/var/log/slurm").glob("*")]
    leaked = [str(path) for place in places
              for path in ([place] if place.is_file() else place.rglob("*"))
              if path.is_file() and SEED.encode() in path.read_bytes()]
    assert leaked == []
    shown = _run("scontrol", "show", "job", array, merge, rerun, again)
    assert SEED not in shown.stdout
