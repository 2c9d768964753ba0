"""Formgrader in a real browser: the Autograde button gives the kit's grade.

A scratch course (the kit's ``nbgrader_config.py``, the homework's source
assignment, ``generate_assignment``) with three submissions: the solution
notebook, a partly wrong one and a hostile one (a cell that hijacks its
kernel, a deleted graded cell, forged points). A Jupyter server with the
formgrader extension serves it on the loopback interface, behind a token,
for a bounded time; headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by selenium) opens *Manage Submissions*,
clicks **Autograde** for each submission, reads the scores formgrader
shows, opens the manual grading view of the partly wrong one and reads a
cell's message, then generates that student's feedback and opens the
HTML. One browser session, each submission graded once.

Each modal is read once Bootstrap has finished showing it (its
``shown.bs.modal`` event): read during the slide-in, the modal's first
lines lie above the window, where WebDriver counts text as not shown, and
"Successfully autograded" went missing on a loaded machine (issue 25).

Screenshots of every step and the server's log are kept in
``test-artifacts/formgrader/`` after each run (replaced by the next one);
``FORMGRADER_SCREENSHOTS=docs/images/formgrader`` also writes the ones the
documentation shows, scaled down (README, docs/nbgrader.md)::

    FORMGRADER_SCREENSHOTS=docs/images/formgrader python -m pytest \
        tests/kit/test_formgrader_browser.py

Skipped, with one line, where Chromium or selenium is not installed
(``.ci/run`` installs Chromium in CI).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from test_nbgrader_route import (CELLS, EXPECTED, HIJACK, HW, NOTEBOOK,
                                 _cell, _edit_cell)

ROOT = Path(__file__).resolve().parents[2]
SEED = "formgrader-secret-3"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
STUDENTS = ("alice", "carol", "mallory")   # perfect, partly wrong, hostile
WAIT = 600          # seconds the server, a page or an autograde may take
# Every step's screenshot and the server's log, kept after each run (for
# CI to upload); FORMGRADER_SCREENSHOTS=DIR also writes the documentation's
# ones (DOC_SHOTS), scaled down, to DIR.
ARTIFACTS = Path("test-artifacts") / "formgrader"
DOC_SHOTS = ("autograde_carol", "scores", "manual_grading", "feedback")
pytestmark = pytest.mark.slow


def _needs_a_browser() -> None:
    if not (CHROMIUM and DRIVER):
        pytest.skip("no Chromium: apt-get install chromium chromium-driver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("no selenium: pip install selenium")


def _make_course(course: Path) -> None:
    """The scratch course: generate the release, submit three notebooks."""
    shutil.copy(ROOT / "nbgrader_config.py", course)
    source = course / "solutions" / "source" / HW
    shutil.copytree(ROOT / "solutions" / "source" / HW, source)
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment",
                    HW, "--force", "--log-level=ERROR"], cwd=course,
                   check=True, env=_env(), timeout=WAIT)
    release = course / "assignment" / HW
    submitted = course / "submitted"
    shutil.copytree(source, submitted / "alice" / HW)
    carol = submitted / "carol" / HW
    shutil.copytree(release, carol)
    written = json.loads((source / NOTEBOOK).read_text())
    _edit_cell(written, "self_attention", " / self.scale, dim=-1)",
               ", dim=-1)")
    _edit_cell(written, "multi_head_self_attention", ".triu(diagonal=1)",
               ".triu(diagonal=0)")
    notebook = json.loads((carol / NOTEBOOK).read_text())
    for cell_id in ("self_attention", "multi_head_self_attention"):
        _cell(notebook, cell_id)["source"] = _cell(written,
                                                   cell_id)["source"]
    (carol / NOTEBOOK).write_text(json.dumps(notebook))
    mallory = submitted / "mallory" / HW
    shutil.copytree(release, mallory)
    notebook = json.loads((mallory / NOTEBOOK).read_text())
    first = next(i for i, c in enumerate(notebook["cells"])
                 if c.get("id") == "task1_init")
    notebook["cells"].insert(first, {
        "cell_type": "code", "execution_count": None, "id": "hijack",
        "metadata": {}, "outputs": [], "source": HIJACK.read_text()})
    notebook["cells"] = [c for c in notebook["cells"]
                         if c.get("id") != "task2_output"]
    _cell(notebook, "task1_forward")["metadata"]["nbgrader"]["points"] = 100
    (mallory / NOTEBOOK).write_text(json.dumps(notebook))


def _env() -> dict[str, str]:
    return {**os.environ, "GRADER_SEED": SEED,
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """A Jupyter server with formgrader on the course: loopback only, a
    token, killed (with its process group) after ``WAIT`` seconds at the
    latest."""

    def __init__(self, course: Path, runtime: Path) -> None:
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.log = (runtime / "server.log").open("w")
        self.process = subprocess.Popen(
            ["timeout", "-s", "KILL", str(WAIT), sys.executable, "-m",
             "jupyter_server", "--allow-root", "--no-browser",
             "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
             "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={course}"],
            cwd=course, stdout=self.log, stderr=subprocess.STDOUT,
            env={**_env(), "JUPYTER_RUNTIME_DIR": str(runtime)},
            start_new_session=True)

    def url(self, path: str) -> str:
        """``path`` on the server, with the token."""
        return f"http://127.0.0.1:{self.port}{path}?token={self.token}"

    def wait_ready(self) -> None:
        """Until the server answers (or fail with its log)."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url("/api/status"),
                                            timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.log.flush()
        raise AssertionError("the Jupyter server did not start: "
                             + Path(self.log.name).read_text()[-3000:])

    def stop(self) -> None:
        """Stop the server and everything it started."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        self.log.close()


class Browser:
    """Headless Chromium, a screenshot after each step."""

    def __init__(self, shots: Path) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        options = Options()
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox",
                         "--disable-dev-shm-usage", "--disable-gpu",
                         "--window-size=1280,900"):
            options.add_argument(argument)
        self.driver = webdriver.Chrome(service=Service(DRIVER),
                                       options=options)
        self.driver.set_page_load_timeout(WAIT)
        self.shots = shots
        self.taken: list[Path] = []

    def shot(self, name: str) -> None:
        """A screenshot of the page as it is now."""
        path = self.shots / f"{len(self.taken) + 1:02d}_{name}.png"
        self.driver.save_screenshot(str(path))
        self.taken.append(path)

    def wait(self, condition, seconds: float = WAIT):
        """Wait until ``condition`` holds; an element that went stale
        while it was read (formgrader redraws its tables when its data
        arrives, later on a busy machine) means: look again."""
        from selenium.common.exceptions import (
            NoSuchElementException, StaleElementReferenceException)
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(
            self.driver, seconds, 0.2,
            ignored_exceptions=(NoSuchElementException,
                                StaleElementReferenceException)
        ).until(condition)

    def row(self, student: str):
        """The row of ``student`` in Manage Submissions."""
        from selenium.webdriver.common.by import By

        def found(driver):
            for row in driver.find_elements(By.CSS_SELECTOR, "tbody tr"):
                cells = row.find_elements(By.CSS_SELECTOR, ".student-id")
                if cells and cells[0].text.strip() == student:
                    return row
            return False

        return self.wait(found)

    def watch_modals(self) -> None:
        """Count the modals Bootstrap has finished showing and hiding on
        this page (its ``shown.bs.modal`` and ``hidden.bs.modal`` events),
        so that a modal is read only once its slide-in has ended: read
        mid-animation, its first lines lie above the window, where
        WebDriver counts text as not shown (the flake of issue 25)."""
        self.driver.execute_script(
            "window.kitModals = {shown: 0, hidden: 0};"
            "jQuery(document).on('shown.bs.modal', function () {"
            "  window.kitModals.shown += 1; });"
            "jQuery(document).on('hidden.bs.modal', function () {"
            "  window.kitModals.hidden += 1; });")

    def modal_count(self, event: str) -> int:
        return self.driver.execute_script(
            f"return window.kitModals.{event};")

    def click_in_row(self, student: str, column: str) -> str:
        """Click ``column``'s link (autograde, generate-feedback) in
        ``student``'s row; the text of the modal that answers, once fully
        shown; the modal closed (and gone) again."""
        from selenium.webdriver.common.by import By

        shown, hidden = self.modal_count("shown"), self.modal_count("hidden")
        self.row(student).find_element(
            By.CSS_SELECTOR, f"td.{column} a").click()
        self.wait(lambda d: self.modal_count("shown") > shown)
        modal = self.driver.find_element(By.CSS_SELECTOR, ".modal.in")
        text = modal.text
        self.shot(f"{column}_{student}")
        modal.find_element(By.CSS_SELECTOR, ".modal-footer button").click()
        self.wait(lambda d: self.modal_count("hidden") > hidden
                  and not d.find_elements(By.CSS_SELECTOR, ".modal"))
        return text

    def score(self, student: str) -> str:
        """The score formgrader shows for ``student``."""
        from selenium.webdriver.common.by import By

        return self.wait(lambda d: self.row(student).find_element(
            By.CSS_SELECTOR, ".score").text.strip() or False)

    def quit(self) -> None:
        self.driver.quit()


def _for_docs(shots: list[Path], folder: Path, width: int = 900) -> None:
    """The screenshots the documentation shows (``DOC_SHOTS``), scaled to
    ``width`` pixels and 64 colours, as ``folder/<step>.png``."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for path in shots:
        step = path.stem[3:]
        if step not in DOC_SHOTS:
            continue
        with Image.open(path) as image:
            height = round(image.height * width / image.width)
            small = image.convert("RGB").resize((width, height),
                                                Image.LANCZOS)
            small.quantize(colors=64).save(folder / f"{step}.png",
                                           optimize=True)


def _auto_scores(course: Path, student: str) -> dict[str, float | None]:
    """Each cell's automatic points, extra credit (the bonus) included."""
    from test_nbgrader_route import _auto_scores as scores

    return scores(course, HW, student)


def _submission_id(course: Path, student: str) -> str:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return gradebook.find_submission_notebook(HW, HW, student).id


def test_formgrader_autograde_in_a_browser(tmp_path):
    """Click Autograde for three submissions; the scores, a cell's message
    in the manual grading view and the feedback HTML are the kit's."""
    _needs_a_browser()
    course, runtime = tmp_path / "course", tmp_path / "runtime"
    shots = ROOT / ARTIFACTS
    shutil.rmtree(shots, ignore_errors=True)
    for folder in (course, runtime, shots):
        folder.mkdir(parents=True)
    _make_course(course)
    server = Server(course, runtime)
    browser = None
    try:
        server.wait_ready()
        browser = Browser(shots)
        _drive(browser, server, course)
    except BaseException:
        if browser is not None:
            try:
                browser.shot("failure")
            except Exception:
                pass
        print(f"screenshots and the server's log: {shots}", file=sys.stderr)
        raise
    finally:
        if browser is not None:
            browser.quit()
        server.stop()
        shutil.copy(runtime / "server.log", shots / "server.log")
    if os.environ.get("FORMGRADER_SCREENSHOTS"):
        _for_docs(browser.taken, Path(os.environ["FORMGRADER_SCREENSHOTS"]))


def _graded_cell(driver, grade_id: str):
    """The manual grading view's cell (its source, score box and outputs)
    of autograded cell ``grade_id``."""
    from selenium.webdriver.common.by import By

    return driver.find_element(
        By.XPATH, f"//input[@id='{grade_id}']/ancestor::div"
                  f"[contains(concat(' ', @class, ' '), ' code_cell ')]")


def _show(driver, element) -> None:
    """Scroll ``element`` to the top of the window, below formgrader's
    fixed bar."""
    driver.execute_script("arguments[0].scrollIntoView(true);"
                          "window.scrollBy(0, -70);", element)


def _manage_submissions(browser: Browser, server: Server) -> None:
    browser.driver.get(server.url(f"/formgrader/manage_submissions/{HW}"))
    for student in STUDENTS:
        browser.row(student)
    browser.watch_modals()


def _drive(browser: Browser, server: Server, course: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = browser.driver
    # Log in with the token (a token in a page's address sets a cookie
    # for that page's folder only, and formgrader's API lies elsewhere).
    driver.get(f"http://127.0.0.1:{server.port}/login")
    browser.wait(lambda d: d.find_element(By.ID, "password_input")) \
        .send_keys(server.token)
    driver.find_element(By.ID, "login_submit").click()
    browser.wait(lambda d: "/login" not in d.current_url)
    _manage_submissions(browser, server)
    browser.shot("manage_submissions")

    answers = {s: browser.click_in_row(s, "autograde") for s in STUDENTS}
    for student, text in answers.items():
        assert f"Successfully autograded '{HW}' for student '{student}'" \
            in text, text
    shown = {s: browser.score(s) for s in STUDENTS}
    browser.shot("scores")
    for student in STUDENTS:
        total = sum(EXPECTED[student].values())
        # the bonus is extra credit: the maximum is 10 + Q1-Q5
        assert shown[student] == f"{total:g} / 15", shown
        scores = _auto_scores(course, student)
        assert {c: scores[c] for c in CELLS} == EXPECTED[student], student
    assert not (course / "stolen_seed.txt").exists()   # no kernel ran

    # The manual grading view: the grader's message in carol's cells.
    driver.get(server.url(f"/formgrader/submissions/"
                          f"{_submission_id(course, 'carol')}"))
    cell = browser.wait(lambda d: _graded_cell(d, "task2_causal"))
    output = cell.find_element(By.CSS_SELECTOR, ".output_wrapper")
    _show(driver, output)
    browser.shot("manual_grading")
    assert "task2.causal: 0 / 1" in output.text, output.text
    assert "mask_diagonal" in output.text, output.text
    forward = _graded_cell(driver, "task1_forward")
    assert "task1.forward: 2 / 3" in forward.text, forward.text
    assert "no_scaling" in forward.text, forward.text
    images = cell.find_elements(By.CSS_SELECTOR, "img")
    assert images, "no attention maps in the task2_causal cell"

    # The student's feedback, generated from formgrader and opened.
    _manage_submissions(browser, server)
    said = browser.click_in_row("carol", "generate-feedback")
    assert "Successfully generated feedback" in said, said
    driver.get(server.url(f"/files/feedback/carol/{HW}/{HW}.html"))
    message = browser.wait(lambda d: d.find_element(
        By.XPATH, "//pre[contains(., 'task2.causal: 0 / 1')]"))
    _show(driver, message)
    browser.shot("feedback")
    body = driver.find_element(By.TAG_NAME, "body")
    assert "mask_diagonal" in body.text
    assert f"{HW} (Score: 8.0 / 15.0)" in body.text, body.text[:2000]
