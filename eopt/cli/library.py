"""``eopt library``: signature libraries as files. ``eopt library merge`` joins the parts
of a sweep (its shards, one library per node) into one."""

from __future__ import annotations

from pathlib import Path

import click

from eopt.cli.options import json_option, quiet_option

__all__ = ["command"]


@click.group("library", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """Signature libraries as files: join the parts of a sweep.

    \b
    Examples:
      eopt sweep sim:gemm --shard 1/3 -o part1.jsonl      # … and 2/3, 3/3
      eopt library merge part1.jsonl part2.jsonl part3.jsonl -o gemm.jsonl
    """


@command.command("merge")
@click.argument("libraries", metavar="LIB.jsonl…", nargs=-1, required=True,
                type=click.Path(dir_okay=False, path_type=Path))  # fmt: skip
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The merged library (written atomically; it may be one of the inputs).",
)
@click.option(
    "--pool",
    is_flag=True,
    help="Pool the measurements of a cell found more than once (one cell measured on "
    "several GPUs of a model) into one cell per model, instead of refusing them.",
)
@json_option("Print what was merged as JSON.")
@quiet_option()
def merge(libraries: tuple[Path, ...], output: Path, pool: bool, as_json: bool) -> None:
    """Join libraries into one: each cell once.

    A cell is its kernel, implementation, workload, operating point and GPU model. Lines
    that are exact duplicates are dropped. Two different measurements of one cell are a
    conflict, named with the file and line of each, unless --pool pools them (their
    windows weighed together; the GPUs each came from are kept in meta.pooled_from).
    """
    from eopt.cli._common import UserError, console, write_json
    from eopt.model.library import LibraryError, merge_libraries

    try:
        result = merge_libraries(libraries, output, pool=pool)
    except LibraryError as exc:
        raise UserError(str(exc)) from None
    if as_json:
        write_json(
            "-",
            {
                "library": str(output),
                "inputs": [str(p) for p in libraries],
                "read": result.read,
                "cells": len(result.signatures),
                "duplicates_dropped": result.duplicates,
                "pooled": list(result.pooled),
            },
        )
        return
    pooled = f", {len(result.pooled)} pooled" if result.pooled else ""
    console.print(
        f"wrote {len(result.signatures)} cells to {output} from {len(libraries)} libraries "
        f"({result.read} read, {result.duplicates} exact duplicates dropped{pooled})",
        highlight=False,
    )
