"""``eopt compare A B``: does variant B really cost less than A over repeated runs?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from eopt.cli._common import UserError, check_output, console, err_console, write_json
from eopt.cli.options import (
    domain_option,
    force_option,
    json_option,
    json_output_option,
    quiet_option,
    seed_option,
)

__all__ = ["command"]


@click.command("compare")
@click.argument("a_path", metavar="A", type=click.Path())
@click.argument("b_path", metavar="B", type=click.Path())
@click.option("--region", help="Compare this region (or kernel); default: whole runs.")
@domain_option()
@click.option(
    "--edges",
    type=click.Choice(["interpolate", "inside"]),
    default="interpolate",
    show_default=True,
    help="interpolate: power interpolated at region edges; inside: only the sample "
    "intervals wholly inside the region (the Kokkos energy note's convention).",
)
@click.option(
    "--resamples",
    type=click.IntRange(2000, 1_000_000),
    default=2000,
    show_default=True,
    help="Bootstrap resamples.",
)
@click.option(
    "--confidence",
    type=click.FloatRange(0.5, 0.999),
    default=0.95,
    show_default=True,
    help="Coverage of the confidence intervals.",
)
@click.option(
    "--outside",
    type=click.Choice(["regions", "events"]),
    default=None,
    help="What 'outside every region' counts: regions, the Kokkos field note's (kernels "
    "outside every region count as outside; the default where the runs report it), or "
    "events (they count as inside). Both are shown, each named.",
)
@seed_option("Bootstrap seed.")
@json_option("Print eopt.comparison/1 JSON on stdout.")
@json_output_option()
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    metavar="REPORT.html",
    help="Also write an offline HTML report: the runs in order with the machine-state "
    "blocks marked, and the bootstrap distributions.",
)
@quiet_option(expose=True)
@force_option()
def command(
    a_path: str,
    b_path: str,
    region: str | None,
    domain: str | None,
    edges: str,
    resamples: int,
    confidence: float,
    outside: str | None,
    seed: int,
    as_json: bool,
    output: str | None,
    html_path: str | None,
    quiet: bool,
    force: bool,
) -> None:
    """Compare two variants over repeated runs: medians, means, reductions, bootstrap CIs.

    A and B are folders of runs: run sets of `eopt measure --repeat`, folders of trace
    folders (dashboard layout), or folders of the Kokkos NVML connector's raw runs
    (<run>-nvml-power.csv with its regions and kernels). Runs are ordered by start time.

    Per variant: medians and means of time, energy and mean power with seeded bootstrap
    CIs; the reduction of B against A with its CI; the share of energy outside every
    region. Blocks of consecutive runs in another machine state (slower, lower power …)
    are found in run order and reported with their run numbers, with the comparison with
    and without them: they are never dropped silently.

    \b
    Examples:
      eopt compare runs-a runs-b --region solve
      eopt compare fdbscan/ fdbscan-dense/ --region DBSCANCalculation --json
      eopt compare fdbscan/ fdbscan-dense/ --region DBSCANCalculation --edges inside
      eopt compare runs-a runs-b -q            # the answer in one line
      eopt compare runs-a runs-b --region solve --html compare.html
    """
    from eopt.model.trace import TraceError
    from eopt.report.compare_table import render_comparison
    from eopt.runs.compare import compare_runs
    from eopt.runs.variants import load_variant

    check_output(output, force)
    check_output(html_path, force, option="--html")
    try:
        a = load_variant(a_path, region, domain=domain, edges=edges)  # type: ignore[arg-type]
        b = load_variant(b_path, region, domain=domain, edges=edges)  # type: ignore[arg-type]
        result = compare_runs(
            a,
            b,
            region=region,
            names=(_name(a_path), _name(b_path)),
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            outside=outside,
        )
    except (TraceError, ValueError) as exc:
        raise UserError(str(exc)) from None
    data = result.to_dict()
    data["inputs"] = {"a": a_path, "b": b_path, "edges": edges, "domain": domain}
    if output:
        write_json(output, data)
    if as_json:
        write_json("-", data)
    elif quiet:
        click.echo(_verdict(result))
    else:
        render_comparison(result, console)
    if html_path:
        from rich.markup import escape

        from eopt.report.compare_report import write_compare_report

        target = write_compare_report(html_path, result, a, b, sources=[a_path, b_path])
        if not quiet:
            # With --json, stdout carries only the JSON.
            (err_console if as_json else console).print(
                f"Report written to [bold]{escape(str(target))}[/]", highlight=False
            )


def _verdict(result: Any) -> str:
    """The answer in one line (what ``-q`` prints): B's energy against A's, with its CI."""
    from eopt.report.compare_table import reduction_interval, reduction_words

    a, b = result.names
    text, clear = reduction_words(result.reduction.energy)
    said = {"less": "clearly less", "more": "clearly more"}.get(clear, "no clear difference")
    where = f" ({result.region})" if result.region else ""
    return (
        f"{b} vs {a}{where}: median energy {text} ({reduction_interval(result.reduction.energy)}"
        f", {100 * result.confidence:.0f} % CI of 1 − B/A): {said}"
    )


def _name(path: str) -> str:
    return Path(path).name or str(path)
