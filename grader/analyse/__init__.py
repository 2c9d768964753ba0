"""Stage *analyse* (trusted side): the submission parsed, never run: syntax,
stub or not, forbidden names, near misses. See docs/architecture.md.
"""
