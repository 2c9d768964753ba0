"""A Gradescope autograder zip: the builder (the driver that runs inside
it is :mod:`grader.routes.gradescope_driver`).

``python -m grader gradescope-bundle OUT.zip`` calls :func:`write_bundle`,
which writes, at the root of the zip (Gradescope's layout):

* ``setup.sh``: run once, as root, when Gradescope builds the image. It
  finds (or installs with apt) a Python >= 3.11, makes a virtual
  environment ``.venv`` beside itself, installs the CPU build of torch from
  PyTorch's CPU index and the pinned ``requirements.txt``, then the kit
  itself from the zip's copy, and checks that the grader imports.
* ``run_autograder``: run for every submission. It grades
  ``$AUTOGRADER_ROOT/submission`` (``AUTOGRADER_ROOT`` defaults to
  ``/autograder``) with ``python -m grader grade --format gradescope``
  through :func:`grader.routes.gradescope_driver.run` and writes
  ``results/results.json``. Whatever
  fails, a valid ``results.json`` is left behind (score 0, the error in
  ``output``); never none.
* ``requirements.txt``: torch pinned to :data:`TORCH_VERSION` (CPU index)
  and the grader's tools pinned to the versions installed where the bundle
  was built, so PEP-8 grading and plots match the instructor's machine.
* the kit's grader (``grader/``) and, of the student package
  ``transformer_lm/``, what the graded assignment's release ships (its
  module, the shared files, its public values: never another homework's
  module, which may hold a given solution), and ``setup.cfg``,
  ``pyproject.toml``, ``README.md``, ``LICENSE``, ``NOTICE``, plus
  ``manifest.json`` (versions and a checksum per file).
  Never ``solutions/``: nothing of the reference solution is shipped. The
  package's generated files (the stubs, the public test values) are
  shipped as a fresh build makes them from ``solutions/``, whatever the
  working tree holds (:func:`generated_package`).

**The assignment** is baked in at build time (``--assignment``; required
when the kit has more than one): ``run_autograder`` grades every upload
against it, never against what an upload happens to define. An upload of
any name is graded (a ``.py`` file, several files, a notebook, a zip
extracted into a folder: the file that defines the graded names);
when nothing does, the result lists what was uploaded.

**The secret seed.** Gradescope documents no per-assignment environment
variables, so the seed of the hidden cases is baked into the bundle when
it is built: ``seed=`` (or, when not given, ``$GRADER_SEED`` of the shell
that builds the bundle, the same variable ``grade`` and ``batch`` read).
It is stored in :data:`SEED_FILE`, inside the grader's private folder that
the sandbox forbids submissions to read, and reaches the grader through its
environment, which the sandbox scrubs. ``GRADER_SEED`` set in the
container's environment overrides it. Without either, the grader's public
default seed is used.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
import zipfile
from pathlib import Path

from grader.catalog import CATALOG_FILE
from grader.constants import SEED_ENV, TORCH_CPU_INDEX, TORCH_VERSION
from grader.errors import CliError
from grader.routes.gradescope_driver import (DEFAULT_HIDDEN_DETAILS,
                                             DEFAULT_ROOT, ROOT_ENV, SEED_FILE,
                                             VISIBILITIES, kit_version)
from solutions.paths import SOLUTIONS
from solutions.stubs import make_stub

KIT_ROOT = Path(__file__).resolve().parent.parent
# Pinned at the versions installed where the bundle is built. flake8's own
# checkers are pinned too: a different pycodestyle may judge PEP-8 anew.
PINNED_PACKAGES = ("numpy", "pytest", "flake8", "pycodestyle", "pyflakes",
                   "mccabe", "matplotlib")
KIT_FOLDERS = ("grader", "transformer_lm")
#: The student package's folder: a bundle ships only its graded
#: assignment's files of it (:attr:`grader.plugin.Plugin.package_files`).
PACKAGE_FOLDER = "transformer_lm"
KIT_FILES = ("setup.cfg", "pyproject.toml", "README.md", "LICENSE", "NOTICE")
_SKIPPED_PARTS = ("__pycache__", ".pytest_cache", ".ipynb_checkpoints")
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
_EPOCH = (1980, 1, 1, 0, 0, 0)


class BundleError(CliError):
    """The bundle cannot be built (a tool is missing, a bad option)."""


# --------------------------------------------------------------------------
# Building


def _installed_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError as exc:
        raise BundleError(f"{package} is not installed here, so its version "
                          f"cannot be pinned: pip install {package}") from exc


def pinned_requirements(extra: tuple[str, ...] = (),
                        why_extra: str = "") -> str:
    """The text of ``requirements.txt``: every dependency pinned.

    torch comes from PyTorch's CPU index (an unpinned ``torch`` from PyPI
    is a multi-GB CUDA build); the other packages, and ``extra`` ones
    (``why_extra`` says what for, in a comment), are pinned to the
    versions installed here.
    """
    lines = ["# Written by python -m grader gradescope-bundle (and "
             "python -m solutions.build",
             "# student-repo). torch: the CPU build from PyTorch's index; "
             "the grader's",
             "# tools: the versions the instructor's kit was built with.",
             f"--extra-index-url {TORCH_CPU_INDEX}",
             f"torch=={TORCH_VERSION}"]
    lines += [f"{name}=={_installed_version(name)}"
              for name in PINNED_PACKAGES]
    if extra:
        lines += [f"# {why_extra}"] if why_extra else []
        lines += [f"{name}=={_installed_version(name)}" for name in extra]
    return "\n".join(lines) + "\n"


def _shipped(path: Path) -> bool:
    """A kit file the bundle and the student repository ship: never a
    cache, the seed, or an assignment's audit catalog (instructor-only: its
    edits quote the reference solution)."""
    return (not any(part in _SKIPPED_PARTS for part in path.parts)
            and path.suffix not in _SKIPPED_SUFFIXES
            and path.as_posix() != SEED_FILE
            and path.name != CATALOG_FILE)


def kit_files(root: Path = KIT_ROOT,
              package: tuple[str, ...] | None = None) -> list[Path]:
    """The kit's files that the bundle (and a student repo) ship.

    Relative to ``root``: every file of ``grader/`` and ``transformer_lm/``
    except caches and a seed file, and the top-level metadata files. With
    ``package`` (:attr:`grader.plugin.Plugin.package_files`), of
    ``transformer_lm/`` only those files: one homework's release.
    """
    found = []
    for folder in KIT_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and _shipped(relative) and _in_package(
                    relative, package):
                found.append(relative)
    for name in KIT_FILES:
        if (root / name).is_file():
            found.append(Path(name))
    return found


def _in_package(relative: Path, package: tuple[str, ...] | None) -> bool:
    """False for a file of the student package that ``package`` (when
    given) does not name."""
    return (package is None or relative.parts[0] != PACKAGE_FOLDER
            or relative.as_posix() in
            {f"{PACKAGE_FOLDER}/{name}" for name in package})


def setup_script() -> str:
    """The text of ``setup.sh`` (Gradescope runs it once, as root)."""
    return f"""\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image
# (written by python -m grader gradescope-bundle). It installs a Python >=
# 3.11, a virtual environment beside this file with the pinned requirements
# (the CPU build of torch), then the kit from this folder.
set -euo pipefail
SOURCE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
VENV="$SOURCE/.venv"
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

find_python() {{
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c \\
                'import sys; sys.exit(sys.version_info < (3, 11))'; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}}

PYTHON="$(find_python || true)"
if [ -z "$PYTHON" ]; then
    echo "setup.sh: no Python >= 3.11 here; installing python3.11 with apt"
    apt-get update
    apt-get install -y python3.11 python3.11-venv
    PYTHON="$(find_python)"
fi
echo "setup.sh: using $PYTHON ($("$PYTHON" --version))"
if ! "$PYTHON" -m venv "$VENV"; then
    # Debian and Ubuntu ship venv's pip in a separate package.
    VERSION="$("$PYTHON" -c \\
        'import sys; print("%d.%d" % sys.version_info[:2])')"
    apt-get install -y "python$VERSION-venv"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi
# torch alone from the CPU index first: PyPI's torch is a multi-GB CUDA build.
"$VENV/bin/python" -m pip install "torch=={TORCH_VERSION}" \\
    --index-url {TORCH_CPU_INDEX}
"$VENV/bin/python" -m pip install -r "$SOURCE/requirements.txt"
"$VENV/bin/python" -m pip install --no-deps -e "$SOURCE"
# Fail the build now, not at the first submission, if anything is missing.
cd /
"$VENV/bin/python" -c "import torch, numpy, pytest, flake8, matplotlib"
"$VENV/bin/python" -m grader assignments
"""


def run_script(assignment: str | None = None,
               hidden_details: str = DEFAULT_HIDDEN_DETAILS) -> str:
    """The text of ``run_autograder`` (Gradescope runs it per submission).

    The real work is :func:`run`; this wrapper only finds Python and, if
    even that fails, writes a minimal valid ``results.json`` itself.
    ``hidden_details`` is who sees the hidden cases' sizes (a Gradescope
    visibility, see :func:`grader.routes.gradescope_driver.hide_case_details`).
    """
    if hidden_details not in VISIBILITIES:
        raise BundleError(f"unknown visibility {hidden_details!r}: use one "
                          f"of {', '.join(VISIBILITIES)}")
    extra = f" --assignment {assignment}" if assignment else ""
    extra += f" --hidden-details {hidden_details}"
    return f"""\
#!/usr/bin/env bash
# Gradescope runs this for every submission (written by python -m grader
# gradescope-bundle). It grades $AUTOGRADER_ROOT/submission (default
# /autograder/submission) and writes $AUTOGRADER_ROOT/results/results.json.
# Whatever fails, a valid results.json is left behind.
set -u
ROOT="${{{ROOT_ENV}:-{DEFAULT_ROOT}}}"
SOURCE="$ROOT/source"
RESULTS="$ROOT/results/results.json"
PYTHON="${{AUTOGRADER_PYTHON:-$SOURCE/.venv/bin/python}}"
if [ ! -x "$PYTHON" ]; then
    PYTHON=python3
fi
mkdir -p "$ROOT/results"
rm -f "$RESULTS"
status=0
(cd "$SOURCE" && PYTHONPATH="$SOURCE${{PYTHONPATH:+:$PYTHONPATH}}" \\
    "$PYTHON" -m grader.routes.gradescope_driver run --root "$ROOT"{extra}) \\
    || status=$?
if [ ! -s "$RESULTS" ]; then
    echo "run_autograder: the driver exited with status $status and wrote" \\
        "no results.json; writing a score of 0"
    MESSAGE="The autograder failed before it could grade your submission"
    MESSAGE="$MESSAGE (exit status $status). Nothing of yours was graded;"
    MESSAGE="$MESSAGE please tell your instructor."
    printf '{{"score": 0.0, "output": "%s", "tests": []}}\\n' "$MESSAGE" \\
        > "$RESULTS"
fi
exit 0
"""


def _manifest(files: dict[str, bytes], assignment: str,
              seeded: bool) -> str:
    from grader.rubric import assignments

    metadata = {
        "kit_version": kit_version(),
        "assignment": assignment,
        "assignments": [a.id for a in assignments()],
        "torch": f"{TORCH_VERSION} (CPU build, {TORCH_CPU_INDEX})",
        "secret_seed": "baked in" if seeded else "none: the public default",
        "files": {name: hashlib.sha256(data).hexdigest()
                  for name, data in sorted(files.items())},
    }
    return json.dumps(metadata, indent=2) + "\n"


def bundle_assignment(assignment: str | None) -> str:
    """The assignment a bundle grades: the one named, or the kit's only
    one. Building for a kit of several without naming one is an error:
    the assignment comes from the route, never from an upload."""
    from grader.rubric import assignments, get_assignment

    if assignment is not None:
        return get_assignment(assignment).id  # RubricError if unknown
    known = [a.id for a in assignments()]
    if len(known) == 1:
        return known[0]
    raise BundleError(f"name the assignment this bundle grades: "
                      f"--assignment ID (this kit has {len(known)}: "
                      f"{', '.join(known)})")


def generated_package(assignment: str | None = None) -> dict[str, bytes]:
    """The student package's generated files as a fresh build makes them
    (zip path -> bytes): the stubs and the public test values; with
    ``assignment``, only that assignment's (its release's package:
    :attr:`grader.plugin.Plugin.package_files`).

    They come from the single source in ``solutions/``, whatever the
    working tree's ``transformer_lm/`` holds (an instructor who tried a
    solution there ships the stub all the same). Needs the instructor's
    kit (``solutions/``, where this module lives).
    """
    from grader.plugin import plugins

    files = {}
    for plugin in plugins():
        if assignment is not None and plugin.id != assignment:
            continue
        source = SOLUTIONS / f"{plugin.rubric.module}.py"
        if source.is_file():
            stub = make_stub(source.read_text(encoding="utf-8"), str(source))
            files[f"{PACKAGE_FOLDER}/{plugin.rubric.module}.py"] = \
                stub.encode()
        if plugin.public_values is not None:
            for name, text in plugin.public_values().items():
                files[f"{PACKAGE_FOLDER}/{name}"] = text.encode()
    return files


def bundle_contents(assignment: str | None = None,
                    seed: int | str | None = None,
                    hidden_details: str = DEFAULT_HIDDEN_DETAILS
                    ) -> dict[str, bytes]:
    """Every file of the bundle: zip path -> bytes (nothing is written)."""
    assignment = bundle_assignment(assignment)
    if seed is None:
        seed = os.environ.get(SEED_ENV, "").strip() or None
    if seed is not None and not str(seed).strip():
        raise BundleError("the seed is empty")
    files: dict[str, bytes] = {
        "setup.sh": setup_script().encode(),
        "run_autograder": run_script(assignment, hidden_details).encode(),
        "requirements.txt": pinned_requirements().encode(),
    }
    from grader.plugin import load

    package = load(assignment).package_files
    for relative in kit_files(package=package):
        files[relative.as_posix()] = (KIT_ROOT / relative).read_bytes()
    files.update(generated_package(assignment))
    if seed is not None:
        files[SEED_FILE] = f"{str(seed).strip()}\n".encode()
    files["manifest.json"] = _manifest(
        {k: v for k, v in files.items() if k != SEED_FILE}, assignment,
        seed is not None).encode()
    return files


def write_bundle(out: Path, assignment: str | None = None,
                 seed: int | str | None = None,
                 hidden_details: str = DEFAULT_HIDDEN_DETAILS) -> Path:
    """Write the autograder zip to ``out``; return its path.

    ``assignment``: grade every submission as this assignment (required
    when the kit has more than one). ``seed``: the secret seed of the
    hidden cases, baked into the bundle (default: ``$GRADER_SEED`` if set,
    else none, and the grader's public default applies).
    ``hidden_details``: who sees the hidden cases' sizes in the results
    (``visible``, ``after_due_date`` (default), ``after_published`` or
    ``hidden``). The zip is
    reproducible: same kit, same options, same bytes.
    """
    out = Path(out)
    files = bundle_contents(assignment, seed, hidden_details)
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=out.parent, suffix=".zip.tmp")
    os.close(handle)
    try:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in sorted(files):
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                executable = name in ("setup.sh", "run_autograder")
                info.external_attr = (0o100755 if executable
                                      else 0o100644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, files[name])
        os.chmod(temporary, 0o644)
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return out
