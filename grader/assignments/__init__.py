"""One sub-package per assignment: rubric, cases, reference, checks."""
