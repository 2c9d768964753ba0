"""Pictures for feedback: a student's maps beside the expected ones.

A plug-in may give ``figures(failed, runs)`` (:attr:`grader.plugin.Plugin.
figures`) returning :class:`MapFigure` records for its failing items; this
module draws them as PNG files with Pillow, in matplotlib's viridis colours
and DejaVu Sans (no display needed; see :func:`draw`). What the maps are
(their panels, axes and values) is the plug-in's to say, in the record's
labels.
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


# Layout of a picture, in pixels.
_CELL = 26          # one value of a map (less for long sequences)
_GAP = 46           # between two panels
_LEFT = 84          # room for the row label and the row numbers
_TOP = 64           # the title (more when it wraps)
_ROW = 44           # a row's label above its maps, its "key position j" below
_BAR = 110          # the colour bar and its labels


def _font(size: int):
    """DejaVu Sans (matplotlib's own font) at ``size`` pixels."""
    from matplotlib import font_manager
    from PIL import ImageFont

    try:
        return ImageFont.truetype(font_manager.findfont("DejaVu Sans"), size)
    except OSError:
        return ImageFont.load_default()


def _colours(values, nan_mask):
    """viridis colours (uint8 RGB) of ``values`` in [0, 1]; NaN red."""
    import matplotlib
    import numpy as np

    table = (matplotlib.colormaps["viridis"](np.linspace(0, 1, 256))[:, :3]
             * 255).astype(np.uint8)
    index = np.clip(np.nan_to_num(values, nan=0.0), 0.0, 1.0)
    rgb = table[(index * 255).round().astype(int)]
    rgb[nan_mask] = (255, 0, 0)
    return rgb


def _two_lines(text: str) -> tuple[str, ...]:
    """A label on at most two lines: its first word, then the rest."""
    first, _, rest = text.partition(" ")
    return (first, rest) if rest else (first,)


def draw(figure: MapFigure, path: Path, group: int = 0) -> Path:
    """Render ``figure`` (every panel of one group) to ``path``: the
    student's maps above the expected ones, panel by panel, one square per
    value (viridis, 0 to 1; red: NaN), row and column numbers, the item,
    the title and the case above, the record's labels on the axes.

    Drawn with Pillow, cell by cell: a batch draws one picture per failing
    item with maps, and matplotlib's axes (each tick an artist of its own)
    cost a third of a second a picture, more than grading the
    submission."""
    import numpy as np
    from PIL import Image, ImageDraw

    heads = figure.panels
    rows = {"yours": figure.student, "expected": figure.expected}
    seq_q, seq_k = figure.student.shape[-2], figure.student.shape[-1]
    nan = " (red: NaN)" if torch.isnan(figure.student).any() else ""
    cell = max(8, min(_CELL, 320 // max(seq_q, seq_k, 1)))
    step = -(-14 // cell)  # a number every `step` rows and columns
    block_w, block_h = seq_k * cell, seq_q * cell
    width = max(_LEFT + heads * block_w + (heads - 1) * _GAP + _BAR, 560)
    title = textwrap.wrap(f"{figure.item}: {figure.title}{nan}. "
                          f"On {figure.case}.", max(60, width // 8))
    top = _TOP + 16 * (len(title) - 1)
    height = top + 2 * (block_h + 2 * _ROW) + 10
    canvas = Image.new("RGB", (width, height), "white")
    pen = ImageDraw.Draw(canvas)
    small, label, heading = _font(10), _font(12), _font(13)
    for number, line in enumerate(title):
        pen.text((width // 2, 14 + 16 * number), line, fill="black",
                 font=heading, anchor="mt")
    for row, (name, probs) in enumerate(rows.items()):
        maps = probs.detach().to(torch.float32).reshape(
            -1, heads, seq_q, seq_k)[group].numpy()
        y0 = top + row * (block_h + 2 * _ROW) + _ROW // 2
        for number, word in enumerate(_two_lines(figure.row_label)):
            pen.text((6, y0 + block_h // 2 + 12 * number - 6), word,
                     fill="black", font=small, anchor="lm")
        for head in range(heads):
            x0 = _LEFT + head * (block_w + _GAP)
            data = maps[head]
            rgb = _colours(data, ~np.isfinite(data))
            cells = rgb.repeat(cell, axis=0).repeat(cell, axis=1)
            canvas.paste(Image.fromarray(cells, "RGB"), (x0, y0))
            pen.rectangle((x0 - 1, y0 - 1, x0 + block_w, y0 + block_h),
                          outline="black")
            pen.text((x0 + block_w // 2, y0 - 6),
                     f"{name}: {figure.panel_label} {head}",
                     fill="black", font=label, anchor="mb")
            for j in range(0, seq_k, step):
                pen.text((x0 + j * cell + cell // 2, y0 + block_h + 3),
                         str(j), fill="black", font=small, anchor="mt")
            for i in range(0, seq_q, step):
                pen.text((x0 - 4, y0 + i * cell + cell // 2), str(i),
                         fill="black", font=small, anchor="rm")
            pen.text((x0 + block_w // 2, y0 + block_h + 17),
                     figure.column_label, fill="black", font=small,
                     anchor="mt")
    # The colour bar: 0 at the bottom, 1 at the top.
    bar_x, bar_top = width - _BAR + 30, top + _ROW // 2
    bar_h = max(2 * block_h, 120)
    ramp = _colours(np.linspace(1, 0, bar_h)[:, None].repeat(14, 1),
                    np.zeros((bar_h, 14), bool))
    canvas.paste(Image.fromarray(ramp, "RGB"), (bar_x, bar_top))
    pen.rectangle((bar_x - 1, bar_top - 1, bar_x + 14, bar_top + bar_h),
                  outline="black")
    for value in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        y = bar_top + round((1 - value) * (bar_h - 1))
        pen.line((bar_x + 14, y, bar_x + 18, y), fill="black")
        pen.text((bar_x + 21, y), f"{value:.1f}", fill="black", font=small,
                 anchor="lm")
    for number, word in enumerate(_two_lines(figure.value_label)):
        pen.text((bar_x + 7, bar_top + bar_h + 6 + 12 * number), word,
                 fill="black", font=small, anchor="mt")
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path, format="PNG", compress_level=1)
    return path
