"""nbgrader course configuration: run nbgrader from the repository root.

    nbgrader generate_assignment multi_head_attention   # -> assignment/
    nbgrader autograde multi_head_attention             # submitted/<id>/...
    nbgrader generate_feedback multi_head_attention
    nbgrader export                                     # -> grades.csv

The source assignments (notebooks with solutions) live in solutions/source/
and are generated, like the release in assignment/, by
``python -m solutions.build``.
"""
from grader.rubric import assignments

c = get_config()  # noqa: F821 (nbgrader provides get_config)

c.CourseDirectory.source_directory = "solutions/source"
c.CourseDirectory.release_directory = "assignment"

# A student may write the classes in the notebook or in the module the
# notebook imports: keep the submitted module instead of overwriting it with
# the released stub.
c.Autograde.exclude_overwriting = {
    a.id: [f"transformer_lm/{a.module}.py"] for a in assignments()}

# Each graded cell runs the kit's grader once per code version (a few
# seconds); a hung student cell is stopped by the grader's own timeouts.
c.Execute.timeout = 300

# nbgrader gives 0 to a test cell that writes anything to stderr; the kit's
# graded cells write nothing there, but a library warning must not cost
# points.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = (r"Matplotlib is building the font cache|"
                           r"(Deprecation|Future|User)Warning")
