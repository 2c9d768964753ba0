"""The sandbox side: the only grader code that runs beside a submission
(the sealed agent and the confinement it applies). Nothing here is
believed by the trusted side beyond what it can check. See
docs/threat-model.md.
"""
