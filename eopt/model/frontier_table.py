"""Frontier tables (``.csv``): the one writer, and the column spellings its reader
(:func:`eopt.report.inputs.read_frontier_csv`) accepts.

Two layouts share the format: a plan frontier (``eopt solve --frontier``; one point a row:
``makespan_s, energy_j, energy_std_j, lower_bound_j, gap, status``) and element frontiers
(``eopt frontier --csv``; ``element, time_s, energy_j, energy_low_j, energy_high_j …``).
Kept apart from :mod:`eopt.report` so the commands that write tables do not load the
report's plotting stack.
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eopt.model.fileformats import atomic_write_text

__all__ = ["ENERGY_COLUMNS", "TIME_COLUMNS", "write_frontier_csv"]

#: Spellings of the time column (s), lower-case, preferred first.
TIME_COLUMNS = ("makespan", "makespan_s", "time", "time_s", "t")
#: Spellings of the energy column (J), lower-case, preferred first.
ENERGY_COLUMNS = ("energy", "energy_j", "e", "predicted")


def _first_column(columns: Sequence[str], names: Sequence[str]) -> str | None:
    """The first of ``columns`` that is one of ``names`` in the reader's preference."""
    lower = {c.lower(): c for c in reversed(columns)}
    return next((lower[n] for n in names if n in lower), None)


def write_frontier_csv(path: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write a frontier table that :func:`eopt.report.inputs.read_frontier_csv` reads
    back, atomically.

    The one writer of frontier tables: ``eopt solve --frontier -o F.csv`` passes plan
    points (``makespan_s``, ``energy_j``, ``energy_std_j``, ``lower_bound_j``, ``gap``,
    ``status``), ``eopt frontier --csv`` element points (``element``, ``time_s``,
    ``energy_j`` … as :meth:`eopt.calculus.frontier.Frontier.to_rows`). Columns are the rows' keys
    in first-seen order; numbers are written with every digit (``repr``), so they read
    back exactly; ``None`` and other non-finite optional values become empty cells,
    which the reader takes as unknown.

    Args:
        path: The ``.csv`` file to write (its folder is created when missing).
        rows: One mapping per point, column name → value (SI units in the names).

    Returns:
        The path written.

    Raises:
        ValueError: no rows, no time or energy column the reader recognizes, or a time or
            energy that is not a finite number (naming the row and column).
    """
    if not rows:
        raise ValueError(f"cannot write {path}: a frontier table needs at least one point")
    columns = list(dict.fromkeys(key for row in rows for key in row))
    time_col = _first_column(columns, TIME_COLUMNS)
    energy_col = _first_column(columns, ENERGY_COLUMNS)
    if time_col is None or energy_col is None:
        raise ValueError(
            f"cannot write {path}: the rows have columns {columns}, which lack a time "
            f"({'/'.join(TIME_COLUMNS[:4])}) or an energy ({'/'.join(ENERGY_COLUMNS[:2])}) column"
        )
    needed = {time_col, energy_col}
    buffer = io.StringIO()
    out = csv.writer(buffer, lineterminator="\n")
    out.writerow(columns)
    for n, row in enumerate(rows):
        cells = []
        for name in columns:
            value = row.get(name)
            is_number = isinstance(value, numbers.Real) and not isinstance(value, bool)
            if name in needed and not (is_number and math.isfinite(float(value))):
                raise ValueError(
                    f"cannot write {path}: row {n + 1}, column {name!r} is {value!r}; "
                    "expected a finite number"
                )
            cells.append(_cell(value))
        out.writerow(cells)
    atomic_write_text(path, buffer.getvalue())
    return Path(path)


def _cell(value: Any) -> str:
    """One CSV cell: every digit of a number, empty for unknown."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    # float(): a numpy scalar's repr would carry its type name.
    number_ = float(value)
    return repr(number_) if math.isfinite(number_) else ""
