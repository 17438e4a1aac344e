"""Context variables (paper §3.1): the entry context φ and the runtime context ρ.

The entry context φ is the state an element inherits from prior execution (die
temperature, cache state, the element that ran just before, whatever else a device
reports); the runtime context ρ is the set of elements running concurrently with it. The
null context φ_null (Axiom M2) is the reproducible starting state a characterization
protocol realizes: an :class:`EntryContext` with no state set. An isolated run has the
empty co-run set.

Both are immutable values with a JSON layout (``to_dict`` / ``from_dict``) used inside
signature libraries (the ``context`` field), interaction graphs and sweep metadata.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eopt.model.fileformats import Where, mapping, no_unknown, number, sequence, string

__all__ = [
    "ISOLATED",
    "NULL_ENTRY",
    "Context",
    "ContextError",
    "EntryContext",
    "RuntimeContext",
    "device_entry_context",
]

Scalar = float | str


class ContextError(ValueError):
    """A context with values the calculus cannot use (NaN temperature, empty names …)."""


def _where(where: Where | None) -> Where:
    return where if where is not None else Where("<context>", error=ContextError)


def _scalar(value: Any, at: Where) -> Scalar:
    """A state variable's value: a finite number or a non-empty label."""
    if isinstance(value, str):
        return string(value, at, what="a state label")
    return number(value, at)


@dataclass(frozen=True)
class EntryContext:
    """φ: the physical state an element inherits (paper Definition 3.2).

    Attributes:
        temperature_c: Die temperature at entry, in °C (None: not recorded or not set).
        cache: Cache state label (``"cold"``, ``"warm"`` …; None: not set).
        after: Element type that ran just before on the same device (None: nothing
            ran before, or not known).
        state: Any other state variable a device reports (name → number or label).
    """

    temperature_c: float | None = None
    cache: str | None = None
    after: str | None = None
    state: Mapping[str, Scalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.temperature_c is not None:
            t = self.temperature_c
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
                raise ContextError(f"entry context: temperature_c must be finite °C, got {t!r}")
            object.__setattr__(self, "temperature_c", float(t))
        for name in ("cache", "after"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ContextError(f"entry context: {name} must be a non-empty label or None")
        state = dict(self.state)
        for key, value in state.items():
            bad_number = isinstance(value, float) and not math.isfinite(value)
            if isinstance(value, bool) or not isinstance(value, (int, float, str)) or bad_number:
                raise ContextError(
                    f"entry context: state {key!r} must be a finite number or a label, "
                    f"got {value!r}"
                )
        object.__setattr__(self, "state", state)

    def __hash__(self) -> int:
        # ``state`` is a mapping: hash its sorted items, so contexts can key sets (Φ).
        return hash((self.temperature_c, self.discrete()))

    @property
    def is_null(self) -> bool:
        """Whether this is the null context φ_null (no state carried from prior work)."""
        return (
            self.temperature_c is None
            and self.cache is None
            and self.after is None
            and not self.state
        )

    def discrete(self) -> tuple[Any, ...]:
        """Everything but the temperature, as a comparable key (labels must match exactly;
        temperature is the axis a contextual signature interpolates along)."""
        return (self.cache, self.after, tuple(sorted(self.state.items())))

    def to_dict(self) -> dict[str, Any]:
        """JSON layout: only the variables that are set (``{}`` is φ_null)."""
        out: dict[str, Any] = {}
        if self.temperature_c is not None:
            out["temperature_c"] = self.temperature_c
        if self.cache is not None:
            out["cache"] = self.cache
        if self.after is not None:
            out["after"] = self.after
        if self.state:
            out["state"] = dict(self.state)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: Where | None = None) -> EntryContext:
        """Inverse of :meth:`to_dict`, validating every field.

        Raises:
            ContextError: (or ``where``'s error type) naming the bad field.
        """
        at = _where(where)
        data = mapping(data, at, what="an entry context object")
        no_unknown(data, {"temperature_c", "cache", "after", "state"}, at)
        temp = data.get("temperature_c")
        state_raw = mapping(data.get("state", {}), at / "state", what="an object of state")
        return cls(
            temperature_c=None if temp is None else number(temp, at / "temperature_c", unit="°C"),
            cache=None if data.get("cache") is None else string(data["cache"], at / "cache"),
            after=None if data.get("after") is None else string(data["after"], at / "after"),
            state={str(k): _scalar(v, at / "state" / str(k)) for k, v in state_raw.items()},
        )

    def __str__(self) -> str:
        if self.is_null:
            return "φ_null"
        parts = []
        if self.temperature_c is not None:
            parts.append(f"{self.temperature_c:g} °C")
        if self.cache is not None:
            parts.append(f"cache {self.cache}")
        if self.after is not None:
            parts.append(f"after {self.after}")
        parts += [f"{k}={v}" for k, v in sorted(self.state.items())]
        return ", ".join(parts)


NULL_ENTRY = EntryContext()
"""The null context φ_null."""


@dataclass(frozen=True)
class RuntimeContext:
    """ρ: the elements co-running with an element (paper Definition 3.2), itself excluded.

    Attributes:
        corunners: Element types running concurrently (sorted, no duplicates; empty:
            isolation, ρ = {e}).
        offset_s: Start of the element after the co-run group's start, in s (part of the
            co-scheduled configuration; 0 when all co-start).
    """

    corunners: tuple[str, ...] = ()
    offset_s: float = 0.0

    def __post_init__(self) -> None:
        names = (self.corunners,) if isinstance(self.corunners, str) else self.corunners
        for name in names:
            if not isinstance(name, str) or not name:
                raise ContextError(f"runtime context: co-runners must be names, got {name!r}")
        object.__setattr__(self, "corunners", tuple(sorted(set(names))))
        off = self.offset_s
        if isinstance(off, bool) or not isinstance(off, (int, float)) or not math.isfinite(off):
            raise ContextError(f"runtime context: offset_s must be finite s, got {off!r}")
        if off < 0:
            raise ContextError(f"runtime context: offset_s must be ≥ 0 s, got {off!r}")
        object.__setattr__(self, "offset_s", float(off))

    @property
    def isolated(self) -> bool:
        """Whether the element runs alone (ρ = {e})."""
        return not self.corunners

    def to_dict(self) -> dict[str, Any]:
        """JSON layout (``{"corunners": []}`` is isolation)."""
        out: dict[str, Any] = {"corunners": list(self.corunners)}
        if self.offset_s:
            out["offset_s"] = self.offset_s
        return out

    @classmethod
    def from_dict(cls, data: Any, where: Where | None = None) -> RuntimeContext:
        """Inverse of :meth:`to_dict`, validating every field.

        Raises:
            ContextError: (or ``where``'s error type) naming the bad field.
        """
        at = _where(where)
        data = mapping(data, at, what="a runtime context object")
        no_unknown(data, {"corunners", "offset_s"}, at)
        names = sequence(data.get("corunners", []), at / "corunners", what="a list of names")
        return cls(
            corunners=tuple(string(n, at / "corunners" / i) for i, n in enumerate(names)),
            offset_s=number(data.get("offset_s", 0.0), at / "offset_s", unit="s", min=0),
        )

    def __str__(self) -> str:
        if self.isolated:
            return "isolated"
        shift = f" (+{self.offset_s:g} s)" if self.offset_s else ""
        return "with " + ", ".join(self.corunners) + shift


ISOLATED = RuntimeContext()
"""The runtime context of an element running alone."""


@dataclass(frozen=True)
class Context:
    """The pair (φ, ρ) a signature value was characterized at.

    Attributes:
        entry: The entry context φ.
        runtime: The runtime context ρ.
    """

    entry: EntryContext = NULL_ENTRY
    runtime: RuntimeContext = ISOLATED

    @property
    def is_null(self) -> bool:
        """Whether this is the null context in isolation (the context-independent form)."""
        return self.entry.is_null and self.runtime.isolated

    def to_dict(self) -> dict[str, Any]:
        """JSON layout ``{"entry": {...}, "runtime": {...}}``."""
        return {"entry": self.entry.to_dict(), "runtime": self.runtime.to_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: Where | None = None) -> Context:
        """Inverse of :meth:`to_dict`.

        Raises:
            ContextError: (or ``where``'s error type) naming the bad field.
        """
        at = _where(where)
        data = mapping(data, at, what="a context object with entry and runtime")
        no_unknown(data, {"entry", "runtime"}, at)
        return cls(
            entry=EntryContext.from_dict(data.get("entry", {}), at / "entry"),
            runtime=RuntimeContext.from_dict(data.get("runtime", {}), at / "runtime"),
        )

    def __str__(self) -> str:
        return f"{self.entry}; {self.runtime}"


def device_entry_context(device: Any, after: str | None = None) -> EntryContext:
    """The entry context a device reports now (what a measurement records at its start).

    Uses the device's ``entry_context()`` (a mapping of state variables) where it has one,
    else its ``temperature_c()``; a device that reports neither gives a context with only
    ``after`` set. Reading the state never fails a measurement: a device that raises
    or returns values the calculus cannot use contributes nothing.

    Args:
        device: A :class:`eopt.devices.Device` (simulated or real).
        after: The element type that ran just before, when the caller knows it.
    """
    state: dict[str, Scalar] = {}
    report = getattr(device, "entry_context", None)
    if callable(report):
        try:
            raw = report()
        except Exception:  # an optional probe: a failing one must not fail the sweep
            raw = None
        if isinstance(raw, Mapping):
            for key, value in raw.items():
                ok_number = isinstance(value, (int, float)) and not isinstance(value, bool)
                if (ok_number and math.isfinite(value)) or (isinstance(value, str) and value):
                    state[str(key)] = value
    if "temperature_c" not in state:
        probe = getattr(device, "temperature_c", None)
        if callable(probe):
            try:
                temp = probe()
            except Exception:  # no sensor, or NVML refuses: the context is just unknown
                temp = None
            is_number = isinstance(temp, (int, float)) and not isinstance(temp, bool)
            if is_number and math.isfinite(temp):  # type: ignore[arg-type]
                state["temperature_c"] = float(temp)  # type: ignore[arg-type]
    temp_value = state.pop("temperature_c", None)
    cache = state.pop("cache", None)
    return EntryContext(
        temperature_c=float(temp_value) if isinstance(temp_value, (int, float)) else None,
        cache=str(cache) if cache is not None else None,
        after=after,
        state=state,
    )
