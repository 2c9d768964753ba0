"""``python -m grader``: see :mod:`grader.routes.cli`."""
import sys

from grader.routes.cli import main

if __name__ == "__main__":
    sys.exit(main())
