"""``python -m grader``: see :mod:`grader.cli`."""
import sys

from grader.cli import main

if __name__ == "__main__":
    sys.exit(main())
