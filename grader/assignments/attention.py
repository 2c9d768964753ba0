"""What the attention plug-ins share (``attention_basics`` and
``multi_head_attention``): naming a scale constant a submission used, the
diagnosis it means, the words of an attention-map picture, and the
statistics that tell an element-wise independent dropout mask from a
correlated one (docs/threat-model.md, principle 5). A plug-in module, not
a generic one: it may name attention."""
from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: What the maps are, in the figures' words.
MAP_LABELS = {"panel_label": "head",
              "value_label": "attention probability",
              "column_label": "key position j",
              "row_label": "query position i"}


def name_scale(value: float, candidates: dict[str, float]) -> str:
    """``value`` with the first of ``candidates`` (label -> constant,
    e.g. ``"sqrt(head_size)"``) it equals, or alone."""
    for label, candidate in candidates.items():
        if abs(value - candidate) <= 1e-3 * max(1.0, candidate):
            return f"{value:.4g} = {label}"
    return f"{value:.4g}"


def scale_diagnosis(c: float | None, expected: float,
                    candidates: dict[str, float]) -> tuple[list[str], str]:
    """Diagnosis ids and words for a recovered scale constant ``c`` (None:
    no constant explains the output) where ``expected`` was due."""
    if c is None or abs(c - expected) <= 1e-3 * expected:
        return [], ""
    if abs(c - 1.0) <= 1e-3:
        return ["no_scaling"], "The scores are not scaled at all."
    return ["wrong_scale"], (f"The scores are divided by "
                             f"{name_scale(c, candidates)}; expected "
                             f"{name_scale(expected, candidates)}.")


def _broadcast(first: tuple[int, ...], second: tuple[int, ...]
               ) -> tuple[int, ...]:
    """The shape two batch shapes broadcast to. Not
    ``torch.broadcast_shapes``: in torch 2.13 its first call imports
    sympy (through ``torch._refs``), 11 % of a batch's CPU time when
    every judge did it (measured side by side on 46 files)."""
    width = max(len(first), len(second))
    first = (1,) * (width - len(first)) + tuple(first)
    second = (1,) * (width - len(second)) + tuple(second)
    if any(a != b and 1 not in (a, b) for a, b in zip(first, second)):
        raise ValueError(f"shapes {first} and {second} do not broadcast")
    return tuple(b if a == 1 else a for a, b in zip(first, second))


# --------------------------------------------------------------------------
# The grader's computations go through torch's own attention kernels
# (docs/threat-model.md, principle 10): these kernels are forbidden to
# submissions, so nothing below can be handed in. Scores and the head
# layout are read off the kernels' outputs; no correct head split, merge
# or score computation is written out here.


def kernel_scores(q: torch.Tensor, k: torch.Tensor,
                  scale: float = 1.0) -> torch.Tensor:
    """``q k^T / scale`` ([..., L, S]), read off
    ``scaled_dot_product_attention``: the kernel attends to the keys and
    one zero key (whose score is 0) with the identity as values, so the
    log-probabilities minus the zero key's are the scores. float64."""
    batch = _broadcast(q.shape[:-2], k.shape[:-2])
    q = q.double().expand(*batch, *q.shape[-2:])
    k = k.double().expand(*batch, *k.shape[-2:])
    keys = torch.cat([k, k.new_zeros(*batch, 1, k.shape[-1])], dim=-2)
    count = keys.shape[-2]
    identity = torch.eye(count, dtype=torch.float64).expand(
        *batch, count, count)
    probs = F.scaled_dot_product_attention(q, keys, identity,
                                           scale=1.0 / scale)
    return probs[..., :-1].log() - probs[..., -1:].log()


@functools.lru_cache(maxsize=64)
def _layout(batch: int, seq: int, width: int,
            num_heads: int) -> torch.Tensor:
    """Where torch's multi-head attention reads head h's feature d of
    position i of sequence b: an index [batch, num_heads, seq, width //
    num_heads] into the flattened [batch, seq, width] input.

    The kernel's query input holds each element's own (scaled) index, its
    keys are the unit vectors of one head's features, so its scores are
    the indices as the kernel splits them (read as in
    :func:`kernel_scores`, against the zero key it adds)."""
    size = width // num_heads
    total = batch * seq * width
    index = torch.arange(total, dtype=torch.float64) / total
    query = index.reshape(batch, seq, width).transpose(0, 1)
    keys = torch.eye(size, dtype=torch.float64).repeat(1, num_heads)
    keys = keys[:, None].expand(size, batch, width)
    own = torch.eye(width, dtype=torch.float64)
    _, probs = F.multi_head_attention_forward(
        query, keys, keys, width, num_heads, None,
        torch.zeros(3 * width, dtype=torch.float64), None, None, True, 0.0,
        own, None, training=False, need_weights=True,
        use_separate_proj_weight=True, q_proj_weight=own,
        k_proj_weight=own, v_proj_weight=own, average_attn_weights=False)
    scores = probs[..., :-1].log() - probs[..., -1:].log()
    return torch.round(scores * size ** 0.5 * total).long()


def split_heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[batch, seq, width] -> [batch, num_heads, seq, width // num_heads],
    as torch's multi-head attention splits it (:func:`_layout`)."""
    return t.flatten()[_layout(*t.shape, num_heads)]


def merge_heads(t: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`split_heads`: [batch, num_heads, seq, size]
    -> [batch, seq, num_heads * size]."""
    batch, heads, seq, size = t.shape
    merged = t.new_empty(batch * seq * heads * size)
    merged[_layout(batch, seq, heads * size, heads).flatten()] = t.flatten()
    return merged.reshape(batch, seq, heads * size)


# --------------------------------------------------------------------------
# Dropout drops each attention weight on its own (docs/threat-model.md,
# principle 5, "Element-wise independence"): a mask shared by the heads or
# the sequences, whole rows or whole columns dropped together, or a kind
# of position (the diagonal) never dropped is not nn.Dropout, even
# rescaled by 1 / (1 - p). Each binomial test fails a correct dropout
# with probability at most ALPHA (an exact tail, or a binomial that
# dominates the count); the shared-block test's bound depends on the
# number of judged positions per block (the docs give it per plug-in).

#: The false-failure budget of one binomial test of independence.
ALPHA = 1e-11
# The largest chance that two blocks of a correct dropout share a mask at
# which the shared-block test is judged (shared_blocks).
SHARED_CHANCE = 1e-10


def binomial_tail(n: int, q: float, k: int, upper: bool) -> float:
    """P(X >= k) (``upper``) or P(X <= k) for X ~ Binomial(n, q): the
    exact sum of the terms, in float64 logarithms."""
    if not 0 < q < 1:
        return 1.0
    js = (torch.arange(max(k, 0), n + 1, dtype=torch.float64) if upper
          else torch.arange(0, min(k, n) + 1, dtype=torch.float64))
    if js.numel() == 0:
        return 0.0
    return min(1.0, float(torch.logsumexp(log_pmf(n, q, js), 0).exp()))


def log_pmf(n: int, q: float, ks: torch.Tensor) -> torch.Tensor:
    """log P(X = k) for each k of ``ks`` (float64), X ~ Binomial(n, q),
    0 < q < 1."""
    return (math.lgamma(n + 1) - torch.lgamma(ks + 1)
            - torch.lgamma(n - ks + 1) + ks * math.log(q)
            + (n - ks) * math.log1p(-q))


def unlikely(n: int, q: float, k: int, upper: bool) -> bool:
    """True when k or more (``upper``), or k or fewer, of n Bernoulli(q)
    draws happen with probability at most ALPHA."""
    return binomial_tail(n, q, k, upper) <= ALPHA


def alike(p: float) -> float:
    """The chance that two independent drops at rate ``p`` agree (both
    dropped or both kept): one weight in two blocks, or two neighbours."""
    return p * p + (1 - p) ** 2


def shared_blocks(judged: torch.Tensor, mask: torch.Tensor,
                  p: float = 0.5) -> bool:
    """True when two [seq, seq] blocks of one draw that are judged at the
    same positions (the most common pattern: every position without a
    mask, j <= i with a causal one) drop exactly the same weights
    there. Not judged (False) at a rate ``p`` where two blocks of a
    correct dropout share a mask by chance with probability above
    SHARED_CHANCE (a union bound over the pairs of blocks): at a low rate
    most weights are kept, and small blocks can coincide; the rate 0.5
    judges it always."""
    if judged.shape[0] < 2:
        return False
    same, pattern = _common_pattern(judged)
    if int(same.sum()) < 2 or not pattern.any():
        return False
    count, size = int(same.sum()), int(pattern.sum())
    chance = count * (count - 1) / 2 * alike(p) ** size
    if chance > SHARED_CHANCE:
        return False
    blocks = mask.flatten(1)[same][:, pattern].numpy()
    return len({row.tobytes() for row in blocks}) < len(blocks)


def whole_lines(judged: torch.Tensor, masks: list[torch.Tensor], dim: int
                ) -> tuple[int, int, int]:
    """(dropped, lines, least): of the query rows (``dim`` -1) or key
    columns (``dim`` -2) judged at ``least`` or more positions (at least
    half as many as the longest line: every line without a mask), how
    many of every draw have all their judged weights dropped, of how
    many. A line of m >= least independent drops is dropped whole with
    probability p^m <= p^least, so the count is dominated by
    Binomial(lines, p^least)."""
    counts = judged.sum(dim)
    longest = int(counts.max()) if counts.numel() else 0
    if longest == 0:
        return 0, 0, 0
    considered = counts >= max(1, (longest + 1) // 2)
    least = int(counts[considered].min())
    dropped = sum(int(((mask | ~judged).all(dim) & considered).sum())
                  for mask in masks)
    return dropped, int(considered.sum()) * len(masks), least


def position_kinds(seq: int, cols: int | None = None
                   ) -> dict[str, torch.Tensor]:
    """Kinds of positions of a [seq, seq] block (or [seq, cols]: a
    sublayer's output, positions by features) a mask could spare."""
    cols = seq if cols is None else cols
    eye = torch.eye(seq, cols, dtype=torch.bool)
    line = torch.zeros(seq, cols, dtype=torch.bool)
    kinds = {"on the diagonal": eye,
             "above the diagonal": torch.ones_like(eye).triu(1),
             "below the diagonal": torch.ones_like(eye).tril(-1)}
    for name, index in (("in the first query row", (0, slice(None))),
                        ("in the last query row", (-1, slice(None))),
                        ("in the first key column", (slice(None), 0)),
                        ("in the last key column", (slice(None), -1))):
        kind = line.clone()
        kind[index] = True
        kinds[name] = kind
    return kinds


#: Neighbours in a block, (rows, columns) apart, and their words: the
#: next column, the next row, the next along the diagonal and along the
#: anti-diagonal.
NEIGHBOURS = {(0, 1): "side by side in a row",
              (1, 0): "one above the other in a column",
              (1, 1): "next to each other along a diagonal",
              (1, -1): "next to each other along an anti-diagonal"}


def neighbour_pairs(block: torch.Tensor, shift: tuple[int, int]
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Two views of ``block`` ([..., rows, cols]) whose elements, index by
    index, are disjoint pairs of neighbours ``shift`` apart: a row's
    columns 0-1, 2-3, ... for (0, 1); rows 0-1, 2-3, ... (each column, or
    the next or previous one) otherwise. No element is in two pairs, so
    an element-wise independent mask agrees on each pair independently."""
    rows, cols = block.shape[-2:]
    if shift[0] == 0:
        half = cols // 2
        return (block[..., :, 0:2 * half:2], block[..., :, 1:2 * half:2])
    half = rows // 2
    first = block[..., 0:2 * half:2, :]
    second = block[..., 1:2 * half:2, :]
    if shift[1] == 1:
        return first[..., :, :-1], second[..., :, 1:]
    if shift[1] == -1:
        return first[..., :, 1:], second[..., :, :-1]
    return first, second


def neighbours_agreeing(judged: torch.Tensor, masks: list[torch.Tensor],
                        p: float, shift: tuple[int, int]
                        ) -> tuple[int, int, float] | None:
    """(agreeing, pairs, chance) when the disjoint pairs of judged
    neighbours ``shift`` apart are dropped alike (both or neither) more
    or less often than element-wise independent drops allow (each pair
    agrees with chance p^2 + (1 - p)^2, independently: a binomial test
    of each tail at ALPHA); None otherwise. A mask constant along
    anti-diagonals, diagonals, dominoes, or alternating like a
    checkerboard passes every row, column, block and position test, not
    this one."""
    first_judged, second_judged = neighbour_pairs(judged, shift)
    both = first_judged & second_judged
    pairs = int(both.sum()) * len(masks)
    if pairs == 0:
        return None
    agreeing = 0
    for mask in masks:
        first, second = neighbour_pairs(mask, shift)
        agreeing += int(((first == second) & both).sum())
    chance = alike(p)
    if unlikely(pairs, chance, agreeing, True) or \
            unlikely(pairs, chance, agreeing, False):
        return agreeing, pairs, chance
    return None


def _common_pattern(judged: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Which blocks are judged at the most common pattern of positions
    (every position without a mask, j <= i with a causal one), and that
    pattern (flattened)."""
    patterns = [row.tobytes() for row in judged.flatten(1).numpy()]
    common = Counter(patterns).most_common(1)[0][0]
    same = torch.tensor([row == common for row in patterns])
    return same, judged.flatten(1)[same][0]


def counts_alike(judged: torch.Tensor, masks: list[torch.Tensor], p: float
                 ) -> tuple[int, int, int] | None:
    """(largest, blocks, draws) when, in every draw, ``largest`` of the
    ``blocks`` blocks judged at the same positions drop the same number of
    weights, more than element-wise independent drops allow; None
    otherwise.

    Each block's count of drops is Binomial(n, p), independently. In one
    draw, the chance that some g of B blocks share a count is at most
    C(B, g) * sum_k P(k)^g (a union bound over the sets of g blocks); the
    draws are independent, so their bounds combine as the product t of k
    p-values does (P(product <= t) = t * sum_{i<k} (-ln t)^i / i!), judged
    at ALPHA. A mask drawn once and moved around the blocks (shifted,
    rolled, permuted), or kept from call to call, keeps its count in
    every block: the row, column, position and neighbour tests see a
    random pattern in each block, and the shared-block test sees no two
    blocks alike position by position (red team 16)."""
    if not masks or judged.shape[0] < 2:
        return None
    same, pattern = _common_pattern(judged)
    blocks, n = int(same.sum()), int(pattern.sum())
    if blocks < 2 or n == 0 or not 0 < p < 1:
        return None
    counts_log_pmf = log_pmf(n, p, torch.arange(0, n + 1,
                                                dtype=torch.float64))
    log_t, largest = 0.0, blocks
    for mask in masks:
        counts = mask.flatten(1)[same][:, pattern].sum(1).tolist()
        group = max(Counter(counts).values())
        largest = min(largest, group)
        if group < 2:
            return None
        log_bound = (math.lgamma(blocks + 1) - math.lgamma(group + 1)
                     - math.lgamma(blocks - group + 1)
                     + float(torch.logsumexp(group * counts_log_pmf, 0)))
        log_t += min(0.0, log_bound)
    spread = -log_t
    combined = sum(spread ** i / math.factorial(i) for i in range(len(masks)))
    if log_t + math.log(combined) <= math.log(ALPHA):
        return largest, blocks, len(masks)
    return None


def _best_shifts(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """For rows of +-1 values (``first`` and ``second`` [rows, n]), how
    many of the n values agree, row by row, at the cyclic shift of
    ``second`` where most do: every shift at once, by the FFT."""
    size = first.shape[-1]
    products = torch.fft.irfft(torch.fft.rfft(first).conj()
                               * torch.fft.rfft(second), n=size)
    return ((size + products.max(-1).values) / 2).round().long()


def blocks_shifted(judged: torch.Tensor, masks: list[torch.Tensor],
                   p: float) -> tuple[int, int] | None:
    """(agreeing, weights) when two blocks of a draw judged at the same
    positions are one mask moved along (a cyclic shift of the judged
    weights, flattened): under independent drops each shift agrees on
    Binomial(weights, p^2 + (1 - p)^2) of them, so the best agrees on
    ``agreeing`` with probability at most (pairs of blocks) * (shifts) *
    P(Binomial >= agreeing), judged at ALPHA; None otherwise. One draw
    rolled around the heads or the batch (red team 16) gives every block
    a random pattern of its own and no two blocks the same positions."""
    if judged.shape[0] < 2:
        return None
    same, pattern = _common_pattern(judged)
    blocks, size = int(same.sum()), int(pattern.sum())
    if blocks < 2 or size < 2:
        return None
    pairs = blocks * (blocks - 1) // 2
    for mask in masks:
        signs = mask.flatten(1)[same][:, pattern].to(torch.float64) * 2 - 1
        left, right = torch.triu_indices(blocks, blocks, 1)
        agreeing = int(_best_shifts(signs[left], signs[right]).max())
        tail = binomial_tail(size, alike(p), agreeing, True)
        if tail * size * pairs * len(masks) <= ALPHA:
            return agreeing, size
    return None


def draws_shifted(judged: torch.Tensor, masks: list[torch.Tensor],
                  p: float) -> tuple[int, int] | None:
    """(agreeing, weights) when a later draw is an earlier one moved
    along (a cyclic shift of the judged weights, flattened, by any
    amount): two independent draws agree on each weight with chance
    p^2 + (1 - p)^2, so the best of the shifts agrees on ``agreeing`` of
    ``weights`` with probability at most (shifts) * P(Binomial >=
    agreeing), judged at ALPHA (a union bound over the shifts and the
    pairs of draws); None otherwise. A mask drawn once and rolled from
    call to call passes the test of draws that must differ (red team
    16), not this one."""
    if len(masks) < 2:
        return None
    where = judged.flatten()
    size = int(where.sum())
    if size < 2:
        return None
    signs = [mask.flatten()[where].to(torch.float64) * 2 - 1
             for mask in masks]
    pairs = len(masks) * (len(masks) - 1) // 2
    for first in range(len(signs)):
        for second in range(first + 1, len(signs)):
            agreeing = int(_best_shifts(signs[first][None],
                                        signs[second][None])[0])
            tail = binomial_tail(size, alike(p), agreeing, True)
            if tail * size * pairs <= ALPHA:
                return agreeing, size
    return None


@dataclass(frozen=True)
class MaskWords:
    """How a plug-in's messages name dropout masks: ``prefix`` (a format
    string of ``p``, "With dropout={p:g} in train mode"), the ``blocks``
    ("[seq_len, seq_len] blocks of probs"), what a line is ``of``
    ("of probs"), the ``weights`` ("probabilities"), the ``advice`` and
    the ``lines``, a block's rows and columns ("query rows", "key
    columns")."""

    prefix: str
    blocks: str
    of: str
    weights: str
    advice: str
    lines: tuple[str, str] = ("query rows", "key columns")


def mask_dependence(judged: torch.Tensor, masks: list[torch.Tensor],
                    p: float, words: MaskWords) -> str | None:
    """Why the masks of the draws at rate ``p`` (each [blocks, seq, seq],
    True where a weight was dropped; ``judged`` True where the weight
    without dropout is > 0) are not element-wise independent, or None:
    more whole rows or columns are dropped than chance allows; two
    blocks of a draw share a mask; a kind of position is dropped less
    often than p says; neighbours (in a row, a column, along either
    diagonal) are dropped alike more or less often than chance allows;
    and last (red team 16), two blocks of a draw are one mask moved
    along, a draw is another moved along, or more blocks of every draw
    drop the same number of weights than chance allows. Whole lines
    are tested first: masks of whole rows also make blocks coincide (a
    block of few rows has few masks); the earlier tests name the
    patterns they were written for in their own words."""
    said = words.prefix.format(p=p)
    for dim, what in zip((-1, -2), words.lines):
        dropped, lines, least = whole_lines(judged, masks, dim)
        if dropped and unlikely(lines, p ** least, dropped, True):
            return (f"{said} {dropped} of {lines} whole {what} {words.of} "
                    f"are dropped together (chance would drop about "
                    f"{lines * p ** least:.2g}): {words.advice}, not whole "
                    f"{what} at once.")
    if any(shared_blocks(judged, mask, p) for mask in masks):
        return (f"{said} two {words.blocks} (two heads or two sequences) "
                f"drop exactly the same {words.weights}: {words.advice}, "
                f"not one mask shared by the heads or the batch.")
    for where, kind in position_kinds(*judged.shape[-2:]).items():
        at = judged & kind
        dropped = sum(int((mask & at).sum()) for mask in masks)
        n = int(at.sum()) * len(masks)
        if unlikely(n, p, dropped, False):
            return (f"{said} only {dropped} of {n} {words.weights} {where} "
                    f"are dropped (about {p * n:.0f} expected): "
                    f"{words.advice}; every position may be dropped.")
    for shift, where in NEIGHBOURS.items():
        found = neighbours_agreeing(judged, masks, p, shift)
        if found is not None:
            agreeing, pairs, chance = found
            return (f"{said} {agreeing} of {pairs} pairs of "
                    f"{words.weights} {where} are dropped alike (both or "
                    f"neither; chance would give about "
                    f"{chance * pairs:.0f}): {words.advice}, not a "
                    f"pattern of neighbours.")
    moved = blocks_shifted(judged, masks, p)
    if moved is not None:
        agreeing, size = moved
        return (f"{said} two {words.blocks} (two heads or two sequences) "
                f"are one mask moved along: shifted, one drops or keeps "
                f"{agreeing} of the other's {size} {words.weights} "
                f"(independent drops agree on about "
                f"{alike(p) * size:.0f}): {words.advice}, not one mask "
                f"moved around the heads or the batch.")
    shifted = draws_shifted(judged, masks, p)
    if shifted is not None:
        agreeing, size = shifted
        return (f"{said} one draw is another moved along: shifted, it "
                f"drops or keeps {agreeing} of the same {size} "
                f"{words.weights} (independent draws agree on about "
                f"{alike(p) * size:.0f}): {words.advice}, drawn anew at "
                f"every call, not one mask kept and moved.")
    alike_counts = counts_alike(judged, masks, p)
    if alike_counts is not None:
        largest, blocks, draws = alike_counts
        return (f"{said} {largest} of the {blocks} {words.blocks} drop "
                f"exactly as many {words.weights} as each other, in each "
                f"of {draws} draw(s) (independent drops would vary): "
                f"{words.advice}, not one mask moved around the heads or "
                f"the batch.")
    return None
