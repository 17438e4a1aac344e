"""Energy signatures: the atoms of energy calculus (paper §3.2, §4.3)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from eopt.model.context import Context, ContextError
from eopt.model.fileformats import (
    Where,
    json_ready,
    mapping,
    no_unknown,
    number,
    required,
    sequence,
    string,
)
from eopt.model.operating_point import OperatingPoint

__all__ = ["SCHEMA", "Signature", "SignatureError"]

SCHEMA = "eopt.signature/1"


#: The largest values a signature file may hold: a 100 MW machine for 30 years. Far
#: beyond any measurement, and small enough that sums and products of thousands of them
#: (compositions, frontiers, plans) stay finite.
MAX_POWER_W = 1e8
MAX_TIME_S = 1e9
MAX_ENERGY_J = 1e17


#: The fields :meth:`Signature._read` reads itself; ``device`` (the old spelling) and
#: anything unknown take the full path.
_FAST_FIELDS = frozenset(
    {
        "schema", "name", "static_power", "time", "dynamic_energy", "var_time",
        "var_energy", "devices", "workload", "impl", "op_point", "meta", "term", "context",
    }
)  # fmt: skip
#: The numbers of a signature: field, largest value, default (None: required).
_NUMBER_FIELDS: tuple[tuple[str, float, float | None], ...] = (
    ("static_power", MAX_POWER_W, None),
    ("time", MAX_TIME_S, None),
    ("dynamic_energy", MAX_ENERGY_J, None),
    ("var_time", MAX_TIME_S**2, 0.0),
    ("var_energy", MAX_ENERGY_J**2, 0.0),
)
_EMPTY: dict[str, Any] = {}


class SignatureError(ValueError):
    """A signature with values that violate the calculus' axioms (negative, NaN …)."""


def _check_number(name: str, field_name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SignatureError(f"signature {name!r}: {field_name} must be a number, got {value!r}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise SignatureError(f"signature {name!r}: {field_name} must be finite, got {value}")
    if value < 0:
        raise SignatureError(f"signature {name!r}: {field_name} must be ≥ 0, got {value}")
    return value


def _context(data: Any, at: Where) -> Context | None:
    """A signature's ``context`` field (absent or null: the null context in isolation)."""
    if data is None:
        return None
    try:
        return Context.from_dict(data, at)
    except ContextError as exc:  # a value check of the context itself
        at.fail(str(exc))


@dataclass(frozen=True)
class Signature:
    """The reduced energy signature of an element: E = s·T + d, with uncertainty.

    Attributes:
        name: The element's name, usually its type (``stage0.forward``, ``gemm``).
        static_power: s, the ready device's draw at the operating point, in W.
        time: T, the element's execution time, in s.
        dynamic_energy: d ≥ 0, the energy above static draw, in J.
        var_time: σ_T², variance of a single run's time, in s².
        var_energy: σ_E², variance of a single run's total energy, in J².
        devices: The devices hosting the element (one for a measured element).
        workload: θ, workload parameters (tensor sizes, batch size …).
        impl: κ, the implementation's name.
        op_point: ω, the operating point it was measured at.
        meta: How it was measured (method, backend, n runs, medians, CIs …).
        term: The operator expression that produced it (its name for a measured element).
        context: The context (φ, ρ) these values were characterized at; None for the
            null context in isolation, the context-independent form (paper §4.3).
    """

    name: str
    static_power: float
    time: float
    dynamic_energy: float
    var_time: float = 0.0
    var_energy: float = 0.0
    devices: tuple[str, ...] = ()
    workload: Mapping[str, Any] = field(default_factory=dict)
    impl: str = "default"
    op_point: OperatingPoint = field(default_factory=OperatingPoint)
    meta: Mapping[str, Any] = field(default_factory=dict)
    term: str = ""
    context: Context | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SignatureError(f"signature name must be a non-empty string, got {self.name!r}")
        for attr in ("static_power", "time", "dynamic_energy", "var_time", "var_energy"):
            object.__setattr__(self, attr, _check_number(self.name, attr, getattr(self, attr)))
        devices = self.devices
        if isinstance(devices, str):
            devices = (devices,)
        object.__setattr__(self, "devices", tuple(dict.fromkeys(str(d) for d in devices)))
        if not isinstance(self.op_point, OperatingPoint):
            op = OperatingPoint.from_dict(self.op_point)  # type: ignore[arg-type]
            object.__setattr__(self, "op_point", op)
        object.__setattr__(self, "workload", dict(self.workload))
        object.__setattr__(self, "meta", dict(self.meta))
        if not self.term:
            object.__setattr__(self, "term", self.name)
        if self.context is not None and not isinstance(self.context, Context):
            raise SignatureError(
                f"signature {self.name!r}: context must be a Context or None, got {self.context!r}"
            )

    # Derived quantities -------------------------------------------------------------------
    @property
    def energy(self) -> float:
        """Total energy E = s·T + d, in J."""
        return self.static_power * self.time + self.dynamic_energy

    @property
    def static_energy(self) -> float:
        """Static energy s·T, in J."""
        return self.static_power * self.time

    @property
    def var_dynamic(self) -> float:
        """σ_d² = σ_E² − s²·σ_T² (clamped at 0), in J²."""
        return max(0.0, self.var_energy - self.static_power**2 * self.var_time)

    @property
    def std_energy(self) -> float:
        """σ_E, in J."""
        return math.sqrt(self.var_energy)

    @property
    def std_time(self) -> float:
        """σ_T, in s."""
        return math.sqrt(self.var_time)

    @property
    def mean_power(self) -> float:
        """Average power E / T, in W (0 for a zero-length element)."""
        return self.energy / self.time if self.time > 0 else 0.0

    @property
    def device(self) -> str:
        """The single hosting device.

        Raises:
            SignatureError: when the element spans several devices or none.
        """
        if len(self.devices) != 1:
            raise SignatureError(
                f"signature {self.name!r} spans {len(self.devices)} devices "
                f"{list(self.devices)}; use .devices"
            )
        return self.devices[0]

    def with_(self, **changes: Any) -> Signature:
        """A copy with fields replaced (signatures are immutable)."""
        return replace(self, **changes)

    def on(self, device: str | Iterable[str]) -> Signature:
        """A copy placed on ``device``."""
        devices = (device,) if isinstance(device, str) else tuple(device)
        return replace(self, devices=devices)

    # Serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping in the ``eopt.signature/1`` layout."""
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "name": self.name,
            "static_power": self.static_power,
            "time": self.time,
            "dynamic_energy": self.dynamic_energy,
            "var_time": self.var_time,
            "var_energy": self.var_energy,
            "devices": list(self.devices),
            # Free-form: a NaN there means "unknown", which JSON writes as null.
            "workload": json_ready(dict(self.workload)),
            "impl": self.impl,
            "op_point": self.op_point.to_dict(),
            "meta": json_ready(dict(self.meta)),
        }
        if self.term != self.name:
            out["term"] = self.term
        if self.context is not None:
            out["context"] = self.context.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Any, where: Where | None = None) -> Signature:
        """Inverse of :meth:`to_dict`, validating every field as a library file must.

        Every field is checked (types, finite numbers ≥ 0, no unknown fields); a
        library adds that a measured element takes time (see
        :func:`eopt.model.library.read_library`).

        Args:
            data: The parsed object.
            where: Its place in a file (the errors name it); errors are
                :class:`SignatureError` naming ``<signature>`` when not given.

        Raises:
            SignatureError: (or ``where``'s error type) naming the missing or invalid
                field.
        """
        fast = cls._read(data)
        if fast is not None:
            return fast
        at = where if where is not None else Where("<signature>", error=SignatureError)
        data = mapping(data, at, what="a JSON object")
        schema = data.get("schema", SCHEMA)
        if schema != SCHEMA:
            (at / "schema").fail(f"expected {SCHEMA!r}, got {schema!r}")
        for key in ("name", "static_power", "time", "dynamic_energy"):
            required(data, key, at)
        known = {
            "schema", "name", "static_power", "time", "dynamic_energy", "var_time",
            "var_energy", "devices", "device", "workload", "impl", "op_point", "meta", "term",
            "context",
        }  # fmt: skip
        no_unknown(data, known, at)
        name = data["name"]
        if not isinstance(name, str) or not name:
            (at / "name").fail(f"expected a non-empty element name, got {name!r}")
        devices = data.get("devices", data.get("device", ()))
        if isinstance(devices, (str, tuple)):
            devices = [devices] if isinstance(devices, str) else list(devices)
        devices = sequence(devices, at / "devices", what="a list of device names")
        for i, device in enumerate(devices):
            string(device, at / "devices" / i, what="a device name")
        try:
            op_point = OperatingPoint.from_dict(data.get("op_point"))
        except ValueError as exc:
            at.fail(str(exc))
        return cls(
            name=name,
            static_power=number(
                data["static_power"], at / "static_power", unit="W", min=0, max=MAX_POWER_W
            ),
            time=number(data["time"], at / "time", unit="s", min=0, max=MAX_TIME_S),
            dynamic_energy=number(
                data["dynamic_energy"], at / "dynamic_energy", unit="J", min=0, max=MAX_ENERGY_J
            ),
            var_time=number(
                data.get("var_time", 0.0), at / "var_time", unit="s²", min=0, max=MAX_TIME_S**2
            ),
            var_energy=number(
                data.get("var_energy", 0.0),
                at / "var_energy",
                unit="J²",
                min=0,
                max=MAX_ENERGY_J**2,
            ),
            devices=tuple(str(d) for d in devices),
            workload=mapping(data.get("workload", {}), at / "workload"),
            impl=string(data.get("impl", "default"), at / "impl", what="an implementation name"),
            op_point=op_point,
            meta=mapping(data.get("meta", {}), at / "meta"),
            term=string(data["term"], at / "term", what="a term") if "term" in data else "",
            context=_context(data.get("context"), at / "context"),
        )

    @classmethod
    def _read(cls, data: Any) -> Signature | None:
        """:meth:`from_dict` of the shape libraries hold, or None for anything else.

        The usual line (known fields only, finite numbers in range, device names as
        text, no ``device`` or ``context``) is checked here in one pass, without a
        :class:`Where` per field or ``__post_init__`` repeating the checks; a line with
        anything unusual — a fault included — returns None, and :meth:`from_dict`'s full
        path then reads it, or names the fault exactly as it always has.
        """
        if type(data) is not dict or not _FAST_FIELDS.issuperset(data):
            return None
        name = data.get("name")
        if type(name) is not str or not name or data.get("schema", SCHEMA) != SCHEMA:
            return None
        numbers: list[float] = []
        for key, largest, default in _NUMBER_FIELDS:
            value = data.get(key, default)
            kind = type(value)
            if kind is float:
                if not 0.0 <= value <= largest:  # NaN fails too
                    return None
            elif kind is int:
                if not 0 <= value <= largest:
                    return None
                value = float(value)
            else:  # missing (None) or not a number
                return None
            numbers.append(value)
        devices = data.get("devices", ())
        if devices:
            if type(devices) is not list:
                return None
            for device in devices:
                if type(device) is not str or not device:
                    return None
            devices = tuple(dict.fromkeys(devices))
        else:
            if devices != () and devices != []:  # an empty object, "" …: from_dict says
                return None
            devices = ()
        workload = data.get("workload", _EMPTY)
        meta = data.get("meta", _EMPTY)
        impl = data.get("impl", "default")
        term = data.get("term", name)
        if type(workload) is not dict or type(meta) is not dict:
            return None
        if type(impl) is not str or not impl or type(term) is not str or not term:
            return None
        if data.get("context") is not None:
            return None
        op_point = OperatingPoint._read(data.get("op_point"))
        if op_point is None:
            return None
        sig = object.__new__(cls)
        # Frozen: the fields go straight into the instance dict, checked once above.
        sig.__dict__.update(
            name=name,
            static_power=numbers[0],
            time=numbers[1],
            dynamic_energy=numbers[2],
            var_time=numbers[3],
            var_energy=numbers[4],
            devices=devices,
            workload=dict(workload),
            impl=impl,
            op_point=op_point,
            meta=dict(meta),
            term=term,
            context=None,
        )
        return sig

    def __str__(self) -> str:
        return (
            f"{self.name}: E={self.energy:.6g} J (±{self.std_energy:.2g}), T={self.time:.6g} s, "
            f"s={self.static_power:.4g} W, d={self.dynamic_energy:.6g} J"
        )
