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
from pathlib import Path
from typing import Any

from eopt.model.confidence import c_alpha
from eopt.model.fileformats import atomic_write_text
from eopt.model.schedule import Schedule
from eopt.model.signature import Signature
from eopt.report.breakdown import baseline_of, energy_breakdown
from eopt.report.chart_rules import LOG_SPAN, category_colors
from eopt.report.charts import (
    PlotPoint,
    breakdown_svg,
    frontier_svg,
    gantt_svg,
    power_trace_svg,
)
from eopt.report.check_verdict import refined_verdict
from eopt.report.inputs import FrontierRow, Measurement
from eopt.report.measured_check import is_measured_check, measured_check_section
from eopt.report.page import card, cards, html_page
from eopt.report.region_bands import region_bands
from eopt.report.svg import NO_VARIANCE, esc, fmt_interval, fmt_num, fmt_share

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
    return html_page(title, body)


def write_report(path: str | Path, **kwargs: object) -> Path:
    """Render the report (see :func:`render_report`) and write it to ``path`` atomically."""
    return atomic_write_text(path, render_report(**kwargs))  # type: ignore[arg-type]


# Sections -----------------------------------------------------------------------------------
def _check(data: Mapping[str, Any]) -> str:
    """``eopt check``: prediction against measurement, and what explained a deviation.

    A refinement gets two answers, both shown (see :mod:`eopt.report.check_verdict`):
    whether the means now agree, and whether the one-run interval covers the measurement.
    """
    if is_measured_check(data):
        return measured_check_section(data)
    pred, meas = data.get("predicted", {}), data.get("measured", {})
    out = ["<h2>Prediction check</h2>"]
    deviates = bool(data.get("deviation"))
    items = [
        card("predicted", f"{fmt_num(pred.get('energy_j', math.nan))} J"),
        card("measured", f"{fmt_num(meas.get('energy_j', math.nan))} J"),
        card(
            "first prediction",
            "deviates" if deviates else "agrees",
            good=not deviates,
            bad=deviates,
        ),
    ]
    verdict = refined_verdict(data)
    if verdict is not None:
        if verdict.refined:
            agree = bool(verdict.means_agree)
            items.append(
                card(
                    "refined prediction, by the means",
                    "agrees" if agree else "still deviates",
                    good=agree,
                    bad=not agree,
                )
            )
        if verdict.interval_covers is not None:
            items.append(
                card(
                    "one-run interval",
                    "covers the measurement" if verdict.interval_covers else "does not cover",
                    # Green only when nothing deviates any more: a covering interval
                    # beside a persisting deviation is no all-clear.
                    good=verdict.interval_covers and verdict.resolved,
                    bad=not verdict.interval_covers,
                )
            )
    out.append(cards(items))
    if verdict is not None:
        sentence = verdict.words()
        out.append(f'<p class="verdict">{esc(sentence[0].upper() + sentence[1:])}.</p>')
    runs = meas.get("runs")
    mech = data.get("mechanisms")
    note = f"{runs} runs of the whole schedule" if runs else "Measured runs"
    if mech:
        note += f"; simulator mechanisms on: {', '.join(map(str, mech))}"
    out.append(
        f'<p class="note">{esc(note)}. Means are compared by their standard errors, '
        "energy and time together at the stated confidence; the one-run interval is the "
        "prediction's spread for a single run, a far wider test.</p>"
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


def _headline(schedule: Schedule) -> str:
    """What the plan saves for free and what costs time: the first thing a reader sees."""
    from eopt.plan.solve import savings

    found = savings(schedule)
    if found is None:
        return ""
    joules = (
        f"all-fastest {fmt_num(found.baseline_energy_j)} J → "
        f"{fmt_num(found.at_fastest_energy_j)} J at the fastest makespan → "
        f"{fmt_num(found.at_deadline_energy_j)} J for this plan"
    )
    static = schedule.meta.get("static")
    extra = ""
    if isinstance(static, Mapping):
        per_element = static.get("per_element_energy_j")
        if isinstance(per_element, (int, float)) and per_element > 0:
            cost = schedule.energy / per_element - 1.0
            extra = (
                f" This plan keeps one setting per GPU for the whole run: {cost:+.1%} "
                f"energy against the per-element plan ({fmt_num(per_element)} J)."
            )
    return (
        f'<p class="headline"><strong>{esc(found.headline())}</strong> '
        f"(against every element at its fastest setting).</p>"
        f'<p class="note">{esc(joules)}.{esc(extra)}</p>'
    )


def _summary(schedule: Schedule) -> str:
    low, high = schedule.interval
    items = [
        card("predicted energy", f"{fmt_num(schedule.energy)} J"),
        card(f"{schedule.confidence:.0%} interval", fmt_interval(low, high, "J")),
        card("makespan", f"{fmt_num(schedule.makespan)} s"),
    ]
    if schedule.deadline is not None:
        items.append(card("deadline", f"{fmt_num(schedule.deadline)} s"))
    if schedule.lower_bound is not None:
        items.append(card("lower bound", f"{fmt_num(schedule.lower_bound)} J"))
    if schedule.gap is not None:
        items.append(card("optimality gap", fmt_share(schedule.gap, 1.0, 3) or "unknown"))
    base = baseline_of(schedule)
    if base is not None:
        items.append(
            card(
                "energy saved vs all-fastest",
                f"{fmt_num(base.saved_j)} J ({base.saved_fraction:.1%})",
                good=base.saved_j > 0,
            )
        )
        items.append(
            card(
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
    return "<h2>Summary</h2>" + cards(items) + note


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
    if rows:
        note = _bars_note(points, "Bars: the energy's uncertainty interval.")
        if any(p.kind == "bound" for p in points):
            note += " Dashed: certified lower bound."
    else:
        note = "No frontier table given (write one with `eopt solve PLAN --frontier -o F.csv`)."
        if schedule is not None and schedule.energy_std <= 0:
            note += f" The chosen point has no bar: {NO_VARIANCE}."
    return (
        "<h2>Time–energy frontier</h2>"
        + frontier_svg(points, "Plan time–energy frontier")
        + f'<p class="note">{esc(note)}</p>'
    )


def _bars_note(points: Sequence[PlotPoint], with_bars: str) -> str:
    """``with_bars`` and the widest bar when any point has an uncertainty bar of some
    width (a bar smaller than its marker hides behind it); else why there are none."""
    widest = max(
        (
            (p.high_j - p.low_j) / 2 / p.energy_j
            for p in points
            if p.low_j is not None and p.high_j is not None and p.energy_j > 0
        ),
        default=0.0,
    )
    if widest > 0:
        return (
            f"{with_bars[:-1]} (the widest is ±{widest:.2%} of its energy; a bar smaller "
            "than its marker is hidden by it)."
        )
    return f"No bars: {NO_VARIANCE}."


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
    # One colour per implementation across every panel (the rule of eopt frontier --plot).
    colors = category_colors(sig.impl for sig in library)
    c = c_alpha(0.95)
    figures, all_points = [], []
    for name in names[:MAX_ELEMENT_PLOTS]:
        points: list[PlotPoint] = []
        if name in by_name:
            front = Frontier.from_signatures(by_name[name])
            on = {id(p) for p in front.points}
            for p in front.achievable:
                sig = p.signature
                assert sig is not None
                tip = f"{sig.impl} @ {sig.op_point.label()}: {fmt_num(p.time * 1e3)} ms, "
                tip += f"{fmt_num(p.energy)} J"
                bar = c * p.std_energy if p.var_energy > 0 else None
                points.append(
                    PlotPoint(
                        p.time,
                        p.energy,
                        None if bar is None else p.energy - bar,
                        None if bar is None else p.energy + bar,
                        label=tip,
                        kind="frontier" if id(p) in on else "dominated",
                        group=sig.impl,
                    )
                )
                if (name, sig.impl, sig.op_point.label()) in used:
                    # A ring over the cell: the cell keeps showing whether it is on
                    # the frontier.
                    points.append(
                        PlotPoint(
                            p.time,
                            p.energy,
                            label=f"{tip} (used by the schedule)",
                            kind="chosen",
                            group=sig.impl,
                        )
                    )
        else:
            points = [
                PlotPoint(r.time_s, r.energy_j, r.low_j, r.high_j, label=r.label)
                for r in row_groups[name]
            ]
        all_points += points
        svg = frontier_svg(
            points,
            f"{name} frontier",
            width=470,
            height=300,
            time_unit="ms",
            colors=colors,
            chosen_label="used by the schedule",
        )
        figures.append(f"<figure>{svg}<figcaption>{esc(name)}</figcaption></figure>")
    more = ""
    if len(names) > MAX_ELEMENT_PLOTS:
        rest = ", ".join(names[MAX_ELEMENT_PLOTS:])
        more = (
            f'<p class="note">Not plotted ({len(names) - MAX_ELEMENT_PLOTS} more): {esc(rest)}</p>'
        )
    note = (
        "Every measured (κ, ω) cell, coloured by its implementation κ (the legend names "
        "them); filled: on the frontier, hollow: dominated"
        + (", ringed: used by the schedule. " if used else ". ")
        + _bars_note(all_points, "Bars: 95 % intervals.")
        + f" Axes turn logarithmic where the cells span more than {LOG_SPAN:g}×."
    )
    if used:
        note += (
            " A ringed cell that is hollow is no mistake: a cell dominated in time and "
            "energy when measured alone can be the right choice in a plan. When an element "
            "has slack (it runs beside a longer one, or waits on another device), running "
            "it slower saves dynamic energy without lengthening the makespan: "
            "slack-to-energy conversion (paper §6)."
        )
    return (
        "<h2>Element frontiers</h2>"
        f'<p class="note">{esc(note)}</p>'
        f'<div class="small-multiples">{"".join(figures)}</div>{more}'
    )


def _measurement(m: Measurement) -> str:
    """A measured run: totals, the per-region table, the power trace with region bands.

    Numbers carry four significant digits: a region's energy is known to about a percent
    (the sensor and the sampling), so more digits would only be noise to read past.
    """
    out = ["<h2>Measured run</h2>"]
    items = [
        card("energy", f"{fmt_num(m.total_energy_j)} J"),
        card("time", f"{fmt_num(m.total_time_s)} s"),
    ]
    if m.total_time_s > 0:
        items.append(card("mean power", f"{fmt_num(m.total_energy_j / m.total_time_s)} W"))
    out.append(cards(items))
    if m.device:
        out.append(f'<p class="note">Device: {esc(m.device)}</p>')
    if m.regions:
        total = m.total_energy_j
        exclusive = any(r.exclusive_energy_j is not None for r in m.regions)
        excl_head = "<th>energy (J, exclusive)</th>" if exclusive else ""
        out.append(
            '<table class="regions"><tr><th>region</th><th>calls</th>'
            f"<th>energy (J, inclusive)</th>{excl_head}<th>time (s)</th><th>mean power (W)</th>"
            "<th>share of energy</th></tr>"
        )
        for r in m.regions:
            known = math.isfinite(r.energy_j)
            energy = esc(fmt_num(r.energy_j)) if known else "unknown"
            share = fmt_share(r.energy_j, total)
            power = esc(fmt_num(r.mean_power_w)) if known and r.time_s > 0 else ""
            excl = ""
            if exclusive:
                value = r.exclusive_energy_j
                excl = f"<td>{esc(fmt_num(value)) if value is not None else 'unknown'}</td>"
            out.append(
                f'<tr><td style="padding-left:{10 + 14 * r.depth}px">{esc(r.name)}</td>'
                f"<td>{r.calls}</td><td>{energy}</td>{excl}"
                f"<td>{esc(fmt_num(r.time_s))}</td><td>{power}</td><td>{share}</td></tr>"
            )
        pad = "<td></td>" if exclusive else ""
        if m.outside_energy_j is not None:
            outside_share = fmt_share(m.outside_energy_j, total)
            out.append(
                f"<tr><td>outside every region</td><td></td>"
                f"<td>{esc(fmt_num(m.outside_energy_j))}</td>{pad}<td></td><td></td>"
                f"<td>{outside_share}</td></tr>"
            )
        out.append(
            f'<tr class="total"><td>whole run</td><td></td><td>{esc(fmt_num(m.total_energy_j))}'
            f"</td>{pad}<td>{esc(fmt_num(m.total_time_s))}</td><td></td><td>100%</td></tr>"
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
        bands, left_out = region_bands(m)
        out.append("<h3>Power trace</h3>" + power_trace_svg(m.samples, bands=bands))
        if bands:
            note = (
                "Each band above the trace is one region: a bar per call, the same spans "
                "shaded over the power line. Hover a band for its calls, time and energy."
            )
            if left_out:
                note += f" {left_out} more region(s) have calls but no band."
        else:
            note = "No timed region calls in this measurement: the trace has no bands."
        out.append(f'<p class="note">{esc(note)}</p>')
    return "".join(out)
