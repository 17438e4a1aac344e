"""Terminal tables of an attribution (``eopt attribute``, ``eopt report`` of a trace)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from eopt.attribute.engine import Attribution
from eopt.report.names import shorten

__all__ = ["render_attribution"]


_KINDS = {
    "USER_REGION": "region",
    "PARALLEL_FOR": "for",
    "PARALLEL_REDUCE": "reduce",
    "PARALLEL_SCAN": "scan",
    "DEEP_COPY": "copy",
}


def _j(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x:.4g}" if abs(x) >= 1 else f"{x:.2g}"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.1%}"


def render_attribution(att: Attribution, console: Console, *, kernels: bool = True) -> None:
    """Print per-region energy, per-series energy, the outside energy and the total.

    Args:
        att: The attribution (one rank, or a sum over ranks).
        console: Where to print.
        kernels: Also list kernels and copies (not only user regions).
    """
    if att.ranks:
        ranks = Table(title="per rank", title_justify="left")
        for col in ("rank", "energy J", "outside J", "time s"):
            ranks.add_column(col, justify="right")
        for r in att.ranks:
            ranks.add_row(
                str(r.rank), _j(r.total_energy_j), _j(r.outside_energy_j), f"{r.total_time_s:.4g}"
            )
        console.print(ranks)
    title = escape(att.source) + (" (sum over ranks)" if att.ranks else "")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("region", overflow="fold", ratio=1, min_width=20)
    for col in ("calls", "time s", "incl J", "excl J", "mean W", "share"):
        table.add_column(col, justify="right")
    shown = [r for r in att.regions if kernels or r.category == "USER_REGION"]
    for r in shown:
        notes = []
        if r.short_calls:
            notes.append(f"{r.short_calls} short")
        if r.flags:
            notes.append("see warnings")
        note = f" [yellow]({escape(', '.join(notes))})[/]" if notes else ""
        kind = (
            ""
            if r.category == "USER_REGION"
            else f" [dim]({_KINDS.get(r.category, r.category.lower())})[/]"
        )
        table.add_row(
            " " * r.depth + escape(shorten(r.name)) + kind + note,
            str(r.calls),
            f"{r.time_s:.3g}",
            _j(r.inclusive_energy_j),
            _j(r.exclusive_energy_j),
            "" if r.mean_power_w is None else f"{r.mean_power_w:.4g}",
            _pct(r.share),
        )
    if len(shown) < len(att.regions):
        hidden = len(att.regions) - len(shown)
        table.add_row(f"[dim]({hidden} kernel names not shown)[/]")
    table.add_row(
        "[dim]outside[/]",
        "",
        "",
        _j(att.outside_energy_j),
        _j(att.outside_energy_j),
        "",
        _pct(att.outside_share),
        end_section=True,
    )
    mean = att.total_energy_j / att.total_time_s if att.total_time_s > 0 else None
    table.add_row(
        "[bold]total[/]",
        "",
        f"{att.total_time_s:.4g}",
        _j(att.total_energy_j),
        "",
        "" if mean is None else f"{mean:.4g}",
        "100.0%",
    )
    console.print(table)
    series = Table(title="power series", title_justify="left")
    for col in ("domain", "device", "energy J", "mean W", "samples", "period ms"):
        series.add_column(col, justify="left" if col == "domain" else "right")
    for s in att.series:
        series.add_row(
            s.domain,
            str(s.device_id),
            f"{s.energy_j:.4g}",
            f"{s.mean_power_w:.4g}",
            str(s.n_samples),
            f"{s.period_s * 1e3:.3g}",
        )
    console.print(series)
    short = sum(r.short_calls for r in att.regions)
    if short:
        console.print(
            f"[yellow]note:[/] {short} call(s) last less than two sampling intervals; their "
            "energy is poorly resolved (whole-board power sampled every "
            f"{min(s.period_s for s in att.series) * 1e3:.3g} ms)"
        )
    for w in att.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
