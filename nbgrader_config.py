"""nbgrader course configuration: run nbgrader from the repository root.

    nbgrader generate_assignment multi_head_attention --force  # assignment/
    # collect the students' work into submitted/<student>/<assignment>/
    python -m grader nbgrader multi_head_attention     # grade and record
    nbgrader generate_feedback multi_head_attention    # feedback/<student>/
    nbgrader export                                    # -> grades.csv

``python -m grader nbgrader`` replaces ``nbgrader autograde``: it grades
each submission with the kit's sandboxed grader, outside any kernel, and
records the points in gradebook.db and autograded/ through nbgrader's own
Autograde converter (see README, "Releasing and grading with nbgrader").
In a kernel (a plain ``nbgrader autograde``) the autograded cells count 0.

The source assignments (notebooks with solutions) live in solutions/source/
and are generated, like the release in assignment/, by
``python -m solutions.build``.
"""
from grader.rubric import assignments

c = get_config()  # noqa: F821 (nbgrader provides get_config)

c.CourseDirectory.source_directory = "solutions/source"
c.CourseDirectory.release_directory = "assignment"

# A student may write the classes in the notebook or in the module the
# notebook imports: keep the submitted module in autograded/ instead of
# overwriting it with the released stub (the grader grades the submitted
# files themselves).
c.Autograde.exclude_overwriting = {
    a.id: [f"transformer_lm/{a.module}.py"] for a in assignments()}
