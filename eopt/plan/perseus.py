"""Import of Perseus/Zeus pipeline stage profiles into signature libraries.

The profile CSV has the columns ``stage,instruction,frequency,time,energy``: per pipeline
stage, the forward or backward of one microbatch at a locked SM clock (``frequency``,
MHz), its time (s) and its energy (J, one GPU).

Accounting. Perseus prices a plan as Σ_i E_i(f_i) + P_block·(S·T − Σ_i t_i): each op's
measured energy plus the blocking draw P_block of every stage over the time it waits.
Each row becomes a signature with

* static power s = s̄, the idle/blocking draw the user gives (the same at every clock:
  the CSV carries no split of its own),
* dynamic energy d = E − s̄·t, clamped at 0,

so that s·t + d = E whenever E ≥ s̄·t (always so in the published profiles; a clamped row
is marked ``meta["clamped"] = True``). With s̄ as the plan's idle power per device, the
plan energy Σ_i (s̄·t_i + d_i) + s̄·(S·T − Σ_i t_i) is then exactly Perseus's.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from eopt.model.fileformats import Where, guard, read_csv, refuse_other_kind
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import PlanError
from eopt.model.signature import Signature

__all__ = [
    "COLUMNS",
    "ProfileError",
    "profile_device_model",
    "read_perseus_profile",
    "stage_count",
]

COLUMNS = ("stage", "instruction", "frequency", "time", "energy")
INSTRUCTIONS = ("forward", "backward")


# Perseus names its profiles <model>+<gpu>_<dtype>.csv (gpt3-175b+a40_bf16.csv); the GPUs
# it profiled are these simulator profiles (its A100s are the SXM4 80 GB part).
_PERSEUS_GPUS = {"a40": "A40", "a100": "A100-SXM4-80GB"}


def profile_device_model(path: str | os.PathLike[str]) -> str | None:
    """The GPU model a profile was measured on, from its file name.

    Args:
        path: The profile CSV, e.g. ``gpt3-175b+a40_bf16.csv``.

    Returns:
        A simulator profile name (``eopt/sim/data`` without ``.yaml``, e.g. ``"A40"``), or
        None when the name says no GPU eopt knows.

    Example:
        >>> profile_device_model("gpt3-175b+a40_bf16.csv")
        'A40'
    """
    from eopt.sim.profiles import available_profiles

    stem = Path(path).stem.lower()
    named = [m for m in available_profiles() if m.lower() in stem]
    if named:
        return max(named, key=len)  # "A100-SXM4-80GB" over a shorter name inside it
    for token in re.split(r"[+_\-.\s]", stem):
        if token in _PERSEUS_GPUS:
            return _PERSEUS_GPUS[token]
    return None


class ProfileError(PlanError):
    """A profile CSV that cannot be imported; the message names ``file:line``."""


def read_perseus_profile(
    path: str | os.PathLike[str], idle_power_w: float, name_format: str = "stage{stage}.{kind}"
) -> list[Signature]:
    """Read a Perseus/Zeus stage profile as signatures.

    Args:
        path: The CSV file.
        idle_power_w: s̄, the draw of a stage while it waits (Perseus's P_block), in W;
            becomes every signature's static power (see the module docstring).
        name_format: Element type of a row, formatted with ``stage`` and ``kind``.

    Returns:
        One signature per row, in file order: name ``stage{s}.forward`` /
        ``stage{s}.backward``, ``op_point.sm_clock_mhz`` = frequency.

    Raises:
        ProfileError: naming ``file:line`` for a missing column, a bad value or a
            duplicate (stage, instruction, frequency) row.
    """
    p = Path(path)
    if isinstance(idle_power_w, bool) or not (
        isinstance(idle_power_w, (int, float)) and math.isfinite(idle_power_w) and idle_power_w >= 0
    ):
        raise ProfileError(f"idle power must be a number of watts ≥ 0, got {idle_power_w!r}")
    at = Where(str(p), error=ProfileError)
    try:
        with guard(at, what="a stage profile"):
            return _read(p, at, float(idle_power_w), name_format)
    except ProfileError:
        refuse_other_kind(p, ("profile",), at)
        raise


def _read(p: Path, at: Where, idle_power_w: float, name_format: str) -> list[Signature]:
    table = read_csv(p, at, what="a stage profile")
    header = table.header
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        at.at_line(1).fail(f"missing column(s) {missing}; expected the header {','.join(COLUMNS)}")
    col = {c: header.index(c) for c in COLUMNS}
    sigs: list[Signature] = []
    seen: dict[tuple[int, str, float], int] = {}
    for line, row in table.rows:
        where = f"{p}:{line}"
        if len(row) != len(header):
            raise ProfileError(f"{where}: expected {len(header)} fields, found {len(row)}")
        stage = _int(row[col["stage"]], where, "stage")
        kind = row[col["instruction"]].strip().lower()
        if kind not in INSTRUCTIONS:
            raise ProfileError(
                f"{where}: instruction {row[col['instruction']]!r} is not one of "
                f"{list(INSTRUCTIONS)}"
            )
        freq = _float(row[col["frequency"]], where, "frequency (MHz)", positive=True)
        time_s = _float(row[col["time"]], where, "time (s)", positive=True)
        energy = _float(row[col["energy"]], where, "energy (J)", positive=False)
        key = (stage, kind, freq)
        if key in seen:
            raise ProfileError(
                f"{where}: duplicate row for stage {stage} {kind} at {freq:g} MHz "
                f"(first at line {seen[key]}); keep one measurement per clock"
            )
        seen[key] = line
        dynamic = energy - idle_power_w * time_s
        sigs.append(
            Signature(
                name=name_format.format(stage=stage, kind=kind),
                static_power=idle_power_w,
                time=time_s,
                dynamic_energy=max(0.0, dynamic),
                workload={"stage": stage, "instruction": kind},
                op_point=OperatingPoint(sm_clock_mhz=freq),
                meta={
                    "source": "perseus-profile",
                    "file": str(p),
                    "line": line,
                    "measured_energy_j": energy,
                    "clamped": dynamic < 0,
                },
            )
        )
    if not sigs:
        raise ProfileError(f"{p}: no data rows after the header")
    return sigs


def stage_count(sigs: list[Signature]) -> int:
    """Number of stages in an imported profile (max stage index + 1)."""
    return 1 + max(int(s.workload.get("stage", 0)) for s in sigs)


def _int(text: str, where: str, what: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ProfileError(f"{where}: {what} must be an integer ≥ 0, got {text!r}") from None
    if value < 0:
        raise ProfileError(f"{where}: {what} must be an integer ≥ 0, got {text!r}")
    return value


def _float(text: str, where: str, what: str, positive: bool) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ProfileError(f"{where}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else "≥ 0"
        raise ProfileError(f"{where}: {what} must be a finite number {bound}, got {text!r}")
    return value
