"""``eopt kokkos``: build eopt's Kokkos Tools connector, or print how to attach it."""

from __future__ import annotations

import shlex

import click
from rich.markup import escape

from eopt.cli._common import UserError, err_console
from eopt.cli.options import force_option

__all__ = ["command"]


@click.group("kokkos")
def command() -> None:
    """eopt's Kokkos Tools connector: per-region and per-kernel energy of Kokkos programs.

    `eopt measure --kokkos -- ./app` does everything (builds the connector on first use,
    attaches it, samples power, attributes). These subcommands are for using the
    connector by hand, e.g. inside a batch script.

    \b
    Examples:
      eopt kokkos build
      eval "$(eopt kokkos env --trace-dir run1)"; ./app
      eopt attribute power.csv --events run1/events.csv
    """


@command.command("build")
@force_option("Rebuild even when a built library is cached.")
def build(force: bool) -> None:
    """Compile the connector with the system C compiler and print the library's path."""
    from eopt.measure.kokkos import KokkosBuildError, build_connector

    try:
        path = build_connector(force=force)
    except KokkosBuildError as exc:
        raise UserError(str(exc)) from None
    click.echo(str(path))


@command.command("env")
@click.option(
    "--trace-dir",
    default="eopt-kokkos-trace",
    show_default=True,
    help="Where the connector writes events.csv (rank_<N>/ under MPI).",
)
def env(trace_dir: str) -> None:
    """Print shell `export` lines that attach the connector to Kokkos programs."""
    from eopt.measure.kokkos import KokkosBuildError, build_connector, connector_env

    try:
        path = build_connector()
    except KokkosBuildError as exc:
        raise UserError(str(exc)) from None
    for key, value in connector_env(path, trace_dir).items():
        click.echo(f"export {key}={shlex.quote(value)}")
    err_console.print(
        f"[dim]events go to {escape(trace_dir)}; no power is sampled this way: use "
        "`eopt measure --kokkos` for that[/]",
        highlight=False,
    )
