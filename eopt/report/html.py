"""The standalone HTML report: one offline file, inline CSS, server-side SVG, no script.

Sections appear for the inputs given: the plan frontier with the chosen point (frontier
table and/or schedule), element frontiers (signature library), the schedule's Gantt
chart and energy breakdown with savings against the all-fastest baseline (schedule), and
the per-region table and power trace (measurement).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from eopt.model.fileformats import atomic_write_text
from eopt.model.schedule import Schedule
from eopt.model.signature import Signature
from eopt.report.breakdown import baseline_of, energy_breakdown
from eopt.report.charts import (
    PlotPoint,
    breakdown_svg,
    frontier_svg,
    gantt_svg,
    power_trace_svg,
)
from eopt.report.inputs import FrontierRow, Measurement
from eopt.report.svg import esc, fmt_num, fmt_share

__all__ = ["render_report", "write_report"]

# At most this many element types get their own frontier plot (a 16-type pipeline
# library would otherwise bury the rest of the report).
MAX_ELEMENT_PLOTS = 12


def render_report(
    *,
    schedule: Schedule | None = None,
    library: Sequence[Signature] | None = None,
    frontier: Sequence[FrontierRow] | None = None,
    measurement: Measurement | None = None,
    check: Mapping[str, Any] | None = None,
    title: str = "eopt report",
    sources: Sequence[str] = (),
) -> str:
    """Render the report as one HTML document.

    Args:
        schedule: A solved schedule (Gantt chart, breakdown, chosen point).
        library: Signatures (per-element frontier plots; cells used by the schedule
            are marked).
        frontier: Rows of a frontier table (plan frontier, or per-element rows).
        measurement: A measured run (per-region table, power trace).
        check: An ``eopt.check/1`` result (prediction against measurement, the
            interactions found, the refined prediction).
        title: Page title.
        sources: Input file names, listed under the title.

    Raises:
        ValueError: when no input is given.
    """
    if schedule is None and not library and not frontier and measurement is None and not check:
        raise ValueError(
            "nothing to report: give at least one of --schedule, --library, --frontier, "
            "--measurement, --check"
        )
    body: list[str] = [f"<h1>{esc(title)}</h1>"]
    if schedule is not None:
        body.append(_headline(schedule))
    if sources:
        body.append(f'<p class="note">Inputs: {esc(", ".join(sources))}</p>')
    if schedule is not None:
        body.append(_summary(schedule))
    plan_rows = [r for r in frontier or () if r.element is None]
    element_rows = [r for r in frontier or () if r.element is not None]
    if plan_rows or schedule is not None:
        body.append(_plan_frontier(plan_rows, schedule))
    if schedule is not None:
        body.append(_gantt(schedule))
        body.append(_breakdown(schedule))
        body.append(_choices(schedule))
    if library or element_rows:
        body.append(_element_frontiers(library or (), element_rows, schedule))
    if measurement is not None:
        body.append(_measurement(measurement))
    if check:
        body.append(_check(check))
    css = resources.files("eopt.report").joinpath("report.css").read_text(encoding="utf-8")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{css}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def write_report(path: str | Path, **kwargs: object) -> Path:
    """Render the report (see :func:`render_report`) and write it to ``path`` atomically."""
    return atomic_write_text(path, render_report(**kwargs))  # type: ignore[arg-type]


# Sections -----------------------------------------------------------------------------------
def _check(data: Mapping[str, Any]) -> str:
    """``eopt check``: prediction against measurement, and what explained a deviation."""
    pred, meas = data.get("predicted", {}), data.get("measured", {})
    out = ["<h2>Prediction check</h2>"]
    deviates = bool(data.get("deviation"))
    cards = [
        _card("predicted", f"{fmt_num(pred.get('energy_j', math.nan))} J"),
        _card("measured", f"{fmt_num(meas.get('energy_j', math.nan))} J"),
        _card("verdict", "deviates" if deviates else "agrees", good=not deviates),
    ]
    if deviates and data.get("refined_covers") is not None:
        covered = bool(data["refined_covers"])
        cards.append(_card("refined", "covers" if covered else "still off", good=covered))
    out.append('<div class="cards">' + "".join(cards) + "</div>")
    runs = meas.get("runs")
    mech = data.get("mechanisms")
    note = f"{runs} runs of the whole schedule" if runs else "Measured runs"
    if mech:
        note += f"; simulator mechanisms on: {', '.join(map(str, mech))}"
    out.append(
        f'<p class="note">{esc(note)}. Means are compared by their standard errors, '
        "energy and time together at the stated confidence.</p>"
    )
    found = data.get("found") or []
    if found:
        out.append(
            "<table><tr><th>elements</th><th>kind</th><th>mechanism</th><th>scope</th>"
            "<th>ΔE</th><th>ΔT</th><th>evidence</th></tr>"
        )
        for f in found:
            sep = " → " if f.get("kind") == "entry" else " ↔ "
            out.append(
                f"<tr><td>{esc(sep.join(map(str, f.get('elements', []))))}</td>"
                f"<td>{esc(str(f.get('kind', '')))}</td><td>{esc(str(f.get('mechanism', '')))}</td>"
                f"<td>{esc(str(f.get('scope', '')))}</td>"
                f"<td>{esc(_pct(f.get('energy_rel')))}</td><td>{esc(_pct(f.get('time_rel')))}</td>"
                f"<td>{esc(str(f.get('evidence', '')))}</td></tr>"
            )
        out.append("</table>")
    refined = data.get("refined")
    if refined:
        out.append(
            f'<p class="note">Refined prediction: {esc(fmt_num(refined.get("energy_j", math.nan)))}'
            f" J after {esc(str(data.get('rounds', 0)))} round(s).</p>"
        )
    return "\n".join(out)


def _pct(value: Any) -> str:
    return f"{value:+.2%}" if isinstance(value, (int, float)) and math.isfinite(value) else ""


def _card(key: str, value: str, good: bool = False) -> str:
    cls = "card good" if good else "card"
    return (
        f'<div class="{cls}"><div class="k">{esc(key)}</div><div class="v">{esc(value)}</div></div>'
    )


def _headline(schedule: Schedule) -> str:
    """What the plan saves for free and what costs time: the first thing a reader sees."""
    from eopt.plan.solve import savings

    found = savings(schedule)
    if found is None:
        return ""
    joules = (
        f"all-fastest {fmt_num(found.baseline_energy_j, 6)} J → "
        f"{fmt_num(found.at_fastest_energy_j, 6)} J at the fastest makespan → "
        f"{fmt_num(found.at_deadline_energy_j, 6)} J for this plan"
    )
    static = schedule.meta.get("static")
    extra = ""
    if isinstance(static, Mapping):
        per_element = static.get("per_element_energy_j")
        if isinstance(per_element, (int, float)) and per_element > 0:
            cost = schedule.energy / per_element - 1.0
            extra = (
                f" This plan keeps one setting per GPU for the whole run: {cost:+.1%} "
                f"energy against the per-element plan ({fmt_num(per_element, 6)} J)."
            )
    return (
        f'<p class="headline"><strong>{esc(found.headline())}</strong> '
        f"(against every element at its fastest setting).</p>"
        f'<p class="note">{esc(joules)}.{esc(extra)}</p>'
    )


def _summary(schedule: Schedule) -> str:
    low, high = schedule.interval
    cards = [
        _card("predicted energy", f"{fmt_num(schedule.energy, 6)} J"),
        _card(
            f"{schedule.confidence:.0%} interval",
            f"{fmt_num(low, 6)} – {fmt_num(high, 6)} J",
        ),
        _card("makespan", f"{fmt_num(schedule.makespan)} s"),
    ]
    if schedule.deadline is not None:
        cards.append(_card("deadline", f"{fmt_num(schedule.deadline)} s"))
    if schedule.lower_bound is not None:
        cards.append(_card("lower bound", f"{fmt_num(schedule.lower_bound, 6)} J"))
    if schedule.gap is not None:
        cards.append(_card("optimality gap", fmt_share(schedule.gap, 1.0, 3) or "unknown"))
    base = baseline_of(schedule)
    if base is not None:
        cards.append(
            _card(
                "energy saved vs all-fastest",
                f"{fmt_num(base.saved_j)} J ({base.saved_fraction:.1%})",
                good=base.saved_j > 0,
            )
        )
        cards.append(
            _card(
                "time added",
                f"{fmt_num(base.time_added_s)} s ({base.time_added_fraction:+.1%})",
            )
        )
    solver = schedule.solver
    note = ""
    if solver:
        parts = [f"{k}: {solver[k]}" for k in ("name", "method", "status") if k in solver]
        if "wall_time_s" in solver and isinstance(solver["wall_time_s"], (int, float)):
            parts.append(f"wall time {float(solver['wall_time_s']):.3g} s")
        note = f'<p class="note">Solver — {esc("; ".join(parts))}</p>'
    return '<h2>Summary</h2><div class="cards">' + "".join(cards) + "</div>" + note


def _plan_frontier(rows: Sequence[FrontierRow], schedule: Schedule | None) -> str:
    points = [
        PlotPoint(
            r.time_s,
            r.energy_j,
            r.low_j,
            r.high_j,
            label=f"{fmt_num(r.time_s)} s, {fmt_num(r.energy_j)} J {r.label}".strip(),
        )
        for r in rows
    ]
    points += [
        PlotPoint(r.time_s, r.lower_bound_j, kind="bound")
        for r in rows
        if r.lower_bound_j is not None
    ]
    if schedule is not None:
        low, high = schedule.interval
        points.append(
            PlotPoint(
                schedule.makespan,
                schedule.energy,
                low,
                high,
                label=f"chosen: {fmt_num(schedule.makespan)} s, {fmt_num(schedule.energy)} J",
                kind="chosen",
            )
        )
        base = baseline_of(schedule)
        if base is not None:
            points.append(
                PlotPoint(
                    base.makespan_s,
                    base.energy_j,
                    label=f"baseline: {fmt_num(base.makespan_s)} s, {fmt_num(base.energy_j)} J",
                    kind="baseline",
                )
            )
    note = (
        "Bars: the energy's uncertainty interval. Dashed: certified lower bound."
        if rows
        else "No frontier table given (write one with `eopt solve PLAN --frontier -o F.csv`)."
    )
    return (
        "<h2>Time–energy frontier</h2>"
        + frontier_svg(points, "Plan time–energy frontier")
        + f'<p class="note">{esc(note)}</p>'
    )


def _gantt(schedule: Schedule) -> str:
    return (
        "<h2>Schedule</h2>"
        + gantt_svg(schedule)
        + '<p class="note">Each bar is an element, coloured by its SM clock (or power limit); '
        "hatched: the device is idle (drawing its idle power s̄). Hover for details.</p>"
    )


def _breakdown(schedule: Schedule) -> str:
    b = energy_breakdown(schedule)
    rows = [(f"dynamic: {t}", v) for t, v in b.dynamic_by_type.items()]
    rows.append(("static while busy (s·T)", b.static_busy_j))
    if b.unsplit_j > 0:
        rows.append(("elements (static/dynamic split unknown)", b.unsplit_j))
    rows.append(("idle (s̄ · gaps)", b.idle_j))
    if b.transitions_j > 0:
        rows.append((f"setting changes ({b.transitions})", b.transitions_j))
    table = ["<table><tr><th>part</th><th>energy (J)</th><th>share</th></tr>"]
    for label, value in rows:
        table.append(
            f"<tr><td>{esc(label)}</td><td>{esc(fmt_num(value, 6))}</td>"
            f"<td>{fmt_share(value, b.total_j)}</td></tr>"
        )
    table.append(
        f'<tr class="total"><td>total</td><td>{esc(fmt_num(b.total_j, 6))}</td><td>100%</td></tr>'
        "</table>"
    )
    parts = {
        "dynamic": b.dynamic_j,
        "static (busy)": b.static_busy_j,
        "unsplit": b.unsplit_j,
        "idle": b.idle_j,
        "setting changes": b.transitions_j,
    }
    notes = [f"Static over the makespan (busy + idle): {fmt_num(b.static_over_makespan_j, 6)} J."]
    if abs(b.total_j - b.predicted_j) > 1e-6 * max(1.0, abs(b.predicted_j)):
        notes.append(
            f"The schedule file's predicted energy is {fmt_num(b.predicted_j, 6)} J; the "
            f"parts here sum to {fmt_num(b.total_j, 6)} J."
        )
    base = baseline_of(schedule)
    if base is not None:
        notes.append(
            f"Against {base.label} ({fmt_num(base.energy_j, 6)} J in "
            f"{fmt_num(base.makespan_s, 6)} s): saves {fmt_num(base.saved_j, 6)} J "
            f"({base.saved_fraction:.2%}) for {fmt_num(base.time_added_s, 4)} s more "
            f"({base.time_added_fraction:+.2%})."
        )
    return (
        "<h2>Energy breakdown</h2>"
        + breakdown_svg(parts)
        + "".join(table)
        + "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
    )


def _choices(schedule: Schedule) -> str:
    counts = Counter((e.type, e.impl, e.op_point.label()) for e in schedule.elements)
    table = [
        "<h3>Choices per element type</h3><table><tr><th>element type</th><th>κ</th>"
        "<th>ω</th><th>count</th></tr>"
    ]
    for (etype, impl, label), n in sorted(counts.items()):
        table.append(
            f"<tr><td>{esc(etype)}</td><td>{esc(impl)}</td><td>{esc(label)}</td><td>{n}</td></tr>"
        )
    table.append("</table>")
    return "".join(table)


def _element_frontiers(
    library: Sequence[Signature], rows: Sequence[FrontierRow], schedule: Schedule | None
) -> str:
    from eopt.calculus.frontier import Frontier

    used: set[tuple[str, str, str]] = set()
    if schedule is not None:
        used = {(e.type, e.impl, e.op_point.label()) for e in schedule.elements}
    by_name: dict[str, list[Signature]] = {}
    for sig in library:
        by_name.setdefault(sig.name, []).append(sig)
    row_groups: dict[str, list[FrontierRow]] = {}
    for r in rows:
        row_groups.setdefault(str(r.element), []).append(r)
    names = list(dict.fromkeys([*by_name, *row_groups]))
    figures = []
    for name in names[:MAX_ELEMENT_PLOTS]:
        points: list[PlotPoint] = []
        if name in by_name:
            front = Frontier.from_signatures(by_name[name])
            c = 1.959963984540054  # 95 % two-sided normal quantile
            on = {id(p) for p in front.points}
            for p in front.achievable:
                sig = p.signature
                assert sig is not None
                chosen = (name, sig.impl, sig.op_point.label()) in used
                kind = "chosen" if chosen else ("frontier" if id(p) in on else "dominated")
                points.append(
                    PlotPoint(
                        p.time,
                        p.energy,
                        p.energy - c * p.std_energy if p.var_energy > 0 else None,
                        p.energy + c * p.std_energy if p.var_energy > 0 else None,
                        label=f"{sig.impl} @ {sig.op_point.label()}: {fmt_num(p.time * 1e3)} ms, "
                        f"{fmt_num(p.energy)} J" + (" (chosen)" if chosen else ""),
                        kind=kind,
                    )
                )
            # A chosen cell on the frontier should still draw the frontier line.
            points += [
                PlotPoint(p.time, p.energy, kind="frontier")
                for p in front.points
                if p.signature is not None
                and (name, p.signature.impl, p.signature.op_point.label()) in used
            ]
        else:
            points = [
                PlotPoint(r.time_s, r.energy_j, r.low_j, r.high_j, label=r.label)
                for r in row_groups[name]
            ]
        svg = frontier_svg(points, f"{name} frontier", width=470, height=280, time_unit="ms")
        figures.append(f"<figure>{svg}<figcaption>{esc(name)}</figcaption></figure>")
    more = ""
    if len(names) > MAX_ELEMENT_PLOTS:
        rest = ", ".join(names[MAX_ELEMENT_PLOTS:])
        more = (
            f'<p class="note">Not plotted ({len(names) - MAX_ELEMENT_PLOTS} more): {esc(rest)}</p>'
        )
    return (
        "<h2>Element frontiers</h2>"
        '<p class="note">Every measured (κ, ω) cell; grey: dominated, blue: on the frontier, '
        "red: used by the schedule. Bars: 95 % intervals. A red point on a grey one is no "
        "mistake: a cell dominated in time and energy when measured alone can be the right "
        "choice in a plan. When an element has slack (it runs beside a longer one, or waits "
        "on another device), running it slower saves dynamic energy without lengthening the "
        "makespan: slack-to-energy conversion (paper §6).</p>"
        f'<div class="small-multiples">{"".join(figures)}</div>{more}'
    )


def _measurement(m: Measurement) -> str:
    out = ["<h2>Measured run</h2>"]
    cards = [
        _card("energy", f"{fmt_num(m.total_energy_j)} J"),
        _card("time", f"{fmt_num(m.total_time_s)} s"),
    ]
    if m.total_time_s > 0:
        cards.append(_card("mean power", f"{fmt_num(m.total_energy_j / m.total_time_s)} W"))
    out.append('<div class="cards">' + "".join(cards) + "</div>")
    if m.device:
        out.append(f'<p class="note">Device: {esc(m.device)}</p>')
    if m.regions:
        total = m.total_energy_j
        exclusive = any(r.exclusive_energy_j is not None for r in m.regions)
        excl_head = "<th>energy (J, exclusive)</th>" if exclusive else ""
        out.append(
            "<table><tr><th>region</th><th>calls</th><th>energy (J, inclusive)</th>"
            f"{excl_head}<th>time (s)</th><th>mean power (W)</th><th>share of energy</th></tr>"
        )
        for r in m.regions:
            known = math.isfinite(r.energy_j)
            energy = esc(fmt_num(r.energy_j, 6)) if known else "unknown"
            share = fmt_share(r.energy_j, total)
            power = esc(fmt_num(r.mean_power_w)) if known and r.time_s > 0 else ""
            excl = ""
            if exclusive:
                value = r.exclusive_energy_j
                excl = f"<td>{esc(fmt_num(value, 6)) if value is not None else 'unknown'}</td>"
            out.append(
                f'<tr><td style="padding-left:{10 + 14 * r.depth}px">{esc(r.name)}</td>'
                f"<td>{r.calls}</td><td>{energy}</td>{excl}"
                f"<td>{esc(fmt_num(r.time_s, 6))}</td><td>{power}</td><td>{share}</td></tr>"
            )
        pad = "<td></td>" if exclusive else ""
        if m.outside_energy_j is not None:
            outside_share = fmt_share(m.outside_energy_j, total)
            out.append(
                f"<tr><td>outside every region</td><td></td>"
                f"<td>{esc(fmt_num(m.outside_energy_j, 6))}</td>{pad}<td></td><td></td>"
                f"<td>{outside_share}</td></tr>"
            )
        out.append(
            f'<tr class="total"><td>whole run</td><td></td><td>{esc(fmt_num(m.total_energy_j, 6))}'
            f"</td>{pad}<td>{esc(fmt_num(m.total_time_s, 6))}</td><td></td><td>100%</td></tr>"
            "</table>"
        )
        note = "Inclusive: a region's energy contains its nested regions'."
        if exclusive:
            note += (
                " Exclusive: without them; events that overlap without nesting share the "
                "overlap, so exclusive energies plus the outside energy make the total."
            )
        out.append(f'<p class="note">{esc(note)}</p>')
        for w in m.meta.get("warnings", []) or []:
            out.append(f'<p class="note">warning: {esc(str(w))}</p>')
    if m.samples:
        out.append("<h3>Power trace</h3>" + power_trace_svg(m.samples))
    return "".join(out)
