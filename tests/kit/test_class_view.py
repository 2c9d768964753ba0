"""Issue 15, the instructor's view of a class: the summary (table, JSON,
PNG) checked against the CSV, ``--only``, ``--shard`` and ``merge``
against one plain batch, and ``similarity``."""
from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from in_process import merge_command

ROOT = Path(__file__).resolve().parents[2]
SUBMISSIONS = ROOT / "tests" / "kit" / "submissions"
REFERENCE = ROOT / "solutions" / "modeling_attention.py"
STUB = ROOT / "transformer_lm" / "modeling_attention.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# A small class: right, wrong in known ways, untouched, forbidden, and an
# entry that is no submission.
CLASS = {"amy.py": "correct_matmul.py",
         "ben.py": "mistake_mask_diagonal.py",
         "cat.py": "mistake_softmax_dim.py",
         "dan.py": "mistake_no_scaling.py",
         "eve.py": "forbidden_sdpa.py"}


def _grader(*args: str, cwd: Path = ROOT,
            timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *args],
                          cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _rows(path: Path) -> dict[str, dict]:
    with path.open(newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def _make_class(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in CLASS.items():
        shutil.copy(SUBMISSIONS / source, folder / name)
    shutil.copy(STUB, folder / "fay.py")
    (folder / "gus.zip").write_bytes(b"PK\x03\x04")
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """The class, graded once by a plain batch."""
    base = tmp_path_factory.mktemp("view")
    folder = _make_class(base / "class")
    out = base / "out" / "grades.csv"
    result = _grader("batch", str(folder), "--out", str(out), "--jobs", "2")
    return folder, out, result


def test_summary_json_matches_the_csv(graded):
    """grades.csv.summary.json beside the CSV: counts, totals, the
    diagnoses and who made them, as the CSV says; item pass rates as the
    records say."""
    _, out, result = graded
    assert result.returncode == 1, result.stderr  # gus.zip: an error row
    rows = _rows(out)
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    graded_rows = [r for r in rows.values() if r["status"] == "graded"]
    totals = sorted(float(r["score"]) for r in graded_rows)
    assert summary["students"] == len(rows) == 7
    assert summary["graded"] == len(graded_rows) == 6
    assert summary["errors"] == 1 and summary["not_graded"] == ["gus"]
    assert summary["totals"]["all"] == totals
    assert summary["totals"]["mean"] == round(statistics.fmean(totals), 3)
    assert summary["totals"]["median"] == statistics.median(totals)
    assert summary["totals"]["min"] == totals[0]
    assert summary["totals"]["max"] == totals[-1]
    assert summary["max_score"] == 10.0
    # The diagnoses column, one id per known mistake, and the JSON's.
    from_csv: dict[str, list[str]] = {}
    for student, row in sorted(rows.items()):
        for mistake in filter(None, row["diagnoses"].split(" | ")):
            from_csv.setdefault(mistake, []).append(student)
    assert {m: d["students"] for m, d in summary["diagnoses"].items()} \
        == from_csv
    assert {m: d["count"] for m, d in summary["diagnoses"].items()} \
        == {m: len(who) for m, who in from_csv.items()}
    assert from_csv["mask_diagonal"] == ["ben"]
    assert summary["diagnoses"]["softmax_dim"]["students"] == ["cat"]
    assert summary["diagnoses"]["no_scaling"]["text"]  # the rubric's words
    # Item pass rates from each graded record.
    reports = out.with_name(out.name + ".reports")
    passed: dict[str, int] = {}
    for record_file in reports.glob("*/record.json"):
        record = json.loads(record_file.read_text())
        if record["status"] != "graded":
            continue
        for item in record["report"]["items"]:
            passed[item["id"]] = passed.get(item["id"], 0) + item["passed"]
    assert {i: e["passed"] for i, e in summary["items"].items()} == passed
    for item_id, entry in summary["items"].items():
        assert entry["graded"] == 6
        assert entry["pass_rate"] == round(passed[item_id] / 6, 4)
    # The untouched stub fails every correctness item.
    assert summary["items"]["task1.forward"]["passed"] <= 5
    # Integrity flags by kind, with who: eve called a forbidden kernel.
    flagged = {s for entry in summary["flags"].values()
               for s in entry["students"]}
    assert flagged == {s for s, r in rows.items() if r["flags"]}
    assert "eve" in flagged
    # The slowest, from the reports' own seconds.
    assert 1 <= len(summary["slowest"]) <= 5
    seconds = [s["seconds"] for s in summary["slowest"]]
    assert seconds == sorted(seconds, reverse=True)


def test_summary_table_and_png(graded):
    """The batch prints the short table; grades.csv.summary.png is a real
    PNG."""
    _, out, result = graded
    assert "Class summary: 6 graded, 1 not graded, of 7" in result.stdout
    assert "softmax_dim: 1" in result.stdout
    png = (out.parent / "grades.csv.summary.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_summary_command_redraws_from_a_finished_batch(graded, tmp_path):
    """python -m grader summary FILE.csv: the same JSON from the CSV and
    its reports folder alone; a CSV that is no batch's is refused."""
    _, out, _ = graded
    copy = tmp_path / "grades.csv"
    shutil.copy(out, copy)
    shutil.copytree(out.with_name(out.name + ".reports"),
                    tmp_path / "grades.csv.reports")
    result = _grader("summary", str(copy))
    assert result.returncode == 0, result.stderr
    assert json.loads(Path(f"{copy}.summary.json").read_text()) == \
        json.loads(Path(f"{out}.summary.json").read_text())
    assert Path(f"{copy}.summary.png").read_bytes().startswith(PNG_MAGIC)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    refused = _grader("summary", str(tmp_path / "other.csv"))
    assert refused.returncode == 2
    assert "not a batch's CSV" in refused.stderr


def test_only_replaces_those_rows_and_keeps_the_others(graded, tmp_path):
    """--only fay: fay's row and reports are replaced (she handed in a
    correct file since), every other row stays byte for byte."""
    folder, out, _ = graded
    klass = tmp_path / "class"
    shutil.copytree(folder, klass)
    copy = tmp_path / "grades.csv"
    before = out.read_text()
    copy.write_text(before.replace(str(folder), str(klass)))
    shutil.copytree(out.with_name(out.name + ".reports"),
                    tmp_path / "grades.csv.reports")
    stale = tmp_path / "grades.csv.reports" / "fay.py" / "stale.png"
    stale.write_bytes(PNG_MAGIC)
    shutil.copy(SUBMISSIONS / "correct_matmul.py", klass / "fay.py")
    result = _grader("batch", str(klass), "--out", str(copy),
                     "--only", "fay")
    assert result.returncode == 0, result.stderr
    old = copy.read_text().splitlines()
    new_rows = _rows(copy)
    assert float(new_rows["fay"]["score"]) == \
        float(new_rows["amy"]["score"]) == 11.0  # with the bonus
    expected = [line for line in before.replace(str(folder), str(klass))
                .splitlines() if not line.startswith("fay,")]
    assert [line for line in old if not line.startswith("fay,")] == expected
    assert not stale.exists()
    record = json.loads((tmp_path / "grades.csv.reports" / "fay.py" /
                         "record.json").read_text())
    assert record["report"]["score"] == 11.0
    summary = json.loads((tmp_path / "grades.csv.summary.json").read_text())
    assert summary["students"] == 7 and summary["graded"] == 6
    unknown = _grader("batch", str(klass), "--out", str(copy),
                      "--only", "zed")
    assert unknown.returncode == 2
    assert "no student named zed" in unknown.stderr


def test_two_shards_merged_equal_one_batch(graded, tmp_path):
    """--shard 1/2 and 2/2, then merge: the same CSV as one plain batch,
    the same summary (timings aside); duplicates refused, a missing shard
    and its students named."""
    folder, out, _ = graded
    parts = [tmp_path / f"part-{i}.csv" for i in (1, 2)]
    for index, part in enumerate(parts, 1):
        result = _grader("batch", str(folder), "--out", str(part),
                         "--shard", f"{index}/2", "--jobs", "2")
        assert result.returncode in (0, 1), result.stderr
        assert not list(tmp_path.glob("*summary*"))
    first, second = (set(_rows(p)) for p in parts)
    assert first and second and not first & second
    assert first | second == set(_rows(out))
    merged = tmp_path / "merged" / "grades.csv"
    merged.parent.mkdir()
    # The merges by the command's main here (in_process.py), the refusal
    # of a student graded twice by a process of its own.
    result = merge_command(str(merged), *map(str, parts))
    assert result.returncode == 0, result.stdout + result.stderr
    assert merged.read_text() == out.read_text()
    mine = json.loads(Path(f"{merged}.summary.json").read_text())
    plain = json.loads(Path(f"{out}.summary.json").read_text())
    for summary in (mine, plain):
        del summary["slowest"]
    assert mine == plain
    reports = merged.with_name(merged.name + ".reports")
    assert {p.name for p in reports.iterdir()} >= {"amy.py", "gus.zip"}
    twice = _grader("merge", str(tmp_path / "twice.csv"),
                    str(parts[0]), str(parts[0]))
    assert twice.returncode == 2
    assert "graded in both" in twice.stderr
    alone = merge_command(str(tmp_path / "alone.csv"), str(parts[1]))
    assert alone.returncode == 1
    assert "missing shards: 1 of 2" in alone.stdout
    for student in first:
        assert f"missing: {student}: no part graded" in alone.stdout


def test_shard_argument_is_checked():
    """I/N with 1 <= I <= N, else exit 2 before anything is graded."""
    for bad in ("0/2", "3/2", "x"):
        result = _grader("batch", str(ROOT), "--shard", bad)
        assert result.returncode == 2
        assert "--shard" in result.stderr


def test_similarity_ranks_a_renamed_copy_first(tmp_path):
    """A copy with renamed variables ranks first; the stub's given code
    is not compared; names are escaped; the report says it ranks and
    does not accuse."""
    folder = tmp_path / "class"
    folder.mkdir()
    original = (SUBMISSIONS / "correct_einsum.py").read_text()
    copied = original.replace("scores", "s_c_o_r_e_s").replace(
        "probs", "pr")
    assert copied != original
    (folder / "ann.py").write_text(original)
    (folder / "<i>bo.py").write_text(copied)
    shutil.copy(SUBMISSIONS / "correct_matmul.py", folder / "cy.py")
    shutil.copy(STUB, folder / "di.py")
    out = tmp_path / "similarity.html"
    result = _grader("similarity", str(folder), "--out", str(out))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "compared 3 of 4" in lines[0]
    assert lines[1].startswith("  <i>bo ~ ann: ") or \
        lines[1].startswith("  ann ~ <i>bo: ")
    share = lines[1].rsplit(": ", 1)[1]
    assert [int(p.strip(" %")) for p in share.split("/")] >= [90, 90]
    page = out.read_text()
    assert "&lt;i&gt;bo" in page and "<i>bo" not in page
    assert "not a verdict" in page and "similar by nature" in page
    assert "di: no code of their own" in page
    # The stub's given code is nobody's: never listed as shared.
    assert "bs, seq, _ = x.shape" not in page
    assert "self.head_size = hidden // num_heads" not in page


FORKED_JUDGES = '''
import os, signal, sys
from grader.run import forkserver

server = forkserver.shared()
server.wait_ready()


def in_child(check):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, check().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    return os.read(read, 200).decode()


print("same", in_child(lambda: str(forkserver.shared().pid == server.pid)))
os.kill(server.pid, signal.SIGKILL)
server.process.wait()
print("after", in_child(lambda: str(forkserver.shared().pid != server.pid)))
'''


@pytest.mark.usefixtures("own_fork_server")
def test_forked_judges_share_the_coordinators_fork_server():
    """A judge (a fork of the coordinator) asks the coordinator's fork
    server for its workers instead of starting one of its own, and starts
    a new one only when that server has ended."""
    result = subprocess.run([sys.executable, "-c", FORKED_JUDGES], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["same", "True", "after", "True"]
