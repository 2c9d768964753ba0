"""Pictures for feedback: a student's attention maps beside the expected.

An assignment may provide ``figures.py`` with ``figures(failed, runs)``
returning :class:`AttentionFigure` records for its failing items; this
module draws them as PNG files with matplotlib (no display needed).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class AttentionFigure:
    """Attention maps to compare: [batch * heads, seq, seq] each."""

    item: str
    case: str
    num_heads: int
    student: torch.Tensor
    expected: torch.Tensor
    title: str


def draw(figure: AttentionFigure, path: Path, sequence: int = 0) -> Path:
    """Render ``figure`` (every head of one sequence) to ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    import numpy as np

    heads = figure.num_heads
    rows = {"yours": figure.student, "expected": figure.expected}
    # Fixed margins, not a layout engine: constrained layout measured
    # every tick label again and doubled the cost of a picture (a batch
    # draws one per failing attention item).
    canvas, axes = plt.subplots(2, heads, figsize=(2.6 * heads + 1.4, 5.8),
                                squeeze=False)
    colours = matplotlib.colormaps["viridis"].copy()
    colours.set_bad("red")  # NaN: a row whose every score was masked
    image = None
    for row, (label, probs) in enumerate(rows.items()):
        maps = probs.reshape(-1, heads, probs.shape[-2], probs.shape[-1])
        for head in range(heads):
            ax = axes[row][head]
            data = maps[sequence, head].numpy()
            image = ax.imshow(np.ma.masked_invalid(data), vmin=0.0,
                              vmax=1.0, cmap=colours)
            ax.set_title(f"{label}: head {head}", fontsize=9)
            ax.set_xticks(range(data.shape[1]))
            ax.set_yticks(range(data.shape[0]))
            ax.set_xlabel("key position j", fontsize=8)
            ax.set_ylabel("query position i", fontsize=8)
            ax.tick_params(labelsize=7)
    nan = " (red: NaN)" if torch.isnan(figure.student).any() else ""
    width = max(60, int(14 * heads + 20))
    title = textwrap.fill(f"{figure.item}: {figure.title}{nan}. "
                          f"On {figure.case}.", width)
    canvas.suptitle(title, fontsize=9)
    inches = 2.6 * heads + 1.4
    canvas.subplots_adjust(left=0.6 / inches, right=1 - 1.1 / inches,
                           bottom=0.08, wspace=0.35, hspace=0.35,
                           top=0.9 - 0.03 * title.count("\n"))
    bar = canvas.add_axes((1 - 0.8 / inches, 0.2, 0.12 / inches, 0.55))
    canvas.colorbar(image, cax=bar, label="attention probability")
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.savefig(path, dpi=90, pil_kwargs={"compress_level": 1})
    plt.close(canvas)
    return path
