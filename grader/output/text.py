"""Text a submission controls, made safe to show (trusted side).

Whatever a submission decides (what it prints, its exception messages, its
file and folder names, a notebook's metadata) reaches reports only through
this module: terminal control characters are removed, so nothing can move
the cursor, clear the screen or hide a line, and such text is shown quoted
or indented under a label, never at the start of a report line, so it can
never pass for a line of the grader's own (``Total: 11 / 10``).
"""
from __future__ import annotations

import re

# ESC sequences (CSI, OSC, and two-character escapes), then every other C0
# control but tab and newline, DEL, and the C1 controls.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST
    r"|\x1b[@-Z\\-_]"                   # two-character escapes
    r"|\x1b")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029"
                       r"\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """``text`` without terminal control characters (tab, newline kept).

    A carriage return becomes a newline, so that a line cannot be
    overwritten on a terminal; every other control character, and the
    bidirectional overrides that reorder what a reader sees, are dropped.
    Text that cannot be encoded (lone surrogates from undecodable file
    names) is shown with escapes.
    """
    text = str(text)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def one_line(text: str, limit: int = 300) -> str:
    """``text`` cleaned and folded to one line of at most ``limit``."""
    flat = " ".join(clean(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def quote(text: str, limit: int = 300) -> str:
    """``text`` as a quoted one-line string: «it said "hi"» -> '"it said
    \\"hi\\""', escapes visible, so it reads as data, never as a report
    line."""
    body = one_line(text, limit).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{body}"'


def indented(text: str, prefix: str = "    | ") -> list[str]:
    """Cleaned lines of ``text``, each behind ``prefix`` (never empty)."""
    return [prefix + line for line in clean(text).rstrip("\n").split("\n")]


def csv_cell(value: object) -> object:
    """A value safe for a spreadsheet cell.

    Text is cleaned and folded to one line; text that a spreadsheet would
    read as a formula (starting with ``=``, ``+``, ``-`` or ``@``; tabs and
    carriage returns are folded away) gets a leading ``'``, and so does
    text that starts with ``'`` itself: no two texts share a cell (``=eve``
    is ``'=eve``, a student named ``'=eve`` is ``''=eve``), and a reader
    takes one ``'`` off (:func:`grader.routes.rows.read_cell`). Numbers
    are kept as they are.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = " ".join(clean(str(value)).split())
    if text[:1] in ("=", "+", "-", "@", "'"):
        text = "'" + text
    return text


def listing(items: list[str], limit: int = 3) -> str:
    """At most ``limit`` items, then "and N more": 'a, b, c and 14 more'."""
    unique = list(dict.fromkeys(items))
    shown = ", ".join(unique[:limit])
    rest = len(unique) - limit
    return shown + (f" and {rest} more" if rest > 0 else "")
