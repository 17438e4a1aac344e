"""The report's section for ``eopt check --measured``: a recorded run against the
schedule's predicted interval, in total and per element."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from eopt.report.page import card, cards
from eopt.report.svg import esc, fmt_interval, fmt_num

__all__ = ["is_measured_check", "measured_check_section"]

# More rows than this make the table a wall: the deviating ones and the first few show.
_MAX_ROWS = 40


def is_measured_check(data: Mapping[str, Any]) -> bool:
    """Whether an ``eopt.check/1`` result tested a recorded run (``--measured``)."""
    return data.get("mode") == "measured"


def _interval(block: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    value = block.get(key)
    if isinstance(value, Sequence) and len(value) == 2:
        low, high = value
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            return float(low), float(high)
    return None


def _num(block: Mapping[str, Any], key: str) -> float:
    value = block.get(key)
    return float(value) if isinstance(value, (int, float)) else math.nan


def _inside(value: float, span: tuple[float, float] | None) -> str:
    if span is None or not math.isfinite(value):
        return ""
    return "inside" if span[0] <= value <= span[1] else "outside"


def measured_check_section(data: Mapping[str, Any]) -> str:
    """HTML: the predicted interval against the measured energy, the tests' level and
    smallest detectable deviation, and one row per element."""
    pred, meas = data.get("predicted") or {}, data.get("measured") or {}
    deviates = bool(data.get("deviation"))
    span = _interval(pred, "interval_energy_j")
    measured = _num(meas, "energy_j")
    confidence = _num(data, "confidence")
    level = f"{confidence:.0%}" if math.isfinite(confidence) else "the stated"
    out = ["<h2>Recorded run against the prediction</h2>"]
    out.append(
        cards(
            [
                card(
                    f"predicted interval ({level} jointly)",
                    fmt_interval(*(span or (None, None)), unit="J"),
                ),
                card("measured per iteration", f"{fmt_num(measured)} J"),
                card(
                    "verdict",
                    "deviates" if deviates else "agrees",
                    good=not deviates,
                    bad=deviates,
                ),
            ]
        )
    )
    test = data.get("test") or {}
    energy = test.get("energy") if isinstance(test, Mapping) else None
    detail = ""
    if isinstance(energy, Mapping):
        detail = (
            f" The total's energy differs by {fmt_num(_num(energy, 'difference'))} J; the test "
            f"detects {fmt_num(_num(energy, 'min_detectable'))} J or more."
        )
    tests = data.get("tests")
    out.append(
        f'<p class="note">{esc(str(data.get("runs", 1)))} iteration(s) recorded in '
        f"{esc(str(data.get('measured_run', 'the run')))}; {esc(str(tests))} tests (total and "
        f"per element) hold together at {esc(level)}, by single-run spreads.{esc(detail)}</p>"
    )
    rows = [e for e in data.get("elements") or [] if isinstance(e, Mapping)]
    shown = [e for e in rows if not e.get("passed")] + [e for e in rows if e.get("passed")]
    shown = shown[:_MAX_ROWS]
    if shown:
        out.append(
            "<table><tr><th>element</th><th>calls</th><th>predicted J</th>"
            f"<th>interval ({esc(level)} jointly)</th><th>measured J</th><th></th>"
            "<th>verdict</th></tr>"
        )
        for e in shown:
            e_span = _interval(e, "interval_energy_j")
            value = _num(e, "measured_energy_j")
            ok = bool(e.get("passed"))
            out.append(
                f"<tr><td>{esc(str(e.get('name', '')))}</td><td>{esc(str(e.get('calls', '')))}"
                f"</td><td>{esc(fmt_num(_num(e, 'predicted_energy_j')))}</td>"
                f"<td>{esc(fmt_interval(*(e_span or (None, None))))}</td>"
                f"<td>{esc(fmt_num(value))}</td><td>{esc(_inside(value, e_span))}</td>"
                f"<td>{'agrees' if ok else '<b>deviates</b>'}</td></tr>"
            )
        out.append("</table>")
        if len(rows) > len(shown):
            out.append(
                f'<p class="note">{len(rows) - len(shown)} more element(s) agree; the JSON '
                "lists them all.</p>"
            )
    missing = data.get("unrecorded") or []
    if missing:
        out.append(
            f'<p class="note">Not in the run: {esc(", ".join(map(str, missing[:6])))}'
            f"{' …' if len(missing) > 6 else ''}.</p>"
        )
    return "\n".join(out)
