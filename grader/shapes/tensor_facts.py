"""Which statements produce a tensor, decided from the source alone.

Details: docs/internals.md, `grader.shapes.tensor_facts`.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

#: torch (and torch.nn.functional, torch.linalg) functions whose result is
#: a tensor or a tuple of tensors.
TENSOR_FUNCTIONS = frozenset({
    "abs", "add", "addmm", "arange", "argmax", "argmin", "as_tensor",
    "baddbmm", "bmm", "cat", "clamp", "clone", "concat",
    "concatenate", "cos", "cumsum", "div", "dropout", "einsum", "empty",
    "empty_like", "eq", "exp", "expand_copy", "eye", "flatten", "flip",
    "full", "full_like", "gather", "gelu", "le", "linear", "linspace",
    "log", "log_softmax", "logical_not", "lt", "masked_fill", "matmul",
    "max_pool1d", "maximum", "mean", "minimum", "mm", "movedim", "mul",
    "ne", "neg", "norm", "normalize", "ones", "ones_like", "outer", "pad",
    "permute", "pow", "rand", "rand_like", "randint", "randn",
    "randn_like", "relu", "repeat_interleave", "reshape", "rsqrt",
    "sigmoid", "silu", "sin", "softmax", "sqrt", "square",
    "squeeze", "stack", "std", "sub", "sum", "swapaxes", "swapdims", "t",
    "tanh", "tensor", "tile", "transpose", "tril",
    "triu", "unflatten", "unsqueeze", "var", "where", "zeros",
    "zeros_like",
})
#: Tensor methods whose result is a tensor or a tuple of tensors (their
#: in-place ``name_`` forms too).
TENSOR_METHODS = frozenset({
    "abs", "add", "addmm", "all", "any", "argmax", "argmin", "baddbmm",
    "bmm", "bool", "ceil", "clamp", "clone", "contiguous", "cos",
    "cpu", "cuda", "cumsum", "detach", "diag", "diagonal", "div", "double",
    "eq", "exp", "expand", "expand_as", "fill", "flatten", "flip", "float",
    "floor", "gather", "ge", "gt", "half", "le", "log", "log_softmax",
    "logical_not", "long", "lt", "masked_fill", "matmul", "mean",
    "mm", "movedim", "mul", "ne", "neg", "new_empty", "new_full",
    "new_ones", "new_tensor", "new_zeros", "norm", "permute", "pow",
    "relu", "repeat", "repeat_interleave", "reshape", "reshape_as",
    "rsqrt", "sigmoid", "sin", "softmax", "sqrt", "square",
    "squeeze", "std", "sub", "sum", "swapaxes", "swapdims", "t", "tanh",
    "tile", "to", "transpose", "tril", "triu", "type_as",
    "unflatten", "unsqueeze", "var", "view", "view_as", "zero",
})
#: torch functions and tensor methods whose result is a tuple of tensors:
#: unpacking it gives tensors, the tuple itself is no tensor.
SPLITTING = frozenset({"chunk", "split", "tensor_split", "unbind"})
#: Methods that store a value into a list, set or dict, with the index
#: of the argument stored (``heads.append(t)``, ``d.setdefault(k, t)``).
CONTAINER_METHODS = {"append": 0, "appendleft": 0, "add": 0, "extend": 0,
                     "insert": 1, "update": 0, "setdefault": 1}
#: nn modules whose call on a tensor returns a tensor.
TENSOR_MODULES = frozenset({
    "Dropout", "GELU", "Identity", "LayerNorm", "Linear", "LogSoftmax",
    "ReLU", "Sigmoid", "SiLU", "Softmax", "Tanh",
})
#: Attributes of a tensor that are tensors.
TENSOR_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data"})
_FUNCTION_MODULES = ("torch", "torch.nn.functional", "torch.linalg",
                     "torch.special")
_MAX_DEPTH = 60       # deeper expressions are "in doubt"
_MAX_ROUNDS = 20      # rounds of the name fixpoint


@dataclass(frozen=True)
class Verdict:
    """A value is a tensor ``always``, or when any of ``names`` is one."""

    always: bool = False
    names: frozenset[str] = frozenset()

    def holds(self, tensors: set[str] | frozenset[str]) -> bool:
        """Whether the value is a tensor when ``tensors`` are."""
        return self.always or bool(self.names & tensors)

    def __or__(self, other: Verdict) -> Verdict:
        """Either value being a tensor makes the result one."""
        return Verdict(self.always or other.always, self.names | other.names)


NEVER = Verdict()
ALWAYS = Verdict(always=True)


def _imports(tree: ast.Module
             ) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """Module aliases (``F`` -> ``torch.nn.functional``), tensor functions
    imported from torch by name (local name -> function), and names bound
    to ``torch.nn`` layer classes."""
    modules: dict[str, str] = {}
    functions: dict[str, str] = {}
    layers: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:
                    modules[alias.name.split(".")[0]] = \
                        alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and \
                not node.level:
            for alias in node.names:
                name = alias.asname or alias.name
                full = f"{node.module}.{alias.name}"
                if full in ("torch.nn", "torch.nn.functional",
                            "torch.linalg", "torch.special"):
                    modules[name] = full
                elif (node.module in _FUNCTION_MODULES
                      and alias.name in TENSOR_FUNCTIONS | SPLITTING):
                    functions[name] = alias.name
                elif (node.module in ("torch.nn", "torch.nn.modules")
                      and alias.name in TENSOR_MODULES):
                    layers.add(name)
    return modules, functions, layers


def _dotted(node: ast.expr, modules: dict[str, str]) -> str | None:
    """``F.softmax`` -> ``torch.nn.functional.softmax`` (None if no
    module alias starts it)."""
    parts = []
    depth = 0
    while isinstance(node, ast.Attribute) and depth < _MAX_DEPTH:
        parts.append(node.attr)
        node = node.value
        depth += 1
    if not isinstance(node, ast.Name) or node.id not in modules:
        return None
    return ".".join([modules[node.id]] + parts[::-1])


@dataclass
class _Context:
    modules: dict[str, str]
    function_names: dict[str, str]  # local name -> torch function name
    layer_classes: set[str]
    layers: set[str]          # self.<name> attributes that are layers


class TensorFacts:
    """The static tensor verdicts of one function's statements."""

    def __init__(self, tree: ast.Module,
                 func: ast.FunctionDef | ast.AsyncFunctionDef,
                 cls: ast.ClassDef | None) -> None:
        """Read the imports, the class's layers and the function."""
        modules, functions, layer_classes = _imports(tree)
        self.context = _Context(modules, functions, layer_classes, set())
        if cls is not None:
            self.context.layers = self._layers(cls)
        self.self_name = None
        arguments = [a.arg for a in func.args.posonlyargs + func.args.args]
        if cls is not None and arguments:
            self.self_name = arguments.pop(0)
        self.first = arguments[0] if arguments else None
        self.bindings = self._bindings(func)
        self.tensors = self._fixpoint()

    # -- the class's layers ----------------------------------------------

    def _is_layer_class(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in self.context.layer_classes
        dotted = _dotted(func, self.context.modules)
        return (dotted is not None and dotted.rsplit(".", 1)[0] in
                ("torch.nn", "torch.nn.modules")
                and dotted.rsplit(".", 1)[1] in TENSOR_MODULES)

    def _layers(self, cls: ast.ClassDef) -> set[str]:
        """Attributes ``self.x`` that every assignment in the class makes
        a tensor layer."""
        good: set[str] = set()
        bad: set[str] = set()
        for node in ast.walk(cls):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target])
            for target in targets:
                if not (isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)):
                    continue
                value = node.value
                if (isinstance(value, ast.Call)
                        and self._is_layer_class(value.func)):
                    good.add(target.attr)
                else:
                    bad.add(target.attr)
        return good - bad

    # -- expressions ---------------------------------------------------------

    def verdict(self, node: ast.expr | None, depth: int = 0) -> Verdict:
        """When the value of ``node`` is certainly a tensor."""
        if node is None or depth > _MAX_DEPTH:
            return NEVER
        step = depth + 1
        if isinstance(node, ast.Name):
            return Verdict(names=frozenset([node.id]))
        if isinstance(node, ast.Call):
            return self._call(node, step)
        if isinstance(node, ast.BinOp):
            return self.verdict(node.left, step) | self.verdict(
                node.right, step)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return NEVER
            return self.verdict(node.operand, step)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and \
                not isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.In,
                                             ast.NotIn)):
            return self.verdict(node.left, step) | self.verdict(
                node.comparators[0], step)
        if isinstance(node, ast.Subscript):
            return self.verdict(node.value, step)
        if isinstance(node, ast.Attribute) and node.attr in \
                TENSOR_ATTRIBUTES:
            return self.verdict(node.value, step)
        if isinstance(node, ast.IfExp):
            body = self.verdict(node.body, step)
            other = self.verdict(node.orelse, step)
            return ALWAYS if body.always and other.always else NEVER
        return NEVER

    def _call(self, node: ast.Call, depth: int,
              kinds: frozenset[str] = TENSOR_FUNCTIONS) -> Verdict:
        """A call's verdict; with ``kinds=SPLITTING``, the verdict of the
        elements of the tuple a splitting call returns."""
        methods = TENSOR_METHODS if kinds is TENSOR_FUNCTIONS else kinds
        func = node.func
        if isinstance(func, ast.Name):
            name = self.context.function_names.get(func.id)
            return ALWAYS if name in kinds else NEVER
        if not isinstance(func, ast.Attribute):
            return NEVER
        dotted = _dotted(func, self.context.modules)
        if dotted is not None:
            module, _, name = dotted.rpartition(".")
            return (ALWAYS if module in _FUNCTION_MODULES and name in kinds
                    else NEVER)
        receiver = func.value
        if (isinstance(receiver, ast.Name) and receiver.id == self.self_name
                and func.attr in self.context.layers):
            if kinds is not TENSOR_FUNCTIONS or not node.args:
                return NEVER
            return self.verdict(node.args[0], depth)
        method = func.attr
        if method.endswith("_") and not method.startswith("_"):
            method = method[:-1]
        if method in methods:
            return self.verdict(receiver, depth)
        return NEVER

    def unpacked(self, node: ast.expr) -> Verdict:
        """When the elements of ``node`` are tensors when it is unpacked
        (``a, b = node``): a splitting call, or a tensor (whose rows are
        tensors)."""
        if isinstance(node, ast.Call):
            split = self._call(node, 1, SPLITTING)
            if split != NEVER:
                return split
        return self.verdict(node)

    # -- names ---------------------------------------------------------------

    def _bindings(self, func: ast.FunctionDef | ast.AsyncFunctionDef
                  ) -> dict[str, list[Verdict]]:
        """Every binding of every local name, as a verdict (NEVER for a
        binding whose value cannot be told: loops, ``with``, imports)."""
        bindings: dict[str, list[Verdict]] = {}

        def bind(name: str, verdict: Verdict) -> None:
            bindings.setdefault(name, []).append(verdict)

        if self.first is not None:
            bind(self.first, ALWAYS)
        for argument in (func.args.vararg, func.args.kwarg,
                         *func.args.kwonlyargs):
            if argument is not None:
                bind(argument.arg, NEVER)
        pending: list[ast.AST] = list(func.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef, ast.Lambda)):
                if hasattr(node, "name"):
                    bind(node.name, NEVER)
                continue
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp,
                                 ast.GeneratorExp)):
                continue  # their variables are their own
            if isinstance(node, ast.Assign):
                value = self.verdict(node.value)
                for target in node.targets:
                    self._bind_target(target, node.value, value, bind)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._bind_target(node.target, node.value,
                                  self.verdict(node.value), bind)
            elif isinstance(node, ast.AugAssign):
                if isinstance(node.target, ast.Name):
                    bind(node.target.id, Verdict(names=frozenset(
                        [node.target.id])) | self.verdict(node.value))
            elif isinstance(node, ast.NamedExpr):
                bind(node.target.id, self.verdict(node.value))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.With,
                                   ast.AsyncWith, ast.ExceptHandler,
                                   ast.Import, ast.ImportFrom, ast.Global,
                                   ast.Nonlocal, ast.Delete)):
                for name in _bound_names(node):
                    bind(name, NEVER)
            elif isinstance(node, ast.MatchAs) or isinstance(
                    node, ast.MatchStar):
                if node.name:
                    bind(node.name, NEVER)
            pending.extend(ast.iter_child_nodes(node))
        return bindings

    def _bind_target(self, target: ast.expr, value: ast.expr,
                     verdict: Verdict, bind) -> None:
        if isinstance(target, ast.Name):
            bind(target.id, verdict)
        elif isinstance(target, ast.Starred):
            self._bind_target(target.value, value, NEVER, bind)
        elif isinstance(target, (ast.Tuple, ast.List)):
            elements = (value.elts if isinstance(value, (ast.Tuple,
                                                         ast.List))
                        and len(value.elts) == len(target.elts)
                        and not any(isinstance(e, ast.Starred)
                                    for e in value.elts) else None)
            inner = self.unpacked(value) if elements is None else NEVER
            for index, element in enumerate(target.elts):
                if elements is not None:
                    self._bind_target(element, elements[index],
                                      self.verdict(elements[index]), bind)
                else:
                    self._bind_target(element, value, inner, bind)

    def _fixpoint(self) -> frozenset[str]:
        """Names every binding of which is a tensor (least fixpoint)."""
        tensors: set[str] = set()
        for _ in range(_MAX_ROUNDS):
            # A name may rely on itself (``x = x.unsqueeze(0)``): it cannot
            # be read before its first binding, which must then be a
            # tensor on its own.
            grown = {name for name, verdicts in self.bindings.items()
                     if all(v.holds(tensors | {name}) for v in verdicts)}
            if grown <= tensors:
                break
            tensors |= grown
        return frozenset(tensors)

    # -- statements ----------------------------------------------------------

    def held(self, node: ast.expr | None) -> Verdict:
        """When a list, tuple, set or dict display, or a comprehension,
        holds a tensor (NEVER for any other expression)."""
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return _any(self.verdict(e.value if isinstance(e, ast.Starred)
                                     else e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return _any(self.verdict(v) for v in node.values)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.verdict(node.elt)
        if isinstance(node, ast.DictComp):
            return self.verdict(node.value)
        return NEVER

    def _stored(self, call: ast.Call) -> Verdict:
        """When a call that stores into a container (``heads.append(t)``,
        ``d.update({...})``) stores a tensor."""
        method = call.func.attr if isinstance(call.func,
                                              ast.Attribute) else ""
        where = CONTAINER_METHODS.get(method)
        if where is None or len(call.args) <= where:
            return NEVER
        argument = call.args[where]
        if method in ("extend", "update"):
            return self.held(argument) | self.verdict(argument)
        return self.verdict(argument)

    def statement(self, node: ast.stmt) -> Verdict:
        """When ``node`` produces a tensor (what it assigns, returns, or
        changes in place), or keeps one in a list, tuple or dict."""
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            if value is None:
                return NEVER
            if isinstance(value, (ast.Tuple, ast.List, ast.Set, ast.Dict,
                                  ast.ListComp, ast.SetComp, ast.DictComp,
                                  ast.GeneratorExp)):
                return self.held(value)
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target])
            if any(isinstance(t, (ast.Tuple, ast.List)) for t in targets):
                return self.unpacked(value)
            return self.verdict(value)
        if isinstance(node, ast.AugAssign):
            own = (Verdict(names=frozenset([node.target.id]))
                   if isinstance(node.target, ast.Name) else NEVER)
            return own | self.verdict(node.value)
        if isinstance(node, ast.Return):
            if isinstance(node.value, (ast.Tuple, ast.List)):
                return _any(self.verdict(e) for e in node.value.elts)
            return self.verdict(node.value)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute):
            if node.value.func.attr in CONTAINER_METHODS:
                return self._stored(node.value)
            if node.value.func.attr.endswith("_"):
                return self._call(node.value, 0)
        return NEVER

    def resolved(self, verdict: Verdict) -> Verdict:
        """``verdict`` with the names known statically to be tensors
        folded in (ALWAYS when one of them is)."""
        return ALWAYS if verdict.holds(self.tensors) else verdict


def _any(verdicts) -> Verdict:
    result = NEVER
    for verdict in verdicts:
        result = result | verdict
    return result


def _bound_names(node: ast.AST) -> list[str]:
    """Names a for/with/except/import/global/del binds (or unbinds)."""
    names: list[str] = []
    if isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in node.items
                   if item.optional_vars is not None]
    elif isinstance(node, ast.ExceptHandler):
        return [node.name] if node.name else []
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    elif isinstance(node, ast.Delete):
        targets = node.targets
    else:
        return names
    for target in targets:
        names += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
    return names
