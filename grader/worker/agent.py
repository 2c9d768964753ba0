"""The sandbox agent: the grader's only code that runs beside a submission.

Details: docs/internals.md, `grader.worker.agent`.
"""
from __future__ import annotations

import os
import sys
from operator import itemgetter
from typing import Any, Callable

# The result channel is moved to this descriptor, far from the ones a
# submission's own files get.
RESULT_FD = 1019
MAX_EXECUTIONS = 64
# What reading one statement may cost per call: a read costs 1 plus the
# container values it scans (read again incrementally: the values read
# and those compared, HELD_COMPARE a unit); past it, executions are
# counted as left out (fails closed). Every probe records, so reading
# must stay bounded; an honest loop stays below (docs/threat-model.md,
# principle 6).
MAX_READS = 1 << 18
# A list, tuple or dict a statement keeps tensors in, read by the walker
# (any container that is not a tree of exact lists, tuples and dicts:
# MAX_HELD_TREE below): the elements read (nested ones included), the
# tensor shapes recorded (then only new ones), and the nesting followed;
# past any of them the record says so and the statement's comment
# cannot be verified (it fails closed).
MAX_HELD_SCAN = 4096
MAX_HELD = 64  # grader.wire.MAX_HELD_SHAPES
# A container of more values than this (nested ones included) that a
# statement read before is read again incrementally: only the values that
# are not the very objects it held at the statement's last read are read;
# the rest are compared by identity at C speed, and HELD_COMPARE of them
# cost 1 of the read budget (docs/threat-model.md, principle 6).
HELD_INCREMENTAL = 64
HELD_COMPARE = 128
# The most values (nested ones included) a tree of exact lists, tuples
# and dicts may hold to be read by levels, in C (and read again
# incrementally); a bigger one, or any other container, is read by the
# walker, up to MAX_HELD_SCAN (past it, it fails closed). Every value is
# charged to the read budget as above, so one read may go past the
# budget by at most this (docs/threat-model.md, principle 6, "The
# scan's bound, lifted for exact trees").
MAX_HELD_TREE = 1 << 16
CHOSEN_BY_DATA = "choose by data"  # grader.wire.CHOSEN_BY_DATA
VALUES_OUT = "take values out of torch"  # grader.wire.VALUES_OUT
REFUSED_COMPILE = "compile (refused)"  # grader.wire.REFUSED_COMPILE
REFUSED_THREAD = "start a thread"  # grader.wire.REFUSED_THREAD
# The record of a value the tracer cannot read without running code of
# its own (a property, a __getattribute__ of Python's, a name it cannot
# find): the statement's comment is not verified (it fails closed).
UNREAD_RECORD = "unread"  # grader.wire.UNREAD_RECORD
# The record of a tensor with no fixed shape (a nested tensor whose parts
# differ in size): no bracketed shape can claim it, so the statement's
# comment is not verified (it fails closed, and names why).
IRREGULAR_RECORD = "irregular"  # grader.wire.IRREGULAR_RECORD
MAX_HELD_DEPTH = 8
# A describe's flat map of the table's numbers at any depth
# (``module_describer``): how deep, how many modules visited, how many
# entries (grader.wire.MAX_NUMBERS) before it stops and says it did.
NUMBERS_DEPTH = 16
NUMBERS_VISITS = 2048
NUMBERS_ENTRIES = 128
# The trace function looks at the garbage collector's count every this
# many call events (collector: the collection it runs when one is due).
COLLECT_CHECK = 32
# The kind of a planned statement that records nothing: it only groups the
# lines of a statement of the student's code, so that a tensor made on them
# is judged when the whole statement is over (grader.shapes.SPAN_KIND).
SPAN_KIND = "span"
# The code of an expression (a comprehension, a generator expression, a
# lambda) runs in a frame of its own but holds no statement: a line event
# there belongs to the statement whose frame made it, which records it.
# Read in that frame, a name the expression shares with the statement is
# the value from before the statement wrote it (Python 3.11: a free
# variable), so such frames record nothing.
EXPRESSION_CODES = frozenset(("<listcomp>", "<setcomp>", "<dictcomp>",
                              "<genexpr>", "<lambda>"))
# Tensors made on a frame's current statement, watched until it completes;
# past them, the statement counts as one whose tensor outlived it.
MAX_MADE_PENDING = 256
# Values read in what a library call of the student's line returned (to
# tell the tensors that came back to the line); past them, every tensor
# the call made counts (made_keeper).
MADE_RETURN_ITEMS = 4096
MAX_FOREIGN = 32
# Statement ids a failed probe sends as ``reached`` (grader.wire's
# MAX_REACHED).
MAX_REACHED = 4096
# Distinct refused, tampered and patched attempts listed one by one (a
# forbidden use is always listed); past them, only their number.
MAX_EVENTS = 64
# The coverage entry of a phase in which the trace function was removed
# (or any phase after that): the grader saw less than the code that ran.
SILENCED = ["", "code the grader could not see: the code removed the "
                "grader's trace function (sys.settrace), or set a frame "
                "evaluation callback, while it ran", 0, ""]
OPEN_FILES = 256
# What the grader's own thread refuses: code of the submission that its
# actions would run there (a finalizer, a key's ``__eq__``), where the
# grader's frames lie below it.
REFUSED_ON_GRADER = ("run on the grader's own stack (a submission's code "
                     "runs only on a thread of its own)")
# The submission's thread: its stack (at least what the main thread may
# grow to, so that recursion goes as deep: see _stack_size) and how many
# failures of calls it keeps at once.
TRAMPOLINE_STACK = 16 * 1024 * 1024
MAILBOX = 16
# An object's identity as a dictionary key where the trace function looks
# objects up per event: object's own hash is the object's address
# (rotated: one-to-one, so as unique as id() while the object lives), and
# unlike id() it raises no audit event ("builtins.id"), which costs a
# call of the agent's audit hook (a Python function) every time.
ADDRESS = object.__hash__
# Audit events the hook looks at; every other event passes untouched.
PROCESS_EVENTS = {
    "os.system": "run a shell command",
    "os.exec": "replace the process (exec)",
    "os.posix_spawn": "start a process",
    "os.spawn": "start a process",
    "os.fork": "fork a process",
    "os.forkpty": "fork a process",
    "subprocess.Popen": "start a subprocess",
    "pty.spawn": "start a process",
    "os.kill": "send a signal to a process",
    "os.killpg": "send a signal to a process group",
    "signal.pthread_kill": "send a signal to a thread",
    "socket.__new__": "open a network socket",
    "socket.connect": "connect to the network",
    "socket.bind": "open a network port",
    "socket.getaddrinfo": "look up a network address",
    "urllib.Request": "open a URL",
    "ctypes.dlopen": "load a native library (ctypes)",
    "ctypes.dlsym": "call into a native library (ctypes)",
    "ctypes.cdata": "read raw memory (ctypes)",
    "ctypes.call_function": "call a native function (ctypes)",
    "ctypes.addressof": "read raw memory (ctypes)",
    "ctypes.string_at": "read raw memory (ctypes)",
    "ctypes.wstring_at": "read raw memory (ctypes)",
    "resource.setrlimit": "change the sandbox's resource limits",
    "resource.prlimit": "change the sandbox's resource limits",
    "os.setuid": "change the user id",
    "os.chroot": "change the root folder",
    "os.symlink": "create a symbolic link",
    "os.link": "create a hard link",
    "mmap.__new__": "map memory from a file",
}
INTROSPECTION_EVENTS = {
    "sys._getframe": "inspect the grader's stack frames",
    "sys._current_frames": "inspect the grader's stack frames",
    "sys.settrace": "replace the grader's trace function",
    "sys.setprofile": "install a profiler over the grader",
    "gc.get_objects": "inspect the grader's objects (gc)",
    "gc.get_referrers": "inspect the grader's objects (gc)",
    "gc.get_referents": "inspect the grader's objects (gc)",
    "sys._debugmallocstats": "inspect the interpreter's memory",
}
# Attributes whose reading CPython audits and that lead to frames.
FRAME_ATTRIBUTES = ("tb_frame", "gi_frame", "cr_frame", "ag_frame")
# File-system events: the index of their path argument(s) and the verb.
PATH_EVENTS = {
    "os.remove": ((0,), "delete"), "os.rmdir": ((0,), "delete"),
    "os.mkdir": ((0,), "create a folder"),
    "os.rename": ((0, 1), "rename"), "os.replace": ((0, 1), "replace"),
    "os.chmod": ((0,), "change the permissions of"),
    "os.chown": ((0,), "change the owner of"),
    "os.truncate": ((0,), "truncate"), "os.utime": ((0,), "touch"),
    "os.setxattr": ((0,), "change attributes of"),
    "os.removexattr": ((0,), "change attributes of"),
    "shutil.rmtree": ((0,), "delete"), "shutil.move": ((0, 1), "move"),
    "shutil.copyfile": ((1,), "overwrite"),
    "shutil.copytree": ((1,), "overwrite"),
    "shutil.chown": ((0,), "change the owner of"),
}
CODE_EVENTS = ("exec", "function.__new__", "object.__setattr__",
               "object.__getattr__")
# Standard-library functions that take a frame to read their caller's
# module name (and never hand it on): their frame look-ups are allowed.
FRAME_USERS = (("collections", "namedtuple"), ("typing", "_caller"),
               ("logging", "Logger.findCaller"),
               ("enum", "EnumType._create_"), ("warnings", "warn"),
               # These turn frames into text (file, line, function name):
               # torch records where a lazy CUDA call came from with them,
               # and printing a traceback needs them.
               ("traceback", "extract_stack"), ("traceback", "format_stack"),
               ("traceback", "print_stack"),
               ("traceback", "StackSummary._extract_from_extended_frame_gen"),
               # torch imports typing_extensions, which replaces typing's
               # _collect_parameters: on every subscription of a typing
               # generic that misses typing's cache it looks whether the
               # frame two below is typing's own subscription of Generic or
               # Protocol. It returns a bool (identity tests of that frame's
               # module name and local "origin"); the frame stays its local.
               ("typing_extensions", "_has_generic_or_protocol_as_origin"))
# Standard-library functions that hand the frames they look up to their
# caller: their look-ups are allowed only when that caller is one of the
# FRAME_USERS (logging's findCaller, traceback's summaries), never when the
# submission calls them (its own frame leads down to the agent's).
FRAME_HANDERS = (("logging", "currentframe"),
                 ("traceback", "_walk_tb_with_full_positions"))
# Public entry points that generate code (exec) for the caller: the code
# they make is the library's (namedtuple's __new__, a dataclass's
# __init__), not code the submission smuggled in.
GENERATORS = (("collections", "namedtuple"), ("dataclasses", "dataclass"),
              ("dataclasses", "make_dataclass"),
              ("typing", "NamedTupleMeta.__new__"),
              ("typing", "NamedTuple"))
# Compilers whose code runs where no trace function follows (TorchScript's
# interpreter, torch.compile's graphs): every alias of each is replaced by a
# stand-in that reports "untraceable" (what they compile is code the grader
# cannot see) and calls it.
UNTRACEABLE = (
    "torch._C._jit_script_compile", "torch._C._jit_script_class_compile",
    "torch._C._jit_script_compile_overload",
    "torch._C._jit_script_interface_compile",
    "torch._C._create_function_from_trace",
    "torch._C._create_function_from_trace_with_dict",
    "torch._C._create_method_from_trace",
    "torch._C._create_method_from_trace_with_dict",
    "torch._C._create_function_from_graph", "torch._C.CompilationUnit",
    "torch._C.import_ir_module", "torch._C.import_ir_module_from_buffer",
    "torch._C._import_ir_module_from_package",
    "torch._C._load_for_lite_interpreter",
    "torch._C._load_for_lite_interpreter_from_buffer", "torch.compile")
# TorchScript's engine (interpreter, static runtime, mobile runtime) is C++:
# Python enters it only through bindings whose signature names one of its
# types. Every function of torch's C extension whose signature says so, and
# every method (and call) of a class whose methods say so, is a way into
# code the grader cannot trace: each is replaced like the compilers above,
# however torch names it (derived from the bindings, not listed).
# (ScriptClass and ScriptObject are torch's custom C++ classes, whose
# methods are native code like any operator's; the syntax tree of
# TorchScript's frontend makes no code by itself, but what takes one
# compiles it.)
JIT_SIGNATURE = (r"torch::jit::|torch\._C\.(?:Graph|Node|Value|Block|"
                 r"CompilationUnit|Script(?!Class\b|Object\b)\w*|"
                 r"LiteScriptModule|_jit_tree_views\.\w+)\b")
JIT_SYNTAX_TREE = "torch._C._jit_tree_views"
# C entry points that run a torch function with torch's function modes set
# aside for that one call (torch.overrides.redispatch_function's way): the
# grader's mode, which judges what chose every operation (principle 4),
# would not see it. Each is replaced like the compilers above, reporting
# the operation as chosen where the grader cannot judge it. (The other
# ways to set the mode aside, the DisableTorchFunction context, popping
# it, the skip flag, are state the trace function checks.)
MODE_BYPASSES = ("torch._C._skip_one_hop_torch_function",)
# The native calls that install a Python callable into the interpreter's
# evaluation of frames (torch.compile's hook, torch/csrc/dynamo): CPython
# hands such a callable every frame the thread runs, the grader's own
# included, past every audit event. Each is replaced by a stand-in that
# refuses a callable argument as untraceable and does nothing otherwise
# (:func:`frame_hook_guard`): no hook is ever set, so turning it off
# (torch's own ``set_eval_frame(None)`` around an optimizer's step) has
# nothing to do, and the stand-in holds no original to walk to. A hook
# found set anyway fails the phase closed (:func:`shape_tracer`'s
# ``still_tracing``).
FRAME_HOOKS = ("torch._C._dynamo.eval_frame.set_eval_frame",
               "torch._C._dynamo.eval_frame.set_bytecode_debugger_callback")
FRAME_HOOK_READER = "torch._C._dynamo.eval_frame.get_eval_frame_callback"
CUSTOM_CLASSES = ("torch._C.ScriptClass", "torch._C.ScriptObject")
# The protocol through which a stand-in for tensors (torch.fx's Proxy, any
# recorder) records the code it runs through, to run it later elsewhere.
STAND_IN_PROTOCOL = ("__torch_function__", "__torch_dispatch__")
# What torch's initialisation of a plain torch.nn.Linear (its
# reset_parameters: kaiming_uniform_, then uniform_ on the bias, through
# torch's function protocol) reads: in these namespaces, every name that
# the code of QUICK_INIT_PATH names (and their sizes), and these entries
# of larger ones. While they hold what the worker found, the grader's
# equivalent runs instead (:func:`quick_init`).
QUICK_INIT_NAMESPACES = (
    "builtins", "math", "contextlib", "torch.nn.modules.linear",
    "torch.nn.init", "torch.overrides", "torch.autograd.grad_mode",
    "torch.utils._contextlib", "torch.nn.Linear", "torch.nn.Module",
    "torch.nn.Parameter", "torch.Tensor", "torch.autograd.grad_mode.no_grad")
QUICK_INIT_PATH = (
    "torch.nn.Linear.reset_parameters", "torch.nn.init.kaiming_uniform_",
    "torch.nn.init.uniform_", "torch.nn.init._no_grad_uniform_",
    "torch.nn.init._calculate_fan_in_and_fan_out",
    "torch.nn.init._calculate_correct_fan", "torch.nn.init.calculate_gain",
    "torch.overrides.handle_torch_function",
    "torch.overrides._get_overloaded_args",
    "torch.overrides._pop_mode_temporarily.__wrapped__",
    "torch.overrides._pop_mode", "torch.overrides._push_mode",
    "torch.nn.Module.__getattr__", "torch.autograd.grad_mode.no_grad",
    "torch.utils._contextlib._NoParamDecoratorContextManager",
    "torch.utils._contextlib._DecoratorContextManager",
    "torch._jit_internal.is_scripting",
    "contextlib._GeneratorContextManager",
    "contextlib._GeneratorContextManagerBase")
QUICK_INIT_ENTRIES = (
    ("torch", ("overrides", "no_grad", "is_grad_enabled", "_C",
               "_jit_internal")),
    ("torch._C", ("_set_grad_enabled", "is_grad_enabled")),
    ("torch._jit_internal", ("is_scripting",)))
# The names of torch's code on that path: a forbidden pattern that matches
# one of them leaves torch's own initialisation in place (it is judged).
QUICK_INIT_CODE = (
    "torch.nn.modules.linear", "torch.nn.init", "Linear.reset_parameters",
    "kaiming_uniform_", "uniform_", "_no_grad_uniform_", "calculate_gain",
    "_calculate_fan_in_and_fan_out", "_calculate_correct_fan")
# Namespaces whose entries are remembered before the submission runs, so
# that a replaced function (nn.Module.__call__, json.dumps) is reported;
# the job's "sandbox" table (the rubric's) adds an assignment's own.
WATCHED_NAMESPACES = (
    "builtins", "sys", "json", "pickle", "logging", "math", "torch",
    "torch.nn.functional", "torch.nn.init", "torch.nn.Module",
    "torch.nn.Linear", "torch.Tensor", "torch.nn.modules.module")


# ---------------------------------------------------------------------------
# Pieces shared with the trusted side (pure functions)
# ---------------------------------------------------------------------------

def make_fingerprint(sha256: Any = None, code_type: Any = None
                     ) -> Callable[[Any], str]:
    """Return ``fingerprint(code) -> str``: a digest of a code object.

    The digest covers what the code does and where it claims to come from
    (bytecode, constants, nested code, names, line table, file, name and
    first line), and nothing that differs between processes (object
    identities, the order of sets of strings), so the grading process,
    compiling the submission's source itself, gets the digest the agent
    computes for the code it saw running. Its arguments exist so that the
    agent can bind them before a submission runs.
    """
    if sha256 is None:
        import hashlib

        sha256 = hashlib.sha256
    if code_type is None:
        code_type = type(make_fingerprint.__code__)
    b_type, b_repr, b_sorted = type, repr, sorted
    b_tuple, b_frozenset, b_str = tuple, frozenset, str

    def constant(value: object) -> str:
        kind = b_type(value)
        if kind is code_type:
            return "code:" + fingerprint(value)
        if kind is b_tuple:
            return "(" + ",".join(constant(v) for v in value) + ")"
        if kind is b_frozenset:
            return "{" + ",".join(b_sorted(constant(v) for v in value)) + "}"
        return b_str(kind.__name__) + ":" + b_repr(value)

    def fingerprint(code: object) -> str:
        parts = [code.co_filename, code.co_name, code.co_qualname,
                 b_repr(code.co_firstlineno), b_repr(code.co_flags),
                 b_repr(code.co_argcount), b_repr(code.co_posonlyargcount),
                 b_repr(code.co_kwonlyargcount), code.co_code.hex(),
                 code.co_linetable.hex(), code.co_exceptiontable.hex(),
                 ",".join(code.co_names), ",".join(code.co_varnames),
                 ",".join(code.co_freevars), ",".join(code.co_cellvars),
                 constant(code.co_consts)]
        return sha256("\x1f".join(parts).encode("utf-8",
                                                "surrogatepass")).hexdigest()

    return fingerprint


def compile_submission(source: str, filename: str) -> object:
    """Compile a submission exactly as the agent does (no inherited flags,
    no optimisation), so that both sides see the same code objects."""
    return compile(source, filename, "exec", dont_inherit=True, optimize=0)


def plan_units(statements: list[dict]) -> tuple[list, dict]:
    """The shape tracer's plan: statements grouped into units (statements
    that share a line), and each line's unit.

    ``statements`` are :meth:`grader.shapes.Statement.to_plain` dicts;
    untraceable ones (sharing a line with a compound statement's header)
    are left out.
    """
    units: list = []
    line_unit: dict = {}
    for statement in sorted((s for s in statements
                             if s.get("traceable", True)),
                            key=itemgetter("first_line", "last_line")):
        span = range(statement["first_line"], statement["last_line"] + 1)
        shared = {line_unit[n] for n in span if n in line_unit}
        if shared:
            unit = min(shared)
            units[unit].append(statement)
        else:
            unit = len(units)
            units.append([statement])
        for number in span:
            line_unit[number] = unit
    return units, line_unit


def line_tracer(units: list, line_unit: dict, record: Callable,
                shape_of: Callable, read_chain: Callable, expand: Callable,
                counters: dict, read: Callable | None = None,
                hold: tuple | None = None,
                settle: Callable | None = None,
                plain: Callable | None = None
                ) -> Callable[[], Callable]:
    """Return a factory of local trace functions, one per traced frame.

    A unit of statements completes when a line event belongs to another
    unit (or to no planned statement), or when the frame returns; then
    ``record(statement, values)`` receives the shapes of what each of its
    statements wrote (``read_chain`` finds a value, ``shape_of(value,
    slot)`` its shape, or the shapes of the tensors a list, tuple or dict
    holds, ``slot`` keeping, per frame, what the statement's last read of
    that value found: a container is read again incrementally);
    a ``return`` statement records the returned value (``expand``: one shape
    per element of a tuple). A unit that raised records nothing. The
    reading runs through ``read`` (:func:`shape_tracer`'s: traced). A value
    whose reading raised is recorded as UNREAD_RECORD (its statement is
    not verified: it fails closed, and costs honest code no more than
    that); any other error of its own marks ``counters["silenced"]``.
    ``counters["returns"]`` counts the traced frames that returned.
    ``hold`` (:func:`collector`'s ``is_on`` and ``hold``) runs first at
    every event: no collection starts inside the bookkeeping.
    A statement of kind SPAN_KIND records nothing (it only groups lines).
    ``settle(frame, how)`` (:func:`made_keeper`) runs when a unit of the
    frame completes, when it raises and when the frame returns.
    ``local_tracer(marker)``: the frame is a call of a declared method
    (``marker``, ``{"call": index, "input": shape}``); until it returns,
    every execution recorded (in it and in what it calls, up to the next
    declared call) ends with that marker (``counters["bound"]``).
    ``plain`` (:func:`plain_reader`): a completed unit whose watched values
    are all plain tensors named by the frame's locals is read here, in the
    trace function, with C calls only (the frame's locals are still
    refreshed through ``read``, traced); any other unit is read through
    ``read`` as described above. Both readings record the same shapes.

    The closures look up no global name (the sandbox agent empties this
    module's namespace before a submission runs).
    """
    b_BaseException, b_Exception, b_str = BaseException, Exception, str
    b_zip, b_len = zip, len
    unread_record = UNREAD_RECORD
    # The markers of the declared calls now running, innermost last
    # (:func:`shape_tracer`): an execution is marked with the innermost.
    bound = counters.setdefault("bound", [])
    span_kind = SPAN_KIND
    max_reads = MAX_READS
    spent = counters.get("scanned") or [0]

    def direct(function, *args):
        return function(*args)

    traced = read if read is not None else direct
    gc_on, gc_off = hold if hold is not None else (None, None)
    import itertools
    import operator

    b_dict, b_type, b_all, b_map = dict, type, all, map
    b_repeat, b_is = itertools.repeat, operator.is_
    missing = object()

    def locals_of(frame):
        return frame.f_locals

    def given(statement, values):
        return values

    def quick(frame, state):
        """Read the completed unit here, untraced, when every value it
        watches is a plain tensor (``plain``) named by the frame's locals,
        a dict whose keys are all exact strings (so looking a name up runs
        no key's ``__eq__``); True when it did (its records are made, as
        ``finish`` would make them), False (nothing recorded, nothing
        changed) when ``finish`` must read it traced. The locals are
        refreshed traced (refreshing may drop the last reference to an
        object: its finalizer is the submission's code)."""
        pending = state["pending"]
        if pending is None:
            return True
        local_values = traced(locals_of, frame)
        if b_type(local_values) is not b_dict or not b_all(
                b_map(b_is, b_map(b_type, local_values), b_repeat(b_str))):
            return False
        found = []
        for statement in units[pending]:
            kind = statement["kind"]
            if kind == "return" or kind == span_kind:
                continue
            values = []
            for chain in statement["watch"]:
                if b_len(chain) != 1 or b_type(chain[0]) is not b_str:
                    return False
                value = local_values.get(chain[0], missing)
                if value is missing:
                    return False
                shape = plain(value)
                if shape is None:
                    return False
                values.append(shape)
            found.append((statement, values))
        state["pending"] = None
        for statement, values in found:
            budgeted(statement, given, values)
        return True

    def value_record(chain, local_values, global_values, slot):
        try:
            return shape_of(read_chain(chain, local_values, global_values),
                            slot)
        except b_Exception:
            return unread_record

    def read_watched(statement, local_values, global_values, memo):
        # ``memo``: the frame's, per statement and watched value, what
        # its last read found (a container is read again incrementally).
        slots = memo.get(statement["id"])
        if slots is None:
            slots = memo[statement["id"]] = [[None]
                                             for _ in statement["watch"]]
        return [value_record(chain, local_values, global_values, slot)
                for chain, slot in b_zip(statement["watch"], slots)]

    def read_returned(statement, value):
        try:
            return expand(value)
        except b_Exception:
            return [unread_record]

    def budgeted(statement, reader, *args):
        # Reading a statement costs at most MAX_READS per call (1 a read,
        # plus the container values it scans: ``spent``); past that each
        # execution is counted as left out: failing closed, the shapes
        # item is not earned (principle 2), and a statement that grows a
        # huge list cannot make every probe slow.
        key = b_str(statement["id"])
        reads = counters.setdefault("reads", {})
        done = reads.get(key, 0)
        if done >= max_reads:
            left_out = counters.setdefault("left_out", {})
            left_out[key] = left_out.get(key, 0) + 1
            return
        before = spent[0]
        values = reader(statement, *args)
        if bound:
            values = values + [bound[-1]]
        record(statement, values)
        reads[key] = done + 1 + spent[0] - before

    def local_tracer(marker=None, expression=False):
        state = {"pending": None, "returning": None, "raising": False}
        memo: dict = {}
        # A declared call (``marker``: its index and its input's shape)
        # is the innermost until this frame returns.
        depth = 0
        if marker is not None:
            bound.append(marker)
            depth = b_len(bound)

        def finish(frame):
            pending = state["pending"]
            if pending is None:
                return
            state["pending"] = None
            local_values = frame.f_locals
            global_values = frame.f_globals
            for statement in units[pending]:
                kind = statement["kind"]
                if kind == "return" or kind == span_kind:
                    continue
                budgeted(statement, read_watched, local_values,
                         global_values, memo)

        def returned(frame, arg):
            finish(frame)
            if state["returning"] is not None:
                budgeted(state["returning"], read_returned, arg)
                state["returning"] = None
            # What the reads kept goes here, traced (a finalizer of the
            # submission's that this runs is traced like any other).
            memo.clear()

        def trace(frame, event, arg):
            # The values are read traced (``read``: code of the
            # submission's a read runs is traced like any other); an
            # error of the reading ends the phase's trust and stays here.
            try:
                if gc_on is not None and gc_on():
                    gc_off()
                if event == "line":
                    state["raising"] = False
                    unit = None if expression else \
                        line_unit.get(frame.f_lineno)
                    if unit != state["pending"]:
                        if plain is None or not quick(frame, state):
                            traced(finish, frame)
                        if settle is not None:
                            settle(frame, "statement")
                        state["pending"] = unit
                        if unit is not None:
                            for statement in units[unit]:
                                if statement["kind"] == "return":
                                    state["returning"] = statement
                elif event == "exception":
                    state["pending"] = None
                    state["returning"] = None
                    state["raising"] = True
                    if settle is not None:
                        settle(frame, "raised")
                elif event == "return":
                    counters["returns"] += 1
                    traced(returned, frame, arg)
                    if depth:
                        del bound[depth - 1:]
                    if settle is not None:
                        settle(frame, "unwound" if state["raising"]
                               else "returned")
                return trace
            except b_BaseException:
                counters["silenced"] = True
                return None
        return trace
    return local_tracer


# ---------------------------------------------------------------------------
# The worker's life (set-up runs as ordinary code, before the submission)
# ---------------------------------------------------------------------------

def main(job_fd: int, result_fd: int, output_fd: int, parent: int) -> None:
    """The worker's whole life; called in the child the fork server made.

    Never returns: the process ends with ``os._exit``.
    """
    # Locals only from here on: _life clears this module's globals before
    # the submission runs (see _seal_module).
    exit_now = os._exit
    standard = sys
    import traceback

    print_exception = traceback.print_exc
    code = 0
    try:
        os.setsid()
        # No signal reaches the grader's thread as a Python exception:
        # SIGINT (the only signal Python turns into one) is ignored, so
        # signal.raise_signal and _thread.interrupt_main from the
        # submission's thread do nothing (docs/threat-model.md).
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        from grader.worker.confine import die_with_parent

        from grader.wire import read_job

        die_with_parent(parent)
        job = read_job(job_fd)
        os.close(job_fd)
        result_fd = _isolate(result_fd, output_fd)
        _life(job, result_fd)
    except BaseException:  # nothing may escape a forked child
        code = 70
        try:
            print_exception()
        except BaseException:
            pass
    finally:
        try:
            standard.stdout.flush()
            standard.stderr.flush()
        except BaseException:
            pass
        exit_now(code)


def _isolate(result_fd: int, output_fd: int) -> int:
    """Keep stdin (/dev/null), stdout and stderr (the output pipe) and the
    result pipe (moved to RESULT_FD); close every other descriptor."""
    os.dup2(result_fd, RESULT_FD)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.closerange(3, RESULT_FD)
    os.closerange(RESULT_FD + 1, max(RESULT_FD + 2,
                                     os.sysconf("SC_OPEN_MAX")))
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    import faulthandler

    faulthandler.enable(sys.stderr)
    return RESULT_FD


def _scrub_environment(scratch: str) -> None:
    keep = ("PATH", "LANG", "LANGUAGE", "TZ", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS")
    for name in list(os.environ):
        if name not in keep and not name.startswith("LC_"):
            del os.environ[name]
    for name in ("HOME", "TMPDIR", "MPLCONFIGDIR"):
        os.environ[name] = scratch
    os.environ["MPLBACKEND"] = "Agg"
    import tempfile

    tempfile.tempdir = scratch
    # The confinement lets the worker write in its scratch folder only: a
    # module imported with no cached bytecode (the kit's stub package in a
    # fresh clone, a notebook's `import transformer_lm...`) would try to
    # cache it beside its source and be refused, as if the submission
    # had written there. No interpreter of the grader's writes bytecode
    # here (code the submission runs may ask for it, and is judged so).
    sys.dont_write_bytecode = True


def _limit(kind: int, soft: int, hard: int | None = None) -> None:
    import resource

    try:
        resource.setrlimit(kind, (soft, soft if hard is None else hard))
    except (ValueError, OSError):
        pass


def _vm_bytes() -> int:
    """The address space mapped now. Read as bytes: a text codec would be
    a module the fork server has not loaded (``_indexed``)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _refresh_import_path() -> None:
    """List every folder of the import path again if it changed since the
    fork server listed it, while the worker may still list it.

    The import system finds a top-level module in its listing of each
    import-path folder, listed again when the folder's modification time
    changes. Once confined, a worker may not list the kit's own folder:
    a listing made then is empty, so ``import solutions`` would fail as
    "no module named" and never open the kit's file, which is what the
    audit hook reports as a forbidden import (``audit_hook``). Listed
    here, the import finds the kit's packages as they are now and the
    attempt is refused and named. It loads no module (``_indexed``).
    """
    from importlib.machinery import PathFinder

    PathFinder.find_spec("__grader_listing__", list(sys.path))


def _apply_limits(timeout: float, memory_mb: int) -> None:
    """CPU seconds, address space (beyond what is mapped now), files."""
    import resource

    _limit(resource.RLIMIT_CPU, int(timeout) + 1, int(timeout) + 2)
    if memory_mb > 0:
        _limit(resource.RLIMIT_AS, _vm_bytes() + memory_mb * 1024 * 1024)
    _limit(resource.RLIMIT_FSIZE, 64 * 1024 * 1024)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_NOFILE, OPEN_FILES)


def _lookup(dotted: str) -> object:
    """``module.attr.attr`` -> the object (None when it does not exist)."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for name in parts[cut:]:
                value = getattr(value, name)
        except AttributeError:
            return None
        return value
    return None


def _code_objects(root: object) -> list:
    """Every code object of a function, class or module, nested included."""
    import types

    found, pending, seen = [], [root], set()
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, types.CodeType):
            found.append(value)
            pending += [c for c in value.co_consts
                        if isinstance(c, types.CodeType)]
        elif isinstance(value, (types.FunctionType, types.MethodType)):
            pending.append(getattr(value, "__func__", value).__code__)
        elif isinstance(value, (staticmethod, classmethod)):
            pending.append(value.__func__)
        elif isinstance(value, property):
            pending += [f for f in (value.fget, value.fset, value.fdel) if f]
        elif isinstance(value, type):
            pending += list(vars(value).values())
        elif isinstance(value, types.ModuleType):
            name = value.__name__
            pending += [v for v in vars(value).values()
                        if getattr(v, "__module__", None) == name]
    return found


def visible_names(source: str, filename: str) -> frozenset:
    """The names and string constants of every code object of the file,
    as the grader compiles it: what its visible source can name (empty
    when it does not compile; the runner reports that)."""
    try:
        module = compile_submission(source, filename)
    except BaseException:
        return frozenset()
    found: set = set()
    for code in _code_objects(module):
        found.update(code.co_names)
        found.update(c for c in code.co_consts if type(c) is str)
    return frozenset(found)


def _recorded(mode: Any, func: Any, types: Any, args: tuple = (),
              kwargs: dict | None = None) -> Any:
    """The handler of :func:`syntax_operations`' mode: notes the name of
    each operation torch hands it (in ``mode.seen``), and runs it."""
    mode.seen.add(getattr(func, "__name__", ""))
    return func(*args, **(kwargs or {}))


def syntax_operations() -> dict:
    """What torch runs for each of Python's operators on tensors:
    ``{(opcode, arg): names}`` for every binary operator, comparison and
    unary operator of the interpreter's own (``dis``), each compiled and
    run once on float, integer and boolean tensors in each order under a
    mode of the grader's own, before any submission runs (in the fork
    server: :func:`prepare`); ``{"*": names}``, all of them. Derived, not
    listed: what an operator of the submission's may run
    (:func:`operation_judge`)."""
    import dis
    import functools
    import types

    import torch

    if _SYNTAX:
        return _SYNTAX[0]
    mode = types.SimpleNamespace(seen=set())
    mode.__torch_function__ = types.MethodType(_recorded, mode)
    real, flags = torch.ones(2), torch.ones(2, dtype=torch.bool)
    whole = torch.ones(2, dtype=torch.long)
    pairs = ((real, real), (real, 2), (2, real), (flags, flags),
             (whole, whole), (whole, 2), (2, whole))
    binary = [symbol for _, symbol in getattr(dis, "_nb_ops", ())]
    sources = [f"a {symbol} b" for symbol in binary + list(dis.cmp_op)]
    sources += ["-a", "+a", "~a"]
    wanted = {code for name, code in dis.opmap.items()
              if name in ("BINARY_OP", "COMPARE_OP") or
              name.startswith("UNARY_")}
    found: dict = {}
    for source in sources:
        code = compile(source, "<operator>", "exec")
        raw = code.co_code
        keys = [(raw[i], raw[i + 1]) for i in range(0, len(raw), 2)
                if raw[i] in wanted]
        names = _names_seen(torch, mode, [
            functools.partial(exec, code, {"a": _fresh(torch, a), "b": b})
            for a, b in pairs])
        for key in keys:
            found[key] = found.get(key, frozenset()) | names
    found["*"] = frozenset().union(*found.values())
    found["builtins"] = _builtin_operations(torch, mode, pairs)
    _SYNTAX.append(found)
    return _SYNTAX[0]


#: Python's builtins that apply operators to what they are given
#: (``sum(heads)`` adds, ``max(a, b)`` compares): a line that names one
#: may run what it runs (:func:`syntax_operations`).
OPERATOR_BUILTINS = ("sum", "abs", "pow", "max", "min", "divmod", "round")


def _builtin_operations(torch: Any, mode: Any, pairs: tuple) -> dict:
    """What torch runs for each of :data:`OPERATOR_BUILTINS`, each
    function of the ``operator`` module and each of the tensor's own
    operator methods (``q.__matmul__(k)``), called once under ``mode``
    (whose ``seen`` records it) on the tensors of ``pairs``: ``{the name
    a line writes: names}``. ``operator.itemgetter`` runs what a
    subscript runs; each call gets fresh copies of the tensors."""
    import builtins
    import functools
    import operator

    runners: dict = {name: getattr(builtins, name)
                     for name in OPERATOR_BUILTINS}
    for name in dir(operator):
        function = getattr(operator, name)
        if name.startswith("__") and name.endswith("__"):
            runners[name] = functools.partial(_call_method, name)
        elif not name.startswith("_") and callable(function) and \
                name not in ("attrgetter", "methodcaller", "itemgetter"):
            runners[name] = function
    runners["itemgetter"] = operator.itemgetter(0)
    found: dict = {}
    for name, function in runners.items():
        names = _names_seen(torch, mode, [
            functools.partial(function, *arguments)
            for a, b in pairs
            for arguments in (([_fresh(torch, a), b],), (_fresh(torch, a), b),
                              (_fresh(torch, a),))])
        if names:
            found[name] = names
    return found


def _fresh(torch: Any, value: Any) -> Any:
    """A copy of ``value`` when it is a tensor (an in-place operator run
    on it leaves the next run's inputs as they were), else ``value``."""
    return value.clone() if isinstance(value, torch.Tensor) else value


def _names_seen(torch: Any, mode: Any, calls: list) -> frozenset:
    """The names of the operations torch hands ``mode`` (which notes them
    in ``mode.seen``) while each of ``calls`` runs; a call that raises is
    passed over."""
    mode.seen.clear()
    torch._C._push_on_torch_function_stack(mode)
    try:
        for call in calls:
            try:
                call()
            except Exception:
                pass
    finally:
        torch._C._pop_torch_function_stack()
    return frozenset(n for n in mode.seen if isinstance(n, str))


def _call_method(name: str, first: Any, *rest: Any) -> Any:
    """Call the method ``name`` of ``first`` with ``rest``."""
    return getattr(first, name)(*rest)


def _named_codes(pairs: tuple[tuple[str, str], ...]) -> dict[int, object]:
    """The code objects of ``(module, qualified name)`` pairs, by id."""
    import importlib

    codes: dict[int, object] = {}
    for module_name, qualname in pairs:
        try:
            value: object = importlib.import_module(module_name)
            for part in qualname.split("."):
                value = getattr(value, part)
        except (ImportError, AttributeError):
            continue
        codes.update((id(code), code) for code in _code_objects(value))
    return codes


_PREPARED: dict[str, tuple[dict[int, str], list]] = {}
# The kit's own packages: no tripwire is set in their modules (a worker
# drops them from sys.modules before the submission runs).
KIT_PACKAGES = ("grader", "solutions")
# Where the values the tripwires replace are bound (see alias_sites):
# built once in the fork server, inherited by every worker.
_ALIASES: dict[str, object] = {}
# The real path of each loaded module's file, and of the folders of the
# packages with native code (see index_loaded_files): built once in the
# fork server, inherited by every worker.
_REAL_FILES: dict[str, str] = {}
# What a worker would otherwise find by walking every loaded module (see
# index_loaded_files): how many modules were loaded when the fork server
# indexed them, their native roots, and the files the submission finds
# loaded. Built once in the fork server, inherited by every worker.
_INDEXED: dict[str, Any] = {}
_ATEN: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
# The forbidden operators' tripwires, registered once by the fork server
# (see preinstall_aten): the pattern, the registration handle and the
# stand-ins' table. A worker adopts them or removes them
# (install_tripwires) and empties this before the submission runs.
_ATEN_READY: dict[str, Any] = {}
# What Python's operators run on tensors (see syntax_operations): built
# once in the fork server, inherited by every worker.
_SYNTAX: list[dict] = []
#: Keys every forbidden operator is tripped at, kernel or not: an alias
#: key that fills every backend and autograd key with no kernel of its own
#: (so a backend without a kernel reaches the tripwire too), and the CPU.
ATEN_ALWAYS = ("CompositeImplicitAutograd", "CPU")
#: Where torch's dispatcher says the tripwires were registered.
ATEN_TRIPWIRE = "<the grader's tripwire>"


def prepare(rules: dict) -> tuple[dict[int, str], list]:
    """:func:`_forbidden_targets`, computed once per set of rules (the fork
    server prepares every assignment's, so workers start with them)."""
    import json

    syntax_operations()
    key = json.dumps(rules, sort_keys=True)
    if key not in _PREPARED:
        _PREPARED[key] = _forbidden_targets(rules)
        if rules.get("aten"):
            aten_kernels(rules["aten"])
    return _PREPARED[key]


def aten_kernels(pattern: str) -> list[tuple[str, tuple[str, ...]]]:
    """The ATen operators whose qualified name ``pattern`` matches, each
    overload on its own (``name.overload``), with every dispatch key at
    which torch's dispatcher holds a kernel for it (and
    :data:`ATEN_ALWAYS`). Derived from the dispatcher, not listed: a key
    torch adds, or a backend's kernel (nested tensors', autocast's), is
    found as it is. Once per pattern: the fork server computes them for
    every assignment."""
    import re

    import torch

    if pattern not in _ATEN:
        matcher = re.compile(pattern)
        members = list(torch._C.DispatchKey.__members__)
        found = []
        for op in sorted(torch._C._dispatch_get_all_op_names()):
            if op.startswith("aten::") and matcher.search(op):
                found.append((op.split("::", 1)[1],
                              _kernel_keys(torch, op, members)))
        _ATEN[pattern] = found
    return list(_ATEN[pattern])


def _kernel_keys(torch: Any, op: str, members: list[str]
                 ) -> tuple[str, ...]:
    """Every dispatch key (runtime or alias) with a kernel of ``op``: the
    keys the dispatcher answers for, and those its table lists (it names
    some, the tracer's, that the enum does not)."""
    import re

    keys = dict.fromkeys(ATEN_ALWAYS)
    for key in members:
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(op, key):
                keys[key] = None
        except RuntimeError:
            continue  # a range marker, not a key
    for line in torch._C._dispatch_dump(op).splitlines():
        found = re.match(r"(\w+)(?:\[alias\])?: registered at", line)
        if found and torch._C._parse_dispatch_key(found.group(1)) \
                is not None:
            keys[found.group(1)] = None  # not the header's "debug:"
    return tuple(keys)


def refused_values() -> list[tuple[object, str]]:
    """The calls no submission may make (they end, signal or start a
    process or thread without an audit event), with what each does."""
    import _thread
    import signal
    import threading

    values: list[tuple[object, str]] = [
        (os._exit, "end the process (os._exit)"),
        (os.abort, "abort the process (os.abort)"),
        (_thread.start_new_thread, REFUSED_THREAD)]
    pidfd = getattr(signal, "pidfd_send_signal", None)
    if pidfd is not None:
        values.append((pidfd, "send a signal to a process"))
    start = getattr(threading, "_start_new_thread", None)
    if start is not None:
        values.append((start, REFUSED_THREAD))
    return values


def mode_bypass_values() -> list[tuple[object, str]]:
    """The entry points of MODE_BYPASSES that exist, with their names."""
    found = []
    for dotted in MODE_BYPASSES:
        value = _lookup(dotted)
        if value is not None:
            found.append((value, dotted))
    return found


def untraceable_values() -> list[tuple[object, str]]:
    """The compilers of UNTRACEABLE that exist, and every function of
    torch's C extension whose signature names a TorchScript type
    (JIT_SIGNATURE), with their names."""
    found = []
    for dotted in UNTRACEABLE:
        value = _lookup(dotted)
        if value is not None:
            found.append((value, dotted))
    functions, _ = jit_bindings()
    known = {id(value) for value, _ in found}
    found += [(value, name) for value, name in functions
              if id(value) not in known]
    return found


_JIT: dict[str, tuple] = {}


def _says(signature: Any, value: object) -> bool:
    """True when ``value``'s binding signature (its docstring) matches."""
    doc = getattr(value, "__doc__", None)
    return isinstance(doc, str) and bool(signature.search(doc[:2000]))


def jit_bindings() -> tuple[list, list]:
    """``(functions, methods)`` of torch's C extension (and its
    submodules) whose binding signature names a TorchScript type:
    ``[(function, dotted name)]`` and ``[(class, attribute, dotted
    name)]`` (a class's ``__init__``, ``__call__`` and every method whose
    signature says so, when one does). Computed once (the fork server's
    index), inherited by every worker."""
    if "found" in _JIT:
        return _JIT["found"]
    import re
    import types

    import torch

    signature = re.compile(JIT_SIGNATURE)
    modules = [("torch._C", torch._C)] + [
        ("torch._C." + name, value) for name, value in
        list(vars(torch._C).items()) if isinstance(value, types.ModuleType)
        and "torch._C." + name != JIT_SYNTAX_TREE]
    functions: list = []
    methods: list = []
    for module_name, module in modules:
        for name, value in list(vars(module).items()):
            label = module_name + "." + name
            if isinstance(value, type) and label not in CUSTOM_CLASSES:
                own = vars(value)
                named = [a for a, m in own.items()
                         if callable(m) and _says(signature, m)]
                if named:
                    named += [a for a in ("__init__", "__call__")
                              if a in own and a not in named]
                    methods += [(value, a, label + "." + a) for a in named
                                if not a.startswith("__")
                                or a in ("__init__", "__call__")]
            elif not isinstance(value, type) and callable(value) and \
                    _says(signature, value):
                functions.append((value, label))
    _JIT["found"] = (functions, methods)
    return functions, methods


def _bindings(modules: list[tuple[str, object]], wanted: set[int],
              skip: tuple[str, ...]) -> list[tuple[str, str, int]]:
    """Every (module, attribute, id) of ``modules`` bound to a value
    whose id is in ``wanted`` (modules whose top package is in ``skip``
    left out)."""
    found: list[tuple[str, str, int]] = []
    for name, module in modules:
        if module is None or name.split(".")[0] in skip:
            continue
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict:
            continue
        found += [(name, attribute, id(value)) for attribute, value in
                  list(namespace.items()) if id(value) in wanted]
    return found


def index_aliases(skip: tuple[str, ...]) -> None:
    """Index, once (the fork server, after :func:`prepare`), where every
    value a tripwire may replace is bound in the loaded modules: a worker
    then visits those places and scans only the modules loaded since
    (:func:`alias_sites`), not the tens of thousands of names torch
    brings. The values stay alive here, so their ids stay theirs."""
    wanted = {id(value) for value, _ in refused_values()}
    wanted |= {id(value) for value, _ in untraceable_values()}
    wanted |= {id(value) for value, _ in mode_bypass_values()}
    wanted |= {id(sys.gettrace), id(sys.getprofile)}
    for functions, _ in _PREPARED.values():
        wanted |= set(functions)
    modules = list(sys.modules.items())
    _ALIASES.clear()
    _ALIASES.update(
        count=len(modules),
        wanted=wanted, skip=skip, sites=_bindings(modules, wanted, skip),
        scanned={name: id(getattr(module, "__dict__", None))
                 for name, module in modules},
        keep=[module for _, module in modules])


def alias_sites(wanted: set[int], skip: tuple[str, ...]
                ) -> list[tuple[str, str, int]]:
    """Every (module, attribute, id) of the loaded modules bound to a
    value whose id is in ``wanted``: what a scan of every module finds.

    With the fork server's index (:func:`index_aliases`) covering
    ``wanted``, the indexed places that still hold their value plus a
    scan of the modules loaded (or replaced) since; otherwise a scan of
    every module. Only kit code runs between the index and this call,
    and it binds no such value in a module it did not load.
    """
    index = _ALIASES
    if not index or index["skip"] != skip or not wanted <= index["wanted"]:
        return _bindings(list(sys.modules.items()), wanted, skip)
    scanned = index["scanned"]
    sites = []
    for name, attribute, ident in index["sites"]:
        namespace = getattr(sys.modules.get(name), "__dict__", None)
        if ident in wanted and type(namespace) is dict and \
                scanned.get(name) == id(namespace) and \
                id(namespace.get(attribute)) == ident:
            sites.append((name, attribute, ident))
    if index["count"] == len(sys.modules):
        # No module loaded since (kit code only adds modules): the walk
        # below, a copied page per module in a worker, would find none.
        return sites
    fresh = [(name, module) for name, module in list(sys.modules.items())
             if scanned.get(name) != id(getattr(module, "__dict__", None))]
    return sites + _bindings(fresh, wanted, skip)


def _forbidden_targets(rules: dict) -> tuple[dict[int, str], list]:
    """The forbidden functions (id -> name) and classes of the job's rules.

    ``rules`` (from the rubric): ``callables`` and ``classes`` (dotted
    names) and ``name_pattern``, a regular expression on attribute names
    searched in every loaded module of the ``packages`` listed, which
    catches variants (``torch.ao``'s quantizable attention, private
    helpers) that no list names.
    """
    import re
    import types

    functions: dict[int, str] = {}
    classes: list = []
    for dotted in rules.get("callables", []):
        value = _lookup(dotted)
        if value is not None and not isinstance(value, type):
            functions.setdefault(id(value), dotted)
    for dotted in rules.get("classes", []):
        value = _lookup(dotted)
        if isinstance(value, type):
            classes.append((dotted, value))
    pattern = rules.get("name_pattern")
    if pattern:
        for dotted in rules.get("modules", []):
            _lookup(dotted)  # import it, so its names are found
        matcher = re.compile(pattern)
        packages = tuple(rules.get("packages", ["torch"]))
        for module_name, module in list(sys.modules.items()):
            if module is None or not module_name.startswith(packages):
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if not matcher.search(name) or isinstance(
                        value, types.ModuleType):
                    continue
                label = f"{module_name}.{name}"
                if isinstance(value, type):
                    if all(value is not c for _, c in classes):
                        classes.append((label, value))
                elif callable(value):
                    functions.setdefault(id(value), label)
    return functions, classes


def _snapshot(extra: tuple[str, ...] = ()) -> dict[str, dict[str, int]]:
    """The addresses (ADDRESS: the identity :func:`patch_watch` compares,
    without an audited id() per entry) of the entries of the watched
    namespaces (and ``extra``)."""
    taken: dict[str, dict[str, int]] = {}
    for dotted in WATCHED_NAMESPACES + tuple(extra):
        value = _lookup(dotted)
        namespace = getattr(value, "__dict__", None)
        if namespace is None:
            continue
        taken[dotted] = {str(k): ADDRESS(v)
                         for k, v in list(namespace.items())}
    return taken


def _life(job: dict, result_fd: int) -> None:
    from gc import collect

    scratch = job["scratch"]
    os.chdir(scratch)
    _scrub_environment(scratch)
    import torch

    torch.set_num_threads(1)
    import functools
    import types

    import grader.wire as wire
    import grader.worker.confine as confine
    from grader.wire import decode_tensor

    # Tensors of the plan, decoded now (ordinary code, before the
    # submission runs); the sealed runtime only clones them, so a tensor
    # that many probes carry (a case's weights) is decoded once.
    decode = functools.partial(_decode_once, {}, decode_tensor)
    probes = job["probes"]
    for probe in probes:
        for holder, key in ((probe.get("init") or {}, "args"),
                            (probe.get("call") or {}, "args"),
                            (probe.get("decoy") or {}, "args")):
            if key in holder:
                holder[key] = [decode(a) if isinstance(a, dict)
                               else a for a in holder[key]]
        if probe.get("state"):
            probe["state"] = {k: decode(v)
                              for k, v in probe["state"].items()}
        if probe.get("fit"):
            probe["fit"]["batches"] = [decode(b) for b in
                                       probe["fit"].get("batches", [])]
        if probe.get("substitutes"):
            probe["substitutes"] = {
                path: _linear_module(torch, *map(decode, pair))
                for path, pair in probe["substitutes"].items()}
    del decode
    functions, classes = prepare(job.get("forbidden", {}))
    # Ids of code objects stand for them only while they live: the agent's
    # are kept alive (this module's namespace is emptied before the
    # submission runs), so no code of the submission can take their ids.
    kept = _code_objects(sys.modules[__name__]) + _code_objects(wire)
    agent_codes = {id(c) for c in kept}
    frame_users = _named_codes(FRAME_USERS)
    frame_handers = _named_codes(FRAME_HANDERS)
    generators = _named_codes(GENERATORS)
    import_codes = {id(c): c for name in ("importlib._bootstrap",
                                          "importlib._bootstrap_external",
                                          "_frozen_importlib",
                                          "_frozen_importlib_external",
                                          "importlib")
                    if name in sys.modules
                    for c in _code_objects(sys.modules[name])}
    for found in (frame_users, frame_handers, generators, import_codes):
        kept += list(found.values())
    _refresh_import_path()
    _apply_limits(float(job["timeout"]), int(job["memory_mb"]))
    confinement = confine.confine(scratch, job.get("readable", ["/"]),
                                  job.get("hidden", []), job.get("quota"))
    loaded_files: set[str] = set()
    codes = {"loaded_files": loaded_files,
             "agent": agent_codes, "frame_users": set(frame_users),
             "frame_handers": set(frame_handers),
             "generators": set(generators), "import": set(import_codes)}
    plain = confinement.as_plain()
    run = _assemble(job, probes, result_fd, (functions, classes), codes,
                    plain, kept)
    del job, probes, functions, classes, codes
    kit_modules = _kit_modules()
    indexed = _indexed("loaded")
    # Whether this worker took the fork server's walks (the hello frame
    # says so; tests/kit/test_worker_index.py).
    plain["indexed"] = indexed is not None
    for name in list(sys.modules):
        if name.split(".")[0] in KIT_PACKAGES:
            del sys.modules[name]
    if sys.modules.get("__main__") in kit_modules:
        # The fork server's own module (python -m grader.run.forkserver).
        sys.modules["__main__"] = types.ModuleType("__main__")
    # What the submission finds loaded (the kit's own modules gone).
    loaded_files.update(_loaded_files() if indexed is None else indexed)
    for module in kit_modules:
        if vars(module) is not globals() and module is not wire:
            _seal_module(vars(module))
    del kit_modules, module, indexed, plain
    _seal_module(vars(wire))
    _seal_module(globals())
    # What the set-up and the seal left unreachable (the kit's classes,
    # their functions) is freed now, before any code of the submission
    # runs: a collector told to keep its garbage (gc.DEBUG_SAVEALL) finds
    # none of it. Cheap: the fork server froze what it had loaded.
    collect()
    run()


def _decode_once(decoded: dict, decode_tensor: Callable[[dict], Any],
                 data: dict) -> Any:
    """:func:`grader.wire.decode_tensor` of ``data``, once per distinct
    encoded tensor of a job (``decoded`` holds those decoded so far): a
    case's weights and inputs come with each of its probes (task 2 of the
    homework sends 582 tensors, 158 of them distinct). The probes then
    share the decoded tensor, which the runtime never hands out: it
    clones a plan tensor before any code of the submission's sees it
    (the state it loads, the arguments it passes, the batches of a fit)
    or copies it into a module of its own (a substitute). Set-up, before
    the seal."""
    try:
        key = tuple((name, tuple(value) if type(value) is list else value)
                    for name, value in sorted(data.items()))
        hash(key)
    except TypeError:  # a field that is no plain value: not shared
        return decode_tensor(data)
    found = decoded.get(key)
    if found is None:
        found = decoded[key] = decode_tensor(data)
    return found


def _linear_module(torch: Any, weight: Any, bias: Any) -> Any:
    """A probe's substitute: torch's own ``nn.Linear`` holding ``weight``
    and ``bias`` (built before the submission runs; torch's code computes
    it, so every operation it runs is chosen by a line of torch's)."""
    module = torch.nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        module.weight.copy_(weight)
        module.bias.copy_(bias)
    module.requires_grad_(False)
    return module.eval()


def _kit_modules() -> list:
    """Every loaded module of the kit's packages, and the main module
    when it is the kit's (the fork server run as ``-m``)."""
    # The names only: a walk of the modules themselves would write to
    # the reference count of each, a copied page apiece in a worker.
    found = [sys.modules[name] for name in list(sys.modules)
             if name.split(".")[0] in KIT_PACKAGES]
    if _kit_main():
        found.append(sys.modules["__main__"])
    return found


def _kit_main() -> bool:
    """True when the main module is one of the kit's (the fork server
    run as ``-m``): a worker replaces it with an empty one."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and \
        str(getattr(spec, "name", "")).split(".")[0] in KIT_PACKAGES


def _module_files(skip_kit: bool = False) -> list[str]:
    """The file names (``.py``) of every module loaded now, as named;
    with ``skip_kit``, not those of the modules a worker drops before
    the submission runs (:func:`_kit_modules`)."""
    found = []
    for name, module in list(sys.modules.items()):
        if skip_kit and (str(name).split(".")[0] in KIT_PACKAGES
                         or (name == "__main__" and _kit_main())):
            continue
        file = getattr(module, "__dict__", {}).get("__file__") \
            if isinstance(getattr(module, "__dict__", None), dict) else None
        if isinstance(file, str) and file.endswith(".py"):
            found.append(file)
    return found


def index_loaded_files() -> None:
    """Resolve, once (the fork server, after its imports), the real path
    of the file of every module loaded now: a worker then resolves only
    the files of the modules loaded since (:func:`_loaded_files`), not
    the thousand files torch brings (a realpath is an lstat per folder
    of the path). Absolute names only: a relative one depends on the
    folder the worker runs in. Library files are not moved while a
    server runs (its identity covers the kit's own). The native modules'
    files and their packages' folders too (:func:`_loaded_native_roots`:
    some fifty realpaths, 8 ms a worker)."""
    for name in _module_files() + _native_places():
        if os.path.isabs(name) and name not in _REAL_FILES:
            try:
                _REAL_FILES[name] = os.path.realpath(name)
            except ValueError:  # a name no file can have (a NUL in it)
                pass
    # The walks of every loaded module a worker would make (a copied page
    # per module it touches), made here once; a worker takes them while
    # it has loaded no module since (:func:`_indexed`).
    real, inside = path_rules(os.sep, (os.sep,), ())[:2]
    _INDEXED.clear()
    _INDEXED.update(
        count=len(sys.modules),
        native_roots=_loaded_native_roots(real, inside,
                                          _interpreter_natives(real)),
        loaded=_loaded_files(skip_kit=True))


def _indexed(what: str) -> Any:
    """What the fork server's :func:`index_loaded_files` found, or None
    when modules were loaded since. The count decides: until the
    submission runs, only the kit's own code runs in a worker, and it
    only adds modules (it drops the kit's own after the last look-up
    here), so the same count is the same modules."""
    if _INDEXED.get("count") != len(sys.modules):
        return None
    return _INDEXED[what]


def _loaded_files(skip_kit: bool = False) -> frozenset[str]:
    """The files (as named and real) of every module loaded now (with
    ``skip_kit``, but the kit's own): executing one of them again is
    loading a second copy."""
    found = set()
    known = _REAL_FILES
    for name in _module_files(skip_kit):
        real = known.get(name)
        found.update((name, os.path.realpath(name) if real is None
                      else real))
    return frozenset(found)


def _stack_size() -> int:
    """The submission's thread's stack: the main thread's limit (its soft
    RLIMIT_STACK, up to 256 MB), and never less than TRAMPOLINE_STACK."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 4 * TRAMPOLINE_STACK
    return max(TRAMPOLINE_STACK, min(soft, 16 * TRAMPOLINE_STACK))


def _seal_module(namespace: dict) -> None:
    """Empty a module's globals (every module of the kit's, this one's
    and the wire's last), once the runtime is built.

    The tripwires the agent installs are reachable by the submission (they
    replace library functions), and through their ``__globals__`` this
    module's namespace; the kit's other modules through the classes they
    made (``object.__subclasses__()``) and the fork server's through
    ``__main__``: emptied, they offer no way to build a second runtime,
    call the set-up functions or reach the confinement's C library. Nothing
    that runs from now on looks a global up (a kit test checks the
    bytecode).
    """
    namespace.clear()


# ---------------------------------------------------------------------------
# The runtime: factories of closures
#
# Each factory below runs before the submission's first line (set-up, where
# global names may be looked up) and returns closures over its own
# arguments and the references it binds; the closures look up no global
# name (tests/kit/test_integrity.py walks every factory of FACTORIES and
# fails on a function that makes closures and is not listed). A closure
# holds only the cells it uses; the tripwires a submission can reach
# (they replace library functions) are inert and hold only their error's
# class and text, never the key, the channel, a reporter or the plan.
# ---------------------------------------------------------------------------

def messenger(sys_audit: Callable, token: object) -> tuple[Callable, ...]:
    """Return ``emit(message)`` and ``note(kind, verb, what)``: a frame and
    an event, sent through the audit hook (the only key holder); frames
    carry the token only ``emit`` and the hook hold."""
    def emit(message):
        sys_audit("grader.frame", token, message)

    def note(kind, verb, what=""):
        """The line is that of the code that called the function calling
        this."""
        sys_audit("grader.event", kind, verb, what)

    return emit, note


def reporter(send: Callable, filename: str, phase: dict
             ) -> tuple[Callable, ...]:
    """Return ``report(kind, verb, what, frame)``, which tells the grading
    process at once what the code tried (refused, forbidden, tampered,
    patched; each distinct attempt once), and ``line_of(frame)``.

    The report fails closed at its cap: a forbidden use and a compiler the
    grader cannot trace are always sent (they cost the task's correctness
    items); past MAX_EVENTS other
    attempts, the rest are counted, and the special kind ``unlisted``
    (sent by the runner at the end of each phase) reports how many were
    left out, as a refused event of its own.
    """
    b_str = str
    max_events = MAX_EVENTS
    reported: dict = {}
    counts = {"listed": 0, "left_out": 0, "announced": 0}

    def line_of(frame):
        if frame is not None and frame.f_code.co_filename == filename:
            return frame.f_lineno
        return None

    def report(kind, verb, what="", frame=None):
        if kind == "unlisted":
            left_out = counts["left_out"]
            if left_out > counts["announced"]:
                counts["announced"] = left_out
                send({"type": "event", "kind": "refused",
                      "verb": "do more than the report lists (each attempt "
                              "refused or noticed all the same)",
                      "object": b_str(left_out) + " attempt(s) not listed",
                      "line": None, "phase": phase["name"]})
            return
        label = kind + ":" + verb + ":" + what
        count = reported.get(label, 0)
        reported[label] = count + 1
        if count:
            return
        if kind != "forbidden" and kind != "untraceable":
            if counts["listed"] >= max_events:
                counts["left_out"] += 1
                return
            counts["listed"] += 1
        send({"type": "event", "kind": kind, "verb": verb[:200],
              "object": what[:300], "line": line_of(frame),
              "phase": phase["name"]})

    return report, line_of


def path_rules(scratch: str, readable: tuple, hidden: tuple
               ) -> tuple[Callable, ...]:
    """Return ``real(path)``, ``inside(path, roots)``,
    ``readable_path(path)``, ``show(path)`` and ``module_name(path)``."""
    b_type, b_str, b_bytes, b_len = type, str, bytes, len
    b_Exception = Exception
    realpath, fsdecode = os.path.realpath, os.fsdecode
    path_sep, devnull = os.sep, os.devnull

    def real(path):
        if b_type(path) is not b_str and b_type(path) is not b_bytes:
            return None
        try:
            return realpath(fsdecode(path))
        except b_Exception:
            return None

    def inside(path, roots):
        for root in roots:
            if root == path_sep or path == root or \
                    path.startswith(root + path_sep):
                return True
        return False

    def readable_path(path):
        return (inside(path, readable) and not inside(path, hidden)) or \
            inside(path, (scratch, devnull))

    def show(path):
        text = b_str(path)
        return text if b_len(text) <= 200 else text[:200] + "..."

    def module_name(path):
        """``/kit/solutions/x.py`` -> ``solutions.x``; a hidden file
        ``/kit/pkg/y.py`` or ``/kit/pkg/__pycache__/y.cpython-311.pyc``
        -> ``pkg.y`` (for a report)."""
        for root in hidden:
            if path == root and (path.endswith(".py") or
                                 path.endswith(".pyc")):
                top = root.rsplit(path_sep, 1)[0]
            elif path.startswith(root + path_sep):
                top = root
            else:
                continue
            if top.endswith(path_sep + "__pycache__"):
                top = top.rsplit(path_sep, 1)[0]
            rest = path[b_len(top) + 1:].split(path_sep)
            rest = [p for p in rest if p != "__pycache__"]
            if rest:
                rest[-1] = rest[-1].split(".")[0]
                if rest[-1] == "__init__":
                    rest.pop()
            return ".".join(top.rsplit(path_sep, 1)[-1:] + rest)
        return path

    return real, inside, readable_path, show, module_name


def code_kinds(filename: str, agent_codes: set[int], generators: set[int],
               library_roots: tuple, hidden: tuple, fingerprint: Callable,
               real: Callable, inside: Callable, kinds: dict, alive: dict,
               synthetic: dict) -> tuple[Callable, ...]:
    """Return ``classify(code)`` (agent, synthetic, submission or library),
    ``actor(frame)`` (who asked) and ``made_code(code, how, frame)``
    (marks code made at run time as synthetic)."""
    import types

    b_type, b_id, b_open, b_compile = type, id, open, compile
    b_str, b_dict = str, dict
    b_BaseException = BaseException
    type_mro = type.__dict__["__mro__"].__get__
    type_dict = type.__dict__["__dict__"].__get__
    str_isidentifier = str.isidentifier
    address = ADDRESS
    CodeType = types.CodeType
    file_exists = os.path.isfile
    library_checked: dict = {}

    def classify(code):
        # Known codes by their address (each stays alive in ``alive``, so
        # no other object takes it): no audited id() on the way.
        kind = kinds.get(address(code))
        if kind is not None:
            return kind
        code_id = b_id(code)
        if code_id in agent_codes:
            kind = "agent"
        elif code_id in synthetic:
            kind = "synthetic"
        elif code.co_filename == filename:
            kind = "submission"
        else:
            kind = "library"
        kinds[address(code)] = kind
        alive[code_id] = code
        return kind

    def actor(frame):
        """Who asked: ('student', the submission's frame), ('library',
        None) for a library module being imported, or ('agent', None).

        Walking down from the top, the first frame of the submission (or
        of code it made) decides "student"; a library module's top level
        decides "library" (above the agent's own frames: below them lie
        the fork server's). The agent's own frames decide nothing: its
        code counts only when no submission frame lies below it, so agent
        functions a submission can reach (its tripwires) act for the
        submission when it calls them.
        """
        agent_seen = False
        while frame is not None:
            code = frame.f_code
            kind = classify(code)
            if kind == "agent":
                agent_seen = True
            elif kind == "library" and code.co_name == "<module>" and \
                    not agent_seen and library_module(code):
                return "library", None
            elif kind == "submission" or kind == "synthetic":
                return "student", frame
            frame = frame.f_back
        return "agent", None

    modules_checked: dict = {}

    def library_module(code):
        """Whether a module's top level that classify calls the library's
        is a library file's module being imported (:func:`library_file_code`),
        not module-level text a generator compiled (red team 16: a
        dataclass field name that wrote statements of its own). Kept by
        the code's address (classify keeps the code alive)."""
        key = address(code)
        verdict = modules_checked.get(key)
        if verdict is None:
            verdict = modules_checked[key] = library_file_code(code)
        return verdict

    def mark(code, how):
        pending = [code]
        while pending:
            item = pending.pop()
            if b_type(item) is not CodeType or b_id(item) in synthetic:
                continue
            synthetic[b_id(item)] = how
            alive[b_id(item)] = item
            kinds.pop(address(item), None)
            pending.extend(item.co_consts)

    def library_file_code(code):
        """True when ``code`` is what compiling its library file gives: a
        module imported at the submission's request, not code passed off
        under a library file's name."""
        name = code.co_filename
        path = real(name)
        if path is None or not inside(path, library_roots) or \
                inside(path, hidden) or not file_exists(path):
            return False
        wanted = library_checked.get(path)
        if wanted is None:
            try:
                with b_open(path, "rb") as stream:
                    text = stream.read()
                wanted = fingerprint(b_compile(text, name, "exec",
                                               dont_inherit=True,
                                               optimize=0))
            except b_BaseException:
                wanted = ""
            library_checked[path] = wanted
        return wanted == fingerprint(code)

    def fields_are_names(frame):
        """False when the generator's frame holds a class (its local
        ``cls``) whose own annotations, the fields a dataclass writes
        into the text it compiles, are not all identifiers: a name that
        holds a quote and a line break writes statements of its own
        (red team 16), so the code made from it is the submission's.
        namedtuple and make_dataclass refuse such names themselves.
        Reads the class's own namespace and annotations by their exact
        types only: nothing of the submission's runs here."""
        cls = frame.f_locals.get("cls")
        if cls is None or b_type not in type_mro(b_type(cls)):
            return True
        annotations = type_dict(cls).get("__annotations__")
        if annotations is None:
            return True
        if b_type(annotations) is not b_dict:
            return False
        for name in annotations:
            if b_type(name) is not b_str or not str_isidentifier(name):
                return False
        return True

    def generated_by_library(frame):
        """True when the library frames above the submission's frame went
        through a public code generator (namedtuple, dataclass), from
        names that are identifiers (:func:`fields_are_names`)."""
        through = False
        while frame is not None:
            code = frame.f_code
            if classify(code) != "library":
                return through
            if b_id(code) in generators:
                if not fields_are_names(frame):
                    return False
                through = True
            frame = frame.f_back
        return through

    def made_code(code, how, frame):
        if b_type(code) is not CodeType:
            return
        if how == "exec" and library_file_code(code):
            return
        if generated_by_library(frame):
            return
        mark(code, how)

    return classify, actor, made_code


def audit_hook(send: Callable, report: Callable, token: object,
               codes: dict, who: tuple, paths: tuple, places: dict,
               busy: dict) -> Callable:
    """Return the audit hook: it relays the agent's own frames and events
    (accepted only from the agent's code) and decides every watched event
    of the submission (refused, forbidden, tampered, allowed).

    ``codes``: the ids of the agent's, the frame users', the import
    system's code; ``who``: :func:`code_kinds`' ``classify, actor,
    made_code``; ``paths``: :func:`path_rules`' closures; ``places``: the
    scratch folder and the hidden and library roots; ``busy``: the ids
    of the threads inside the hook, the guard's flag and ``get_ident``.
    """
    import types

    b_len, b_type, b_str, b_int, b_id = len, type, str, int, id
    b_list, b_any, b_isinstance = list, any, isinstance
    b_PermissionError, b_ImportError = PermissionError, ImportError
    b_TypeError, b_BaseException = TypeError, BaseException
    error_args = BaseException.__dict__["args"].__get__
    type_name = type.__dict__["__name__"].__get__
    getframe = sys._getframe
    file_exists = os.path.isfile
    write_flags = (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT
                   | os.O_TRUNC)
    agent_codes, frame_users = codes["agent"], codes["frame_users"]
    frame_handers = codes["frame_handers"]
    generators = codes["generators"]
    type_bases = type.__dict__["__bases__"].__get__
    generic = getattr(sys.modules.get("typing"), "Generic", tuple)
    import_codes = codes["import"]
    loaded_files = codes["loaded_files"]
    CodeType, b_dict_type, b_tuple = types.CodeType, dict, tuple
    module_dict = types.ModuleType.__dict__["__dict__"].__get__
    sys_modules = sys.modules
    classify, actor, made_code = who
    real, inside, readable_path, show, module_name = paths
    scratch, hidden = places["scratch"], places["hidden"]
    library_roots = places["library_roots"]
    # The interpreter's own extension folder, and what of it is the
    # standard library: CPython also builds modules there for its own
    # tests (_testcapi: pending calls on the grader's thread) and
    # experiments (_xxsubinterpreters: an interpreter with no audit hook
    # and no trace function), which sys.stdlib_module_names leaves out.
    natives = _interpreter_natives(real)
    standard = frozenset(sys.stdlib_module_names)
    # Native code outside the standard library: only that of the packages
    # whose native code the worker runs already (torch, numpy, matplotlib
    # when warmed). Every other native module is an FFI away from raw
    # memory (cffi: the channel's key, the grader's frames).
    own_natives = _indexed("native_roots")
    if own_natives is None:
        own_natives = _loaded_native_roots(real, inside, natives)
    basename = os.path.basename
    kit_modules = KIT_PACKAGES
    devnull = os.devnull
    in_hook = busy["hook"]
    code_set = busy.get("code_set", [True])
    refusing = busy["guard"]
    get_ident = busy["ident"]
    on_grader_stack = REFUSED_ON_GRADER
    process_events = dict(PROCESS_EVENTS)
    introspection_events = dict(INTROSPECTION_EVENTS)
    path_events = dict(PATH_EVENTS)
    frame_attributes = frozenset(FRAME_ATTRIBUTES)
    watched_events = frozenset(
        list(PROCESS_EVENTS) + list(INTROSPECTION_EVENTS)
        + list(PATH_EVENTS) + ["open", "import", "exec", "function.__new__",
                               "object.__setattr__", "object.__getattr__",
                               "sys.addaudithook", "grader.frame",
                               "grader.event", "grader.open"])

    unchecked = ("the grader's sandbox refuses this: the grader could "
                 "not check it")

    def refuse(kind, verb, what, frame, error=None):
        report(kind, verb, what, frame)
        raise (error or b_PermissionError)(
            "the grader's sandbox refuses to " + verb
            + (" " + what if what else ""))

    def hook(event, args):
        """The hook CPython calls. Its checks run in :func:`verdict`,
        which never raises: a refusal is raised here, from this frame
        alone, so the traceback a submission catches holds no frame of
        the checks (their locals: the channel's writer, the paths) and
        no exception of theirs as its context."""
        if event not in watched_events:
            return
        # Every ``frame.f_code`` the trace functions read raises this
        # event: answered here, before any other work, as verdict would.
        if event == "object.__getattr__" and (
                b_len(args) < 2 or args[1] not in frame_attributes):
            return
        if event == "object.__setattr__":
            # Any function's code replaced, by anyone, on any thread:
            # before every other check (the torch function mode's check
            # reads its handler's code again, operation_judge).
            code_set[0] = True
        refusal = verdict(event, args)
        if refusal is not None:
            raise refusal[0](refusal[1])

    def verdict(event, args):
        """None, or the refusal's class and text. A check that fails
        (a recursion limit met inside, a channel that cannot be written)
        refuses the event: the hook fails closed."""
        me = get_ident()
        if me in in_hook:
            return None
        in_hook.add(me)
        try:
            # None when C code called from no Python frame raised it (a
            # job of the trampoline): decided as the agent's, as a
            # stack of the agent's frames alone is.
            caller = getframe(1).f_back
            if event == "sys.settrace" and refusing[0] == me:
                # The grader's own thread met the submission's code (its
                # guard raised): CPython removing the guard is refused.
                refusing[0] = None
                report("refused", on_grader_stack, "", caller)
                raise b_PermissionError("the grader's sandbox refuses to "
                                        + on_grader_stack)
            if event.startswith("grader."):
                relay(event, args, caller)
            else:
                decide(event, args, caller)
        except b_BaseException as error:
            kind = b_type(error)
            if kind is b_PermissionError or kind is b_ImportError or \
                    kind is b_TypeError:
                told = error_args(error)
                if b_len(told) == 1 and b_type(told[0]) is b_str:
                    return kind, told[0]
            return b_PermissionError, unchecked
        finally:
            in_hook.discard(me)
        return None

    def relay(event, args, caller):
        """The agent's own frames and events, accepted only from the
        agent's code (frames: with the agent's token); anyone else asking
        is tampering."""
        if caller is None or b_id(caller.f_code) not in agent_codes or (
                event == "grader.frame" and (
                    b_len(args) != 2 or args[0] is not token)):
            asker, student = actor(caller)
            report("tampered", "send frames through the grader's channel",
                   "", student)
            return
        if event == "grader.frame" and b_len(args) == 2 and \
                args[0] is token:
            send(args[1])
        elif event == "grader.event" and b_len(args) >= 3:
            below = caller.f_back
            while below is not None and b_id(below.f_code) in agent_codes:
                below = below.f_back
            report(args[0], args[1], args[2], below)
        elif event == "grader.open" and b_len(args) >= 2:
            below = caller.f_back
            asker, student = actor(below)
            if asker != "agent":
                opened([args[0], args[1], None], student,
                       asker == "library", below)

    def decide(event, args, caller):
        asker, student = actor(caller)
        if asker == "agent":
            return
        by_library = asker == "library"
        if event == "exec" or event == "function.__new__":
            if args and not by_library:
                if event == "exec" and second_copy(args[0], caller):
                    refuse("forbidden", "load a second copy of",
                           show(args[0].co_filename), student,
                           b_ImportError)
                made_code(args[0], "exec" if event == "exec" else
                          "a function made from a code object", caller)
            return
        if event == "object.__setattr__":
            if b_len(args) >= 3 and args[1] == "__code__" and \
                    not by_library:
                made_code(args[2], "a replaced __code__", caller)
            elif b_len(args) >= 3 and args[1] == "__bases__" and \
                    not by_library and not named_tuple_bases(args, caller):
                report("patched", "change the base classes of",
                       type_name(args[0]) if b_isinstance(args[0], b_type)
                       else "a class", student)
            return
        if event == "import":
            name = args[0] if args else ""
            if b_type(name) is b_str and name.split(".")[0] in kit_modules:
                refuse("forbidden", "import", name, student, b_ImportError)
            path = args[1] if b_len(args) > 1 else None
            if path is not None:
                # A native extension module being loaded: only libraries'.
                full = real(path)
                if full is None or not inside(full, library_roots) or \
                        inside(full, hidden):
                    refuse("refused", "load native code from", show(path),
                           student, b_ImportError)
                if natives and inside(full, natives):
                    if basename(full).split(".")[0] not in standard:
                        refuse("refused", "load a module the interpreter "
                               "builds outside its standard library (for "
                               "its own tests and experiments):",
                               show(path), student, b_ImportError)
                elif not inside(full, own_natives):
                    refuse("refused", "load native code of a library the "
                           "grader does not run (only the standard "
                           "library's and that of the libraries the grader "
                           "loaded, such as torch, load):", show(path),
                           student, b_ImportError)
            return
        if event in process_events:
            what = process_events[event]
            if by_library:
                raise b_PermissionError("the grader's sandbox refuses to "
                                        + what)
            refuse("refused", what, "", student)
        if (event == "sys._getframe" or event == "object.__getattr__") and (
                b_id(caller.f_code) in frame_users or (
                    b_id(caller.f_code) in frame_handers
                    and caller.f_back is not None
                    and b_id(caller.f_back.f_code) in frame_users)):
            return
        if event in introspection_events or event == "object.__getattr__" \
                or event == "sys.addaudithook":
            if by_library and event == "sys._getframe":
                return  # a library module's own import-time bookkeeping
            what = introspection_events.get(
                event, "inspect the grader's stack frames"
                if event == "object.__getattr__" else "install an audit hook")
            if by_library:
                raise b_PermissionError("the grader's sandbox refuses to "
                                        + what)
            refuse("tampered", what, "", student)
        if event == "open":
            opened(args, student, by_library, caller)
            return
        if event in path_events:
            positions, verb = path_events[event]
            for index in positions:
                if index < b_len(args):
                    full = real(args[index])
                    if full is None or not inside(full, (scratch,)):
                        if by_library:
                            raise b_PermissionError(
                                "the grader's sandbox refuses changes "
                                "outside its scratch folder")
                        refuse("refused", verb, show(args[index]), student)

    def named_tuple_bases(args, caller):
        """True when typing's NamedTuple class maker (a generator) gives
        the namedtuple class it just made its declared bases: (tuple,)
        becomes tuple and, for a generic one, typing.Generic."""
        if b_id(caller.f_code) not in generators or \
                b_type(args[2]) is not b_tuple or \
                not b_isinstance(args[0], b_type):
            return False
        before = type_bases(args[0])
        if b_len(before) != 1 or before[0] is not b_tuple:
            return False
        for base in args[2]:
            if base is not b_tuple and base is not generic:
                return False
        return True

    def second_copy(code, caller):
        """True when ``code`` is a library module's code executed a second
        time: its file was loaded before the submission ran, or is the
        file of another loaded module, or it is executed into a namespace
        the import system did not make for its first load (a module built
        by hand, a reload). Such a copy would hold fresh objects where the
        tripwires replaced the loaded ones."""
        if b_type(code) is not CodeType or code.co_name != "<module>":
            return False
        name = code.co_filename
        path = real(name)
        if path is None or not inside(path, library_roots):
            return False
        if name in loaded_files or path in loaded_files:
            return True
        target = None
        loader = caller.f_code
        if loader.co_name == "_call_with_frames_removed" and \
                loader.co_filename.endswith("importlib._bootstrap>"):
            held = caller.f_locals.get("args")
            if b_type(held) is b_tuple and b_len(held) >= 2 and \
                    b_type(held[1]) is b_dict_type:
                target = held[1]
        if target is None:
            return True
        if b_any(b_type(key) is not b_str or not key.startswith("__")
                 for key in b_list(target)):
            return True  # executed before: a reload
        module = sys_modules.get(target.get("__name__"))
        if module is None or module_dict(module) is not target:
            return True
        for other in b_list(sys_modules.values()):
            try:
                namespace = module_dict(other)
            except b_TypeError:
                continue
            if namespace is not target and \
                    namespace.get("__file__") == name:
                return True
        return False

    def importing(frame, student):
        """True when the import system stands between ``frame`` and the
        submission's frame (the file is opened to import a module)."""
        while frame is not None and frame is not student:
            if b_id(frame.f_code) in import_codes:
                return True
            frame = frame.f_back
        return False

    def opened(args, student, by_library, caller):
        path, mode, flags = (b_list(args) + [None, None, None])[:3]
        if b_type(path) is b_int:
            return
        writing = (b_type(mode) is b_str and b_any(
            c in mode for c in "wax+")) or (
                b_type(flags) is b_int and (flags & write_flags) != 0)
        full = real(path)
        if full is None:
            if by_library:
                raise b_PermissionError("the grader's sandbox refuses to "
                                        "open this file")
            refuse("refused", "open a file named by a",
                   type_name(b_type(path)), student)
        if writing and not inside(full, (scratch, devnull)):
            if by_library:
                raise b_PermissionError("the grader's sandbox refuses "
                                        "writes outside its scratch folder")
            verb = "overwrite" if file_exists(full) else "create"
            refuse("refused", verb, show(path), student)
        if not writing and not readable_path(full):
            if by_library:
                raise b_PermissionError("the grader's sandbox refuses to "
                                        "read " + show(path))
            # The kit's own packages are forbidden to import; a file of
            # the student package that the graded homework does not ship
            # (a hidden file among the library roots) is refused like any
            # read, however it is imported: the code fails on its merits.
            if inside(full, hidden) and importing(caller, student):
                name = module_name(full)
                if not inside(full, library_roots) or \
                        name.split(".")[0] in kit_modules:
                    refuse("forbidden", "import", name, student,
                           b_ImportError)
            refuse("refused", "read", show(path), student)

    return hook


def value_readers(torch: Any, spent: list | None = None
                  ) -> tuple[Callable, ...]:
    """Return ``is_tensor, shape_of, instance_dict, read_chain, expand``:
    values read without running any code of theirs.

    ``read_chain`` fails closed: a name, attribute or item it cannot read
    with the base types' own methods (a property or any descriptor of
    Python's, a ``__getattribute__`` written in Python, a watch entry the
    plan marks as unwatchable) reads as a value
    of its own, which ``expand`` records as UNREAD_RECORD, never as "no
    tensor". ``spent[0]`` counts the container values read (the cost the
    line tracer charges to a statement).

    ``expand(value, True, slot)`` reads a container incrementally
    (:func:`held_of`): ``slot`` (a one-item list the caller keeps for one
    watched value of one statement in one frame) holds what the last read
    of that value found."""
    import builtins
    import functools
    import itertools
    import operator
    import types

    b_type, b_int, b_dict, b_range = type, int, dict, range
    b_tuple, b_list, b_BaseException = tuple, list, BaseException
    b_str = str
    type_mro = type.__dict__["__mro__"].__get__
    type_dict = type.__dict__["__dict__"].__get__
    tuple_len, tuple_item = tuple.__len__, tuple.__getitem__
    list_len, list_item = list.__len__, list.__getitem__
    dict_values, b_len, b_min, b_max = dict.values, len, min, max
    dict_items = dict.items
    proxy_type = types.MappingProxyType
    proxy_items = proxy_type.items
    max_scan, max_held, max_depth = MAX_HELD_SCAN, MAX_HELD, MAX_HELD_DEPTH
    TensorBase = torch._C.TensorBase
    t_size, t_dim = TensorBase.size, TensorBase.dim
    no_torch_function = torch._C.DisableTorchFunction
    Module = torch.nn.Module
    module_instance_dict = Module.__dict__["__dict__"].__get__ \
        if "__dict__" in Module.__dict__ else None
    wrapper_type = b_type(object.__dict__["__getattribute__"])
    member_type = types.MemberDescriptorType
    getset_type = types.GetSetDescriptorType
    FunctionType = types.FunctionType
    builtin_values = vars(builtins)
    holders = ("_parameters", "_buffers", "_modules")
    module_methods = {name: Module.__dict__.get(name)
                      for name in ("__getattr__", "__setattr__")}
    unread = object()  # what read_chain returns for what it cannot read
    unread_record, irregular_record = UNREAD_RECORD, IRREGULAR_RECORD
    b_Exception = Exception
    missing = (False, None)
    # The incremental reading of a container (held_of's ``slot``): C
    # functions only where a value of the submission's is touched.
    chain_from = itertools.chain.from_iterable
    b_islice, b_repeat = itertools.islice, itertools.repeat
    b_map, b_filter, b_sum, b_set, b_any = map, filter, sum, set, any
    compress = itertools.compress
    is_, is_not = operator.is_, operator.is_not
    not_none = functools.partial(is_not, None)
    held_from, held_compare = HELD_INCREMENTAL, HELD_COMPARE
    max_tree = MAX_HELD_TREE

    def is_tensor(value):
        return TensorBase in type_mro(b_type(value))

    def size_of(value):
        """A tensor's shape (None for no tensor); IRREGULAR_RECORD when
        it has no fixed one: a nested tensor whose parts differ in size
        (torch cannot give its sizes, or gives one as no whole number)."""
        if not is_tensor(value):
            return None
        with no_torch_function():
            try:
                return [b_int(s) for s in t_size(value)]
            except b_Exception:
                pass
            try:  # a nested tensor: its sizes one dimension at a time
                return [b_int(t_size(value, i))
                        for i in b_range(t_dim(value))]
            except b_Exception:
                return irregular_record

    def shape_of(value):
        """A tensor's fixed shape, or None (no tensor, or none fixed)."""
        size = size_of(value)
        return size if b_type(size) is b_list else None

    def instance_dict(obj):
        """A module's own attribute dict, read without running its code."""
        if module_instance_dict is None or \
                Module not in type_mro(b_type(obj)):
            return {}
        try:
            namespace = module_instance_dict(obj)
        except b_BaseException:
            return {}
        return namespace if b_type(namespace) is b_dict else {}

    def entry(namespace, key):
        """``(True, value)`` when the dict (or a class's mapping proxy)
        holds ``key``: its items are compared only when they are exact
        strings, so no key's own ``__eq__`` runs; ``(True, unread)`` when
        it does not, but holds a key of another type (which Python's
        lookup might find equal); ``(False, None)`` otherwise."""
        kind = b_type(namespace)
        if kind is b_dict:
            pairs = dict_items(namespace)
        elif kind is proxy_type:
            pairs = proxy_items(namespace)
        else:
            return missing
        odd = False
        for name, value in pairs:
            if b_type(name) is not b_str:
                odd = True
            elif name == key:
                return True, value
        return (True, unread) if odd else missing

    def declared(mro, name):
        """What the first class of ``mro`` that declares ``name`` holds."""
        for base in mro:
            found = entry(type_dict(base), name)
            if found[0]:
                return found
        return missing

    def data_descriptor(value):
        mro = type_mro(b_type(value))
        return declared(mro, "__set__")[0] or \
            declared(mro, "__delete__")[0]

    def own_dict(value, kind, mro):
        """The instance's attribute dict, read through its class's native
        ``__dict__`` descriptor (None when it has none)."""
        found, holder = declared(mro, "__dict__")
        if not found or (b_type(holder) is not getset_type
                         and b_type(holder) is not member_type):
            return None
        try:
            namespace = holder.__get__(value, kind)
        except b_BaseException:
            return None
        return namespace if b_type(namespace) is b_dict else None

    def attribute_of(value, attribute):
        """``value.attribute`` as Python's own lookup finds it, read only
        where no code of the value's runs (``unread`` otherwise): a slot,
        the instance's dict (a module's parameters, buffers and
        submodules too), a plain class attribute."""
        kind = b_type(value)
        mro = type_mro(kind)
        found, getter = declared(mro, "__getattribute__")
        if not found or b_type(getter) is not wrapper_type:
            return unread
        in_class, slot = declared(mro, attribute)
        if in_class and b_type(slot) is member_type:
            try:
                return slot.__get__(value, kind)
            except b_BaseException:
                return unread
        if in_class and data_descriptor(slot):
            return unread
        namespace = own_dict(value, kind, mro)
        if namespace is not None:
            found, item = entry(namespace, attribute)
            if found:
                return item
            if Module in mro:
                for holder_name in holders:
                    inner = entry(namespace, holder_name)[1]
                    found, item = entry(inner, attribute)
                    if found:
                        return item
        if in_class:
            if not declared(type_mro(b_type(slot)), "__get__")[0]:
                return slot
            if b_type(slot) is FunctionType:
                return None  # a method: no tensor
            return unread
        if own_code(mro, "__getattr__") or own_code(mro, "__setattr__"):
            return unread  # its own code keeps or serves the value
        # No value at all (Python's lookup raises): a frame on the
        # statement's line that is not its own (a lambda's, a
        # comprehension's) reads before the statement wrote it.
        return None

    def own_code(mro, name):
        """True when the class's ``name`` is its own code: neither a C
        slot nor ``nn.Module``'s."""
        found, method = declared(mro, name)
        if not found or b_type(method) is wrapper_type:
            return False
        return method is not module_methods.get(name)

    def read_chain(chain, local_values, global_values):
        name = chain[0]
        if name[:1] == "<":
            return unread  # a target the plan cannot watch
        found, value = entry(local_values, name)
        if not found:
            found, value = entry(global_values, name)
        if not found:
            found, value = entry(builtin_values, name)
        if not found:
            # Not the statement's frame: a lambda's or a comprehension's
            # on its line (the statement's own frame records it), or the
            # name was deleted in the same line (its value is gone).
            return None
        for attribute in chain[1:]:
            value = attribute_of(value, attribute)
            if value is unread:
                return unread
        return value

    def items_of(value):
        """The first elements of a list or tuple, or the first values of
        a dict (read with the base types' own methods), or None."""
        mro = type_mro(b_type(value))
        if b_tuple in mro:
            count, item = tuple_len(value), tuple_item
        elif b_list in mro:
            count, item = list_len(value), list_item
        elif b_dict in mro:
            found = []
            for one in dict_values(value):
                if b_len(found) > max_scan:
                    break
                found.append(one)
            return found
        else:
            return None
        return [item(value, i) for i in b_range(b_min(count,
                                                      max_scan + 1))]

    def walk(value, depth, found, state):
        if state[0] >= max_scan:
            state[1] = True
            return
        state[0] += 1
        if is_tensor(value):
            shape = size_of(value)
            if shape is irregular_record:
                state[2] = True
                return
            if b_len(found) < max_held:
                found.append(shape)
            elif shape not in found:
                state[1] = True
            return
        items = items_of(value)
        if items is None:
            return
        if depth >= max_depth:
            state[1] = state[1] or b_len(items) > 0
            return
        for item in items:
            walk(item, depth + 1, found, state)

    def container_level(level, room):
        """The values the containers of ``level`` hold, in order, when
        each is an exact list or tuple, or each an exact dict (their own
        C iteration: no code of the submission's runs), and they hold at
        most ``room`` (counted before anything is copied); None
        otherwise. The kinds are compared by identity (no metaclass's
        ``__eq__``)."""
        kinds = b_list(b_map(b_type, level))
        size = b_len(kinds)
        lists = b_sum(b_map(is_, kinds, b_repeat(b_list)))
        if lists == size or lists + b_sum(
                b_map(is_, kinds, b_repeat(b_tuple))) == size:
            if b_sum(b_map(b_len, level)) > room:
                return None
            return b_list(level[0]) if size == 1 else \
                b_list(chain_from(level))
        if b_sum(b_map(is_, kinds, b_repeat(b_dict))) == size:
            if b_sum(b_map(b_len, level)) > room:
                return None
            return b_list(dict_values(level[0])) if size == 1 else \
                b_list(chain_from(b_map(dict_values, level)))
        return None

    def leaf_key(value):
        """What one value adds to a container's record: a tensor's shape
        (a tuple) or IRREGULAR_RECORD; None for a value that is neither a
        tensor nor a container; ``unread`` for a container (of any kind:
        the tree's values do not all lie at one depth)."""
        if is_tensor(value):
            shape = size_of(value)
            return shape if shape is irregular_record else b_tuple(shape)
        mro = type_mro(b_type(value))
        if b_list in mro or b_tuple in mro or b_dict in mro:
            return unread
        return None

    def summary(entry):
        """A container's record from its entry: what :func:`walk` makes
        of the same values, in the same order."""
        keys, counts = entry[1], entry[2]
        if irregular_record in counts:
            return irregular_record
        found = b_list(b_islice(b_filter(not_none, keys), max_held))
        shown = [b_list(key) for key in found]
        if b_len(counts) > b_len(b_set(found)):
            shown.append(None)  # a shape past the first max_held
        return shown or None

    def count(counts, key, step):
        if key is not None:
            left = counts.get(key, 0) + step
            if left:
                counts[key] = left
            else:
                del counts[key]

    def holds_container(kinds):
        """True when any of ``kinds`` (the types of a level's values) is
        an exact list, tuple or dict (compared by identity, in C)."""
        return b_any(b_map(is_, kinds, b_repeat(b_list))) or \
            b_any(b_map(is_, kinds, b_repeat(b_tuple))) or \
            b_any(b_map(is_, kinds, b_repeat(b_dict)))

    def compared(total):
        """The charge of copying or comparing ``total`` values in C."""
        return (total + held_compare - 1) // held_compare

    def afresh(value):
        """``[levels, keys, counts, record]``: the tree of exact lists,
        tuples and dicts under ``value`` level by level (no value of the
        last level a list, tuple or dict), the key of each value of the
        last level (:func:`leaf_key`), how many of each, and the record
        made of them (:func:`summary`; None until :func:`held_again`
        makes it, kept while it stays the same); None when it is no such
        tree, holds more than MAX_HELD_TREE values, or is small
        (HELD_INCREMENTAL): :func:`walk` reads it. Charged whatever it
        finds: the levels it copied (1 per HELD_COMPARE values), and
        every value once it reads the last level's keys."""
        levels, total = [[value]], 1
        while levels[-1]:
            inner = container_level(levels[-1], max_tree - total)
            if inner is None:
                break
            total += b_len(inner)
            if b_len(levels) > max_depth:
                spent[0] += compared(total)
                return None
            levels.append(inner)
        if b_len(levels) < 2 or total <= held_from:
            return None
        leaves = levels[-1]
        if holds_container(b_list(b_map(b_type, leaves))):
            # Too big, or its values do not all lie at one depth.
            spent[0] += compared(total)
            return None
        spent[0] += total
        keys = []
        for one in leaves:
            key = leaf_key(one)
            if key is unread:
                return None  # a container of another kind
            keys.append(key)
        counts: dict = {}
        for key in keys:
            count(counts, key, 1)
        return [levels, keys, counts, None]

    def again(value, entry):
        """Read ``value`` again, as the same statement last found it
        (``entry``, updated): the tree must have the same depth, every
        container an exact list, tuple or dict; the values of its last
        level that are not the very objects read last time (compared by
        identity, in C) are read, the others keep their keys. None (read
        afresh) when the tree changed its form, or when no value changed
        identity: the statement may have changed a value in place."""
        levels, total = [[value]], 1
        for _ in b_range(b_len(entry[0]) - 1):
            inner = container_level(levels[-1], max_tree - total)
            if inner is None:
                spent[0] += compared(total)
                return None
            total += b_len(inner)
            levels.append(inner)
        leaves, old = levels[-1], entry[0][-1]
        keys, counts = entry[1], entry[2]
        new, before = b_len(leaves), b_len(old)
        # The positions, among those both hold (map stops at the shorter),
        # of the values that are not the very objects of the last read:
        # one pass in C.
        changed = b_list(compress(b_range(new), b_map(is_not, leaves, old))) \
            if b_any(b_map(is_not, leaves, old)) else []
        if not changed and new == before:
            return None
        # The record stays the one kept (entry[3]) when only values were
        # added, after the first max_held tensors, of shapes it holds.
        kept = entry[3] is not None and not changed and new > before \
            and b_sum(dict_values(counts)) >= max_held
        for index in b_range(new, before):
            count(counts, keys[index], -1)
        del keys[new:]
        for index in changed:
            key = leaf_key(leaves[index])
            if key is unread:
                return None
            count(counts, keys[index], -1)
            count(counts, key, 1)
            keys[index] = key
        for index in b_range(before, new):
            key = leaf_key(leaves[index])
            if key is unread:
                return None
            if kept and key is not None and key not in counts:
                kept = False
            count(counts, key, 1)
            keys.append(key)
        entry[0] = levels
        if not kept:
            entry[3] = None
        spent[0] += b_len(changed) + b_max(new - before, before - new) + \
            compared(total)
        return entry

    def held_again(value, slot):
        """The record of a container read through ``slot`` (its entry
        from the last read, or None); ``unread`` when :func:`walk` must
        read it (the slot is then empty)."""
        entry = slot[0]
        slot[0] = None  # an error of the reading leaves no entry
        if entry is not None:
            entry = again(value, entry)
        if entry is None:
            entry = afresh(value)
        if entry is None:
            return unread
        slot[0] = entry
        if entry[3] is None:
            entry[3] = summary(entry)
        return entry[3]

    def held_of(value, slot=None):
        """A tensor's shape; for a list, tuple or dict, the shapes of the
        tensors it holds (nested ones too, in order), with None last when
        it holds more than the grader reads; None when it holds none;
        UNREAD_RECORD for what :func:`read_chain` could not read;
        IRREGULAR_RECORD for a tensor with no fixed shape, or a container
        that holds one. ``slot``: read incrementally (:func:`again`)
        what the same statement read before; without one (a returned
        value, read once), a tree of exact lists, tuples and dicts is
        read by :func:`afresh` all the same, up to MAX_HELD_TREE."""
        if value is unread:
            return unread_record
        mro = type_mro(b_type(value))
        if TensorBase in mro:
            return size_of(value)
        if b_list not in mro and b_tuple not in mro and b_dict not in mro:
            # What the walker makes of it, at its cost: 1, no tensor.
            if spent is not None:
                spent[0] += 1
            return None
        if spent is not None:
            record = held_again(value, [None] if slot is None else slot)
            if record is not unread:
                return record
        found, state = [], [0, False, False]
        walk(value, 0, found, state)
        if spent is not None:
            spent[0] += state[0]
        if state[2]:
            return irregular_record
        if state[1]:
            found.append(None)
        return found or None

    def expand(value, whole=False, slot=None):
        """The shape of each element of a returned tuple or list (each a
        tensor's shape or a container's, as :func:`held_of` reads it);
        ``whole``: ``held_of(value, slot)``."""
        if whole:
            return held_of(value, slot)
        kind = b_type(value)
        if b_tuple in type_mro(kind):
            return [held_of(tuple_item(value, i))
                    for i in b_range(tuple_len(value))]
        if b_list in type_mro(kind):
            return [held_of(list_item(value, i))
                    for i in b_range(list_len(value))]
        return [held_of(value)]

    return is_tensor, shape_of, instance_dict, read_chain, expand


def plain_reader(torch: Any) -> Callable[[Any], list | None]:
    """Return ``plain(value)``: the shape of a plain tensor, read with C
    calls only, or None when ``value`` is not one.

    A plain tensor is an object whose class is exactly ``torch.Tensor``
    or ``torch.nn.Parameter`` (compared by identity: no metaclass's
    ``__eq__``), without torch's Python dispatch key (no
    ``__torch_dispatch__`` of anyone's serves it), whose sizes torch's
    own ``size`` gives, with torch's functions set aside (no torch
    function mode is called): no Python code runs. For such a tensor the
    shape is what :func:`value_readers`' ``size_of`` reads; anything else
    (a subclass, a nested tensor, a container) is None and read there,
    traced (:func:`line_tracer`)."""
    tensor_type, parameter_type = torch.Tensor, torch.nn.Parameter
    t_size = torch._C.TensorBase.size
    no_torch_function = torch._C.DisableTorchFunction
    dispatch_keys, python_key = (torch._C._dispatch_keys,
                                 torch._C.DispatchKey.Python)
    b_type, b_list, b_map, b_int = type, list, map, int
    b_Exception = Exception

    def plain(value):
        kind = b_type(value)
        if kind is not tensor_type and kind is not parameter_type:
            return None
        with no_torch_function():
            try:
                if dispatch_keys(value).has(python_key):
                    return None
                return b_list(b_map(b_int, t_size(value)))
            except b_Exception:
                return None

    return plain


def shape_tracer(units: list, line_unit: dict, phase: dict,
                 classify: Callable, synthetic: dict, readers: tuple,
                 note: Callable | None = None,
                 tensor_base: type | None = None,
                 operations: tuple | None = None,
                 stand_ins: dict | None = None,
                 reads: tuple | None = None,
                 calls: dict | None = None,
                 plain: Callable | None = None,
                 known: dict | None = None,
                 frame_hook: Callable | None = None) -> Callable:
    """Return the global trace function: it records which code of the
    submission runs (``phase["ran"]``), code that is neither the
    submission's nor a library's (``phase["foreign"]``), and, while a
    probe traces, the shapes of the planned statements
    (:func:`line_tracer`).

    It also reports (``note``, kind "untraceable") the submission's code
    running through a stand-in for tensors: an object that is no tensor
    (no ``tensor_base`` in its classes) but answers torch's functions
    through STAND_IN_PROTOCOL, called straight from the submission's
    code. Such a stand-in records the code instead of computing it
    (``torch.fx``'s symbolic tracing, any recorder), so that the recording
    can run later where no trace function follows (an interpreter of the
    recorded graph).

    ``operations`` (:func:`operation_judge`'s ``judge`` and ``in_force``,
    and the code of the grader's torch function mode's handler): every
    torch operation is judged at the call of the handler, and every
    library and submission frame checks that the mode is in force.

    ``stand_ins`` (:func:`install_tripwires`): the code objects of the
    inert stand-ins, with what each stands for; the call of one is
    reported here (``note``), by the code's identity alone, so that
    nothing the stand-in holds can silence it.

    ``reads`` (:func:`traced_reads`' ``read`` and ``aim``): what reads a
    value the submission may have made runs through ``read``, traced by
    this trace function (aimed at it here).

    ``calls`` maps the code keys ``(first line, name)`` of the declared
    methods (a task's ``inputs``) to their index: a traced call of one
    marks what runs inside it with the shape of its first argument after
    ``self``, read when the call starts (:func:`line_tracer`).

    ``plain`` (:func:`plain_reader`) is handed to :func:`line_tracer`."""
    b_len, b_str, b_id, b_type = len, str, id, type
    b_isinstance = isinstance
    max_executions, max_foreign = MAX_EXECUTIONS, MAX_FOREIGN
    gettrace, settrace = sys.gettrace, sys.settrace
    is_tensor, shape_of, instance_dict, read_chain, expand = readers
    # Compared by identity: the names the compiler interned (a name that
    # is not, a str subclass, belongs to code made at run time: foreign).
    protocol_function, protocol_dispatch = STAND_IN_PROTOCOL
    b_BaseException = BaseException

    def plain_call(function, *args):
        return function(*args)

    read = reads[0] if reads is not None else plain_call
    gc_on, hold, collect_due = collector(read) if reads is not None \
        else (None, None, None)
    collect_every = COLLECT_CHECK
    due = [collect_every]
    resumable = 0x20 | 0x80 | 0x100 | 0x200  # CO_GENERATOR ... ASYNC_GEN

    def locals_of(frame):
        return frame.f_locals

    verdicts: dict = {}      # id(class) -> (class, stand-in name or None)
    max_verdicts = 4096
    type_mro = type.__dict__["__mro__"].__get__
    type_dict = type.__dict__["__dict__"].__get__
    type_qualname = type.__dict__["__qualname__"].__get__
    judge, in_force, handler_code, layer = operations or (None,) * 4
    inert = stand_ins if stand_ins is not None else {}
    # The names of the stand-ins' codes (:func:`_inert` renames only
    # their qualified names): an agent frame of another name is no
    # stand-in, known without an audited id() per frame.
    inert_names = frozenset((inert_hook().__code__.co_name,
                             inert_call(Exception, "").__code__.co_name))

    def stand_in_name(cls):
        """The class's name when it is a stand-in for tensors: it answers
        torch's functions (STAND_IN_PROTOCOL) and is no tensor."""
        mro = type_mro(cls)
        if tensor_base is not None and tensor_base in mro:
            return None
        for base in mro:
            namespace = type_dict(base)
            if "__torch_function__" in namespace or \
                    "__torch_dispatch__" in namespace:
                module = type_dict(cls).get("__module__")
                return (b_str(module) + "." if b_type(module) is b_str
                        else "") + b_str(type_qualname(cls))
        return None

    def stand_in(frame, code):
        """The stand-in class whose protocol method the submission's code
        called (None when it is not one)."""
        caller = frame.f_back
        if caller is None or code.co_argcount < 1:
            return None
        if classify(caller.f_code) not in ("submission", "synthetic"):
            return None
        first = frame.f_locals.get(code.co_varnames[0])
        if not b_isinstance(first, b_type):
            return None  # a mode (an instance), not a stand-in class
        return stand_in_name(first)

    def stand_in_argument(frame, code):
        """The stand-in class of an argument the submission's code was
        called with (None when none is one).

        Runs untraced: it reads the frame's locals (keyed by the names of
        its code) and the arguments' classes, by identity. Each class is
        judged once, traced (``read``: its namespace may hold a key of
        the submission's); the verdict is kept by the class's identity.
        A class that answers torch's protocol only later (a name set on
        it after its first call) is still seen where its protocol runs
        from the submission's code (:func:`stand_in`)."""
        count = code.co_argcount + code.co_kwonlyargcount
        if not count:
            return None
        # A generator's frame is resumed with its dict of locals from
        # before: refreshing it may drop the last reference to an object
        # (its finalizer runs there), so it is refreshed traced.
        local_values = read(locals_of, frame) if \
            code.co_flags & resumable else frame.f_locals
        for name in code.co_varnames[:count]:
            cls = b_type(local_values.get(name))
            known = verdicts.get(b_id(cls))
            if known is not None and known[0] is cls:
                found = known[1]
            else:
                found = read(stand_in_name, cls)
                if b_len(verdicts) < max_verdicts:
                    verdicts[b_id(cls)] = (cls, found)
            if found is not None:
                return found
        return None

    declared = calls or {}

    def call_marker(frame, code, index):
        """The marker of a declared call: its index and the shape of its
        first argument after ``self`` (None when that is no tensor)."""
        if code.co_argcount < 2:
            return {"call": index, "input": None}
        local_values = read(locals_of, frame) if \
            code.co_flags & resumable else frame.f_locals
        return {"call": index,
                "input": shape_of(local_values.get(code.co_varnames[1]))}

    def record(statement, values):
        records = phase["records"]
        if records is None:
            return
        key_id = b_str(statement["id"])
        executions = records.get(key_id)
        if executions is None:
            executions = records[key_id] = []
        # Every execution up to max_executions (so a report can say "wrong
        # in 3 of the 8 times this line ran"), then only shapes not seen
        # yet, up to twice that: a loop cannot flood the channel. Past the
        # cap the report fails closed: an execution with shapes not
        # recorded is counted, and the grader verifies nothing it did not
        # see (the shapes item is not earned).
        count = b_len(executions)
        if count >= max_executions and values in executions:
            return
        if count >= 2 * max_executions:
            left_out = phase["left_out"]
            left_out[key_id] = left_out.get(key_id, 0) + 1
            return
        executions.append(values)

    def held(value, slot=None):
        return expand(value, True, slot)

    made, settle, clear_made = made_keeper(phase, classify, is_tensor)
    phase["clear_made"] = clear_made
    local_tracer = line_tracer(units, line_unit, record, held,
                               read_chain, expand, phase, read,
                               (gc_on, hold) if gc_on is not None else None,
                               settle=settle, plain=plain)

    def note_recorder(find, frame, code):
        """Report a stand-in for tensors that ``find`` sees at ``frame``."""
        recorder = find(frame, code)
        if recorder is not None:
            note("untraceable", "compile",
                 recorder[:120] + " (a stand-in for tensors that records "
                 "the code it runs through)")

    known_get = known.get if known is not None else None
    address = ADDRESS
    expression_codes = EXPRESSION_CODES

    def global_tracer(frame, event, arg):
        # Whatever reads a value the submission may have made (a class's
        # namespace, a frame's locals, an operation's arguments) runs
        # through ``read``, traced: code of the submission's that such a
        # read runs (a key's __eq__, a finalizer) is traced like any
        # other. An error of the trace function's own ends the
        # phase's trust (``silenced``) and stays here: the submission never
        # catches a traceback through the grader's frames.
        try:
            if gc_on is not None:
                if gc_on():
                    hold()
                due[0] -= 1
                if due[0] <= 0:
                    due[0] = collect_every
                    collect_due()
            code = frame.f_code
            if code is handler_code:
                verdict = judge(frame)
                if verdict is None and phase["tracing"]:
                    return made(frame)
                return verdict
            # ``known``: classify's own table of the codes it has
            # classified (the same look-up it starts with, without a call
            # of it for each event).
            kind = known_get(address(code)) if known_get is not None \
                else None
            if kind is None:
                kind = classify(code)
            if kind == "agent":
                if note is not None and code.co_name in inert_names:
                    entry = inert.get(b_id(code))
                    if entry is not None and entry[0] is code:
                        note(entry[1], entry[2], entry[3])
                return None
            name = code.co_name
            if note is not None and (name is protocol_function or
                                     name is protocol_dispatch):
                read(note_recorder, stand_in, frame, code)
            if kind == "library":
                if in_force is not None:
                    in_force(frame)
                if name == "__init__" and layer is not None:
                    layer(frame)
                return None
            if note is not None:
                note_recorder(stand_in_argument, frame, code)
            if in_force is not None:
                in_force(frame)
            if kind == "submission":
                phase["ran"].add((b_id(code), phase["stage"]))
            else:
                foreign = phase["foreign"]
                entry = [code.co_filename[:200], code.co_name[:80],
                         code.co_firstlineno, synthetic.get(b_id(code), "")]
                if entry not in foreign:
                    if b_len(foreign) < max_foreign:
                        foreign.append(entry)
                    else:
                        phase["foreign_left_out"] += 1
                return None
            if not phase["tracing"]:
                return None
            phase["calls"] += 1
            if kind == "submission" and declared and \
                    b_type(name) is b_str:
                index = declared.get((code.co_firstlineno, name))
                if index is not None:
                    return local_tracer(call_marker(frame, code, index),
                                        kind == "submission"
                                        and name in expression_codes)
            return local_tracer(None, kind == "submission"
                                and name in expression_codes)
        except b_BaseException:
            phase["silenced"] = True
            return None

    def still_tracing():
        """False once the trace function was ever removed (CPython removes
        it when it raises, e.g. at the recursion limit), or a frame
        evaluation callback was found set (``frame_hook``, FRAME_HOOKS:
        it saw the frames the trace function serves): from then on the
        grader has seen less than the code that ran. Installs the trace
        function again, so that later code is traced all the same."""
        if gettrace() is not global_tracer:
            phase["silenced"] = True
            settrace(global_tracer)
        if frame_hook is not None:
            hook = frame_hook()
            if hook is not None and hook is not False:
                phase["silenced"] = True
        return not phase["silenced"]

    if reads is not None:
        reads[1](global_tracer)
    return global_tracer, still_tracing


def collector(read: Callable) -> tuple[Callable, Callable, Callable]:
    """Return ``is_on()``, ``hold()`` and ``collect_due()``: the garbage
    collector's automatic collection, moved out of the trace function's
    bookkeeping.

    In CPython 3.11 a collection starts at an allocation, any allocation,
    and runs the finalizers of what it frees there (``__del__``,
    ``weakref.finalize``, weak references' callbacks): inside the trace
    function, where nothing is traced. ``hold`` (the first thing the
    trace functions do, when ``is_on()``) turns automatic collection off
    (the submission may turn it on again: ``gc.enable()`` is allowed; a
    ``read`` turns it off again on return). ``collect_due`` (every
    COLLECT_CHECK call events) runs the collection CPython would have
    run, of the generation it would have chosen, when the count of
    allocations has passed the threshold, but through ``read``: traced,
    so a finalizer's code is seen like any other code of the
    submission's."""
    import gc

    gc_isenabled, gc_disable = gc.isenabled, gc.disable
    get_count, get_threshold, collect = (gc.get_count, gc.get_threshold,
                                         gc.collect)

    def collect_due():
        young = get_count()
        limits = get_threshold()
        if limits[0] <= 0 or young[0] <= limits[0]:
            return
        generation = 0
        if young[1] > limits[1]:
            generation = 2 if young[2] > limits[2] else 1
        read(collect, generation)

    return gc_isenabled, gc_disable, collect_due


def made_keeper(phase: dict, classify: Callable, is_tensor: Callable
                ) -> tuple[Callable, Callable, Callable]:
    """Return ``made(frame)``, ``settle(frame, how)`` and ``clear()``:
    which lines of the submission made a tensor that outlived their
    statement.

    ``made`` runs at the call of the torch function mode's handler
    (``frame``): a torch operation is about to run. The nearest frame of
    the submission's below it (however many library frames lie between:
    a layer's ``forward``) is the line that asked for it; ``made`` returns
    a local trace function that, when the operation returns a tensor (or
    a tuple or list of them: ``split``, ``sort``; its first 64), keeps a
    weak reference to each for that frame and line.
    ``settle(frame, how)`` (when a statement of the frame completes, or
    the frame returns or yields) adds to ``phase["made"]`` every such
    line whose tensor is still alive: the statement kept it somewhere (a
    name, a container, a default, a class body, a context variable, an
    ``out=`` tensor). Intermediates that die with the statement
    (``x.sum().item()``) count for nothing; so does a statement that
    raised, if its tensors are gone when the frame ends (its exception's
    traceback held them), or whose frame ends by an exception. Past
    MAX_MADE_PENDING tensors alive at once on one statement, its line
    counts as made (fails closed). Nothing of the submission's runs here:
    the references are weak, and a tensor is known by its classes alone.

    A tensor made inside a library call of the line (library frames
    alone between the line's frame and the operation) is the line's
    only if it comes back to the line: the outermost of those frames
    (the call the line made) returns it, alone or inside tuples, lists
    and dicts (:func:`return_reader`). What such a call makes and keeps
    for itself while it returns something else (the ``probs`` tensor
    ``torch.distributions.Bernoulli(0.9)`` builds from a number) is that
    call's intermediate, as ``a @ b`` inside an expression is the line's
    (docs/rubric-decisions.md). The call's frame is traced for its end
    only (its ``return``); one that saw an exception, one traced by
    something else, or one still open when the line's statement is over
    counts every tensor (fails closed).
    """
    import weakref

    b_id, b_len, b_TypeError, b_type, b_int = id, len, TypeError, type, int
    b_tuple, b_list, b_range = tuple, list, range
    type_mro = type.__dict__["__mro__"].__get__
    # The base types' own C methods: no method of a subclass runs.
    tuple_len, tuple_item = tuple.__len__, tuple.__getitem__
    list_len, list_item = list.__len__, list.__getitem__
    weak_ref = weakref.ref
    returned_ids = return_reader(is_tensor)
    # id(frame) -> [frame, [(line, reference)], [those of raised ones],
    #               [the open calls of the frame's statement]]
    pending: dict = {}
    # id(call's frame) -> [frame, caller, line, [references], saw an
    #                      exception, open]
    calls: dict = {}
    max_pending = MAX_MADE_PENDING

    def made(frame):
        caller = frame.f_back
        call = None
        library_only = True
        while caller is not None:
            kind = classify(caller.f_code)
            if kind == "submission":
                break
            if kind != "library":
                library_only = False
            call = caller
            caller = caller.f_back
        if caller is None or phase["made"] is None:
            return None
        line = caller.f_lineno
        if b_type(line) is not b_int:
            return None
        frame.f_trace_lines = False
        if not library_only:
            call = None

        def returned(_frame, event, arg):
            if event != "return":
                return None
            if is_tensor(arg):
                found(call, caller, line, arg)
                return None
            mro = type_mro(b_type(arg))
            if b_tuple in mro or b_list in mro:  # split, sort, chunk...
                size = (tuple_len if b_tuple in mro else list_len)(arg)
                item = tuple_item if b_tuple in mro else list_item
                for index in b_range(size if size < 64 else 64):
                    value = item(arg, index)
                    if is_tensor(value):
                        found(call, caller, line, value)
            return None
        return returned

    def found(call, caller, line, arg):
        if call is None:
            keep(caller, line, arg)
            return
        record = calls.get(b_id(call))
        if record is None or record[0] is not call:
            tracer = call.f_trace
            if tracer is not None and tracer is not ended:
                keep(caller, line, arg)  # traced by another: fails closed
                return
            record = calls[b_id(call)] = [call, caller, line, [], False, True]
            pending_of(caller)[3].append(record)
            call.f_trace_lines = False
            call.f_trace = ended
        if b_len(record[3]) >= max_pending:
            keep(caller, line, arg)
            return
        try:
            record[3].append(weak_ref(arg))
        except b_TypeError:
            keep(caller, line, arg)

    def ended(frame, event, arg):
        """The local trace function of a library call the line made: at
        its ``return``, what it made is the line's if it came back."""
        record = calls.get(b_id(frame))
        if record is None or record[0] is not frame:
            return None
        if event == "exception":
            record[4] = True
            return ended
        if event != "return":
            return ended
        del calls[b_id(frame)]
        close(record, None if record[4] else returned_ids(arg))
        return None

    def close(record, back):
        """Keep for the line what came back (``back``: the ids of the
        returned tensors; None: every tensor, fails closed)."""
        record[5] = False
        references = record[3]
        record[3] = []
        for reference in references:
            tensor = reference()
            if tensor is not None and (back is None or b_id(tensor) in back):
                keep(record[1], record[2], tensor)

    def pending_of(caller):
        entry = pending.get(b_id(caller))
        if entry is None or entry[0] is not caller:
            entry = pending[b_id(caller)] = [caller, [], [], []]
        return entry

    def keep(caller, line, arg):
        lines = phase["made"]
        if lines is None:
            return  # the phase is over (a call that ended after it)
        entry = pending_of(caller)
        if b_len(entry[1]) >= max_pending:
            entry[1] = [kept for kept in entry[1]
                        if kept[1]() is not None]
            if b_len(entry[1]) >= max_pending:
                lines[line] = True
                return
        try:
            entry[1].append((line, weak_ref(arg)))
        except b_TypeError:
            lines[line] = True

    def settle(frame, how):
        """``how``: "statement" (a statement of the frame is over: its
        tensors are judged), "raised" (the statement raised: its tensors
        wait for the frame's end, the exception's traceback holds them
        meanwhile), "returned" (everything is judged) or "unwound" (the
        frame ends by an exception: nothing is)."""
        entry = pending.get(b_id(frame))
        if entry is None or entry[0] is not frame:
            return
        if entry[3]:
            # A call of the statement still open: every tensor it made
            # counts (fails closed).
            opened = entry[3]
            entry[3] = []
            for record in opened:
                if record[5]:
                    calls.pop(b_id(record[0]), None)
                    close(record, None)
        if how == "raised":
            entry[2].extend(entry[1])
            entry[1] = []
            return
        lines = phase["made"]
        judged = entry[1]
        entry[1] = []
        if how != "statement":
            del pending[b_id(frame)]
            judged = [] if how == "unwound" else judged + entry[2]
        for line, reference in judged:
            if lines is not None and reference() is not None:
                lines[line] = True

    def clear():
        pending.clear()
        calls.clear()

    return made, settle, clear


def return_reader(is_tensor: Callable) -> Callable:
    """Return ``returned_ids(value)``: the ids of the tensors ``value``
    is or holds in tuples, lists and dicts (nested; read with the base
    types' own C methods, so no code of a subclass runs), or None past
    MADE_RETURN_ITEMS values (the caller then counts every tensor)."""
    b_id, b_type, b_range, b_list = id, type, range, list
    b_tuple, b_dict, b_set = tuple, dict, set
    type_mro = type.__dict__["__mro__"].__get__
    tuple_len, tuple_item = tuple.__len__, tuple.__getitem__
    list_len, list_item = list.__len__, list.__getitem__
    dict_len, dict_values = dict.__len__, dict.values
    most = MADE_RETURN_ITEMS

    def returned_ids(value):
        ids = b_set()
        todo = [value]
        seen = 0
        while todo:
            value = todo.pop()
            seen += 1
            if seen > most:
                return None
            if is_tensor(value):
                ids.add(b_id(value))
                continue
            mro = type_mro(b_type(value))
            if b_tuple in mro:
                size = tuple_len(value)
                if size > most:
                    return None
                todo.extend(tuple_item(value, i) for i in b_range(size))
            elif b_list in mro:
                size = list_len(value)
                if size > most:
                    return None
                todo.extend(list_item(value, i) for i in b_range(size))
            elif b_dict in mro:
                if dict_len(value) > most:
                    return None
                todo.extend(b_list(dict_values(value)))
        return ids

    return returned_ids


def traced_reads(quiet: set) -> tuple[Callable, Callable]:
    """Return ``read(function, *args)`` and ``aim(tracer)``.

    CPython traces nothing a trace function runs. ``read`` calls
    ``function(*args)`` inside ``sys.call_tracing`` with the trace
    function ``aim`` names installed anew (CPython needs both), so that
    code of the submission's that the call runs (a namespace key's
    ``__eq__``, a ``__class__`` property, a finalizer) is traced like any
    other. The reinstallation raises an audit event: ``quiet`` (the audit
    hook's set of threads inside it) lets it pass unjudged, for that
    thread and while it happens only. A read leaves the garbage
    collector's automatic collection off (:func:`collector`)."""
    import _thread
    import gc

    call_tracing, settrace = sys.call_tracing, sys.settrace
    get_ident = _thread.get_ident
    gc_isenabled, gc_disable = gc.isenabled, gc.disable
    target: list = [None]

    def rearmed(function, args):
        me = get_ident()
        quiet.add(me)
        try:
            settrace(target[0])
        finally:
            quiet.discard(me)
        return function(*args)

    def read(function, *args):
        try:
            return call_tracing(rearmed, (function, args))
        finally:
            # Code the read ran may have turned the collector back on;
            # the trace function's bookkeeping that follows must not
            # collect (see :func:`collector`).
            if gc_isenabled():
                gc_disable()

    def aim(tracer):
        target[0] = tracer

    return read, aim


# -- principle 4: a torch operation is chosen by code, not by data ----------

def torch_function_mode(namespace_type: type, method_type: type
                        ) -> tuple[object, Callable]:
    """Return ``(mode, handler)``: the grader's torch function mode, an
    object torch calls (``mode.__torch_function__``) for every torch
    function, method and operator, and the plain function behind it.

    The handler only passes the call on: it holds no cell (nothing to read
    or rewrite for code that reaches it through torch's mode stack). What
    it is for happens in the trace function, out of reach, at the call of
    the handler's frame (:func:`operation_judge`)."""
    def chosen_by_code(mode, func, types, args=(), kwargs=None):
        if kwargs is None:
            return func(*args)
        return func(*args, **kwargs)

    mode = namespace_type()
    mode.__torch_function__ = method_type(chosen_by_code, mode)
    return mode, chosen_by_code


def operation_judge(torch: Any, mode: object, handler: Callable,
                    classify: Callable, note: Callable, phase: dict,
                    read: Callable, kernels: Any = None,
                    roots: tuple[str, ...] = (),
                    packages: tuple[str, ...] = ("torch",),
                    visible: frozenset = frozenset(),
                    syntax: dict | None = None,
                    code_set: list | None = None
                    ) -> tuple[Callable, ...]:
    """Return ``judge(frame)``, ``in_force(frame)`` and ``arm()``.

    ``code_set`` (``[True]`` at first) is the audit hook's: it sets it
    whenever any function's ``__code__`` is replaced. ``in_force`` reads
    the handler's code (an audit event of its own) only then.

    ``judge`` first judges what computes (principle 3): ``kernels`` (the
    job's forbidden ``name_pattern``, compiled) is searched in the
    qualified name and the module of every library code of the forbidden
    ``packages`` (the rubric's, e.g. torch) between the submission and
    the operation, and of the operation itself when it is a Python
    function. A match is a forbidden use of that library function,
    reported by its dotted name (the module is named from the code's
    file, under ``roots``, the import path: no dict of the library's is
    read), however the function was reached: a value in a dict or a
    decomposition table, a module loaded after the tripwires, a wrapper's
    inner function. The submission's own frames never count (its classes
    may be named like a kernel), nor other libraries' (the student-facing
    package's stubs); a verdict is kept per code.

    ``judge`` runs at the call of the mode's handler (``frame``): a torch
    operation is about to run. The operation is chosen by code when the
    nearest Python frame below it (past torch's dispatch plumbing, the
    operation's own Python body and wrappers that forward a function
    they close over) is the submission's, the grader's, a syntax
    operation (``a @ b``, ``x[i]``, ``x.T``) of a library, or a library
    call whose code names the operation. Otherwise a library called an
    operation it received as data (``torch.fx.Interpreter``'s
    ``target(*args)``, a dispatch table): ``judge`` returns a local trace
    function that reports it (``untraceable``) when the operation
    returns more than a plain value (a tensor, not a string or a size).
    When the frame that chose it is the submission's, the operation must
    be written by that frame's own code (:func:`visible_choice`): a C
    callable of the line that runs operations the line does not name (a
    pickle's opcodes, ``operator.methodcaller`` of a decoded name) is an
    interpreter of data. ``visible``: the names and string constants of
    the file as the grader compiles it (:func:`visible_names`);
    ``syntax``: the names of the operations Python's operators run on
    tensors (:func:`syntax_operations`).

    ``in_force`` runs at the call of every library and submission frame:
    it checks, in a few C calls, that the mode is still at the bottom of
    torch's mode stack, enabled, unchanged; when not, the code running is
    the submission's (reported: the instrument was silenced), torch's own
    Python body of an operation the mode is handling (torch sets the mode
    aside meanwhile), or the grader's (it turns the mode off for its own
    gradient step: ``phase["grader_off"]``). ``arm`` pushes the mode on the
    calling thread (once per thread; a thread first seen by ``in_force``
    is armed there).
    """
    import contextlib
    import dis
    import threading
    import types
    import warnings

    b_type, b_str, b_set, b_dict, b_id = type, str, set, dict, id
    b_BaseException, b_tuple = BaseException, tuple
    b_staticmethod, b_classmethod = staticmethod, classmethod
    address = ADDRESS
    C = torch._C
    stack_len = C._len_torch_function_stack
    stack_at = C._get_function_stack_at
    push = C._push_on_torch_function_stack
    mode_enabled = C._is_torch_function_mode_enabled
    skip_next = C._peek_should_skip_torch_function
    thread_ident = threading.get_ident
    FunctionType = types.FunctionType
    function_code = FunctionType.__dict__["__code__"].__get__
    function_dict = FunctionType.__dict__["__dict__"].__get__
    type_mro = type.__dict__["__mro__"].__get__
    type_dict = type.__dict__["__dict__"].__get__
    getset_type = types.GetSetDescriptorType
    member_type = types.MemberDescriptorType
    b_range = range
    wrapper_type = b_type(C.TensorBase.T.__get__)
    wrapper_self = wrapper_type.__dict__["__self__"].__get__
    mode_dict = mode.__dict__
    bound = mode_dict["__torch_function__"]
    protocol_key = "__torch_function__"
    dict_items = dict.items
    traced = read
    handler_code = function_code(handler)
    protocol_code = torch.overrides.handle_torch_function.__code__
    # What the protocol runs to set a mode aside and back (and nothing else
    # is excused inside it: the subclasses' protocol it calls next is not).
    plumbing = frozenset(b_id(f.__code__) for f in (
        torch.overrides._pop_mode_temporarily.__wrapped__,
        torch.overrides._push_mode, torch.overrides._pop_mode,
        contextlib._GeneratorContextManager.__enter__,
        contextlib._GeneratorContextManager.__exit__))
    protocol_name = "handle_torch_function"
    call_ops = frozenset(dis.opmap[name] for name in
                         ("CALL", "CALL_FUNCTION_EX", "CALL_KW")
                         if name in dis.opmap)
    cache_op = dis.opmap.get("CACHE", 0)
    # The submission's instructions that run an iterator (a C iterator
    # may call anything) write only the iteration protocol.
    iteration_ops = frozenset(dis.opmap[name] for name in (
        "FOR_ITER", "GET_ITER", "UNPACK_SEQUENCE", "UNPACK_EX",
        "LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE",
        "LIST_TO_TUPLE", "GET_YIELD_FROM_ITER", "SEND", "CONTAINS_OP",
        "BEFORE_WITH") if name in dis.opmap)
    iteration = frozenset(("__iter__", "__next__", "__len__", "__getitem__",
                           "__bool__", "__eq__", "__hash__", "__contains__",
                           "__index__", "__length_hint__", "__enter__",
                           "__exit__"))
    builtin_method = b_type(len)
    operators = syntax or {}
    empty = frozenset()
    every = operators.get("*", empty)
    by_builtin = operators.get("builtins", {})
    get_instructions, b_list = dis.get_instructions, list
    spans_of: dict = {}      # address -> (code, spans, named spans)
    plain = (b_str, bytes, int, float, bool, complex, type(None),
             torch.Size, torch.dtype, torch.device, torch.layout,
             torch.memory_format)
    armed: set = b_set()
    verb, values_out = CHOSEN_BY_DATA, VALUES_OUT
    module_type = torch.nn.Module
    # What hands a tensor's values, whole, to code outside torch: what
    # computes with them there is no torch operation (principle 4).
    tensor = torch.Tensor
    # By address (no audited id()), each entry keeping its operation (so
    # no other object takes that address) and compared by identity.
    exported = {address(op): (op, name) for op, name in (
        (C.TensorBase.numpy, "numpy"), (C.TensorBase.tolist, "tolist"),
        (tensor.__array__, "__array__"), (tensor.__dlpack__, "__dlpack__"),
        (C.TensorBase.apply_, "apply_"), (C.TensorBase.map_, "map_"),
        (C.TensorBase.map2_, "map2_"), (C.TensorBase.data_ptr, "data_ptr"),
        (C.TensorBase.untyped_storage, "untyped_storage"),
        (tensor.storage, "storage"),
        (tensor._typed_storage, "_typed_storage"),
        (tensor.__reduce_ex__, "__reduce_ex__"))}
    b_len, max_known = len, 4096
    # (code, instruction, operation), by address: chosen by code.
    known_calls: dict = {}
    # A native operation may display a warning (TORCH_WARN): Python's
    # warnings code runs inside it, while torch has set the mode aside.
    warning_codes = frozenset(b_id(c) for c in _code_objects(warnings))
    warnings_dict = vars(warnings)
    show, format_ = warnings.showwarning, warnings.formatwarning
    search = kernels.search if kernels is not None else None
    verdicts: dict = {}      # address -> (code, kernel's dotted name or "")
    b_sorted = sorted
    path_roots = b_tuple(b_sorted((r.rstrip("/") + "/" for r in roots
                                   if r), key=len, reverse=True))
    prefixes = b_tuple(name + "." for name in packages)
    whole = b_tuple(packages)
    # Raised by ``plain_get``: a read that could run code, made again traced.
    unsure = b_type("Unsure", (LookupError,), {})
    proxy_type = b_type(type_dict(b_type))
    proxy_items = proxy_type.items
    max_plain = 256

    def traced_get(namespace, key):
        return namespace.get(key)

    def plain_get(namespace, key):
        """``namespace.get(key)`` read untraced: only from a dict (or a
        class's namespace) whose keys are all exact strings, whose
        comparison runs no code, and small enough to walk (at most
        ``max_plain`` keys); ``unsure`` is raised for any other."""
        if b_len(namespace) > max_plain:
            raise unsure
        if b_type(namespace) is b_dict:
            pairs = dict_items(namespace)
        elif b_type(namespace) is proxy_type:
            pairs = proxy_items(namespace)
        else:
            raise unsure
        found = None
        for name, value in pairs:
            if b_type(name) is not b_str:
                raise unsure
            if name == key:
                found = value
        return found

    def native(value, attribute, get=traced_get):
        """``value.attribute`` when a native descriptor of its class holds
        it (None otherwise): no code of the value's runs."""
        kind = b_type(value)
        for base in type_mro(kind):
            found = get(type_dict(base), attribute)
            if found is None:
                continue
            # By identity: a metaclass's __eq__ never runs here.
            kind_found = b_type(found)
            if kind_found is not getset_type and \
                    kind_found is not member_type:
                return None
            try:
                return found.__get__(value, kind)
            except b_BaseException:
                return None
        return None

    def name_of(value, get=traced_get):
        """``value.__name__``, from a native descriptor or the instance's
        own dict (an operator object's), read without running its code."""
        name = native(value, "__name__", get)
        if name is None:
            namespace = native(value, "__dict__", get)
            if b_type(namespace) is b_dict:
                name = get(namespace, "__name__")
        return name if b_type(name) is b_str else ""

    def operation_name(func, get=traced_get):
        name = name_of(func, get)
        if name in ("__get__", "__set__", "__delete__") and \
                b_type(func) is wrapper_type:  # by identity (no __eq__)
            name = name_of(wrapper_self(func), get)  # a property: its name
        return name

    def own_codes(func, get=traced_get):
        """The code objects of the operation's own Python body (a torch
        function written in Python, its functools.wraps chain, or the
        ``__call__`` of an operator object such as ``torch.ops``')."""
        found = []
        value = func
        for _ in b_range(4):
            if b_type(value) is FunctionType:
                found.append(function_code(value))
                value = get(function_dict(value), "__wrapped__")
                continue
            for base in type_mro(b_type(value)):
                call = get(type_dict(base), "__call__")
                if call is not None:
                    if b_type(call) is FunctionType:
                        found.append(function_code(call))
                    break
            break
        return found

    def forwards(frame, func, get=traced_get):
        """True when ``frame`` runs a wrapper that calls a function it
        closes over: the operation itself (a decorator, a dispatch)."""
        code = frame.f_code
        if not code.co_freevars:
            return False
        if get is plain_get:
            # A frame's values are read traced: this read alone (the rest
            # of an untraced judgement stays untraced; a library method
            # that calls super() has a free variable, ``__class__``).
            return traced(forwards, frame, func, traced_get)
        local_values = frame.f_locals
        for name in code.co_freevars:
            if local_values.get(name) is func:
                return True
        return False

    def caller_of(frame, func, get=traced_get):
        """The frame that chose the operation: below the handler, past
        torch's protocol, the operation's own body and forwarders."""
        own = own_codes(func, get)
        caller = frame.f_back
        while caller is not None:
            code = caller.f_code
            if code is protocol_code or code is handler_code or (
                    classify(code) == "library" and
                    forwards(caller, func, get)):
                caller = caller.f_back
                continue
            mine = False
            for known in own:
                if code is known:
                    mine = True
            if not mine:
                return caller
            caller = caller.f_back
        return None

    def by_syntax(frame):
        """True when the frame is running an operator, a subscript or an
        attribute (not a call): the operation is written in its code."""
        code = frame.f_code
        ops = code.co_code
        index = frame.f_lasti
        while index > 0 and ops[index] == cache_op:
            index -= 2
        return ops[index] not in call_ops

    def names(code, name):
        if not name:
            return False
        bare = name.strip("_") if name[:2] == "__" else name
        for known in code.co_names:
            if known == name or known == bare:
                return True
        for known in code.co_consts:
            if b_type(known) is b_str and (known == name or known == bare):
                return True
        return False

    def writes(code, index, name):
        """True when the instruction at ``index`` writes the operation: an
        operator runs what torch runs for that operator (``syntax``:
        ``a @ b`` runs matmul, ``a / b`` div, ``-a`` neg); any other
        instruction that is no call, a protocol method no operator runs
        (``x[i]`` ``__getitem__``, ``if x`` ``__bool__``); an
        instruction that runs an iterator (a ``for``, an unpacking: a C
        iterator such as ``map`` may call anything) writes only the
        iteration protocol. A call writes none, nor does an attribute by
        itself: what they run must be named (:func:`on_the_line`)."""
        ops = code.co_code
        while index > 0 and ops[index] == cache_op:
            index -= 2
        op = ops[index]
        if op in call_ops:
            return False
        if op in iteration_ops:
            return name in iteration
        if operators.get((op, ops[index + 1]), empty).__contains__(name):
            return True  # what torch runs for this operator
        # Else a protocol method no operator runs (``x[i]``, ``if x``).
        return name[:2] == "__" == name[-2:] and name not in every

    def spans(code):
        """Per code object (kept): the source span of every instruction,
        by offset, and the names (names, string constants, variables)
        its instructions use, each with its span."""
        entry = spans_of.get(address(code))
        if entry is not None and entry[0] is code:
            return entry
        positions = b_list(code.co_positions())
        at, named = {}, []
        for ins in get_instructions(code):
            where = positions[ins.offset // 2]
            at[ins.offset] = where
            if b_type(ins.argval) is b_str and None not in where:
                named.append((where, ins.argval))
        entry = (code, at, named)
        if b_len(spans_of) < max_known:
            spans_of[address(code)] = entry
        return entry

    def on_the_line(code, index, name):
        """True when the expression the instruction at ``index`` runs
        (a call with its callee and arguments; for an instruction that
        drains an iterator, also the expression that made it) names the
        operation: a name or string constant written inside it."""
        _, at, named = spans(code)
        while index > 0 and index not in at:
            index -= 2
        own = at.get(index)
        if own is None or None in own:
            return False
        wanted = [own]
        if instruction_of(code, index) in iteration_ops:
            before = index - 2
            while before > 0 and before not in at:
                before -= 2
            made = at.get(before)
            if made is not None and None not in made:
                wanted.append(made)
        bare = name.strip("_") if name[:2] == "__" else name
        for where, used in named:
            if used != name and used != bare and \
                    name not in by_builtin.get(used, empty):
                continue  # nor a builtin that runs it (``sum``)
            for span in wanted:
                if (where[0], where[2]) >= (span[0], span[2]) and \
                        (where[1], where[3]) <= (span[1], span[3]):
                    return True
        return False

    def instruction_of(code, index):
        ops = code.co_code
        while index > 0 and ops[index] == cache_op:
            index -= 2
        return ops[index]

    def holds(frame, func, name):
        """True when the frame holds the operation under a name of its
        own (a local or free variable, an attribute of its first argument
        or of that argument's class, a global, or inside a
        ``functools.partial`` or static method of one):
        the visible code that stored it named it. Reads values: traced."""
        local_values = frame.f_locals
        spaces = [local_values, frame.f_globals]
        code = frame.f_code
        if code.co_argcount:
            first = local_values.get(code.co_varnames[0])
            namespace = native(first, "__dict__")
            if b_type(namespace) is b_dict:
                spaces.append(namespace)
            # And its class's: ``normalise = staticmethod(F.softmax)``.
            spaces += [type_dict(base) for base in type_mro(b_type(first))]
        for space in spaces:
            if b_type(space) is not b_dict and \
                    b_type(space) is not proxy_type:
                continue
            for value in space.values():
                if value is func or native(value, "func") is func:
                    return True
                if (b_type(value) is b_staticmethod or
                        b_type(value) is b_classmethod) and \
                        native(value, "__func__") is func:
                    return True
                if b_type(value) is builtin_method and \
                        name_of(value) == name:
                    return True
        return False

    def visible_choice(caller, func, get):
        """None when the submission's frame chose the operation by its
        own code: the instruction writes it (:func:`writes`), the
        expression it runs names it (:func:`on_the_line`), or the frame
        holds it and the file names it (:func:`holds`). Otherwise what to
        report: the operation ran inside a C call of the line (an
        interpreter of data: a pickle's opcodes, a methodcaller of a
        decoded name, a starmap) that names none of it."""
        code, index = caller.f_code, caller.f_lasti
        key = (address(code), index, address(func))
        if known_calls.get(key):
            return None
        name = operation_name(func, get)
        if name and (writes(code, index, name) or
                     on_the_line(code, index, name)):
            remember(key, code, func)
            return None
        if get is plain_get:
            raise unsure  # a frame's values are read traced
        bare = name.strip("_")
        if name and (name in visible or bare in visible) and \
                holds(caller, func, name):
            return None
        return reporter_of(unnamed(caller, name))

    def unnamed(caller, name):
        return ((name or "an operation")[:60] + " by line " +
                b_str(caller.f_lineno) + " of " +
                caller.f_code.co_qualname[:80] + ", which does not name it")

    def layer(frame):
        """At the call of a torch layer's own ``__init__`` (``nn.Softmax``'s,
        not a ``super().__init__()`` of a class of the file's) straight
        from a line of the submission: the layer's class is chosen by code
        as an operation is (:func:`visible_choice`: the line names it, or
        the frame holds it and the file names it); otherwise data chose it
        (``getattr(nn, decoded)(-1)``), reported ``untraceable``. Reads
        frames' links and code first; values only when the caller is the
        submission's."""
        caller = frame.f_back
        if caller is None or classify(caller.f_code) != "submission":
            return
        try:
            what = layer_judged(frame, caller, plain_get)
        except unsure:
            chooser_spans(frame, None)
            what = traced(layer_judged, frame, caller, traced_get)
        if what:
            note("untraceable", verb, what)

    def layer_judged(frame, caller, get):
        if get is plain_get:
            raise unsure  # the frame's values are read traced
        value = frame.f_locals.get("self")
        kind = b_type(value)
        mro = type_mro(kind)
        if module_type not in mro:
            return ""
        own, up_to = None, []
        for base in mro:
            # The classes up to the one whose __init__ runs: a class a
            # library makes at run time (fx's GraphModuleImpl) is built
            # by naming the class it derives from (GraphModule).
            up_to.append(base)
            own = get(type_dict(base), "__init__")
            if own is not None:
                break
        if b_type(own) is not FunctionType or \
                function_code(own) is not frame.f_code:
            return ""  # a super().__init__() of a subclass, or no layer
        code, index = caller.f_code, caller.f_lasti
        key = (address(code), index, address(kind))
        if known_calls.get(key):
            return ""
        for base in up_to:
            name = name_of(base, get)
            if name and on_the_line(code, index, name):
                remember(key, code, kind)
                return ""
            if name and name in visible and holds(caller, base, name):
                return ""
        return unnamed(caller, name_of(kind, get))

    def reporter_of(what):
        def returned(frame, event, arg):
            if event == "return":
                kind = b_type(arg)
                for known in plain:
                    if kind is known:
                        return returned
                note("untraceable", verb, what)
            return returned
        return returned

    def module_of(filename):
        """A library file's dotted module name, from its path under the
        import path (its own name when it lies under none)."""
        for root in path_roots:
            if filename.startswith(root):
                filename = filename[b_len(root):]
                break
        if filename.endswith(".py"):
            filename = filename[:-3]
        if filename.endswith("/__init__"):
            filename = filename[:-9]
        return filename.replace("/", ".")

    def kernel_name(code):
        """The dotted name of a library code named like a forbidden
        kernel ("" when it is not one); computed once per code."""
        key = address(code)
        entry = verdicts.get(key)
        if entry is not None and entry[0] is code:
            return entry[1]
        module = module_of(code.co_filename)
        qualname = code.co_qualname
        found = ""
        ours = module in whole or module.startswith(prefixes)
        if ours and (search(qualname) is not None
                     or search(module) is not None):
            found = (module + "." + qualname)[:200]
        if b_len(verdicts) < max_known:
            verdicts[key] = (code, found)  # the code kept: its address too
        return found

    def forbidden_kernel(frame, func):
        """The dotted name of the forbidden kernel on whose behalf the
        operation runs ("" when none): the operation's own Python code,
        or a library frame between it and the nearest frame that is not
        a library's (the submission's, code it made, the grader's). Reads
        only code objects and frames' links (nothing of the submission's
        runs): it needs no ``traced``."""
        if b_type(func) is FunctionType:
            code = function_code(func)
            if classify(code) == "library":
                found = kernel_name(code)
                if found:
                    return found
        caller = frame.f_back
        while caller is not None:
            code = caller.f_code
            if code is not protocol_code and code is not handler_code:
                if classify(code) != "library":
                    return ""
                found = kernel_name(code)
                if found:
                    return found
            caller = caller.f_back
        return ""

    def judge(frame):
        func = frame.f_locals.get("func")
        if search is not None:
            kernel = forbidden_kernel(frame, func)
            if kernel:
                note("forbidden", "use", kernel)
                return None
        export = exported.get(address(func))
        if export is not None and export[0] is func:
            # No torch computation: its values leave torch. In a graded
            # call that costs the task; elsewhere (a notebook's plot at
            # import) it is no operation chosen for the submission.
            if phase["tracing"]:
                taken_out(frame, export[1])
            return None
        caller = frame.f_back
        # The caller's code, read once (each read is an audit event).
        code = caller.f_code if caller is not None else None
        if caller is not None and not code.co_freevars:
            kind = classify(code)
            if kind == "submission" and known_calls.get(
                    (address(code), caller.f_lasti, address(func))):
                return None  # the submission's line chose, as before
            if kind != "library" and kind != "submission":
                return None  # the grader (or code it generated) chose
        key = None
        if caller is not None and caller.f_back is not None and \
                not code.co_freevars and classify(code) == "library":
            # A library frame that called the operation itself (not
            # torch's protocol, nor a body or forwarder it skips) decides
            # the same way at the same instruction, every time.
            key = (address(code), caller.f_lasti, address(func))
            if known_calls.get(key):
                return None
        # What follows reads the operation and the frames' values: untraced
        # while every dict it reads holds only exact strings as keys and no
        # frame's values are needed, traced otherwise (the same reads again).
        try:
            return judged(frame, func, key, plain_get)
        except unsure:
            pass
        chooser_spans(frame, func)
        return traced(judged, frame, func, key, traced_get)

    def taken_out(frame, name):
        """A graded call handed a tensor's values to code outside torch
        (``numpy``, ``tolist``, a callback of ``apply_``): what computes
        with them there is not judged, so the task's items earn nothing
        (``untraceable``), wherever in the call it happened, except in
        the grader's own code. Reads code objects and frames' links."""
        walk = frame.f_back
        while walk is not None:
            code = walk.f_code
            kind = classify(code) if code is not handler_code and \
                code is not protocol_code else "library"
            if kind == "submission" or kind == "synthetic":
                note("untraceable", values_out,
                     name + " by line " + b_str(walk.f_lineno) + " of " +
                     code.co_qualname[:80])
                return
            if kind != "library":
                return  # the grader's own code
            walk = walk.f_back

    def chooser_spans(frame, func):
        """Read, here in the trace function (untraced), the spans of the
        submission's frame that may have chosen the operation: the first
        frame below the handler that is neither torch's protocol nor a
        library's (nor the operation's own code). :func:`spans` runs
        ``dis`` over code the grader compiled; run inside a traced read,
        while torch has set the mode aside for a Python-level operation,
        its frames would be judged (``off``) as code run with the mode
        taken off. Reads code objects and frames' links only."""
        own = function_code(func) if b_type(func) is FunctionType else None
        walk = frame.f_back
        while walk is not None:
            code = walk.f_code
            if code is not own and code is not protocol_code and \
                    code is not handler_code:
                kind = classify(code)
                if kind == "submission":
                    spans(code)
                    return
                if kind != "library":
                    return
            walk = walk.f_back

    def judged(frame, func, key, get):
        caller = caller_of(frame, func, get)
        if caller is None:
            return None
        code = caller.f_code
        kind = classify(code)
        if kind == "submission":
            return visible_choice(caller, func, get)
        if kind != "library" or by_syntax(caller):
            if key is not None and caller is frame.f_back:
                remember(key, code, func)
            return None
        name = operation_name(func, get)
        if names(code, name):
            if key is not None and caller is frame.f_back:
                remember(key, code, func)
            return None
        return reporter_of((name or "an operation")[:60] + " by "
                           + code.co_qualname[:80])

    def remember(key, code, func):
        # The entry keeps the code and the operation alive: no other
        # object can take their addresses while the key stands.
        if b_len(known_calls) < max_known:
            known_calls[key] = (code, func)

    def arm():
        armed.add(thread_ident())
        push(mode)

    def where(frame, shown):
        """A warning raised inside an operation the handler passes on is
        shown at the line that called the operation (not the handler's)."""
        message = shown.f_locals.get("msg")
        if message is None:
            return
        caller = caller_of(frame, frame.f_locals.get("func"))
        if caller is None:
            return
        try:
            message.filename = caller.f_code.co_filename
            message.lineno = caller.f_lineno
        except b_BaseException:
            pass

    def torch_body(frame, above, start):
        """True when ``above`` (the frame the handler called) is the
        operation's own Python body, torch's: a torch function that hands
        itself to the protocol (its body and what that calls run while
        torch sets the mode aside), or the ``__call__`` of an operator
        object (``torch.ops``), only itself (what its kernel calls is
        not excused); or Python's warnings code displaying a warning the
        operation raised (while ``showwarning`` and ``formatwarning`` are
        still Python's)."""
        if above is None:
            return False
        code = above.f_code
        if b_id(code) in warning_codes and \
                warnings_dict.get("showwarning") is show and \
                warnings_dict.get("formatwarning") is format_:
            if above is start:
                where(frame, above)
            return True  # a warning the operation displays
        func = frame.f_locals.get("func")
        mine = False
        for known in own_codes(func):
            if code is known:
                mine = True
        if not mine:
            return False
        if b_type(func) is FunctionType:
            return protocol_name in code.co_names
        return above is start

    def body_of(frame, above, start):
        """:func:`torch_body`'s verdict. Read untraced when it needs no
        value the submission may have made: the handler's ``func`` (read
        from its frame) is a plain function whose own code (read by the
        native descriptor) is the code ``above`` runs, and that code's
        names (exact strings) say whether it hands itself to the
        protocol. Anything else (a warning, an operator object, a
        wrapper's chain) is read by ``torch_body``, traced."""
        if above is None:
            return False
        code = above.f_code
        if b_id(code) not in warning_codes:
            func = frame.f_locals.get("func")
            if b_type(func) is FunctionType and function_code(func) is code:
                return protocol_name in code.co_names
        return traced(torch_body, frame, above, start)

    def off(frame):
        # Reads frames and code objects only; the operation's own body is
        # judged through ``body_of`` (traced when it reads values).
        if phase["grader_off"]:
            return  # the grader's own gradient step (principle 5 judges it)
        if thread_ident() not in armed:
            arm()
            return
        walk, above, setting_aside = frame, None, True
        while walk is not None:
            code = walk.f_code
            if code is handler_code:
                if body_of(walk, above, frame):
                    return
                break
            if code is protocol_code and setting_aside:
                return  # torch's protocol setting the mode aside and back
            if b_id(code) not in plumbing:
                setting_aside = False
            kind = classify(code)
            if kind == "submission" or kind == "synthetic":
                break
            above, walk = walk, walk.f_back
        if walk is None:
            return
        note("untraceable", verb,
             "run while the grader's torch function mode was taken off, "
             "disabled or replaced")

    replaced = [True] if code_set is None else code_set

    def in_force(frame):
        # Reads only torch's C state and the mode's own dict, by identity
        # (a key of the submission's in it could compare itself): nothing
        # of the submission's runs here, so it needs no ``traced``. The
        # handler's code is read again only after a ``__code__`` was
        # replaced anywhere (``replaced``, set by the audit hook: CPython
        # audits every such assignment), and stays suspect until it is
        # the handler's own.
        if stack_len() and stack_at(0) is mode and mode_enabled() and \
                not skip_next() and b_len(mode_dict) == 1:
            if replaced[0]:
                if function_code(handler) is not handler_code:
                    off(frame)
                    return
                replaced[0] = False
            for key, value in dict_items(mode_dict):
                if key is protocol_key and value is bound:
                    return
        off(frame)

    return judge, in_force, arm, layer


def error_describer(filename: str, lines: list, memory_mb: int,
                    call: Callable, carried: object, release: Callable
                    ) -> Callable:
    """Return ``describe_error(exception) -> dict``: its type, message,
    and the submission's line and function where it was raised.

    An exception the submission's code raised reaches here carried
    (:func:`trampoline`: ``RuntimeError(carried, [exception])``); what
    describing it runs of the submission's code (``str``, ``repr``) runs
    through ``call``, on the submission's own thread (an error there is
    ``release``d there). Its attributes are
    read with the exception types' own descriptors, never through its
    class (a property would run its code here).
    """
    b_type, b_str, b_int, b_len, b_repr = type, str, int, len, repr
    b_list, b_BaseException = list, BaseException
    b_RuntimeError = RuntimeError
    b_SystemExit, b_MemoryError = SystemExit, MemoryError
    b_SyntaxError = SyntaxError
    type_name = type.__dict__["__name__"].__get__
    type_mro = type.__dict__["__mro__"].__get__
    exit_code = SystemExit.__dict__["code"].__get__
    syntax_file = SyntaxError.__dict__["filename"].__get__
    syntax_line = SyntaxError.__dict__["lineno"].__get__
    traceback_of = BaseException.__dict__["__traceback__"].__get__
    exception_args = BaseException.__dict__["args"].__get__

    def text_of(function, value):
        try:
            text = call(function, value)
        except b_BaseException as error:
            release(error)
            return None
        return text if b_type(text) is b_str else None

    def message_of(exception, mro):
        if b_SystemExit in mro:
            code = text_of(b_repr, exit_code(exception))
            return "the code called sys.exit(" + (
                "..." if code is None else code[:40]) + ")"
        if b_MemoryError in mro:
            return ("the code ran out of memory (the sandbox allows "
                    + b_str(memory_mb) + " MB)")
        text = text_of(b_str, exception)
        if text is None:
            return "<an unprintable message>"
        return text if b_len(text) <= 400 else text[:400] + "..."

    def unwrap(exception):
        """The exception the submission's code raised (None when it was
        not delivered), or the grader's own."""
        if b_type(exception) is b_RuntimeError:
            args = exception_args(exception)
            if b_len(args) == 2 and args[0] is carried:
                held = args[1]
                return held[0] if b_type(held) is b_list and held else None
        return exception

    def describe_error(exception):
        try:
            exception = unwrap(exception)
            if exception is None:
                return {"type": "Exception",
                        "message": "an exception that could not be "
                                   "described"}
            kind = b_type(exception)
            mro = type_mro(kind)
            info = {"type": type_name(kind)[:80],
                    "message": message_of(exception, mro)}
            line = None
            function = None
            if b_SyntaxError in mro:
                named = syntax_file(exception)
                if b_type(named) is b_str and named == filename:
                    line = syntax_line(exception)
            tb = traceback_of(exception)
            # The outermost line of the file's own module-level code: the
            # top-level statement that was running (a helper it called
            # may hold the innermost line).
            outer = None
            while tb is not None:
                code = tb.tb_frame.f_code
                if code.co_filename == filename:
                    line = tb.tb_lineno
                    function = code.co_name
                    if outer is None and function == "<module>":
                        outer = line
                tb = tb.tb_next
            if b_type(outer) is b_int and outer != line:
                info["outer"] = outer
            if b_type(line) is b_int:
                info["line"] = line
                if 1 <= line <= b_len(lines):
                    info["code"] = lines[line - 1].strip()[:200]
            if function is not None:
                info["function"] = b_str(function)[:80]
            return info
        except b_BaseException:
            return {"type": "Exception",
                    "message": "an exception that could not be described"}

    return describe_error


def module_describer(torch: Any, readers: tuple, child_numbers: list,
                     call: Callable) -> Callable:
    """Return ``describe(obj) -> dict``: a built object's type, children
    (``nn.Linear`` sizes; the numbers ``child_numbers`` names, as
    ``(class, [attribute, ...])`` pairs), parameters and buffers, read
    without running its code (its parameters are listed by torch's
    ``named_parameters`` through ``call``, on the submission's thread:
    a module may override what that calls)."""
    b_type, b_str, b_list, b_float = type, str, list, float
    b_int, b_len, b_dict, b_any = int, len, dict, any
    max_depth, max_visits = NUMBERS_DEPTH, NUMBERS_VISITS
    max_entries = NUMBERS_ENTRIES
    type_name = type.__dict__["__name__"].__get__
    type_mro = type.__dict__["__mro__"].__get__
    type_dict = type.__dict__["__dict__"].__get__
    Module, Linear = torch.nn.Module, torch.nn.Linear
    linear_forward = Linear.forward
    module_named_parameters = Module.named_parameters
    is_tensor, shape_of, instance_dict, read_chain, expand = readers

    def lookup(cls, name):
        for base in type_mro(cls):
            namespace = type_dict(base)
            if name in namespace:
                return namespace[name]
        return None

    def child(value):
        kind = b_type(value)
        entry = {"type": type_name(kind)[:80], "is_linear": False}
        if Linear in type_mro(kind) and \
                lookup(kind, "forward") is linear_forward:
            params = instance_dict(value).get("_parameters") or {}
            weight = params.get("weight")
            size = shape_of(weight)
            if size is not None and b_len(size) == 2:
                entry["is_linear"] = True
                entry["in_features"] = size[1]
                entry["out_features"] = size[0]
                entry["bias"] = params.get("bias") is not None
        for cls, names in child_numbers:
            if cls in type_mro(kind):
                for name in names:
                    number = instance_dict(value).get(name)
                    if b_type(number) is b_float or b_type(number) is b_int:
                        entry[name] = b_float(number)
        return entry

    def numbers_below(obj):
        # Every module below ``obj``, at any depth, whose class the table
        # names, flat under its dotted path (each as ``child`` reports it):
        # a plug-in can read every such number of a model, however deep.
        # The walk reads ``_modules`` dicts only (no submission code runs);
        # past any cap (depth, modules visited, entries), at a name that is
        # not an exact str or at a module inside itself, it stops and says
        # so (``complete`` False): the plug-in then judges nothing from it.
        found, complete = {}, True
        stack = [("", obj, 0, [obj])]
        visited = 0
        while stack:
            path, module, depth, chain = stack.pop()
            inner = instance_dict(module).get("_modules")
            if b_type(inner) is not b_dict:
                continue
            below = []
            for name, value in b_list(inner.items()):
                visited += 1
                if b_type(name) is not b_str or depth >= max_depth \
                        or visited > max_visits:
                    complete = False
                    continue
                if value is None:
                    continue
                if b_any(value is above for above in chain):
                    complete = False
                    continue
                dotted = (path + "." + name if path else name)[:400]
                kind = b_type(value)
                if b_any(cls in type_mro(kind) for cls, _ in child_numbers):
                    if b_len(found) >= max_entries:
                        complete = False
                    else:
                        found[dotted] = child(value)
                below.append((dotted, value, depth + 1, chain + [value]))
            stack.extend(below[::-1])
        return found, complete

    def describe(obj):
        kind = b_type(obj)
        info = {"type": type_name(kind)[:80],
                "is_module": Module in type_mro(kind)}
        if not info["is_module"]:
            return info
        modules = instance_dict(obj).get("_modules")
        modules = modules if b_type(modules) is b_dict else {}
        info["children"] = {b_str(name)[:80]: child(value) for name, value
                            in b_list(modules.items())[:32]}
        if child_numbers:
            info["numbers"], info["numbers_complete"] = numbers_below(obj)
        # Every name a parameter answers to: the first lists it (as
        # named_parameters does), a later one is an alias of the first (a
        # tied parameter).
        first, aliases = [], {}
        for n, p in call(b_list, module_named_parameters(
                obj, remove_duplicate=False))[:128]:
            known = None
            for m, q in first:
                if q is p:
                    known = m
                    break
            if known is None:
                first.append((n, p))
            else:
                aliases[b_str(n)[:80]] = b_str(known)[:80]
        info["parameters"] = {b_str(n)[:80]: shape_of(p) or []
                              for n, p in first[:64]}
        if aliases:
            info["aliases"] = aliases
        buffers = {}
        for prefix, holder_module in [("", obj)] + [
                (b_str(n) + ".", c) for n, c in b_list(modules.items())]:
            held = instance_dict(holder_module).get("_buffers")
            if b_type(held) is b_dict:
                for buffer_name, value in b_list(held.items()):
                    size = shape_of(value)
                    if size is not None:
                        buffers[(prefix + b_str(buffer_name))[:80]] = size
        info["buffers"] = buffers
        return info

    return describe


def torch_seeder(torch: Any) -> Callable[[dict], None]:
    """Return ``seed(probe)``: set the CPU generator for a probe's call
    (or its training), while ``torch.initial_seed()`` reads the probe's
    ``initial_seed``: one value for every probe of a grading, derived
    one-way from the grading seed (grader.engine).

    A probe with a ``stream`` (every probe but a ``seeding`` one:
    grader.engine) gets a state no seeding wrote: 624 words of SHAKE-256
    of that secret stream, at a position in the block drawn from it too. A
    seeding writes words that follow its recurrence (``w[i] = 1812433253
    * (w[i-1] ^ w[i-1] >> 30) + i``) and each later state is a fixed
    number of twists from them, so code could tell "a moment after a
    seeding" (the grader) from "a thousand steps into training" by
    looking for them in the state or a few twists back; in a state
    built from other words there is no seeding to find, at any
    distance, as in a process that has drawn for a long time. The same
    stream gives the same state (a same-seed repetition stays one).

    A ``seeding`` probe (the ``prime:`` probe of attention_basics, whose
    next probe builds the lecture's construction from the state it
    leaves, and its twins' copies) has no ``stream``: it draws exactly
    what it draws after ``torch.manual_seed(probe["seed"])``, as that
    construction must.

    A process seeds once: code that compares ``torch.initial_seed()``
    across its calls, or the generator's state with the one
    ``manual_seed(torch.initial_seed())`` leaves, would otherwise tell the
    grader's probes (seeded anew before each call) from a training loop
    (docs/threat-model.md, "Right only in the state the grader probes").
    The state is CPUGeneratorImpl's (torch 2.x, 5056 bytes): the seed
    (uint64), ``left`` and ``seeded`` (int32), ``next`` (uint64), the 624
    Mersenne words (a uint64 each, bytes 24 to 5016), then the cached
    normal samples (invalid after a seeding). It is not the fresh
    engine's (``left`` 1, ``next`` 0, the seeding's words, which the
    first draw twists) but the same stream as a state k draws into a
    block (``next`` k, ``left`` 625 - k, k from the seed in 1..623): the
    seeding's last k words, then the first 624 - k of its twisted block
    (a private generator's, after one draw). That window is 624
    consecutive terms of the stream's recurrence, so its twist is the
    stream's next block and every later draw matches too. A probe
    without ``initial_seed`` (a wire made by hand) is seeded by
    ``manual_seed`` itself. The CPU generator alone: torch.manual_seed
    also queues a seeding of every accelerator, each with a formatted
    stack of the call (a fifth of a batch's time, in a worker that never
    uses one)."""
    b_int, b_bytearray = int, bytearray
    default = torch.default_generator
    manual_seed, set_state = default.manual_seed, default.set_state
    Generator, rand = torch.Generator, torch.rand
    private_seed, get_state = Generator.manual_seed, Generator.get_state
    narrow = torch._C.TensorBase.narrow
    cat, frombuffer, uint8 = torch.cat, torch.frombuffer, torch.uint8
    pack = __import__("struct").pack
    no_torch_function = torch._C.DisableTorchFunction
    numel = torch._C.TensorBase.numel
    words, tail, size = 24, 24 + 8 * 624, 5056
    unpack = __import__("struct").unpack
    # A C function of OpenSSL's, loaded with torch (no module is loaded
    # here: agent._indexed), held before any code of the submission runs.
    shake = __import__("hashlib").shake_256

    def block(stream):
        # 624 words no seeding wrote: SHAKE-256 of the probe's stream
        # (secret: derived one-way from the grading seed), 32 bits each.
        drawn = shake(b"grader-torch-stream\x1f" + pack("<Q", stream))
        return frombuffer(b_bytearray(pack("<624Q", *unpack(
            "<624I", drawn.digest(4 * 624)))), dtype=uint8)

    def seed(probe):
        value = b_int(probe.get("seed", 0))
        initial = probe.get("initial_seed")
        if initial is None:
            manual_seed(value)
            return
        stream = probe.get("stream")
        with no_torch_function():
            private = Generator()
            private_seed(private, value)
            fresh = get_state(private)
            if numel(fresh) != size:
                # Another layout (another torch): the plain seeding.
                manual_seed(value)
                return
            if stream is not None:
                k = 1 + b_int(stream) % 623
                window = [block(b_int(stream))]
            else:
                rand(1, generator=private)
                twisted = get_state(private)
                k = 1 + value % 623
                window = [narrow(fresh, 0, tail - 8 * k, 8 * k),
                          narrow(twisted, 0, words, tail - words - 8 * k)]
            head = frombuffer(b_bytearray(pack("<QiiQ", b_int(initial),
                                               625 - k, 1, k)),
                              dtype=uint8)
            set_state(cat([head, *window,
                           narrow(fresh, 0, tail, size - tail)]))

    return seed


def probe_runner(torch: Any, phase: dict, readers: tuple,
                 describe: Callable, encode: Callable, note: Callable,
                 forbidden_classes: list, still_tracing: Callable,
                 call: Callable) -> Callable:
    """Return ``run_probe(namespace, probe) -> dict``: build the probe's
    object (its weights set), train it when the probe says so, call it
    (traced when asked) and encode what it returned.

    Everything that can run the submission's code (its class, methods,
    properties, ``train``, its parameters' listing, autograd through its
    functions, the trace check of its thread) runs through ``call``, on
    the submission's own thread (:func:`trampoline`); what runs here
    reads its objects with torch's own functions, under
    ``DisableTorchFunction``."""
    b_type, b_str, b_int, b_float, b_bool = type, str, int, float, bool
    b_list, b_dict, b_sorted, b_getattr = list, dict, sorted, getattr
    b_enumerate, b_zip, b_len, b_callable = enumerate, zip, len, callable
    max_reached = MAX_REACHED
    b_LookupError, b_RuntimeError, b_TypeError = (LookupError,
                                                  RuntimeError, TypeError)
    type_mro = type.__dict__["__mro__"].__get__
    TensorBase = torch._C.TensorBase
    t_clone, t_detach = TensorBase.clone, TensorBase.detach
    t_requires_grad, t_floating = (TensorBase.requires_grad_,
                                   TensorBase.is_floating_point)
    t_set_data = TensorBase.__dict__["data"].__set__
    t_set_grad = TensorBase.__dict__["grad"].__set__
    t_mul, t_sub, t_neg, t_to = (TensorBase.mul, TensorBase.sub,
                                 TensorBase.neg, TensorBase.to)
    t_dtype = TensorBase.__dict__["dtype"].__get__
    randn, rand, Generator = torch.randn, torch.rand, torch.Generator
    t_size = TensorBase.size
    float64 = torch.float64
    no_torch_function = torch._C.DisableTorchFunction
    # Entered when made (on the thread that makes it), left by __exit__.
    inference_mode = torch._C._InferenceMode
    grad_enabled = torch._C._set_grad_enabled
    # The CPU generator alone, the seed torch.initial_seed() reads one for
    # the whole grading (torch_seeder).
    manual_seed = torch_seeder(torch)
    Module = torch.nn.Module
    module_named_parameters = Module.named_parameters
    autograd_grad = torch.autograd.grad
    t_equal = torch.equal
    t_zeros_like, t_sqrt = torch.zeros_like, torch.sqrt
    is_tensor, shape_of, instance_dict, read_chain, expand = readers
    dict_items = dict.items
    # The object the last building probe built, for the ``again`` probes
    # that follow it (the runner releases it, on the submission's thread).
    previous = phase["previous"]
    from copy import deepcopy
    from grader.wire import VALUE_BUDGET as value_budget

    def is_module(value):
        return Module in type_mro(b_type(value))

    def set_grad_enabled(flag):
        # Past the torch function modes: torch hands this function to a
        # mode by importing a module from the caller's globals, and the
        # agent's are emptied (a crash).
        with no_torch_function():
            grad_enabled(flag)

    def cast(leaf):
        # A copy even of a float64 leaf (its grad_fn a ToCopyBackward0).
        return t_to(t_to(leaf, float64, copy=True), t_dtype(leaf))

    # The value-preserving operations an activation is made by (the
    # probe's ``via``, grader.plan.ACTIVATION_OPS): its grad_fn does not
    # tell the grader's activations from a network's.
    made_by = {"clone": t_clone, "mul": lambda leaf: t_mul(leaf, 1.0),
               "sub": lambda leaf: t_sub(leaf, 0.0), "cast": cast,
               "neg": lambda leaf: t_neg(t_neg(leaf))}

    def needing_grad(data):
        # A fresh leaf that requires grad (a floating one; token ids stay
        # as they are), handed over with autograd off.
        with no_torch_function():
            leaf = t_clone(data)
            if t_floating(leaf):
                t_requires_grad(leaf, True)
        return leaf

    def activation(data, via):
        # An argument as a training step hands it over: a tensor with a
        # grad_fn, made by ``via`` from a fresh leaf that requires grad
        # (token ids stay as they are). Autograd is on for that one
        # operation of the grader's own thread only (no code of the
        # submission runs here).
        leaf = needing_grad(data)
        if not t_floating(leaf):
            return leaf
        with no_torch_function():
            grad_enabled(True)
            try:
                made = via(leaf)
            finally:
                grad_enabled(False)
        return made

    def fill_grads(obj, filled, seed):
        # A probe's parameters as a training loop leaves them after
        # loss.backward() (``.grad`` set, ``filled``) or, for an ``again``
        # probe, after zero_grad() (None); set by the grader's thread,
        # past any property of a subclass. The gradients are normal
        # noise, each parameter's at its own scale (10 ** -u, u uniform
        # in [0, 4)), from a private generator seeded from the probe's
        # seed: a real backward leaves values with no pattern and no
        # common scale (all ones was a tell, red team 14), and the
        # global generator is not touched.
        if not is_module(obj):
            return
        generator = Generator()
        generator.manual_seed(b_int(seed))
        for _, p in parameters_of(obj):
            with no_torch_function():
                usable = filled and t_floating(p)
                grad = None
                if usable:
                    scale = 10.0 ** -(4.0 * b_float(
                        rand(1, generator=generator)))
                    grad = t_mul(randn(t_size(p), generator=generator,
                                       dtype=t_dtype(p)), scale)
                t_set_grad(p, grad)

    def set_mode(obj, mode, own=False):
        # Train or eval mode through the object's own ``train`` (an
        # override of it is the student's code, which real users call):
        # looked up on the object and run on the submission's thread; one
        # that is not callable or raises fails the probe. ``own`` (the
        # probe's wire key, grader.plan.Plan.assign_states): through its
        # own ``eval()`` or ``train()`` with no argument instead, as
        # model.eval() and model.train() are called; what it returns is
        # not needed (the outputs tell what mode it entered).
        name = ("train" if mode else "eval") if own else "train"
        switch = call(b_getattr, obj, name)
        usable = b_callable(switch)
        box = [switch, (call(switch) if own else call(switch, b_bool(mode)))
               if usable else None]
        # The method (a property may make one of its own) and what it
        # returned die on the submission's thread.
        switch = None
        call(b_list.clear, box)
        if not usable:
            shown = "" if own else b_str(b_bool(mode))
            raise b_TypeError(
                "the model's " + name + " attribute is not callable, so "
                "model." + name + "(" + shown + ") cannot be called")

    def parameters_of(obj, remove_duplicate=True):
        return call(b_list, module_named_parameters(
            obj, remove_duplicate=remove_duplicate))

    def load(obj, probe):
        # Each named weight of the probe's state into the parameter of that
        # name (every name a parameter answers to, a tied one included),
        # in the state's order, as load_state_dict does: a parameter two
        # names of the state answer to (tied weights) keeps the value of
        # the last, and each earlier name is an alias of it, allowed only
        # when both are in one group of the probe's ``tied``
        # (docs/internals.md, "Tied parameters"). Returns the aliases
        # (name -> the name whose value the parameter holds) and the
        # parameter of each name.
        every = b_dict(parameters_of(obj, False))
        groups = [b_list(group) for group in probe.get("tied") or []]
        named = []
        for name, data in probe["state"].items():
            if name not in every:
                known = ", ".join(b_sorted(every)) or "none"
                raise b_LookupError(
                    probe["target"] + " has no parameter " + name
                    + " (its parameters: " + known + ")")
            with no_torch_function():
                t_set_data(every[name], t_clone(data))
            named.append((name, every[name]))
        aliases = {}
        for index, (name, parameter) in b_enumerate(named):
            for later, other in named[index + 1:]:
                if other is parameter:
                    aliases[name] = later
            last = aliases.get(name)
            if last is None:
                continue
            allowed = False
            for group in groups:
                allowed = allowed or (name in group and last in group)
            if not allowed:
                raise b_LookupError(
                    probe["target"] + "'s " + name + " is the same "
                    "parameter as " + last + " (tied weights): the "
                    "contract has them as separate parameters")
        return aliases, named

    def build(namespace, probe, loading):
        target = namespace.get(probe["target"])
        if target is None:
            raise b_LookupError(probe["target"] + " is not defined in the "
                                "submission")
        init = probe.get("init")
        if init is None:
            return target
        obj = construct(target, init)
        for base in type_mro(b_type(obj)):
            for label, forbidden_class in forbidden_classes:
                if base is forbidden_class:
                    note("forbidden", "use", label)
                    raise b_RuntimeError(label + " is not allowed in this "
                                         "homework: write it yourself")
        build_decoy(namespace, probe)
        if probe.get("handled") is not None and is_module(obj):
            # Handled as a user's code handles a module (grader.plan.
            # handle): a copy, cast and cast back, called once on other
            # weights, then loaded through its own load_state_dict.
            return handling(obj, probe, loading, load_state, set_mode)
        load_state(obj, probe, loading)
        return obj

    def build_decoy(namespace, probe):
        # A probe's ``decoy`` (grader.plan.Plan.assign_states): a second
        # object of its target, built with other arguments right after
        # the probe's own (or before an ``again`` probe's call), kept
        # until the probe is done; a setting the class keeps for every
        # object then shows in the probe's answer.
        spec = probe.get("decoy")
        target = namespace.get(probe["target"])
        if not spec or target is None:
            return
        phase["held"].append(construct(target, spec))

    def construct(target, init):
        # ``target(*args, **kwargs)`` of an init (a probe's or a
        # decoy's), each tensor argument a copy, on the submission's
        # thread.
        args = [t_clone(a) if is_tensor(a) else a
                for a in init.get("args", [])]
        return call(target, *args, **init.get("kwargs", {}))

    def load_state(obj, probe, loading):
        # The probe's weights into the object it calls (built now, or
        # kept for an ``again`` probe); the aliases and parameters loading
        # found go to ``loading``.
        if probe.get("state"):
            if not is_module(obj):
                raise b_TypeError(probe["target"] + "(...) did not build an "
                                  "nn.Module, so its weights cannot be set")
            loading[0], loading[1] = load(obj, probe)

    def again(probe, loading):
        # A probe marked ``again`` builds nothing: it takes the object the
        # task's previous probe built (kept in ``previous`` until the next
        # probe that builds), and loads its own state into it.
        if not previous:
            raise b_RuntimeError(
                "the object of the previous probe could not be built, so "
                "this probe, which calls that object again, could not run")
        obj = previous[0]
        load_state(obj, probe, loading)
        return obj

    def submodule(obj, path, target):
        # The module at a dotted path, through each module's own
        # ``_modules`` table, read without running any code of theirs
        # (exact str keys only, as value_readers' ``entry`` reads).
        module = obj
        for part in b_str(path).split("."):
            modules = instance_dict(module).get("_modules") \
                if is_module(module) else None
            found = None
            if b_type(modules) is b_dict:
                for name, child in dict_items(modules):
                    if b_type(name) is b_str and name == part:
                        found = child
            if found is None or not is_module(found):
                raise b_LookupError(target + " has no submodule "
                                    + b_str(path))
            module = found
        return module

    def substitute(obj, spec, target):
        # A probe's ``substitutes``: the module at each path answers
        # ``forward`` with the affine map the plan gives (x @ weight.T +
        # bias), a torch ``nn.Linear`` set in the module's own attribute
        # dict, so its class's forward never runs there. Plain torch:
        # nothing of the grader's is reachable from it (docs/internals.md,
        # "Substitutes").
        for path, linear in spec.items():
            namespace = instance_dict(submodule(obj, path, target))
            if "_modules" not in namespace:
                raise b_LookupError(target + "'s " + b_str(path) + " cannot "
                                    "take a substitute")
            namespace["forward"] = linear

    def kept(params):
        with no_torch_function():
            return [t_clone(t_detach(p)) for p in params]

    def only_stepped(obj, named, copies, method):
        # The parameters are still the module's own objects and hold what
        # the worker's last step left: nothing else wrote into them (the
        # loss under no_grad or through .data, a hook, a finalizer, a
        # replaced parameter). Checked before and after every call of the
        # loss and once training is over (docs/threat-model.md,
        # principle 5).
        now = parameters_of(obj)
        same = b_len(now) == b_len(named)
        for (name, p), (_, q) in b_zip(named, now):
            same = same and p is q
        if not same:
            raise b_RuntimeError(
                "the model's parameters were replaced during training with "
                + method + ": they may change only through the gradient "
                "steps of the loss")
        with no_torch_function():
            for (name, p), copy in b_zip(named, copies):
                if not t_equal(t_detach(p), copy):
                    raise b_RuntimeError(
                        "the parameter " + name + " changed during "
                        "training with " + method + ", not by a gradient "
                        "step: parameters may change only through the "
                        "gradient steps of the loss")

    def fit(obj, spec, mode, own=False):
        # Adam steps (the usual betas and eps) on the object's own loss
        # method (a probe's "fit": method, lr, batches), in train mode with
        # gradients on, then ``mode``. What they achieved is judged by the
        # grader on the values the probe's call returns afterwards, never
        # on a loss the code reports; a parameter that changed otherwise
        # than by these steps stops training with an error.
        if not is_module(obj):
            raise b_TypeError("the object to train is not an nn.Module")
        set_mode(obj, True, own)
        named = parameters_of(obj)
        params = [p for _, p in named]
        if not params:
            raise b_TypeError("the object to train has no parameters")
        method = b_str(spec["method"])
        lr, beta1, beta2, eps = b_float(spec["lr"]), 0.9, 0.999, 1e-8
        with no_torch_function():
            moments = [(t_zeros_like(p), t_zeros_like(p)) for p in params]
        step = call(b_getattr, obj, method)
        copies = kept(params)
        for number, batch in b_enumerate(spec["batches"]):
            only_stepped(obj, named, copies, method)
            call(set_grad_enabled, True)
            try:
                loss = call(step, t_clone(batch))
                if not is_tensor(loss):
                    raise b_TypeError(method + " did not return a tensor")
                # No subclass's own gradients, and the grader's torch
                # function mode set aside by design (principle 5 judges the
                # step): torch's functions stay off on the thread while
                # autograd runs.
                guard = no_torch_function()
                call(guard.__enter__)
                try:
                    phase["grader_off"] = True
                    try:
                        grads = call(autograd_grad, loss, params,
                                     allow_unused=True)
                    finally:
                        phase["grader_off"] = False
                finally:
                    call(guard.__exit__, None, None, None)
            finally:
                call(set_grad_enabled, False)
            # The loss dies on the submission's thread, as anything of its
            # code does (a finalizer tied to it runs there, then is seen).
            box, loss = [loss], None
            call(b_list.clear, box)
            only_stepped(obj, named, copies, method)
            done = number + 1
            with no_torch_function():
                for p, g, (m, v) in b_zip(params, grads, moments):
                    if g is None:
                        continue
                    m.mul_(beta1).add_(g, alpha=1 - beta1)
                    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                    m_hat = m / (1 - beta1 ** done)
                    v_hat = v / (1 - beta2 ** done)
                    p.data.sub_(lr * m_hat / (t_sqrt(v_hat) + eps))
            # The gradients (a function of the code may have made them)
            # die on the submission's thread too.
            box, grads, g = [grads], None, None
            call(b_list.clear, box)
            copies = kept(params)
        set_mode(obj, mode, own)
        only_stepped(obj, named, copies, method)
        # The worker's own copies: nothing the code does later (a method
        # it overrides runs when the module is read) changes what is sent;
        # and the parameters they are copies of.
        return ([(name, copy) for (name, _), copy in b_zip(named, copies)],
                named)

    def run_probe(namespace, probe, reached=None):
        # ``reached``: where a call that raises leaves the ids of the
        # planned statements that completed before its error (words of
        # the report only: a call that fails verifies no comment).
        # The probe's autograd mode, on the submission's thread, for the
        # whole probe: building, loading, the mode, training, the call
        # (grader.plan.Plan.assign_modes).
        grad = b_bool(probe.get("grad", False))
        # The finer state (grader.plan.Plan.assign_states): with autograd
        # off, torch.inference_mode() for the call; with it on, plain
        # inputs or activations made by the probe's operation.
        inference = not grad and b_bool(probe.get("inference", False))
        # ``raw``: the input's requires_grad does not follow the mode (a
        # plain tensor with autograd on, a leaf that requires grad with
        # it off).
        raw = b_bool(probe.get("raw", False))
        via = made_by.get(b_str(probe.get("via") or "clone"), t_clone)
        call(set_grad_enabled, grad)
        phase["stage"] = "build"
        # A handled probe's warm-up call's shape records (handler).
        phase["warm_trace"] = None
        # The aliases among the state's names and the parameter each
        # names, as loading found them.
        loading = [{}, []]
        if probe.get("again"):
            build_decoy(namespace, probe)
            obj = again(probe, loading)
        else:
            obj = build(namespace, probe, loading)
            previous.append(obj)
        phase["held"].append(obj)
        own = b_bool(probe.get("own", False))
        if is_module(obj):
            set_mode(obj, probe.get("train", False), own)
        if probe.get("substitutes"):
            substitute(obj, probe["substitutes"], b_str(probe["target"]))
        if probe.get("again") or probe.get("grads"):
            fill_grads(obj, b_bool(probe.get("grads", False)),
                       b_int(probe.get("seed", 0)) ^ 0x5EED)
        phase["stage"] = "call"
        result = {}
        aliases, named_state = loading
        if aliases:
            result["aliases"] = b_dict(aliases)
        if probe.get("describe"):
            result["describe"] = describe(obj)
        called = probe.get("call")
        # The tensor data this frame may carry, shared by all its values
        # (grader.wire.VALUE_BUDGET).
        budget = [value_budget]
        if probe.get("fit"):
            manual_seed(probe)
            trained = fit(obj, probe["fit"],
                          b_bool(probe.get("train", False)), own)
            # Training left autograd off: the probe's mode again.
            call(set_grad_enabled, grad)
            # The trained weights, as training left them: the grader can
            # judge them with its own model, whatever else the object kept.
            # An alias of the state (a tied parameter) is sent under each
            # of its names, with the value of the parameter it names.
            copies, named = trained
            sent = [name for name, _ in copies]
            extra = []
            for name, parameter in named_state:
                for (other, held), (_, copy) in b_zip(named, copies):
                    if held is parameter and name not in sent:
                        extra.append((name, copy))
                        break
            with no_torch_function():
                result["state"] = {b_str(name)[:200]: encode(value, budget)
                                   for name, value in (copies + extra)[:256]}
        if called is None:
            return result
        args = [((activation(a, via) if not raw else t_clone(a)) if grad
                 else (needing_grad(a) if raw else t_clone(a)))
                if is_tensor(a) else a for a in called.get("args", [])]
        kwargs = b_dict(called.get("kwargs", {}))
        method = called.get("method")
        if method is not None:
            obj = call(b_getattr, obj, b_str(method))
        manual_seed(probe)
        # Every call records the shapes of the planned statements, the
        # same way whatever the probe is (a shape check or a graded case):
        # nothing the code can observe tells the two apart, and the
        # grading process verifies the comments at every probe whose
        # sizes it knows (docs/threat-model.md, principle 6).
        phase["records"] = {}
        phase["left_out"] = {}
        phase["bound"].clear()
        phase["reads"] = {}
        phase["made"] = {}
        phase["calls"] = phase["returns"] = 0
        # Entered on the submission's thread, for the call alone: what
        # the object was built and loaded with stays a normal tensor.
        held = [call(inference_mode, True)] if inference else []
        phase["tracing"] = True
        raised = True
        try:
            value = call(obj, *args, **kwargs)
            raised = False
        finally:
            phase["tracing"] = False
            if held:
                call(held[0].__exit__, None, None, None)
                call(b_list.clear, held)
            if raised and reached is not None:
                # The grader's own keys (statement ids as str): the
                # statement that raised is not among them (an exception
                # drops the pending one).
                reached.extend(b_sorted(phase["records"])[:max_reached])
        phase["clear_made"]()
        intact = phase["calls"] == phase["returns"] and still_tracing()
        warm = phase["warm_trace"]
        if warm is not None:
            # A handled probe's call is its object's second: the shapes
            # sent are those of its warm-up call, the fresh object's
            # first, on the probe's input (grader.plan.handle), intact
            # only when both calls were; the lines whose tensor outlived
            # their statement in either call count (what the code keeps
            # from its first call alone, a global set once, is the
            # warm-up's).
            phase["records"], phase["left_out"] = warm[0], warm[1]
            intact = intact and warm[2]
            for line in warm[3]:
                phase["made"][line] = True
            phase["warm_trace"] = None
        result["trace"] = {"records": phase["records"],
                           "left_out": phase["left_out"],
                           "made": b_sorted(phase["made"])[:4096],
                           "intact": intact}
        phase["records"] = None
        phase["made"] = None
        phase["left_out"] = {}
        phase["held"].append(value)
        result["value"] = encode(value, budget)
        return result

    handling = handler(torch, phase, call, is_tensor, is_module,
                       manual_seed, deepcopy)
    return run_probe


def handler(torch: Any, phase: dict, call: Callable, is_tensor: Callable,
            is_module: Callable, manual_seed: Callable, deepcopy: Callable
            ) -> Callable:
    """Return ``handle(obj, probe, loading, load_state, set_mode) -> obj``
    for a probe marked ``handled`` (grader.plan.handle): the object as a
    user's code handles a module before using it, each step through the
    object's own methods on the submission's thread (``call``):

    * ``copy.deepcopy(obj)``, the copy used from then on (what pickling,
      ``torch.save`` and a copied model see);
    * ``obj.to("cpu")`` (``Module._apply``, which every move and cast
      runs: one pass, where ``.double()`` and ``.float()`` were two);
    * the probe's weights, each moved by noise drawn from the probe's
      ``handled`` seed (a private generator), loaded as the plain state
      loads them (``load_state``: names and tied weights checked as
      always), then one call on the probe's input in eval mode, its
      answer discarded: a module that keeps its weights from its first
      call answers the probe with these; then ``train(True)``, the
      mode of a fresh module, so the mode the probe sets next (its own
      ``eval()`` for an ``own`` probe) is the one it answers in;
    * the probe's own weights loaded through the object's own
      ``load_state_dict`` (strict), over its own ``state_dict()``
      (buffers and parameters the state does not name keep their
      values), every name of a tied parameter given the value of the
      name the plain state leaves in it.

    Everything of the submission's these steps make or return is kept in
    ``phase["held"]``, which dies on the submission's thread."""
    b_getattr, b_dict, b_int = getattr, dict, int
    b_TypeError, b_str = TypeError, str
    Generator = torch.Generator
    randn = torch.randn
    TensorBase = torch._C.TensorBase
    t_clone, t_floating = TensorBase.clone, TensorBase.is_floating_point
    t_add, t_size = TensorBase.add, TensorBase.size
    t_dtype = TensorBase.__dict__["dtype"].__get__
    no_torch_function = torch._C.DisableTorchFunction
    OrderedDict = __import__("collections").OrderedDict
    held = phase["held"]

    def method_call(obj, name, *args, **kwargs):
        method = call(b_getattr, obj, name)
        held.append(method)
        value = call(method, *args, **kwargs)
        held.append(value)
        return value

    def moved(probe):
        generator = Generator()
        generator.manual_seed(b_int(probe["handled"]))
        state = {}
        with no_torch_function():
            for name, data in probe["state"].items():
                if is_tensor(data) and t_floating(data):
                    data = t_add(data, randn(t_size(data),
                                             generator=generator,
                                             dtype=t_dtype(data)))
                state[name] = data
        return state

    def handle(obj, probe, loading, load_state, set_mode):
        held.append(obj)
        target = b_str(probe["target"])
        obj = call(deepcopy, obj)
        held.append(obj)
        if not is_module(obj):
            raise b_TypeError("copy.deepcopy of the " + target + " did not "
                              "give an nn.Module")
        method_call(obj, "to", "cpu")
        if not probe.get("state"):
            return obj
        load_state(obj, {**probe, "state": moved(probe)}, loading)
        called = probe.get("call")
        if called is not None:
            set_mode(obj, False)
            args = [t_clone(a) if is_tensor(a) else a
                    for a in called.get("args", [])]
            function = obj
            if called.get("method") is not None:
                function = call(b_getattr, obj, b_str(called["method"]))
                held.append(function)
            manual_seed(probe)
            stage = phase["stage"]
            # The call is the code's forward, as every probe's call, and
            # the fresh object's first: its shapes are recorded as any
            # probe's, and sent as the probe's (run_probe), so what runs
            # only in a first call is verified at the probe's sizes.
            phase["stage"] = "call"
            phase["records"], phase["left_out"] = {}, {}
            phase["bound"].clear()
            phase["reads"], phase["made"] = {}, {}
            phase["calls"] = phase["returns"] = 0
            phase["tracing"] = True
            try:
                held.append(call(function, *args,
                                 **b_dict(called.get("kwargs", {}))))
            finally:
                phase["tracing"] = False
                phase["stage"] = stage
            phase["clear_made"]()
            phase["warm_trace"] = (phase["records"], phase["left_out"],
                                   phase["calls"] == phase["returns"],
                                   phase["made"])
            phase["records"], phase["made"] = None, None
            phase["left_out"] = {}
            # Back in train mode, as a fresh module is: the mode the
            # probe then sets (its own eval() for an ``own`` probe) is
            # the one it answers in, not the warm-up's.
            set_mode(obj, True)
        aliases = loading[0]
        own = method_call(obj, "state_dict")
        state = call(OrderedDict, own)
        held.append(state)
        metadata = call(b_getattr, own, "_metadata", None)
        if metadata is not None:
            state._metadata = metadata
        given = probe["state"]
        with no_torch_function():
            for name in given:
                state[name] = t_clone(given[aliases.get(name, name)])
        method_call(obj, "load_state_dict", state, strict=True)
        return obj

    return handle


def coverage_keeper(phase: dict, alive: dict, fingerprint: Callable,
                    still_tracing: Callable) -> tuple[Callable, ...]:
    """Return ``coverage()`` (the fingerprints of the submission's code
    that ran in this phase, and foreign code) and ``start_phase(name,
    stage)``.

    Coverage fails closed: when the trace function was removed (in this
    phase or before), its foreign code includes :data:`SILENCED`; past
    MAX_FOREIGN entries, one more says how many were left out.
    """
    b_set, b_str, b_list = set, str, list
    silenced = b_list(SILENCED)
    prints: dict = {}

    def coverage():
        ran = []
        for code_id, stage in phase["ran"]:
            code = alive.get(code_id)
            if code is None:
                continue
            digest = prints.get(code_id)
            if digest is None:
                digest = prints[code_id] = fingerprint(code)
            ran.append([digest, code.co_firstlineno, code.co_name[:80],
                        stage])
        foreign = b_list(phase["foreign"])
        if phase["foreign_left_out"]:
            foreign.append(["", b_str(phase["foreign_left_out"])
                            + " more piece(s) of such code, not listed",
                            0, ""])
        if not still_tracing():
            foreign.append(silenced)
        return {"ran": ran, "foreign": foreign}

    def start_phase(name, stage="build"):
        phase["name"] = name
        phase["stage"] = stage
        phase["ran"] = b_set()
        phase["foreign"] = []
        phase["foreign_left_out"] = 0

    return coverage, start_phase


def patch_watch(watched: list, classify: Callable | None = None
                ) -> Callable:
    """Return ``patched()``: the entries of the watched namespaces (a list
    of ``(dotted, namespace owner, addresses before)``, filled once the
    tripwires are in place) that now hold another function or class.

    A library's own wrapper of the original (a function of library code,
    ``classify``, whose ``__wrapped__`` is the object the entry held and
    whose closure holds it: ``import torch._dynamo`` wraps
    ``torch.manual_seed``) is no patch: it calls the original."""
    import types

    b_type, b_str, address, b_list = type, str, ADDRESS, list
    b_sorted, b_isinstance = sorted, isinstance
    type_dict = type.__dict__["__dict__"].__get__
    ModuleType, FunctionType = types.ModuleType, types.FunctionType
    module_dict = ModuleType.__dict__["__dict__"].__get__
    function_dict = FunctionType.__dict__["__dict__"].__get__
    function_code = FunctionType.__dict__["__code__"].__get__

    function_closure = FunctionType.__dict__["__closure__"].__get__
    cell_contents = types.CellType.__dict__["cell_contents"].__get__
    b_ValueError = ValueError

    def holds(item, old):
        """True when a cell of the function's closure holds ``old``."""
        for cell in function_closure(item) or ():
            try:
                if address(cell_contents(cell)) == old:
                    return True
            except b_ValueError:  # an empty cell
                continue
        return False

    def wraps_original(item, old):
        """True for a library's function that wraps and calls ``old``
        (its ``__wrapped__`` names it and its closure holds it)."""
        if classify is None or b_type(item) is not FunctionType or \
                classify(function_code(item)) != "library":
            return False
        for key, inner in b_list(function_dict(item).items()):
            if b_type(key) is b_str and key == "__wrapped__":
                return address(inner) == old and holds(item, old)
        return False

    def patched():
        changed = []
        for dotted, value, before in watched:
            namespace = (module_dict(value) if b_type(value) is ModuleType
                         else type_dict(value))
            for name, item in b_list(namespace.items()):
                name = b_str(name)
                old = before.get(name)
                if old == address(item) or wraps_original(item, old):
                    continue
                if old is None and b_type(value) is ModuleType and \
                        b_type(item) is ModuleType:
                    continue  # a submodule imported later
                if old is None and b_type(value) is ModuleType and \
                        not (b_type(item) is FunctionType
                             or b_isinstance(item, b_type)):
                    continue
                changed.append(dotted + "." + name)
        return b_sorted(changed)[:32]

    return patched


# -- tripwires: what a submission can reach (they replace library functions)
#
# A stand-in is inert by construction: it holds no reporter and nothing of
# what it replaces, and does nothing but raise (or, for a forbidden class's
# subclass hook, nothing). Its call is reported by the trace function, which
# knows every stand-in by its own code object (:func:`install_tripwires`
# gives each one its own and tells the tracer what it stands for): what a
# submission can change in a stand-in it reached (its cells, which hold the
# error's class and text) changes what the error says, never what the
# grader sees (docs/threat-model.md, principle 2, "Stand-ins").

def quick_init(torch: Any, original: Callable, mode_id: int
               ) -> tuple[Callable, ...]:
    """Return ``reset_parameters(self)``, the grader's equivalent of
    torch.nn.Linear's own (``original``), and ``seal()``, which remembers
    the namespaces of QUICK_INIT_NAMESPACES and QUICK_INIT_ENTRIES as
    they are (``seal(_lookup)``, once the tripwires are in place; the
    closures keep torch's objects only).

    It draws the same numbers from the same generator, in the same order,
    into the same tensors (``kaiming_uniform_`` with ``a=sqrt(5)`` on the
    weight, then ``uniform_`` on the bias, computed with the same
    floating-point operations) and leaves gradients as it found them, but
    runs no Python frame of torch's: each of those the trace function
    would follow and the operation judge would judge (a module's
    initialisation ran dozens), and a probe whose weights the grader sets
    discards the values anyway. Torch's own runs (``original``) for
    anything else: a subclass, a parameter that is not an exact
    ``Parameter`` or is empty, a torch function mode on the stack other
    than the grader's (whose id is ``mode_id``),
    or any of the remembered namespaces changed (torch's code on the path
    replaced, e.g.). docs/threat-model.md, principle 2."""
    import math
    import operator

    b_type, b_len, b_dict, b_all, b_map = type, len, dict, all, map
    b_vars, b_tuple, b_sorted, is_ = vars, tuple, sorted, operator.is_
    b_set = set
    path = QUICK_INIT_PATH
    wanted, wanted_entries = QUICK_INIT_NAMESPACES, QUICK_INIT_ENTRIES
    sqrt = math.sqrt
    C = torch._C
    no_torch_function = C.DisableTorchFunction
    set_grad, grad_enabled = C._set_grad_enabled, C.is_grad_enabled
    stack_len, stack_at = C._len_torch_function_stack, C._get_function_stack_at
    b_id = id
    Linear, Parameter = torch.nn.Linear, torch.nn.Parameter
    instance_dict = torch.nn.Module.__dict__["__dict__"].__get__
    base = C.TensorBase
    t_uniform, t_dim, t_size = base.uniform_, base.dim, base.size
    proxy_type = type(type.__dict__["__dict__"].__get__(Linear))
    getters = {b_dict: dict.get, proxy_type: proxy_type.get}
    # (namespace, its get, its size, the names the path's code names that
    # it holds, and their values as they were): compared by identity, in C
    # (operator.is_), with the size (a key added is seen).
    namespaces: list = []
    entries: list = []       # (namespace, name, value)

    def seal(lookup, code_objects):
        named = b_set()
        for dotted in path:
            value = lookup(dotted)
            if value is not None:
                for code in code_objects(value):
                    named.update(code.co_names)
        # Before the submission's code: the originals (torch's own).
        named.update(("weight", "bias", "reset_parameters"))
        for dotted in wanted:
            value = lookup(dotted)
            if value is None:
                continue
            namespace = b_vars(value)
            names = b_tuple(b_sorted(name for name in named
                                     if name in namespace))
            namespaces.append((namespace, getters[b_type(namespace)],
                               b_len(namespace), names,
                               b_tuple(namespace[name] for name in names)))
        for dotted, names in wanted_entries:
            value = lookup(dotted)
            if value is not None:
                namespace = b_vars(value)
                for name in names:
                    entries.append((namespace, name, namespace.get(name)))

    def reset_parameters(self):
        # One function, no helper of the grader's in its cells (a cell can
        # be rewritten from Python): the checks are written out here.
        depth = stack_len()
        if b_type(self) is not Linear or depth > 1 or \
                (depth and b_id(stack_at(0)) != mode_id):
            return original(self)
        for namespace, get, size, names, values in namespaces:
            if b_len(namespace) != size or not b_all(b_map(
                    is_, b_map(get, (namespace,) * b_len(names), names),
                    values)):
                return original(self)
        for namespace, name, value in entries:
            if namespace.get(name) is not value:
                return original(self)
        # ``self.weight`` and ``self.bias``: the module's own registered
        # parameters (nothing shadows them), exact, the weight 2-d and not
        # empty.
        namespace = instance_dict(self)
        if b_type(namespace) is not b_dict or "weight" in namespace or \
                "bias" in namespace:
            return original(self)
        params = namespace.get("_parameters")
        if b_type(params) is not b_dict or "weight" not in params or \
                "bias" not in params:
            return original(self)
        weight, bias = params["weight"], params["bias"]
        if b_type(weight) is not Parameter or \
                (bias is not None and b_type(bias) is not Parameter):
            return original(self)
        with no_torch_function():
            plain = t_dim(weight) == 2 and 0 not in t_size(weight)
        if not plain:
            return original(self)  # with torch's functions as they were
        with no_torch_function():
            fan_in = t_size(weight)[1]
            # torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5)):
            # calculate_gain("leaky_relu", a), fan_in of a 2-d tensor.
            slope = sqrt(5)
            gain = sqrt(2.0 / (1 + slope ** 2))
            std = gain / sqrt(fan_in)
            bound = sqrt(3.0) * std
            enabled = grad_enabled()
            set_grad(False)
            try:
                t_uniform(weight, -bound, bound, generator=None)
                if bias is not None:
                    bound = 1 / sqrt(fan_in) if fan_in > 0 else 0
                    t_uniform(bias, -bound, bound, generator=None)
            finally:
                set_grad(enabled)
        return None

    return reset_parameters, seal


def inert_call(error: type, message: str) -> Callable:
    """Return a stand-in that raises ``error(message)`` and does nothing
    else: a forbidden kernel, a refused call, a compiler the grader cannot
    trace."""
    def stand_in(*args, **kwargs):
        raise error(message)
    return stand_in


def inert_hook() -> Callable:
    """Return a forbidden class's ``__init_subclass__``: it does nothing
    (the trace function reports its call)."""
    def subclassed(*args, **kwargs):
        return None
    return subclassed


def no_trace_call() -> Callable:
    """Return the stand-in of ``sys.gettrace`` and ``sys.getprofile``."""
    def no_trace():
        return None
    return no_trace


def guarded_file(sys_audit: Callable, original: Callable, writing: bool
                 ) -> Callable:
    """torch opens these files in C++, where no audit event is raised:
    return a stand-in that checks the path as the audit hook checks
    ``open``, then calls ``original``."""
    b_type, b_str, b_bytes = type, str, bytes
    mode = "wb" if writing else "rb"

    def guarded(*args, **kwargs):
        path = args[0] if args else kwargs.get(
            "filename", kwargs.get("name"))
        if b_type(path) is b_str or b_type(path) is b_bytes:
            sys_audit("grader.open", path, mode)
        return original(*args, **kwargs)
    return guarded


def _inert(table: tuple[dict, set], stands_for: tuple[str, str, str],
           error: type | None = None, message: str = "") -> Callable:
    """An inert stand-in (``error`` None: a subclass hook) with a code
    object of its own, entered in ``table`` (the trace function's
    ``stand_ins``, ``id(code) -> (code, kind, verb, what)``, and the
    agent's codes, so that a report names the line that called it).
    Set-up."""
    stand_ins, agent_codes = table
    stand_in = inert_hook() if error is None else inert_call(error, message)
    code = stand_in.__code__.replace(
        co_qualname=(stands_for[0] + " " + stands_for[2])[:200])
    stand_in.__code__ = code
    stand_ins[id(code)] = (code,) + stands_for
    agent_codes.add(id(code))
    return stand_in


def _forbidden(table: tuple[dict, set], name: str) -> Callable:
    """The stand-in of a forbidden function or class. Set-up."""
    return _inert(table, ("forbidden", "use", name), RuntimeError,
                  name + " is not allowed in this homework: write it "
                  "yourself")


def _untraceable(table: tuple[dict, set], name: str,
                 verb: str = REFUSED_COMPILE,
                 label: str | None = None) -> Callable:
    """The stand-in of a way into code the grader cannot trace: refused,
    its call reported (the task's items earn nothing). Set-up."""
    return _inert(table, ("untraceable", verb, label or name),
                  PermissionError, "the grader's sandbox refuses " + name
                  + ": it runs code where the grader cannot trace it "
                  "(write the computation in plain PyTorch)")


def frame_hook_guard(sys_audit: Callable, name: str) -> Callable:
    """The stand-in of the FRAME_HOOKS call ``name``: with a callable
    argument, the call is reported as untraceable (through the audit
    hook, as the trace function reports a stand-in's call) and refused;
    otherwise it returns None, the hook that was set before (none ever
    is), and does nothing. Its cells hold builtins and text only: no
    function of the grader's, no original. Set-up."""
    b_callable, b_PermissionError, b_tuple = callable, PermissionError, tuple
    verb = REFUSED_COMPILE
    message = ("the grader's sandbox refuses " + name + ": it runs code "
               "where the grader cannot trace it (write the computation "
               "in plain PyTorch)")

    def frame_hook(*args, **kwargs):
        for value in args + b_tuple(kwargs.values()):
            if b_callable(value):
                sys_audit("grader.event", "untraceable", verb, name)
                raise b_PermissionError(message)
        return None
    return frame_hook


def install_tripwires(torch: Any, stand_ins: dict, agent_codes: set[int],
                      forbidden_functions: dict[int, str],
                      forbidden_classes: list, aten_pattern: str | None,
                      watched_extra: tuple, watched: list,
                      holder: list) -> None:
    """Replace the forbidden calls (every alias, by identity), the
    unaudited calls that end, start or signal a process or thread and the
    ways into code the grader cannot trace with inert stand-ins; then
    remember the watched namespaces. Set-up: runs before the submission.

    Each stand-in gets a code object of its own, entered in ``stand_ins``
    (``id(code) -> (code, kind, verb, what)``, what the trace function
    reports when that code is called) and among the agent's codes (a
    report names the line that called it)."""
    import types

    table = (stand_ins, agent_codes)
    replacements = {}
    for ident, name in forbidden_functions.items():
        replacements[ident] = _forbidden(table, name)
    for value, what in refused_values():
        replacements[id(value)] = _inert(
            table, ("refused", what, ""), PermissionError,
            "the grader's sandbox refuses to " + what)
    for value, name in untraceable_values():
        replacements[id(value)] = _untraceable(table, name)
    for value, name in mode_bypass_values():
        replacements[id(value)] = _untraceable(
            table, name, CHOSEN_BY_DATA, "an operation passed through "
            + name + ", past the grader's torch function mode")
    for dotted in FRAME_HOOKS:
        value = _lookup(dotted)
        if value is not None:
            replacements[id(value)] = frame_hook_guard(sys.audit, dotted)
    for cls, attribute, name in jit_bindings()[1]:
        try:
            setattr(cls, attribute, _untraceable(table, name))
        except (TypeError, AttributeError):
            pass
    no_trace = no_trace_call()
    replacements[id(sys.gettrace)] = no_trace
    replacements[id(sys.getprofile)] = no_trace
    for name, attribute, ident in alias_sites(set(replacements),
                                              KIT_PACKAGES):
        namespace = getattr(sys.modules[name], "__dict__")
        namespace[attribute] = _wrapping(replacements[ident],
                                         namespace.get(attribute))
    for owner, name, writing in (
            (torch._C, "PyTorchFileWriter", True),
            (torch._C, "PyTorchFileReader", False),
            (torch, "from_file", False),
            (torch.UntypedStorage, "from_file", False)):
        original = getattr(owner, name, None)
        if original is not None:
            try:
                setattr(owner, name,
                        guarded_file(sys.audit, original, writing))
            except (TypeError, AttributeError):
                pass
    for label, cls in forbidden_classes:
        tripped = _forbidden(table, label)
        for attribute, value in list(vars(cls).items()):
            if isinstance(value, (types.FunctionType, staticmethod,
                                  classmethod)) or \
                    attribute in ("__init__", "forward", "__call__"):
                try:
                    setattr(cls, attribute, tripped)
                except (TypeError, AttributeError):
                    pass
        try:
            cls.__init_subclass__ = classmethod(_inert(
                table, ("forbidden", "subclass", label)))
        except (TypeError, AttributeError):
            pass
    handle = _adopt_aten(table, aten_pattern)
    if handle is None and aten_pattern:
        handle = _trip_aten(torch, table, aten_pattern)
    if handle is not None:
        holder.append(handle)
    for dotted, before in _snapshot(watched_extra).items():
        value = _lookup(dotted)
        if value is not None:
            watched.append((dotted, value, before))


def _wrapping(stand_in: Any, original: object) -> Any:
    """``stand_in``, with a ``__wrapped__`` when ``original`` has one (a
    function made by ``functools.wraps``, a context manager's decorator):
    libraries read it at import (``torch._dynamo`` registers
    ``torch.nn.attention.sdpa_kernel.__wrapped__``), so an honest
    submission that imports them must not fail there. It is a copy of
    the stand-in (the same code: reported as the stand-in, inert as it
    is), never the original. Set-up."""
    import types

    if type(stand_in) is not types.FunctionType or \
            "__wrapped__" in stand_in.__dict__:
        return stand_in
    try:
        wraps = "__wrapped__" in vars(original)
    except TypeError:
        wraps = False
    if wraps:
        stand_in.__wrapped__ = types.FunctionType(
            stand_in.__code__, stand_in.__globals__, stand_in.__name__,
            stand_in.__defaults__, stand_in.__closure__)
    return stand_in


def _trip_aten(torch: Any, table: tuple[dict, set], pattern: str
               ) -> object:
    """Register a stand-in for every forbidden ATen operator at every key
    where it has a kernel (:func:`aten_kernels`); return the registration
    handle, which the caller keeps alive in the grader's holder.

    The handle is torch's C registration object itself
    (``torch._C._dispatch_library``), not a ``torch.library.Library``: that
    class registers a ``weakref.finalize`` (reachable from anyone through
    ``weakref.finalize._registry``) whose call deregisters every kernel,
    and enters each in ``torch.library._impls``. This handle is in no
    registry; its ``reset`` is reachable only through the handle, which
    only the holder (a cell of the runner's closure) keeps. Set-up."""
    import warnings

    handle = torch._C._dispatch_library("IMPL", "aten", "", ATEN_TRIPWIRE,
                                        0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a registered kernel"
        for name, keys in aten_kernels(pattern):
            tripped = _forbidden(table, "torch.ops.aten." + name.split(".")[0])
            for key in keys:
                try:
                    handle.impl(name, key, tripped, False)
                except (RuntimeError, ValueError):
                    pass
    return handle


def preinstall_aten(pattern: str) -> None:
    """Register the tripwires of the ATen operators ``pattern`` matches
    once, in the fork server, before it forks a worker: every worker
    starts with them at every key (:func:`_trip_aten`, on a stand-ins'
    table of the server's own) and adopts them (:func:`_adopt_aten`)
    instead of registering its own. docs/threat-model.md, principle 3."""
    import torch

    stand_ins: dict = {}
    codes: set[int] = set()
    handle = _trip_aten(torch, (stand_ins, codes), pattern)
    _ATEN_READY.clear()
    _ATEN_READY.update(pattern=pattern, handle=handle, stand_ins=stand_ins,
                       codes=codes)


def _adopt_aten(table: tuple[dict, set], pattern: str | None
                ) -> object | None:
    """The fork server's registration (:func:`preinstall_aten`) when it
    was made for ``pattern``: its stand-ins are entered in ``table`` (a
    call of one is reported as if this worker had registered it) and its
    handle is returned, for the grader's holder. Otherwise None, the
    server's registration removed (the handle's ``reset``), so that the
    job's own rules alone are registered. Either way this module keeps no
    reference to it. Set-up."""
    ready = dict(_ATEN_READY)
    _ATEN_READY.clear()
    if not ready:
        return None
    if ready["pattern"] != pattern:
        ready["handle"].reset()
        return None
    stand_ins, agent_codes = table
    stand_ins.update(ready["stand_ins"])
    agent_codes.update(ready["codes"])
    return ready["handle"]


# -- the submission's own stack (docs/threat-model.md, principle 1) --------

def trampoline(start_thread: Callable, stack_size: Callable,
               size: int) -> tuple[Callable, ...]:
    """Start the thread every call of the submission's code runs on and
    return ``call(fn, *args, **kwargs)`` (run ``fn`` there, return what it
    returned or raise ``RuntimeError(carried, [exception])`` around what
    it raised: an empty list when the exception was not delivered),
    ``carried``, ``release(error)`` (let such an error's exception die on
    the thread) and ``thread()`` (the thread's id).

    The thread's whole loop is C, so that no Python frame of the grader
    lies below the submission's: ``deque(maxlen=0).extend`` over
    ``map(list.clear, iter(jobs.get, None))``. Main puts a one-element
    list (a token) and keeps no other reference to the token: when the
    thread clears the list, the token dies there and its weak references'
    callbacks run in the thread, newest first: the job
    (``defaultdict(job).__missing__`` calls ``job()`` and keeps what it
    returned) and then ``results.put`` (main wakes). An exception in a
    weak reference's callback never stops the loop: CPython hands it to
    ``sys.unraisablehook``, set here to a bounded mailbox's ``append``
    (what the submission can reach there is its own calls' failures).
    ``start_thread`` must be the real ``_thread.start_new_thread``, called
    after the confinement (the thread inherits Landlock and seccomp).
    """
    import _queue
    import _thread
    import weakref
    from collections import defaultdict, deque
    from functools import partial

    b_int, b_hash, b_list, b_type = int, hash, list, type
    b_len = len
    b_BaseException, b_RuntimeError = BaseException, RuntimeError
    b_partial, b_defaultdict = partial, defaultdict
    weakref_ref = weakref.ref
    tuple_item = tuple.__getitem__
    method_type = b_type(b_list.append.__get__([]))
    method_self = method_type.__dict__["__self__"].__get__
    jobs, results = _queue.SimpleQueue(), _queue.SimpleQueue()
    jobs_put, results_get, results_put = jobs.put, results.get, results.put
    mailbox = deque(maxlen=MAILBOX)
    mailbox_clear = mailbox.clear
    default_hook = sys.__unraisablehook__
    carried = object()
    sys.unraisablehook = mailbox.append
    # The type of what CPython hands the hook (not exposed by name).
    probe = b_partial(b_int)
    failing = weakref_ref(probe, b_partial(b_int, "", 0, 0))
    del probe, failing
    hook_args = b_type(mailbox.pop())
    old_size = stack_size(size)
    try:
        start_thread(deque(maxlen=0).extend,
                     (map(b_list.clear, iter(jobs.get, None)),))
    finally:
        stack_size(old_size)

    def raw(fn, args, kwargs):
        """Run ``fn(*args, **kwargs)`` on the thread: (True, value) or
        (False, the exception, or None when it was not delivered)."""
        token = b_partial(b_int)
        signal = weakref_ref(token, results_put)
        table = b_defaultdict(b_partial(fn, *args, **kwargs))
        done = weakref_ref(token, table.__missing__)
        b_hash(done)
        box = [token]
        token = None
        jobs_put(box)
        box = None
        while True:
            try:
                got = results_get()
            except b_BaseException:
                continue  # interrupted (a handler of the grader's own)
            if got is signal:
                break
        if done in table:
            return True, table[done]
        found = []
        for entry in b_list(mailbox):
            if b_type(entry) is hook_args:
                item = tuple_item(entry, 4)
                if b_type(item) is method_type and \
                        method_self(item) is table:
                    found = [tuple_item(entry, 1)]
        entry = item = None
        # The failure's objects (its traceback holds the submission's
        # frames) die on the thread, not here.
        raw(mailbox_clear, (), {})
        return False, found

    def flush():
        """What reached the mailbox besides the calls' own failures (a
        finalizer's error) is printed as CPython prints it, on the thread
        (it writes to the submission's sys.stderr)."""
        pending = b_list(mailbox)
        mailbox_clear()
        for entry in pending:
            if b_type(entry) is not hook_args:
                continue
            item = tuple_item(entry, 4)
            if b_type(item) is method_type and \
                    b_type(method_self(item)) is b_defaultdict:
                continue  # a call's failure, already delivered
            raw(default_hook, (entry,), {})
        mailbox_clear()

    def call(fn, /, *args, **kwargs):
        if mailbox:
            flush()
        ok, value = raw(fn, args, kwargs)
        if ok:
            return value
        box, value = value, None
        raise b_RuntimeError(carried, box)

    def release(error):
        """Let a carried exception die on the thread (finalizers of what
        its traceback holds, a suspended generator's ``GeneratorExit``,
        are the submission's code)."""
        args = error.args if b_type(error) is b_RuntimeError else ()
        if b_len(args) == 2 and args[0] is carried:
            box, args = args[1], None
            raw(b_list.clear, (box,), {})

    ident = call(_thread.get_ident)

    def thread():
        return ident

    return call, carried, release, thread


def _interpreter_natives(real: Callable) -> tuple[str, ...]:
    """The interpreter's own extension folder (``DESTSHARED``), real."""
    import sysconfig

    folder = sysconfig.get_config_var("DESTSHARED")
    full = real(folder) if folder else None
    return (full,) if full else ()


def _native_modules() -> list[tuple[str, str, object]]:
    """``(path, name, top package's __path__ or None)`` of every native
    module loaded now (its ``__file__`` has an extension suffix)."""
    import importlib.machinery
    import types

    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    module_dict = types.ModuleType.__dict__["__dict__"].__get__
    found = []
    for name, module in list(sys.modules.items()):
        if type(module) is not types.ModuleType or type(name) is not str:
            continue
        path = module_dict(module).get("__file__")
        # The suffix first: a realpath is an lstat per folder, and only
        # a few dozen of torch's thousand modules are native.
        if type(path) is not str or not path.endswith(suffixes):
            continue
        top = sys.modules.get(name.partition(".")[0])
        where = (module_dict(top).get("__path__")
                 if type(top) is types.ModuleType else None)
        found.append((path, name, where))
    return found


def _native_places() -> list[str]:
    """The paths :func:`_loaded_native_roots` resolves now, as named: the
    native modules' files and their top packages' folders."""
    places = []
    for path, _, where in _native_modules():
        places.append(path)
        if where is not None:
            places += [folder for folder in list(where)
                       if type(folder) is str]
    return places


def _loaded_native_roots(real: Callable, inside: Callable,
                         natives: tuple[str, ...]) -> tuple[str, ...]:
    """The folders of the packages (or the files of the top-level
    modules) that have native code loaded now, outside the interpreter's
    own extension folder ``natives``: the grader's own libraries. A
    path the fork server resolved (:func:`index_loaded_files`) is not
    resolved again."""
    known = _REAL_FILES
    roots: set[str] = set()
    for path, _, where in _native_modules():
        full = known.get(path) or real(path)
        if not full or inside(full, natives):
            continue
        if where is None:
            roots.add(full)
            continue
        for folder in list(where):
            found = known.get(folder) if type(folder) is str else None
            found = found or real(folder)
            if found:
                roots.add(found)
    return tuple(sorted(roots))


def guard_tracer(classify: Callable, refusing: list, get_ident: Callable
                 ) -> Callable:
    """Return the trace function of the grader's own thread: the
    submission's code never runs there. When a frame of the submission's
    code (or of code it made) starts, it raises before the frame's first
    line; CPython then removes the trace function, which the audit hook
    vetoes (``refusing``), reports and turns into the error the action
    that reached the code gets."""
    b_PermissionError = PermissionError

    def guard(frame, event, arg):
        kind = classify(frame.f_code)
        if kind == "submission" or kind == "synthetic":
            refusing[0] = get_ident()
            raise b_PermissionError("refused")
        return None

    return guard


# -- the run ----------------------------------------------------------------

def runner(plan: dict, parts: dict) -> Callable[[], None]:
    """Return ``run()``: install the audit hook and the trace function,
    load the submission and run every probe of the plan, each reported
    in a frame.

    ``plan``: the source, its file name, the probes, the confinement and
    what must stay alive; ``parts``: the closures the other factories
    made (``hook``, ``tracer``, ``emit``, ``run_probe``, ``coverage``,
    ``start_phase``, ``patched``, ``describe_error``).
    """
    import builtins
    import time

    import torch

    b_compile, b_exec, b_enumerate = compile, exec, enumerate
    b_list_clear, b_len = list.clear, len
    b_BaseException = BaseException
    refused_thread = REFUSED_THREAD  # closures look up no global
    add_audit_hook, settrace = sys.addaudithook, sys.settrace
    sys_modules = sys.modules
    clock = time.perf_counter
    my_pid = os.getpid()
    set_grad_enabled = torch._C._set_grad_enabled
    ModuleType = type(sys)
    module_dict = ModuleType.__dict__["__dict__"].__get__
    source, filename = plan["source"], plan["filename"]
    probes, confinement = plan["probes"], plan["confinement"]
    kept, holder = plan["kept"], plan["holder"]
    held, previous = plan["held"], plan["previous"]
    hook, global_tracer, emit = parts["hook"], parts["tracer"], parts["emit"]
    run_probe, coverage = parts["run_probe"], parts["coverage"]
    start_phase, patched = parts["start_phase"], parts["patched"]
    describe_error, note = parts["describe_error"], parts["note"]
    call, release, guard = parts["call"], parts["release"], parts["guard"]
    arm, thread_starts = parts["arm"], parts.get("thread_starts")

    def unlisted():
        """The end of a phase: what the report left out, and the thread
        starts the kernel refused (the seal tells no one; a refused start
        is a refusal like any other, whatever route asked for it)."""
        note("unlisted", "", "")
        if thread_starts is not None and thread_starts():
            note("refused", refused_thread, "")

    def run():
        holder.append(kept)  # the agent's code objects stay alive
        # The submission's thread: gradients on (torch's default) while
        # the module loads, each probe then sets its own mode; the
        # grader's torch function mode pushed (torch's mode stack is per
        # thread), traced; this thread (the grader's) refuses the
        # submission's code and keeps gradients off.
        call(set_grad_enabled, True)
        call(arm)
        call(settrace, global_tracer)
        add_audit_hook(hook)
        emit({"type": "hello", "pid": my_pid, "confinement": confinement})
        set_grad_enabled(False)
        settrace(guard)
        module = ModuleType("submission")
        module.__file__ = filename
        namespace = module_dict(module)
        namespace["__builtins__"] = builtins
        sys_modules["submission"] = module
        start_phase("import", "import")
        started = clock()
        try:
            code = b_compile(source, filename, "exec", dont_inherit=True,
                             optimize=0)
            call(b_exec, code, namespace)
        except b_BaseException as exception:
            error = describe_error(exception)
            release(exception)
            emit({"type": "import", "ok": False, "error": error,
                  "seconds": clock() - started, "coverage": coverage()})
            unlisted()
            emit({"type": "patched", "what": patched()})
            emit({"type": "done"})
            return
        emit({"type": "import", "ok": True, "seconds": clock() - started,
              "coverage": coverage()})
        unlisted()
        emit({"type": "patched", "what": patched()})
        for number, probe in b_enumerate(probes):
            emit({"type": "start", "id": probe["id"]})
            start_phase(probe["id"])
            started = clock()
            reached: list = []
            try:
                result = run_probe(namespace, probe, reached)
                message = {"type": "probe", "id": probe["id"], "ok": True}
                message.update(result)
            except b_BaseException as exception:
                message = {"type": "probe", "id": probe["id"], "ok": False,
                           "error": describe_error(exception)}
                release(exception)
                if reached:
                    message["reached"] = reached
            # What the probe built and got dies on the submission's thread
            # (its finalizers are its code).
            call(b_list_clear, held)
            # The object kept for the ``again`` probes that follow dies
            # with the last of them, there too.
            following = probes[number + 1] if number + 1 < b_len(probes) \
                else None
            if following is None or not following.get("again"):
                call(b_list_clear, previous)
            message["seconds"] = clock() - started
            message["coverage"] = coverage()
            emit(message)
            unlisted()
        start_phase("end", "end")
        emit({"type": "patched", "what": patched()})
        emit({"type": "done"})

    return run


#: The factories whose closures run once the submission runs (the kit's
#: integrity test walks each one's code for global look-ups).
FACTORIES = (make_fingerprint, line_tracer, messenger, reporter, path_rules,
             code_kinds, audit_hook, value_readers, shape_tracer,
             error_describer, module_describer, probe_runner, plain_reader,
             coverage_keeper, patch_watch, quick_init, inert_call,
             inert_hook,
             no_trace_call, guarded_file, frame_hook_guard, trampoline,
             guard_tracer, runner,
             torch_function_mode, operation_judge, traced_reads,
             collector, made_keeper, return_reader, handler, torch_seeder)


def _child_numbers(library: dict) -> list[tuple[type, list[str]]]:
    """The job's ``sandbox.numbers`` as (class, attribute names) pairs
    (a class that does not exist is left out)."""
    found = []
    for dotted, names in library.get("numbers", {}).items():
        cls = _lookup(dotted)
        if isinstance(cls, type):
            found.append((cls, [str(name) for name in names]))
    return found


def _assemble(job: dict, probes: list, result_fd: int,
              forbidden: tuple[dict[int, str], list], codes: dict,
              confinement: dict, kept: list) -> Callable[[], None]:
    """Build the runtime from the factories; return ``run``. Set-up: runs
    before the submission (the tripwires are installed here)."""
    import _thread
    import functools
    import hashlib
    import linecache
    import re
    import types

    import torch

    from grader.wire import result_writer, value_encoder
    from grader.worker.confine import refused_thread_starts, seal_threads

    forbidden_functions, forbidden_classes = forbidden
    library = job.get("sandbox", {})
    source, filename = job["source"], job["filename"]
    lines = source.split("\n")
    scratch = os.path.realpath(job["scratch"])
    hidden = tuple(os.path.realpath(p) for p in job.get("hidden", []))
    library_roots = tuple(os.path.realpath(p)
                          for p in job.get("library_roots", []))
    readable = tuple(os.path.realpath(p) for p in job.get("readable", ["/"]))
    # Tracebacks and warnings show the submission's lines without reading
    # its file (which the sandbox does not let anyone read).
    linecache.cache[filename] = (len(source), None,
                                 [line + "\n" for line in lines], filename)
    # The grader's own files are not readable either (the sandbox hides
    # them): a traceback that reaches one shows no line of it, and a
    # submission that asks linecache for one is refused.

    # State, reachable only from the closures that use it.
    kinds: dict = {}         # ADDRESS(code) -> kind
    alive: dict = {}         # id(code) -> code (keeps the ids valid)
    synthetic: dict = {}     # id(code) -> how it was made
    phase = {"name": "setup", "stage": "import", "ran": set(), "held": [],
             "previous": [],
             "foreign": [], "foreign_left_out": 0, "records": None,
             "left_out": {}, "made": None, "reads": {}, "scanned": [0],
             "bound": [],
             "tracing": False, "returns": 0, "calls": 0, "silenced": False,
             "grader_off": False}
    # Per thread: the ids of the threads inside the hook, the thread whose
    # guard refused the submission's code.
    busy = {"hook": set(), "guard": [None],
            "ident": _thread.get_ident, "code_set": [True]}
    watched: list = []
    holder: list = []
    token = object()

    fingerprint = make_fingerprint(hashlib.sha256, types.CodeType)
    send = result_writer(bytes.fromhex(job["key"]),
                         bytes.fromhex(job["magic"]), result_fd, os._exit)
    emit, note = messenger(sys.audit, token)
    report, _ = reporter(send, filename, phase)
    paths = path_rules(scratch, readable, hidden)
    who = code_kinds(filename, codes["agent"], codes["generators"],
                     library_roots, hidden, fingerprint, paths[0], paths[1],
                     kinds, alive, synthetic)
    hook = audit_hook(send, report, token, codes, who, paths,
                      {"scratch": scratch, "hidden": hidden,
                       "library_roots": library_roots}, busy)
    readers = value_readers(torch, phase["scanned"])
    units, line_unit = plan_units(job.get("statements", []))
    mode, handler = torch_function_mode(types.SimpleNamespace,
                                        types.MethodType)
    reads = traced_reads(busy["hook"])
    rules = job.get("forbidden", {})
    kernels = rules.get("name_pattern")
    judge, in_force, arm, layer = operation_judge(
        torch, mode, handler, who[0], note, phase, reads[0],
        re.compile(kernels) if kernels else None,
        tuple(os.path.realpath(p) for p in sys.path if p),
        tuple(str(p) for p in rules.get("packages", ["torch"])),
        visible_names(source, filename), syntax_operations(),
        busy["code_set"])
    stand_ins: dict = {}     # id(code) -> (code, kind, verb, what)
    tracer, still_tracing = shape_tracer(
        units, line_unit, phase, who[0], synthetic, readers,
        note, torch._C.TensorBase,
        (judge, in_force, handler.__code__, layer), stand_ins, reads,
        {(int(first), str(name)): int(index)
         for first, name, index in job.get("calls", [])},
        plain_reader(torch), kinds, _lookup(FRAME_HOOK_READER))
    # The submission's own thread (started now: after the confinement,
    # which it inherits, and before the tripwires replace the thread
    # calls and the watched namespaces are remembered).
    call, carried, release, _ = trampoline(
        _thread.start_new_thread, _thread.stack_size, _stack_size())
    # The worker has every thread it needs: from now on no thread starts,
    # by any route (the kernel refuses clone in every thread).
    sealing = seal_threads()
    confinement["threads_sealed"] = not sealing
    thread_starts, counting = refused_thread_starts(
        _thread.start_new_thread) if not sealing else (None, "")
    confinement["problems"] = list(confinement.get("problems", [])) + \
        list(sealing) + ([counting] if counting else [])
    # The trace function is that thread's: it is checked there.
    traced = functools.partial(call, still_tracing)
    describe = module_describer(torch, readers, _child_numbers(library),
                                call)
    run_probe = probe_runner(torch, phase, readers, describe,
                             value_encoder(torch), note, forbidden_classes,
                             traced, call)
    coverage, start_phase = coverage_keeper(phase, alive, fingerprint,
                                            traced)
    # Torch's initialisation of a plain Linear, replaced by the grader's
    # equivalent before the watched namespaces are remembered; what it
    # checks is remembered once the tripwires are in place.
    seal = None
    if not (kernels and any(re.search(kernels, name)
                            for name in QUICK_INIT_CODE)):
        torch.nn.Linear.reset_parameters, seal = quick_init(
            torch, torch.nn.Linear.reset_parameters, id(mode))
    install_tripwires(torch, stand_ins, codes["agent"], forbidden_functions,
                      forbidden_classes,
                      job.get("forbidden", {}).get("aten"),
                      tuple(library.get("watched", [])), watched, holder)
    if seal is not None:
        seal(_lookup, _code_objects)
    return runner(
        {"source": source, "filename": filename, "probes": probes,
         "confinement": confinement, "kept": kept, "holder": holder,
         "held": phase["held"], "previous": phase["previous"]},
        {"hook": hook, "tracer": tracer, "emit": emit,
         "run_probe": run_probe, "coverage": coverage,
         "start_phase": start_phase, "patched": patch_watch(watched, who[0]),
         "note": note, "call": call, "release": release, "arm": arm,
         "thread_starts": thread_starts,
         "guard": guard_tracer(who[0], busy["guard"], _thread.get_ident),
         "describe_error": error_describer(filename, lines,
                                           int(job["memory_mb"]), call,
                                           carried, release)})
