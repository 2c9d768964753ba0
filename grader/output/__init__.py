"""Stage *report* (trusted side): text, JSON and Gradescope reports,
feedback files, pictures, notebook cells, and submission text made safe
to show. See docs/architecture.md.
"""
