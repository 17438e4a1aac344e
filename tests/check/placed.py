"""Shared by the naming tests: groups of elements placed one after another per device."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eopt.calculus.schedule import Placement
from eopt.model.signature import Signature


def place_groups(
    lib: Mapping[str, Signature],
    groups: Sequence[Sequence[tuple[str, str]]],
    gaps_s: Sequence[float] | None = None,
) -> list[Placement]:
    """Each group starts when its devices are free, after its gap (s); its members
    co-start. Elements are ``(signature name, device)``."""
    free: dict[str, float] = {}
    out = []
    for g, group in enumerate(groups):
        gap = gaps_s[g] if gaps_s is not None else 0.0
        start = max(free.get(d, 0.0) for _, d in group) + gap
        for name, d in group:
            out.append(Placement(lib[name].on(d), d, start))
            free[d] = max(free.get(d, 0.0), start + lib[name].time)
    return out
