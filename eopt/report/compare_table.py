"""Terminal tables of ``eopt compare``: B against A, with intervals, blocks and cautions."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from eopt.report.names import shorten
from eopt.report.svg import fmt_interval, fmt_num
from eopt.runs.compare import Comparison, Intervals, Reduction, format_runs

__all__ = ["reduction_interval", "reduction_words", "render_comparison"]

#: Table row of each "outside every region" definition (eopt.runs.compare.OUTSIDE_DEFINITIONS):
#: the field note's counts kernels outside every region as outside.
_OUTSIDE_ROWS = {
    "regions": "outside every region, note's (median share)",
    "events": "outside every event (median share)",
}

_ROWS = (
    ("time s", "time_s", "time"),
    ("energy J", "energy_j", "energy"),
    ("power W", "power_w", "power"),
)


def _num(x: float | None) -> str:
    return "n/a" if x is None else fmt_num(x)


def _interval(ci: tuple[float | None, float | None]) -> str:
    if ci[0] is None or ci[1] is None:
        return f"{_num(ci[0])} – {_num(ci[1])}"
    return fmt_interval(ci[0], ci[1])  # "no variance measured" for one of no width


def reduction_words(r: Reduction) -> tuple[str, str]:
    """A reduction in words and what its interval says.

    Returns:
        (``"14.4 % less"`` / ``"3.0 % more"`` / ``"n/a"``, ``"less"`` when the interval
        lies above 0 (B is clearly lower), ``"more"`` when below, ``""`` otherwise).
    """
    if r.value is None:
        return "n/a", ""
    text = f"{100 * abs(r.value):.1f} % {'less' if r.value >= 0 else 'more'}"
    lo, hi = r.ci
    if lo is not None and hi is not None and (lo > 0 or hi < 0):
        return text, "less" if lo > 0 else "more"
    return text, ""


def reduction_interval(r: Reduction) -> str:
    """The interval of 1 − B/A in percent, e.g. ``+12.0 % – +16.1 %``."""
    lo, hi = r.ci
    if lo is None or hi is None:
        return "n/a"
    return f"{100 * lo:+.1f} % – {100 * hi:+.1f} %"


def _reduction(r: Reduction) -> str:
    """A reduction in words, coloured when its interval excludes 0 (a clear difference)."""
    text, clear = reduction_words(r)
    if clear:
        return f"[green]{text}[/]" if clear == "less" else f"[red]{text}[/]"
    return text


def _stat_rows(table: Table, cmp: Comparison, stat: str) -> None:
    """Rows of one statistic (``median`` or ``mean``) of the three quantities."""
    red = cmp.reduction if stat == "median" else cmp.reduction_mean
    for i, (label, attr, key) in enumerate(_ROWS):
        ci_a: Intervals = getattr(cmp.a, f"ci_{stat}")
        ci_b: Intervals = getattr(cmp.b, f"ci_{stat}")
        r: Reduction = getattr(red, key)
        table.add_row(
            f"{stat} {label}",
            _num(getattr(getattr(cmp.a, stat), attr)),
            _interval(getattr(ci_a, attr)),
            _num(getattr(getattr(cmp.b, stat), attr)),
            _interval(getattr(ci_b, attr)),
            _reduction(r),
            reduction_interval(r),
            end_section=i == len(_ROWS) - 1,
        )


def _main_table(cmp: Comparison, title: str) -> Table:
    na, nb = escape(cmp.names[0]), escape(cmp.names[1])
    conf = f"{cmp.confidence:.0%} CI"
    table = Table(title=title, title_justify="left")
    for col in (
        "",
        f"{na} (n={cmp.a.n})",
        conf,
        f"{nb} (n={cmp.b.n})",
        conf,
        "B vs A",
        f"1 − B/A {conf}",
    ):
        table.add_column(col, justify="left" if col == "" else "right")
    _stat_rows(table, cmp, "median")
    _stat_rows(table, cmp, "mean")
    first = cmp.a.outside_definition
    other = "events" if first == "regions" else "regions"
    for definition, shares in (
        (first, [cmp.a.outside_share, cmp.b.outside_share]),
        (other, [cmp.a.outside_other, cmp.b.outside_other]),
    ):
        if all(s is None for s in shares):
            continue
        cells = []
        for s, n in zip(shares, (cmp.a.n, cmp.b.n), strict=True):
            known = "" if s is None or s.n == n else f" ({s.n} runs)"
            cells.append("unknown" if s is None else f"{s.median:.1%}{known}")
        table.add_row(_OUTSIDE_ROWS[definition], cells[0], "", cells[1], "", "", "")
    return table


def _without_table(cmp: Comparison, wb: Comparison) -> Table:
    """The medians again over the runs outside every block."""
    table = Table(
        title=escape(
            f"without the blocks ({wb.a.n} runs of {cmp.names[0]}, {wb.b.n} of {cmp.names[1]})"
        ),
        title_justify="left",
    )
    conf = f"{cmp.confidence:.0%} CI"
    for col in ("", escape(cmp.names[0]), escape(cmp.names[1]), "B vs A", f"1 − B/A {conf}"):
        table.add_column(col, justify="left" if col == "" else "right")
    for label, attr, key in _ROWS:
        r: Reduction = getattr(wb.reduction, key)
        table.add_row(
            f"median {label}",
            _num(getattr(wb.a.median, attr)),
            _num(getattr(wb.b.median, attr)),
            _reduction(r),
            reduction_interval(r),
        )
    return table


def render_comparison(cmp: Comparison, console: Console) -> None:
    """Print a comparison: statistics with CIs, reductions, blocks, and cautions.

    Args:
        cmp: The result of :func:`eopt.runs.compare.compare_runs`.
        console: Where to print (e.g. ``Console(record=True)`` to capture the text).
    """
    where = f"region {shorten(cmp.region)}" if cmp.region else "whole runs"
    title = escape(
        f"{cmp.names[1]} (B) against {cmp.names[0]} (A), {where}: "
        f"bootstrap percentile CIs, {cmp.resamples} resamples, seed {cmp.seed}"
    )
    console.print(_main_table(cmp, title))
    console.print("[dim]B vs A: 1 − B/A of the statistic; 'less' means B is lower[/]")

    if cmp.state_blocks:
        blocks = Table(
            title="blocks of runs in another machine state (run order, 1-based; kept above)",
            title_justify="left",
        )
        for col in ("variant", "runs", "n", "median time s", "mean power W", "vs its other runs"):
            blocks.add_column(col, justify="left" if col in ("variant", "runs") else "right")
        for blk in cmp.state_blocks:
            name = cmp.names[0] if blk.variant == "a" else cmp.names[1]
            blocks.add_row(
                f"{blk.variant.upper()} {escape(shorten(name))}",
                format_runs(blk.runs),
                str(len(blk.runs)),
                fmt_num(blk.median_time_s),
                fmt_num(blk.mean_power_w),
                f"{blk.time_ratio:.2f}× time, {blk.power_ratio:.2f}× power",
            )
        console.print(blocks)
    elif cmp.state_detection is None:
        console.print("[dim]no search for machine-state blocks was made[/]")
    else:
        console.print("[dim]no block of runs in another machine state was found[/]")

    wb = cmp.without_blocks
    if wb is not None:
        console.print(_without_table(cmp, wb))
    for w in cmp.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
