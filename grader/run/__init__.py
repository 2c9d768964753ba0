"""Stages *run* and *read* (trusted side of the sandbox): the fork server,
one sandboxed worker per task, the process tree, the frames decoded into
observations, and the re-run of what loads. See docs/architecture.md and
docs/threat-model.md.
"""
