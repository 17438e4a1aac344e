"""``eopt frontier``: the time–energy Pareto frontier of each element in a library."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from eopt.cli._common import Number, UserError, console, write_json
from eopt.cli.options import dominance_option, json_option, quiet_option

if TYPE_CHECKING:
    from eopt.calculus.frontier import Frontier
    from eopt.model.library import Library

__all__ = ["command"]


def _frontiers(
    library: Library, elements: tuple[str, ...], dominance: str, confidence: float
) -> dict[str, Frontier]:
    from eopt.calculus.frontier import Frontier

    names = list(elements) or library.names()
    return {
        name: Frontier.from_signatures(library.by_name(name), dominance, confidence)
        for name in names
    }


def _rows(frontiers: dict[str, Frontier]) -> list[dict[str, Any]]:
    return [
        {"element": name, **row} for name, front in frontiers.items() for row in front.to_rows()
    ]


@click.command("frontier")
@click.argument(
    "library_file", metavar="LIB.jsonl", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option(
    "--element", "elements", multiple=True, help="Element name (repeatable; default: all)."
)
@dominance_option("interval: drop a cell only when intervals separate; point: compare means.")
@click.option(
    "--confidence",
    type=Number(float, 0, 1, lo_open=True, hi_open=True),
    default=0.95,
    show_default=True,
    help="Confidence of the intervals, between 0 and 1 (e.g. 0.95).",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a figure (.png, .svg or .pdf): one panel per element, a colour per "
    "implementation, hollow markers for dominated cells, frontier cells labelled with "
    "their operating point, log axes when cells span more than 5×.",
)
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the rows as CSV.",
)
@json_option("Print the rows as JSON instead of tables.")
@quiet_option("No tables or 'Wrote' lines; files are still written.")
def command(
    library_file: Path,
    elements: tuple[str, ...],
    dominance: str,
    confidence: float,
    plot: Path | None,
    csv_path: Path | None,
    as_json: bool,
) -> None:
    """Print the time–energy Pareto frontier of each element of a signature library.

    Each element's (κ, ω) cells are points (T, E); a cell is dropped when another is
    better in both, by separated intervals (default) or by means (--dominance point).

    \b
    Examples:
      eopt frontier gemm.jsonl
      eopt frontier plan.signatures.jsonl --element stage0.forward --plot f.png
      eopt frontier lib.jsonl --dominance point --csv frontier.csv --json
      eopt frontier gemm.jsonl --plot gemm.svg -q
    """
    from eopt.model.frontier_table import write_frontier_csv
    from eopt.model.library import Library

    if plot is not None and plot.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UserError(f"--plot {plot}: use a file name ending in .png, .svg or .pdf")
    library = Library.load(library_file)
    if not len(library):
        raise UserError(f"{library_file}: the library holds no signatures")
    frontiers = _frontiers(library, elements, dominance, confidence)
    rows = _rows(frontiers)
    if csv_path is not None:
        write_frontier_csv(csv_path, rows)
    if plot is not None:
        from eopt.report.frontier_plot import plot_element_frontiers

        plot_element_frontiers(frontiers, plot, title=f"Time–energy frontiers: {library_file.name}")
    if as_json:
        write_json("-", rows)
        return
    for name, front in frontiers.items():
        table = Table(
            title=f"{name}: {len(front.points)} of {len(front.achievable)} cells on the frontier "
            f"({dominance} dominance)",
            title_justify="left",
        )
        for col in ("time s", "energy J", f"{confidence:.0%} interval J", "κ", "ω"):
            table.add_column(col, justify="right" if "J" in col or col[-1] == "s" else "left")
        for row in front.to_rows():
            table.add_row(
                f"{row['time_s']:.6g}",
                f"{row['energy_j']:.6g}",
                (
                    f"{row['energy_low_j']:.5g} … {row['energy_high_j']:.5g}"
                    if row["energy_high_j"] > row["energy_low_j"]
                    else "no variance measured"
                ),
                row["impl"],
                row["op_point"],
            )
        console.print(table)
    for path in (csv_path, plot):
        if path is not None:
            console.print(f"Wrote {path}", highlight=False)
