"""Cells a distributed sweep could not measure: ``LIB.failed.jsonl`` beside the library.

A cell whose worker died, or whose kernel raised, is retried (at most twice, on any GPU
of the sweep); when every try failed it goes to this file, one JSON object a line, with
the error of its last try, and the rest of the grid goes on. The library never holds a
failed cell, so ``--resume`` measures it again. The file describes the run that wrote it:
a new run starts it afresh.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eopt.model.fileformats import dumps_json
from eopt.model.operating_point import OperatingPoint

__all__ = ["FAILED_SCHEMA", "FailedCell", "append_failed", "failed_path"]

FAILED_SCHEMA = "eopt.failed-cell/1"


@dataclass(frozen=True)
class FailedCell:
    """One cell that could not be measured.

    Attributes:
        name: The element's name.
        impl: The implementation κ.
        op_point: The operating point ω.
        workload: θ.
        model: The GPU model the sweep ran on.
        error: What the last try ended with (the kernel's exception, a dead worker …).
        attempts: How many times it was tried.
        measured_on: Where the last try ran (host, gpu, index, uuid), when known.
    """

    name: str
    impl: str
    op_point: OperatingPoint
    workload: Mapping[str, Any]
    model: str
    error: str
    attempts: int
    measured_on: Mapping[str, Any] | None = field(default=None)

    def to_dict(self) -> dict[str, Any]:
        """The file's line: ``schema``, the cell's fields, ``error`` and ``attempts``."""
        out: dict[str, Any] = {
            "schema": FAILED_SCHEMA,
            "name": self.name,
            "impl": self.impl,
            "op_point": self.op_point.to_dict(),
            "workload": dict(self.workload),
            "device_model": self.model,
            "error": self.error,
            "attempts": self.attempts,
        }
        if self.measured_on is not None:
            out["measured_on"] = dict(self.measured_on)
        return out


def failed_path(library: str | os.PathLike[str]) -> Path:
    """``lib.jsonl`` → ``lib.failed.jsonl`` (beside the library)."""
    lib = Path(library)
    stem = lib.name[: -len(".jsonl")] if lib.name.endswith(".jsonl") else lib.name
    return lib.with_name(f"{stem}.failed.jsonl")


def append_failed(path: str | os.PathLike[str], cell: FailedCell) -> None:
    """Append one failed cell and flush it to disk at once."""
    line = dumps_json(cell.to_dict(), str(path), sort_keys=True) + "\n"
    with Path(path).open("a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
