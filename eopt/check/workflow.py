"""The interaction-graph workflow of the paper's §4.4, run on a placed schedule.

1. **Compose** the schedule's prediction: null-context signatures, the pairs already in
   the interaction graph at their characterized values.
2. **Detect**: run the schedule N times and test the prediction against the runs, in
   energy and in time, by the standard errors of the means
   (:func:`eopt.calculus.deviation.deviation_report`). A test at 1 − α fires on α of
   correct predictions, so a deviation counts only when N fresh runs show it again
   (the paper's "persistent triggers, not single ones"); the two sets are then pooled.
3. **Localize** a deviation: bisection over prefixes (every device's placements that start
   before a time) finds the first element whose addition deviates; then its partners —
   the element right before it on its device (entry context) and every element that
   overlaps it (runtime context, on its device or another) — are run as pairs, and a
   pair that deviates on its own is the finding. When none does, the effect accumulates
   over the prefix (a prefix finding).
4. **Identify** the mechanism with its protocol: co-run against isolation for runtime
   pairs (a power throttle reported while co-running that lowers a member's SM clock
   below its clock alone names the power cap or node budget — a kernel at its own limit
   reports a throttle alone too — otherwise the shared resource: SMs and memory
   bandwidth on one device, the interconnect across devices); for entry pairs, vary the
   preceding element's data (cold buffers: cache), the idle gap that lets a clock change
   settle (clock state: the consumer's clock differs from its predecessor's, or the
   device reports a change still settling at its entry), and replace the predecessors by
   idle time (their heat: thermal).
5. **Characterize** and **refine**: the consumer's signature at the context its producer
   leaves (entry), the pair's co-run composite (runtime on one device) or each endpoint's
   co-run values (across devices), or, for an effect accumulated over a prefix or a
   device state that outlasts the consumer (heat, a clock change still settling), the
   device's timeline as one composite element (coarsening, §4.4). The edge is written into
   the graph, the library grows, and the prediction is composed again; the refined interval
   should now cover the measurement.

Predictions are means of one run under the uncertainty model (docs/uncertainty.md):
makespans at E[max], gaps planned, idle tails inheriting the makespan's noise. A
prediction composed from signatures measured over n runs has a standard error: each
element type's characterization error is shared by all its instances, weighted by how
much the composition moves with that type's mean energy and mean time
(:func:`eopt.calculus.sensitivity.prediction_error`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from eopt.calculus.contextual import ContextWarning
from eopt.calculus.contextual_schedule import compose_with_interactions
from eopt.calculus.deviation import DeviationReport, MeanEstimate, Runs, deviation_report
from eopt.calculus.interactions import EntryEdge, InteractionGraph, RuntimeEdge
from eopt.calculus.operators import COV_KEY
from eopt.calculus.schedule import Placement
from eopt.calculus.sensitivity import prediction_error, signature_key
from eopt.calculus.uncertainty import DEFAULT_CONFIDENCE, BiasBound
from eopt.check.result_file import CHECK_SCHEMA, report_dict
from eopt.check.runner import Job, RunSet, ScheduleRunner
from eopt.model.context import Context, EntryContext, RuntimeContext
from eopt.model.signature import Signature

__all__ = [
    "CheckResult",
    "Finding",
    "Prediction",
    "characterize_element",
    "check_schedule",
]

Kind = Literal["entry", "runtime"]

# Localization runs many tests; each is held to this confidence so that a false alarm
# rarely sends the search to the wrong element (a ≥ 3σ effect still clears it easily).
LOCALIZE_CONFIDENCE = 0.999
# An entry temperature this much above the null context's is heat left behind, in K.
_WARMER_C = 0.5
# A co-run's SM clock this far below the members' clocks alone is a power throttle that
# bites (a relative drop; far above the locked clock's wander, far below a throttle's).
_CLOCK_DROP_MIN = 0.002
# Start differences below this are the same configuration (1 µs).
_SAME_OFFSET_S = 1e-6
_EPS_S = 1e-12
# A protocol explains an entry deviation when the consumer then matches its null
# signature, or keeps at most this share of the deviation it had, in energy and in time:
# a locked clock holds a kernel's time to a few 1e-4, so a residue far below the effect
# (a back-to-back launch, 0.05 % of a 20 % cache effect) still fails a test of equality.
_REMOVED_SHARE = 0.9
# A pair found by looking back past a prefix's last element explains the prefix only if
# it carries at least this share of the prefix's deviation, in energy or in time (a heat
# prefix's 100 J is not explained by an earlier pair's stray 1 mJ).
_CARRIED_SHARE = 0.5
_LOSES_IT = (
    f"loses its deviation (matches its null signature or keeps ≤ {1 - _REMOVED_SHARE:.0%} of it)"
)


@dataclass(frozen=True)
class Prediction:
    """A composed prediction with the standard errors of its means.

    Attributes:
        signature: The composed signature (mean energy and time; single-run variances).
        energy: Energy as a mean estimate whose standard error is the prediction's.
        time: Time likewise.
        bias: Accumulated bias bound of what composed context-independently (App. D).
        notes: Edges that matched but could not be used.
    """

    signature: Signature
    energy: MeanEstimate
    time: MeanEstimate
    bias: BiasBound
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """One interaction the workflow found and characterized.

    Attributes:
        elements: The pair (producer, consumer) for entry, the two co-runners for
            runtime, or the prefix's element types ending with the affected one.
        kind: ``"entry"`` or ``"runtime"``.
        mechanism: ``thermal``, ``cache``, ``clock_state``, ``contention``,
            ``power_cap``, ``interconnect``, ``node_power``, or ``unexplained``.
        scope: ``"pair"`` or ``"prefix"``.
        devices: The devices involved.
        placements: Indices (in the schedule) of the placements involved.
        energy_rel: The pair's (or prefix's) relative energy deviation.
        time_rel: Its relative time deviation.
        evidence: What the identification protocol showed, in one line.
        signatures: Names of the characterized signatures added to the library.
    """

    elements: tuple[str, ...]
    kind: Kind
    mechanism: str
    scope: Literal["pair", "prefix"]
    devices: tuple[str, ...]
    placements: tuple[int, ...]
    energy_rel: float
    time_rel: float
    evidence: str
    signatures: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON layout."""
        return {
            "elements": list(self.elements),
            "kind": self.kind,
            "mechanism": self.mechanism,
            "scope": self.scope,
            "devices": list(self.devices),
            "placements": list(self.placements),
            "energy_rel": self.energy_rel,
            "time_rel": self.time_rel,
            "evidence": self.evidence,
            "signatures": list(self.signatures),
        }


@dataclass
class CheckResult:
    """What ``eopt check`` found.

    Attributes:
        deviation: Whether the first prediction deviated from the measurement, on the
            first runs and again on as many fresh ones.
        initial: The first deviation test.
        confirmation: The test on fresh runs when the first fired (None otherwise).
        predicted: The first prediction.
        measured: The whole schedule's runs.
        found: The interactions found, in the order found.
        graph: The interaction graph after the workflow.
        library: Signatures added by characterization.
        refined: The last refined prediction's test (None when nothing deviated).
        refined_prediction: The last refined prediction.
        refined_interval: The refined prediction's interval for one run (Eq. 23) against
            the measured mean.
        refined_covers: Whether the refined prediction interval covers the measurement
            (energy and time; None when nothing deviated). ``refined.passed`` says
            whether the means also agree by their standard errors, a far finer test.
        rounds: Refinement rounds run.
        runs: Runs per measurement.
        confidence: 1 − α of the whole check (energy and time together).
        log: One line per step, in order.
    """

    deviation: bool
    initial: DeviationReport
    predicted: Prediction
    measured: RunSet
    found: list[Finding] = field(default_factory=list)
    graph: InteractionGraph = field(default_factory=InteractionGraph)
    library: list[Signature] = field(default_factory=list)
    refined: DeviationReport | None = None
    refined_prediction: Prediction | None = None
    refined_interval: DeviationReport | None = None
    refined_covers: bool | None = None
    confirmation: DeviationReport | None = None
    rounds: int = 0
    runs: int = 0
    confidence: float = DEFAULT_CONFIDENCE
    log: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON layout of ``eopt.check/1``."""
        return {
            "schema": CHECK_SCHEMA,
            "deviation": self.deviation,
            "confidence": self.confidence,
            "runs": self.runs,
            "predicted": _prediction_dict(self.predicted),
            "measured": {
                "energy_j": float(self.measured.energy_j.mean()),
                "std_energy_j": float(self.measured.energy_j.std(ddof=1)),
                "time_s": float(self.measured.time_s.mean()),
                "std_time_s": float(self.measured.time_s.std(ddof=1)),
                "runs": self.measured.runs,
            },
            "test": report_dict(self.initial),
            "confirmation": None if self.confirmation is None else report_dict(self.confirmation),
            "found": [f.to_dict() for f in self.found],
            "refined": None
            if self.refined is None or self.refined_prediction is None
            else {**_prediction_dict(self.refined_prediction), "test": report_dict(self.refined)},
            "refined_covers": self.refined_covers,
            "refined_interval": None
            if self.refined_interval is None
            else report_dict(self.refined_interval),
            "rounds": self.rounds,
            "graph": self.graph.to_dict(),
            "log": list(self.log),
        }


def _prediction_dict(p: Prediction) -> dict[str, Any]:
    return {
        "energy_j": p.energy.mean,
        "se_energy_j": p.energy.sem,
        "std_energy_j": p.signature.std_energy,
        "time_s": p.time.mean,
        "se_time_s": p.time.sem,
        "bias_bound_j": p.bias.bias,
        "term": p.signature.term,
        "notes": list(p.notes),
    }


# ---------------------------------------------------------------------------- prediction
Swap = Callable[[Signature], Signature]
Placed = Callable[[Swap | None], tuple[list[Placement], Mapping[str, float] | None]]


def predict(
    placed: Placed,
    library: Sequence[Signature],
    graph: InteractionGraph,
    runs_of: Callable[[Signature], int],
    confidence: float = DEFAULT_CONFIDENCE,
) -> Prediction:
    """Compose a schedule with ``graph`` and give the means' standard errors.

    The prediction is the mean of one run under the uncertainty model (makespans at
    E[max], docs/uncertainty.md); its standard errors are what it inherits from the
    characterization of its element types (:func:`eopt.calculus.sensitivity.prediction_error`,
    each type's error shared by all its instances).

    Args:
        placed: The placed elements and the devices' trailing idle draw (W), with every
            element's signature passed through the given map first (None: unchanged);
            re-timed by it, so a shifted mean time moves what follows.
        library: Signatures the graph's edges point to.
        graph: The interaction graph.
        runs_of: Number of runs behind a signature's means.
        confidence: 1 − α of the bias bound.
    """

    def compose(swap: Swap | None) -> Any:
        placements, idle_power_w = placed(swap)
        return compose_with_interactions(
            placements,
            library,
            graph,
            idle_power=idle_power_w,
            confidence=confidence,
            outside="warn",
            time_mean="expected_max",
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ContextWarning)
        comp = compose(None)
    notes = tuple(comp.notes) + tuple(str(w.message) for w in caught)
    elements = {signature_key(p.signature): p.signature for p in comp.placements}

    def moments(swap: Swap) -> tuple[float, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ContextWarning)
            sig = compose(swap).signature
        return sig.energy, sig.time

    err = prediction_error(moments, elements, runs_of)
    runs = max(min(max(runs_of(sig), 2) for sig in elements.values()), 2)
    sig = comp.signature
    energy = MeanEstimate(sig.energy, err.energy_j * math.sqrt(runs), runs)
    time = MeanEstimate(sig.time, err.time_s * math.sqrt(runs), runs)
    return Prediction(sig, energy, time, comp.bias, notes)


def _test(
    pred: Prediction, measured: RunSet, confidence: float, spread: str = "means"
) -> DeviationReport:
    """Energy and time together at ``confidence`` (Bonferroni: each at 1 − α/2).

    ``spread="means"`` compares the means by their standard errors (detection);
    ``"single"`` asks whether the measurement lies in the prediction interval of one run,
    Eq. (23) (coverage).
    """
    each = 1.0 - (1.0 - confidence) / 2.0
    if spread == "single":
        p_e = MeanEstimate(pred.energy.mean, pred.signature.std_energy, pred.energy.n)
        p_t = MeanEstimate(pred.time.mean, pred.signature.std_time, pred.time.n)
        m_e = MeanEstimate.of(measured.energy_j.tolist())
        m_t = MeanEstimate.of(measured.time_s.tolist())
        return deviation_report((p_e, p_t), (m_e, m_t), confidence=each, spread="single")
    return deviation_report(
        (pred.energy, pred.time),
        Runs(measured.energy_j.tolist(), measured.time_s.tolist()),
        confidence=each,
    )


def characterize_element(
    runner: ScheduleRunner, element: str, device: str, runs: int, seed: int = 0
) -> Signature:
    """Measure ``element`` alone from the null context: its null-context signature.

    Args:
        runner: Where to run it.
        element: Element type.
        device: Device to run it on (the signature is placed there).
        runs: Number of runs.
        seed: Base seed.
    """
    # Alone, a job's planned end orders nothing: no need to know its time first.
    rs = runner.run([Job(element, device, 0.0, 0.0)], runs, seed)
    s = runner.static_power_w(element)
    return _signature(element, device, rs.energy_j, rs.time_s, s, None, {"source": "check"})


def _signature(
    name: str,
    device: str,
    energy: np.ndarray,
    time: np.ndarray,
    static_w: float,
    context: Context | None,
    meta: Mapping[str, Any],
) -> Signature:
    e, t = float(energy.mean()), float(time.mean())
    # Energy and time of one run move together (a longer run draws longer): the
    # covariance the composition needs to price time noise (docs/uncertainty.md).
    cov = float(np.cov(energy, time, ddof=1)[0, 1])
    return Signature(
        name,
        static_power=static_w,
        time=t,
        dynamic_energy=max(e - static_w * t, 0.0),
        var_time=float(time.var(ddof=1)),
        var_energy=float(energy.var(ddof=1)),
        devices=(device,),
        meta={**meta, "n": int(energy.size), COV_KEY: cov},
        context=context,
    )


# ---------------------------------------------------------------------------- workflow
class _Session:
    """Measurements and predictions of one check, with a cache of runs."""

    def __init__(
        self,
        placements: Sequence[Placement],
        library: Sequence[Signature],
        graph: InteractionGraph,
        runner: ScheduleRunner,
        runs: int,
        seed: int,
        confidence: float,
        progress: Callable[[str], None] | None,
    ) -> None:
        self.placements = list(placements)
        self.origin = min(p.start for p in self.placements)
        self.library = list(library)
        self.added: list[Signature] = []
        self.graph = graph  # grows with every finding
        self.runner = runner
        self.runs = runs
        self.seed = seed
        self.confidence = confidence
        self.progress = progress
        self.log: list[str] = []
        self._cache: dict[tuple[Job, ...], RunSet] = {}
        self._next_seed = seed
        # Characterized values this check found, applied wherever their pattern occurs:
        # a device's timeline as one composite (coarsening) …
        self.device_composites: dict[str, Signature] = {}
        # … a consumer's values after its producer, (producer, consumer) → values …
        self.entry_values: dict[tuple[str, str], Signature] = {}
        # … a same-device co-run pair as one composite, (sorted pair, offset, composite) …
        self.pair_values: list[tuple[tuple[str, ...], float, Signature]] = []
        # … and an element's values while a partner co-runs on another device;
        self.corun_values: list[tuple[str, str, float, Signature]] = []
        # in this schedule, each element of a cross-device co-run cluster at the values
        # it ran with (used when the whole cluster is composed).
        self.cluster_values: dict[int, tuple[Signature, frozenset[int]]] = {}
        # A given graph's edges enter the same tables, so their values are timed as the
        # runner runs them (a longer co-run delays what follows); only edges whose
        # values the library lacks are left to the composition's own lookup.
        self.given_graph = self._seed(graph)

    def _seed(self, graph: InteractionGraph) -> InteractionGraph:
        """Enter ``graph``'s characterized values into the session's tables; returns the
        edges whose values the library does not hold."""
        named: dict[str, list[Signature]] = {}
        for sig in self.library:
            named.setdefault(sig.name, []).append(sig)

        def held(name: str, kind: str) -> Signature | None:
            found = [s for s in named.get(name, []) if s.context is not None]
            found = [s for s in found if getattr(s.context, kind, None) is not None] or found
            return found[0] if found else (named.get(name) or [None])[0]

        left_entry: list[EntryEdge] = []
        for edge in graph.entry:
            sig = held(edge.signature, "entry")
            if sig is None or sig.context is None:
                left_entry.append(edge)
                continue
            self.entry_values[(edge.source, edge.target)] = sig
        left_runtime: list[RuntimeEdge] = []
        for edge in graph.runtime:
            if edge.signature:
                comp = held(edge.signature, "runtime")
                if comp is None:
                    left_runtime.append(edge)
                    continue
                self.pair_values += [(edge.pair, off, comp) for off in edge.offsets_s]
                continue
            values = {n: held(h, "runtime") for n, h in edge.signatures.items()}
            if any(v is None or v.context is None for v in values.values()):
                left_runtime.append(edge)
                continue
            for name, sig in values.items():
                partner = edge.pair[1] if name == edge.pair[0] else edge.pair[0]
                self.corun_values += [(name, partner, off, sig) for off in edge.offsets_s]  # type: ignore[misc]
        return InteractionGraph(
            entry=tuple(left_entry), runtime=tuple(left_runtime), nodes=graph.nodes
        )

    def say(self, line: str) -> None:
        self.log.append(line)
        if self.progress is not None:
            self.progress(line)

    def runs_of(self, sig: Signature) -> int:
        n = sig.meta.get("n")
        return int(n) if isinstance(n, int) and not isinstance(n, bool) and n > 0 else self.runs

    def job(self, i: int, **changes: Any) -> Job:
        p = self.placements[i]
        start = p.start - self.origin + changes.pop("shift", 0.0)
        return Job(p.signature.name, p.device, start, start + p.signature.time, **changes)

    @staticmethod
    def _key(jobs: Sequence[Job]) -> tuple[Job, ...]:
        # A piece runs from its own first start, as its composition does.
        lead = min(j.start_s for j in jobs)
        if lead != 0.0:
            jobs = [replace(j, start_s=j.start_s - lead, end_s=j.end_s - lead) for j in jobs]
        return tuple(jobs)

    def measure(self, jobs: Sequence[Job]) -> RunSet:
        key = self._key(jobs)
        if key not in self._cache:
            self._next_seed += 100_003  # independent of every other measurement
            self._cache[key] = self.runner.run(key, self.runs, self._next_seed)
        return self._cache[key]

    def confirm(self, jobs: Sequence[Job]) -> tuple[RunSet, RunSet]:
        """Fresh runs of ``jobs``, and those pooled with the ones measured before."""
        key = self._key(jobs)
        self._next_seed += 100_003
        fresh = self.runner.run(key, self.runs, self._next_seed)
        pooled = _pool(self.measure(jobs), fresh)
        self._cache[key] = pooled
        return fresh, pooled

    def placed(
        self, idxs: Sequence[int], swap: Swap | None = None
    ) -> tuple[list[Placement], Mapping[str, float] | None]:
        """The placements ``idxs`` as the refined composition sees them, gaps included.

        Found interactions are substituted where their pattern occurs among ``idxs``;
        then every device's elements are re-timed as the runner runs them: an element
        starts at its planned start or when the element ahead of it on its stream ends,
        whichever is later (a slower co-run or consumer delays what follows it). Returns
        them with each device's trailing idle draw (see :meth:`_with_idle`).
        """
        chosen = sorted(set(idxs))
        plan = {i: self.placements[i] for i in chosen}
        start = {i: plan[i].start for i in chosen}
        units: list[tuple[Signature, str, tuple[int, ...]]] = []
        used: set[int] = set()
        for device, comp in self.device_composites.items():
            members = tuple(i for i in chosen if plan[i].device == device)
            every = [i for i, p in enumerate(self.placements) if p.device == device]
            if members and list(members) == every:
                units.append((comp, device, members))
                used |= set(members)
        for pair, offset, comp in self.pair_values:
            for i in chosen:
                for j in chosen:
                    if i >= j or {i, j} & used or plan[i].device != plan[j].device:
                        continue
                    names = tuple(sorted((plan[i].signature.name, plan[j].signature.name)))
                    if (
                        names == pair
                        and _overlap(plan[i], plan[j])
                        and abs(abs(start[i] - start[j]) - offset) <= _SAME_OFFSET_S
                    ):
                        units.append((comp, plan[i].device, (i, j)))
                        used |= {i, j}
        for i in chosen:
            if i in used:
                continue
            sig = plan[i].signature
            in_cluster = self.cluster_values.get(i)
            if in_cluster is not None and in_cluster[1] <= set(chosen):
                units.append((in_cluster[0], plan[i].device, (i,)))
                continue
            for name, partner, offset, values in self.corun_values:
                if sig.name == name and any(
                    plan[j].device != plan[i].device
                    and plan[j].signature.name == partner
                    and _overlap(plan[i], plan[j])
                    and abs(abs(start[i] - start[j]) - offset) <= _SAME_OFFSET_S
                    for j in chosen
                    if j != i
                ):
                    sig = values
                    break
            before = self._lane_predecessor(i, chosen)
            if before is not None:
                key = (plan[before].signature.name, plan[i].signature.name)
                sig = self.entry_values.get(key, sig)
            units.append((sig, plan[i].device, (i,)))
        if swap is not None:
            units = [(swap(sig), device, members) for sig, device, members in units]
        return self._with_idle(self._retime(units, start))

    def _lane_predecessor(self, i: int, chosen: Sequence[int]) -> int | None:
        """The element right before ``i`` on its device, when nothing else runs then."""
        p = self.placements[i]
        earlier = [
            j
            for j in chosen
            if j != i
            and self.placements[j].device == p.device
            and self.placements[j].start < p.start - _EPS_S
        ]
        if not earlier or any(_overlap(self.placements[j], p) for j in earlier):
            return None
        return max(earlier, key=lambda j: self.placements[j].end)

    def _clock_of(self, sig: Signature, entry: bool = False) -> float | None:
        """The SM clock ``sig`` leaves set (``entry``: the one it starts at), in MHz."""
        clock_of = getattr(self.runner, "element_clock_mhz", None)
        if not callable(clock_of):
            return None
        names = sig.meta.get("composite_of") or [sig.name.split("+")[-1]]
        # A device composite spans a clock change: it leaves its last element's clock
        # set, but the idle time before it runs at its first element's.
        return clock_of(str(names[0] if entry else names[-1]))

    def _with_idle(
        self, placed: list[Placement]
    ) -> tuple[list[Placement], Mapping[str, float] | None]:
        """Gaps as idle elements drawing what an idle device draws at the clock left set.

        A locked clock keeps an idle GPU's draw up, so a gap costs the idle draw at the
        clock of the element before it (after it, for a device's leading gap); the time
        after a device's last element, to the schedule's end, costs the same at its clock,
        returned per device (None when the runner reports no idle draw).
        """
        idle_of = getattr(self.runner, "idle_power_w", None)
        if not callable(idle_of) or not placed:
            return placed, None
        origin = min(p.start for p in placed)
        out = list(placed)
        trailing: dict[str, float] = {}
        by_device: dict[str, list[Placement]] = {}
        for p in placed:
            by_device.setdefault(p.device, []).append(p)
        for device, group in by_device.items():
            group.sort(key=lambda p: p.start)
            busy_until, clock = origin, self._clock_of(group[0].signature, entry=True)
            for p in group:
                gap = p.start - busy_until
                if gap > 1e-12:
                    w = float(idle_of(clock))
                    idle = Signature("ι", static_power=w, time=gap, dynamic_energy=0.0)
                    out.append(Placement(idle.on(device), device, busy_until))
                busy_until = max(busy_until, p.end)
                clock = self._clock_of(p.signature)
            trailing[device] = float(idle_of(clock))
        return out, trailing

    def _retime(
        self,
        units: list[tuple[Signature, str, tuple[int, ...]]],
        start: Mapping[int, float],
    ) -> list[Placement]:
        """Time each unit as the runner does: after the unit it follows, by the planned gap.

        A unit follows the unit on its device whose planned end comes last before its
        planned start; it starts when that one actually ends (its characterized time),
        plus the gap the plan leaves. A device's first unit starts as planned.
        """
        out: list[Placement] = []
        by_device: dict[str, list[tuple[Signature, str, tuple[int, ...]]]] = {}
        for unit in units:
            by_device.setdefault(unit[1], []).append(unit)
        for device, group in by_device.items():
            group.sort(key=lambda u: min(start[i] for i in u[2]))
            done: list[tuple[float, float]] = []  # (planned end, actual end) per unit
            for sig, _, members in group:
                s0 = min(start[i] for i in members)
                planned_end = max(start[i] + self.placements[i].signature.time for i in members)
                before = [d for d in done if d[0] <= s0 + 1e-12]
                if before:
                    p_end, a_end = max(before, key=lambda d: d[0])
                    actual = a_end + (s0 - p_end)
                else:
                    actual = s0
                done.append((planned_end, actual + sig.time))
                out.append(Placement(sig.on(device), device, actual))
        return out

    def predict(self, idxs: Sequence[int]) -> Prediction:
        return predict(
            lambda swap: self.placed(idxs, swap),
            self.library + self.added,
            self.given_graph,
            self.runs_of,
            self.confidence,
        )

    def test(self, idxs: Sequence[int], confidence: float = 0.0) -> tuple[DeviationReport, RunSet]:
        rs = self.measure([self.job(i) for i in idxs])
        return _test(self.predict(idxs), rs, confidence or self.confidence), rs


def check_schedule(
    placements: Sequence[Placement],
    library: Sequence[Signature],
    runner: ScheduleRunner,
    *,
    graph: InteractionGraph | None = None,
    runs: int = 30,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    max_rounds: int = 4,
    progress: Callable[[str], None] | None = None,
) -> CheckResult:
    """Run the §4.4 workflow on a placed schedule.

    Args:
        placements: The schedule, each element at its null-context signature.
        library: The signature library (null-context signatures and any characterized
            values the graph points to).
        runner: Runs the schedule and its pieces (simulated or real GPUs).
        graph: The interaction graph to start from (empty by default).
        runs: Runs per measurement.
        seed: Base seed of the runs.
        confidence: 1 − α of the whole-schedule test (energy and time together).
        max_rounds: Most localize–characterize–refine rounds.
        progress: Called with one line per step.

    Returns:
        The result; ``result.to_dict()`` is the ``eopt.check/1`` JSON.

    Raises:
        ValueError: no placements, or fewer than two runs.
    """
    if not placements:
        raise ValueError("eopt check needs at least one placed element")
    if runs < 2:
        raise ValueError(f"runs must be ≥ 2, got {runs}")
    ses = _Session(
        placements,
        library,
        graph or InteractionGraph(),
        runner,
        runs,
        seed,
        confidence,
        progress,
    )
    every = list(range(len(ses.placements)))
    predicted = ses.predict(every)
    report, measured = ses.test(every)
    ses.say(
        f"measured {measured.energy_j.mean():.6g} J, {measured.time_s.mean():.6g} s over "
        f"{runs} runs; predicted {predicted.energy.mean:.6g} J, {predicted.time.mean:.6g} s"
    )
    # A test at 1 − α fires on α of correct predictions; act on persistent triggers only
    # (paper §5.2.2): a deviation must show again on fresh runs.
    current, confirmation = report, None
    if not report.passed:
        fresh, measured = ses.confirm([ses.job(i) for i in every])
        confirmation = current = _test(predicted, fresh, confidence)
        ses.say(
            f"{runs} fresh runs "
            + ("confirm the deviation" if not current.passed else "do not confirm it: no deviation")
        )
    result = CheckResult(
        deviation=not current.passed,
        initial=report,
        predicted=predicted,
        measured=measured,
        runs=runs,
        confidence=confidence,
        confirmation=confirmation,
    )
    while not current.passed and result.rounds < max_rounds:
        result.rounds += 1
        finding = _localize_and_characterize(ses, every)
        if finding is None:
            ses.say("could not localize the deviation to a prefix, a pair or a device")
            break
        result.found.append(finding)
        refined_pred = ses.predict(every)
        current = _test(refined_pred, measured, confidence)
        result.refined, result.refined_prediction = current, refined_pred
        ses.say(
            f"refined prediction {refined_pred.energy.mean:.6g} J: "
            + ("covers the measurement" if current.passed else "still deviates")
        )
    if result.deviation:
        final = result.refined_prediction or predicted
        result.refined_interval = _test(final, measured, confidence, spread="single")
        result.refined_covers = result.refined_interval.passed
    result.graph = ses.graph
    result.library = list(ses.added)
    result.log = ses.log
    return result


def _cross_device_cluster(
    ses: _Session, runs: RunSet, order: Sequence[int], seed: set[int]
) -> set[int]:
    """Elements that actually overlapped ``seed`` on other devices, transitively (in at
    least half the runs)."""
    pos = {i: k for k, i in enumerate(order)}
    spans = {
        i: np.array(
            [[run[pos[i]].start_s, run[pos[i]].start_s + run[pos[i]].time_s] for run in runs.jobs]
        )
        for i in order
    }

    def overlaps(i: int, j: int) -> bool:
        a, b = spans[i], spans[j]
        both = (a[:, 0] < b[:, 1] - _EPS_S) & (b[:, 0] < a[:, 1] - _EPS_S)
        return bool(both.mean() >= 0.5)

    cluster, frontier = set(seed), list(seed)
    while frontier:
        i = frontier.pop()
        for j in order:
            if j in cluster or ses.placements[j].device == ses.placements[i].device:
                continue
            if overlaps(i, j):
                cluster.add(j)
                frontier.append(j)
    return cluster


def _pool(a: RunSet, b: RunSet) -> RunSet:
    """Two measurements of the same jobs as one."""
    return RunSet(
        np.concatenate([a.energy_j, b.energy_j]),
        np.concatenate([a.time_s, b.time_s]),
        {d: np.concatenate([v, b.device_energy_j[d]]) for d, v in a.device_energy_j.items()},
        a.jobs + b.jobs,
    )


def _overlap(p: Placement, q: Placement) -> bool:
    return p.start < q.end - _EPS_S and q.start < p.end - _EPS_S


def _clock_drop(ses: _Session, pair: Sequence[int], pair_runs: RunSet) -> float | None:
    """How far the pair's co-run lowered a member's mean SM clock below its clock alone.

    Returns the largest relative drop that clears its noise (Welch's statistic beyond
    the localization level's two-sided quantile, and more than
    :data:`_CLOCK_DROP_MIN`), 0 when none does, None when the runner reports no clock.
    """
    z = float(NormalDist().inv_cdf(1.0 - (1.0 - LOCALIZE_CONFIDENCE) / 2.0))
    best = 0.0
    for pos, i in enumerate(pair):
        alone = np.array([run[0].sm_clock_mhz for run in ses.measure([ses.job(i)]).jobs])
        co = np.array([run[pos].sm_clock_mhz for run in pair_runs.jobs])
        if not (np.all(np.isfinite(alone)) and np.all(np.isfinite(co))):
            return None
        m_alone, m_co = float(alone.mean()), float(co.mean())
        if m_alone <= 0.0:
            continue
        rel = 1.0 - m_co / m_alone
        se = math.sqrt(alone.var(ddof=1) / alone.size + co.var(ddof=1) / co.size)
        if rel > _CLOCK_DROP_MIN and (m_alone - m_co) > z * se:
            best = max(best, rel)
    return best


def _devs(ses: _Session, idxs: Sequence[int]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ses.placements[i].device for i in idxs))


def _rel(report: DeviationReport) -> tuple[float, float]:
    t = report.time.relative if report.time is not None else math.nan
    return report.energy.relative, t


def _removed(before: DeviationReport, after: DeviationReport) -> bool:
    """Whether ``after`` keeps at most ``1 - _REMOVED_SHARE`` of ``before``'s deviation,
    in energy and (where both have times) in time."""
    left = 1.0 - _REMOVED_SHARE
    if abs(after.energy.relative) > left * abs(before.energy.relative):
        return False
    if before.time is not None and after.time is not None:
        return abs(after.time.relative) <= left * abs(before.time.relative)
    return True


def _pair_candidates(ses: _Session, prefix: Sequence[int], e: int) -> list[tuple[int, Kind]]:
    """The pairs that may explain a deviation ending at ``e`` (the last of ``prefix``):
    every earlier element that overlaps it (runtime), and its predecessor on its device
    (entry)."""
    pe = ses.placements[e]
    earlier = [j for j in prefix if j != e]
    candidates: list[tuple[int, Kind]] = [
        (j, "runtime") for j in earlier if _overlap(ses.placements[j], pe)
    ]
    before = [
        j
        for j in earlier
        if ses.placements[j].device == pe.device and ses.placements[j].end <= pe.start + _EPS_S
    ]
    if before:
        candidates.append((max(before, key=lambda j: ses.placements[j].end), "entry"))
    return candidates


def _carries(pair: DeviationReport, whole: DeviationReport) -> bool:
    """Whether ``pair``'s deviation is at least ``_CARRIED_SHARE`` of ``whole``'s, with
    the same sign, in energy or in time."""

    def share(a: float, b: float) -> float:
        return a / b if b != 0.0 else 0.0

    if share(pair.energy.difference, whole.energy.difference) >= _CARRIED_SHARE:
        return True
    return (
        pair.time is not None
        and whole.time is not None
        and share(pair.time.difference, whole.time.difference) >= _CARRIED_SHARE
    )


def _deviating_pair(
    ses: _Session,
    pairs: Sequence[tuple[int, int, Kind]],
    carrying: DeviationReport | None = None,
) -> tuple[int, int, Kind, DeviationReport, RunSet] | None:
    """Of ``pairs`` (earlier, later, kind), the one whose test deviates most (the sum of
    its energy and time statistics), with its report and runs; None when none deviates.
    With ``carrying``, only pairs that carry enough of that deviation (`_carries`)."""
    best: tuple[float, int, int, Kind, DeviationReport, RunSet] | None = None
    for j, e, kind in pairs:
        rep, rs = ses.test(sorted((j, e)), confidence=LOCALIZE_CONFIDENCE)
        if not rep.passed and (carrying is None or _carries(rep, carrying)):
            z = abs(rep.energy.statistic) + (abs(rep.time.statistic) if rep.time else 0.0)
            if best is None or z > best[0]:
                best = (z, j, e, kind, rep, rs)
    return None if best is None else best[1:]


def _localize_and_characterize(ses: _Session, every: list[int]) -> Finding | None:
    order = sorted(every, key=lambda i: (ses.placements[i].start, ses.placements[i].device, i))
    loc = LOCALIZE_CONFIDENCE
    full, _ = ses.test(order, confidence=loc)
    if full.passed:
        ses.say("the deviation is below the localization threshold; nothing to localize")
        return None
    lo, hi = 0, len(order)  # prefix lo passes (empty), prefix hi deviates
    while hi - lo > 1:
        mid = (lo + hi) // 2
        rep, _ = ses.test(order[:mid], confidence=loc)
        if rep.passed:
            lo = mid
        else:
            hi = mid
    e = order[hi - 1]
    pe = ses.placements[e]
    ses.say(f"first deviating prefix: {hi} element(s), ending with {pe.signature.name}@{pe.device}")
    prefix = order[:hi]
    candidates = _pair_candidates(ses, prefix, e)
    best = _deviating_pair(ses, [(j, e, kind) for j, kind in candidates])
    if best is None:
        prefix_rep, _ = ses.test(prefix, confidence=loc)
        # Noise can carry the bisection past the prefix where the deviation begins
        # (a small consumer's effect is near the threshold in a short prefix, and grows
        # as its device's later elements shift): the pairs of every earlier element,
        # if one carries the prefix's deviation (else the prefix as a whole: heat).
        best = _deviating_pair(
            ses,
            [
                (j, x, kind)
                for n, x in enumerate(prefix[:-1], start=1)
                for j, kind in _pair_candidates(ses, prefix[:n], x)
            ],
            carrying=prefix_rep,
        )
    if best is not None:
        j, e, kind, rep, rs = best
        if kind == "runtime":
            # Co-run values depend on everything that overlaps the pair, later elements
            # included (one that starts while a stretched partner still runs): take them
            # where the pair ran, in the whole schedule.
            ctx_runs = ses.measure([ses.job(i) for i in every])
            return _runtime_finding(ses, j, e, rep, rs, ctx_runs, every)
        return _entry_finding(ses, j, e, rep, prefix=None, context=order[: order.index(e) + 1])
    # No pair explains it (the look-back above has tested the prefix): the prefix whole.
    entry = [j for j, kind in candidates if kind == "entry"]
    return _entry_finding(
        ses, entry[0] if entry else None, e, prefix_rep, prefix=prefix, context=prefix
    )


def _runtime_finding(
    ses: _Session,
    a: int,
    b: int,
    rep: DeviationReport,
    pair_runs: RunSet,
    ctx_runs: RunSet,
    prefix: Sequence[int],
) -> Finding:
    """A runtime pair: characterized where it ran, in the whole schedule (its realized
    entry state, start jitter and later co-runners included)."""
    pa, pb = ses.placements[a], ses.placements[b]
    co_throttled = float(np.mean([any(r.throttled for r in run) for run in pair_runs.jobs]))
    same = pa.device == pb.device
    drop = _clock_drop(ses, sorted((a, b)), pair_runs)
    if drop is None:
        # No clock telemetry: a throttle reported while co-running and never alone.
        iso_throttled = any(
            rec.throttled for i in (a, b) for run in ses.measure([ses.job(i)]).jobs for rec in run
        )
        power = co_throttled >= 0.5 and not iso_throttled
    else:
        # A kernel near its own limit reports a throttle alone too, so the flag alone
        # cannot tell; a power limit or budget that bites lowers the clock the pair runs
        # at, while a shared SM, memory or link stretches the work at the same clock.
        power = co_throttled >= 0.5 and drop > 0.0
    if same:
        mechanism = "power_cap" if power else "contention"
    else:
        mechanism = "node_power" if power else "interconnect"
    evidence = (
        f"co-run vs isolation: {rep.energy.relative:+.2%} energy, "
        + (f"{rep.time.relative:+.2%} time" if rep.time else "")
        + (f"; power throttle reported in {co_throttled:.0%} of co-runs" if power else "")
        + (f", SM clock {-drop:+.2%} against isolation" if power and drop else "")
    )
    names = (pa.signature.name, pb.signature.name)
    offset = abs(pb.start - pa.start)
    earlier = a if pa.start <= pb.start else b
    added: list[str] = []
    if same:
        comp_name = "+".join(sorted(names))
        s = ses.runner.static_power_w(ses.placements[earlier].signature.name)
        ctx = Context(runtime=RuntimeContext(corunners=tuple(sorted(names)), offset_s=offset))
        comp_e, comp_t = pair_runs.energy_j, pair_runs.time_s
        if offset <= _SAME_OFFSET_S:
            # Co-starting: the pair's window is the longer member's run, whose record
            # holds the whole device's energy while it ran.
            ia, ib = prefix.index(a), prefix.index(b)
            comp_e = np.array(
                [max(r[ia], r[ib], key=lambda x: x.time_s).energy_j for r in ctx_runs.jobs]
            )
            comp_t = np.array([max(r[ia].time_s, r[ib].time_s) for r in ctx_runs.jobs])
        sig = _signature(
            comp_name,
            pa.device,
            comp_e,
            comp_t,
            s,
            ctx,
            {"source": "eopt check", "mechanism": mechanism},
        )
        ses.added.append(sig)
        ses.pair_values.append((tuple(sorted(names)), offset, sig))
        added.append(comp_name)
        edge = RuntimeEdge(
            tuple(sorted(names)),  # type: ignore[arg-type]
            mechanisms=(mechanism,),
            offsets_s=(offset,),
            signature=comp_name,
            deviation={"energy_rel": rep.energy.relative, "p_value": rep.energy.p_value},
        )
    else:
        per: dict[str, str] = {}
        pair_idx = sorted((a, b))
        for idx, i in enumerate(pair_idx):
            p = ses.placements[i]
            partner = ses.placements[pair_idx[1 - idx]].signature.name
            e_j, t_j = ctx_runs.job_values(prefix.index(i))
            name = p.signature.name
            ctx = Context(runtime=RuntimeContext(corunners=(partner,), offset_s=offset))
            sig = _signature(
                name,
                p.device,
                e_j,
                t_j,
                ses.runner.static_power_w(name),
                ctx,
                {"source": "eopt check", "mechanism": mechanism},
            )
            ses.added.append(sig)
            per[name] = name
            ses.corun_values.append((name, partner, offset, sig))
        added = sorted(per)
        # A partner stretched by the shared resource overlaps what follows on the other
        # device, which then shares it too: every element that actually overlaps the pair
        # across devices, transitively, takes the values it ran with in this schedule.
        cluster = _cross_device_cluster(ses, ctx_runs, prefix, {a, b})
        for i in cluster:
            e_j, t_j = ctx_runs.job_values(prefix.index(i))
            q = ses.placements[i]
            ses.cluster_values[i] = (
                _signature(
                    q.signature.name,
                    q.device,
                    e_j,
                    t_j,
                    ses.runner.static_power_w(q.signature.name),
                    Context(runtime=RuntimeContext(corunners=tuple(sorted(names)))),
                    {"source": "eopt check", "mechanism": mechanism},
                ),
                frozenset(cluster),
            )
        if len(cluster) > 2:
            evidence += f"; {len(cluster) - 2} more element(s) overlap the pair across devices"
        edge = RuntimeEdge(
            tuple(sorted(names)),  # type: ignore[arg-type]
            mechanisms=(mechanism,),
            offsets_s=(offset,),
            signatures=per,
            workload={"devices": "cross-device"},
            deviation={"energy_rel": rep.energy.relative, "p_value": rep.energy.p_value},
        )
    _add_edge(ses, edge)
    ses.say(f"runtime {names[0]} ↔ {names[1]}: {mechanism} ({evidence})")
    e_rel, t_rel = _rel(rep)
    return Finding(
        names,
        "runtime",
        mechanism,
        "pair",
        _devs(ses, (a, b)),
        tuple(sorted((a, b))),
        e_rel,
        t_rel,
        evidence,
        tuple(added),
    )


def _entry_finding(
    ses: _Session,
    p: int | None,
    e: int,
    rep: DeviationReport,
    prefix: Sequence[int] | None,
    context: Sequence[int],
) -> Finding:
    """An entry pair (or prefix): identified by protocol on the consumer's own values,
    characterized where it ran, at the end of its prefix."""
    pe = ses.placements[e]
    consumer = pe.signature.name
    producer = ses.placements[p].signature.name if p is not None else None
    scope_idxs = (
        sorted(prefix) if prefix is not None else sorted(i for i in (p, e) if i is not None)
    )
    same_dev = [i for i in scope_idxs if ses.placements[i].device == pe.device]
    base_jobs = [ses.job(i) for i in same_dev]
    mechanism, evidence = "unexplained", "no protocol removed the deviation"
    runner_elements = getattr(ses.runner, "elements", {})
    spec_e = runner_elements.get(consumer)
    spec_p = runner_elements.get(producer) if producer else None
    k = same_dev.index(e)
    null_n = ses.runs_of(pe.signature)

    def consumer_report(jobs: Sequence[Job]) -> DeviationReport:
        """The consumer, run within ``jobs``, tested against its null-context signature."""
        e_v, t_v = ses.measure(jobs).job_values(k)
        return deviation_report(
            pe.signature,
            Runs(e_v.tolist(), t_v.tolist()),
            n_predicted=null_n,
            confidence=LOCALIZE_CONFIDENCE,
        )

    own = consumer_report(base_jobs)

    def consumer_agrees(jobs: Sequence[Job]) -> bool:
        """Does the consumer, run within ``jobs``, match its null-context signature, or
        keep no more than ``1 - _REMOVED_SHARE`` of the deviation it has where it ran?"""
        rep_v = consumer_report(jobs)
        return rep_v.passed or _removed(own, rep_v)

    written: set[str] = set()
    for i in same_dev[:k]:
        s = runner_elements.get(ses.placements[i].signature.name)
        written |= set(getattr(s, "writes", ()))
    shares_data = bool(written & set(getattr(spec_e, "reads", ())))
    clocks_differ = (
        spec_e is not None and spec_p is not None and spec_e.sm_clock_mhz != spec_p.sm_clock_mhz
    )
    # A clock changed earlier may still be settling when the consumer starts (a change
    # takes tens of ms, many elements long): the state the device reports at its entry.
    settling = False
    if p is not None and not clocks_differ:
        left = [run[k].entry.get("clock_settling_s", 0.0) for run in ses.measure(base_jobs).jobs]
        settling = float(np.mean([x > 0.0 for x in left])) >= 0.5
    # Cache protocol: the same predecessor, the consumer on cold buffers of its own.
    if shares_data:
        jobs = list(base_jobs)
        jobs[k] = ses.job(e, cold_data=True)
        if consumer_agrees(jobs):
            mechanism = "cache"
            evidence = f"on cold buffers of its own the consumer {_LOSES_IT}"
    # Idle-gap protocol: a gap far beyond a clock's settling, far below thermal time
    # constants, with the consumer's clock set at its start.
    gap = 0.05
    if mechanism == "unexplained" and p is not None and (clocks_differ or settling):
        jobs = list(base_jobs)
        jobs[k] = ses.job(e, shift=gap, settle_before_s=gap)
        for m in range(k + 1, len(jobs)):
            jobs[m] = ses.job(same_dev[m], shift=gap)
        if consumer_agrees(jobs):
            mechanism = "clock_state"
            evidence = (
                f"after a {gap * 1e3:.0f} ms idle gap that lets its clock settle, the consumer "
                f"{_LOSES_IT}"
            )
    # Heat protocol: the state the predecessors leave that a device reports (its
    # temperature, as NVML reads it); run alone, the consumer enters at the null context.
    if mechanism == "unexplained":
        rs_ctx = ses.measure(base_jobs)
        rs_alone = ses.measure([ses.job(e)])
        t_ctx = float(np.mean([run[k].entry.get("temperature_c", math.nan) for run in rs_ctx.jobs]))
        t_null = float(
            np.mean([run[0].entry.get("temperature_c", math.nan) for run in rs_alone.jobs])
        )
        if t_ctx > t_null + _WARMER_C:
            mechanism = "thermal"
            evidence = (
                f"its predecessors leave the die at {t_ctx:.2f} °C; alone it enters at "
                f"{t_null:.2f} °C"
            )
    rs = ses.measure([ses.job(i) for i in context])
    e_j, t_j = rs.job_values(list(context).index(e))
    s = ses.runner.static_power_w(consumer)
    entry = EntryContext(after=producer) if producer else EntryContext(cache="warm")
    ctx_sig = _signature(
        consumer, pe.device, e_j, t_j, s, Context(entry=entry), {"source": "eopt check"}
    )
    added = [consumer]
    scope: Literal["pair", "prefix"] = "prefix" if prefix is not None else "pair"
    if mechanism in ("thermal", "clock_state") or scope == "prefix" or producer is None:
        # Coarsen: the device's whole timeline becomes one composite (§4.4), since its
        # state carries to everything after the prefix too. A clock change settles over
        # tens of ms, past the consumer: the device's later elements, gaps and idle tail
        # run at the unsettled clock as well, so the consumer's entry values alone
        # leave that deviation to be traced (wrongly) elsewhere.
        members = tuple(
            i for i in range(len(ses.placements)) if ses.placements[i].device == pe.device
        )
        rs_dev = ses.measure([ses.job(i) for i in members])
        name = f"{pe.device}[{len(members)} elements]"
        first = min(members, key=lambda i: ses.placements[i].start)
        s_dev = ses.runner.static_power_w(ses.placements[first].signature.name)
        # measure() starts a piece at its first start: no idle lead-in to take out.
        dev_e = rs_dev.device_energy_j.get(pe.device, rs_dev.energy_j)
        dev_t = rs_dev.time_s
        everyone = list(range(len(ses.placements)))
        idle_of = getattr(ses.runner, "idle_power_w", None)
        if len(_devs(ses, everyone)) > 1 and callable(idle_of):
            # With other devices the schedule outlasts this one, and the state its
            # prefix left (a clock still settling, a warmer die) keeps its idle draw off
            # the null one to the end: the timeline runs to the schedule's end, from
            # the whole schedule's runs, less the idle lead-in before its first start.
            whole = ses.measure([ses.job(i) for i in everyone])
            lead = np.array([run[first].start_s for run in whole.jobs])
            lead_w = float(idle_of(ses._clock_of(ses.placements[first].signature)))
            dev_e = whole.device_energy_j[pe.device] - lead_w * lead
            dev_t = whole.time_s - lead
        comp = _signature(
            name,
            pe.device,
            dev_e,
            dev_t,
            s_dev,
            None,
            {
                "source": "eopt check",
                # In start order: its first and last members set the clocks around it.
                "composite_of": [
                    ses.placements[i].signature.name
                    for i in sorted(members, key=lambda i: ses.placements[i].start)
                ],
            },
        )
        ses.device_composites[pe.device] = comp
        added.append(name)
    elif producer is not None:
        ses.entry_values[(producer, consumer)] = ctx_sig
    ses.added.append(ctx_sig)
    if producer is not None:
        edge = EntryEdge(
            producer,
            consumer,
            mechanisms=(mechanism,),
            characterized=(entry,),
            signature=consumer,
            deviation={"energy_rel": rep.energy.relative, "p_value": rep.energy.p_value},
        )
        _add_edge(ses, edge)
    names = (
        tuple(ses.placements[i].signature.name for i in same_dev)
        if prefix is not None
        else ((producer, consumer) if producer else (consumer,))
    )
    ses.say(f"entry {' → '.join(names[-2:])}: {mechanism} ({evidence})")
    e_rel, t_rel = _rel(rep)
    return Finding(
        tuple(n for n in names if n),
        "entry",
        mechanism,
        scope,
        (pe.device,),
        tuple(same_dev),
        e_rel,
        t_rel,
        evidence,
        tuple(added),
    )


def _add_edge(ses: _Session, edge: EntryEdge | RuntimeEdge) -> None:
    """Write ``edge`` into the graph (replacing one on the same pair)."""
    g = ses.graph
    if isinstance(edge, EntryEdge):
        entry = tuple(x for x in g.entry if (x.source, x.target) != (edge.source, edge.target))
        ses.graph = InteractionGraph(entry=(*entry, edge), runtime=g.runtime, nodes=g.nodes)
    else:
        runtime = tuple(x for x in g.runtime if x.pair != edge.pair)
        ses.graph = InteractionGraph(entry=g.entry, runtime=(*runtime, edge), nodes=g.nodes)
