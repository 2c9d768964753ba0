"""Walls by construction (issue 24), graded in one batch.

Every file in ``hostile/walls_batch/`` (committed, or derived from the
solution in ``tests/kit/derived.py``) attacks a worker-side wall of
docs/threat-model.md ("Walls by construction"): it floods the shape
records past their cap (principle 2), reaches a ready-made attention of
torch by a route no tripwire names (principle 3), runs its work where the
grader's trace function does not follow, through a route no list names,
or through torch operations chosen by data rather than code (a library
that calls what it is given, a C interpreter of data such as a pickle:
principle 4), or keeps tensors where the tracer cannot read them, or
changes a container the tracer reads incrementally behind its back
(principle 6);
issue 24's residuals: a thread start the kernel refused, a finalizer run
inside the trace function's bookkeeping, tensors bound by a setter call,
a ``for``/``with`` target or a ``case`` capture, nested tensors, a
counterfeit library wrapper, frames asked for through ``torch.vmap``
and torch's own look-ups or around typing_extensions' allowed one,
tensors kept in wrapper objects; another homework's module of the
student package (a given layer: principles 3 and 10), by an import, a
built name or its source text; a container changed behind the
incremental reader's back. Honest controls pass operations as
values on their own lines, name their own helpers like kernels, keep
commented tensors in plain holders and in every binding form, hold a
nested tensor of equal parts, import ``torch._dynamo``, map helpers with
``torch.vmap``, draw dropout from ``torch.distributions``, share one
commented helper between the two tasks, import what their homework
ships of the student package, annotate with typing's generics, split
heads with helpers that start with an unflatten (the control that
fills a flat list one score at a time is in test_bigscan.py).
The whole folder is graded by ONE ``python -m grader batch`` (the suite's
time is tight); each row must earn exactly the scores below, item by
item, with the flags that say what it did; the walker must say, in its
own output, that it reached nothing of the grader.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from derived import materialize, names_in
from grader.routes.rows import RECORD
from grader.worker import agent

KIT = Path(__file__).resolve().parents[2]
WALLS = Path(__file__).resolve().parent / "hostile" / "walls_batch"
ITEMS = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
         "task1.bonus", "task2.scores", "task2.causal", "task2.output",
         "task2.pep8", "task2.shapes")
CLEAN_2 = (3, 1, 2, 0, 0)
ZERO = (0, 0, 0, 0, 0)
CAPPED_1 = (1, 3, 0, -1, 0)
ZERO_SHAPES = (0, 0, 0, -1, 0)  # and the comments' shapes are wrong
REFUSED_THREAD = (1, 0, 0, 0, 0)  # the layers, but no thread computed
UNREAD_1 = (1, 3, 0, -1, 0)  # correct, but a comment fails closed
UNREAD_BONUS_1 = (1, 3, 0, -1, 1)  # the same, in at most 3 statements
CLEAN_1 = (1, 3, 0, 0, 1)
BAD_SHAPES_2 = (3, 1, 2, 0, -1)
BAD_SHAPES_ZERO_2 = (0, 0, 0, 0, -1)
INIT_ONLY_1 = (1, 0, 0, 0, 0)
#: name -> (task 1 items, task 2 items, flag kinds, words of the report).
CORPUS: dict[str, tuple] = {
    # -- Principle 2: past the shape records' cap, what is left out is
    #    counted, flagged, and the shapes item is not earned.
    "cap_unpack_patterns": (CAPPED_1, CLEAN_2, ("capped",),
                            ("more distinct shapes than the grader records",
                             "not recorded")),
    "cap_return_arity": (CAPPED_1, CLEAN_2, ("capped",),
                         ("more distinct shapes than the grader records",)),
    "cap_recursion_depth": (CAPPED_1, CLEAN_2, ("capped",),
                            ("more distinct shapes than the grader records",
                             )),
    # -- Principle 4: work replayed where no trace function follows, by a
    #    route no list names, earns nothing.
    "replay_fx_interpreter": (ZERO, ZERO, ("refused", "untraceable",
                                           "untraceable"),
                              ("torch.fx.proxy.Proxy (a stand-in for tensors",
                               "only the visible source can earn points")),
    "replay_ir_text": (ZERO, CLEAN_2, ("untraceable",),
                       ("torch._C.parse_ir",
                        "torch._C._jit_interpret_graph")),
    "replay_shared_unit": (ZERO, CLEAN_2, ("untraceable",),
                           ("torch._C.CompilationUnit.find_function",)),
    # -- Principle 4: torch operations chosen by data (a library calls
    #    what it was given), by no named tool, earn nothing; the
    #    instrument that sees them, taken off, fails closed.
    "data_fx_graph": (ZERO, CLEAN_2, ("refused", "untraceable"),
                      ("bmm by Interpreter.call_function",
                       "transpose by Interpreter.call_method",
                       "torch operations chosen by data")),
    "data_recipe_chain": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                          ("bmm by _reconstruct", "softmax by _reconstruct")),
    "data_dispatch_table": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                            ("bmm by CallableMixin._execute_mock_call",)),
    "data_closure_recorder": (ZERO, CLEAN_2, ("refused", "untraceable"),
                              ("matmul by Interpreter.call_function",
                               "softmax by Interpreter.call_method")),
    "data_redispatch": (ZERO, CLEAN_2, ("refused", "untraceable"),
                        ("passed through "
                         "torch._C._skip_one_hop_torch_function",)),
    "data_mode_off": (ZERO, ZERO, ("refused", "untraceable", "untraceable"),
                      ("run while the grader's torch function mode was "
                       "taken off",)),
    # Operations passed as values on the file's own traced lines
    # (functools.reduce, map, an attribute) are chosen there: full marks.
    "honest_ops_as_data": ((1, 3, 0, 0, 0), CLEAN_2, (), ()),
    # -- Principle 4: C interpreters of data. An operation the file's line
    #    reaches through a call (or a C iterator) must be written, named or
    #    held by its visible code; run inside a C call that names none of
    #    it (a pickle's opcodes, a methodcaller of a decoded name, a tree
    #    of __reduce__, a starmap), it was chosen by data. Before, each
    #    earned task 1's 4 points with no flag.
    # -- Principle 4: a graded call that takes a whole tensor's values out
    #    of torch (numpy, tolist, a callback of apply_) computes with them
    #    where no operation is judged (red team 15: numpy or Python
    #    functions chosen by data; numpy arrays need no shape comment).
    #    Before, each earned its task's points with no flag.
    "out_numpy_decoded": (ZERO, CLEAN_2, ("untraceable",),
                          ("took out of torch", "numpy by line")),
    "out_numpy_pickle": (ZERO, CLEAN_2, ("untraceable",),
                         ("numpy by line",)),
    "out_python_floats": (CLEAN_1, ZERO, ("untraceable",),
                          ("tolist by line",)),
    "out_numpy_uncommented": (CLEAN_1, ZERO, ("untraceable",),
                              ("numpy by line",)),
    "out_apply_callback": (ZERO, CLEAN_2, ("untraceable",),
                           ("apply_ by line",)),
    # A torch layer whose class data chose (getattr(nn, decoded)): the
    # class is judged as an operation is; layers built by code that
    # names their classes (a helper handed the class, a comprehension,
    # a class attribute) keep full marks.
    "layer_by_data": (ZERO, CLEAN_2, ("untraceable",),
                      ("Softmax by line", "which does not name it")),
    "honest_layers_named": (CLEAN_1, CLEAN_2, (), ()),
    # Values read out of torch at import, in __init__, and one number in
    # a graded call: full marks.
    "honest_values_outside_calls": (CLEAN_1, CLEAN_2, (), ()),
    # Values out of torch cost a task when any of its calls answered
    # with a tensor: answers that are lists only now and then, or a
    # tuple whose tensor came back from numpy, are charged; a file none
    # of whose answers is a tensor (an array) is judged by its answers
    # ("should be a tensor") and keeps its init point.
    "out_alternate_answers": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                              ("numpy by line",)),
    "out_tuple_part_plain": (CLEAN_1, BAD_SHAPES_ZERO_2, ("untraceable",),
                             ("numpy by line",)),
    "honest_answer_as_array": (INIT_ONLY_1, CLEAN_2, (),
                               ("should be a tensor",)),
    "interp_pickle_literal": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                              ("softmax by line 60 of SelfAttention."
                               "forward, which does not name it",
                               "transpose by line 60")),
    "interp_pickle_zlib": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                           ("softmax by line 51 of SelfAttention.forward, "
                            "which does not name it",)),
    "interp_methodcaller_decoded": (ZERO, CLEAN_2, ("untraceable",),
                                    ("mT by line 44 of SelfAttention."
                                     "forward, which does not name it",
                                     "softmax by line 50")),
    "interp_reduce_tree": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                           ("softmax by line 85 of SelfAttention.forward",
                            "torch operations chosen by data")),
    "interp_starmap_loop": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                            ("softmax by line 56 of SelfAttention.forward, "
                             "which does not name it",)),
    # The operations named by the function, on lines that never run, but
    # not by the line that runs them: the names must be the line's.
    "interp_pickle_named_elsewhere": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                                      ("softmax by line 63 of SelfAttention."
                                       "forward, which does not name it",)),
    # An operator runs what torch runs for that operator (derived by the
    # grader), not what a slot's __radd__ holds: a transpose, a matmul.
    "interp_operator_slot": (ZERO, CLEAN_2, ("untraceable",),
                             ("transpose by line 52 of SelfAttention."
                              "forward, which does not name it",
                              "matmul by line 54", "softmax by line 58")),
    # Calls that run what the visible code names on the line, or hold in
    # a name it stored (a partial, a closure, methodcaller and getattr of
    # a written name, map drained by unpacking): full marks.
    "honest_named_calls": ((1, 3, 0, 0, 0), CLEAN_2, (), ()),
    # -- Principle 6 (red team 4): a forward that tells the shape checks
    #    from graded runs by counting its calls, or by the tracer's cost,
    #    gains nothing: every run records shapes alike. Before, the first
    #    two earned both shapes items (0) with wrong comments, the last
    #    two full marks.
    # ... and task 2's twins (the families of one probe, repeated in the
    # other autograd mode after every other probe, red team 10's R1)
    # come past its count: they raise, so causal and output fail closed.
    # (Red team 13: the handled probes' warm-up calls, grader.plan.handle,
    # count too, so task 1's graded calls come past its count as well:
    # task1.forward fails closed; the warm-up calls record their shapes,
    # so the comments are verified as before.)
    "tell_call_count": ((1, 0, 0, -1, 0), (3, 0, 0, 0, -1), (),
                        ("line 69: wrong shape", "line 159: wrong shape")),
    "tell_call_count_cheap_cases": ((1, 0, 0, -1, 0), (3, 0, 0, 0, -1), (),
                                    ("line 62: wrong shape",
                                     "line 180: wrong shape")),
    "tell_tracer_timing": ((1, 0, 0, 0, 0), CLEAN_2, (),
                           ("no shape comment in SelfAttention.forward was "
                            "found missing or wrong, but 3 statement(s) "
                            "could not be checked (see the notes)",)),
    "tell_tracer_timing_uncommented": ((1, 0, 0, 0, 0), CLEAN_2, (), ()),
    # Red team 5's honest idioms: an operator's method called by name,
    # operator.itemgetter, an operation kept on the class.
    "honest_dunder_calls": ((1, 3, 0, 0, 1), CLEAN_2, (), ()),
    "honest_itemgetter": ((1, 3, 0, 0, 1), CLEAN_2, (), ()),
    "honest_class_held_op": ((1, 3, 0, 0, 1), CLEAN_2, (), ()),
    # A builtin that runs operators (``sum`` adds) may run what it runs,
    # and nothing else: a pickle inside ``sum([...])`` is still flagged.
    "honest_builtin_operators": ((1, 3, 0, 0, 0), CLEAN_2, (), ()),
    "honest_shared_helper": ((1, 3, 0, 0, 0), CLEAN_2, (), ()),
    # The bonus counts what ran for forward, another graded class's
    # method too (red team 15: a one-statement delegation was paid).
    "bonus_via_other_class": ((1, 3, 0, 0, 0), CLEAN_2, (),
                              ("SelfAttention.forward has 22 statements",)),
    "interp_pickle_inside_sum": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                                 ("softmax by line 55 of SelfAttention."
                                  "forward, which does not name it",)),
    # -- Principle 2 by construction: the stand-ins are inert (no reporter,
    #    no original in their cells) and their calls are reported by the
    #    trace function, which knows each by its code. Before, rewriting
    #    the reporter the stand-ins shared silenced every report (the
    #    first file: full marks, no flag), and the compilers' originals
    #    could be read out and put back (the second: task 1 full marks).
    "cells_silence_stand_ins": (ZERO, CLEAN_2, ("forbidden",),
                                ("torch.nn.functional.scaled_dot_product_"
                                 "attention",)),
    "cells_restore_originals": (CLEAN_1, CLEAN_2, ("refused",),
                                ('compile code with "torch._C._jit_script_'
                                 'compile"',)),
    "cells_code_swap": (ZERO, CLEAN_2, ("untraceable",),
                        ("made at run time by a replaced __code__",)),
    "cells_reach_audit": (ZERO, CLEAN_2, ("forbidden",),
                          ("torch.nn.functional.scaled_dot_product_"
                           "attention",)),
    # -- Principle 2 by construction: what the grader's trace function
    #    reads runs traced, so code of the submission's a read runs (a
    #    key's __eq__, a __class__ property) is seen like any helper.
    #    Before, each kept 11 points with no flag.
    # (The key's __eq__ runs once, when the grader first judges the
    # class; later calls find no fresh output: forward earns nothing.)
    "tracer_key_runs_code": ((1, 0, -1, -1, 0), CLEAN_2, (),
                             ("_Key.__eq__",)),
    "tracer_key_runs_exec": ((0, 0, -1, -1, 0), CLEAN_2, ("untraceable",),
                             ("made at run time by exec",)),
    "tracer_class_property": ((1, 3, -1, -1, 0), CLEAN_2, (),
                              ("_Lens.__class__",)),
    "tracer_key_in_wrapped": ((0, 0, -1, -1, 0), CLEAN_2, ("untraceable",),
                              ("taken off, disabled or replaced",)),
    # -- Principle 1 by construction: a refusal is raised from the audit
    #    hook's own frame, never through its checks or the channel's
    #    writer (their locals: the key, the paths).
    "hook_refusal_locals": ((1, 3, 0, 0, 1), CLEAN_2, ("refused",),
                            ('read "/etc/hostname"',)),
    "hook_key_by_recursion": ((0, 0, 0, -1, 0), (0, 0, 0, 0, -1),
                              ("refused", "untraceable", "untraceable"),
                              ('read "/etc/nothing-',)),
    # -- Principle 1: the kit's other modules (the fork server's main
    #    module, the classes object still knows) hold no globals.
    "reach_kit_modules": ((1, 3, 0, 0, 1), CLEAN_2, (), ()),
    # -- Principle 1: nothing of the grader is reachable from student code,
    #    walked from inside a probe (the plan and the runner lie below).
    #    The walker runs in the first (graded) call, where every probe
    #    now records its shapes: its uncommented statements that hold
    #    tensors in containers cost task1.shapes (principle 6); its
    #    walk stays within what reading a statement may cost a call.
    "reach_walk_probe": ((1, 3, 0, -1, 0), CLEAN_2,
                         ("refused", "refused", "tampered", "tampered"),
                         ("inspect the grader's stack frames",
                          "inspect the grader's objects (gc)")),
    # -- Principle 1 by construction: the submission's code runs on a
    #    thread of its own whose loop is C, so no grader frame lies below
    #    it. Each file looks below itself with the standard library's own
    #    stack summary (traceback.extract_stack, allowed: it turns frames
    #    into text) from code the grader runs. Before, each listed the
    #    grader's runner and probe runner, and reading the agent's file
    #    for the summary was refused (a `refused` flag).
    "stack_seen_by_every_call": ((1, 3, 0, 0, 0), CLEAN_2, (), ()),
    # (shapes -1: the raising calls record no shapes, and the helper's
    # statement cannot be told apart from a tensor statement: as before.)
    "error_text_walks": ((1, 0, 0, -1, 0), (0, 0, 0, 0, -1), (),
                         ('raised _Refusal: "nothing of the grader below '
                          'the message"',
                          "the code called sys.exit('clean')")),
    # The grader's own look-up of the class would run the twin key's
    # __eq__ in its thread: refused there, so task 1 earns nothing.
    "globals_key_on_grader": (ZERO, CLEAN_2, ("refused",),
                              ("run on the grader's own stack",)),
    # -- Principle 3 by what computes: an operation run on behalf of a
    #    library code named like a forbidden kernel is a forbidden use of
    #    it, however the kernel was reached. Before, each earned 11/11
    #    with no flag; the submission's own helpers so named cost nothing.
    "kernel_onnx_init_fn": (ZERO, CLEAN_2, ("forbidden",),
                            ("torch.onnx.ops._impl.attention_23",
                             "which this homework forbids")),
    "kernel_decomp_table": (ZERO, CLEAN_2, ("forbidden",),
                            ("torch.onnx.ops._impl.attention_23",)),
    "kernel_registry_partial": (ZERO, CLEAN_2, ("forbidden",),
                                ("torch.onnx.ops._impl.attention_23",)),
    "honest_kernel_named_helper": ((1, 3, 0, 0, 1), CLEAN_2, (), ()),
    # A helper of the file's own named like torch's kernel is its own
    # code; rebound to the kernel, the call is refused all the same.
    "honest_kernel_own_names": ((1, 3, 0, 0, 0), CLEAN_2, (), ()),
    "forbidden_own_name_rebound": (
        ZERO, CLEAN_2, ("forbidden",),
        ("torch.nn.functional.scaled_dot_product_attention",)),
    # -- Principle 6 fails closed: a target the tracer cannot read is
    #    never "no tensor". Before, each file's task 1 shapes item was
    #    earned (0) with missing and wrong comments.
    "shapes_plain_holder": ((1, 3, 0, -1, 0), CLEAN_2, (),
                            ("line 68: missing shape comment",
                             "the comment claims [batch_size, hidden]",
                             "the comment claims [seq_len]")),
    "shapes_unwatched_targets": ((1, 3, 0, -1, 0), CLEAN_2, (),
                                 ("line 66: shape comment not verifiable",
                                  "the grader cannot read what it writes",
                                  "line 67: wrong shape",
                                  "line 68: missing shape comment")),
    "shapes_descriptor_holders": ((1, 3, 0, -1, 0), CLEAN_2, (),
                                  ("line 90: shape comment not verifiable",
                                   "cannot read `box.q`",
                                   "cannot read `lens.k`")),
    "shapes_walrus_everywhere": ((1, 3, 0, -1, 0), CLEAN_2, (),
                                 ("line 65: missing shape comment",
                                  "line 66: missing shape comment",
                                  "line 67: missing shape comment")),
    "honest_holders_commented": ((1, 3, 0, 0, 0), CLEAN_2, (),
                                 ("every tensor statement in "
                                  "SelfAttention.forward has a correct "
                                  "shape comment",)),
    # -- Principle 6, whatever the syntax: a statement on which a torch
    #    operation made a tensor that outlived it, and for which the
    #    reader read no tensor, fails closed ("not verifiable"; without a
    #    comment, "missing"). Eight of red team 2's forms (each earned
    #    shapes 0 before), three invented, and the honest forms' control.
    "unread_for_target": (UNREAD_1, CLEAN_2, (),
                          ("line 60: missing shape comment",
                           "line 61: missing shape comment",
                           "line 62: missing shape comment")),
    "unread_contextvar": (UNREAD_BONUS_1, CLEAN_2, (),
                          ("line 65: missing shape comment",
                           "a torch operation on it made one that outlived "
                           "it")),
    # out= refuses autograd: forward raises in a training step (R1).
    "unread_out_param": ((1, 0, 0, -1, 0), CLEAN_2, (),
                         ("line 66: missing shape comment",)),
    "unread_def_default": (UNREAD_BONUS_1, CLEAN_2, (),
                           ("line 59: missing shape comment",)),
    "unread_class_body": (UNREAD_1, CLEAN_2, (),
                          ("line 60: shape comment not verifiable",
                           "line 61: shape comment not verifiable",
                           "line 62: shape comment not verifiable")),
    "unread_generator_yield": (UNREAD_1, CLEAN_2, (),
                               ("line 61: shape comment not verifiable",)),
    "unread_map_append": (UNREAD_1, CLEAN_2, (),
                          ("line 61: missing shape comment",)),
    "unread_register_buffer": (UNREAD_1, CLEAN_2, (),
                               ("line 60: missing shape comment",
                                "line 61: missing shape comment")),
    "unread_deque_store": (UNREAD_1, CLEAN_2, (),
                           ("line 63: shape comment not verifiable",
                            "cannot read after it runs")),
    "unread_side_effect_target": (UNREAD_1, CLEAN_2, (),
                                  ("line 62: shape comment not verifiable",)),
    "unread_global_helper": (UNREAD_1, CLEAN_2, (),
                             ("line 69: missing shape comment",)),
    "honest_made_tensors": ((1, 3, 0, 0, 0), CLEAN_2, (),
                            ("every tensor statement in "
                             "SelfAttention.forward has a correct shape "
                             "comment",)),
    # -- Principle 4 at the kernel: once the submission's thread runs, a
    #    second seccomp filter (every thread of the worker) refuses clone,
    #    so CPython's own start_new_thread (from a second copy of _thread)
    #    fails. Before, the thread ran exec'd code unseen: full marks.
    #    The files catch the error and return zeros: what the thread would
    #    have computed earns nothing. Every start the kernel refused is
    #    counted (CPython keeps the thread state it made) and reported as
    #    a refusal; before, no flag (nor for the old synonym
    #    ``_thread.start_new``, which no stand-in replaces).
    "kernel_thread_reimport": (REFUSED_THREAD, CLEAN_2, ("refused",),
                               ("does not match the reference",
                                "The code tried to start a thread (the "
                                "sandbox refused it; libraries start "
                                "threads")),
    #    kernel_thread_from_spec keeps the first refusal (its traceback
    #    holds the q, k, v its uncommented line 96 made) in a global: the
    #    catch-all reads that line in the first call, a graded one whose
    #    shapes are now recorded too (principle 6), so task1.shapes -1.
    "kernel_thread_from_spec": ((1, 0, 0, -1, 0), CLEAN_2, ("refused",),
                                ("does not match the reference",
                                 "The code tried to start a thread",
                                 "line 96: missing shape comment")),
    "kernel_thread_alias": ((1, 3, 0, 0, 0), CLEAN_2, ("refused",),
                            ("The code tried to start a thread (the "
                             "sandbox refused it; libraries start "
                             "threads",)),
    # -- Principle 4: a finalizer never runs untraced. Automatic garbage
    #    collection is the trace function's, run traced when due; a
    #    generator's locals are refreshed traced. Before, the first file
    #    earned task 1's forward (3) with exec'd code and no flag.
    "finalizer_in_bookkeeping": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                                 ("made at run time by exec",)),
    "finalizer_collected": (ZERO_SHAPES, CLEAN_2, ("untraceable",),
                            ("made at run time by exec",)),
    # -- Principle 2, the shape reader fails closed on the value, never on
    #    the phase: a nested tensor's size is read dimension by dimension;
    #    one whose parts differ in size has no fixed shape, so its comment
    #    is not verified. Before, the reader raised and the phase read as
    #    silenced: task 1 earned nothing, flagged untraceable.
    "honest_nested_regular": ((1, 3, 0, 0, 0), CLEAN_2, (), ()),
    "nested_ragged_rows": ((1, 3, 0, -1, 0), CLEAN_2, (),
                           ("line 77: shape comment not verifiable",
                            "`self.kept` holds a nested tensor whose parts "
                            "differ in size")),
    "nested_in_dict": ((1, 3, 0, -1, 0), CLEAN_2, (),
                       ("line 75: shape comment not verifiable",
                        "`held` holds a nested tensor")),
    # -- Principle 2: an honest import of torch._dynamo neither fails (a
    #    stand-in keeps a __wrapped__ of its own) nor reads as a patch
    #    (a library's wrapper that calls the original is none); a
    #    wrapper of the submission's own, or a library function given
    #    the original's __wrapped__, still is. Before: 0 points.
    "honest_imports_dynamo": ((1, 3, 0, 0, 0), CLEAN_2, (), ()),
    "patched_seed_own_wrapper": ((1, 3, 0, 0, 0), CLEAN_2, ("patched",),
                                 ("torch.manual_seed, "
                                  "torch.nn.functional.gelu",)),
    # -- Principle 6: every binding form is watched: a setter call, a
    #    ``for`` or ``with`` target, a ``case`` capture, a global write.
    #    Before, their comments were never read (shapes 0).
    "shapes_setter_calls": ((1, 3, 0, -1, 0), CLEAN_2, (),
                            ("line 71: wrong shape",
                             "line 72: missing shape comment",
                             "line 73: shape comment not verifiable")),
    "shapes_loop_targets": ((1, 3, 0, -1, 0), CLEAN_2, (),
                            ("line 70: wrong shape",
                             "line 71: missing shape comment")),
    "shapes_match_captures": ((1, 3, 0, -1, 0), CLEAN_2, (),
                              ("2 statement(s) in SelfAttention.forward",
                               "line 74: missing shape comment",
                               "line 75: wrong shape")),
    "honest_bound_targets": ((1, 3, 0, 0, 0), CLEAN_2, (),
                             ("every tensor statement in "
                              "SelfAttention.forward has a correct "
                              "shape comment",)),
    # -- Principle 3: the aten tripwires cannot be deregistered (no
    #    finalizer, no Library, no registry holds their handle) and sit at
    #    every dispatch key where a forbidden operator has a kernel.
    #    Before, each of these four earned full marks with no flag.
    "untrip_finalizers": (ZERO, CLEAN_2, ("forbidden",),
                          ("torch.ops.aten.scaled_dot_product_attention",)),
    "untrip_reset_handles": (ZERO, CLEAN_2, ("forbidden",),
                             ("torch.ops.aten.scaled_dot_product_"
                              "attention",)),
    "forbidden_nested_key": (ZERO, CLEAN_2, ("forbidden",),
                             ("torch.ops.aten._native_multi_head_"
                              "attention",)),
    "forbidden_batched_key": (ZERO, CLEAN_2, ("forbidden",),
                              ("torch.ops.aten._scaled_dot_product_"
                               "attention_math",)),
    # -- Principle 2: no signal reaches the grader's thread as an
    #    exception (the worker ignores SIGINT). Before, raise_signal and
    #    interrupt_main wedged the grader's thread until the task's
    #    deadline: "did not finish", 20 s of a worker each.
    "signal_interrupts_grader": ((1, 3, 0, 0, 0), CLEAN_2, (),
                                 ("every tensor statement in "
                                  "SelfAttention.forward has a correct "
                                  "shape comment",)),
    # -- Principles 1 and 4: the interpreter's extension modules outside
    #    its standard library (sys.stdlib_module_names) do not load, by
    #    file, whatever the name: a second interpreter (no audit hook, no
    #    trace function: before, 3/3 for the work done there, no flag)
    #    and a call queued on the grader's thread (before: both tasks
    #    "did not finish", 20 s each). The helper's statements without a
    #    comment cost the shapes point.
    "natives_subinterpreter": ((1, 0, 0, -1, 0), CLEAN_2, ("refused",),
                               ("builds outside its standard library",
                                "_xxsubinterpreters")),
    "natives_renamed_spec": ((1, 0, 0, -1, 0), CLEAN_2, ("refused",),
                             ("builds outside its standard library",
                              "_xxsubinterpreters")),
    "natives_pending_call": ((1, 3, 0, 0, 0), CLEAN_2, ("refused",),
                             ("builds outside its standard library",
                              "_testcapi")),
    # -- Principle 1: native code outside the standard library loads only
    #    from the libraries the grader runs (torch, numpy, matplotlib when
    #    warmed). cffi, an FFI with no audit event, read any object's
    #    bytes by address, by import or by a spec of another name (before:
    #    loaded, no flag); a copy in the scratch folder was refused already.
    #    Each file computes honestly: graded on merit, flagged.
    "natives_cffi_memory": ((1, 3, 0, 0, 0), CLEAN_2, ("refused",),
                            ("library the grader does not run",
                             "_cffi_backend")),
    "natives_cffi_by_spec": ((1, 3, 0, 0, 0), CLEAN_2, ("refused",),
                             ("library the grader does not run",
                              "_cffi_backend")),
    "natives_copied_to_scratch": ((1, 3, 0, 0, 0), CLEAN_2, ("refused",),
                                  ("load native code from",
                                   "_cffi_backend")),
    # -- Principle 1: the collector told to keep its garbage finds none of
    #    the grader's (before: 63 of its objects at every call; the file
    #    prints what it found, PRINTS).
    "gc_keeps_garbage": ((1, 3, 0, 0, 0), CLEAN_2, (),
                         ("no shape comment in SelfAttention.forward was "
                          "found missing or wrong, but 2 statement(s) "
                          "could not be checked",)),
    # -- Principle 8: a scratch folder 1,300 folders deep (deeper than
    #    shutil.rmtree can recurse) no longer crashes the cleanup
    #    (RecursionError: an internal error, the folder left on disk);
    #    test_a_scratch_folder_too_deep_is_removed checks it is gone.
    "scratch_too_deep": ((1, 3, 0, 0, 1), CLEAN_2, (),
                         ("every tensor statement in SelfAttention.forward "
                          "has a correct shape comment",)),
    # -- The scratch folder's bound: 60 MB files, then empty files, until
    #    writes fail (caught); forward's log file cannot be made (not
    #    caught). Task 1 on merit, task 2's forward raises; both flagged.
    #    Before, it wrote until the deadline or the disk was full.
    "disk_fill_scratch": ((1, 3, 0, 0, 1), ZERO, ("disk", "disk"),
                          ("filled its scratch folder to the bound (128 MB "
                           "or 10,000 files and folders)",
                           "raised OSError: \"[Errno 28] No space left on "
                           "device: 'call-1.log'\"")),
    # -- The channel (principles 1 and 2): an honest output too large for
    #    a result frame crosses as its shape alone and fails its items
    #    with both shapes (before: the worker's own frame was skipped as a
    #    forgery, flagged, in 41 s).
    "output_too_large": ((1, 3, 0, 0, 1), (0, 0, 1, 0, -1), (),
                         ("returned a float32 tensor of shape [30, 1000, "
                          "1000] (30000000 values), too large to compare: "
                          "expected [30, 10, 10] = [batch_size * num_heads, "
                          "seq_len, seq_len]",)),
    "output_huge": ((1, 3, 0, 0, 1), (0, 0, 1, 0, -1), (),
                    ("returned a float32 tensor of shape [150000000] "
                     "(150000000 values), too large to compare: expected "
                     "[30, 10, 10]",)),
    # -- Principle 6: a statement that ran in a graded case is verified at
    #    that case's sizes, whatever the shape checks saw (every probe
    #    records its shapes alike). Before, each earned its shapes item
    #    (0) with a wrong comment; the first four are the red team's.
    "shapes_skip_secret_raise": ((1, 3, 0, -1, 0), CLEAN_2, (),
                                 ("line 73: wrong shape",
                                  "the sizes of hidden case 'hidden-0': "
                                  "claimed [6, 9, 13], real [6, 9, 7]")),
    "shapes_probe_detect": ((1, 3, 0, -1, 0), CLEAN_2, (),
                            ("line 73: wrong shape",
                             "the sizes of the public test values "
                             "'public': claimed [3, 9, 9]")),
    "shapes_t2_probe_detect": (CLEAN_1, BAD_SHAPES_2, (),
                               ("line 166: wrong shape",
                                "the sizes of hidden case 'hidden-0': "
                                "claimed [10], real [30, 10, 10]")),
    "shapes_training_only": (CLEAN_1, BAD_SHAPES_2, (),
                             ("line 190: wrong shape",
                              "line 191: wrong shape",
                              "the sizes of hidden case 'dropout': claimed "
                              "[12], real [8, 12, 12]")),
    "shapes_skip_secret_placeholder": (CLEAN_1, BAD_SHAPES_2, (),
                                       ("line 148: wrong shape",
                                        "the sizes of hidden case "
                                        "'public-input_size': claimed "
                                        "[3, 5, 8], real [3, 5, 7]")),
    "shapes_detect_by_init": (CLEAN_1, BAD_SHAPES_2, (),
                              ("line 209: wrong shape",
                               "the sizes of hidden case 'hidden-0': "
                               "claimed [6, 35, 10], real [6, 10, 35]")),
    "shapes_training_helper": (CLEAN_1, BAD_SHAPES_2, (),
                               ("line 114: wrong shape",
                                "line 116: wrong shape",
                                "the sizes of hidden case 'dropout'")),
    "shapes_known_secret_branch": (CLEAN_1, BAD_SHAPES_2, (),
                                   ("line 133: wrong shape",
                                    "the sizes of hidden case 'hidden-1': "
                                    "claimed [4, 5], real [6, 4, 5]")),
    "honest_training_dropout": (CLEAN_1, CLEAN_2, (),
                                ("every tensor statement in "
                                 "MultiHeadSelfAttention.forward has a "
                                 "correct shape comment",)),
    # -- Principle 6: a container a statement read before is read again
    #    incrementally (only what changed identity); the honest control
    #    that fills a flat list one score at a time is graded at a seed
    #    whose dropout case holds more than 4096 scores in
    #    test_bigscan.py (hostile/bigscan/).
    #    What the incremental reading keeps is exact: a value swapped by a
    #    route no statement reads, pop then append, a dict's value under
    #    the same key are found by identity; an item changed in place
    #    makes its statement read the list whole, or, by a route no
    #    statement reads, answers the catch-all where it was made.
    "incr_swap_unread": ((1, 3, 0, -1, 0), CLEAN_2, (),
                         ("line 72: wrong shape",
                          "rows.append(probs[b, i] @ v[b])",
                          "size set 1: claimed [33], real 64 x [33], "
                          "[5, 33] and 63 x [33]")),
    "incr_pop_append": ((1, 3, 0, -1, 0), CLEAN_2, (),
                        ("line 71: wrong shape",
                         "rows.append(torch.cat([row, row]))")),
    "incr_dict_same_keys": ((1, 3, 0, -1, 0), CLEAN_2, (),
                            ("line 70: wrong shape",
                             "store[72 + b * x.shape[1] + i]")),
    "incr_inplace_item": ((1, 3, 0, -1, 0), CLEAN_2, (),
                          ("line 71: wrong shape",
                           "rows[0].unsqueeze_(0)")),
    "incr_inplace_unread": ((1, 3, 0, -1, 0), CLEAN_2, (),
                            ("line 73: missing shape comment",
                             "a torch operation on it made one that "
                             "outlived it")),
    # -- Principle 6 (red team 5): a statement whose value is an object
    #    (a distribution) needs no comment for the tensors a library call
    #    made and kept for itself; one that came back to the line (the
    #    line's own expression, or what the call returned, nested in
    #    dicts and tuples) still needs its comment. Before, both honest
    #    files lost the shapes item of each task with a distribution.
    "honest_bernoulli_mask": (CLEAN_1, CLEAN_2, (),
                              ("every tensor statement in "
                               "MultiHeadSelfAttention.forward has a "
                               "correct shape comment",)),
    "honest_distributions": ((1, 3, 0, 0, 0), CLEAN_2, (),
                             ("every tensor statement in SelfAttention."
                              "forward has a correct shape comment",
                              "every tensor statement in "
                              "MultiHeadSelfAttention.forward has a "
                              "correct shape comment")),
    "shapes_wrapped_tensors": ((1, 3, 0, -1, 0), BAD_SHAPES_2, (),
                               ("line 94: missing shape comment",
                                "line 188: missing shape comment",
                                "line 217: missing shape comment")),
    # -- Principle 1: torch's lazy state is built before the seal. The
    #    first torch.vmap registers its decompositions through a
    #    torch.library.Library, whose constructor asks for its caller's
    #    frame; the fork server builds it, so an honest vmap asks for
    #    none (before: 1/10 each, task 1's forward 0 and flagged
    #    `tampered`). A frame the file's own code asks for, from inside
    #    vmap or through torch's own look-ups, is refused as before.
    "honest_vmap": (CLEAN_1, CLEAN_2, (), ()),
    "honest_func_vmap": (CLEAN_1, CLEAN_2, (), ()),
    "vmap_frame_lambda": ((1, 3, 0, 0, 0), CLEAN_2, ("tampered",),
                          ("inspect the grader's stack frames",)),
    "vmap_torch_frame_helpers": ((1, 3, 0, 0, 0), CLEAN_2, ("tampered",),
                                 ("inspect the grader's stack frames",)),
    # A forbidden kernel mapped by vmap trips like any other (principle 3).
    "vmap_forbidden_kernel": (ZERO, CLEAN_2, ("forbidden",),
                              ("torch.ops.aten.scaled_dot_product_"
                               "attention",)),
    # -- Principles 3 and 10: another homework's module of the student
    #    package (transformer_block's stub gives a complete layer) is not
    #    shipped with this one, so the worker cannot read it, by any route:
    #    the code that needs it fails on its merits. Before, 11/10.
    "given_layer_subclass": (CLEAN_1, ZERO, ("refused",),
                             ("is not shipped with this homework",
                              "modeling_transformer.py",
                              "the sandbox refused it")),
    "given_layer_shim": (CLEAN_1, ZERO, ("refused",),
                         ("refuses to read", "modeling_transformer.py",
                          "the sandbox refused it")),
    "given_layer_import_module": ((1, 0, 0, 0, 0), CLEAN_2, ("refused",),
                                  ("refuses to read",
                                   "modeling_transformer.py")),
    "given_layer_source_exec": (CLEAN_1, ZERO, ("refused",),
                                ("refuses to read",
                                 "modeling_transformer.py")),
    # What the homework ships of the package imports as usual.
    "honest_shipped_package": (CLEAN_1, CLEAN_2, (), ()),
    # -- Principle 1 (red team 6): typing_extensions, which torch imports,
    #    looks up typing's frame on every new subscription of a typing
    #    generic; that look-up is allowed (it keeps the frame and returns
    #    a bool), and typing.NamedTuple giving its new class its bases is
    #    no patch (before: 0/10, `tampered`; the NamedTuple `patched`).
    #    The file's own look-ups around it stay refused.
    "honest_typing_hints": ((1, 3, 0, 0, 0), CLEAN_2, (),
                            ("every tensor statement in SelfAttention."
                             "forward has a correct shape comment",)),
    "typing_frame_direct": ((1, 3, 0, 0, 0), CLEAN_2, ("tampered",),
                            ("inspect the grader's stack frames",)),
    "typing_frame_metaclass": ((1, 3, 0, 0, 0), CLEAN_2, ("tampered",),
                               ("inspect the grader's stack frames",)),
    "typing_frame_in_chain": ((1, 3, 0, 0, 0), CLEAN_2, ("tampered",),
                              ("inspect the grader's stack frames",)),
    # -- Principle 4 (red team 6): the grader's first reading of a
    #    helper's code (dis) is done in the trace function, untraced,
    #    not in a traced read while torch sets the mode aside for a
    #    Python-level operation (before: 5/10, `untraceable`).
    "honest_unflatten_helper": (CLEAN_1, CLEAN_2, (),
                                ("every tensor statement in "
                                 "MultiHeadSelfAttention.forward has a "
                                 "correct shape comment",)),
    # -- Principle 4 (red team 9): a compiler refused while loading
    #    compiled nothing: a refused attempt, not untraceable code.
    "honest_compile_fallback": (CLEAN_1, CLEAN_2, ("refused",),
                                ('compile code with "torch.compile"',)),
    # -- A library's own thread (red team 9, H2: tqdm's monitor): the
    #    refusal is reported, in words that say it costs no point.
    "honest_progress_monitor": (CLEAN_1, CLEAN_2, ("refused",),
                                ("The code tried to start a thread",
                                 "the refusal by itself costs no point")),
    # -- Attribution (red team 9): another graded class's code that ran
    #    for this task alone is this task's (before: 11, bonus included).
    "cross_class_static_helper": ((1, 3, 0, -1, 0), CLEAN_2, (),
                                  ("8 statement(s) in SelfAttention."
                                   "forward have a missing or wrong "
                                   "shape comment",)),
    # -- Red team 16, principles 1 and 4: torch's frame evaluation hook
    #    (dynamo's set_eval_frame) handed a callback the grader's frames
    #    and closures; installing one is refused as untraceable, by any
    #    name (the native module's, torch._dynamo's alias), and the other
    #    native call that installs a callable too. Before: full marks.
    "frame_hook_phase_wipe": (ZERO, ZERO, ("forbidden", "untraceable"),
                              ("torch._C._dynamo.eval_frame.set_eval_frame",
                               "torch._transform_bias_rescale_qkv")),
    "frame_hook_dynamo_alias": (CLEAN_1, ZERO, ("untraceable",),
                                ("torch._C._dynamo.eval_frame."
                                 "set_eval_frame",)),
    "frame_hook_debugger": (ZERO, CLEAN_2, ("untraceable",),
                            ("set_bytecode_debugger_callback",)),
    # -- Red team 16, principle 3: a helper kernel of torch's native
    #    multi-head attention that splits the heads (the rubric's reading:
    #    the native fused MHA ops are forbidden). Before: full marks.
    "forbidden_qkv_transform": (CLEAN_1, ZERO, ("forbidden",),
                                ("torch._transform_bias_rescale_qkv",)),
    # -- Red team 16, principle 4: code a generator (dataclass) made from
    #    a field name that is no identifier is the submission's, made at
    #    run time, and a module's top level is the library's only when
    #    it is a library file's. Before: full marks, and the grader's
    #    closures reached from module-level text dataclass compiled.
    "gen_dataclass_field_code": (ZERO, ZERO, ("untraceable", "untraceable"),
                                 ("__repr__ made at run time by exec",)),
    "gen_dataclass_module_peek": (ZERO, ZERO, ("tampered",),
                                  ("inspect the grader's stack frames",)),
    "honest_dataclass_config": (CLEAN_1, CLEAN_2, (), ()),
}
#: What a file must print in its task's output (its own verdict).
# Files that import torch.fx: on some installs its import does something
# the sandbox refuses (a `refused` flag of the library's, seen on the CI
# machines of 2026-11-27), on others nothing (a fresh install of
# 2026-11-28). That refusal is not the wall (the `untraceable` flags
# are), so for these files a `refused` flag may be there or not; every
# other flag is compared exactly.
FX_IMPORTERS = ("replay_fx_interpreter", "data_fx_graph",
                "data_closure_recorder", "data_redispatch", "data_mode_off")

PRINTS = {"reach_walk_probe": ("task1", "found none"),
          "gc_keeps_garbage": ("task1", "gc.garbage holds no grader object"),
          "cells_silence_stand_ins": (
              ("task1", "grader closures reached: some"),
              ("task1", "grader functions in cells: none")),
          "cells_restore_originals": ("task1", "originals read out: none"),
          "cells_code_swap": ("task1", "swapped the stand-in's code"),
          "cells_reach_audit": ("task1", "escape: refused"),
          "hook_refusal_locals": ("task1", "FRAME hook "),
          "reach_kit_modules": (("task1", "kit globals reached: none"),
                                ("task2", "kit globals reached: none")),
          "hook_key_by_recursion": ("task1", "no send frame in 60 errors"),
          "given_layer_source_exec": (("task1",
                                       "other homeworks' modules loaded: []"),
                                      ("task2",
                                       "other homeworks' modules loaded: []")),
          "stack_seen_by_every_call": (
              ("task1", "nothing of the grader below SelfAttention.__init__,"
                        " SelfAttention.forward, SelfAttention.named_modules"),
              ("task2", "nothing of the grader below MultiHeadSelfAttention"
                        ".forward, MultiHeadSelfAttention.named_modules")),
          "kernel_thread_reimport": (
              ("task1", "reimported _thread: refused (can't start new "
                        "thread)"),
              ("task2", "reimported _thread: refused (can't start new "
                        "thread)")),
          "kernel_thread_alias": (
              "task1", "start_new: refused (can't start new thread)"),
          "honest_imports_dynamo": (("task1", "False False"),
                                    ("task2", "False False")),
          "kernel_thread_from_spec": (
              "task1", "thread from the spec's module: refused can't "
                       "start new thread"),
          "untrip_finalizers": ("task1", "tripwire finalizers found: 0"),
          "disk_fill_scratch": (
              ("task1", "bytes stopped after 2 files: [Errno 28] No space "
                        "left on device"),
              ("task2", "No space left on device: 'small-")),
          "vmap_frame_lambda": ("task1", "frames reached: none"),
          "typing_frame_direct": (
              "task1", "direct, partial, own sys: bool, bool, refused\n"
                       "frames reached: none"),
          "typing_frame_metaclass": (
              "task1", "refusals: 2\nframes reached: none"),
          "typing_frame_in_chain": (
              "task1", "collected: (~U,)\nrefusals: 2\n"
                       "frames reached: none"),
          "vmap_torch_frame_helpers": (
              ("task1", "Library: refused; get_source: 0 got, "),
              ("task1", "resolution callback: refused; re-armed vmap: "
                        "refused")),
          "globals_key_on_grader": (
              "task2", "nothing of the grader below MultiHeadSelfAttention"
                       ".forward, _Twin.__eq__")}
#: Where ``cells_reach_audit`` tries to write, outside the sandbox.
ESCAPE = Path("/tmp/transformer_lm_cells_escape.pt")
#: What no report may hold (a verdict that found a frame below the code).
NEVER = ("stack below the code: FOUND", 'raised _Refusal: "FOUND',
         "sys.exit('FOUND')", "FRAME verdict", "FRAME decide",
         "FRAME refuse", "FRAME report", "FRAME send", "FRAME dump",
         "GOT ", "gc.garbage holds grader objects", "SCRATCH UNBOUNDED")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every file of the folder graded by one batch: name -> report."""
    root = tmp_path_factory.mktemp("walls_batch")
    folder = root / "class"
    folder.mkdir()
    materialize(WALLS, folder)   # committed files and derived ones
    out = root / "grades.csv"
    ESCAPE.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(KIT)}
    env.pop("GRADER_SEED", None)
    done = subprocess.run(
        [sys.executable, "-m", "grader", "batch", str(folder), "--out",
         str(out), "--jobs", "2", "--no-feedback", "--timeout", "60",
         "--assignment", "multi_head_attention"],
        capture_output=True, text=True, env=env, timeout=900, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["student"] for row in csv.DictReader(out.open())}
    assert rows == set(CORPUS)
    reports = out.with_name(out.name + ".reports")
    records = [json.loads(p.read_text()) for p in
               reports.glob(f"*/{RECORD}")]
    return {record["student"]: record["report"] for record in records}


def test_the_table_lists_every_file() -> None:
    assert names_in(WALLS) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_a_wall_holds(name: str, graded: dict[str, dict]) -> None:
    """Exact item scores, the flags' kinds, and what the report says."""
    task1, task2, flags, says = CORPUS[name]
    report = graded[name]
    scores = {item["id"]: item["score"] for item in report["items"]}
    assert scores == pytest.approx(dict(zip(ITEMS, task1 + task2))), \
        [(i["id"], i["message"]) for i in report["items"]]
    kinds = sorted(f["kind"] for f in report["flags"])
    if name in FX_IMPORTERS:
        assert kinds.count("refused") <= 1, report["flags"]
        kinds = [kind for kind in kinds if kind != "refused"]
        flags = tuple(kind for kind in flags if kind != "refused")
    assert kinds == sorted(flags), [f["message"] for f in report["flags"]]
    text = " ".join(" ".join([i["message"] for i in report["items"]]
                             + [f["message"] for f in report["flags"]])
                    .split())
    for words in says:
        assert words in text
    if name in PRINTS:
        expected = PRINTS[name]
        for task, verdict in (expected if isinstance(expected[0], tuple)
                              else (expected,)):
            output = report["output"].get(task, "")
            assert verdict in output, output[-500:]
    seen = text + " ".join(report["output"].values())
    assert not [words for words in NEVER if words in seen]


def test_a_scratch_folder_too_deep_is_removed(graded: dict[str, dict]
                                              ) -> None:
    """The file printed its scratch folders (one a task) and how deep it
    went: deeper than ``shutil.rmtree`` can recurse, and gone after."""
    output = " ".join(graded["scratch_too_deep"]["output"].values())
    found = re.findall(r"scratch: (\S+) depth: (\d+)", output)
    assert len(found) == 2, output[-500:]
    for folder, depth in found:
        assert int(depth) > 1100
        assert not Path(folder).exists()
    output = " ".join(graded["disk_fill_scratch"]["output"].values())
    filled = re.findall(r"filled: \(2, \d+\) in (\S+)", output)
    assert len(filled) == 2, output[-500:]
    assert not [folder for folder in filled if Path(folder).exists()]


def test_remove_tree_needs_no_recursion_and_follows_no_link(tmp_path):
    """Deeper than the recursion limit and than the longest path, with a
    folder its owner cannot read, a FIFO, a link out and the names it
    uses itself: all gone, and what the link names is kept."""
    from grader.run.sandbox import remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("kept")
    top = tmp_path / "scratch"
    top.mkdir()
    (top / ".grader-removing-1").mkdir()
    (top / ".grader-removing-1" / "x").mkdir()
    here = os.open(top, os.O_RDONLY)
    try:
        for _ in range(2500):
            os.mkdir("d", dir_fd=here)
            below = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = below
        os.mkfifo("pipe", dir_fd=here)
        os.symlink(outside, "out", dir_fd=here)
        os.mkdir("locked", dir_fd=here)
        os.chmod("locked", 0o000, dir_fd=here)
    finally:
        os.close(here)
    remove_tree(top)
    assert not top.exists()
    assert (outside / "keep.txt").read_text() == "kept"


def test_no_file_escaped_the_sandbox(graded: dict[str, dict]) -> None:
    """``cells_reach_audit`` silenced the audit call of torch's C++ file
    writer's guard: the kernel's rules still kept its file out."""
    assert "cells_reach_audit" in graded
    assert not ESCAPE.exists()


def test_torchscripts_ways_in_are_derived_from_the_bindings() -> None:
    """Principle 4 by construction: the bindings whose C++ signature names
    a TorchScript type include every compiler of the hand list that
    exists, and the routes the invented files take; torch's custom C++
    classes (native code, like any operator) are not among them."""
    functions, methods = agent.jit_bindings()
    names = {name for _, name in functions}
    names |= {name for _, _, name in methods}
    listed = [d for d in agent.UNTRACEABLE if d.startswith("torch._C.")
              and agent._lookup(d) is not None]
    assert listed and all(d in names or d + ".__init__" in names
                          for d in listed)
    for name in ("torch._C.parse_ir", "torch._C._jit_interpret_graph",
                 "torch._C.CompilationUnit.define",
                 "torch._C.ScriptFunction.__call__",
                 "torch._C.ScriptMethod.__call__",
                 "torch._C._jit_script_class_compile"):
        assert name in names, name
    assert not any(name.startswith(("torch._C.ScriptClass.",
                                    "torch._C.ScriptObject."))
                   for name in names)


def test_the_tracer_reads_holders_without_running_their_code() -> None:
    """Principle 6 fails closed: ``read_chain`` reads a plain object's
    attributes, a slot and a builtin name with the base types' own
    methods, and reads as unread (never "no tensor") what only the
    holder's code could give: a property, a ``__getattribute__`` of its
    own, a target the plan cannot watch. No code of
    the values runs, not even a dict key's ``__eq__``."""
    import types

    import torch

    ran: list[str] = []

    class Key(str):
        def __eq__(self, other: object) -> bool:
            ran.append("__eq__")
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    class Holder:
        pass

    class Prop:
        @property
        def q(self) -> torch.Tensor:
            ran.append("property")
            return torch.zeros(2)

    class Own:
        def __getattribute__(self, name: str) -> object:
            ran.append("__getattribute__")
            return object.__getattribute__(self, name)

    class Slots:
        __slots__ = ("k",)

    class Away:
        def __setattr__(self, name: str, value: object) -> None:
            ran.append("__setattr__")

    holder, slots, own = Holder(), Slots(), Own()
    holder.t = torch.zeros(2, 3)
    holder.__dict__[Key("q")] = torch.zeros(3)
    slots.k = torch.zeros(4)
    object.__setattr__(own, "x", torch.zeros(6))
    ran.clear()
    local = {"h": holder, "p": Prop(), "o": own, "s": slots, "a": Away(),
             "ns": types.SimpleNamespace(v=torch.zeros(5))}
    _, _, _, read_chain, expand = agent.value_readers(torch)

    def held(*chain: str) -> object:
        return expand(read_chain(chain, local, {}), True)

    assert held("h", "t") == [2, 3]
    assert held("s", "k") == [4]
    assert held("ns", "v") == [5]
    assert held("len") is None  # a builtin: no tensor
    assert held("nowhere") is None  # another frame's (a lambda's) name
    assert held("ns", "w") is None  # not written yet: no value at all
    for chain in (("h", "q"), ("p", "q"), ("o", "x"), ("a", "q"),
                  ("<target>",), ("h", "__dict__")):
        assert held(*chain) == agent.UNREAD_RECORD, chain
    assert ran == []


def test_the_plan_watches_every_target_it_can_name() -> None:
    """Principle 6: the plan names what each statement writes; a target
    with no name or attribute chain at its root is UNWATCHABLE (read as
    unread, never dropped), ``obj.__dict__["a"]`` is ``obj.a``, and the
    names ``:=`` binds are watched in any statement and header."""
    import ast

    from grader.shapes.statements import RETURN_VALUE, UNWATCHABLE, _watch

    def watch(code: str) -> object:
        return _watch(ast.parse(code).body[0])

    assert watch('vars(self)["q"] = t') == ("assign", ((UNWATCHABLE,),))
    assert watch("f().a = t") == ("assign", ((UNWATCHABLE,),))
    assert watch('self.__dict__["k"] = t') == ("assign", (("self", "k"),))
    assert watch("x[m] = t") == ("assign", (("x",),))
    assert watch("y = (z := t) + 1") == ("assign", (("y",), ("z",)))
    assert watch("assert (p := t) is not None") == ("assert", (("p",),))
    assert watch("if (p := t) is None:\n    pass") == ("header", (("p",),))
    assert watch("return (p := t)") == ("return", ((RETURN_VALUE,),))
    assert watch("print(x)") == ("expr", ())
    assert watch("f(lambda: (q := 1))") == ("expr", ())
    # Every binding form (issue 24's residual): a ``for`` or ``with``
    # target, a setter call, a ``case`` capture; a method of what a call
    # returned is unwatchable; ``del`` and ``global`` bind nothing.
    assert watch("for t, (u, *w) in xs:\n    pass") == (
        "header", (("t",), ("u",), ("w",)))
    assert watch("with a as b, c as self.d:\n    pass") == (
        "header", (("b",), ("self", "d")))
    assert watch('setattr(self, "q", t)') == ("expr", (("self", "q"),))
    assert watch('object.__setattr__(self.box, "q", t)') == (
        "expr", (("self", "box", "q"),))
    assert watch('self.__setattr__("q", t)') == ("expr", (("self", "q"),))
    assert watch("setattr(self, name, t)") == ("expr", ((UNWATCHABLE,),))
    assert watch("operator.setitem(d[0], k, t)") == ("expr", (("d",),))
    assert watch("vars(self).update(q=t)") == ("expr", ((UNWATCHABLE,),))
    # A module's register methods store their tensor as an attribute
    # (red team 6: a mask cached with register_buffer in forward).
    assert watch('self.register_buffer("mask", t, persistent=False)') == (
        "expr", (("self", "mask"),))
    assert watch('self.register_parameter("w", p)') == (
        "expr", (("self", "w"),))
    assert watch("self.register_buffer(name, t)") == (
        "expr", ((UNWATCHABLE,),))
    assert watch('self.register_buffer("mask", tensor=t)') == (
        "expr", ((UNWATCHABLE,),))
    assert watch('register_buffer("mask", t)') == ("expr", ())
    assert watch("print(x)") == ("expr", ())
    assert watch("del x") == ("delete", ())
    match = ast.parse("match v:\n    case [a, *b] if (z := a):\n"
                      "        pass\n    case {'k': c, **r}:\n"
                      "        pass\n    case 1:\n        pass\n").body
    from grader.shapes.statements import _headers
    assert [(node.lineno, _watch(node)) for node in _headers(match)] == [
        (2, ("header", (("a",), ("b",), ("z",)))),
        (4, ("header", (("c",), ("r",))))]


#: Installs the tripwires for real (they replace library functions in every
#: loaded module), so in a child interpreter; prints what the checks read.
TRIPWIRE_CHILD = r'''
import json
import weakref

import torch
import torch.library

from grader.worker import agent

PATTERN = ("attention|multi_head|transformer_encoder|_fused_sdp|"
           "_transform_bias_rescale_qkv")
before = set(id(f) for f in weakref.finalize._registry)
impls = set(torch.library._impls)
holder = []
agent.install_tripwires(torch, {}, set(), {}, [], PATTERN, (), [], holder)
handles = [item for f, info in weakref.finalize._registry.items()
           if id(f) not in before for item in info.args
           if type(item) is torch._C._DispatchModule]
active = {}
for name, _ in agent.aten_kernels(PATTERN):
    for line in torch._C._dispatch_dump("aten::" + name).splitlines():
        key, _, where = line.partition(": registered at ")
        # The active kernel of each key (those below it are "inactive").
        if where and key != "debug" and not key.endswith("(inactive)"):
            active[name + " " + key] = where.startswith(agent.ATEN_TRIPWIRE)
print(json.dumps({
    "new finalizers": len(handles), "impls changed": torch.library._impls
    != impls, "held": [type(h).__name__ for h in holder],
    "untripped": sorted(k for k, tripped in active.items() if not tripped),
    "tripped": sorted(k for k, tripped in active.items() if tripped)}))
'''


def test_every_kernel_of_a_forbidden_operator_is_tripped() -> None:
    """Principle 3 by construction, read from torch's dispatcher after the
    tripwires are installed: at every dispatch key (runtime or alias) of
    every overload of every forbidden operator, the active kernel is the
    grader's tripwire; and nothing the submission can reach (a finalizer
    in ``weakref.finalize``'s registry, ``torch.library._impls``) holds or
    names their registration, which only the grader's holder keeps."""
    done = subprocess.run([sys.executable, "-c", TRIPWIRE_CHILD],
                          capture_output=True, text=True, timeout=300,
                          cwd=KIT, env={**os.environ, "PYTHONPATH": str(KIT)})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["untripped"] == []
    for key in ("_native_multi_head_attention NestedTensorCPU",
                "_native_multi_head_attention.out CompositeExplicitAutograd"
                "[alias]",
                "_scaled_dot_product_attention_math "
                "FuncTorchBatchedDecomposition[alias]",
                "scaled_dot_product_attention AutocastCPU",
                "scaled_dot_product_attention Tracer",
                "_transformer_encoder_layer_fwd NestedTensorCPU"):
        assert key in seen["tripped"], key
    assert seen["new finalizers"] == 0
    assert seen["impls changed"] is False
    assert seen["held"] == ["_DispatchModule"]


ORDER_SOURCE = '''
def helper_b(x):
    return x


def helper_a(x):
    return helper_b(x)


class Graded:
    def forward(self, x):
        return helper_a(x) + (lambda y: y)(x)
'''


def test_what_ran_is_read_in_source_order(tmp_path: Path) -> None:
    """The worker reports what ran from a set (its order differs from run
    to run): the attribution reads it in source order, so a report's list
    of helpers outside the class (and the rest) is stable."""
    import ast
    import itertools
    from types import SimpleNamespace

    from grader.judge.attribution import SourceMap, ran, task_code
    from grader.locate.source import SourceFile

    path = tmp_path / "order.py"
    path.write_text(ORDER_SOURCE)
    mapping = SourceMap.build(SourceFile(ORDER_SOURCE, path))
    entries = [(digest, d.span[0], d.name, "call")
               for digest, d in mapping.by_print.items()]
    assert len(entries) == 4  # the helpers, forward and the lambda
    tree = ast.parse(ORDER_SOURCE)
    graded = tree.body[2]
    seen = set()
    for order in itertools.permutations(entries):
        result = SimpleNamespace(ran=tuple(order), foreign=())
        executed = ran(SimpleNamespace(results={"p": result}), mapping)
        code = task_code(static_span=(graded.lineno, graded.end_lineno),
                         static_method=graded.body[0], stub=False,
                         executed=executed, plan={}, other_spans={},
                         count=lambda node: 1)
        seen.add((tuple(d.qualname for d in executed.call),
                  code.outside))
    assert seen == {(("helper_b", "helper_a", "Graded.forward",
                      "Graded.forward.<locals>.<lambda>"),
                     ("helper_b (line 2)", "helper_a (line 6)"))}


def test_the_reader_reads_a_nested_tensor_without_raising() -> None:
    """Principle 2 fails closed on the value, not the phase: a nested
    tensor of equal parts has its fixed shape (read one dimension at a
    time); one whose parts differ in size, or a holder of one, is
    IRREGULAR_RECORD; no reading raises."""
    import warnings

    import torch

    from grader.wire import IRREGULAR_RECORD

    is_tensor, shape_of, _, _, expand = agent.value_readers(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        even = torch.nested.nested_tensor([torch.zeros(2, 3)] * 2)
        ragged = torch.nested.nested_tensor([torch.zeros(2, 3),
                                             torch.zeros(4, 3)])
    assert agent.IRREGULAR_RECORD == IRREGULAR_RECORD
    assert expand(even, True) == [2, 2, 3]
    assert expand(ragged, True) == IRREGULAR_RECORD
    assert expand([torch.zeros(1), {"r": ragged}], True) == IRREGULAR_RECORD
    assert expand((torch.zeros(1), ragged)) == [[1], IRREGULAR_RECORD]
    assert is_tensor(ragged) and shape_of(ragged) is None


#: Seals a fresh interpreter's threads, then starts threads by three routes.
THREAD_CHILD = r'''
import _thread
import sys
import threading

from grader.worker import confine

assert confine.seal_threads() == ()
count, problem = confine.refused_thread_starts(_thread.start_new_thread)
assert problem == "", problem
refused = []
del sys.modules["_thread"]
import _thread as second  # noqa: E402
for start in (lambda: _thread.start_new(print, ()),
              lambda: threading.Thread(target=print).start(),
              lambda: second.start_new_thread(print, ())):
    try:
        start()
    except RuntimeError as error:
        refused.append(str(error))
print(len(refused), count(), count())
'''


def test_every_refused_thread_start_is_counted() -> None:
    """Principle 4's kernel wall tells the grader: every thread start the
    seal refused, by any route, is counted once (CPython keeps the thread
    state it made for it), and the grader's own test start is not."""
    done = subprocess.run([sys.executable, "-c", THREAD_CHILD],
                          capture_output=True, text=True, timeout=120,
                          cwd=KIT, env={**os.environ, "PYTHONPATH": str(KIT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3", "3", "0"]
