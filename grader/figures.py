"""Pictures for feedback: a student's maps beside the expected ones.

A plug-in may give ``figures(failed, runs)`` (:attr:`grader.plugin.Plugin.
figures`) returning :class:`MapFigure` records for its failing items; this
module draws them as PNG files with matplotlib (no display needed). What
the maps are (their panels, axes and values) is the plug-in's to say, in
the record's labels.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class MapFigure:
    """Maps in [0, 1] to compare, ``[groups * panels, rows, columns]``
    each: one figure shows every panel of group ``0`` (NaN is drawn red).
    """

    item: str
    case: str
    panels: int
    student: torch.Tensor
    expected: torch.Tensor
    title: str
    panel_label: str = "map"
    value_label: str = "value"
    column_label: str = "column"
    row_label: str = "row"


def draw(figure: MapFigure, path: Path, group: int = 0) -> Path:
    """Render ``figure`` (every panel of one group) to ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    import numpy as np

    panels = figure.panels
    rows = {"yours": figure.student, "expected": figure.expected}
    canvas, axes = plt.subplots(2, panels,
                                figsize=(2.6 * panels + 1.4, 5.8),
                                squeeze=False, layout="constrained")
    colours = matplotlib.colormaps["viridis"].copy()
    colours.set_bad("red")  # NaN: a row whose every score was masked
    image = None
    for row, (label, values) in enumerate(rows.items()):
        maps = values.reshape(-1, panels, values.shape[-2],
                              values.shape[-1])
        for panel in range(panels):
            ax = axes[row][panel]
            data = maps[group, panel].numpy()
            image = ax.imshow(np.ma.masked_invalid(data), vmin=0.0,
                              vmax=1.0, cmap=colours)
            ax.set_title(f"{label}: {figure.panel_label} {panel}",
                         fontsize=9)
            ax.set_xticks(range(data.shape[1]))
            ax.set_yticks(range(data.shape[0]))
            ax.set_xlabel(figure.column_label, fontsize=8)
            ax.set_ylabel(figure.row_label, fontsize=8)
            ax.tick_params(labelsize=7)
    canvas.colorbar(image, ax=axes.ravel().tolist(), shrink=0.7,
                    label=figure.value_label)
    nan = " (red: NaN)" if torch.isnan(figure.student).any() else ""
    width = max(60, int(14 * panels + 20))
    canvas.suptitle(textwrap.fill(f"{figure.item}: {figure.title}{nan}. "
                                  f"On {figure.case}.", width), fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.savefig(path, dpi=90)
    plt.close(canvas)
    return path
