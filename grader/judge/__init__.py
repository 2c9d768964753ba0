"""Stages *attribute*, *check*, *lint* and *score* (trusted side): the code
that ran mapped to the source, the pytest checks, flake8, and points as
the rubric says. See docs/architecture.md.
"""
