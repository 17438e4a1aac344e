"""Contextual signatures: an element characterized over a set of contexts (paper §3.2).

A :class:`ContextualSignature` holds one element's signature values measured at several
contexts (φ, ρ) — after different predecessors, at different entry temperatures, with
different co-runners. Its characterized sets are the paper's Φ (entry contexts) and 𝒫
(runtime contexts). Evaluating it at a context:

* labels (cache state, the predecessor, device state labels, the co-runners) must match
  a characterized context exactly;
* the entry temperature is an axis: between two characterized temperatures the values
  are interpolated linearly, at a characterized temperature they are returned as
  measured;
* anywhere else the context lies outside the characterized set: an error
  (:class:`ContextOutsideError`), or with ``outside="warn"`` a :class:`ContextWarning`
  and the nearest characterized values — never an extrapolation.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from eopt.model.context import ISOLATED, NULL_ENTRY, Context, EntryContext, RuntimeContext
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature

__all__ = [
    "ContextOutsideError",
    "ContextWarning",
    "ContextualSignature",
    "OutsidePolicy",
    "contextual_signatures",
]

OutsidePolicy = Literal["error", "warn"]

# Two offsets within this many seconds are the same co-scheduled configuration (1 ns:
# far below any kernel's launch jitter).
OFFSET_TOL_S = 1e-9


class ContextOutsideError(ValueError):
    """A contextual signature evaluated at a context outside its characterized set."""


class ContextWarning(UserWarning):
    """A contextual signature evaluated outside its characterized set, nearest values used."""


def _context_of(sig: Signature) -> Context:
    return sig.context if sig.context is not None else Context()


@dataclass(frozen=True)
class ContextualSignature:
    """One element's signature values over the contexts it was characterized at.

    Attributes:
        name: The element (type) name.
        points: Its signatures, one per characterized context (a signature without a
            context counts as the null context in isolation); same name, κ and ω.
    """

    name: str
    points: tuple[Signature, ...]

    def __post_init__(self) -> None:
        points = tuple(self.points)
        if not points:
            raise ValueError(f"contextual signature {self.name!r} needs at least one point")
        first = points[0]
        for sig in points:
            if sig.name != self.name:
                raise ValueError(
                    f"contextual signature {self.name!r}: point {sig.name!r} is another element"
                )
            if sig.impl != first.impl or sig.op_point != first.op_point:
                raise ValueError(
                    f"contextual signature {self.name!r}: points differ in κ or ω "
                    f"({first.impl} at {first.op_point.label()} vs {sig.impl} at "
                    f"{sig.op_point.label()}); one contextual signature per (κ, ω)"
                )
        object.__setattr__(self, "points", points)

    @classmethod
    def from_signatures(cls, signatures: Iterable[Signature]) -> ContextualSignature:
        """Build one from signatures of a single element at one (κ, ω).

        Raises:
            ValueError: when empty, or the signatures differ in name, κ or ω.
        """
        sigs = list(signatures)
        if not sigs:
            raise ValueError("a contextual signature needs at least one signature")
        return cls(sigs[0].name, tuple(sigs))

    # The characterized sets ---------------------------------------------------------------
    @property
    def entry_contexts(self) -> tuple[EntryContext, ...]:
        """Φ: the distinct entry contexts characterized."""
        return tuple(dict.fromkeys(_context_of(s).entry for s in self.points))

    @property
    def runtime_contexts(self) -> tuple[RuntimeContext, ...]:
        """𝒫: the distinct runtime contexts characterized."""
        return tuple(dict.fromkeys(_context_of(s).runtime for s in self.points))

    def contexts(self) -> tuple[Context, ...]:
        """Every characterized (φ, ρ)."""
        return tuple(_context_of(s) for s in self.points)

    def covers(self, entry: EntryContext = NULL_ENTRY, runtime: RuntimeContext = ISOLATED) -> bool:
        """Whether (φ, ρ) lies in the characterized set (labels match; the temperature,
        when given, within the characterized range)."""
        try:
            self.at(entry, runtime)
        except ContextOutsideError:
            return False
        return True

    # Evaluation ---------------------------------------------------------------------------
    def at(
        self,
        entry: EntryContext = NULL_ENTRY,
        runtime: RuntimeContext = ISOLATED,
        *,
        outside: OutsidePolicy = "error",
    ) -> Signature:
        """The signature values at (φ, ρ).

        Args:
            entry: The entry context the composition realizes.
            runtime: The runtime context it realizes.
            outside: ``"error"`` raises when (φ, ρ) lies outside the characterized set;
                ``"warn"`` warns and returns the nearest characterized values (by
                temperature) where the labels match.

        Returns:
            A signature whose ``context`` is the query (interpolated values carry
            ``meta["interpolated_between_c"]``).

        Raises:
            ContextOutsideError: outside the characterized set (always, with either
                policy, when no characterized context has the query's labels).
        """
        if outside not in ("error", "warn"):
            raise ValueError(f"outside must be 'error' or 'warn', got {outside!r}")
        query = Context(entry, runtime)
        same = [s for s in self.points if self._labels_match(_context_of(s), query)]
        if not same:
            raise ContextOutsideError(
                f"{self.name}: no values characterized at ({query}); characterized at: "
                f"{self._listing()}. Characterize {self.name} at this context or compose "
                "it at the null context with its bias bound"
            )
        temps = [_context_of(s).entry.temperature_c for s in same]
        if entry.temperature_c is None:
            if len(same) == 1:
                return same[0].with_(context=query)
            shown = ", ".join(f"{t:g} °C" for t in temps if t is not None) or "several"
            raise ContextOutsideError(
                f"{self.name}: characterized at several entry contexts ({shown}) matching "
                f"({query}); give the entry temperature to choose among them"
            )
        if any(t is None for t in temps):
            raise ContextOutsideError(
                f"{self.name}: no entry temperature was recorded for its values at "
                f"({query}), so {entry.temperature_c:g} °C cannot be checked against "
                "the characterized set"
            )
        ordered = sorted(zip(temps, same, strict=True), key=lambda p: p[0])  # type: ignore[arg-type, return-value]
        t = entry.temperature_c
        lo_t, hi_t = ordered[0][0], ordered[-1][0]
        assert lo_t is not None and hi_t is not None
        if t < lo_t or t > hi_t:
            message = (
                f"{self.name}: entry temperature {t:g} °C lies outside the characterized "
                f"range {lo_t:g} – {hi_t:g} °C at ({query}); "
            )
            if outside == "error":
                raise ContextOutsideError(
                    message + "characterize it there, or pass outside='warn' to use the "
                    "nearest characterized values"
                )
            nearest = ordered[0][1] if t < lo_t else ordered[-1][1]
            warnings.warn(
                message + f"using the values at {lo_t if t < lo_t else hi_t:g} °C",
                ContextWarning,
                stacklevel=2,
            )
            return nearest.with_(context=query)
        for (t0, s0), (t1, s1) in itertools.pairwise(ordered):
            assert t0 is not None and t1 is not None
            if t == t0:
                return s0.with_(context=query)
            if t0 < t <= t1:
                if t == t1:
                    return s1.with_(context=query)
                return _interpolate(s0, s1, (t - t0) / (t1 - t0), query, (t0, t1))
        return ordered[-1][1].with_(context=query)  # one point, at exactly t

    @staticmethod
    def _labels_match(have: Context, want: Context) -> bool:
        if have.entry.discrete() != want.entry.discrete():
            return False
        if have.runtime.corunners != want.runtime.corunners:
            return False
        return math.isclose(have.runtime.offset_s, want.runtime.offset_s, abs_tol=OFFSET_TOL_S)

    def _listing(self) -> str:
        shown = [f"({c})" for c in self.contexts()[:8]]
        more = len(self.points) - len(shown)
        return "; ".join(shown) + (f" and {more} more" if more > 0 else "")


def _interpolate(
    a: Signature, b: Signature, w: float, query: Context, between: tuple[float, float]
) -> Signature:
    """Linear interpolation of every component between two characterized points."""

    def mix(x: float, y: float) -> float:
        return (1.0 - w) * x + w * y

    return a.with_(
        static_power=mix(a.static_power, b.static_power),
        time=mix(a.time, b.time),
        dynamic_energy=mix(a.dynamic_energy, b.dynamic_energy),
        var_time=mix(a.var_time, b.var_time),
        var_energy=mix(a.var_energy, b.var_energy),
        meta={**a.meta, "interpolated_between_c": list(between)},
        context=query,
    )


def contextual_signatures(signatures: Iterable[Signature]) -> list[ContextualSignature]:
    """Group signatures that carry a context by element, κ and ω (first-seen order).

    Signatures without a context are the context-independent values and are left out.
    """
    groups: dict[tuple[str, str, OperatingPoint], list[Signature]] = {}
    for sig in signatures:
        if sig.context is None:
            continue
        key = (sig.name, sig.impl, sig.op_point)
        groups.setdefault(key, []).append(sig)
    return [ContextualSignature.from_signatures(g) for g in groups.values()]
