"""Names as tables and charts show them: whole up to a length, shortened beyond it.

A program may name a region with 200 000 characters; a table that prints it whole
spends thousands of lines on one row. Tables and labels shorten such names, keeping
their start and their end (where names of one family differ); JSON outputs and
tooltips keep every name whole.
"""

from __future__ import annotations

__all__ = ["TABLE_NAME_CHARS", "shorten"]

#: The longest name a terminal table prints whole, in characters.
TABLE_NAME_CHARS = 160


def shorten(name: str, most: int = TABLE_NAME_CHARS) -> str:
    """``name`` when it has at most ``most`` characters, else its start and end around
    an ellipsis, ``most`` characters in all.

    Examples:
        >>> shorten("forward", 10)
        'forward'
        >>> shorten("stage0.forward.attention.softmax", 16)
        'stage0.f…softmax'
    """
    if len(name) <= most:
        return name
    if most <= 1:
        return "…"[:most]
    tail = (most - 1) // 2
    head = most - 1 - tail
    return name[:head] + "…" + (name[-tail:] if tail else "")
