"""``python -m grader``: see :mod:`grader.routes.cli`; with
``GRADER_COMMAND_SERVER`` set, :mod:`grader.routes.warm` may run the
command in a fork of a warm server instead."""
import os
from typing import NoReturn

from grader.routes.exits import finish


def _run() -> NoReturn:
    """The command: in a warm server's fork when one is named and takes
    it (docs/internals.md, `grader.routes.warm`), else here."""
    from grader.routes.warm import ADDRESS, delegate

    if os.environ.get(ADDRESS):
        status = delegate(os.environ[ADDRESS])
        if status is not None:
            finish(status)
    from grader.routes.cli import main

    finish(main())


if __name__ == "__main__":
    _run()
