"""``python -m grader.classroom``: the command of the GitHub Classroom
workflows, kept under its first name for the student repositories that
already call it. The route itself is :mod:`grader.routes.classroom`; see
docs/github-classroom.md."""
from __future__ import annotations

import sys

from grader.routes.classroom import main

if __name__ == "__main__":
    sys.exit(main())
