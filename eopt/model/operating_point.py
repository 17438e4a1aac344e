"""Operating points ω: the hardware settings an element runs at."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OperatingPoint"]

_DEVICE_FIELDS = ("sm_clock_mhz", "mem_clock_mhz", "power_limit_w")
_UNITS = {"sm_clock_mhz": "MHz", "mem_clock_mhz": "MHz", "power_limit_w": "W"}
_FIELD_INDEX = {name: i for i, name in enumerate(_DEVICE_FIELDS)}
# Integers up to here convert to finite floats; larger ones take from_dict's own path.
_LARGEST_INT = 10**300


@dataclass(frozen=True)
class OperatingPoint:
    """A hardware operating point ω = (ω_dev, ω_elem).

    The device-wide part (SM clock, memory clock, power limit) is shared by every element
    that runs on the device at the same time; the per-element part (``extras``, e.g. an SM
    count given to a kernel) is the element's own.

    Attributes:
        sm_clock_mhz: Locked SM (graphics) clock in MHz, or ``None`` for the driver's choice.
        mem_clock_mhz: Locked memory clock in MHz, or ``None``.
        power_limit_w: Power-management limit in W, or ``None`` for the current limit.
        extras: Per-element settings (name → JSON-serialisable value).
    """

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_limit_w: float | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in _DEVICE_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            # A clock of inf or NaN would be "positive" to a comparison, then print as
            # invalid JSON and reach NVML: the one check lives here, for files and code.
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(
                    f"OperatingPoint.{name} must be a number ({_UNITS[name]}), got {value!r}"
                )
            if not (math.isfinite(value) and value > 0):
                raise ValueError(
                    f"OperatingPoint.{name} must be a finite number > 0 ({_UNITS[name]}), "
                    f"got {value!r}"
                )
        if not isinstance(self.extras, Mapping):
            raise ValueError(f"OperatingPoint.extras must be a mapping, got {self.extras!r}")
        object.__setattr__(self, "extras", dict(self.extras))

    def __hash__(self) -> int:
        return hash((self.device_key, tuple(sorted(self.extras.items(), key=lambda kv: kv[0]))))

    @property
    def device_key(self) -> tuple[float | None, float | None, float | None]:
        """The device-wide part ω_dev as a hashable key (SM MHz, memory MHz, limit W)."""
        return (self.sm_clock_mhz, self.mem_clock_mhz, self.power_limit_w)

    def device_wide(self) -> OperatingPoint:
        """The same point without its per-element extras."""
        return OperatingPoint(self.sm_clock_mhz, self.mem_clock_mhz, self.power_limit_w)

    def label(self) -> str:
        """A short human-readable label such as ``1410MHz/300W``."""
        parts = []
        if self.sm_clock_mhz is not None:
            parts.append(f"{self.sm_clock_mhz:g}MHz")
        if self.mem_clock_mhz is not None:
            parts.append(f"mem{self.mem_clock_mhz:g}MHz")
        if self.power_limit_w is not None:
            parts.append(f"{self.power_limit_w:g}W")
        parts.extend(f"{k}={v}" for k, v in sorted(self.extras.items()))
        return "/".join(parts) if parts else "default"

    def text(self, empty: str = "default", fmt: Callable[[float], str] = "{:g}".format) -> str:
        """The setting in words for people, e.g. ``1200 MHz / 300 W``.

        Args:
            empty: What a point that sets nothing reads as.
            fmt: How each number is written.
        """
        parts = []
        if self.sm_clock_mhz is not None:
            parts.append(f"{fmt(self.sm_clock_mhz)} MHz")
        if self.mem_clock_mhz is not None:
            parts.append(f"mem {fmt(self.mem_clock_mhz)} MHz")
        if self.power_limit_w is not None:
            parts.append(f"{fmt(self.power_limit_w)} W")
        return " / ".join(parts) if parts else empty

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping; ``None`` fields are omitted."""
        out: dict[str, Any] = {}
        for name in ("sm_clock_mhz", "mem_clock_mhz", "power_limit_w"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.extras:
            out["extras"] = dict(self.extras)
        return out

    @classmethod
    def _read(cls, data: Any) -> OperatingPoint | None:
        """:meth:`from_dict` of the shape files hold (numbers > 0 of the device fields, an
        object of extras), or None for anything else: then :meth:`from_dict` says what is
        wrong. Built without ``__post_init__``, whose checks these are: libraries read
        one point per line.
        """
        if data is None:
            return cls._valid(None, None, None, {})
        if type(data) is not dict:
            return None
        values: list[float | None] = [None, None, None]
        extras: dict[str, Any] = {}
        for key, value in data.items():
            index = _FIELD_INDEX.get(key)
            if index is None:
                if key != "extras" or not (value is None or type(value) is dict):
                    return None
                extras = dict(value) if value else {}
            elif type(value) is float:
                if not 0.0 < value < math.inf:  # NaN fails too
                    return None
                values[index] = value
            elif type(value) is int:
                if not 0 < value <= _LARGEST_INT:
                    return None
                values[index] = float(value)
            elif value is not None:
                return None
        return cls._valid(values[0], values[1], values[2], extras)

    @classmethod
    def _valid(
        cls, sm: float | None, mem: float | None, limit: float | None, extras: dict[str, Any]
    ) -> OperatingPoint:
        """A point from values already checked as ``__post_init__`` would (and owned)."""
        point = object.__new__(cls)
        # Frozen: the fields go straight into the instance dict, checked once above.
        point.__dict__.update(
            sm_clock_mhz=sm, mem_clock_mhz=mem, power_limit_w=limit, extras=extras
        )
        return point

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> OperatingPoint:
        """Inverse of :meth:`to_dict`; unknown keys are rejected.

        Raises:
            ValueError: on unknown keys, non-numeric or non-finite values, values ≤ 0, or
                extras that are not an object; the message names the field
                (``op_point.sm_clock_mhz: …``).
        """
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f"op_point must be an object, got {type(data).__name__}")
        known = {*_DEVICE_FIELDS, "extras"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(
                f"op_point has unknown key(s) {sorted(map(str, unknown))}; expected {sorted(known)}"
            )
        kwargs: dict[str, Any] = {}
        for name in _DEVICE_FIELDS:
            value = data.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(
                    f"op_point.{name} must be a number ({_UNITS[name]}), got {value!r}"
                )
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if not (math.isfinite(number) and number > 0):
                raise ValueError(
                    f"op_point.{name} must be a finite number > 0 ({_UNITS[name]}), got {value!r}"
                )
            kwargs[name] = number
        extras = data.get("extras")
        if extras is None:
            extras = {}
        if not isinstance(extras, Mapping):
            raise ValueError("op_point.extras must be an object (name → value)")
        return cls(**kwargs, extras=dict(extras))
