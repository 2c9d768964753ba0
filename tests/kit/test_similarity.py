"""Principle 9 of issue 24: similarity sees through refactoring
(docs/threat-model.md, "Principle 9").

A class of independent solutions of ``multi_head_attention`` (one file of
each family of the kit's corpus: the mutation corpora are one file with
one statement changed, copies by construction, so only one of each is a
student here) and six disguised copies from ``hostile/similarity/``,
each of a different classmate and in its own style: helpers extracted and
renamed; reordered, renamed and reformatted; a helper class, lambdas and a
submodule with one product written with einsum; ``while`` helpers with
every call respelt by an API synonym; private methods with calls in the
other form (function for method, keyword for positional); every method
as a ``torch`` function with sizes in a tuple; methods moved out of their
classes into module-level functions the classes bind by assignment
(``forward = _forward``, ``__init__`` too, or ``Class.forward = alias``
after the class). Each copy pair must rank above every unrelated pair,
and the report must mark the shared lines (the copy's helpers and
respelt calls too); an honest file whose classes bind module-level
functions too ranks below every copy. The normalisation of API synonyms
is tested on pairs of snippets (``grader.analyse.synonyms``).
Static: nothing runs, no sandbox (a few seconds).
"""
from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from grader.routes.similarity import (OwnCode, Pair, SimilarityOptions,
                                      rank_class, report_html)

KIT = Path(__file__).resolve().parents[2]
SUBMISSIONS = KIT / "tests" / "kit" / "submissions"
COPIES = KIT / "tests" / "kit" / "hostile" / "similarity"

#: Independent solutions: student -> file of the corpus.
CLASS = {
    "amy": "correct_matmul.py",
    "ben": "correct_einsum.py",
    "cat": "correct_flat_heads.py",
    "dan": "correct_head_loop.py",
    "eve": "correct_seed_notebook.py",
    "fay": "diagnoses/correct_where_head_loop.py",
    "gus": "diagnoses/heads_not_split_loop.py",
}
#: The copies: student -> (file, the classmate copied).
COPIED = {
    "hal": ("copy_helpers_renamed.py", "eve"),
    "ida": ("copy_reordered_reformatted.py", "cat"),
    "jon": ("copy_helper_class_lambdas.py", "amy"),
    "max": ("copy_api_synonyms.py", "dan"),
    "ned": ("copy_method_forms.py", "fay"),
    "oli": ("copy_function_forms.py", "cat"),
    "pia": ("copy_dead_statements.py", "ben"),
    "rex": ("copy_bound_forward.py", "amy"),
    "sam": ("copy_bound_init_forward.py", "dan"),
    "tom": ("copy_bound_after_class.py", "gus"),
}
#: Independent solutions of ``hostile/similarity/`` (controls): student ->
#: file.
HONEST = {
    "uma": "honest_bound_helper.py",
}


@pytest.fixture(scope="module")
def ranked(tmp_path_factory):
    """Every pair of the class, ranked, and the HTML report of the
    command (run in this process: it is static)."""
    folder = tmp_path_factory.mktemp("class")
    for student, name in CLASS.items():
        shutil.copy(SUBMISSIONS / name, folder / f"{student}.py")
    for student, (name, _) in COPIED.items():
        shutil.copy(COPIES / name, folder / f"{student}.py")
    for student, name in HONEST.items():
        shutil.copy(COPIES / name, folder / f"{student}.py")
    # Two who are not compared, for their true reasons (issue 30).
    shutil.copy(SUBMISSIONS / "broken_syntax_error.py", folder / "kim.py")
    shutil.copy(KIT / "transformer_lm" / "modeling_attention.py",
                folder / "lea.py")
    out = folder.parent / "similarity.html"
    options = SimilarityOptions(folder, out, "multi_head_attention", 200)
    result = rank_class(options)
    assert result.compared == len(CLASS) + len(COPIED) + len(HONEST)
    page = report_html(result.pairs, result.compared, result.students,
                       result.assignment, result.skipped)
    return result.pairs, page


def _pair(pairs: list[Pair], one: str, two: str) -> Pair:
    return next(p for p in pairs
                if {p.left.student, p.right.student} == {one, two})


def _shared(pair: Pair, student: str) -> list[str]:
    side = 0 if pair.left.student == student else 1
    code: OwnCode = (pair.left, pair.right)[side]
    return [code.lines[i].strip() for i in pair.shared[side]]


@pytest.mark.parametrize("copy", sorted(COPIED))
def test_a_disguised_copy_ranks_above_every_unrelated_pair(ranked, copy):
    pairs, _ = ranked
    original = COPIED[copy][1]
    pair = _pair(pairs, copy, original)
    # Related: a copy and its original, two copies of one original.
    copies = {frozenset((c, o)) for c, (_, o) in COPIED.items()} | {
        frozenset((c, d)) for c, (_, o) in COPIED.items()
        for d, (_, e) in COPIED.items() if c != d and o == e}
    unrelated = [p for p in pairs
                 if frozenset((p.left.student, p.right.student))
                 not in copies]
    students = len(CLASS) + len(COPIED) + len(HONEST)
    assert len(unrelated) == students * (students - 1) // 2 - len(copies)
    best = max(unrelated, key=lambda p: p.rank)
    assert pair.rank > best.rank + 0.2, (pair.shares, best.left.student,
                                         best.right.student, best.shares)
    assert pair.rank >= 0.9


def test_the_report_marks_the_shared_lines_helpers_included(ranked):
    pairs, page = ranked
    helpers = _pair(pairs, "hal", "eve")
    assert ("return layer(inp).view(nb, length, n_parts, width)"
            ".transpose(1, 2)") in _shared(helpers, "hal")
    assert ("return raw.masked_fill(upper[None, None, :, :], "
            "float('-inf'))") in _shared(helpers, "hal")
    assert ("k = self.k(x).view(bs, seq, self.num_heads, self.head_size)"
            ".transpose(1, 2)") in _shared(helpers, "eve")
    reordered = _pair(pairs, "ida", "cat")
    assert 'logits = logits.masked_fill(upper, float("-inf"))' in _shared(
        reordered, "ida")
    assert "q = q.transpose(1, 2).flatten(0, 1)" in _shared(reordered, "cat")
    lambdas = _pair(pairs, "jon", "amy")
    shared = _shared(lambdas, "jon")
    assert "o.view(b, n, s, d).transpose(1, 2).reshape(b, s, -1))" in shared
    assert "return t.transpose(1, 2).reshape(b * n, s, d)" in shared
    # The one product written with einsum reads as the ``@`` it spells.
    assert ('scores = torch.einsum("bid,bjd->bij", qh, kh) / self.scale'
            in shared)
    respelt = _shared(_pair(pairs, "max", "dan"), "max")
    assert ("out.append(torch.matmul(a[..., part], b[..., part]"
            ".permute(0, 2, 1)))") in respelt
    assert "while i < n:" in respelt and "i += 1" in respelt
    assert ('sc = sc.masked_fill(upper, -float("inf"))  '
            '# [bs, heads, seq, seq]') in respelt
    assert "if not return_attention:" not in respelt
    forms = _shared(_pair(pairs, "ned", "fay"), "ned")
    assert ("weights = softmax(matmul(query, key.t()) / self.scale, "
            "dim=-1)") in forms
    assert ("att = self.mix(att.transpose(2, 1).contiguous()"
            ".view(bs, seq, -1))") in forms
    assert "logits = torch.where(allowed, logits, -math.inf)" in forms
    functions = _shared(_pair(pairs, "oli", "cat"), "oli")
    assert "logits = qq.bmm(kk.permute(0, 2, 1)).div(self.scale)" in functions
    assert "logits = torch.masked_fill(logits, hide, -math.inf)" in functions
    # The padded copy: its copied lines are marked, its pads are not.
    padded = _shared(_pair(pairs, "pia", "ben"), "pia")
    assert "weights = (sim / self.scale).softmax(-1)  # [bs, seq, seq]" \
        in padded
    assert "assert qq is not None" not in padded
    assert "spare = weights.sum()  # []" not in padded
    # The HTML report marks them, in the pair's section, escaped.
    assert ("<mark>    return raw.masked_fill(upper[None, None, :, :], "
            "float(&#x27;-inf&#x27;))</mark>") in page
    assert "18 of 20 students had code of their own" in page
    assert "not a verdict" in page and "similar by nature" in page
    assert ("kim: SelfAttention: the code does not parse (SyntaxError at "
            "line 73: &#x27;(&#x27; was never closed)") in page
    assert "lea: no code of their own beyond the stub&#x27;s" in page


def test_a_method_bound_from_a_module_function_is_compared(ranked):
    """A class that binds a module-level function as a method (in its
    body, ``forward = _sa_forward``, or after it, ``Class.forward =
    alias``) is compared on that function, its helpers inlined; the
    stub's given code of the method (looked up by the method's name) is
    nobody's."""
    pairs, _ = ranked
    pair = _pair(pairs, "rex", "amy")
    shared = _shared(pair, "rex")
    assert ("probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, "
            "dim=-1)") in shared
    assert ("k = k.transpose(1, 2).reshape(bs * self.num_heads, seq, "
            "self.head_size)") in shared
    assert "att = att.transpose(1, 2).reshape(bs, seq, -1)" in shared
    side = pair.left if pair.left.student == "rex" else pair.right
    lines = [line.strip() for line in side.lines]
    assert "bs, seq, _ = x.shape" not in lines
    assert "probs = att = None  # both are set by Task 2.3" not in lines
    both = _shared(_pair(pairs, "sam", "dan"), "sam")
    assert "self.q = nn.Linear(input_size, hidden)" in both
    assert "weights = torch.softmax(qq @ kk.T / self.scale, dim=-1)" in both
    assert "pieces.append(probs[:, i] @ vv[:, :, span])" in both
    after = _shared(_pair(pairs, "tom", "gus"), "tom")
    assert "logits = torch.bmm(a, b.transpose(1, 2)) / me.scale" in after
    # The helper bound as a method after the class, called as me._head().
    assert "return w @ c[:, :, first:first + me.head_size]" in after
    assert "w = torch.softmax(a @ b.transpose(1, 2) / me.scale, dim=-1)" \
        in after


def test_an_honest_file_with_bound_methods_ranks_below_every_copy(ranked):
    """The control: an independent solution whose classes bind
    module-level functions (``forward = _attend``, a helper ``_heads =
    _split_heads`` called as ``self._heads``) is compared on them, and
    ranks below every real copy."""
    pairs, _ = ranked
    copies = [_pair(pairs, copy, original)
              for copy, (_, original) in COPIED.items()]
    for student in HONEST:
        mine = [p for p in pairs if student in (p.left.student,
                                                p.right.student)]
        best = max(mine, key=lambda p: p.rank)
        worst = min(copies, key=lambda p: p.rank)
        assert best.rank + 0.2 < worst.rank, (
            best.left.student, best.right.student, best.shares,
            worst.left.student, worst.right.student, worst.shares)
        side = best.left if best.left.student == student else best.right
        lines = [line.strip() for line in side.lines]
        assert ("return t.unflatten(-1, (self.num_heads, self.head_size))"
                ".movedim(2, 1)") in lines
        assert "weights = (query @ self.k(x).mT).softmax(-1)" in lines


# One refactoring at a time, of the same SelfAttention.forward: what is
# compared (the multiset of normalised statements) does not change.
FORWARD = '''\
        scores = torch.bmm(q, k.transpose(1, 2)) / self.scale
        # [batch_size, seq_len, seq_len]
        probs = torch.softmax(scores, dim=-1)  # [batch_size, seq_len, seq_len]
        return torch.bmm(probs, v)  # [batch_size, seq_len, hidden]
'''
MIX = '''\
        s = torch.bmm(a, b.transpose(1, 2)) / self.scale
        p = torch.softmax(s, dim=-1)
        return torch.bmm(p, c)
'''
REFACTORED = {
    "a method of the class": (
        "        return self._mix(q, k, v)\n\n"
        "    def _mix(self, a, b, c):\n" + MIX, None),
    "a method of a base class of the file": (
        "        return self._mix(q, k, v)\n",
        ("class SelfAttention(nn.Module):",
         "class Base(nn.Module):\n    def _mix(self, a, b, c):\n"
         + MIX + "\n\nclass SelfAttention(Base):")),
    "a static method of a helper class": (
        "        return Ops.mix(q, k, v, self.scale)\n",
        ("class SelfAttention(nn.Module):",
         "class Ops:\n    @staticmethod\n    def mix(a, b, c, d):\n"
         + MIX.replace("self.scale", "d")
         + "\n\nclass SelfAttention(nn.Module):")),
    "a module-level lambda": (
        "        scores = score(q, k, self.scale)\n"
        "        probs = torch.softmax(scores, dim=-1)\n"
        "        return torch.bmm(probs, v)\n",
        ("class SelfAttention(nn.Module):",
         "score = lambda a, b, d: torch.bmm(a, b.transpose(1, 2)) / d"
         "  # noqa\n\n\nclass SelfAttention(nn.Module):")),
    "an alias of an attribute": (
        "        d = self.scale\n" + FORWARD.replace("/ self.scale", "/ d"),
        None),
    "the instance not named self": (
        FORWARD.replace("self.", "me."),
        ("    def forward(self, x: torch.Tensor) -> torch.Tensor:",
         "    def forward(me, x: torch.Tensor) -> torch.Tensor:")),
    "an instance of a helper class": (
        "        return OPS.mix(q, k, v, self.scale)\n",
        ("class SelfAttention(nn.Module):",
         "class Ops:\n    def mix(this, a, b, c, d):\n"
         + MIX.replace("self.scale", "d")
         + "\n\nOPS = Ops()\n\n\nclass SelfAttention(nn.Module):")),
    "a nested function, two statements joined": (
        "        def weights(a, b):\n"
        "            return torch.softmax(torch.bmm(a, b.transpose(1, 2))"
        " / self.scale,\n"
        "                                 dim=-1)\n"
        "        return torch.bmm(weights(q, k), v)\n", None),
    "an expression split into temporaries": (
        "        kt = k.transpose(1, 2)\n"
        "        product = torch.bmm(q, kt)\n"
        "        scores = product / self.scale\n"
        + FORWARD.split("\n", 2)[2], None),
    "statements reordered": (
        FORWARD, ("        k = self.k(x)  # [batch_size, seq_len, hidden]\n",
                  "")),
    "statements that compute nothing between the steps": (
        "        assert q is not None\n"
        "        unused = k.shape\n"
        "        scores = torch.bmm(q, k.transpose(1, 2)) / self.scale\n"
        "        scores  # [batch_size, seq_len, seq_len]\n"
        "        pass\n"
        "        if False:\n"
        "            scores = scores * 2\n"
        "        for _ in range(0):\n"
        "            scores = scores + 0\n"
        "        probs = torch.softmax(scores, dim=-1)\n"
        "        total = probs.sum()\n"
        "        spare = total * 2\n"
        "        return torch.bmm(probs, v)\n", None),
}


def _statements(text: str) -> Counter:
    from grader.locate.source import SourceFile
    from grader.routes.similarity import own_code
    from grader.rubric import get_assignment

    assignment = get_assignment("multi_head_attention")
    source = SourceFile(text, Path("student.py"))
    code = own_code("x", assignment,
                    {task.id: source for task in assignment.tasks})
    return Counter(tokens for tokens, _ in code.units)


@pytest.mark.parametrize("how", sorted(REFACTORED))
def test_one_refactoring_changes_nothing_compared(how):
    original = (SUBMISSIONS / "correct_bmm.py").read_text(encoding="utf-8")
    assert FORWARD in original
    body, change = REFACTORED[how]
    text = original.replace(FORWARD, body)
    if change is not None:
        assert change[0] in text
        text = text.replace(*change)
        if how == "the instance not named self":
            for name in "qkv":
                line = f"        {name} = self.{name}(x)  # [batch_size"
                assert text.count(line) == 1
                text = text.replace(line, line.replace("self.", "me."))
        if how == "statements reordered":  # k after v
            text = text.replace(
                "        v = self.v(x)  # [batch_size, seq_len, hidden]\n",
                "        v = self.v(x)  # [batch_size, seq_len, hidden]\n"
                "        k = self.k(x)\n", 1)
    assert text != original
    compile(text, "student.py", "exec")
    assert _statements(text) == _statements(original)


# SelfAttention.forward of correct_bmm.py moved out of the class and bound
# to it by name: where its ``def`` goes and what it is called, the
# class body's binding, the module's after the class.
BOUND = {
    "in the class body": (
        "before", "_forward", "\n    forward = _forward\n", ""),
    "through a module-level alias": (
        "before", "_forward", "\n    forward = run\n", ""),
    "after the class, the instance renamed": (
        "after", "_forward", "", "\n\nSelfAttention.forward = _forward\n"),
    "a method of another class of the file": (
        "class", "forward", "\n    forward = _Impl.forward\n", ""),
}


@pytest.mark.parametrize("how", sorted(BOUND))
def test_a_method_bound_by_name_changes_nothing_compared(how):
    """The function a class holds under a graded method's name is what is
    compared, wherever its ``def`` is and whatever it is called (compared
    as in test_one_refactoring_changes_nothing_compared)."""
    import textwrap

    original = (SUBMISSIONS / "correct_bmm.py").read_text(encoding="utf-8")
    header = "\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
    start = original.index(header)
    end = original.index("        # YOUR CODE ENDS HERE\n", start)
    method = original[start:end + len("        # YOUR CODE ENDS HERE\n")]
    assert FORWARD in method
    where, name, inside, after = BOUND[how]
    function = textwrap.dedent(method.lstrip("\n")).replace(
        "def forward", f"def {name}")
    if how.endswith("the instance renamed"):
        function = function.replace("self", "me")
    if where == "class":
        function = "class _Impl:\n" + textwrap.indent(function, "    ")
    if how == "through a module-level alias":
        function += "\n\nrun = _forward\n"
    text = original.replace(method, inside)
    head = "class SelfAttention(nn.Module):"
    tail = "\n\nclass MultiHeadSelfAttention(nn.Module):"
    if where == "after":
        text = text.replace(tail, "\n\n" + function + after + tail)
    else:
        text = text.replace(head, function + "\n\n" + head)
    assert text.count(header) == (where == "class")  # _Impl's
    compile(text, "student.py", "exec")
    assert _statements(text) == _statements(original)


@pytest.mark.parametrize("line", [
    "        unused = scores.mul_(2)\n",   # in place: the scores change
    "        self.kept = scores\n",        # state the object keeps
    "        if True:\n            scores = scores * 2\n",
    "        for _ in range(1):\n            scores = scores * 2\n",
])
def test_a_statement_that_computes_is_never_left_out(line):
    """Only what computes nothing is left out: an in-place method whose
    result is unread, an attribute set, a branch that runs, a loop that
    runs once each change the statements compared."""
    original = (SUBMISSIONS / "correct_bmm.py").read_text(encoding="utf-8")
    lines = FORWARD.splitlines(keepends=True)
    text = original.replace(FORWARD, lines[0] + line + "".join(lines[1:]))
    compile(text, "student.py", "exec")
    assert _statements(text) != _statements(original)


def test_code_too_deep_to_compare_is_a_reason_not_a_crash():
    """A method the comparison cannot walk (a chain of 300 calls) is
    that task's reason; the student's other task is still compared."""
    from grader.locate.source import SourceFile
    from grader.routes.similarity import own_code
    from grader.rubric import get_assignment

    text = (KIT / "solutions" / "modeling_attention.py").read_text(
        encoding="utf-8")
    assert "        return probs @ v\n" in text
    text = text.replace("        return probs @ v\n",
                        "        return (probs @ v)" + ".contiguous()" * 300
                        + "\n", 1)
    assignment = get_assignment("multi_head_attention")
    source = SourceFile(text, Path("deep.py"))
    # Python's default limit (a library imported earlier in this process,
    # e.g. torch._dynamo, may have raised it).
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        code = own_code("deep", assignment,
                        {task.id: source for task in assignment.tasks})
    finally:
        sys.setrecursionlimit(limit)
    assert code.problems == ["SelfAttention: the code is nested too deeply "
                             "to compare (RecursionError)"]
    assert {code.origin[i][0] for _, indexes in code.units
            for i in indexes} == {"task2"}


# API synonyms (grader.analyse.synonyms): each pair reads alike once
# normalised (imports already written as the module they name).
MODULES = frozenset({"torch", "torch.nn", "torch.nn.functional", "math"})
SAME = [
    ("torch.matmul(a, b)", "a @ b"),
    ("torch.bmm(a, b)", "a.matmul(b)"),
    ("a.bmm(b)", "a @ b"),
    ("torch.einsum('bij,bjk->bik', a, b)", "a @ b"),
    ("torch.einsum('bid,bjd->bij', a, b)", "a @ b.transpose(1, 2)"),
    ("torch.einsum('...id,...jd->...ij', a, b)", "a @ b.mT"),
    ("x.permute(0, 2, 1)", "x.transpose(1, 2)"),
    ("x.permute(0, 2, 1, 3)", "torch.transpose(x, 2, 1)"),
    ("x.swapaxes(-1, -2)", "x.mT"),
    ("x.T", "x.t()"),
    ("x.permute(0, 1, 2)", "x"),
    ("torch.nn.functional.softmax(x, -1)", "torch.softmax(x, dim=-1)"),
    ("x.softmax(dim=-1)", "torch.nn.Softmax(dim=-1)(x)"),
    ("torch.div(x, s)", "x / s"),
    ("torch.Tensor.softmax(x, -1)", "x.softmax(-1)"),
    ("x.where(m, y)", "torch.where(m, x, y)"),
    ("torch.unflatten(x, dim=-1, sizes=(h, d))", "x.unflatten(-1, (h, d))"),
    ("x.mul(s)", "s * x"),
    ("torch.sub(a, b)", "a - b"),
    ("-float('inf')", "float('-inf')"),
    ("-math.inf", "float('-inf')"),
    ("torch.ones(n, n).triu(diagonal=1)", "torch.triu(torch.ones((n, n)), 1)"),
    ("torch.tril(m, diagonal=0)", "m.tril()"),
    ("torch.cat(xs, dim=-1)", "torch.concat(xs, -1)"),
    ("torch.stack(xs, dim=0)", "torch.stack(tensors=xs)"),
    ("x.view(a, b, -1)", "torch.reshape(x, (a, b, -1))"),
    ("x.contiguous().view(a, -1)", "x.reshape((a, -1))"),
    ("torch.flatten(x, start_dim=0, end_dim=1)", "x.flatten(0, 1)"),
    ("x.size(0)", "x.shape[0]"),
    ("x[:, :, i]", "x[..., i]"),
    ("range(0, n)", "range(n)"),
    ("n > i", "i < n"),
    ("math.sqrt(d)", "d ** 0.5"),
]
DIFFERENT = [
    ("x.transpose(1, 2)", "x.transpose(0, 1)"),
    ("x.transpose(1, 2)", "x.transpose(-2, -1)"),
    ("x.permute(0, 2, 3, 1)", "x.transpose(1, 3)"),
    ("torch.einsum('bij,bkj->bki', a, b)", "a @ b.transpose(1, 2)"),
    ("a @ b", "b @ a"),
    ("torch.sub(a, b)", "b - a"),
    ("x / s", "x * s"),
    ("x.softmax(-1)", "x.softmax(1)"),
    ("x.log_softmax(-1)", "x.softmax(-1)"),
    ("float('inf')", "float('-inf')"),
    ("torch.ones(n, n).triu(1)", "torch.ones(n, n).tril(1)"),
    ("torch.div(x, s, rounding_mode='floor')", "x / s"),
    ("x.flatten(0, 1)", "x.flatten(1)"),
    ("[a] + b", "b + [a]"),
    ("x[:, i]", "x[i]"),
]


def _canonical(text: str) -> str:
    import ast

    from grader.analyse.synonyms import canonical

    return ast.unparse(canonical(ast.parse(text, mode="eval"), MODULES))


@pytest.mark.parametrize("one, two", SAME)
def test_api_synonyms_normalise_alike(one, two):
    assert _canonical(one) == _canonical(two)


@pytest.mark.parametrize("one, two", DIFFERENT)
def test_different_computations_stay_different(one, two):
    assert _canonical(one) != _canonical(two)


# Statement forms, in SelfAttention.forward of correct_bmm.py (compared as
# in test_one_refactoring_changes_nothing_compared).
LOOPS = {
    "for": "        for i in range(3):\n            q = q + 1\n",
    "while": "        i = 0\n        while i < 3:\n            q = q + 1\n"
             "            i += 1\n",
    "while, reversed test": "        i = 0\n        while 3 > i:\n"
                            "            q = 1 + q\n            i = i + 1\n",
}


def _with(extra: str) -> Counter:
    original = (SUBMISSIONS / "correct_bmm.py").read_text(encoding="utf-8")
    text = original.replace(FORWARD, extra + FORWARD)
    assert text != original
    compile(text, "student.py", "exec")
    return _statements(text)


def test_a_counter_loop_reads_as_its_for_loop():
    found = {how: _with(body) for how, body in LOOPS.items()}
    assert found["while"] == found["for"] == found["while, reversed test"]
    # A loop whose counter is read after it (a for leaves another value),
    # or that skips the increment with continue, is not rewritten.
    read_after = LOOPS["while"] + "        q = q + i\n"
    assert _with(read_after) != _with(LOOPS["for"] + "        q = q + i\n")
    skipping = ("        i = 0\n        while i < 3:\n"
                "            if q is None:\n                continue\n"
                "            q = q + 1\n            i += 1\n")
    assert _with(skipping) != _with(
        "        for i in range(3):\n            if q is None:\n"
        "                continue\n            q = q + 1\n")


def test_a_negated_test_with_an_else_reads_as_the_branches_swapped():
    plain = _with("        if q is None:\n            q = k\n"
                  "        else:\n            q = v\n")
    negated = _with("        if not q is None:\n            q = v\n"
                    "        else:\n            q = k\n")
    assert plain == negated
    # Without an else (nor an exit), `not` is the computation.
    assert _with("        if q is None:\n            q = k\n") != _with(
        "        if not q is None:\n            q = k\n")
