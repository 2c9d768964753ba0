"""The kit's grader: ``python -m grader`` (see :mod:`grader.routes.cli`)."""
import sys as _sys
from os import getcwd as _getcwd
from os import path as _path

# The kit's version; tests/kit/test_cli.py checks it is setup.cfg's.
__version__ = "1.0.0"


def _without_the_working_folder() -> None:
    """Take the working folder off ``sys.path`` when ``python -m
    grader...`` put it there (first), unless the grader itself comes from
    it (the kit's or a student repository's root).

    Python's ``-m`` imports from the folder it is run in before the
    standard library: a student's ``copy.py``, ``typing.py`` or folder
    ``json/`` there (a student repository graded in place, a class folder
    a batch is run from) would otherwise be imported by the grader's own
    process at start-up, unsandboxed. The grader never imports a
    submission (it runs only in a worker, from its source), so nothing is
    lost. This runs while the package is imported, before any other
    module of the grader (``sys.argv`` is ``['-m', ...]`` then)."""
    if _sys.argv[:1] != ["-m"] or not _sys.path:
        return
    first = _path.abspath(_sys.path[0] or _path.curdir)
    kit = _path.dirname(_path.dirname(_path.abspath(__file__)))
    if first == _path.abspath(_getcwd()) and first != kit:
        del _sys.path[0]


_without_the_working_folder()
