"""The HTML report of ``eopt compare``: does variant B really cost less than A?

One offline page: the reductions with their intervals first, then the per-run series of
both variants in run order with every block of runs in another machine state marked,
then the bootstrap distributions the intervals come from, the table of statistics and
the cautions. It is rendered from the :class:`~eopt.runs.compare.Comparison` and the
runs it was computed from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eopt.model.fileformats import atomic_write_text
from eopt.report.chart_rules import category_colors
from eopt.report.compare_charts import Block, Series, histogram_svg, run_series_svg
from eopt.report.compare_table import reduction_interval, reduction_words
from eopt.report.page import card, cards, html_page
from eopt.report.svg import esc, fmt_interval, fmt_num
from eopt.runs.compare import Comparison, Reduction, RunValues, format_runs

__all__ = [
    "BootstrapDistributions",
    "bootstrap_distributions",
    "render_compare_report",
    "write_compare_report",
]

#: (label, unit, row of the (time, energy, power) arrays, Reductions attribute, the
#: attribute of RunValues and Quantities); energy first, the question a reader brings.
_QUANTITIES = (
    ("energy", "J", 1, "energy", "energy_j"),
    ("time", "s", 0, "time", "time_s"),
    ("mean power", "W", 2, "power", "power_w"),
)


@dataclass(frozen=True)
class BootstrapDistributions:
    """The resampled medians behind a comparison's intervals.

    Attributes:
        median_a: (3, R): A's median time (s), energy (J) and mean power (W) per resample.
        median_b: (3, R): B's.
    """

    median_a: np.ndarray
    median_b: np.ndarray

    @property
    def reduction(self) -> np.ndarray:
        """(3, R): 1 − median_B / median_A per resample (a fraction; > 0: B is lower)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 - self.median_b / self.median_a


def _in_run_order(runs: Sequence[RunValues], labels: Sequence[str], name: str) -> list[RunValues]:
    """``runs`` in the comparison's run order, checked to be the runs it was made of."""
    ordered = sorted(runs, key=lambda r: r.start_ns)  # stable, as the comparison sorts
    if [r.label for r in ordered] != list(labels):
        raise ValueError(
            f"variant {name}: the runs given are not those the comparison was computed "
            f"from ({len(ordered)} runs given, {len(labels)} compared); pass the same runs"
        )
    return ordered


def bootstrap_distributions(
    cmp: Comparison, runs_a: Sequence[RunValues], runs_b: Sequence[RunValues]
) -> BootstrapDistributions:
    """Redraw the comparison's bootstrap resamples: the same runs, seed and number of
    resamples give the very resamples its percentile intervals were taken from.

    Raises:
        ValueError: when the runs are not those of the comparison.
    """
    # The resampling helpers of eopt.runs.compare, drawn in its order (A, then B, from
    # one generator), so the distributions shown are those behind the intervals.
    from eopt.runs.compare import _resampled_stats, _values

    xa = _values(_in_run_order(runs_a, cmp.a.labels, cmp.names[0]))
    xb = _values(_in_run_order(runs_b, cmp.b.labels, cmp.names[1]))
    rng = np.random.default_rng(cmp.seed)
    med_a, _ = _resampled_stats(xa, rng.integers(0, xa.shape[1], (cmp.resamples, xa.shape[1])))
    med_b, _ = _resampled_stats(xb, rng.integers(0, xb.shape[1], (cmp.resamples, xb.shape[1])))
    return BootstrapDistributions(med_a, med_b)


def render_compare_report(
    cmp: Comparison,
    runs_a: Sequence[RunValues],
    runs_b: Sequence[RunValues],
    *,
    title: str | None = None,
    sources: Sequence[str] = (),
) -> str:
    """Render the comparison as one HTML document.

    Args:
        cmp: The result of :func:`eopt.runs.compare.compare_runs`.
        runs_a: The runs of A it was computed from (any order).
        runs_b: The runs of B.
        title: Page title (default: "B against A").
        sources: Input folders, listed under the title.

    Raises:
        ValueError: when the runs are not those of the comparison.
    """
    name_a, name_b = cmp.names
    ordered_a = _in_run_order(runs_a, cmp.a.labels, name_a)
    ordered_b = _in_run_order(runs_b, cmp.b.labels, name_b)
    boot = bootstrap_distributions(cmp, ordered_a, ordered_b)
    colors = category_colors(["A", "B"])
    where = f"region {cmp.region}" if cmp.region else "whole runs"
    heading = title or f"{name_b} (B) against {name_a} (A), {where}"
    body = [f"<h1>{esc(heading)}</h1>", _headline(cmp)]
    if sources:
        body.append(f'<p class="note">Inputs: {esc(", ".join(sources))}</p>')
    body.append(_cards(cmp))
    body.append(_runs_section(cmp, ordered_a, ordered_b, colors))
    body.append(_bootstrap_section(cmp, boot, colors))
    body.append(_statistics(cmp))
    if cmp.without_blocks is not None:
        body.append(_without_blocks(cmp, cmp.without_blocks))
    if cmp.warnings:
        body.append(
            '<h2>Cautions</h2><ul class="warnings">'
            + "".join(f"<li>{esc(w)}</li>" for w in cmp.warnings)
            + "</ul>"
        )
    body.append(
        f'<p class="note">Intervals: {cmp.confidence:.0%}, {esc(cmp.ci_method)}; '
        f"{cmp.resamples} resamples, seed {cmp.seed}. B vs A is 1 − B/A of the statistic: "
        "“less” means B is lower.</p>"
    )
    return html_page(heading, body)


def write_compare_report(
    path: str | Path,
    cmp: Comparison,
    runs_a: Sequence[RunValues],
    runs_b: Sequence[RunValues],
    **options: object,
) -> Path:
    """Render the report (see :func:`render_compare_report`) and write it atomically.

    Returns:
        ``path``.
    """
    text = render_compare_report(cmp, runs_a, runs_b, **options)  # type: ignore[arg-type]
    return atomic_write_text(path, text)


# Sections ------------------------------------------------------------------------------------
def _headline(cmp: Comparison) -> str:
    """The answer first: B's energy against A's, in words, with its interval; and again
    without the blocks of runs in another machine state, when there are any."""
    name_a, name_b = cmp.names
    conf = f"{cmp.confidence:.0%}"
    out = [f'<p class="headline"><strong>{esc(_energy_sentence(cmp))}.</strong></p>']
    notes = [f"{conf} interval of 1 − B/A: {reduction_interval(cmp.reduction.energy)}."]
    wb = cmp.without_blocks
    if wb is not None:
        notes.append(
            f"Without the blocks of runs in another machine state ({wb.a.n} runs of "
            f"{name_a}, {wb.b.n} of {name_b}): {_energy_sentence(wb)[0].lower()}"
            f"{_energy_sentence(wb)[1:]} ({conf} interval "
            f"{reduction_interval(wb.reduction.energy)})."
        )
    out.append(f'<p class="note">{esc(" ".join(notes))}</p>')
    return "".join(out)


def _energy_sentence(cmp: Comparison) -> str:
    """B's median energy against A's in words, e.g. "B uses 19.0 % less energy than A"."""
    r = cmp.reduction.energy
    words, clear = reduction_words(r)
    name_a, name_b = cmp.names
    if r.value is None:
        return f"The energy reduction is undefined: {name_a}'s median energy is 0"
    if clear:
        return f"{name_b} uses {words} energy than {name_a} (median per run)"
    return (
        f"No clear difference in energy: {name_b} uses {words} than {name_a} (median per "
        f"run), but the {cmp.confidence:.0%} interval includes no change"
    )


def _cards(cmp: Comparison) -> str:
    items = [
        card(f"median energy, A ({cmp.a.n} runs)", f"{fmt_num(cmp.a.median.energy_j)} J"),
        card(f"median energy, B ({cmp.b.n} runs)", f"{fmt_num(cmp.b.median.energy_j)} J"),
    ]
    for label, _unit, _i, key, _attr in _QUANTITIES:
        r: Reduction = getattr(cmp.reduction, key)
        words, clear = reduction_words(r)
        items.append(
            card(f"{label}, B vs A", words, good=clear == "less", bad=clear == "more"),
        )
    blocks = len(cmp.state_blocks)
    if cmp.state_detection is not None:
        items.append(
            card(
                "machine-state blocks",
                f"{blocks} found" if blocks else "none found",
                bad=blocks > 0,
            )
        )
    return cards(items)


def _blocks(cmp: Comparison) -> list[Block]:
    out = []
    for blk in cmp.state_blocks:
        index = 0 if blk.variant == "a" else 1
        for lo, hi in _ranges(blk.runs):
            out.append(
                Block(
                    index,
                    lo,
                    hi,
                    f"{blk.variant.upper()} runs {format_runs(range(lo, hi + 1))}: "
                    f"{blk.time_ratio:.2f}× time, {blk.power_ratio:.2f}× power",
                )
            )
    return out


def _ranges(runs: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive run numbers as (first, last) ranges."""
    out: list[tuple[int, int]] = []
    for r in sorted(runs):
        if out and r == out[-1][1] + 1:
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return out


def _runs_section(
    cmp: Comparison, runs_a: list[RunValues], runs_b: list[RunValues], colors: dict[str, str]
) -> str:
    name_a, name_b = cmp.names
    blocks = _blocks(cmp)
    charts = []
    for label, unit, _i, _key, attr in _QUANTITIES:
        series = [
            Series(f"A: {name_a}", colors["A"], [getattr(r, attr) for r in runs_a]),
            Series(f"B: {name_b}", colors["B"], [getattr(r, attr) for r in runs_b]),
        ]
        charts.append(
            run_series_svg(f"{label} per run", f"{label} ({unit})", series, blocks, height=230)
        )
    if cmp.state_blocks:
        note = (
            "Runs in start order. A band marks a block of consecutive runs in another "
            "machine state (its runs ringed); blocks stay in the result above, and the "
            "comparison without them is below."
        )
    elif cmp.state_detection is None:
        note = "Runs in start order. No search for machine-state blocks was made."
    else:
        note = "Runs in start order. No block of runs in another machine state was found."
    return "<h2>Runs in order</h2>" + "".join(charts) + f'<p class="note">{esc(note)}</p>'


def _bootstrap_section(
    cmp: Comparison, boot: BootstrapDistributions, colors: dict[str, str]
) -> str:
    name_a, name_b = cmp.names
    conf = f"{cmp.confidence:.0%}"
    reduction = boot.reduction
    figures = []
    for label, unit, i, key, attr in _QUANTITIES:
        for tag, name, dist, summary in (
            ("A", name_a, boot.median_a[i], cmp.a),
            ("B", name_b, boot.median_b[i], cmp.b),
        ):
            svg = histogram_svg(
                f"bootstrap medians of {label}, {tag}",
                f"median {label} ({unit})",
                [Series(f"{tag}: {name}", colors[tag], dist.tolist())],
                interval=getattr(summary.ci_median, attr),
            )
            figures.append(
                f"<figure>{svg}<figcaption>{esc(tag)} ({esc(name)}): median {esc(label)}"
                "</figcaption></figure>"
            )
        r: Reduction = getattr(cmp.reduction, key)
        lo, hi = r.ci
        svg = histogram_svg(
            f"bootstrap 1 − B/A of the median {label}",
            f"1 − B/A of the median {label} (%)",
            [Series("1 − B/A", "#555555", (100 * reduction[i]).tolist())],
            interval=(None if lo is None else 100 * lo, None if hi is None else 100 * hi),
            reference=0.0,
            reference_label="no change",
        )
        figures.append(
            f"<figure>{svg}<figcaption>B vs A: 1 − B/A of the median {esc(label)}"
            "</figcaption></figure>"
        )
    note = (
        f"Each of the {cmp.resamples} resamples draws every variant's runs again with "
        "replacement (A and B independently) and takes the medians; the shaded interval "
        f"holds the middle {conf} of them, the {conf} intervals of the table. An interval "
        "of 1 − B/A that does not reach 0 is a clear difference."
    )
    return (
        "<h2>Bootstrap distributions</h2>"
        f'<div class="small-multiples">{"".join(figures)}</div><p class="note">{esc(note)}</p>'
    )


def _statistics(cmp: Comparison) -> str:
    name_a, name_b = cmp.names
    conf = f"{cmp.confidence:.0%} CI"
    rows = [
        '<h2>Statistics</h2><table class="stats"><tr><th></th>'
        f"<th>{esc(name_a)} (A, n={cmp.a.n})</th><th>{conf}</th>"
        f"<th>{esc(name_b)} (B, n={cmp.b.n})</th><th>{conf}</th>"
        f"<th>B vs A</th><th>1 − B/A {conf}</th></tr>"
    ]
    for stat in ("median", "mean"):
        red = cmp.reduction if stat == "median" else cmp.reduction_mean
        for label, unit, _i, key, attr in _QUANTITIES:
            r: Reduction = getattr(red, key)
            words, clear = reduction_words(r)
            cls = f' class="{clear}"' if clear else ""
            ci_a = getattr(getattr(cmp.a, f"ci_{stat}"), attr)
            ci_b = getattr(getattr(cmp.b, f"ci_{stat}"), attr)
            rows.append(
                f"<tr><td>{stat} {label} ({unit})</td>"
                f"<td>{esc(fmt_num(getattr(getattr(cmp.a, stat), attr)))}</td>"
                f"<td>{esc(fmt_interval(*ci_a))}</td>"
                f"<td>{esc(fmt_num(getattr(getattr(cmp.b, stat), attr)))}</td>"
                f"<td>{esc(fmt_interval(*ci_b))}</td>"
                f"<td{cls}>{esc(words)}</td><td>{esc(reduction_interval(r))}</td></tr>"
            )
    rows.append("</table>")
    if cmp.state_blocks:
        rows.append(
            "<h3>Blocks of runs in another machine state</h3><table><tr><th>variant</th>"
            "<th>runs</th><th>n</th><th>median time (s)</th><th>mean power (W)</th>"
            "<th>against its other runs</th></tr>"
        )
        for blk in cmp.state_blocks:
            name = name_a if blk.variant == "a" else name_b
            rows.append(
                f"<tr><td>{blk.variant.upper()} {esc(name)}</td>"
                f"<td>{esc(format_runs(blk.runs))}</td><td>{len(blk.runs)}</td>"
                f"<td>{esc(fmt_num(blk.median_time_s))}</td>"
                f"<td>{esc(fmt_num(blk.mean_power_w))}</td>"
                f"<td>{blk.time_ratio:.2f}× time, {blk.power_ratio:.2f}× power</td></tr>"
            )
        rows.append("</table>")
    return "".join(rows)


def _without_blocks(cmp: Comparison, wb: Comparison) -> str:
    conf = f"{cmp.confidence:.0%} CI"
    rows = [
        f"<h3>Without the blocks ({wb.a.n} runs of {esc(cmp.names[0])}, {wb.b.n} of "
        f"{esc(cmp.names[1])})</h3>"
        '<table class="stats"><tr><th></th><th>A</th><th>B</th><th>B vs A</th>'
        f"<th>1 − B/A {conf}</th></tr>"
    ]
    for label, unit, _i, key, attr in _QUANTITIES:
        r: Reduction = getattr(wb.reduction, key)
        words, clear = reduction_words(r)
        cls = f' class="{clear}"' if clear else ""
        rows.append(
            f"<tr><td>median {label} ({unit})</td>"
            f"<td>{esc(fmt_num(getattr(wb.a.median, attr)))}</td>"
            f"<td>{esc(fmt_num(getattr(wb.b.median, attr)))}</td>"
            f"<td{cls}>{esc(words)}</td><td>{esc(reduction_interval(r))}</td></tr>"
        )
    rows.append("</table>")
    return "".join(rows)
