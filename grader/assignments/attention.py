"""What the attention plug-ins share (``attention_basics`` and
``multi_head_attention``): naming a scale constant a submission used, the
diagnosis it means, and the words of an attention-map picture. A plug-in
module, not a generic one: it may name attention."""
from __future__ import annotations

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
