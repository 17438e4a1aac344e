"""A recorded run tested against its schedule's prediction (``eopt check --measured``).

The run is what ``eopt measure -o`` writes (``eopt.regions-report/1``): one region call
per element call, named by the schedule's element (``F[s0,m3]``). Nothing is run again:

- **per element**, the mean of its recorded calls against its signature's interval for
  that many calls: the element's single-run spread over √calls, the characterization's
  standard error (σ/√n of the n runs behind the signature) and the meter's error bound
  of the calls, added in quadrature;
- **in total**, the recorded elements' summed energy (and time) per iteration against
  the schedule's composed element energy (co-running elements share their device's
  static power once, as ⊕ prices them), with the elements' spreads added as independent
  and each type's characterization error shared by all its instances.

All these tests hold together at the stated confidence (Bonferroni: each test at
1 − α/m for m tests). One run gives single-run spreads: the measured side carries only
the meter's error, the predicted side the run-to-run spread.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eopt.calculus.deviation import DeviationReport, MeanEstimate, deviation_report
from eopt.calculus.interactions import InteractionGraph
from eopt.calculus.uncertainty import DEFAULT_CONFIDENCE
from eopt.check.result_file import CHECK_SCHEMA, report_dict
from eopt.model.confidence import c_alpha
from eopt.model.fileformats import FileFormatError, Where, number, parse_json, read_text
from eopt.model.schedule import Schedule, ScheduledElement
from eopt.model.signature import Signature

__all__ = [
    "ElementCheck",
    "MeasuredCheck",
    "MeasuredRunError",
    "RecordedCall",
    "check_measured",
    "read_recorded_calls",
]

_RUN_SCHEMA = "eopt.regions-report/1"


class MeasuredRunError(FileFormatError):
    """A recorded run that cannot be checked; the message names the file and the place."""


@dataclass(frozen=True)
class RecordedCall:
    """One recorded call of an element.

    Attributes:
        name: The region's name (the schedule element's name).
        start_s: Start, in s from the run's start.
        time_s: Duration, in s.
        energy_j: Its inclusive energy, in J.
        error_j: The meter's integration-error bound of its window, in J.
    """

    name: str
    start_s: float
    time_s: float
    energy_j: float
    error_j: float = 0.0


def read_recorded_calls(path: str | os.PathLike[str]) -> tuple[RecordedCall, ...]:
    """The element calls of a recorded run (``eopt.regions-report/1``).

    Every ``events[]`` entry is one call; a file without events gives each region its
    calls' mean (``regions[]``: energy and time over ``calls``).

    Raises:
        MeasuredRunError: naming the file and the entry that is missing or wrong.
    """
    p = Path(path)
    at = Where(str(p), error=MeasuredRunError)
    data = parse_json(read_text(p, at, what="a recorded run"), at)
    if not isinstance(data, Mapping) or data.get("schema") != _RUN_SCHEMA:
        found = data.get("schema") if isinstance(data, Mapping) else None
        (at / "schema").fail(
            f"is {found!r}, expected {_RUN_SCHEMA!r}: record the run with "
            "`eopt measure -o RUN.json -- CMD` (or `eopt apply … -o RUN.json -- CMD`)"
        )
    events = data.get("events") or []
    if not isinstance(events, list):
        (at / "events").fail("expected a list of region calls")
    calls: list[RecordedCall] = []
    for i, item in enumerate(events):
        where = at / "events" / i
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            where.fail("expected an object with name, start_s, end_s and energy_j")
        start = number(item.get("start_s"), where / "start_s", unit="s")
        end = number(item.get("end_s"), where / "end_s", unit="s")
        if end < start:
            (where / "end_s").fail(f"{end:g} s is before its start {start:g} s")
        energy = item.get("energy_j")
        if energy is None:  # a call outside the power trace has unknown energy
            continue
        calls.append(
            RecordedCall(
                item["name"],
                start,
                end - start,
                number(energy, where / "energy_j", unit="J", min=0.0),
                number(item.get("error_j", 0.0), where / "error_j", unit="J", min=0.0),
            )
        )
    if events:
        return tuple(calls)
    regions = data.get("regions") or []
    if not isinstance(regions, list):
        (at / "regions").fail("expected a list of regions")
    for i, item in enumerate(regions):
        where = at / "regions" / i
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            where.fail("expected an object with name, calls, time_s and energy_j")
        n = item.get("calls", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            (where / "calls").fail(f"expected a number of calls ≥ 1, got {n!r}")
        if item.get("energy_j") is None:
            continue
        name = str(item["name"]).rpartition("/")[2]
        energy = number(item["energy_j"], where / "energy_j", unit="J", min=0.0) / n
        time = number(item.get("time_s"), where / "time_s", unit="s", min=0.0) / n
        error = number(item.get("error_j", 0.0), where / "error_j", unit="J", min=0.0) / n
        calls += [RecordedCall(name, math.nan, time, energy, error)] * n
    return tuple(calls)


@dataclass(frozen=True)
class ElementCheck:
    """One element's recorded calls against its prediction.

    Attributes:
        element: The schedule element.
        calls: Its recorded calls.
        report: The test (energy, and time where the signature gives its spread).
        std_energy_j: The predicted spread of the calls' mean energy, in J.
        std_time_s: The same for time, in s (None: no time spread known).
    """

    element: ScheduledElement
    calls: tuple[RecordedCall, ...]
    report: DeviationReport
    std_energy_j: float
    std_time_s: float | None


@dataclass(frozen=True)
class MeasuredCheck:
    """A recorded run checked against a schedule.

    Attributes:
        elements: Per recorded element, its test.
        total: The total's test (recorded elements' energy and time per iteration).
        predicted_energy_j: The composed energy of the recorded elements, in J.
        std_energy_j: Its spread for the iterations recorded, in J.
        predicted_time_s: Their summed predicted time, in s.
        std_time_s: Its spread, in s (None: unknown).
        measured_energy_j: The recorded elements' energy per iteration, in J.
        measured_time_s: Their time per iteration, in s.
        iterations: Calls of the most-called element (the run's iterations).
        unrecorded: Schedule elements the run has no call of.
        unknown: Recorded region names the schedule does not have.
        confidence: 1 − α of all tests together.
        tests: m, the number of tests (each at 1 − α/m).
        notes: What the reader should know (co-runs, short calls …).
    """

    elements: tuple[ElementCheck, ...]
    total: DeviationReport
    predicted_energy_j: float
    std_energy_j: float
    predicted_time_s: float
    std_time_s: float | None
    measured_energy_j: float
    measured_time_s: float
    iterations: int
    unrecorded: tuple[str, ...]
    unknown: tuple[str, ...]
    confidence: float
    tests: int
    notes: tuple[str, ...] = ()

    @property
    def deviation(self) -> bool:
        """Whether the total or any element deviates."""
        return not self.total.passed or any(not e.report.passed for e in self.elements)

    def to_dict(self, schedule_path: str, run_path: str) -> dict[str, Any]:
        """The ``eopt.check/1`` layout of a measured check (docs/formats.md).

        Intervals are at each test's level (1 − α/m), so a value outside its interval
        is what the test calls a deviation (up to the meter's error)."""
        c = c_alpha(self.total.confidence)
        return {
            "schema": CHECK_SCHEMA,
            "mode": "measured",
            "deviation": self.deviation,
            "confidence": self.confidence,
            "tests": self.tests,
            "each_confidence": self.total.confidence,
            "runs": self.iterations,
            "schedule": schedule_path,
            "measured_run": run_path,
            "predicted": {
                "energy_j": self.predicted_energy_j,
                "std_energy_j": self.std_energy_j,
                "se_energy_j": 0.0,
                "time_s": self.predicted_time_s,
                "std_time_s": self.std_time_s,
                "se_time_s": 0.0,
                "bias_bound_j": 0.0,
                "interval_energy_j": [
                    self.predicted_energy_j - c * self.std_energy_j,
                    self.predicted_energy_j + c * self.std_energy_j,
                ],
                "notes": list(self.notes),
            },
            "measured": {
                "energy_j": self.measured_energy_j,
                "std_energy_j": 0.0,
                "time_s": self.measured_time_s,
                "std_time_s": 0.0,
                "runs": self.iterations,
            },
            "test": report_dict(self.total),
            "elements": [_element_dict(e, c) for e in self.elements],
            "unrecorded": list(self.unrecorded),
            "unknown_regions": list(self.unknown),
            "confirmation": None,
            "found": [],
            "refined": None,
            "refined_covers": None,
            "refined_interval": None,
            "rounds": 0,
            "graph": InteractionGraph().to_dict(),
            "log": [],
        }


def _element_dict(e: ElementCheck, c: float) -> dict[str, Any]:
    energy = e.report.energy
    out: dict[str, Any] = {
        "name": e.element.name,
        "type": e.element.type,
        "device": e.element.device,
        "calls": len(e.calls),
        "predicted_energy_j": energy.predicted.mean,
        "std_energy_j": e.std_energy_j,
        "interval_energy_j": [
            energy.predicted.mean - c * e.std_energy_j,
            energy.predicted.mean + c * e.std_energy_j,
        ],
        "measured_energy_j": energy.measured.mean,
        "predicted_time_s": e.element.duration,
        "std_time_s": e.std_time_s,
        "measured_time_s": sum(k.time_s for k in e.calls) / len(e.calls),
        "passed": e.report.passed,
        "test": report_dict(e.report),
    }
    return out


def _signature_of(element: ScheduledElement, library: Sequence[Signature]) -> Signature | None:
    """The null-context signature the schedule chose for ``element`` (None: not given)."""
    for sig in library:
        if (
            sig.context is None
            and sig.name == element.type
            and sig.impl == element.impl
            and sig.op_point == element.op_point
        ):
            return sig
    return None


def _runs_behind(sig: Signature | None) -> int | None:
    n = sig.meta.get("n") if sig is not None else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def check_measured(
    schedule: Schedule,
    calls: Iterable[RecordedCall],
    library: Sequence[Signature] = (),
    confidence: float = DEFAULT_CONFIDENCE,
) -> MeasuredCheck:
    """Test a recorded run against ``schedule``'s prediction, per element and in total.

    Args:
        schedule: The schedule the run followed.
        calls: The run's region calls (:func:`read_recorded_calls`).
        library: The signatures it was solved with: their spreads and run counts (without
            them, the schedule's ``var_energy`` gives the energy spread and time is not
            tested).
        confidence: 1 − α of all tests together.

    Raises:
        ValueError: when the run records no element of the schedule.
    """
    by_name: dict[str, list[RecordedCall]] = {}
    for call in calls:
        by_name.setdefault(call.name, []).append(call)
    names = {e.name for e in schedule.elements}
    recorded = [e for e in schedule.elements if e.name in by_name]
    if not recorded:
        some = ", ".join(sorted(by_name)[:4]) or "none"
        raise ValueError(
            f"the run records no element of the schedule (its regions: {some}); mark each "
            "element call with `with eopt.element(NAME):` under the schedule's element names"
        )
    sigs = {e.name: _signature_of(e, library) for e in recorded}
    timed = all(s is not None for s in sigs.values())
    tests = len(recorded) * (2 if timed else 1) + (2 if timed else 1)
    alpha = 1.0 - confidence
    # Each test at 1 − α/m; a report tests energy and time at the confidence it is given.
    each = 1.0 - alpha / tests
    checks: list[ElementCheck] = []
    notes: list[str] = []
    for e in recorded:
        mine = by_name[e.name]
        sig = sigs[e.name]
        n = len(mine)
        n_char = _runs_behind(sig)
        var_e = sig.var_energy if sig is not None else e.var_energy
        share = 1.0 / n + (1.0 / n_char if n_char else 0.0)
        std_e = math.sqrt(var_e * share)
        err = sum(k.error_j for k in mine) / n
        p_e = MeanEstimate(e.energy, std_e)
        m_e = MeanEstimate(sum(k.energy_j for k in mine) / n, err)
        if sig is not None:
            std_t: float | None = math.sqrt(sig.var_time * share)
            p_t = MeanEstimate(e.duration, std_t or 0.0)
            m_t = MeanEstimate(sum(k.time_s for k in mine) / n, 0.0)
            report = deviation_report((p_e, p_t), (m_e, m_t), confidence=each, spread="single")
        else:
            std_t = None
            report = deviation_report(p_e, m_e, confidence=each, spread="single")
        checks.append(ElementCheck(e, tuple(mine), report, std_e, std_t))
    if any(len(c.calls) != len(checks[0].calls) for c in checks):
        notes.append("elements were recorded a different number of times; totals use each mean")
    iterations = max(len(c.calls) for c in checks)
    part = replace(schedule, elements=tuple(recorded))
    predicted_e = part.element_energy()
    if any(len(c) > 1 for d in schedule.devices for c in part.clusters(d.name)):
        notes.append(
            "co-running elements share their device's static power: their per-element "
            "values split the overlap, the total prices it once"
        )
    # Independent run-to-run spreads add; a type's characterization error is shared by
    # every instance of it, so those add linearly within a type.
    var_run = sum(
        (sigs[c.element.name].var_energy if sigs[c.element.name] else c.element.var_energy)
        / len(c.calls)
        for c in checks
    )
    shared: dict[tuple[Any, ...], float] = {}
    for c in checks:
        sig = sigs[c.element.name]
        n_char = _runs_behind(sig)
        if sig is not None and n_char:
            key = (sig.name, sig.impl, sig.op_point)
            shared[key] = shared.get(key, 0.0) + math.sqrt(sig.var_energy / n_char)
    err_total = sum(sum(k.error_j for k in c.calls) / len(c.calls) for c in checks)
    std_total = math.sqrt(var_run + sum(v * v for v in shared.values()))
    measured_e = sum(c.report.energy.measured.mean for c in checks)
    measured_t = sum(sum(k.time_s for k in c.calls) / len(c.calls) for c in checks)
    predicted_t = sum(c.element.duration for c in checks)
    if timed:
        var_t = sum((c.std_time_s or 0.0) ** 2 for c in checks)
        std_t_total: float | None = math.sqrt(var_t)
        total = deviation_report(
            (MeanEstimate(predicted_e, std_total), MeanEstimate(predicted_t, std_t_total)),
            (MeanEstimate(measured_e, err_total), MeanEstimate(measured_t, 0.0)),
            confidence=each,
            spread="single",
        )
    else:
        std_t_total = None
        total = deviation_report(
            MeanEstimate(predicted_e, std_total),
            MeanEstimate(measured_e, err_total),
            confidence=each,
            spread="single",
        )
        notes.append("no signatures given: time is not tested (add --library)")
    return MeasuredCheck(
        elements=tuple(checks),
        total=total,
        predicted_energy_j=predicted_e,
        std_energy_j=std_total,
        predicted_time_s=predicted_t,
        std_time_s=std_t_total,
        measured_energy_j=measured_e,
        measured_time_s=measured_t,
        iterations=iterations,
        unrecorded=tuple(e.name for e in schedule.elements if e.name not in by_name),
        unknown=tuple(sorted(n for n in by_name if n not in names)),
        confidence=confidence,
        tests=tests,
        notes=tuple(notes),
    )
