"""The shell every eopt HTML report shares: one offline document with inline CSS, no
script, and the summary cards its sections open with."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

from eopt.report.svg import esc

__all__ = ["card", "cards", "html_page"]


def html_page(title: str, body: Sequence[str]) -> str:
    """One standalone HTML document: ``title`` and the ``body`` parts (already HTML)."""
    css = resources.files("eopt.report").joinpath("report.css").read_text(encoding="utf-8")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{css}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def card(key: str, value: str, good: bool = False, *, bad: bool = False) -> str:
    """A summary card: ``key`` above its ``value`` (green when ``good``, red when ``bad``)."""
    cls = "card good" if good else "card bad" if bad else "card"
    return (
        f'<div class="{cls}"><div class="k">{esc(key)}</div><div class="v">{esc(value)}</div></div>'
    )


def cards(items: Sequence[str]) -> str:
    """A row of cards."""
    return '<div class="cards">' + "".join(items) + "</div>"
