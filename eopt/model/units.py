"""Quantities with units: the one place that reads them from text and writes them out.

Inside eopt every quantity is SI (s, W, J) and clocks are MHz (design.md, "Units and
names"); text at the edges (command lines, plan and placement files) may carry a unit.
:func:`parse_quantity` reads ``"3s"``, ``"250ms"``, ``"83.64W"``, ``"250000mW"``,
``"1.2kJ"`` or ``"1.41GHz"`` into that unit; a bare number is already in it.
:func:`parse_fraction` reads ``"5%"`` or ``"0.05"`` and refuses a bare ``5`` (which would
mean +500 %). The ``format_*`` helpers write quantities back with the digits a reader
needs, and :func:`format_sigma` labels a standard deviation as σ and never prints
"± 0 J" for a profile that recorded no spread.

Prefixes are case-sensitive where case changes the meaning: ``mW`` is milliwatts and
``MW`` (megawatts, never a GPU's draw) is refused with a hint instead of being read as
either. Only the unit letters themselves may be lower-case (``60w``, ``3 j``).

Example:
    >>> parse_quantity("250ms", "s"), parse_quantity("250000mW", "W")
    (0.25, 250.0)
    >>> parse_fraction("5%"), format_time(0.0501616), format_percent(0.155)
    (0.05, '0.05016 s', '15.5 %')
    >>> format_energy(3.32), format_sigma(0.0, "J")
    ('3.32 J', 'σ unknown (no spread recorded)')
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = [
    "UNITS",
    "QuantityError",
    "format_energy",
    "format_percent",
    "format_power",
    "format_sigma",
    "format_time",
    "parse_fraction",
    "parse_power_w",
    "parse_quantity",
    "parse_time_s",
]


class QuantityError(ValueError):
    """Text that is not a quantity of the expected kind; the message names the place,
    what was read and how to write it."""


_NUMBER = re.compile(
    r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity))\s*([^\s\d].*?)?\s*$",
    re.IGNORECASE,
)

#: Canonical unit → {suffix as written: factor to the canonical unit}.
UNITS: Final[dict[str, dict[str, float]]] = {
    "s": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9, "min": 60.0},
    "W": {"W": 1.0, "w": 1.0, "mW": 1e-3, "mw": 1e-3, "kW": 1e3, "kw": 1e3, "KW": 1e3},
    "J": {
        "J": 1.0,
        "j": 1.0,
        "mJ": 1e-3,
        "mj": 1e-3,
        "uJ": 1e-6,
        "µJ": 1e-6,
        "kJ": 1e3,
        "kj": 1e3,
        "KJ": 1e3,
        "MJ": 1e6,
        "Wh": 3600.0,
        "kWh": 3.6e6,
    },
    # Nobody means millihertz: Hz units read case-insensitively (see _lookup).
    "MHz": {"mhz": 1.0, "ghz": 1e3, "khz": 1e-3, "hz": 1e-6},
}

#: Suffixes that look like a unit of the kind but mean something else.
_CONFUSIONS: Final[dict[str, dict[str, str]]] = {
    "W": {"MW": "MW is megawatts; write mW for milliwatts or W for watts"},
    "s": {"m": "m is ambiguous; write ms for milliseconds or min for minutes"},
}

_EXAMPLES: Final[dict[str, str]] = {
    "s": "3s or 250ms",
    "W": "83.64W or 250000mW",
    "J": "5.2J or 1.2kJ",
    "MHz": "1410MHz or 1.41GHz",
}


def _lookup(unit: str, suffix: str) -> float | None:
    table = UNITS[unit]
    if unit == "MHz":
        return table.get(suffix.lower())
    return table.get(suffix)


def parse_quantity(
    text: str | float,
    unit: str,
    *,
    what: str = "value",
    positive: bool = False,
    allow_negative: bool = False,
    maximum: float | None = None,
) -> float:
    """A quantity in ``unit`` (``"s"``, ``"W"``, ``"J"`` or ``"MHz"``) from text.

    Args:
        text: ``"3s"``, ``"250 ms"``, ``"83.64W"``, ``"1.2kJ"``, ``"1.41GHz"``; a bare
            number (or an int/float) is in ``unit`` already.
        unit: The canonical unit of the result (SI; MHz for clocks).
        what: How errors name the place (an option such as ``--deadline``, or
            ``plan.yaml: deadline``).
        positive: Refuse 0 (durations that must pass, powers that must flow).
        allow_negative: Accept values below 0 (offsets); otherwise they are refused.
        maximum: Largest value accepted, in ``unit``.

    Returns:
        The value in ``unit``.

    Raises:
        QuantityError: naming ``what`` for text that is not a number with a unit of this
            kind, for NaN or infinity, and for values outside the allowed range.
    """
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; eopt reads {', '.join(UNITS)}")
    example = _EXAMPLES[unit]
    if isinstance(text, bool):
        raise QuantityError(f"{what}: expected a number like {example}, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _NUMBER.match(str(text))
        if match is None:
            raise QuantityError(
                f"{what}: cannot read {str(text)!r} as a quantity in {unit}; write a number "
                f"with an optional unit ({', '.join(_suffixes(unit))}), e.g. {example}"
            )
        suffix = (match.group(2) or "").strip()
        factor = 1.0 if not suffix else _lookup(unit, suffix)
        if factor is None:
            hint = _CONFUSIONS.get(unit, {}).get(suffix)
            raise QuantityError(
                f"{what}: cannot read {str(text).strip()!r}: "
                + (hint if hint else f"{suffix!r} is not a unit of {_KIND[unit]}")
                + f"; write e.g. {example} (units: {', '.join(_suffixes(unit))})"
            )
        number = float(match.group(1))
        # Divide by 1000 rather than multiply by 1e-3: 40us is 4e-05 s exactly.
        value = number * factor if factor >= 1 else number / round(1.0 / factor)
    if not math.isfinite(value):
        raise QuantityError(f"{what}: must be a finite number, got {text!r}; e.g. {example}")
    if value < 0 and not allow_negative:
        raise QuantityError(f"{what}: must be a finite number ≥ 0 {unit}, got {text!r}")
    if positive and value == 0:
        raise QuantityError(f"{what}: must be > 0 {unit}, got {text!r}")
    if maximum is not None and value > maximum:
        raise QuantityError(f"{what}: must be at most {maximum:g} {unit}, got {text!r}")
    return value


_KIND: Final[dict[str, str]] = {"s": "time", "W": "power", "J": "energy", "MHz": "frequency"}


def _suffixes(unit: str) -> list[str]:
    shown = {
        "s": ["s", "ms", "us", "ns"],
        "W": ["W", "mW", "kW"],
        "J": ["J", "mJ", "kJ"],
        "MHz": ["MHz", "GHz"],
    }
    return shown[unit]


def parse_time_s(text: str | float, what: str = "time") -> float:
    """A duration ≥ 0 in s from ``2.5``, ``"2.5"``, ``"2.5ms"``, ``"40us"`` or ``"3ns"``.

    Raises:
        QuantityError: naming ``what`` for anything else or a negative value.
    """
    return parse_quantity(text, "s", what=what)


def parse_power_w(text: str | float, what: str = "power") -> float:
    """A power ≥ 0 in W from ``60``, ``"60W"``, ``"60 w"``, ``"500mW"`` or ``"1.2kW"``.

    Raises:
        QuantityError: naming ``what`` for anything else or a negative value.
    """
    return parse_quantity(text, "W", what=what)


def parse_fraction(
    text: str | float, *, what: str = "value", maximum: float | None = None
) -> float:
    """A fraction ≥ 0 from ``"5%"`` (0.05) or ``"0.05"``.

    A bare number above 1 is refused: ``--slowdown 5`` would otherwise mean +500 %, which
    is almost never what was meant.

    Args:
        text: ``"5%"``, ``"5 %"``, ``"0.05"`` or a float.
        what: How errors name the place.
        maximum: Largest fraction accepted (e.g. 10.0 for +1000 %).

    Raises:
        QuantityError: for anything else, NaN, negative values and bare values above 1
            (the message suggests the percent).
    """
    if isinstance(text, bool):
        raise QuantityError(f"{what}: expected a percent like 5% or a fraction like 0.05")
    raw = str(text).strip()
    percent = raw.endswith("%")
    number = raw[:-1].strip() if percent else raw
    try:
        value = float(number)
    except ValueError:
        raise QuantityError(
            f"{what}: cannot read {raw!r}; write a percent like 5% or a fraction like 0.05"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise QuantityError(f"{what}: must be a finite percent ≥ 0 (e.g. 5%), got {raw!r}")
    if not percent and value > 1:
        raise QuantityError(
            f"{what}: {raw} would mean {value:.0%}; did you mean {raw}%? "
            "(write a percent like 5% or a fraction like 0.05)"
        )
    fraction = value / 100.0 if percent else value
    if maximum is not None and fraction > maximum:
        raise QuantityError(f"{what}: must be at most {maximum:.0%}, got {raw!r}")
    return fraction


# Formatting ---------------------------------------------------------------------------
def _digits(value: float, significant: int) -> str:
    """``value`` to ``significant`` digits (trailing zeros dropped), without exponent
    notation in 1e-4 … 1e6."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = abs(value)
    if 1e-4 <= magnitude < 1e6:
        decimals = max(0, significant - 1 - math.floor(math.log10(magnitude)))
        text = f"{value:.{decimals}f}"
        # Rounding can carry into a new digit (9.9996 → 10.000): drop the extra one.
        if decimals and len(text.replace("-", "").replace(".", "").lstrip("0")) > significant:
            text = text[:-1]
        # Trailing zeros claim a precision nobody measured: 3.32 J, not 3.3200 J.
        return text.rstrip("0").rstrip(".") if "." in text else text
    return f"{value:.{significant}g}"


def format_time(seconds: float, significant: int = 4) -> str:
    """A duration in s with ``significant`` digits: ``0.05016 s``, ``2.837 s``, ``601.1 s``.

    eopt writes every time in seconds (one format everywhere), never switching to ms.
    """
    return f"{_digits(seconds, significant)} s"


def format_energy(joules: float, significant: int = 5) -> str:
    """An energy in J with ``significant`` digits: ``23.805 J``, ``5719.9 J``, ``242648 J``."""
    if abs(joules) >= 10**significant:
        return f"{joules:.0f} J"
    return f"{_digits(joules, significant)} J"


def format_power(watts: float, significant: int = 4) -> str:
    """A power in W: ``83.64 W``."""
    return f"{_digits(watts, significant)} W"


def format_percent(fraction: float, decimals: int = 1, *, sign: bool = False) -> str:
    """A fraction as a percent with a space before the sign: ``15.5 %`` (``+5.0 %``)."""
    return f"{fraction * 100:{'+' if sign else ''}.{decimals}f} %"


def format_sigma(std: float, unit: str, significant: int = 2) -> str:
    """A labelled standard deviation: ``σ 1.2 J``; ``σ unknown (no spread recorded)``
    when it is 0, since a zero σ almost always means the source recorded no spread
    (e.g. a Perseus profile), not that the value is exact."""
    if std <= 0 or not math.isfinite(std):
        return "σ unknown (no spread recorded)"
    return f"σ {_digits(std, significant)} {unit}"
