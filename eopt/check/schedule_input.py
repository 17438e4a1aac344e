"""What ``eopt check`` runs when it is given a schedule ``eopt solve`` wrote.

A solved schedule (``eopt.schedule/1``) places element *types* at chosen settings: the
same type may run at several SM clocks. The check's runner keys what it runs by element
name, one setting per name, so every (type, κ, ω) the schedule uses becomes one check
element, named by its type when the type runs at one setting only, and ``type@setting``
otherwise (e.g. ``stage0.forward@1320MHz``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eopt.calculus.schedule import SETTING_CHANGE, Placement, PlacementsError, solved_placements
from eopt.model.fileformats import KINDS, Where, parse_json, read_text
from eopt.model.signature import Signature

__all__ = ["SolvedCheck", "is_solved_schedule", "read_solved_for_check"]


@dataclass(frozen=True)
class SolvedCheck:
    """A solved schedule as the check runs it.

    Attributes:
        placements: One placement per scheduled element, each at a signature named for
            its check element.
        kinds: Check element name → the element type it is (what a kernel map names).
        signatures: The renamed signatures, one per check element.
        devices: The schedule's devices that run something, in the schedule's order.
        element_names: Per placement, the schedule element's own name (``F[s0,m3]``).
        device_model: The GPU model the schedule was planned for (None: not recorded).
        setting_changes: How many setting-change intervals were left out (the runner
            changes the setting itself when the next element starts).
    """

    placements: tuple[Placement, ...]
    kinds: Mapping[str, str]
    signatures: Mapping[str, Signature]
    devices: tuple[str, ...]
    element_names: tuple[str, ...]
    device_model: str | None
    setting_changes: int


def is_solved_schedule(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a JSON file declaring ``eopt.schedule/1`` (read cheaply, no
    validation: the reader does that)."""
    p = Path(path)
    if p.suffix.lower() != ".json":
        return False
    try:
        data = parse_json(read_text(p, Where(str(p)), what="a schedule"), Where(str(p)))
    except (ValueError, OSError):
        return False
    return isinstance(data, Mapping) and data.get("schema") == KINDS["schedule"].schema


def _check_name(sig: Signature, settings: Mapping[str, set[tuple[str, Any]]]) -> str:
    """The check element's name for a type at one setting."""
    chosen = settings[sig.name]
    if len(chosen) == 1:
        return sig.name
    impls = {impl for impl, _ in chosen}
    label = sig.op_point.label()
    return f"{sig.name}@{sig.impl}/{label}" if len(impls) > 1 else f"{sig.name}@{label}"


def read_solved_for_check(
    path: str | os.PathLike[str], library: Iterable[Signature]
) -> SolvedCheck:
    """Read a solved schedule against ``library`` for ``eopt check``.

    Args:
        path: The ``eopt.schedule/1`` file.
        library: The signatures the schedule was solved with.

    Raises:
        PlacementsError: naming the file and the element whose signature is missing, or
            a file that is not a valid schedule.
    """
    p = Path(path)
    at = Where(str(p), error=PlacementsError)
    data = parse_json(read_text(p, at, what="a schedule"), at)
    if not isinstance(data, Mapping):
        at.fail("expected a JSON object (a schedule written by `eopt solve`)")
    placed = solved_placements(data, list(library), str(p))
    items = [q for q in placed.placements if q.signature.name != SETTING_CHANGE]
    settings: dict[str, set[tuple[str, Any]]] = {}
    for q in items:
        settings.setdefault(q.signature.name, set()).add((q.signature.impl, q.signature.op_point))
    kinds: dict[str, str] = {}
    renamed: dict[str, Signature] = {}
    placements: list[Placement] = []
    for q in items:
        name = _check_name(q.signature, settings)
        kinds[name] = q.signature.name
        sig = renamed.setdefault(name, q.signature.with_(name=name, term=name))
        placements.append(Placement(sig.on(q.device), q.device, q.start))
    order = [str(d.get("name")) for d in data.get("devices", []) if isinstance(d, Mapping)]
    used = {q.device for q in placements}
    raw_elements = data.get("elements", [])
    model = data.get("device_model")
    return SolvedCheck(
        placements=tuple(placements),
        kinds=kinds,
        signatures=renamed,
        devices=tuple(d for d in order if d in used),
        element_names=tuple(str(e.get("name")) for e in raw_elements if isinstance(e, Mapping)),
        device_model=model if isinstance(model, str) else None,
        setting_changes=len(placed.placements) - len(items),
    )
