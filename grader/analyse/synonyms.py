"""One spelling per operation: the canonical form in which ``python -m
grader similarity`` compares statements, so that a copy whose calls were
respelt (``torch.matmul(a, b)`` for ``a @ b``, ``permute(0, 2, 1)`` for
``transpose(1, 2)``, ``F.softmax(x, -1)`` for ``torch.softmax(x,
dim=-1)``, a ``while`` counter for ``for ... in range``) reads as the code
it was copied from.

Trusted side: syntax trees only, nothing runs. Used by
:mod:`grader.analyse.executed`; the argument and its limits are in
docs/threat-model.md, "Principle 9".
"""
from __future__ import annotations

import ast
import copy
from collections.abc import Mapping

#: Tensor operations that exist as a method and as a ``torch`` function:
#: the canonical name -> the positional parameters after the tensor,
#: and the defaults of those (by position) that may be left out.
_OPS: dict[str, tuple[tuple[str, ...], dict[int, object]]] = {
    "softmax": (("dim", "dtype"), {}),
    "log_softmax": (("dim", "dtype"), {}),
    "transpose": (("dim0", "dim1"), {}),
    "triu": (("diagonal",), {0: 0}),
    "tril": (("diagonal",), {0: 0}),
    "masked_fill": (("mask", "value"), {}),
    "flatten": (("start_dim", "end_dim"), {0: 0, 1: -1}),
    "unflatten": (("dim", "sizes"), {}),
    "unsqueeze": (("dim",), {}),
    "squeeze": (("dim",), {}),
    "sum": (("dim", "keepdim"), {1: False}),
    "mean": (("dim", "keepdim"), {1: False}),
    "chunk": (("chunks", "dim"), {1: 0}),
    "split": (("split_size", "dim"), {1: 0}),
    "exp": ((), {}),
    "sqrt": ((), {}),
    "matmul": (("other",), {}),
    "div": (("other",), {}),
    "mul": (("other",), {}),
    "add": (("other",), {}),
    "sub": (("other",), {}),
}
#: Operations whose arguments after the tensor are a shape: ``x.view(a,
#: b)``, ``x.view((a, b))`` and ``torch.reshape(x, (a, b))`` alike.
_SHAPED = {"reshape": "shape", "permute": "dims"}
#: Other spellings of the same operation (methods and torch functions).
_RENAMED = {"view": "reshape", "bmm": "matmul", "mm": "matmul",
            "divide": "div", "true_divide": "div", "multiply": "mul",
            "subtract": "sub", "swapaxes": "transpose",
            "swapdims": "transpose"}
#: ``torch`` functions of a list of tensors: name -> parameters, defaults.
_SEQUENCE_OPS = {"cat": (("tensors", "dim"), {1: 0}),
                 "concat": (("tensors", "dim"), {1: 0}),
                 "concatenate": (("tensors", "dim"), {1: 0}),
                 "stack": (("tensors", "dim"), {1: 0})}
#: Modules whose functions are the tensor operations above.
_FUNCTION_MODULES = ("torch", "torch.nn.functional", "torch.special",
                     "torch.Tensor")
#: Factories whose shape may be a tuple or separate arguments.
_FACTORIES = frozenset({"ones", "zeros", "empty", "rand", "randn"})
#: Operations written as an operator.
_OPERATORS = {"matmul": ast.MatMult, "div": ast.Div, "mul": ast.Mult,
              "add": ast.Add, "sub": ast.Sub}
#: Spellings of infinity.
_INFINITY = frozenset({"math.inf", "torch.inf", "numpy.inf", "np.inf"})
_INFINITY_TEXT = frozenset({"inf", "+inf", "infinity", "+infinity"})
_SQRT = frozenset({"math.sqrt", "numpy.sqrt"})
_FLIPPED = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of a chain of attributes over a name (whose id may hold
    dots: the normaliser writes imports as the module they name)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _integer(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) is int):
        return -node.operand.value
    return None


def _number(value: int) -> ast.expr:
    if value < 0:
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


def _infinity(node: ast.AST) -> int:
    """1 for a spelling of +inf, -1 for one of -inf, 0 otherwise."""
    if (isinstance(node, ast.Call) and dotted(node.func) == "float"
            and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        text = node.args[0].value.strip().lower()
        if text in _INFINITY_TEXT:
            return 1
        if text.startswith("-") and text[1:] in _INFINITY_TEXT:
            return -1
    if dotted(node) in _INFINITY:
        return 1
    return 0


def _float(text: str) -> ast.expr:
    return ast.Call(ast.Name("float", ast.Load()), [ast.Constant(text)], [])


def _bare_slice(node: ast.AST) -> bool:
    return (isinstance(node, ast.Slice) and node.lower is None
            and node.upper is None and node.step is None)


def _sort_key(node: ast.AST) -> tuple[int, str]:
    number = _integer(node)
    if number is not None:
        return (number, "")
    return (1 << 30, ast.dump(node))


class Synonyms(ast.NodeTransformer):
    """Rewrites a normalised statement (names already placeholders,
    imports already the module they name) into one spelling per
    operation. ``modules``: the module paths the file imports (what a
    receiver must be for ``m.f(x)`` to be a function, not a method)."""

    def __init__(self, modules: frozenset[str]) -> None:
        self.roots = frozenset(m.split(".")[0] for m in modules) | {"torch"}

    def _module(self, node: ast.AST) -> str | None:
        name = dotted(node)
        if name is not None and name.split(".")[0] in self.roots:
            return name
        return None

    # -- values

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.USub):
            sign = _infinity(node.operand)
            if sign:
                return _float("inf" if sign < 0 else "-inf")
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if _infinity(node) == 1:
            return _float("inf")
        if isinstance(node.ctx, ast.Load) and self._module(
                node.value) is None:
            if node.attr == "mT":
                return self._transpose(node.value, [_number(-2),
                                                    _number(-1)])
            if node.attr == "T":
                return self._transpose(node.value, [_number(0),
                                                    _number(1)])
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        """``x[:, :, i]`` as ``x[..., i]``: leading full slices and an
        ellipsis alike (the number of axes is not known statically)."""
        self.generic_visit(node)
        index = node.slice
        if (isinstance(index, ast.Tuple) and len(index.elts) >= 2
                and all(_bare_slice(e) for e in index.elts[:-1])
                and not _bare_slice(index.elts[-1])):
            node.slice = ast.Tuple([ast.Constant(...), index.elts[-1]],
                                   ast.Load())
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1 and type(node.ops[0]) in _FLIPPED:
            return ast.Compare(node.comparators[0],
                               [_FLIPPED[type(node.ops[0])]()],
                               [node.left])
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        return _commuted(node)

    # -- calls

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if _infinity(node):
            return _float("inf" if _infinity(node) > 0 else "-inf")
        name = dotted(func)
        if name in _SQRT and len(node.args) == 1 and not node.keywords:
            return ast.BinOp(node.args[0], ast.Pow(), ast.Constant(0.5))
        if name == "range":
            return _range(node)
        if (isinstance(func, ast.Call) and dotted(func.func)
                == "torch.nn.Softmax" and len(node.args) == 1
                and not node.keywords):
            # nn.Softmax(dim)(x): x.softmax(dim)
            return self._call(node.args[0], "softmax", func.args,
                              func.keywords)
        if isinstance(func, ast.Attribute) and self._module(
                func.value) is None:
            return self._method(node, func)
        if name is not None and "." in name and \
                name.split(".")[0] in self.roots:
            module, attr = name.rsplit(".", 1)
            return self._function(node, module, attr)
        return node

    def _method(self, node: ast.Call, func: ast.Attribute) -> ast.AST:
        """``x.op(...)``: a tensor's method."""
        op = _RENAMED.get(func.attr, func.attr)
        if op == "contiguous" and not node.args and not node.keywords:
            return func.value
        if op == "t" and not node.args and not node.keywords:
            return self._transpose(func.value, [_number(0), _number(1)])
        if op == "size" and not node.keywords and len(node.args) <= 1:
            shape = ast.Attribute(func.value, "shape", ast.Load())
            return (ast.Subscript(shape, node.args[0], ast.Load())
                    if node.args else shape)
        if op == "where" and len(node.args) == 2 and not node.keywords:
            # x.where(c, y) is torch.where(c, x, y)
            return ast.Call(ast.Attribute(ast.Name("torch", ast.Load()),
                                          "where", ast.Load()),
                            [node.args[0], func.value, node.args[1]], [])
        if op in _OPS or op in _SHAPED:
            return self._call(func.value, op, node.args, node.keywords)
        return node

    def _function(self, node: ast.Call, module: str, attr: str) -> ast.AST:
        """``torch.op(x, ...)``: a function of a module."""
        if module not in _FUNCTION_MODULES:
            return node
        op = _RENAMED.get(attr, attr)
        if op in _SEQUENCE_OPS:
            names, defaults = _SEQUENCE_OPS[op]
            placed = _positional(node.args, node.keywords, names, defaults)
            if placed is None:
                return node
            return ast.Call(ast.Attribute(ast.Name("torch", ast.Load()),
                                          "cat" if op != "stack" else op,
                                          ast.Load()), *placed)
        if op in _FACTORIES and module == "torch":
            return _factory(node)
        if op == "einsum" and module == "torch":
            return self._einsum(node)
        if op not in _OPS and op not in _SHAPED:
            return node
        args, keywords = list(node.args), list(node.keywords)
        tensor = next((k.value for k in keywords if k.arg == "input"), None)
        if tensor is not None:
            keywords = [k for k in keywords if k.arg != "input"]
        elif args and not isinstance(args[0], ast.Starred):
            tensor = args.pop(0)
        else:
            return node
        return self._call(tensor, op, args, keywords)

    def _call(self, tensor: ast.expr, op: str, args: list[ast.expr],
              keywords: list[ast.keyword]) -> ast.expr:
        """The canonical form of ``tensor.op(*args, **keywords)``."""
        if op in _SHAPED:
            return self._shaped(tensor, op, args, keywords)
        names, defaults = _OPS[op]
        found = _positional(args, keywords, names, defaults)
        if found is None:
            return _method_call(tensor, op, args, keywords)
        args, keywords = found
        if op in _OPERATORS and len(args) == 1 and not keywords:
            return _commuted(ast.BinOp(tensor, _OPERATORS[op](), args[0]))
        if op == "transpose" and len(args) == 2 and not keywords:
            return self._transpose(tensor, args)
        return _method_call(tensor, op, args, keywords)

    def _shaped(self, tensor: ast.expr, op: str, args: list[ast.expr],
                keywords: list[ast.keyword]) -> ast.expr:
        keyword = _SHAPED[op]
        if not args and len(keywords) == 1 and keywords[0].arg == keyword:
            args, keywords = [keywords[0].value], []
        if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
            args = list(args[0].elts)
        if keywords or any(isinstance(a, ast.Starred) for a in args):
            return _method_call(tensor, op, args, keywords)
        dims = [_integer(a) for a in args]
        if op == "permute" and None not in dims and \
                sorted(dims) == list(range(len(dims))):  # type: ignore
            moved = [i for i, d in enumerate(dims) if d != i]
            if not moved:
                return tensor
            if len(moved) == 2:
                return self._transpose(tensor, [_number(m) for m in moved])
        return _method_call(tensor, op, args, [])

    def _transpose(self, tensor: ast.expr, dims: list[ast.expr]) -> ast.expr:
        """Swapping two axes, in either order, is one spelling."""
        return _method_call(tensor, "transpose", sorted(dims, key=_sort_key),
                            [])

    def _einsum(self, node: ast.Call) -> ast.AST:
        """A product written with ``einsum`` (``"bij,bjk->bik"``, the
        second operand's last two axes maybe swapped) as ``@``."""
        if (len(node.args) != 3 or node.keywords
                or not isinstance(node.args[0], ast.Constant)
                or not isinstance(node.args[0].value, str)):
            return node
        product = _plain_product(node.args[0].value)
        if product is None:
            return node
        swapped, axes = product
        left, right = node.args[1], node.args[2]
        if swapped:
            right = self._transpose(right, [_number(a) for a in axes])
        return ast.BinOp(left, ast.MatMult(), right)


def _commuted(node: ast.BinOp) -> ast.BinOp:
    """The operands of ``+`` and ``*`` in one order (not of a list or a
    string: their ``+`` does not commute)."""
    if isinstance(node.op, (ast.Add, ast.Mult)) and not any(
            isinstance(side, (ast.List, ast.Tuple, ast.ListComp,
                              ast.JoinedStr))
            or (isinstance(side, ast.Constant)
                and isinstance(side.value, str))
            for side in (node.left, node.right)):
        node.left, node.right = sorted((node.left, node.right),
                                       key=ast.dump)
    return node


def _method_call(tensor: ast.expr, op: str, args: list[ast.expr],
                 keywords: list[ast.keyword]) -> ast.Call:
    return ast.Call(ast.Attribute(tensor, op, ast.Load()), list(args),
                    list(keywords))


def _positional(args: list[ast.expr], keywords: list[ast.keyword],
                names: tuple[str, ...], defaults: Mapping[int, object]
                ) -> tuple[list[ast.expr], list[ast.keyword]] | None:
    """Keyword arguments as positional ones where the signature allows,
    trailing defaults dropped; None when a ``*`` argument hides which is
    which."""
    if any(isinstance(a, ast.Starred) for a in args) or any(
            k.arg is None for k in keywords):
        return None
    args, keywords = list(args), list(keywords)
    while len(args) < len(names):
        given = next((k for k in keywords if k.arg == names[len(args)]),
                     None)
        if given is None:
            break
        keywords.remove(given)
        args.append(given.value)
    while args and len(args) - 1 in defaults and isinstance(
            args[-1], ast.Constant) and args[-1].value == defaults[
                len(args) - 1] and type(args[-1].value) is type(
                    defaults[len(args) - 1]):
        args.pop()
    return args, keywords


def _factory(node: ast.Call) -> ast.Call:
    """``torch.ones((n, m))`` and ``torch.ones(size=(n, m))`` as
    ``torch.ones(n, m)``."""
    args, keywords = list(node.args), list(node.keywords)
    size = next((k for k in keywords if k.arg == "size"), None)
    if not args and size is not None:
        keywords.remove(size)
        args = [size.value]
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = list(args[0].elts)
    return ast.Call(node.func, args, keywords)


def _range(node: ast.Call) -> ast.Call:
    """``range(0, n)`` and ``range(0, n, 1)`` as ``range(n)``."""
    args = list(node.args)
    if len(args) == 3 and _integer(args[2]) == 1:
        args.pop()
    if len(args) == 2 and _integer(args[0]) == 0:
        args.pop(0)
    return ast.Call(node.func, args, node.keywords)


def _plain_product(pattern: str) -> tuple[bool, tuple[int, int]] | None:
    """Whether an einsum pattern is ``a @ b`` (False) or ``a @
    b.transpose(...)`` (True, with the axes), or None."""
    text = pattern.replace(" ", "")
    if text.count("->") != 1 or text.count(",") != 1:
        return None
    inputs, output = text.split("->")
    left, right = inputs.split(",")
    batch = "..." if left.startswith("...") else ""
    if not (right.startswith(batch) and output.startswith(batch)):
        return None
    left, right, output = (s[len(batch):] for s in (left, right, output))
    if not all(s.isalpha() for s in (left, right, output)) or not (
            len(left) == len(right) == len(output) >= 2):
        return None
    prefix, i, j = left[:-2], left[-2], left[-1]
    if right[:-2] != prefix or output[:-2] != prefix:
        return None
    k = output[-1]
    if output[-2] != i or len(set(prefix + i + j + k)) != len(prefix) + 3:
        return None
    rank = len(left)
    axes = (-2, -1) if batch else (rank - 2, rank - 1)
    if right[-2:] == j + k:
        return False, axes
    if right[-2:] == k + j:
        return True, axes
    return None


# --------------------------------------------------------------------------
# Statements


def if_test(node: ast.If) -> ast.expr:
    """The test of an ``if`` as compared: ``if not c: A else: B`` is
    ``if c: B else: A``, and statements are compared as a multiset, so
    the ``not`` goes when there is an ``else`` or the body leaves the
    block (what follows it is then its ``else``)."""
    test = node.test
    if (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
            and (node.orelse or (node.body and isinstance(
                node.body[-1], (ast.Return, ast.Raise, ast.Continue,
                                ast.Break))))):
        return test.operand
    return test


def counter_loops(body: list[ast.stmt]) -> list[tuple[ast.stmt, ast.stmt]]:
    """``body`` with each counter loop (``i = 0`` / ``while i < n:`` ...
    ``i += 1``) as the ``for i in range(n):`` it spells, paired with the
    statement it came from (what ownership is judged on)."""
    found: list[tuple[ast.stmt, ast.stmt]] = []
    skip: set[int] = set()
    for index, node in enumerate(body):
        loop = (_counter_loop(body[index - 1], node, body[index + 1:])
                if index else None)
        if loop is not None:
            if found and found[-1][1] is body[index - 1]:
                found.pop()
            skip.add(index - 1)
            found.append((loop, node))
        elif index not in skip:
            found.append((node, node))
    return found


def _counter_loop(init: ast.stmt, node: ast.stmt,
                  rest: list[ast.stmt]) -> ast.For | None:
    if not (isinstance(node, ast.While) and not node.orelse
            and isinstance(init, ast.Assign) and len(init.targets) == 1
            and isinstance(init.targets[0], ast.Name)
            and _integer(init.value) is not None):
        return None
    name = init.targets[0].id
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    if isinstance(test.ops[0], ast.Lt) and _is_name(test.left, name):
        bound = test.comparators[0]
    elif isinstance(test.ops[0], ast.Gt) and _is_name(
            test.comparators[0], name):
        bound = test.left
    else:
        return None
    if (not node.body or not _increments(node.body[-1], name)
            or _stores(node.body[:-1], name) or _reads(bound, name)
            or _continues(node.body) or _read_after(rest, name)):
        return None
    start = _integer(init.value)
    args = [bound] if start == 0 else [init.value, bound]
    loop = ast.For(target=ast.Name(name, ast.Store()),
                   iter=ast.Call(ast.Name("range", ast.Load()), args, []),
                   body=node.body[:-1] or [ast.Pass()], orelse=[])
    ast.copy_location(loop, node)
    loop.lineno = min(init.lineno, node.lineno)
    return loop


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _increments(node: ast.stmt, name: str) -> bool:
    """``i += 1``, ``i = i + 1`` or ``i = 1 + i``."""
    if (isinstance(node, ast.AugAssign) and _is_name(node.target, name)
            and isinstance(node.op, ast.Add)):
        return _integer(node.value) == 1
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
            and _is_name(node.targets[0], name)
            and isinstance(node.value, ast.BinOp)
            and isinstance(node.value.op, ast.Add)):
        sides = (node.value.left, node.value.right)
        return any(_is_name(a, name) and _integer(b) == 1
                   for a, b in (sides, sides[::-1]))
    return False


def _stores(body: list[ast.stmt], name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name
               and not isinstance(n.ctx, ast.Load)
               for node in body for n in ast.walk(node))


def _reads(node: ast.AST, name: str) -> bool:
    return any(_is_name(n, name) for n in ast.walk(node))


def _continues(body: list[ast.stmt]) -> bool:
    """A ``continue`` of this loop (not of a loop inside it) would skip
    the increment; a nested function is not searched either."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Continue):
            return True
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While,
                             ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.Lambda, ast.ClassDef)):
            stack.extend(node.orelse if isinstance(
                node, (ast.For, ast.AsyncFor, ast.While)) else [])
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _read_after(rest: list[ast.stmt], name: str) -> bool:
    """Whether the counter's value after the loop is read (a ``for``
    leaves another value in it) before it is assigned anew."""
    for node in rest:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and _is_name(node.targets[0], name)):
            return _reads(node.value, name)
        if _reads(node, name):
            return True
    return False


def canonical(node: ast.AST, modules: frozenset[str]) -> ast.AST:
    """``node`` (a normalised statement) in one spelling per operation;
    ``node`` itself is not changed."""
    return Synonyms(modules).visit(copy.deepcopy(node))
