"""Helpers shared by the solver benchmarks.

Data locations, the stage-profile reader (Perseus/Zeus layout
``stage,instruction,frequency,time,energy``), 1F1B pipeline DAGs, the exact
("true") evaluation of a frequency plan from the measured profile, the bridge to
``solvers.Problem``, the lowtime subprocess, and PASS/FAIL reporting.

Energy accounting of every "true" number here (Perseus's, and eopt's with the
idle power s̄ = P_block on each stage's GPU)::

    E_total(plan) = Σ_i E_i(f_i) + P_block · (S · T − Σ_i t_i(f_i))

with ``T`` the longest path through the DAG using the measured ``t_i(f_i)``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
LOWTIME_VENV = BENCH_DIR / ".venv-lowtime"
LOWTIME_RUNNER = BENCH_DIR / "lowtime_runner.py"
LOWTIME_REQUIREMENT = "lowtime==0.3.0"
TEST_DATA_DIR = REPO_DIR / "tests" / "data"
NVML_FAKE = REPO_DIR / "tests" / "devices" / "conftest.py"

KINDS = ("forward", "backward")


# --------------------------------------------------------------------------------------
# Data locations
# --------------------------------------------------------------------------------------


def data_dir() -> Path:
    """Return the folder holding the measured reference data (``lowtime_bench/`` …).

    In a smoke run, the repository's own ``tests/data`` and nothing else. Otherwise
    ``EOPT_DATA_DIR`` wins, then ``shared/data`` inside the checkout or beside it.

    Raises:
        FileNotFoundError: naming the places searched and the fix.
    """
    if is_smoke():
        return TEST_DATA_DIR
    candidates: list[Path] = []
    if env := os.environ.get("EOPT_DATA_DIR"):
        candidates.append(Path(env))
    candidates += [REPO_DIR / "shared" / "data", REPO_DIR.parent / "shared" / "data"]
    for candidate in candidates:
        if (candidate / "lowtime_bench").is_dir():
            return candidate
    searched = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"reference data not found (searched {searched}); "
        "set EOPT_DATA_DIR to the folder that holds lowtime_bench/ and perseus_sosp24/"
    )


# --------------------------------------------------------------------------------------
# Stage profiles
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpOption:
    """One measured execution option of a pipeline instruction.

    Attributes:
        freq_mhz: Locked SM clock, MHz.
        time_s: Duration of one microbatch's instruction, s.
        energy_j: Energy of that run on its GPU, J.
    """

    freq_mhz: int
    time_s: float
    energy_j: float


# (stage, kind) → options sorted by clock, fastest (highest clock) first.
StageProfile = dict[tuple[int, str], tuple[OpOption, ...]]


def read_stage_profile(path: str | os.PathLike[str]) -> StageProfile:
    """Read a ``stage,instruction,frequency,time,energy`` CSV (s, J, MHz).

    Raises:
        ValueError: naming ``file:line`` and the reason for the first bad row.
    """
    path = Path(path)
    expected = ["stage", "instruction", "frequency", "time", "energy"]
    out: dict[tuple[int, str], list[OpOption]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or [h.strip() for h in header] != expected:
            raise ValueError(f"{path}:1: header must be {','.join(expected)}, got {header}")
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != 5:
                raise ValueError(f"{path}:{lineno}: expected 5 fields, got {len(row)}")
            try:
                stage, kind = int(row[0]), row[1].strip()
                option = OpOption(int(float(row[2])), float(row[3]), float(row[4]))
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: {exc}") from None
            if kind not in KINDS:
                raise ValueError(f"{path}:{lineno}: instruction must be forward or backward")
            if not (option.time_s > 0 and option.energy_j >= 0):
                raise ValueError(f"{path}:{lineno}: time must be > 0 s and energy >= 0 J")
            out.setdefault((stage, kind), []).append(option)
    return {key: tuple(sorted(opts, key=lambda o: -o.freq_mhz)) for key, opts in out.items()}


def write_stage_profile(path: str | os.PathLike[str], profile: StageProfile) -> None:
    """Write ``profile`` in the Perseus/Zeus CSV layout (so lowtime can read it too)."""
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["stage", "instruction", "frequency", "time", "energy"])
        for (stage, kind), options in sorted(profile.items()):
            for o in options:
                writer.writerow([stage, kind, o.freq_mhz, repr(o.time_s), repr(o.energy_j)])


# --------------------------------------------------------------------------------------
# Pipeline DAGs
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineOp:
    """One instruction of a pipeline iteration (a node of the DAG)."""

    id: int
    stage: int
    microbatch: int
    kind: str

    @property
    def name(self) -> str:
        """Task name used in ``solvers.Problem`` (e.g. ``s0.f3``)."""
        return f"s{self.stage}.{self.kind[0]}{self.microbatch}"


@dataclass(frozen=True)
class PipelineDag:
    """A pipeline iteration: instructions, precedence edges (no dummy source/sink)."""

    num_stages: int
    num_microbatches: int
    ops: tuple[PipelineOp, ...]
    edges: tuple[tuple[int, int], ...]
    source: str = "eopt-benchmarks 1F1B builder"

    def keyed_edges(self) -> set[tuple[tuple[int, int, str], tuple[int, int, str]]]:
        """Edges as ``(stage, microbatch, kind)`` pairs, to compare DAGs built elsewhere."""
        by_id = {op.id: (op.stage, op.microbatch, op.kind) for op in self.ops}
        return {(by_id[a], by_id[b]) for a, b in self.edges}


def one_f_one_b_order(num_stages: int, num_microbatches: int, stage: int) -> list[tuple[str, int]]:
    """Return stage ``stage``'s synchronous 1F1B instruction order as ``(kind, microbatch)``.

    ``w = min(S − s − 1, M)`` warm-up forwards, then one forward and one backward
    alternately until every forward is issued, then the remaining backwards.
    """
    warmup = min(num_stages - stage - 1, num_microbatches)
    order = [("forward", m) for m in range(warmup)]
    next_f, next_b = warmup, 0
    while next_f < num_microbatches:
        order.append(("forward", next_f))
        next_f += 1
        order.append(("backward", next_b))
        next_b += 1
    order += [("backward", m) for m in range(next_b, num_microbatches)]
    return order


def build_1f1b_dag(num_stages: int, num_microbatches: int) -> PipelineDag:
    """Build a synchronous 1F1B iteration DAG (the rule in ``docs/design.md``).

    Dependencies: F(s,m) after F(s−1,m); B(s,m) after B(s+1,m); B(S−1,m) after
    F(S−1,m); instructions on one stage run in 1F1B order.
    """
    ops: list[PipelineOp] = []
    index: dict[tuple[int, int, str], int] = {}
    edges: list[tuple[int, int]] = []
    for s in range(num_stages):
        previous: int | None = None
        for kind, m in one_f_one_b_order(num_stages, num_microbatches, s):
            op = PipelineOp(len(ops), s, m, kind)
            ops.append(op)
            index[(s, m, kind)] = op.id
            if previous is not None:
                edges.append((previous, op.id))
            previous = op.id
    last = num_stages - 1
    for m in range(num_microbatches):
        for s in range(1, num_stages):
            edges.append((index[(s - 1, m, "forward")], index[(s, m, "forward")]))
        for s in range(last):
            edges.append((index[(s + 1, m, "backward")], index[(s, m, "backward")]))
        edges.append((index[(last, m, "forward")], index[(last, m, "backward")]))
    return PipelineDag(num_stages, num_microbatches, tuple(ops), tuple(dict.fromkeys(edges)))


def read_lowtime_dag(path: str | os.PathLike[str]) -> PipelineDag:
    """Read ``lowtime_bench/*/dag.json`` (drops the dummy source and sink).

    Raises:
        ValueError: naming the file and the missing or bad field.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        dummy = {data["source"], data["sink"]}
        ops = tuple(
            PipelineOp(int(n["id"]), int(n["stage"]), int(n["microbatch"]), str(n["kind"]))
            for n in data["nodes"]
        )
        edges = tuple(
            (int(a), int(b)) for a, b in data["edges"] if a not in dummy and b not in dummy
        )
        return PipelineDag(
            int(data["num_stages"]), int(data["num_microbatches"]), ops, edges, str(path)
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a lowtime_bench dag.json ({exc!r})") from None


def pipeline_dag(num_stages: int, num_microbatches: int) -> PipelineDag:
    """The 1F1B DAG from ``eopt.plan``'s generator when it exists, else our own builder."""
    generated = _dag_from_eopt_plan(num_stages, num_microbatches)
    return generated if generated is not None else build_1f1b_dag(num_stages, num_microbatches)


def _dag_from_eopt_plan(num_stages: int, num_microbatches: int) -> PipelineDag | None:
    """The DAG of ``eopt.plan.pipeline.pipeline_plan``; ``None`` while it does not exist.

    Raises:
        ValueError: when its precedence differs from the design's 1F1B rule (our builder).
    """
    try:
        from eopt.plan.pipeline import pipeline_plan
    except ImportError:
        return None
    plan = pipeline_plan(num_stages, num_microbatches, 0.0, schedule="1f1b")
    ops: list[PipelineOp] = []
    ids: dict[str, int] = {}
    for element in plan.elements:
        found = re.fullmatch(r"([FB])\[s(\d+),m(\d+)\]", element.name)
        if found is None:
            raise ValueError(f"eopt.plan element {element.name!r}: not F[s…,m…] / B[s…,m…]")
        kind = "forward" if found.group(1) == "F" else "backward"
        ids[element.name] = len(ops)
        ops.append(PipelineOp(len(ops), int(found.group(2)), int(found.group(3)), kind))
    edges = tuple((ids[a], ids[e.name]) for e in plan.elements for a in e.after)
    dag = PipelineDag(num_stages, num_microbatches, tuple(ops), edges, "eopt.plan.pipeline_plan")
    if dag.keyed_edges() != build_1f1b_dag(num_stages, num_microbatches).keyed_edges():
        raise ValueError("eopt.plan's 1F1B DAG differs from the design's rule")
    return dag


def topological_order(dag: PipelineDag) -> list[int]:
    """Op ids in a topological order (Kahn's algorithm).

    Raises:
        ValueError: when the edges contain a cycle.
    """
    succ: dict[int, list[int]] = {op.id: [] for op in dag.ops}
    indeg = dict.fromkeys(succ, 0)
    for a, b in dag.edges:
        succ[a].append(b)
        indeg[b] += 1
    ready = [i for i, d in indeg.items() if d == 0]
    order: list[int] = []
    while ready:
        node = ready.pop()
        order.append(node)
        for nxt in succ[node]:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                ready.append(nxt)
    if len(order) != len(succ):
        raise ValueError(f"{dag.source}: precedence edges contain a cycle")
    return order


# --------------------------------------------------------------------------------------
# True evaluation of a plan (measured profile, no fit, no quantization)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrueResult:
    """A plan evaluated exactly with the measured profile.

    Attributes:
        makespan_s: Longest path with the measured durations, s.
        energy_j: Total energy ``Σ E_i + P_block · (S · T − Σ t_i)``, J.
        compute_energy_j: ``Σ E_i``, J.
    """

    makespan_s: float
    energy_j: float
    compute_energy_j: float

    def gap_to(self, lower_bound_j: float) -> float:
        """Relative gap (E − LB) / E of this plan's true energy to a lower bound."""
        return (self.energy_j - lower_bound_j) / self.energy_j


class PlanEvaluator:
    """Exact makespan and energy of frequency plans on one DAG and profile.

    Args:
        dag: The pipeline DAG.
        profile: Measured options per (stage, kind).
        p_block_w: Blocking / idle power of each GPU, W.
    """

    def __init__(self, dag: PipelineDag, profile: StageProfile, p_block_w: float) -> None:
        self.dag = dag
        self.p_block_w = p_block_w
        self._ops = {op.id: op for op in dag.ops}
        self._order = topological_order(dag)
        self._preds: dict[int, list[int]] = {op.id: [] for op in dag.ops}
        for a, b in dag.edges:
            self._preds[b].append(a)
        self._table: dict[int, dict[int, OpOption]] = {}
        for op in dag.ops:
            options = profile.get((op.stage, op.kind))
            if not options:
                raise ValueError(f"profile has no rows for stage {op.stage} {op.kind}")
            self._table[op.id] = {o.freq_mhz: o for o in options}

    def evaluate(self, freqs_mhz: Mapping[int, int]) -> TrueResult:
        """Evaluate a plan given as op id → SM clock (MHz).

        Raises:
            KeyError: naming the op whose clock is missing or not in the profile.
        """
        finish: dict[int, float] = {}
        busy = 0.0
        compute = 0.0
        for node in self._order:
            freq = freqs_mhz[node]
            try:
                option = self._table[node][freq]
            except KeyError:
                op = self._ops[node]
                raise KeyError(f"{op.name}: {freq} MHz is not in the profile") from None
            start = max((finish[p] for p in self._preds[node]), default=0.0)
            finish[node] = start + option.time_s
            busy += option.time_s
            compute += option.energy_j
        makespan = max(finish.values())
        idle = self.p_block_w * (self.dag.num_stages * makespan - busy)
        return TrueResult(makespan, compute + idle, compute)

    def uniform(self, freq_mhz: int) -> TrueResult:
        """Every op at the same clock."""
        return self.evaluate(dict.fromkeys(self._ops, freq_mhz))

    def max_clock(self) -> int:
        """Highest clock every op has."""
        return min(max(t) for t in self._table.values())


# --------------------------------------------------------------------------------------
# eopt side: solvers.Problem
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EoptProblem:
    """A ``solvers.Problem`` with the map back from mode indices to clocks."""

    problem: Any
    mode_freqs: dict[str, tuple[int, ...]]
    op_ids: dict[str, int]

    def freqs_of(self, modes: Mapping[str, int]) -> dict[int, int]:
        """Turn a solution's task → mode index map into op id → clock (MHz)."""
        return {self.op_ids[name]: self.mode_freqs[name][i] for name, i in modes.items()}


def build_problem(dag: PipelineDag, profile: StageProfile, p_block_w: float) -> EoptProblem:
    """Build the ``solvers.Problem`` of a pipeline: one task per op, every measured clock a mode.

    All measured clocks are offered (none pre-filtered): a clock that is slower and
    costs more raw energy may still be cheaper once the idle power it saves counts.
    """
    import solvers  # deferred: the benchmarks must load (and report) without it

    tasks = []
    mode_freqs: dict[str, tuple[int, ...]] = {}
    op_ids: dict[str, int] = {}
    for op in dag.ops:
        options = profile[(op.stage, op.kind)]
        modes = tuple(
            solvers.Mode(duration=o.time_s, energy=o.energy_j, label=o.freq_mhz, setting=o.freq_mhz)
            for o in options
        )
        tasks.append(solvers.Task(name=op.name, device=f"stage{op.stage}", modes=modes))
        mode_freqs[op.name] = tuple(o.freq_mhz for o in options)
        op_ids[op.name] = op.id
    names = {op.id: op.name for op in dag.ops}
    problem = solvers.Problem(
        tasks=tuple(tasks),
        edges=tuple((names[a], names[b]) for a, b in dag.edges),
        idle_power={f"stage{s}": p_block_w for s in range(dag.num_stages)},
    )
    return EoptProblem(problem, mode_freqs, op_ids)


def solve(problem: Any, deadline_s: float | None, method: str, time_limit_s: float | None) -> Any:
    """``solvers.solve``, passing ``time_limit`` only when given (else the solver's default)."""
    import solvers

    extra = {} if time_limit_s is None else {"time_limit": time_limit_s}
    return solvers.solve(problem, deadline_s, method=method, **extra)


# --------------------------------------------------------------------------------------
# lowtime in its own virtual environment
# --------------------------------------------------------------------------------------


def lowtime_python() -> Path:
    """Return the lowtime venv's interpreter, creating the venv on first use.

    lowtime is never a project dependency: it lives in ``benchmarks/.venv-lowtime``
    (gitignored), created with ``python -m venv`` + ``pip install lowtime==0.3.0``.

    Raises:
        RuntimeError: when the venv cannot be created, with pip's last lines.
    """
    if is_smoke():
        raise RuntimeError("a smoke run never creates lowtime's venv nor runs lowtime")
    python = LOWTIME_VENV / "bin" / "python"
    # A venv whose pip step failed has an interpreter but no lowtime: install again.
    if python.exists() and any(LOWTIME_VENV.glob("lib/python*/site-packages/lowtime")):
        return python
    print(f"creating {LOWTIME_VENV} and installing {LOWTIME_REQUIREMENT} …", flush=True)
    steps = [
        [sys.executable, "-m", "venv", str(LOWTIME_VENV)],
        [str(python), "-m", "pip", "install", "-q", LOWTIME_REQUIREMENT],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise RuntimeError(f"`{' '.join(step)}` failed:\n{tail}")
    return python


@dataclass
class LowtimePlan:
    """One point of lowtime's frontier (one Phillips–Dessouky iteration).

    Attributes:
        iteration: 0 = the all-slowest start.
        pred_makespan_s: lowtime's quantized makespan × unit time, s.
        pred_energy_j: lowtime's model cost + S · P_block · predicted makespan, J.
        freqs_mhz: op id → clock chosen by lowtime.
        true: The plan evaluated with the measured profile.
    """

    iteration: int
    pred_makespan_s: float
    pred_energy_j: float
    freqs_mhz: dict[int, int] | None
    true: TrueResult


@dataclass
class LowtimeRun:
    """lowtime's frontier with every plan re-evaluated exactly."""

    plans: list[LowtimePlan]
    fit_s: float = float("nan")
    solve_s: float = float("nan")
    total_s: float = float("nan")
    truncated: bool = False
    error: str = ""
    origin: str = ""

    def best_within(self, deadline_s: float) -> LowtimePlan | None:
        """Oracle choice: lowest true energy among plans whose TRUE makespan ≤ deadline."""
        ok = [p for p in self.plans if p.true.makespan_s <= deadline_s * (1 + 1e-12)]
        return min(ok, key=lambda p: p.true.energy_j) if ok else None

    def lookup(self, deadline_s: float) -> LowtimePlan | None:
        """What a Perseus user deploys: the slowest plan whose PREDICTED makespan ≤ deadline."""
        ok = [p for p in self.plans if p.pred_makespan_s <= deadline_s * (1 + 1e-12)]
        return max(ok, key=lambda p: (p.pred_makespan_s, -p.iteration)) if ok else None


def run_lowtime(
    dag: PipelineDag,
    profile_csv: Path,
    p_block_w: float,
    unit_time_s: float,
    evaluator: PlanEvaluator,
    time_limit_s: float | None = None,
    driver: str = "example",
) -> LowtimeRun:
    """Run lowtime 0.3.0 (Perseus's driver logic) in a subprocess on ``dag``.

    The subprocess sees the same DAG (op ids, edges) and the same profile CSV, fits
    lowtime's exponential models as upstream does (``driver``: ``"example"`` =
    lowtime's ``examples/perseus.py``, ``"artifact"`` = Perseus's SOSP'24 script; see
    ``lowtime_runner.py``), and returns the clock of every op after every iteration;
    each plan is re-evaluated here with the measured profile.
    """
    try:
        python = lowtime_python()
    except RuntimeError as exc:
        return LowtimeRun([], error=f"lowtime unavailable: {exc}", origin="lowtime run")
    with tempfile.TemporaryDirectory(prefix="eopt-lowtime-") as tmp:
        request = Path(tmp) / "request.json"
        reply = Path(tmp) / "reply.json"
        request.write_text(
            json.dumps(
                {
                    "profile_csv": str(profile_csv),
                    "p_block_w": p_block_w,
                    "unit_time_s": unit_time_s,
                    "num_stages": dag.num_stages,
                    "nodes": [[op.id, op.stage, op.kind] for op in dag.ops],
                    "edges": [list(e) for e in dag.edges],
                    "time_limit_s": time_limit_s,
                    "driver": driver,
                }
            ),
            encoding="utf-8",
        )
        started = time.perf_counter()
        done = subprocess.run(
            [str(python), str(LOWTIME_RUNNER), str(request), str(reply)],
            capture_output=True,
            text=True,
            check=False,
        )
        total = time.perf_counter() - started
        if done.returncode != 0 or not reply.exists():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])
            return LowtimeRun([], total_s=total, error=tail or "no output", origin="lowtime run")
        data = json.loads(reply.read_text(encoding="utf-8"))
    ids = [op.id for op in dag.ops]
    plans = []
    for it in data["iterations"]:
        freqs = dict(zip(ids, it["knobs"], strict=True))
        plans.append(
            LowtimePlan(
                it["iteration"],
                it["pred_makespan_s"],
                it["pred_energy_j"],
                freqs,
                evaluator.evaluate(freqs),
            )
        )
    return LowtimeRun(
        plans,
        fit_s=data["fit_s"],
        solve_s=data["solve_s"],
        total_s=total,
        truncated=data["truncated"],
        error=data.get("error", ""),
        origin=f"lowtime {data['version']} run here",
    )


# --------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------


@dataclass
class Verdicts:
    """PASS/FAIL lines of a benchmark; ``--strict`` turns any FAIL into exit status 1."""

    lines: list[tuple[bool, str]] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> bool:
        """Record and print one verdict line."""
        self.lines.append((ok, what))
        print(f"{'PASS' if ok else 'FAIL'}  {what}", flush=True)
        return ok

    def exit_status(self, strict: bool) -> int:
        """0, or 1 when ``strict`` and any verdict failed (never in a smoke run)."""
        failed = not all(ok for ok, _ in self.lines)
        return 1 if strict and failed and not is_smoke() else 0

    def summary(self) -> None:
        """Print the count of PASS and FAIL lines."""
        failed = sum(1 for ok, _ in self.lines if not ok)
        print(f"\n{len(self.lines) - failed} PASS, {failed} FAIL")
        for ok, what in self.lines:
            if not ok:
                print(f"  FAIL  {what}")
        if is_smoke():
            print(SMOKE_VERDICTS)


def finish(
    verdicts: Verdicts, args: argparse.Namespace, name: str, payload: Any, started: float
) -> int:
    """A benchmark's last lines: its run time, the verdicts, the results file unless
    ``args.no_save``; returns the exit status (``args.strict``)."""
    print(f"\n{time.perf_counter() - started:.0f} s")
    verdicts.summary()
    if not args.no_save:
        print(f"wrote {write_results(name, payload)}")
    return verdicts.exit_status(args.strict)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str = "") -> None:
    """Print an aligned plain-text table (numbers right-aligned)."""
    body = [[_cell(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    if title:
        print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in body:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def fmt_j(value: float | None) -> str:
    """Energy, J, one decimal; — when absent."""
    return "—" if value is None else f"{value:.1f}"


def fmt_pct(value: float | None, digits: int = 3) -> str:
    """A fraction as a percentage."""
    return "—" if value is None else f"{100 * value:.{digits}f}%"


def lateness(makespan_s: float, deadline_s: float, tol: float = 1e-9) -> str:
    """``none`` or ``+X ms`` when the makespan exceeds the deadline."""
    late = makespan_s - deadline_s
    return "none" if late <= tol * max(1.0, deadline_s) else f"+{1e3 * late:.2f} ms"


def fmt_lookup(plan: LowtimePlan | None, deadline_s: float) -> str:
    """A lowtime lookup plan: ``energy (lateness)``, or ``none``."""
    if plan is None:
        return "none"
    return f"{fmt_j(plan.true.energy_j)} ({lateness(plan.true.makespan_s, deadline_s)})"


def fmt_best(plan: LowtimePlan | None) -> str:
    """A lowtime best plan: ``energy @true makespan``, or ``none``."""
    return "none" if plan is None else f"{fmt_j(plan.true.energy_j)} @{plan.true.makespan_s:.3f}"


def is_late(makespan_s: float, deadline_s: float, tol: float = 1e-9) -> bool:
    """Whether ``makespan_s`` misses ``deadline_s`` (relative tolerance ``tol``)."""
    return makespan_s - deadline_s > tol * max(1.0, deadline_s)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Call ``fn`` and return ``(result, wall seconds)``."""
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def write_results(name: str, payload: Mapping[str, Any]) -> Path:
    """Write ``benchmarks/results/<name>.json`` (machine-readable numbers of a run).

    Raises:
        RuntimeError: in a smoke run, whose numbers are no results.
    """
    if is_smoke():
        raise RuntimeError(f"a smoke run writes no results (benchmarks/results/{name}.json)")
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    stamped = {"solvers_version": SOLVERS_AT_START, **payload}
    path.write_text(json.dumps(stamped, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def solvers_version() -> str:
    """The last git commit touching ``solvers/`` (+ ``dirty`` when it has local edits)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(REPO_DIR), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("log", "-1", "--format=%h %cI", "--", "solvers")
    # Without --no-optional-locks, `git status` may rewrite the index of a tree in use.
    dirty = git("--no-optional-locks", "status", "--porcelain", "--", "solvers")
    return (commit or "unknown") + (" + uncommitted edits" if dirty else "")


# Taken when the benchmark starts: the solvers code a run imports and measures.
SOLVERS_AT_START = solvers_version()


def run_main(main: Callable[[], int]) -> None:
    """Run a benchmark's ``main`` and exit with its status; bad input → one line, status 2."""
    try:
        status = main()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"error: {message}", file=sys.stderr)
        status = 2
    sys.exit(status)


def solvers_available() -> str | None:
    """``None`` when ``solvers`` has the API the benchmarks use, else the reason."""
    try:
        import solvers
    except ImportError as exc:
        return f"cannot import solvers ({exc})"
    missing = [
        n for n in ("Mode", "Task", "Problem", "solve", "frontier") if not hasattr(solvers, n)
    ]
    return f"solvers lacks {', '.join(missing)}" if missing else None


def argument_parser(doc: str, epilog_from: int) -> argparse.ArgumentParser:
    """A script's parser: its docstring's first paragraph as the description, and its
    paragraphs from `epilog_from` on (examples, targets) as the epilog."""
    parts = doc.split("\n\n")
    return argparse.ArgumentParser(
        description=parts[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(parts[epilog_from:]),
    )


def add_report_options(parser: argparse.ArgumentParser, results_name: str) -> None:
    """Add the options every solver benchmark shares: --time-limit, --strict, --no-save."""
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="time_limit (s) passed to solvers.solve (default: the solver's own, 60 s)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when any line FAILs")
    parser.add_argument(
        "--no-save",
        action="store_true",
        help=f"do not write benchmarks/results/{results_name}.json",
    )


# --------------------------------------------------------------------------------------
# Smoke runs: every benchmark's smallest real run, for the test suite
# --------------------------------------------------------------------------------------

SMOKE_HELP = (
    "smoke run: the smallest real run of the same code path (seconds), on the repository's "
    "own data (tests/data or generated inputs); overrides the size options, enforces no "
    "target, saves nothing (implies --no-save), never installs or runs lowtime"
)
SMOKE_VERDICTS = "smoke run: no verdict sets the exit status (its sizes are not the targets')"


@dataclass
class _SmokeState:
    """Whether this process is a smoke run (set once, by :func:`enter_smoke`)."""

    active: bool = False


_SMOKE = _SmokeState()


def add_smoke_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--smoke`` (see :data:`SMOKE_HELP`) to a benchmark's parser."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def enter_smoke(args: argparse.Namespace) -> bool:
    """Make this process a smoke run when ``args.smoke`` is set; return whether it is one.

    From then on :func:`data_dir` is ``tests/data``, :func:`write_results` and
    :func:`lowtime_python` refuse, and :meth:`Verdicts.exit_status` is 0. ``args.no_save``
    and ``args.strict`` (where the script has them) are switched to match.
    """
    if not getattr(args, "smoke", False):
        return False
    _SMOKE.active = True
    if hasattr(args, "no_save"):
        args.no_save = True
    if hasattr(args, "strict"):
        args.strict = False
    print("smoke run: smallest sizes, repository data only, nothing saved", flush=True)
    return True


def is_smoke() -> bool:
    """Whether this process is a smoke run."""
    return _SMOKE.active


def smoke_skip(what: str, why: str) -> None:
    """Say, in a smoke run's output, which part of the real run it leaves out and why."""
    print(f"smoke run: {what} skipped ({why})", flush=True)


def load_nvml_fake() -> Any:
    """The behavioural ``pynvml`` fake of the device tests (``tests/devices/conftest.py``).

    Returns:
        The loaded module: ``FakePynvml``, ``FakeGpu`` and ``FakeTime`` are its classes.

    Raises:
        RuntimeError: when the fake cannot be loaded (it needs pytest, from the test extra).
    """
    import importlib.util

    name = "eopt_benchmarks_nvml_fake"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, NVML_FAKE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{NVML_FAKE}: not found; the NVML fake lives in the test suite")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[name]
        raise RuntimeError(
            f"{NVML_FAKE}: cannot load the NVML fake ({exc}); install the test extra: "
            "pip install -e '.[test]'"
        ) from None
    return module
