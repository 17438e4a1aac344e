"""Reading quantities with units from text: ``1.5ms`` → 0.0015 s, ``60W`` → 60.0 W."""

from __future__ import annotations

import math
import re

__all__ = ["parse_power_w", "parse_time_s"]

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ]*)\s*$")

_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_POWER_UNITS = {"": 1.0, "w": 1.0, "mw": 1e-3, "kw": 1e3}


def _parse(text: str | float, units: dict[str, float], what: str, example: str) -> float:
    if isinstance(text, bool):
        raise ValueError(f"{what}: expected a number like {example}, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _NUMBER.match(str(text))
        unit = match.group(2) if match else None
        key = unit if unit in units else (unit.lower() if unit is not None else None)
        if match is None or key not in units:
            raise ValueError(
                f"{what}: cannot read {text!r}; write a number with an optional unit "
                f"({', '.join(u for u in units if u)}), e.g. {example}"
            )
        value = float(match.group(1)) * units[key]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what}: must be a finite number ≥ 0, got {text!r}")
    return value


def parse_time_s(text: str | float, what: str = "time") -> float:
    """A duration in s from ``2.5``, ``"2.5"``, ``"2.5ms"``, ``"40us"`` or ``"3ns"``.

    Raises:
        ValueError: naming ``what`` for anything else or a negative value.
    """
    return _parse(text, _TIME_UNITS, what, "1.5ms")


def parse_power_w(text: str | float, what: str = "power") -> float:
    """A power in W from ``60``, ``"60W"``, ``"60 w"``, ``"500mW"`` or ``"1.2kW"``.

    Raises:
        ValueError: naming ``what`` for anything else or a negative value.
    """
    return _parse(text, _POWER_UNITS, what, "60W")
