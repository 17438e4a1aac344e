"""Reading an ``eopt.check/1`` result back (for ``eopt report --check``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from eopt.model.fileformats import FileFormatError, Where, parse_json, read_text, refuse_other_kind

__all__ = ["CHECK_SCHEMA", "CheckFileError", "read_check_result", "report_dict"]

CHECK_SCHEMA = "eopt.check/1"


def report_dict(r: Any) -> dict[str, Any]:
    """A deviation test's JSON (:class:`eopt.calculus.deviation.DeviationReport`):
    ``passed``, and per quantity its difference, threshold, p-value, smallest detectable
    deviation and spread."""
    out: dict[str, Any] = {"passed": r.passed}
    for q in (r.energy, r.time):
        if q is None:
            continue
        out[q.quantity] = {
            "difference": q.difference,
            "relative": q.relative,
            "threshold": q.threshold,
            "p_value": q.p_value,
            "min_detectable": q.min_detectable,
            "spread": q.spread,
        }
    return out


class CheckFileError(FileFormatError):
    """A check result that cannot be read; the message names the file and the field."""


def read_check_result(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    """Read the JSON ``eopt check -o`` wrote.

    Raises:
        CheckFileError: for a file that is not an ``eopt.check/1`` result, naming what is
            missing and how to make one.
    """
    at = Where(str(path), error=CheckFileError)
    try:
        data = parse_json(read_text(path, at, what="an eopt check result"), at)
    except CheckFileError:
        # Another eopt file (a placements file, a plan …): say what it is.
        refuse_other_kind(path, ("check",), at)
        raise
    if not isinstance(data, Mapping) or data.get("schema") != CHECK_SCHEMA:
        at.fail(f"not an {CHECK_SCHEMA} result; write one with `eopt check SCHEDULE --sim -o FILE`")
    for key in ("deviation", "found", "predicted", "measured", "test"):
        if key not in data:
            (at / key).fail(f"missing; an {CHECK_SCHEMA} result always has it")
    if not isinstance(data["found"], list):
        (at / "found").fail("expected a list of findings")
    if not isinstance(data["deviation"], bool):
        (at / "deviation").fail("expected true or false")
    for block, fields in _NUMBERS.items():
        value = data[block]
        if not isinstance(value, Mapping):
            (at / block).fail(f"expected an object with {', '.join(fields)}")
        for name in fields:
            if name in value or name in _REQUIRED:
                _non_negative(value.get(name), at / block / name)
    test = data["test"]
    if not isinstance(test, Mapping) or not isinstance(test.get("passed"), bool):
        (at / "test").fail("expected an object with 'passed': true or false")
    return data


#: The numbers of each block, all finite and ≥ 0 (energies J, times s, run counts).
_NUMBERS = {
    "predicted": (
        "energy_j",
        "time_s",
        "std_energy_j",
        "se_energy_j",
        "se_time_s",
        "bias_bound_j",
    ),
    "measured": ("energy_j", "time_s", "std_energy_j", "std_time_s", "runs"),
}
#: The numbers a result cannot lack.
_REQUIRED = frozenset({"energy_j", "time_s"})


def _non_negative(value: Any, at: Where) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        at.fail(f"expected a number ≥ 0, got {value!r}")
    if value < 0:
        at.fail(f"expected a number ≥ 0, got {value!r}")
