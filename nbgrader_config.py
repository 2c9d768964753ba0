"""nbgrader course configuration: run nbgrader from the repository root.

    nbgrader generate_assignment multi_head_attention --force  # assignment/
    # collect the students' work into submitted/<student>/<assignment>/
    nbgrader autograde multi_head_attention   # or formgrader's Autograde,
    python -m grader nbgrader multi_head_attention  # or this: the same
    nbgrader generate_feedback multi_head_attention    # feedback/<student>/
    nbgrader export                                    # -> grades.csv

Every way of autograding records the kit's sandboxed grade: the kit's
steps below replace the kernel in nbgrader's own ``Autograde`` converter
(``nbgrader autograde``, formgrader's Autograde button,
``NbGraderAPI.autograde``), and ``python -m grader nbgrader`` (the fast,
parallel way for a whole class) records through the same converter and
steps. No kernel runs student code. See docs/nbgrader.md.

The source assignments (notebooks with solutions) live in solutions/source/
and are generated, like the release in assignment/, by
``python -m solutions.build``.
"""
try:
    from grader.routes.nbgrader_steps import (kernel_free_validation,
                                              kit_steps)
    from grader.rubric import assignments
except ImportError as missing:
    # Without the kit's steps nbgrader would grade in a kernel, as the
    # instructor: stop every nbgrader command here instead.
    raise SystemExit(
        f"nbgrader_config.py: the kit's grader cannot be imported here "
        f"({missing}); install the kit (pip install -e KIT) or run nbgrader "
        f"from the kit's root: nothing was done") from missing

c = get_config()  # noqa: F821 (nbgrader provides get_config)

c.CourseDirectory.source_directory = "solutions/source"
c.CourseDirectory.release_directory = "assignment"

# Autograde without a kernel: nbgrader's steps, with Execute replaced by
# the grader's verdicts (grader/routes/nbgrader_steps.py).
(c.Autograde.sanitize_preprocessors,
 c.Autograde.autograde_preprocessors) = kit_steps()

# nbgrader validate (and the Validate button of a server started here)
# would run the notebook in a kernel and say "Success!" for graded cells
# that only the kit's grader fills in: it says in one line what to run
# instead (python -m grader grade FOLDER --public-only), and runs nothing.
kernel_free_validation()

# A student may write the classes in the notebook or in the module the
# notebook imports: keep the submitted module in autograded/ instead of
# overwriting it with the released stub (the grader grades the submitted
# files themselves).
c.Autograde.exclude_overwriting = {
    a.id: [f"transformer_lm/{a.module}.py"] for a in assignments()}

# nbgrader zip_collect ASSIGNMENT: an LMS download (Canvas, Moodle,
# Blackboard: one zip of every student's files) put in
# downloaded/ASSIGNMENT/archive/, files named
# <student>_<YYYY-MM-DD-HH-MM-SS>_<file name>, e.g.
# alice_2026-11-20-17-05-00_multi_head_attention.ipynb (rename the
# LMS's pattern to this one, or set your own named_regexp). The notebook
# and the module (modeling_attention.py) land in
# submitted/<student>/ASSIGNMENT/ with timestamp.txt; the module beside
# the notebook is graded as transformer_lm/<module>.py is.
# (LmsFileNames: nbgrader's FileNameCollectorPlugin, reading that
# timestamp as the time it says).
c.ZipCollectApp.collector_plugin = \
    "grader.routes.nbgrader_steps.LmsFileNames"
c.FileNameCollectorPlugin.named_regexp = (
    r".*/(?P<student_id>[^_/]+)_"
    r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)_"
    r"(?P<file_id>[^/]+)")
c.FileNameCollectorPlugin.valid_ext = [".ipynb", ".py"]
