"""Stage *locate* (trusted side): the file of each task (a module, a
notebook, a folder) found and read as canonical text. See
docs/architecture.md.
"""
