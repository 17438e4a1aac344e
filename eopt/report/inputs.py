"""Readers for the report's inputs other than schedules and libraries.

- Frontier tables (``.csv``) as written by ``eopt solve --frontier`` (one plan-level point
  a row: makespan, energy, lower bound …) or ``eopt frontier --csv`` (an ``element``
  column, one Pareto point a row).
- Measurement results (``.json``) as written by ``eopt measure --json``: regions with
  inclusive energy and time, and the power samples.

Columns and keys are matched by a few accepted spellings, and errors name the file, the
line or key, and what was expected.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FrontierRow",
    "Measurement",
    "Region",
    "ReportInputError",
    "read_frontier_csv",
    "read_measurement",
]


class ReportInputError(ValueError):
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


_TIME = ("makespan", "makespan_s", "time", "time_s", "t")
_ENERGY = ("energy", "energy_j", "e", "predicted")
_STD = ("energy_std", "energy_std_j", "std", "std_j", "sigma", "std_energy")
_VAR = ("var_energy", "var_energy_j2")
_LOW = ("energy_low", "energy_low_j", "ci_low", "energy_ci_low", "low")
_HIGH = ("energy_high", "energy_high_j", "ci_high", "energy_ci_high", "high")
_BOUND = ("lower_bound", "lower_bound_j", "bound")
_ELEMENT = ("element", "name")
_LABEL = ("label", "op_point", "status", "impl", "clock", "sm_clock_mhz")


def _pick(header: Mapping[str, str], names: Sequence[str]) -> str | None:
    for name in names:
        if name in header:
            return header[name]
    return None


def read_frontier_csv(path: str | Path, confidence_c: float = 1.96) -> list[FrontierRow]:
    """Read a frontier table.

    Uncertainty bars come from explicit low/high columns, else ± ``confidence_c``·σ from a
    standard-deviation (or variance) column.

    Raises:
        ReportInputError: missing file or columns, or a cell that is not a number
            (``file:line: column 'energy' …``).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportInputError(f"{p}: no such frontier file") from None
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise ReportInputError(f"{p}: empty file; expected a CSV header with makespan,energy")
    header = {name.strip().lower(): name for name in reader.fieldnames}
    time_col, energy_col = _pick(header, _TIME), _pick(header, _ENERGY)
    if time_col is None or energy_col is None:
        raise ReportInputError(
            f"{p}:1: header {reader.fieldnames} lacks a time column ({'/'.join(_TIME[:4])}) "
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
    for lineno, raw in enumerate(reader, start=2):
        where = f"{p}:{lineno}"
        t = _cell(raw, time_col, where, required=True)
        e = _cell(raw, energy_col, where, required=True)
        assert t is not None and e is not None
        low = _cell(raw, low_col, where) if low_col else None
        high = _cell(raw, high_col, where) if high_col else None
        if low is None or high is None:
            std = _cell(raw, std_col, where) if std_col else None
            if std is None and var_col:
                var = _cell(raw, var_col, where)
                std = math.sqrt(var) if var is not None and var >= 0 else None
            if std is not None:
                low, high = e - confidence_c * std, e + confidence_c * std
        rows.append(
            FrontierRow(
                time_s=t,
                energy_j=e,
                low_j=low,
                high_j=high,
                lower_bound_j=_cell(raw, bound_col, where) if bound_col else None,
                element=(raw.get(elem_col) or None) if elem_col else None,
                label=str(raw.get(label_col) or "") if label_col else "",
            )
        )
    if not rows:
        raise ReportInputError(f"{p}: no rows after the header")
    return rows


def _cell(
    raw: Mapping[str, Any], column: str | None, where: str, required: bool = False
) -> float | None:
    if column is None:
        return None
    value = raw.get(column)
    if value is None or str(value).strip() in ("", "nan", "None", "null"):
        if required:
            raise ReportInputError(f"{where}: column {column!r} is empty; expected a number")
        return None
    try:
        number = float(value)
    except ValueError:
        raise ReportInputError(
            f"{where}: column {column!r} is {value!r}; expected a number"
        ) from None
    if not math.isfinite(number):
        if required:
            raise ReportInputError(
                f"{where}: column {column!r} is {value!r}; expected a finite number"
            )
        return None
    return number


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
    """

    total_energy_j: float
    total_time_s: float
    regions: tuple[Region, ...] = ()
    outside_energy_j: float | None = None
    samples: tuple[tuple[float, float], ...] = ()
    device: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)


def read_measurement(path: str | Path) -> Measurement:
    """Read a measurement JSON (``eopt measure --json``).

    Raises:
        ReportInputError: naming the file and the key that is missing or wrong.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportInputError(f"{p}: no such measurement file") from None
    except json.JSONDecodeError as exc:
        raise ReportInputError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, Mapping):
        raise ReportInputError(f"{p}: expected a JSON object at the top level")
    return measurement_from_dict(data, str(p))


def measurement_from_dict(data: Mapping[str, Any], source: str = "<measurement>") -> Measurement:
    """Build a :class:`Measurement` from a mapping; see :func:`read_measurement`."""
    total = data.get("total") if isinstance(data.get("total"), Mapping) else data
    energy = _num_key(total, ("energy_j", "total_energy_j", "energy"), f"{source}: total")
    duration = _num_key(total, ("time_s", "total_time_s", "duration_s", "time"), f"{source}: total")
    regions_raw = data.get("regions", [])
    if isinstance(regions_raw, Mapping):  # {name: {...}}
        regions_raw = [{"name": k, **v} for k, v in regions_raw.items() if isinstance(v, Mapping)]
    if not isinstance(regions_raw, list):
        raise ReportInputError(f"{source}: 'regions' must be a list of objects")
    regions = []
    for i, r in enumerate(regions_raw):
        where = f"{source}: regions[{i}]"
        if not isinstance(r, Mapping) or not ("name" in r or "region" in r):
            raise ReportInputError(f"{where}: expected an object with 'region' (its name)")
        regions.append(
            Region(
                name=str(r.get("region", r.get("name"))),
                energy_j=_num_key(r, ("energy_j", "energy", "inclusive_energy_j"), where),
                time_s=_num_key(r, ("time_s", "time", "inclusive_time_s"), where),
                calls=int(r.get("calls", r.get("count", 1)) or 1),
                depth=int(r.get("depth", 0) or 0),
            )
        )
    outside = None
    for key in ("outside_energy_j", "outside_j", "outside"):
        if key in data and data[key] is not None:
            outside = _num_key(data, (key,), source)
            break
    samples_raw = data.get("samples", data.get("power_trace", data.get("power", [])))
    samples = _samples(samples_raw, source)
    device = data.get("device", "")
    if isinstance(device, Mapping):
        device = " ".join(str(v) for v in device.values())
    if data.get("model"):
        device = f"{device} ({data['model']})" if device else str(data["model"])
    return Measurement(
        total_energy_j=energy,
        total_time_s=duration,
        regions=tuple(regions),
        outside_energy_j=outside,
        samples=samples,
        device=str(device or ""),
        meta={k: v for k, v in data.items() if k not in ("regions", "samples", "power_trace")},
    )


def _samples(raw: Any, source: str) -> tuple[tuple[float, float], ...]:
    if raw is None:
        return ()
    if isinstance(raw, Mapping):  # {"time_s": [...], "power_w": [...]}
        times = raw.get("time_s", raw.get("t", []))
        powers = raw.get("power_w", raw.get("p", []))
        if not isinstance(times, list) or not isinstance(powers, list) or len(times) != len(powers):
            raise ReportInputError(
                f"{source}: samples need equal-length 'time_s' and 'power_w' lists"
            )
        raw = list(zip(times, powers, strict=True))
    if not isinstance(raw, list):
        raise ReportInputError(f"{source}: 'samples' must be a list")
    out = []
    for i, s in enumerate(raw):
        if isinstance(s, Mapping):
            t = s.get("time_s", s.get("t"))
            w = s.get("power_w", s.get("p"))
        elif isinstance(s, (list, tuple)) and len(s) >= 2:
            t, w = s[0], s[1]
        else:
            raise ReportInputError(f"{source}: samples[{i}] must be [time_s, power_w]")
        if not isinstance(t, (int, float)) or not isinstance(w, (int, float)):
            raise ReportInputError(f"{source}: samples[{i}] has non-numeric values {s!r}")
        out.append((float(t), float(w)))
    if out:
        t0 = out[0][0]
        out = [(t - t0, w) for t, w in out]
    return tuple(out)


def _num_key(data: Mapping[str, Any], keys: Sequence[str], where: str) -> float:
    for key in keys:
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ReportInputError(f"{where}: {key!r} must be a number, got {value!r}")
            return float(value)
    raise ReportInputError(f"{where}: missing {keys[0]!r}")
