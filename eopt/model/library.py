"""Signature libraries: ``.jsonl`` files, one ``eopt.signature/1`` object a line.

A library holds each *cell* once. A cell is identified by :func:`cell_key`: the
element's name, its implementation κ, its workload θ, its operating point ω and the GPU
model it was measured on (``meta.device_model``). The GPU itself is not part of the
identity: a cell measured on any GPU of a model stands for that model, so a sweep spread
over many GPUs (shards, a Ray cluster) measures each cell once, and a retry on another GPU
of the same model does not count twice. Where a cell was measured is recorded beside it,
in ``meta.measured_on`` (:func:`measured_on`).

Libraries swept apart (shards of one grid, one library per node) are joined by
:func:`merge_libraries`: exact duplicate lines are dropped, and two different cells with
one identity are named as a conflict — or, on request (``pool=True``), pooled into one
cell per GPU model (:func:`pool_signatures`).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eopt.model.fileformats import (
    MAX_LINE_BYTES,
    FileFormatError,
    Where,
    atomic_write_text,
    decode_utf8,
    dumps_json,
    guard,
    parse_json,
    refuse_other_kind,
)
from eopt.model.lockfile import LockBusyError, ProcessLock
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature, SignatureError

__all__ = [
    "Library",
    "LibraryConflictError",
    "LibraryError",
    "MergeResult",
    "append_signature",
    "cell_key",
    "cell_key_of",
    "cell_label",
    "library_lock",
    "measured_on",
    "merge_libraries",
    "place_label",
    "pool_signatures",
    "read_library",
    "read_library_lines",
    "write_library",
]


class LibraryError(FileFormatError):
    """A library file that cannot be read; the message names file, line and field."""


class LibraryConflictError(LibraryError):
    """Libraries to merge hold different cells with one identity (:func:`cell_key`)."""


_WHAT = "a signature library"


def _iter_lines(path: Path) -> Iterator[tuple[int, Signature]]:
    file = Where(str(path), error=LibraryError)
    if path.exists() and not (path.is_file() or path.is_fifo() or path.is_dir()):
        file.fail(f"is a device or socket, not {_WHAT}; name a .jsonl file")
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        file.fail("no such signature library")
    except IsADirectoryError:
        file.fail(f"cannot read (a folder, not {_WHAT})")
    except OSError as exc:
        file.fail(f"cannot read ({exc.strerror})")
    with handle:
        lines = iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b"")
        for lineno, raw in enumerate(lines, start=1):
            at = file.at_line(lineno)
            if len(raw) > MAX_LINE_BYTES:
                at.fail(f"a line longer than {MAX_LINE_BYTES // 1024**2} MiB; not {_WHAT}")
            # Decoded per line, so a binary or mis-encoded file is reported at its line.
            text = decode_utf8(raw, at, what="a library (one JSON object a line)").strip()
            if not text or text.startswith("#"):
                continue
            with guard(at, what="a signature"):
                try:
                    sig = Signature.from_dict(parse_json(text, at), at)
                except SignatureError as exc:  # a value check of the signature itself
                    at.fail(str(exc))
            if sig.time == 0:  # composites may; a measured element never takes no time
                (at / "time").fail("expected a finite number > 0 (s), got 0")
            yield lineno, sig


def read_library(path: str | os.PathLike[str]) -> list[Signature]:
    """Read every signature of a ``.jsonl`` library.

    Every line is validated as :meth:`Signature.from_dict` and
    :mod:`eopt.model.fileformats` say (finite numbers, no unknown fields), and every
    signature takes time (T > 0); a file of another eopt kind (a plan, a schedule …) is
    named for what it is.

    Raises:
        LibraryError: on the first bad line, naming ``file:line``, the field and the
            reason.
    """
    return [sig for _, sig in read_library_lines(path)]


def read_library_lines(path: str | os.PathLike[str]) -> list[tuple[int, Signature]]:
    """:func:`read_library`, each signature with the line it stands on (1-based).

    Raises:
        LibraryError: as :func:`read_library`.
    """
    p = Path(path)
    # Parsed lines hold no reference cycles, yet the cyclic collector walks the growing
    # heap again and again while a large library is built (about 15 % of its read time):
    # paused for the read, and resumed as it was found.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return list(_iter_lines(p))
    except LibraryError:
        refuse_other_kind(p, ("library",), Where(str(p), error=LibraryError))
        raise
    finally:
        if collecting:
            gc.enable()


def write_library(path: str | os.PathLike[str], signatures: Iterable[Signature]) -> None:
    """Write signatures to ``path`` (replacing it atomically), one JSON object a line."""
    where = str(path)
    lines = [dumps_json(sig.to_dict(), where, sort_keys=True) + "\n" for sig in signatures]
    atomic_write_text(path, "".join(lines))


def append_signature(path: str | os.PathLike[str], signature: Signature) -> None:
    """Append one signature and flush it to disk at once (safe against interruption)."""
    line = dumps_json(signature.to_dict(), str(path), sort_keys=True) + "\n"
    with Path(path).open("a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


class Library:
    """Signatures from one or more libraries, looked up by element name.

    Args:
        signatures: The signatures.
    """

    def __init__(self, signatures: Iterable[Signature]) -> None:
        self.signatures: list[Signature] = list(signatures)

    @classmethod
    def load(cls, *paths: str | os.PathLike[str]) -> Library:
        """Read and concatenate libraries."""
        sigs: list[Signature] = []
        for p in paths:
            sigs.extend(read_library(p))
        return cls(sigs)

    def names(self) -> list[str]:
        """Distinct element names, in first-seen order."""
        return list(dict.fromkeys(s.name for s in self.signatures))

    def by_name(self, name: str) -> list[Signature]:
        """All signatures (every κ, ω) of an element.

        Raises:
            KeyError: with the known names when ``name`` has none.
        """
        found = [s for s in self.signatures if s.name == name]
        if not found:
            known = ", ".join(self.names()[:20])
            raise KeyError(f"no signature named {name!r} in the library (known: {known})")
        return found

    def __len__(self) -> int:
        return len(self.signatures)

    def __iter__(self) -> Iterator[Signature]:
        return iter(self.signatures)


# Cell identity ----------------------------------------------------------------------------
def _canonical(value: Any) -> Any:
    """``value`` with every number a float and every mapping sorted: 1410 and 1410.0, or
    θ written in another order, are one cell."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def cell_key_of(
    name: str,
    impl: str,
    op_point: OperatingPoint,
    workload: Mapping[str, Any],
    model: str,
) -> str:
    """The identity of a cell: name, κ, ω, θ and GPU model, as canonical JSON text.

    Args:
        name: The element's name.
        impl: The implementation κ.
        op_point: The operating point ω.
        workload: θ.
        model: The GPU model (``A100-SXM4-40GB``); never one GPU's name or UUID.
    """
    return json.dumps(
        [name, impl, _canonical(op_point.to_dict()), _canonical(workload), model],
        sort_keys=True,
    )


def cell_key(sig: Signature) -> str:
    """:func:`cell_key_of` a signature (its GPU model from ``meta.device_model``; "" when
    the signature does not say)."""
    model = sig.meta.get("device_model")
    return cell_key_of(
        sig.name, sig.impl, sig.op_point, sig.workload, model if isinstance(model, str) else ""
    )


def cell_label(sig: Signature) -> str:
    """``gemm cublas @ 1410MHz on A100-SXM4-40GB``: a cell, for messages."""
    model = sig.meta.get("device_model")
    on = f" on {model}" if isinstance(model, str) and model else ""
    return f"{sig.name} {sig.impl} @ {sig.op_point.label()}{on}"


def measured_on(sig: Signature) -> Mapping[str, Any] | None:
    """Where a cell was measured: ``meta.measured_on`` (host, gpu, uuid, index), or None
    for a signature that does not say (written by hand, or before eopt recorded it)."""
    place = sig.meta.get("measured_on")
    return place if isinstance(place, Mapping) else None


def place_label(sig: Signature) -> str:
    """``node3/GPU-8f2c…`` or ``node3/sim1``: where a cell was measured, for messages."""
    place = measured_on(sig)
    if place is None:
        return "/".join(sig.devices) or "an unrecorded GPU"
    gpu = place.get("uuid") or place.get("gpu") or "?"
    return f"{place.get('host', '?')}/{gpu}"


# The library's writer ---------------------------------------------------------------------
def library_lock(path: str | os.PathLike[str]) -> ProcessLock:
    """The lock that makes one process at a time write ``path``: ``<path>.lock``."""
    lib = Path(path)
    return ProcessLock(lib.with_name(lib.name + ".lock"))


# Merging ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MergeResult:
    """What :func:`merge_libraries` produced.

    Attributes:
        signatures: The merged cells, in the order first met (input by input).
        read: Signatures read from all inputs.
        duplicates: Exact duplicate lines dropped.
        pooled: Labels of the cells pooled from several measurements (``pool=True``).
        path: The library written, or None when none was asked for.
    """

    signatures: tuple[Signature, ...]
    read: int
    duplicates: int
    pooled: tuple[str, ...]
    path: Path | None


def _line_text(sig: Signature) -> str:
    """The signature as the line a library holds: equal texts are exact duplicates."""
    return dumps_json(sig.to_dict(), "<signature>", sort_keys=True)


def merge_libraries(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str] | None = None,
    *,
    pool: bool = False,
) -> MergeResult:
    """Join libraries (shards of one sweep, one library per node) into one.

    Each cell (:func:`cell_key`) is kept once. Lines that are exact duplicates are dropped.
    Two different lines of one cell — one cell measured twice, on one GPU or on two GPUs of
    the model — are a conflict, named with the file and line of each, unless ``pool``:
    then the measurements of a cell are pooled into one (:func:`pool_signatures`).

    The output is written atomically, while holding its lock (:func:`library_lock`), so a
    sweep cannot append to it meanwhile; it may be one of the inputs.

    Args:
        inputs: The libraries, in the order their cells are kept.
        output: Where to write the merged library; None writes nothing.
        pool: Pool the measurements of a cell instead of refusing them.

    Raises:
        LibraryError: for an input that cannot be read (file, line, field), or an output
            another process is writing.
        LibraryConflictError: naming the conflicting cells (the first three, and how many
            more), without ``pool``.
    """
    lock = library_lock(output) if output is not None else None
    if lock is not None:
        try:
            lock.acquire()
        except LockBusyError as exc:
            raise LibraryError(
                f"{output}: another eopt process is writing to this library: {exc.who}; "
                "wait for it to finish, or merge into another file (-o)"
            ) from None
    try:
        return _merge_locked(inputs, output, pool)
    finally:
        if lock is not None:
            lock.release()


def _merge_locked(
    inputs: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str] | None, pool: bool
) -> MergeResult:
    # cell key → the distinct measurements of it, each with where it was first read
    cells: dict[str, list[tuple[str, str, Signature]]] = {}
    read = duplicates = 0
    for path in inputs:
        for lineno, sig in read_library_lines(path):
            read += 1
            text = _line_text(sig)
            found = cells.setdefault(cell_key(sig), [])
            if any(text == seen for _, seen, _ in found):
                duplicates += 1
                continue
            found.append((f"{path}:{lineno}", text, sig))
    conflicts = [found for found in cells.values() if len(found) > 1]
    if conflicts and not pool:
        raise LibraryConflictError(_conflict_message(conflicts))
    merged: list[Signature] = []
    pooled: list[str] = []
    for found in cells.values():
        if len(found) == 1:
            merged.append(found[0][2])
            continue
        merged.append(pool_signatures([sig for _, _, sig in found]))
        pooled.append(cell_label(found[0][2]))
    if output is not None:
        write_library(output, merged)
    return MergeResult(
        tuple(merged), read, duplicates, tuple(pooled), Path(output) if output else None
    )


def _conflict_message(conflicts: Sequence[Sequence[tuple[str, str, Signature]]]) -> str:
    shown = []
    for found in conflicts[:3]:
        (where, _, first), *others = found
        places = ", ".join(f"{w} ({place_label(s)})" for w, _, s in others)
        shown.append(
            f"{where} ({place_label(first)}) and {places}: {cell_label(first)} measured "
            "more than once, with different numbers"
        )
    left = len(conflicts) - 3
    more = f" (and {left} more cell{'s' if left > 1 else ''})" if left > 0 else ""
    return (
        "; ".join(shown)
        + more
        + ". A library holds each cell once: delete the lines you do not trust, or pass "
        "--pool to pool a cell's measurements into one per GPU model"
    )


def _runs(sig: Signature) -> int:
    """The measured windows behind a signature (``meta.n``), at least 1."""
    n = sig.meta.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def pool_signatures(signatures: Sequence[Signature]) -> Signature:
    """One cell from several measurements of it (on several GPUs of one model).

    Each measurement weighs by its measured windows (``meta.n``): time T, static power s
    and energy E are the weighted means, d = max(0, E − s·T), and the single-run variances
    add the spread between the measurements to the mean spread within them (the law of
    total variance). ``meta`` keeps what every measurement agrees on, ``n`` their total,
    and ``pooled_from`` each one's place (``measured_on``), windows, time (s) and energy
    (J); ``devices`` is the first measurement's.

    Raises:
        ValueError: for no signatures, or signatures of more than one cell.
    """
    if not signatures:
        raise ValueError("pool_signatures: no signatures to pool")
    first = signatures[0]
    if any(cell_key(s) != cell_key(first) for s in signatures):
        raise ValueError(f"pool_signatures: not all of the signatures are {cell_label(first)}")
    weights = [_runs(s) for s in signatures]
    total = sum(weights)
    share = [w / total for w in weights]
    time = sum(p * s.time for p, s in zip(share, signatures, strict=True))
    static = sum(p * s.static_power for p, s in zip(share, signatures, strict=True))
    energy = sum(p * s.energy for p, s in zip(share, signatures, strict=True))
    var_time = sum(
        p * (s.var_time + (s.time - time) ** 2) for p, s in zip(share, signatures, strict=True)
    )
    var_energy = sum(
        p * (s.var_energy + (s.energy - energy) ** 2)
        for p, s in zip(share, signatures, strict=True)
    )
    agreed = {
        k: v for k, v in first.meta.items() if all(s.meta.get(k, _MISSING) == v for s in signatures)
    }
    meta = {
        **agreed,
        "n": total,
        "pooled_from": [
            {
                "measured_on": dict(measured_on(s) or {}),
                "n": w,
                "time_s": s.time,
                "energy_j": s.energy,
            }
            for s, w in zip(signatures, weights, strict=True)
        ],
    }
    return Signature(
        name=first.name,
        static_power=static,
        time=time,
        dynamic_energy=max(0.0, energy - static * time),
        var_time=var_time,
        var_energy=var_energy,
        devices=first.devices,
        workload=first.workload,
        impl=first.impl,
        op_point=first.op_point,
        meta=meta,
        context=first.context,
    )


_MISSING = object()
