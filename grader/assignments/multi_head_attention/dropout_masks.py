"""Statistics of dropout masks: are they element-wise independent?

Used by task2.output's dropout point (checks/test_task2.py,
``independent_masks``); docs/threat-model.md ("Principle 5",
element-wise independence) gives the argument and the false-failure
bounds.
"""
import math

import torch

#: The false-failure budget of one binomial test of independence.
ALPHA = 1e-11


def binomial_tail(n: int, q: float, k: int, upper: bool) -> float:
    """P(X >= k) (``upper``) or P(X <= k) for X ~ Binomial(n, q)."""
    if not 0 < q < 1:
        return 1.0
    js = range(k, n + 1) if upper else range(0, min(k, n) + 1)
    return min(1.0, sum(math.exp(
        math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
        + j * math.log(q) + (n - j) * math.log1p(-q)) for j in js))


def unlikely(n: int, q: float, k: int, upper: bool) -> bool:
    """True when k or more (``upper``), or k or fewer, of n Bernoulli(q)
    draws happen with probability at most ALPHA."""
    return binomial_tail(n, q, k, upper) <= ALPHA


def shared_blocks(judged: torch.Tensor, mask: torch.Tensor) -> bool:
    """True when two fully judged [seq, seq] blocks of one draw drop
    exactly the same probabilities."""
    full = judged.flatten(1).all(1)
    blocks = mask[full].flatten(1)
    return len(blocks) > 1 and len(torch.unique(blocks, dim=0)) < len(blocks)


def whole_lines(judged: torch.Tensor, masks: list[torch.Tensor], dim: int
                ) -> tuple[int, int]:
    """(dropped, lines): how many fully judged query rows (``dim`` -1) or
    key columns (``dim`` -2) of every draw are dropped whole, of how
    many."""
    full = judged.all(dim)
    dropped = sum(int((mask.all(dim) & full).sum()) for mask in masks)
    return dropped, int(full.sum()) * len(masks)


def position_kinds(seq: int) -> dict[str, torch.Tensor]:
    """Kinds of positions of a [seq, seq] block a mask could spare."""
    eye = torch.eye(seq, dtype=torch.bool)
    line = torch.zeros(seq, seq, dtype=torch.bool)
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
