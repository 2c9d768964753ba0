"""Recovering a constant a submission used, for diagnoses."""
from __future__ import annotations

import math
from collections.abc import Callable


def fit_log_scale(error: Callable[[float], float], low: float = 1e-2,
                  high: float = 1e3, steps: int = 80) -> float:
    """The c in [low, high] minimising ``error(c)``, searched on log c.

    A golden-section search: ``error`` should have one minimum in the range
    (the squared distance between a student's output and the output with
    the scores divided by c). The caller checks the fit is exact.
    """
    def on_log(log_c: float) -> float:
        return error(math.exp(log_c))

    left, right = math.log(low), math.log(high)
    ratio = (math.sqrt(5) - 1) / 2
    a, b = right - ratio * (right - left), left + ratio * (right - left)
    fa, fb = on_log(a), on_log(b)
    for _ in range(steps):
        if fa < fb:
            right, b, fb = b, a, fa
            a = right - ratio * (right - left)
            fa = on_log(a)
        else:
            left, a, fa = a, b, fb
            b = left + ratio * (right - left)
            fb = on_log(b)
    return math.exp((left + right) / 2)
