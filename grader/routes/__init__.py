"""The routes (trusted side): the command line, a class folder (batch,
shards, summary, similarity), nbgrader, GitHub Classroom and the
Gradescope driver, each reusing :mod:`grader.engine`. See
docs/architecture.md.
"""
