"""Effects, not intermediates (issue 24, principle 5).

``hostile/effects/dropout/`` attacks the dropout point of
``multi_head_attention`` (task2.output): the returned probs look dropped,
but the randomness never reaches att, or not as the dropout of those
probs (noise added after the values were weighted, behind a value step
the grader does not know: the probe with zero value weights), or the
mask is not element-wise independent (whole rows or columns, one mask
for every block, the diagonal spared); and its value
point where task2.scores failed (an average of the values passes the
uniform cases, but is not the returned probs times the values).
``hostile/effects/training/`` attacks ``transformer_block``'s training
item: the loss writes into the weights (an optimizer of its
own, ``.data``, parameters replaced from a gradient hook, a finalizer)
instead of letting the grader's gradient steps train them, or the loss's
gradient reaches only part of the model (a body under no_grad, detached
embeddings, a bigram that never calls its layers), or reaches every part
while only out_proj learns. ``hostile/effects/causal/`` attacks
``multi_head_attention``'s task2.causal: the returned probs are masked,
but att is computed from other probabilities that see later tokens (red
team 8); the mask acts only when the probs are returned or only in eval
mode, or the causal branch computes other scores than the unmasked one
(red team 9, U4, U7, U2; the dropout folder holds U4's dropout half);
it holds red team 14's notebooks too (principle 7: a top-level block or
an earlier definition the graded code needs is run as the kernel runs
it, so a flag rebound in a later ``if`` is what is graded).
``hostile/effects/modes/`` attacks every item of
``multi_head_attention`` through the autograd mode (red team 10, R1):
code right only under ``torch.no_grad()`` (it branches on
``torch.is_grad_enabled()``, ``x.requires_grad``, ``x.grad_fn``), right
only in one family's situation with autograd on (judged by its twin), or
right only with autograd on; its honest controls build a mask under
``torch.no_grad()``, in a ``@torch.no_grad()`` helper, or detach it; and
(issue 24, R-c) code right except under ``torch.inference_mode()``, on an
activation made otherwise than by a clone, or once the weights have a
``.grad``. The ``basics`` and ``training`` folders hold such files of
``attention_basics`` and ``transformer_block`` (``modes_*``; in basics,
one wrong on a plain input with autograd on). Issue 24 (R-a, R-b): code
that remembers the right mode's answers (by the input's bytes, per
sequence, by shape) and repeats them in the wrong mode, judged by twins
on fresh inputs; and code wrong at one dropout rate in one mode only,
judged by each rate's branch in both modes.
Red team 10 (R2, R4): code right on a module's first call only (a
dropout mask or a causal mask kept, a call counter), dropout skipped or
the mask dropped when causal and dropout act together in training, and
a ``train()`` override that keeps dropout on in eval mode; with honest
controls (a mask buffer at a maximal length, masks cached by length, a
generator of the module's own drawing at every call). Red team 13: an
``eval()`` overridden to do nothing or to switch dropout back on (the
probes off the plain state call the module's own ``eval()``), and a
rate or a flag kept on the class (those probes build a second object of
the class with other arguments first), in ``basics``, ``modes`` and
``training``; with a correct ``eval()`` override as a control. Red
team 14, in ``basics``, ``causal`` and ``training``: a task's work in a
helper hosted in another graded class whose own method runs it too
(charged to every task that runs it; docs/threat-model.md, "Principle
4"), and a forward written as a lambda installed by a class decorator
(the shapes item fails closed: "Principle 6"); with controls (a helper
method of the layer, static methods shared by two classes).
The folders of an assignment are graded once, together, by one real
``batch`` (a class of hostile files and honest controls), and every row
is checked item by item, with its diagnoses and the words of its
message. docs/threat-model.md
("Principle 5") gives the argument.

``hostile/effects/depth0/`` attacks ``transformer_block``'s task 2
behind a layer that fails task1.forward (judged at depth 0, where no
layer runs): a loss that never runs the layers, or whose gradient never
reaches them (red team 9, U8; task2.loss, task2.training), and a forward
that combines its layers wrongly (a residual around each, reverse order,
outputs added; task2.logits, judged with substitute layers). Each file has
a control, the same model with a right layer, which loses the same items
(in the words of depth 2); the honest files (a loss on the text without
its last token, layers combined by ``functools.reduce``, behind a
non-causal layer; a layer left as ``return x``) keep task 2.

``hostile/effects/basics/`` attacks ``attention_basics`` (red team 8, U3
and U4): a causal mask read from the score values (task4.causal,
task6.values; judged with equal scores, tagged ``mask_from_scores``), and
dropout masks that are not element-wise independent (whole rows or
columns, one mask shared by the batch or the heads, the diagonal spared:
task4.dropout, task6.dropout), and a wrapper whose heads never drop
(red team 9: task5.values); red team 10 (R2, R7): a mask or a dropout
mask kept from a module's first call, task 7's mask in eval mode only, a
``train()`` that never calls ``super()``; its rows name the items they
judge.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from derived import materialize, names_in
from grader.routes.rows import read_csv

KIT = Path(__file__).resolve().parents[2]
EFFECTS = Path(__file__).resolve().parent / "hostile" / "effects"
ATTENTION = ("task1.init", "task1.forward", "task1.pep8", "task1.shapes",
             "task1.bonus", "task2.scores", "task2.causal", "task2.output",
             "task2.pep8", "task2.shapes")
TRANSFORMER = ("task1.layers", "task1.forward", "task1.pep8",
               "task1.shapes", "task2.layers", "task2.logits",
               "task2.causal", "task2.loss", "task2.training", "task2.pep8",
               "task2.shapes")
BASICS = ("task1.values", "task2.values", "task3.values", "task4.causal",
          "task4.dropout", "task4.pep8", "task4.shapes", "task5.values",
          "task6.values", "task6.dropout", "task6.pep8", "task6.shapes",
          "task7.values", "task7.mask", "task7.pep8", "task7.shapes")
FULL_BASICS = (1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0)
BASICS_NO_MASK = (1, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0)
BASICS_NO_DROPOUT = (1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0)
BASICS_NO_WRAPPER_DROPOUT = (1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0)
BASICS_MASK = ("task4.causal", "task6.values")
WRAPPER_RATE = "returned exactly its eval-mode output"
BASICS_DROPOUT = ("task4.dropout", "task6.dropout")
FROM_SCORES = ("with zero W_query weights (every score equal) does not "
               "match the reference")
FULL_ATTENTION = (1, 3, 0, 0, 1, 3, 1, 2, 0, 0)
NO_DROPOUT = (1, 3, 0, 0, 1, 3, 1, 1, 0, 0)
NO_OUTPUT = (1, 3, 0, 0, 1, 3, 1, 0, 0, 0)
ZERO_VALUES = "att changes even where every value is 0"
#: Task 2's correctness items lost to values a graded call took out of
#: torch (docs/threat-model.md, principle 4, "Values that leave torch").
TASK2_OUT = (1, 3, 0, 0, 1, 0, 0, 0, 0, 0)
TOOK_OUT = "took out of torch"
FULL_TRANSFORMER = (1, 3, 0, 0, 1, 2, 1, 1, 1, 0, 0)
NOT_TRAINED = (1, 3, 0, 0, 1, 2, 1, 1, 0, 0, 0)
#: ... and keeps its made-up weights in a dict of tensors with no shape
#: comment: the container rule (principle 6) charges task2.shapes too.
NOT_TRAINED_DICT = (1, 3, 0, 0, 1, 2, 1, 1, 0, 0, -1)
#: ... and whose loss in train mode (red team 11's train-mode loss probe,
#: at dropout 0) is not the cross-entropy of the model it was given: it
#: steps the weights first, or raises under torch.no_grad() (task2.loss);
#: the statements that run there are judged by task2.shapes too.
NOT_TRAINED_LOSS = (1, 3, 0, 0, 1, 2, 1, 0, 0, 0, -1)
NO_CAUSAL = (1, 3, 0, 0, 1, 3, 0, 2, 0, 0)
CAUSAL_LEAK = ("the returned probs hide the future, but att is not those "
               "probs times the values")
PLAIN_LEAK = ("forward(x) returns another att than forward(x, "
              "return_attention=True)")
OTHER_SCORES = ("hide the future but do not match the reference")
#: The words of a probe whose twin answered otherwise (grader.run.observe).
#: The twin's words (the states each side ran in follow the seed: autograd
#: on with an activation or a plain input, off under torch.no_grad() or
#: torch.inference_mode()).
TWIN = "it answered differently with autograd on"
#: ... and of one whose twins on fresh inputs (issue 24, R-a) matched the
#: reference in one mode only.
FRESH_ON = "it matches the reference with autograd on"
FRESH_OFF = "it matches the reference under torch."
#: ... either of the two (the words both kinds of twin share).
EITHER_MODE = "autograd on"
SAME_MODULE = ("two calls of the same module under different random seeds "
               "drop exactly the same probabilities")
NOT_A_DISTRIBUTION = ("In eval mode (model.eval()) the probabilities of a "
                      "model with dropout=0.5 are not a distribution")
WROTE = "changed during training with loss, not by a gradient step"
#: The words of the state off the plain one in every way (red team 13):
#: the mode set by the module's own eval(), and a second object of its
#: class built after it with other arguments (a decoy).
OWN_EVAL = "in eval mode set by model.eval()"
DECOY = "built after it"
#: The words of a probe whose module was handled as users handle one
#: (red team 13, grader.plan.handle).
HANDLED = ("on a copy of the module (copy.deepcopy, then .to(\"cpu\")) "
           "called once with other weights and then given its "
           "weights by its own load_state_dict")
REPLACED = "parameters were replaced during training with loss"
#: Red team 14: a shapes item failed closed on a lambda, and one that
#: found a missing comment.
LAMBDA = "written as a lambda"
SHAPES_MISSING = "have a missing or wrong shape comment"
#: folder -> {file: (item scores, diagnoses of the judged item, words[,
#: the judged items when they are not the folder's JUDGED])}.
CORPUS: dict[str, dict[str, tuple]] = {
    "dropout": {
        "drop_copy_discarded": (
            NO_DROPOUT, ("dropout_misplaced",),
            "att is the same as in eval mode"),
        "drop_second_draw": (
            NO_DROPOUT, ("dropout_misplaced",),
            "att is not the returned (dropped) probs times the values"),
        "drop_noise_helper": (
            NO_DROPOUT, ("dropout_misplaced",),
            "att is not the returned (dropped) probs times the values"),
        # Probs flipped past 10 tokens: the long case (red team 11) shows
        # them wrong, so task2.scores and task2.causal go too.
        "drop_flipped_layout": (
            (1, 3, 0, 0, 1, 0, 0, 0, 0, 0), (),
            "is not the returned probs times the values (with mix): "
            "because task2.scores failed"),
        "dropout_row_mask": (
            NO_DROPOUT, (), "whole query rows of probs are dropped"),
        "dropout_head_mask": (
            NO_DROPOUT, (), "drop exactly the same probabilities"),
        "dropout_col_mask": (
            NO_DROPOUT, (), "whole key columns of probs are dropped"),
        "dropout_diag_kept": (
            NO_DROPOUT, (), "probabilities on the diagonal are dropped"),
        # Red team 15: masks of neighbours dropped alike, which every
        # row, column, block and position test passes.
        "dropout_antidiag_mask": (
            NO_DROPOUT, (), "next to each other along an anti-diagonal "
            "are dropped alike"),
        "dropout_diagonal_mask": (
            NO_DROPOUT, (), "next to each other along a diagonal are "
            "dropped alike"),
        "dropout_domino_mask": (
            NO_DROPOUT, (), "one above the other in a column are dropped "
            "alike"),
        "honest_dropout_by_hand": (FULL_ATTENTION, (), "ok"),
        # Red team 15: randomness added after the values were weighted,
        # behind a value step the grader does not know (an offset, a
        # merge on the wrong axes, a tanh): the probe with zero value
        # weights shows att changing in train mode. Honest files with
        # an unknown merge keep the dropout point (test_diagnoses.py's
        # merge_wrong_axes_*).
        # One mask moved around the blocks, or kept and moved from call
        # to call (red team 16): before, full marks.
        "drop_one_draw_rolled": (NO_DROPOUT, (), "are one mask moved "
                                 "along"),
        "drop_heads_rolled": (NO_DROPOUT, (), "are one mask moved along"),
        "drop_short_only": (NO_DROPOUT, (), "nothing is dropped: "
                            "dropout must act at every length"),
        "drop_drawn_once_rolled": (NO_DROPOUT, (), "one draw is another "
                                   "moved along"),
        "drop_noise_after_use": (
            NO_OUTPUT, ("dropout_misplaced",), ZERO_VALUES),
        "drop_output_unknown_merge": (
            NO_OUTPUT, ("merge_wrong_axes", "dropout_misplaced"),
            ZERO_VALUES),
        "drop_jitter_tied_to_input": (
            NO_OUTPUT, ("dropout_misplaced",), ZERO_VALUES),
        # The value point when task2.scores failed (red team 6): judged on
        # uniform probabilities, and on the returned ones as well.
        "values_mean_of_values": (
            (1, 3, 0, 0, 1, 0, 1, 0, 0, 0), ("dropout_misplaced",),
            "is not the returned probs times the values (with mix): "
            "because task2.scores failed"),
        "values_unscaled_control": (
            (1, 3, 0, 0, 1, 0, 1, 2, 0, 0), (), "ok"),
        # Red team 9, U4: dropout only when the probs are returned.
        "drop_with_probs": (
            NO_DROPOUT, (), "under the same random seed, forward(x) "
            "returns another att than forward(x, return_attention=True)"),
        # Red team 10, R2: right on a module's first call only (a rate's
        # eval and train calls are one module's), and its control.
        "state_mask_kept": (NO_DROPOUT, (), SAME_MODULE),
        "state_generator_reseeded": (NO_DROPOUT, (), SAME_MODULE),
        "state_call_counter": (
            NO_DROPOUT, (), "in train mode nothing changes"),
        "honest_generator_each_call": (FULL_ATTENTION, (), "ok"),
        # R4: causal and dropout together, in training.
        "causal_dropout_skipped": (
            NO_DROPOUT, (), "of the probabilities on or below the diagonal "
            "are 0; expected between 30.0% and 70.0%"),
        "causal_dropout_unmasked": (
            NO_DROPOUT, (), "are not 0 above the diagonal: tokens attend "
            "to the future. The mask must act whatever the dropout rate"),
        # Modes through the module's own train(): an override that keeps
        # dropout on in eval mode.
        "train_override_keeps_dropout": (NO_DROPOUT, (), NOT_A_DISTRIBUTION),
        "train_override_no_super": (NO_DROPOUT, (), NOT_A_DISTRIBUTION),
        # Red team 11 (m03): no dropout below the old fixed rate 0.2; the
        # second rate is drawn from the seed below 0.2.
        "rate_none_below_0_2": (
            NO_DROPOUT, (), "in train mode nothing changes"),
        # Red team 11 (m06): att.squeeze() drops the batch of one
        # sequence (the long case); its shape comment is wrong there too.
        "values_squeeze_batch_one": (
            (1, 3, 0, 0, 1, 3, 1, 1, 0, -1), (),
            "has shape [30, 6]; expected [1, 30, 6]"),
        # Red team 14 (m03): dropout only while the global generator is
        # where manual_seed(initial_seed()) leaves it; the control seeds
        # a generator of its own from torch.initial_seed() once.
        "reseed_drop_on_fresh_generator": (
            NO_DROPOUT, (), "in train mode nothing changes"),
        "honest_generator_from_initial_seed": (FULL_ATTENTION, (), "ok"),
        # Issue 24 (invented, the reseed residual): dropout only while the
        # generator holds words a seeding wrote, found by the seeding's
        # recurrence on two words, or by recovering the seed from them
        # and confirming it, or one Mersenne twist back (the twist
        # inverted); every probe's state now holds none at any distance.
        # These read torch's generator state as numbers (.tolist() in
        # forward): values taken out of torch in a graded call cost the
        # task's correctness items (red team 15), whatever else holds.
        "reseed_drop_on_seeding_words": (TASK2_OUT, (), TOOK_OUT),
        "reseed_drop_on_recovered_seed": (TASK2_OUT, (), TOOK_OUT),
        "reseed_drop_on_untwisted_seeding": (TASK2_OUT, (), TOOK_OUT),
    },
    "causal": {
        "causal_att_unmasked": (NO_CAUSAL, (), CAUSAL_LEAK),
        "causal_att_sees_next": (NO_CAUSAL, (), CAUSAL_LEAK),
        "causal_att_helper": (
            (1, 3, 0, 0, 1, 3, 0, 1, 0, 0), (), CAUSAL_LEAK),
        # A value-step mistake (no_mix) is task2.output's alone.
        "honest_causal_no_mix": (NO_DROPOUT, (), "ok"),  # values missed
        "honest_causal_additive": (FULL_ATTENTION, (), "ok"),
        # Red team 14 (principle 7): notebooks, graded as the kernel runs
        # them top to bottom. A device picked in a top-level if/else (it
        # was dropped: DEVICE undefined, task2.causal lost), a class grown
        # across cells by `class X(X):` (only the last was kept: task 2
        # scored 0), and a flag rebound in a later top-level `if` that the
        # graded forward reads (it was dropped: the scaled attention was
        # graded, not the unscaled one the notebook computes).
        "honest_nb_device_if_else": (FULL_ATTENTION, (), "ok"),
        "honest_nb_class_extended_later_cell": (FULL_ATTENTION, (), "ok"),
        "nb_global_rebound_in_if": (
            (1, 2, 0, 0, 0, 3, 1, 2, 0, 0), ("no_scaling",),
            {"task1.forward": "with the scaling removed"},
            ("task1.forward",)),
        # Red team 9, U4: the mask only when the probs are returned
        # (alone, and with dropout likewise: the red team's file).
        "causal_mask_with_probs": (NO_CAUSAL, (), PLAIN_LEAK),
        "causal_and_drop_with_probs": (
            (1, 3, 0, 0, 1, 3, 0, 1, 0, 0), (), PLAIN_LEAK),
        # Red team 9, U7: the mask only in eval mode.
        "causal_mask_eval_only": (
            NO_CAUSAL, (), "the probs are not 0 above the diagonal (tokens "
            "attend to the future), though in eval mode they are"),
        # Red team 9, U2: right structure over other scores, while
        # task2.scores passes (the unmasked scores are right).
        # Red team 10, R2: a mask kept from a module's first call (the
        # public sizes, a larger batch, a longer seq_len: one module).
        "state_mask_first_length": (
            NO_CAUSAL, (), "but raises on the same module called again "
            "(its call 3)"),
        "state_mask_lazy_buffer": (
            NO_CAUSAL, (), "but raises on the same module called again "
            "(its call 3)"),
        # (Red team 13: the handled state's warm-up call makes a fresh
        # module's probe its second call, which now meets the counter
        # first: the mask is named ignored.)
        "state_mask_counter": (
            NO_CAUSAL, ("mask_ignored",), HANDLED),
        "honest_mask_buffer_max": (FULL_ATTENTION, (), "ok"),
        "honest_mask_cache_by_length": (FULL_ATTENTION, (), "ok"),
        "causal_branch_unscaled": (NO_CAUSAL, (), OTHER_SCORES),
        "causal_branch_uniform": (NO_CAUSAL, (), OTHER_SCORES),
        # Red team 11 (m04): a mask one step off past 16 tokens (the
        # long case).
        "mask_wrong_past_16": (
            NO_CAUSAL, ("mask_sees_next",),
            "on hidden case 'long' (batch_size=1, seq_len="),
        # Red team 14 (m06): the mask only while the global generator is
        # where manual_seed(initial_seed()) leaves it.
        "reseed_mask_on_fresh_generator": (
            NO_CAUSAL, ("mask_ignored",),
            "are not 0 above the diagonal: tokens attend to the future"),
        # Red team 14 (m01, m02): work of one graded class hosted in a
        # static method of the other, which also runs it: charged to the
        # task that runs it (shapes, bonus), as a module-level helper is;
        # (m05) a forward written as a lambda, installed by a class
        # decorator: no line for a shape comment, so the item fails
        # closed. The control hosts a helper only SelfAttention runs, its
        # comments per class: 11, bonus kept.
        "hosted_shapes_in_selfattention": (
            (1, 3, 0, 0, 0, 3, 1, 2, 0, -1), (), {
                "task2.shapes": SHAPES_MISSING,
                "task1.bonus": "has 6 statements"},
            ("task2.shapes", "task1.bonus")),
        "hosted_bonus_in_mhsa": (
            (1, 3, 0, 0, 0, 3, 1, 2, 0, 0), (),
            "has 5 statements (at most 3", ("task1.bonus",)),
        "lambda_forward_in_decorator": (
            (1, 3, 0, -1, 1, 3, 1, 2, 0, 0), (), LAMBDA, ("task1.shapes",)),
        "honest_hosted_static_per_class": (
            FULL_ATTENTION, (), {
                "task1.pep8": "the code it ran (MultiHeadSelfAttention."
                              "attend",
                "task1.shapes": "has a correct shape comment",
                "task1.bonus": "has 3 statement(s) and is correct"},
            ("task1.pep8", "task1.shapes", "task1.bonus")),
    },
    "basics": {
        # Red team 14 (a08): the mask ignored when a .grad is set and not
        # all ones (the probes' .grad is noise at a random scale now).
        # Red team 14 (a05) and variants: dropout placed right only where
        # the output determines the weights (head_dim, d_out or d_in
        # wider than the sequence); read at the narrow case.
        "narrow_heads_keyed": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0),
            ("dropout_misplaced",), "whose heads are narrower than the "
            "sequence, the output is not the attention weights times the "
            "value vectors", ("task6.dropout",)),
        "narrow_values_dropped": (
            (1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0),
            ("dropout_misplaced",), "with each weight dropped or kept and "
            "scaled by 1 / (1 - p)", ("task4.dropout",)),
        "narrow_context_dropped": (
            (1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0),
            ("dropout_misplaced",), "not on the values, the scores or the "
            "context vectors", ("task4.dropout",)),
        "narrow_heads_share_mask": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0),
            (), "drop exactly the same attention weights",
            ("task6.dropout",)),
        "grad_noise_mask_ignored": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0),
            ("mask_ignored",), "with the parameters' .grad set",
            ("task7.mask",)),
        # Red team 8, U4, and variants: a mask read from the scores.
        "mask_triu_ne_zero": (
            BASICS_NO_MASK, ("mask_from_scores",), FROM_SCORES, BASICS_MASK),
        "mask_eq_zero": (
            BASICS_NO_MASK, ("mask_from_scores",), FROM_SCORES, BASICS_MASK),
        "mask_isclose": (
            BASICS_NO_MASK, ("mask_from_scores",), FROM_SCORES, BASICS_MASK),
        # Red team 8, U3, and variants: masks not drawn weight by weight.
        "drop_rows": (
            BASICS_NO_DROPOUT, (),
            "whole query rows of the attention weights are dropped",
            BASICS_DROPOUT),
        "drop_columns": (
            BASICS_NO_DROPOUT, (),
            "whole key columns of the attention weights are dropped",
            BASICS_DROPOUT),
        "drop_shared": (
            BASICS_NO_DROPOUT, (), "drop exactly the same attention weights",
            BASICS_DROPOUT),
        "drop_batch_only": (
            BASICS_NO_DROPOUT, (), "drop exactly the same attention weights",
            BASICS_DROPOUT),
        # Only MultiHeadAttention's heads share a mask (two heads).
        "drop_heads_shared": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0), (),
            "drop exactly the same attention weights", ("task6.dropout",)),
        "drop_diagonal_kept": (
            BASICS_NO_DROPOUT, (),
            "attention weights on the diagonal are dropped", BASICS_DROPOUT),
        "honest_f_dropout": (
            FULL_BASICS, (), "ok", BASICS_MASK + BASICS_DROPOUT),
        "honest_tril_buffer": (
            FULL_BASICS, (), "ok", BASICS_MASK + BASICS_DROPOUT),
        # Red team 9 (ab_u_wrapper_nodrop) and variants: the wrapper's
        # heads never drop, although its CausalAttention does.
        "wrapper_rate_zero": (
            BASICS_NO_WRAPPER_DROPOUT, (), WRAPPER_RATE, ("task5.values",)),
        "wrapper_rate_reset": (
            BASICS_NO_WRAPPER_DROPOUT, (), WRAPPER_RATE, ("task5.values",)),
        "wrapper_heads_eval": (
            BASICS_NO_WRAPPER_DROPOUT, (), WRAPPER_RATE, ("task5.values",)),
        # Red team 10, R1: SelfAttention_v2 unscaled with autograd on;
        # CausalAttention's mask only for an input without a grad_fn.
        "modes_v2_grad_unscaled": (
            (1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0),
            ("no_scaling",), EITHER_MODE, ("task3.values",)),
        # (task 4's dropout probes on fresh inputs, the wrapper's seeded:
        # probe on its own).
        "modes_causal_grad_fn": (
            (1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0), (),
            {"task4.dropout": FRESH_OFF, "task5.values": TWIN},
            ("task4.dropout", "task5.values")),
        # ... and its control: CausalAttention never drops (task 4's
        # point); the wrapper is not charged for the same mistake.
        # Issue 24, R-c: SelfAttention_v2 unscaled on a plain input with
        # autograd on (a first layer fed the data in a training loop).
        "modes_v2_raw_unscaled": (
            (1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0),
            ("no_scaling",), "with autograd on and an input that requires "
            "no grad (as for a first layer in training)", ("task3.values",)),
        # Issue 24, red team 11 (a07), a variant: task 6's mask ignored
        # for an input that requires grad with autograd off (every
        # family meets that state: state twins).
        "modes_requires_grad_no_grad_mask": (
            (1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0),
            ("mask_not_sliced",), "under torch.inference_mode() with an "
            "input that requires grad", ("task6.values",)),
        "honest_causal_nodrop": (
            (1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0), (), "ok",
            ("task5.values",)),
        # Red team 10, R2 and R7: right on a module's first call only;
        # the mask of task 7 in eval mode only; a train() that never
        # calls super() (its dropout stays in training mode).
        "state_mask_first_call": (
            BASICS_NO_MASK, (), "raises on the same module called again",
            BASICS_MASK),
        # Red team 13 (a08): SelfAttention_v2's weights kept from its
        # first call (the handled state's warm-up on other weights).
        "handled_weights_first_call": (
            (1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0), (), HANDLED,
            ("task3.values",)),
        "state_drop_kept": (
            BASICS_NO_DROPOUT, (), "two calls of the same module under "
            "different random seeds drop exactly the same attention "
            "weights", BASICS_DROPOUT),
        "mask_train_skipped": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0), (),
            "in training mode (model.train(), the same module called again "
            "after its eval-mode call)", ("task7.mask",)),
        # Issue 24: wrong at one rate (0.5, eval mode) under no_grad only
        # (R-b: each rate a branch in both modes); the mask skipped in
        # training with autograd on, answers kept by shape (R-a: twins on
        # fresh inputs).
        "modes_rate_eval_no_grad": (
            (1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0), (), FRESH_ON,
            ("task4.dropout",)),
        "modes_mask_train_by_shape": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0), (), TOOK_OUT,
            ("task7.mask",)),
        "train_no_super": (
            (1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0),
            ("dropout_in_eval",), "dropout must act only in training",
            ("task4.dropout",)),
        # Red team 11 (a02): CausalAttention built with dropout=0 drops
        # in training (the same module after its eval-mode call).
        "drop_at_rate_zero": (
            (1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0), (),
            "In training mode the output of a model with dropout=0 differs",
            ("task4.dropout",)),
        # Red team 13: weights from a private generator seeded 123 (a01,
        # the seeded: probe under a derived seed); the wrapper's heads
        # reversed in training (a02, a hidden values: probe in training
        # mode at dropout 0); a per-head mask cut to head 0 (a03); the
        # last mask kept for later calls without one (a10, after-mask:).
        "seeded_private_generator": (
            (1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0), (),
            "does not give the numbers the documented construction gives "
            "under that seed", ("task2.values",)),
        "wrapper_heads_reversed_in_training": (
            BASICS_NO_WRAPPER_DROPOUT, (),
            "MultiHeadAttentionWrapper.forward in training mode (dropout=0)",
            ("task5.values",)),
        "mask_per_head_collapsed": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0), (),
            "with a mask [batch_size, num_heads, num_tokens, num_tokens]",
            ("task7.mask",)),
        "mask_sticky": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, -0.5), (),
            "the same module called again without a mask, right after a "
            "call with one", ("task7.values",)),
        # Red team 13 (a07, a09): eval() overridden to do nothing, or to
        # switch dropout back on after super().eval() (the probes off the
        # plain state call eval() itself); (a06) the rate kept on the
        # class, so the last module built sets it (those probes build a
        # second module with other arguments first).
        "own_eval_noop": (
            (1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0), (),
            OWN_EVAL, ("task4.dropout",)),
        "own_eval_rearms": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0), (),
            OWN_EVAL, ("task6.dropout",)),
        "class_rate_shared": (
            (1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0), (), DECOY,
            ("task4.dropout", "task5.values")),
        # Red team 14 (a04): dropout only when torch.initial_seed()
        # changed since the module's last call (the wrapper's heads too).
        "reseed_drop_on_new_initial_seed": (
            (1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0), (),
            "in training mode the output does not change",
            ("task4.dropout",)),
        # Issue 24 (invented, the reseed residual): dropout only while a
        # vectorised scan finds words a seeding wrote anywhere in the
        # generator's state; the wrapper is judged at dropout 0.
        "reseed_drop_on_seeding_scan": (
            (1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0), (),
            TOOK_OUT, ("task4.dropout",)),
        # Red team 14 (a01, a02): a graded class's work in a static
        # method hosted in SelfAttention_v1/_v2 (no PEP-8 or shapes item
        # of their own), which their forward also runs: charged to every
        # task that runs it; (a06, a07) CausalAttention's forward a
        # lambda installed by a class decorator (its own, the wrapper's):
        # PEP-8 judged where it is, shapes fail closed. The control shares
        # a clean, commented static method of MultiHeadAttention between
        # tasks 6 and 7.
        "hosted_static_in_v2": (
            (1, 1, 1, 1, 1, -0.5, -0.5, 1, 1, 1, 0, 0, 1, 1, 0, 0), (), {
                "task4.pep8": "the code it ran (SelfAttention_v2._attend",
                "task4.shapes": SHAPES_MISSING},
            ("task4.pep8", "task4.shapes")),
        "hosted_static_in_v1": (
            (1, 1, 1, 1, 1, 0, 0, 1, 1, 1, -0.5, -0.5, 1, 1, -0.5, -0.5),
            (), {"task6.pep8": "the code it ran (SelfAttention_v1._core",
                 "task7.pep8": "the code it ran (SelfAttention_v1._core",
                 "task6.shapes": SHAPES_MISSING,
                 "task7.shapes": SHAPES_MISSING},
            ("task6.pep8", "task6.shapes", "task7.pep8", "task7.shapes")),
        "lambda_forward_class_decorator": (
            (1, 1, 1, 1, 1, -0.5, -0.5, 1, 1, 1, 0, 0, 1, 1, 0, 0), (), {
                "task4.pep8": "E501", "task4.shapes": LAMBDA},
            ("task4.pep8", "task4.shapes")),
        "lambda_forward_wrapper_decorator": (
            (1, 1, 1, 1, 1, -0.5, -0.5, 1, 1, 1, 0, 0, 1, 1, 0, 0), (), {
                "task4.pep8": "the code it ran (<lambda>",
                "task4.shapes": LAMBDA},
            ("task4.pep8", "task4.shapes")),
        "honest_hosted_static_shared": (
            FULL_BASICS, (), {
                "task7.pep8": "the code it ran (MultiHeadAttention."
                              "merge_order",
                "task6.shapes": "has a correct shape comment",
                "task7.shapes": "has a correct shape comment"},
            ("task7.pep8", "task6.shapes", "task7.shapes")),
    },
    "modes": {
        # Red team 13 (m05): forward is one call of a clean six-statement
        # module-level helper: the helper's statements are forward's
        # (principle 4), so no bonus.
        "bonus_by_helper": (
            (1, 3, 0, 0, 0, 3, 1, 2, 0, 0), (),
            "has 7 statements (at most 3 earn the bonus)",
            ("task1.bonus",)),
        # Red team 10, R1: right only under torch.no_grad(), by three
        # tests of the mode; each family sees both modes.
        "grad_enabled_unscaled": (
            (1, 3, 0, 0, 1, 0, 0, 0, 0, 0), (), EITHER_MODE,
            ("task2.causal", "task2.output")),
        "requires_grad_no_mask": (
            NO_CAUSAL, ("mask_ignored",),
            "are not 0 above the diagonal: tokens attend to the future"),
        # (the rate named follows the seed: a plain input with autograd
        # on has no grad_fn either, so its family's activation tells)
        "grad_fn_no_dropout": (
            NO_DROPOUT, (), "in train mode nothing changes",
            ("task2.output",)),
        # ... wrong in one situation only (causal in train mode, one
        # probe): its twin in the other mode tells.
        "causal_train_grad_leak": (NO_CAUSAL, (), FRESH_OFF),
        # ... and the other direction: right only with autograd on.
        "no_grad_wrong_mix": (
            (1, 3, 0, 0, 1, 3, 0, 0, 0, 0), (), EITHER_MODE,
            ("task2.causal", "task2.output")),
        # Issue 24, R-c: the states no probe was in: SelfAttention
        # unscaled under torch.inference_mode(), or on an activation whose
        # grad_fn is no CloneBackward0; the causal mask skipped once the
        # weights have a .grad (the same module called again).
        "inference_unscaled": (
            (1, 0, 0, 0, 0, 3, 1, 2, 0, 0), ("no_scaling",),
            "under torch.inference_mode() with an input that requires grad "
            "and with the parameters' .grad set (as after loss.backward()), "
            "in eval mode set by model.eval() and with another "
            "SelfAttention(",
            ("task1.forward",)),
        "grad_fn_name_unscaled": (
            (1, 0, 0, 0, 0, 3, 1, 2, 0, 0), ("no_scaling",),
            "with autograd on (as in training)", ("task1.forward",)),
        # (now also met by a fresh module's probe with .grad set, whose
        # probs the checks read: the mask is named ignored)
        "grad_set_no_mask": (
            NO_CAUSAL, ("mask_ignored",), "with the parameters' .grad set "
            "(as after loss.backward())"),
        # Issue 24, R-a: answers remembered by the input's bytes, or per
        # sequence, from the right mode (twins on fresh inputs); R-b:
        # wrong at one rate (0.2, eval mode) under no_grad only.
        # Answers remembered by the input's values read out as numbers
        # (.tolist()): taken out of torch in a graded call (red team 15).
        "memo_bytes_att_only": (TASK2_OUT, (), TOOK_OUT, ("task2.output",)),
        "memo_sample_causal_train": (TASK2_OUT, (), TOOK_OUT),
        "rate_eval_no_grad": (NO_DROPOUT, (), FRESH_ON, ("task2.output",)),
        # Issue 24, red team 11 (m12, m01), variants: the mask dropped
        # with dropout in training under autograd, answers remembered by
        # a digest of the input (twins of random dropout on fresh inputs,
        # judged by the dropout's properties); the mask skipped under
        # torch.inference_mode() in forward(x) alone (a family with one
        # probe of a mode: its state twin).
        # (Red team 14: its memo's key holds torch.initial_seed(), which
        # reads one value for the whole grading now: two calls of one
        # module under two seeds answer alike, and that words it.)
        "memo_digest_causal_dropout": (
            NO_DROPOUT, (), SAME_MODULE, ("task2.output",)),
        "inference_plain_call_no_mask": (
            NO_CAUSAL, (), "under torch.inference_mode() with an input "
            "that requires grad"),
        # Red team 13 (m01): eval() overridden to return self (the
        # probes off the plain state call eval() itself); (m02, m03) the
        # rate or the causal flag kept on the class (those probes build
        # a second module with other arguments first); (h03) a correct
        # eval() override, return self.train(False).
        "own_eval_noop": (
            NO_DROPOUT, (), "are not a distribution (rows must sum to 1)",
            ("task2.output",)),
        "class_rate_shared": (
            (1, 3, 0, 0, 1, 3, 0, 1, 0, 0), (),
            {"task2.causal": "in train mode set by model.train() and "
                             "with another MultiHeadSelfAttention(",
             "task2.output": "in train mode nothing changes"},
            ("task2.causal", "task2.output")),
        "class_causal_shared": (
            (1, 3, 0, 0, 1, 0, 0, 0, 0, 0), ("mask_ignored",), DECOY),
        "honest_eval_override": (FULL_ATTENTION, (), "ok"),
        # Red team 13 (m04, m06, m08, m10): weights kept from the first
        # call, a load_state_dict pre-hook that swaps q and k, causal reset
        # by __getstate__ (deepcopy) or _apply (.double(), .float()): the
        # handled state (grader.plan.handle) meets each.
        "handled_weights_first_call": (
            (1, 0, 0, 0, 0, 3, 1, 2, 0, 0), (), HANDLED,
            ("task1.forward",)),
        "handled_load_hook_swaps_qk": (
            (1, 3, 0, 0, 1, 0, 0, 0, 0, 0), (),
            "by its own load_state_dict, in ",
            ("task2.scores",)),
        "handled_getstate_drops_causal": (
            NO_CAUSAL, ("mask_ignored",), HANDLED),
        "handled_apply_drops_causal": (
            NO_CAUSAL, ("mask_ignored",), HANDLED),
        # Red team 14 (m04): the mask skipped when a .grad is set and not
        # all ones.
        "grad_noise_mask_off": (
            NO_CAUSAL, ("mask_ignored",), "with the parameters' .grad set"),
        "honest_mask_no_grad": (FULL_ATTENTION, (), "ok"),
        "honest_no_grad_helper": (FULL_ATTENTION, (), "ok"),
        "honest_detach_mask": (FULL_ATTENTION, (), "ok"),
    },
    "training": {
        # Red team 14 (b04): positions skipped when a .grad is set and
        # not all ones.
        "grad_noise_no_positions": (
            (1, 3, 0, 0, 1, 0, 0, 0, 0, 0, 0), ("no_position_embeddings",),
            "with the parameters' .grad set (as after loss.backward())",
            ("task2.logits",)),
        # Red team 10, R1: the layer's first residual only under
        # torch.no_grad() (the model trains what it runs, so the training
        # item stands; the layer's forward does not).
        "modes_layer_grad_no_residual": (
            (1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0), ("missing_residual",),
            "does not match the reference", ("task1.forward",)),
        # Issue 24, red team 11 (b04), a variant: the position
        # embeddings skipped once a parameter has a .grad (task 2's
        # probes off the plain state in every way have .grad set).
        "modes_lm_grad_set_no_positions": (
            (1, 3, 0, 0, 1, 0, 0, 0, 0, 0, 0), ("no_position_embeddings",),
            "with the parameters' .grad set (as after loss.backward())",
            ("task2.logits",)),
        "train_inner_optimizer": (
            NOT_TRAINED_LOSS, (), WROTE),
        "train_stats_data": (
            NOT_TRAINED_LOSS, (), WROTE),
        "train_hook_replaces": (
            NOT_TRAINED_LOSS, (), REPLACED),
        "train_finalizer_writes": (
            NOT_TRAINED_DICT, (), WROTE),
        "train_read_time_write": (
            NOT_TRAINED_DICT, (), WROTE),
        "honest_no_grad_metric": (FULL_TRANSFORMER, (), "ok"),
        # Red team 13 (b01, b02): eval() of the layer a no-op, the
        # model's eval() switching every nn.Dropout back on (the probes
        # off the plain state call eval() itself; the model's eval-mode
        # dropout probe is a family of its own, logits-eval:); (b06) the
        # layer's rate kept on the class (a second layer built first).
        "own_layer_eval_noop": (
            (1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0), (), OWN_EVAL,
            ("task1.forward",)),
        "own_lm_eval_rearms": (
            (1, 3, 0, 0, 1, 0, 1, 1, 1, 0, 0), (), OWN_EVAL,
            ("task2.logits",)),
        "class_layer_rate_shared": (
            (1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0), (), DECOY,
            ("task1.forward",)),
        # Red team 7, U1: a loss whose gradient reaches only part of the
        # model (the rest never moves) does not train the model.
        "train_frozen_body": (
            NOT_TRAINED, (), "The token embeddings, the position embeddings "
            "and the parameters of layers[0] never changed during training"),
        "train_bigram": (
            (1, 3, 0, 0, 1, 0, 1, 1, 0, 0, 0), (),
            "The parameters of layers[0] never changed during training"),
        "train_detached_embeddings": (
            NOT_TRAINED, (), "The token embeddings and the position "
            "embeddings never changed during training"),
        # Red team 12 (b03): a loss from detached logits has the
        # cross-entropy's value (task2.loss stands, docs/rubric-decisions.md)
        # and no gradient (task2.training is lost, every group named).
        # Red team 13 (b05): a loss that runs the model in eval mode
        # gives one value under every torch seed in training, where the
        # model's own logits differ (task2.loss).
        "train_loss_in_eval_mode": (
            (1, 3, 0, 0, 1, 2, 1, 0, 1, 0, 0), (),
            "under every torch seed, although the model's own logits "
            "there differ", ("task2.loss",)),
        "train_loss_detached_logits": (
            NOT_TRAINED, (), "the parameters of layers[0] and the parameters "
            "of out_proj never changed during training with loss"),
        # ... and a loss whose gradient reaches every group (so each
        # moves) while only out_proj learns: the depth-1 corpus needs the
        # layer (the next token follows from the token and its position).
        "train_noise_reaches_all": (
            NOT_TRAINED, (), "(the next token follows from the current "
            "token and its position), the next-token loss on fresh text"),
        # Red team 13 (b07): out_proj.weight kept from the model's first
        # call (the handled state's warm-up call meets it: task2.logits and
        # the items judged with them); and a variant that keeps it from its
        # first call in training, which only the trained model's own logits
        # show (task2.training compares them with the reference model on
        # the trained parameters).
        "handled_lm_head_first_call": (
            (1, 3, 0, 0, 1, 0, 0, 0, 0, 0, 0), (), HANDLED,
            ("task2.logits",)),
        "train_lm_head_first_train_call": (
            NOT_TRAINED, (), "logits on fresh text are not those of the "
            "model's trained parameters"),
        "honest_depth0_training": (
            (1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0), (), "ok"),
        # Red team 14 (b03): the residual dropouts only when
        # torch.initial_seed() changed since the layer's last call; (b06)
        # the given class edited to mask only while the global generator
        # is where manual_seed(initial_seed()) leaves it (task 2 is judged
        # with substitute layers: the layer's item pays).
        "reseed_layer_drop_on_new_initial_seed": (
            (1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0), (),
            "never drops the attention sublayer's output in train mode",
            ("task1.forward",)),
        "reseed_given_mask_on_fresh_generator": (
            (1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0), (),
            "with causal=True on hidden case", ("task1.forward",)),
        # Red team 14 (b01, b02): the model's work in a helper method
        # hosted in the layer (not the layer's graded method), which the
        # layer's forward also runs: charged to task 2 too; (b05) the
        # layer's forward a lambda installed by a decorator on
        # TransformerLM: the layer's forward is the stub, and no line of
        # the lambda can hold a shape comment (task 2's own commented
        # statements carry its comments). The control: a
        # clean, commented helper method of the layer, run by its
        # forward alone (charged to task 2 as well, and right there).
        "hosted_shapes_in_layer": (
            FULL_TRANSFORMER[:-1] + (-1,), (), SHAPES_MISSING,
            ("task2.shapes",)),
        "hosted_pep8_in_layer": (
            (1, 3, -1, 0, 1, 2, 1, 1, 1, -1, 0), (),
            "the code it ran (TransformerEncoderLayer._through",
            ("task2.pep8",)),
        "lambda_layer_forward_by_lm": (
            (1, 3, 0, -1, 1, 2, 1, 1, 1, 0, 0), (), LAMBDA,
            ("task1.shapes",)),
        "honest_layer_helper_method": (
            FULL_TRANSFORMER, (), {
                "task2.pep8": "the code it ran (TransformerEncoderLayer."
                              "sublayer",
                "task2.shapes": "has a correct shape comment"},
            ("task2.pep8", "task2.shapes")),
    },
}
#: transformer_block behind a failing layer (task1.forward 0): the
#: controls' rows are these with task1.forward 3.
BEHIND = (1, 0, 0, 0, 1, 2, 1, 1, 1, 0, 0)
#: The words of each judged item behind a failing layer (depth 0, the
#: new checks) and behind a right layer (depth 2, as before).
LOSS_D0 = ("TransformerLM.loss with num_layers=2 (two of your layers, "
           "whatever they compute)")
TRAIN_D0 = ("with num_layers=1 (one of your layers, whatever it computes): "
            "the loss's gradient does not reach them")
LOGITS_D0 = "each layer replaced by a fixed linear map"
LOSS_D2 = "the next-token cross-entropy of the model's own logits is"
TRAIN_D2 = "never changed during training with loss: the loss's gradient"
LOGITS_D2 = "do not match the reference"


def _depth0(stem: str, layer: str, words: dict[str, str]
            ) -> dict[str, tuple]:
    """A file behind a failing ``layer`` and its control behind a right
    one: both lose the items ``words`` names (item -> its words behind
    the failing layer), the control with the depth-2 words."""
    changed = dict(zip(TRANSFORMER, BEHIND))
    changed.update(dict.fromkeys(words, 0))
    control = {"task2.logits": LOGITS_D2, "task2.loss": LOSS_D2,
               "task2.training": TRAIN_D2}
    scores = tuple(changed[item] for item in TRANSFORMER)
    return {f"{stem}_{layer}": (scores, (), words, tuple(words)),
            f"{stem}_control": (
                scores[:1] + (3,) + scores[2:], (),
                {item: control[item] for item in words}, tuple(words))}


CORPUS["depth0"] = {
    # Red team 9, U8 (a loss that never runs the layers, or whose gradient
    # never reaches them: task2.loss judged at depth 2 against the model's
    # own logits, task2.training at depth 1 on the moved groups), and a
    # forward that combines its layers wrongly (task2.logits, judged with
    # substitute layers); one of each per file.
    **_depth0("bigram_loss_extra_residual", "prenorm", {
        "task2.logits": "They are those of x = x + layer(x)",
        "task2.loss": LOSS_D0, "task2.training": TRAIN_D0}),
    **_depth0("helper_loss_reversed", "nores", {
        "task2.logits": "They are those of the layers in reverse order",
        "task2.loss": LOSS_D0, "task2.training": TRAIN_D0}),
    **_depth0("first_layer_loss_parallel_sum", "noncausal", {
        "task2.logits": LOGITS_D0, "task2.loss": LOSS_D0}),
    **_depth0("no_grad_loss", "scaled", {"task2.training": TRAIN_D0}),
    "honest_prefix_loss_reduce_noncausal": (
        BEHIND, (), "ok", ("task2.logits", "task2.loss", "task2.training")),
    # A layer left as `return x`: its weights reach nothing, but the
    # substitutes show the model runs it, so task 2 does not pay for it
    # (before, task2.logits was lost on the reach probes).
    "honest_identity_layer": (
        BEHIND, (), "ok", ("task2.logits", "task2.training")),
}
JUDGED = {"dropout": "task2.output", "causal": "task2.causal",
          "training": "task2.training", "modes": "task2.causal"}
ITEMS = {"dropout": ATTENTION, "causal": ATTENTION, "training": TRANSFORMER,
         "basics": BASICS, "depth0": TRANSFORMER, "modes": ATTENTION}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, tuple[dict, Path, dict]]:
    """Each folder's rows by file, where the reports are and each file's
    name (``derived.materialize`` writes the committed and derived files
    of each folder into its class): the folders
    of one assignment (their items) are graded together, as one class, by
    one batch (a batch's start-up, torch and the fork server, is paid once
    an assignment, not once a folder; no two folders of an assignment
    share a file name)."""
    out = tmp_path_factory.mktemp("effects")
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SEED"}
    env["PYTHONPATH"] = str(KIT)
    classes: dict[tuple[str, ...], list[str]] = {}
    for folder in CORPUS:
        classes.setdefault(ITEMS[folder], []).append(folder)
    found = {}
    for number, folders in enumerate(classes.values()):
        students = out / f"class{number}"
        students.mkdir()
        names = {}
        for folder in folders:
            names[folder] = {path.stem: path.name for path in
                             materialize(EFFECTS / folder, students)}
        csv = out / f"class{number}.csv"
        run = subprocess.run(
            [sys.executable, "-m", "grader", "batch", str(students),
             "--out", str(csv), "--jobs", "2"], cwd=KIT, env=env,
            capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-2000:]
        rows = {Path(row["student"]).stem: row for row in read_csv(csv)}
        for folder in folders:
            found[folder] = (rows, csv.with_name(csv.name + ".reports"),
                             names[folder])
    return found


def test_the_table_lists_every_effects_file() -> None:
    for folder, table in CORPUS.items():
        assert names_in(EFFECTS / folder) == sorted(table)


@pytest.mark.parametrize("folder,name", [(folder, name) for folder in CORPUS
                                         for name in CORPUS[folder]])
def test_an_effect_is_judged(graded, folder: str, name: str) -> None:
    """Exact item scores, the judged items' diagnoses and words; no
    flag (nothing was refused: the attacks are ordinary code), but for
    values taken out of torch in a graded call (``untraceable``)."""
    scores, diagnoses, words, *judged = CORPUS[folder][name]
    rows, reports, names = graded[folder]
    row = rows[name]
    assert row["status"] == "graded", row
    assert {item: float(row[item]) for item in ITEMS[folder]} == dict(
        zip(ITEMS[folder], map(float, scores))), row
    report = json.loads((reports / names[name] / "report.json").read_text(
        encoding="utf-8"))
    # Values taken out of torch in a graded call are flagged untraceable,
    # in those words (red team 15); every other attack here is ordinary
    # code, with no flag.
    if words == TOOK_OUT:
        flags = report["flags"]
        assert flags and all(flag["kind"] == "untraceable"
                             for flag in flags), flags
        assert any(TOOK_OUT in flag["message"] for flag in flags), flags
    else:
        assert row["flags"] == "", row["flags"]
    for item_id in judged[0] if judged else (JUDGED[folder],):
        item = next(i for i in report["items"] if i["id"] == item_id)
        assert tuple(item["diagnosis"]) == diagnoses, item
        said = words[item_id] if isinstance(words, dict) else words
        assert said in item["message"], item["message"]
