"""Readers for the report's inputs other than schedules and libraries, and the writer
of frontier tables.

- Frontier tables (``.csv``) as written by ``eopt solve --frontier`` (one plan-level point
  a row: makespan, energy, lower bound …) or ``eopt frontier --csv`` (an ``element``
  column, one Pareto point a row); both commands write through
  :func:`eopt.model.frontier_table.write_frontier_csv` (re-exported here).
- Measurement results (``.json``) as written by ``eopt measure --json``: regions with
  inclusive energy and time, and the power samples.

Columns and keys are matched by a few accepted spellings, and errors name the file, the
line or key, and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eopt.model.fileformats import (
    FileFormatError,
    Where,
    csv_header_kind,
    guard,
    integer,
    mapping,
    number,
    parse_json,
    read_csv,
    read_text,
    refuse_other_kind,
    required,
    sequence,
    string,
    within_run,
)
from eopt.model.frontier_table import ENERGY_COLUMNS, TIME_COLUMNS, write_frontier_csv

__all__ = [
    "FrontierRow",
    "Measurement",
    "Region",
    "ReportInputError",
    "read_frontier_csv",
    "read_measurement",
    "write_frontier_csv",
]


class ReportInputError(FileFormatError):
    """An input file the report cannot use; the message names the file and the place."""


@dataclass(frozen=True)
class FrontierRow:
    """One frontier point.

    Attributes:
        time_s: Makespan (plan frontier) or element time, in s.
        energy_j: Predicted energy, in J.
        low_j: Lower end of the energy's uncertainty bar, in J (None: none known).
        high_j: Upper end, in J.
        lower_bound_j: Certified lower bound of the optimum at this makespan, in J.
        element: The element for a per-element frontier; None for a plan frontier.
        label: κ/ω or solver status, when the file has one.
    """

    time_s: float
    energy_j: float
    low_j: float | None = None
    high_j: float | None = None
    lower_bound_j: float | None = None
    element: str | None = None
    label: str = ""


_TIME = TIME_COLUMNS
_ENERGY = ENERGY_COLUMNS
_STD = ("energy_std", "energy_std_j", "std", "std_j", "sigma", "std_energy")
_VAR = ("var_energy", "var_energy_j2")
_LOW = ("energy_low", "energy_low_j", "ci_low", "energy_ci_low", "low")
_HIGH = ("energy_high", "energy_high_j", "ci_high", "energy_ci_high", "high")
_BOUND = ("lower_bound", "lower_bound_j", "bound")
_ELEMENT = ("element", "name")
_LABEL = ("label", "op_point", "status", "impl", "clock", "sm_clock_mhz")


def _pick(header: Mapping[str, int], names: Sequence[str]) -> int | None:
    """The index of the first of ``names`` in the (lower-cased) header."""
    for name in names:
        if name in header:
            return header[name]
    return None


def read_frontier_csv(path: str | Path, confidence_c: float = 1.96) -> list[FrontierRow]:
    """Read a frontier table.

    Uncertainty bars come from explicit low/high columns, else ± ``confidence_c``·σ from a
    standard-deviation (or variance) column. Every number read must be finite; times
    > 0; energies, lower bounds, σ and variances ≥ 0; a lower bound at most the energy,
    and the bar's ends around the energy.

    Raises:
        ReportInputError: missing file or columns, a cell that is not a valid number
            (``file:line: column 'energy' …``), or a file of another eopt kind.
    """
    p = Path(path)
    at = Where(str(p), error=ReportInputError)
    try:
        with guard(at, what="a frontier table"):
            return _read_frontier(p, at, confidence_c)
    except ReportInputError:
        refuse_other_kind(p, ("frontier",), at)
        raise


def _read_frontier(p: Path, at: Where, confidence_c: float) -> list[FrontierRow]:
    table = read_csv(p, at, what="a frontier table")
    found = csv_header_kind(table.header)
    if found is not None and found.key != "frontier":
        # A profile has time and energy columns too: refuse it for what it is.
        refuse_other_kind(p, ("frontier",), at, found)
    header = {name.lower(): i for i, name in enumerate(table.header)}
    time_col, energy_col = _pick(header, _TIME), _pick(header, _ENERGY)
    if time_col is None or energy_col is None:
        shown = ",".join(table.header)
        shown = shown if len(shown) <= 120 else shown[:119] + "…"
        at.at_line(1).fail(
            f"header {shown!r} lacks a time column ({'/'.join(_TIME[:4])}) "
            f"or an energy column ({'/'.join(_ENERGY[:2])})"
        )
    std_col, var_col = _pick(header, _STD), _pick(header, _VAR)
    low_col, high_col = _pick(header, _LOW), _pick(header, _HIGH)
    bound_col, elem_col, label_col = (
        _pick(header, _BOUND),
        _pick(header, _ELEMENT),
        _pick(header, _LABEL),
    )
    rows = []
    for lineno, raw in table.rows:
        where = at.at_line(lineno)
        if len(raw) != len(table.header):
            where.fail(f"expected {len(table.header)} fields, found {len(raw)}")
        cells = _Cells(table.header, raw, where)
        t = cells.number(time_col, unit="s", positive=True)
        e = cells.number(energy_col, unit="J", min=0)
        assert t is not None and e is not None  # required columns are never None
        low = cells.number(low_col, unit="J", optional=True)
        high = cells.number(high_col, unit="J", optional=True)
        if low is None or high is None:
            std = cells.number(std_col, unit="J", min=0, optional=True)
            if std is None:
                var = cells.number(var_col, unit="J²", min=0, optional=True)
                std = None if var is None else math.sqrt(var)
            if std is not None:
                low, high = e - confidence_c * std, e + confidence_c * std
        elif not low - _tol(e) <= e <= high + _tol(e):
            where.fail(f"the energy {e:g} J lies outside its own interval [{low:g}, {high:g}] J")
        bound = cells.number(bound_col, unit="J", min=0, optional=True)
        if bound is not None and bound > e + _tol(e):
            where.fail(
                f"column {table.header[bound_col]!r}: the lower bound {bound:g} J is above the "
                f"energy {e:g} J; a lower bound cannot exceed the energy it bounds"
            )
        rows.append(
            FrontierRow(
                time_s=t,
                energy_j=e,
                low_j=low,
                high_j=high,
                lower_bound_j=bound,
                element=(raw[elem_col].strip() or None) if elem_col is not None else None,
                label=raw[label_col].strip() if label_col is not None else "",
            )
        )
    if not rows:
        at.fail("no rows after the header")
    return rows


def _tol(value: float) -> float:
    """Rounding allowance for comparing numbers written with ~15 significant digits."""
    return 1e-9 * max(1.0, abs(value))


# Cells a CSV writer leaves empty for "unknown" (Python's csv writes None as "").
_EMPTY = ("", "None", "null")


class _Cells:
    """The numeric cells of one CSV row, each checked where it is read."""

    def __init__(self, header: list[str], raw: list[str], where: Where) -> None:
        self.header, self.raw, self.where = header, raw, where

    def number(self, column: int | None, *, optional: bool = False, **bounds: Any) -> float | None:
        if column is None:
            return None
        name = self.header[column]
        value = self.raw[column].strip()
        if value in _EMPTY:
            if optional:
                return None
            self.where.fail(f"column {name!r} is empty; expected a number")
        try:
            parsed = float(value)
        except ValueError:
            self.where.fail(f"column {name!r} is {value!r}; expected a number")
        return number(parsed, replace(self.where, path=f"column {name!r}"), **bounds)


@dataclass(frozen=True)
class Region:
    """One measured region.

    Attributes:
        name: Region name (nested regions as ``outer/inner`` when the file says so).
        energy_j: Inclusive energy over all calls, in J.
        time_s: Inclusive time over all calls, in s.
        calls: Number of calls.
        depth: Nesting depth (0: top level).
        exclusive_energy_j: Energy without nested events, in J, where known.
    """

    name: str
    energy_j: float
    time_s: float
    calls: int = 1
    depth: int = 0
    exclusive_energy_j: float | None = None

    @property
    def mean_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else math.nan


@dataclass(frozen=True)
class Measurement:
    """A measured run: total energy and time, its regions and power samples.

    Attributes:
        total_energy_j: Energy of the whole run, in J.
        total_time_s: Duration of the whole run, in s.
        regions: Per-region inclusive values.
        outside_energy_j: Energy outside every top-level region, in J (None: unknown).
        samples: (time s, power W) samples of the power trace, time from the run's start.
        device: Device description, when recorded.
        meta: Everything else in the file.
        calls: (region name, start s, end s) of each timed region call, on the samples'
            time axis; the name is the region's as in ``regions``.
    """

    total_energy_j: float
    total_time_s: float
    regions: tuple[Region, ...] = ()
    outside_energy_j: float | None = None
    samples: tuple[tuple[float, float], ...] = ()
    device: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    calls: tuple[tuple[str, float, float], ...] = ()


def read_measurement(path: str | Path) -> Measurement:
    """Read a measurement JSON (``eopt measure --json``, or an ``eopt attribute`` JSON).

    Raises:
        ReportInputError: naming the file and the key that is missing or wrong, or what
            the file is when it is another eopt kind.
    """
    p = Path(path)
    at = Where(str(p), error=ReportInputError)
    try:
        with guard(at, what="a measurement"):
            data = parse_json(read_text(p, at, what="a measurement"), at)
            return measurement_from_dict(data, str(p))
    except ReportInputError:
        refuse_other_kind(p, ("measurement", "attribution"), at)
        raise


def measurement_from_dict(data: Any, source: str = "<measurement>") -> Measurement:
    """Build a :class:`Measurement` from a mapping; see :func:`read_measurement`.

    Checks: the run's energy ≥ 0 and time > 0; per region, energy ≥ 0 (or null:
    unknown), time ≥ 0, and one call no larger than the whole run; samples of finite
    times and powers ≥ 0; timed events inside the run.

    Raises:
        ReportInputError: naming ``source`` and the key.
    """
    at = Where(source, error=ReportInputError)
    data = mapping(data, at, what="a JSON object at the top level")
    nested = isinstance(data.get("total"), Mapping)  # {"total": {"energy_j", "time_s"}}
    total, at_total = (data["total"], at / "total") if nested else (data, at)
    energy = _num_key(total, ("energy_j", "total_energy_j", "energy"), at_total, min=0)
    duration = _num_key(
        total, ("time_s", "total_time_s", "duration_s", "time"), at_total, positive=True
    )
    regions_raw = data.get("regions", [])
    if isinstance(regions_raw, Mapping):  # {name: {...}}
        regions_raw = [
            {"name": k, **mapping(v, at / "regions" / str(k))} for k, v in regions_raw.items()
        ]
    regions = tuple(
        _region(r, at / "regions" / i, energy, duration)
        for i, r in enumerate(sequence(regions_raw, at / "regions", what="a list of objects"))
    )
    outside = None
    for key in ("outside_energy_j", "outside_j", "outside"):
        if data.get(key) is not None:
            # Rounding of total − Σ regions may leave a hair below 0: that is 0.
            raw = _num_key(data, (key,), at, min=-_tol(energy))
            outside = max(0.0, raw)
            break
    samples_raw = data.get("samples", data.get("power_trace", data.get("power", [])))
    samples = _samples(samples_raw, at / "samples", duration)
    calls: list[tuple[str, float, float]] = []
    # ``calls``: what `eopt attribute --calls -o` lists (an eopt.attribution/1 file).
    for key in ("events", "region_events", "calls"):
        if isinstance(data.get(key), list):
            calls += _check_events(data[key], at / key, duration)
    device = data.get("device", "")
    if isinstance(device, Mapping):
        device = " ".join(str(v) for v in device.values())
    if data.get("model"):
        device = f"{device} ({data['model']})" if device else str(data["model"])
    return Measurement(
        total_energy_j=energy,
        total_time_s=duration,
        regions=regions,
        outside_energy_j=outside,
        samples=samples,
        device=str(device or ""),
        meta={k: v for k, v in data.items() if k not in ("regions", "samples", "power_trace")},
        calls=tuple(calls),
    )


def _region(r: Any, at: Where, run_energy: float, run_time: float) -> Region:
    r = mapping(r, at, what="an object with 'region' (its name)")
    if "name" not in r and "region" not in r:
        at.fail("expected an object with 'region' (its name)")
    name = string(r.get("region", r.get("name")), at / "name", what="a region name")
    energy_keys = ("energy_j", "energy", "inclusive_energy_j")
    if any(k in r for k in energy_keys) and all(r.get(k) is None for k in energy_keys if k in r):
        energy = math.nan  # null: unknown (a region outside the power trace)
    else:
        energy = _num_key(r, energy_keys, at, min=0)
    time_s = _num_key(r, ("time_s", "time", "inclusive_time_s"), at, min=0)
    calls_raw = r.get("calls", r.get("count"))
    calls = 1 if calls_raw is None else integer(calls_raw, at / "calls", min=1)
    depth_raw = r.get("depth")
    depth = 0 if depth_raw is None else integer(depth_raw, at / "depth", min=0)
    # Calls of one region may overlap (threads), so only one call is bounded by the run.
    if time_s / calls > run_time + _tol(run_time):
        at.fail(
            f"region {name!r} takes {time_s:g} s over {calls} call(s), longer than the whole "
            f"run ({run_time:g} s)"
        )
    if energy / calls > run_energy + _tol(run_energy):  # NaN (unknown) compares False
        at.fail(
            f"region {name!r} spends {energy:g} J over {calls} call(s), more than the whole "
            f"run ({run_energy:g} J)"
        )
    return Region(name=name, energy_j=energy, time_s=time_s, calls=calls, depth=depth)


def _check_events(raw: Any, at: Where, run_time: float) -> list[tuple[str, float, float]]:
    """Timed region calls (for the trace), which must lie inside the run: (name, start s,
    end s) each, named by the region's path when the event has one (as the regions are)."""
    out = []
    for i, item in enumerate(sequence(raw, at, what="a list of timed events")):
        where = at / i
        item = mapping(item, where, what="an object with start_s and end_s")
        start = number(required(item, "start_s", where), where / "start_s", unit="s")
        end = number(required(item, "end_s", where), where / "end_s", unit="s")
        if end < start:
            (where / "end_s").fail(f"the event ends ({end:g} s) before it starts ({start:g} s)")
        start = within_run(start, end, run_time, where, run_name="run's duration")
        name = item.get("path") or item.get("name") or item.get("region") or "region"
        out.append((str(name), start, end))
    return out


def _samples(raw: Any, at: Where, run_time: float) -> tuple[tuple[float, float], ...]:
    """(time s, power W) from the run's start. Samples already on the run's time axis
    (inside [0, run_time], as ``eopt measure`` writes them) stay where they are, so that
    the region calls line up with them; others (epoch times) start at 0."""
    if raw is None:
        return ()
    if isinstance(raw, Mapping):  # {"time_s": [...], "power_w": [...]}
        times = raw.get("time_s", raw.get("t", []))
        powers = raw.get("power_w", raw.get("p", []))
        if not isinstance(times, list) or not isinstance(powers, list) or len(times) != len(powers):
            at.fail("samples need equal-length 'time_s' and 'power_w' lists")
        raw = list(zip(times, powers, strict=True))
    out = []
    for i, s in enumerate(sequence(raw, at, what="a list of [time_s, power_w]")):
        if isinstance(s, Mapping):
            t = s.get("time_s", s.get("t"))
            w = s.get("power_w", s.get("p"))
        elif isinstance(s, (list, tuple)) and len(s) >= 2:
            t, w = s[0], s[1]
        else:
            (at / i).fail("expected [time_s, power_w]")
        time_s = number(t, at / i / "time_s", unit="s")
        if out and time_s < out[-1][0]:
            (at / i / "time_s").fail(
                f"{time_s:g} s is before the sample before it ({out[-1][0]:g} s); samples "
                "must be in time order"
            )
        out.append((time_s, number(w, at / i / "power_w", unit="W", min=0)))
    slack = 1e-6 * max(run_time, 1.0)
    if out and not (-slack <= out[0][0] and out[-1][0] <= run_time + slack):
        t0 = out[0][0]
        out = [(t - t0, w) for t, w in out]
    return tuple(out)


def _num_key(data: Mapping[str, Any], keys: Sequence[str], at: Where, **bounds: Any) -> float:
    for key in keys:
        if key in data:
            return number(data[key], at / key, **bounds)
    at.fail(f"missing {keys[0]!r}")
