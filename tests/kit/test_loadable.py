"""The loadable part of a module (grader/run/loadable.py), on small sources.

These run in the trusted process only: the module is parsed, never run,
except where a test executes the reduced text it wrote itself to show what
binds. Real submissions, graded in the sandbox, are in test_learners.py
and the hostile corpus (test_hostile.py: module-level code that raises).
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grader.locate.source import SourceFile
from grader.run.loadable import (Reduction, explain_missing_name, importable,
                                 reduce_module)

MISSING = "no_such_module_for_the_kit_tests"


def reduce(text: str, graded: tuple[str, ...] = ("A",),
           roots: dict | None = None) -> Reduction:
    """Reduce ``text`` (dedented); fail when nothing is reduced."""
    source = SourceFile(text=textwrap.dedent(text).lstrip("\n"),
                        path=Path("/tmp/learner.py"))
    reduction = reduce_module(source, graded, roots)
    assert reduction is not None
    return reduction


def why(reduction: Reduction, code: str) -> str:
    """The reason the statement starting with ``code`` was skipped."""
    found = [s for s in reduction.skipped if s.code.startswith(code)]
    assert len(found) == 1, [s.code for s in reduction.skipped]
    return found[0].why


def test_kept_code_stays_on_its_lines_and_the_rest_is_blank() -> None:
    """Same number of lines; every kept line unchanged; every skipped
    line empty (reports, flake8 and shape comments keep their lines)."""
    text = f"""
        import torch
        import {MISSING}
        print("hello")  # a demo

        class A:
            def f(self):
                return torch.ones(2)  # [2]
        x = A().f()
        """
    reduction = reduce(text)
    before = textwrap.dedent(text).lstrip("\n").split("\n")
    after = reduction.source.text.split("\n")
    assert len(after) == len(before)
    for number, (old, new) in enumerate(zip(before, after), start=1):
        assert new in ("", old), (number, old, new)
    assert after[0] == "import torch"
    assert after[1] == after[2] == "" and after[7] == ""
    assert after[4:7] == before[4:7]
    assert "print" not in reduction.source.text


def test_statements_sharing_a_line_are_cut_apart() -> None:
    """``import os; import missing; y = 1; print(y)``: os stays, and so
    does y (A reads it); the missing import and the print become constants
    that do nothing; the line still parses."""
    reduction = reduce(f"""
        import os; import {MISSING}; y = 1; print(y)
        class A:
            def f(self):
                return y
        """)
    first = reduction.source.text.split("\n")[0]
    assert first == ("import os; " + "0".ljust(len(f"import {MISSING}"))
                     + "; y = 1; " + "0".ljust(len("print(y)")))
    namespace: dict = {}
    exec(compile(reduction.source.text, "reduced", "exec"), namespace)
    assert "os" in namespace and MISSING not in namespace
    assert namespace["A"]().f() == 1


def test_a_statement_that_cannot_be_cut_out_gives_no_reduction() -> None:
    """A dropped statement over several lines that shares a line with a
    kept one cannot be blanked out: the file is graded as it is."""
    source = SourceFile(text="import os; print(1,\n      2)\n\n\nclass A:\n"
                             "    pass\n", path=Path("/tmp/x.py"))
    assert reduce_module(source, ("A",)) is None


def test_nothing_to_leave_out_gives_no_reduction() -> None:
    """Imports, definitions and the values they read only: None."""
    source = SourceFile(text="import torch\nN = 3\n\n\ndef f():\n"
                             "    return N\n", path=Path("/tmp/x.py"))
    assert reduce_module(source, ("f",)) is None


def test_which_imports_can_load_here() -> None:
    """Decided from the import system's metadata, never by running."""
    assert importable("torch") is None
    assert importable("torch.nn.functional") is None
    assert importable("torch.no_such_submodule") is None  # kept: undecidable
    assert importable("os.path") is None
    assert importable("grader.assignments") is None   # the kit: kept
    assert importable(MISSING) == "not installed here"
    assert importable(f"{MISSING}.sub") == "not installed here"
    assert importable("helpers", level=1) == (
        "a relative import (the file is graded on its own)")
    elsewhere = {"readable": ["/nonexistent-root"], "hidden": []}
    assert "sandbox" in importable("numpy", roots=elsewhere)
    assert importable("sys", roots=elsewhere) is None     # built in


def test_values_the_definitions_read_are_kept_with_what_they_read() -> None:
    """A value is kept when a definition reads it (through other values
    too); unread values, and values whose inputs cannot load, are not."""
    reduction = reduce(f"""
        import {MISSING}
        BASE = 2
        SCALE = BASE * 3
        TOKENS = {MISSING}.encode("x")
        UNUSED = 7


        class A:
            def f(self):
                return SCALE, TOKENS
        """)
    text = reduction.source.text
    assert "BASE = 2" in text and "SCALE = BASE * 3" in text
    assert "UNUSED" not in text and "TOKENS =" not in text
    assert why(reduction, "TOKENS =") == (
        f"it reads `{MISSING}`, which is not installed here")
    skip = next(s for s in reduction.skipped if s.code.startswith("TOKENS"))
    assert skip.users == ("A",)
    assert skip.sentence(reduction.source).endswith(
        "; `A` uses it, so it fails without it")
    assert why(reduction, "UNUSED") == (
        "module-level code (not a definition, nor a value one reads)")


def test_a_definition_that_cannot_be_made_here_is_left_out() -> None:
    """Its base, decorator or default reads a name that is not loaded
    before it: the definition alone is skipped, with the reason."""
    reduction = reduce(f"""
        from {MISSING} import Base


        class A(Base):
            pass


        class B(Later):
            pass


        def g(x=UNDEFINED):
            return x


        class Later:
            pass
        """, graded=("A", "B", "g"))
    assert why(reduction, "class A(Base)") == (
        "its definition reads `Base`, which is not installed here")
    assert why(reduction, "class B(Later)") == (
        "its definition reads `Later`, which is defined only further down "
        "(line 16)")
    assert why(reduction, "def g(x=UNDEFINED)") == (
        "its definition reads `UNDEFINED`, which is defined nowhere in the "
        "file")
    assert "class Later:" in reduction.source.text


def test_lazy_annotations_are_not_read_when_the_class_is_made() -> None:
    """With ``from __future__ import annotations`` an annotation naming a
    missing module's type costs nothing; without, the function is left
    out (Python evaluates its annotations when it is defined)."""
    lazy = reduce(f"""
        from __future__ import annotations
        from {MISSING} import Tensor


        def f(x: Tensor) -> Tensor:
            return x
        """, graded=("f",))
    assert "def f(x: Tensor)" in lazy.source.text
    eager = reduce(f"""
        from {MISSING} import Tensor


        def f(x: Tensor) -> Tensor:
            return x
        """, graded=("f",))
    assert "def f" not in eager.source.text


def test_only_the_last_definition_is_kept_and_no_rebinding_runs() -> None:
    """An earlier definition of the same name is skipped as redefined; an
    assignment that rebinds a defined name (``A = swap(A)``) is module-level
    code, not a value."""
    reduction = reduce("""
        class A:
            x = 1


        class A:
            x = 2


        A = print(A)
        """)
    assert why(reduction, "class A:") == (
        "redefined at line 5 (the last definition is graded)")
    namespace: dict = {}
    exec(compile(reduction.source.text, "reduced", "exec"), namespace)
    assert namespace["A"].x == 2


def test_a_star_import_may_bind_anything() -> None:
    """After a kept ``from x import *`` no name can be shown missing."""
    reduction = reduce("""
        from os.path import *
        print("demo")


        class A(Whatever):
            pass
        """)
    assert "class A(Whatever)" in reduction.source.text


def test_users_are_found_through_helpers() -> None:
    """A graded class needs what a helper it calls reads."""
    reduction = reduce(f"""
        import {MISSING}


        def helper():
            return {MISSING}.x


        class A:
            def f(self):
                return helper()


        class B:
            pass
        """, graded=("A", "B"))
    skip = reduction.skipped[0]
    assert skip.kind == "import" and skip.users == ("A",)


def test_a_missing_name_error_says_why() -> None:
    """A probe that failed on a skipped name gets the reason."""
    reduction = reduce(f"""
        from {MISSING} import helper


        class A:
            def f(self):
                return helper()
        """)
    error = {"type": "NameError", "message": "name 'helper' is not defined"}
    said = explain_missing_name('NameError: "name \'helper\' is not '
                                'defined" (at line 6)', error, reduction)
    assert said.endswith(f"(`helper` was not loaded: line 1, `from {MISSING}"
                         f" import helper`, skipped: not installed here)")
    other = {"type": "NameError", "message": "name 'q' is not defined"}
    assert explain_missing_name("p", other, reduction) == "p"
    assert explain_missing_name("p", {"type": "ValueError"}, reduction) \
        == "p"


@pytest.mark.parametrize("count", [3, 20])
def test_the_report_lists_each_skip_and_sums_up_long_demos(
        count: int) -> None:
    """One line per skipped statement; beyond twelve lines of demo code,
    the rest is summed up with where it is."""
    demos = "\n".join(f"print({i})" for i in range(count))
    source = SourceFile(text=f"import {MISSING}\n{demos}\n\n\nclass A:\n"
                             f"    pass\n", path=Path("/tmp/learner.py"))
    reduction = reduce_module(source, ("A",))
    lines = reduction.report(source, "ModuleNotFoundError").split("\n")
    assert lines[0].startswith('"learner.py" could not be loaded as it is '
                               "(ModuleNotFoundError). It was graded on "
                               "what can load here")
    assert lines[1] == (f"  - line 1: `import {MISSING}` skipped: not "
                        f"installed here; nothing graded uses it")
    shown = [line for line in lines if "`print(" in line]
    assert len(shown) == min(count, 12)
    if count > 12:
        assert lines[-1] == ("  - and 8 more statements of module-level "
                             "code (line 14, line 15, line 16 and 5 more)")


def test_a_block_that_may_change_a_value_runs_or_fails_closed() -> None:
    """Red team 14 (m08, principle 7): a top-level block that may rebind
    a value a definition reads runs as the kernel runs it when what it
    reads loads here (``if not FAST: SCALED = False``); when it cannot
    run, the definitions that read that value are not graded on a value
    the run would not have had (fail closed), the others are."""
    reduction = reduce(f"""
        import {MISSING}
        SCALED = True
        FAST = False
        if not FAST:
            SCALED = False
        MASKED = True
        if {MISSING}.flag:
            MASKED = False


        class A:
            def f(self):
                return SCALED


        class B:
            def f(self):
                return MASKED


        class C:
            def f(self):
                return 1
        """, ("A", "B", "C"))
    text = reduction.source.text
    assert "    SCALED = False" in text and "FAST = False" in text
    assert "    MASKED = False" not in text and "class B" not in text
    assert why(reduction, "class B") == (
        "its code reads `MASKED`, which module-level code that cannot run "
        "here may change")
    namespace: dict = {}
    exec(compile(text, "reduced", "exec"), namespace)
    assert namespace["A"]().f() is False and namespace["C"]().f() == 1


def test_a_line_that_raised_is_left_out_even_when_it_is_read() -> None:
    """A top-level statement holding a line at which loading raised is
    left out whatever it reads: a value a definition reads (the
    definition meets its absence when called, as it would have), and a
    block that may change such a value (its readers are not graded on a
    value the run would not have had: fail closed); a definition whose
    body holds the line is kept (the line ran in some call of it)."""
    text = textwrap.dedent("""
        SCALE = float(open("/nowhere").read())
        MASKED = True
        with open("/nowhere") as handle:
            MASKED = handle.read() == "yes"


        def helper():
            return 1 / 0


        class A:
            def f(self):
                return SCALE


        class B:
            def f(self):
                return MASKED


        class C:
            def f(self):
                return helper
        """).lstrip("\n")
    source = SourceFile(text=text, path=Path("/tmp/learner.py"))
    assert reduce_module(source, ("A", "B", "C")) is None  # nothing to drop
    reduction = reduce_module(source, ("A", "B", "C"),
                              raised=frozenset({1, 4, 8}))
    assert reduction is not None
    assert why(reduction, "SCALE = ") == \
        "it raised when the grader loaded the file"
    assert why(reduction, "class B") == (
        "its code reads `MASKED`, which module-level code that cannot run "
        "here may change")
    namespace: dict = {}
    exec(compile(reduction.source.text, "reduced", "exec"), namespace)
    assert "SCALE" not in namespace and "B" not in namespace
    with pytest.raises(NameError):
        namespace["A"]().f()
    assert namespace["C"]().f() is namespace["helper"]
