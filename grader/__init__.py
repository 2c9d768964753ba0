"""The kit's grader: ``python -m grader`` (see :mod:`grader.routes.cli`)."""
# The kit's version; tests/kit/test_cli.py checks it is setup.cfg's.
__version__ = "1.0.0"
