"""Secret size sets for the shape traces (see docs/threat-model.md,
principle 6).

The rubric's size sets are printed (in the rubric, in reports), so code
could behave differently at them. Besides them, every grade traces
``forward`` at sizes derived one-way from the grading seed, which the
submission cannot know in advance: they keep every relation the rubric's
sets share (a size that is the product of two others in every set, an
order every set keeps), and like them make no two sizes, and no size and
an unrelated product, equal, so that a comment's names are told apart.
"""
from __future__ import annotations

import itertools
import random

from grader.plan import derive_seed

#: How many secret size sets a grade traces besides the rubric's.
SECRET_SETS = 1
#: The range a free size is drawn from.
LOW, HIGH = 2, 19


def _relations(sets: tuple[dict[str, int], ...]
               ) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str]]]:
    """The products and strict orders every rubric set keeps."""
    keys = list(sets[0])
    products: dict[str, tuple[str, str]] = {}
    for c in keys:
        for a, b in itertools.combinations([k for k in keys if k != c], 2):
            if c not in products and all(s[c] == s[a] * s[b] for s in sets):
                products[c] = (a, b)
    orders = [(a, b) for a in keys for b in keys if a != b
              and all(s[a] < s[b] for s in sets)]
    return products, orders


def _distinct(sizes: dict[str, int],
              products: dict[str, tuple[str, str]]) -> bool:
    values = list(sizes.values())
    if len(set(values)) != len(values):
        return False
    declared = {frozenset(pair) for pair in products.values()}
    for a, b in itertools.combinations(sizes, 2):
        if frozenset((a, b)) not in declared and sizes[a] * sizes[b] in \
                values:
            return False
    return True


def _draw_free(draw: random.Random, free: list[str],
               orders: list[tuple[str, str]]) -> dict[str, int]:
    """Distinct values for the free sizes, in an order every rubric set
    keeps (a random linear extension of the orders among them)."""
    before = {k: {a for a, b in orders if b == k and a in free}
              for k in free}
    ranked: list[str] = []
    while len(ranked) < len(free):
        ready = [k for k in free if k not in ranked
                 and before[k] <= set(ranked)]
        ranked.append(draw.choice(ready))
    values = sorted(draw.sample(range(LOW, HIGH + 1), len(free)))
    return dict(zip(ranked, values))


def secret_size_sets(sets: tuple[dict[str, int], ...], seed: int,
                     label: str) -> tuple[dict[str, int], ...]:
    """``SECRET_SETS`` size sets drawn from ``seed`` (one-way) for the
    rubric sets ``sets`` of the assignment ``label``; none when no draw
    keeps the rubric's relations."""
    if not sets:
        return ()
    products, orders = _relations(sets)
    free = [k for k in sets[0] if k not in products]
    found: list[dict[str, int]] = []
    draw = random.Random(derive_seed(seed, "shape-sizes", label))
    for _ in range(20000):
        if len(found) == SECRET_SETS:
            break
        sizes = _draw_free(draw, free, orders)
        for c, (a, b) in products.items():
            sizes[c] = sizes[a] * sizes[b]
        sizes = {k: sizes[k] for k in sets[0]}
        if (all(sizes[a] < sizes[b] for a, b in orders)
                and _distinct(sizes, products)
                and sizes not in list(sets) + found):
            found.append(sizes)
    return tuple(found)


def all_size_sets(sets: tuple[dict[str, int], ...], seed: int,
                  label: str) -> tuple[dict[str, int], ...]:
    """The rubric's size sets, then the secret ones."""
    return tuple(sets) + secret_size_sets(sets, seed, label)
