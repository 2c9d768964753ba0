"""Reading one submitted file: a ``.py`` file or a notebook.

:func:`grader.locate.source.load_python` reads a module,
:func:`grader.locate.cells. load_notebook` a notebook (cells as the Jupyter
kernel runs them); this module chooses between them. It sits above both, so
that ``cells`` (which builds on ``source``) and ``source`` import each other in
one direction only.
"""
from __future__ import annotations

from pathlib import Path

from grader.locate.cells import load_notebook
from grader.locate.source import SourceFile, load_python

__all__ = ["load_notebook", "load_python", "load_source"]


def load_source(path: Path) -> SourceFile:
    """Load a ``.py`` file or a notebook, chosen by the file's suffix."""
    if Path(path).suffix == ".ipynb":
        return load_notebook(path)
    return load_python(path)
