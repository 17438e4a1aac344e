"""Run lowtime 0.3.0 on one pipeline DAG, the way Perseus drives it (subprocess side).

Runs ONLY inside ``benchmarks/.venv-lowtime`` (it imports lowtime, never eopt or
solvers). Called by ``_common.run_lowtime``::

    .venv-lowtime/bin/python lowtime_runner.py request.json reply.json

The request holds the profile CSV path, P_block (W), unit time (s), the op nodes
``[id, stage, kind]`` and precedence edges. Two drivers build the model as upstream
does:

- ``example`` (lowtime's ``examples/perseus.py``): per (stage, kind) the cost of each
  measured option becomes effective energy ``E − P_block · quant_time · unit_time``,
  then ``CandidateExecutionOptions`` (Pareto filter, quantize, dedupe);
- ``artifact`` (Perseus's SOSP'24 ``lowtime/scripts/perseus.py``): the Pareto filter
  runs on raw energy first, and the surviving options become effective energy.

Both retry the filter with a 0.95 noise factor when three or fewer options remain and
fit an ``ExponentialModel`` with ``search_strategy="best"``. The reply lists the clock
of every op after every Phillips–Dessouky iteration (iteration 0 = the all-slowest
start), lowtime's own predicted makespan and energy, and the fit and solve times.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections import defaultdict
from typing import Any

import networkx as nx
from lowtime import __version__ as lowtime_version
from lowtime.cost_model import ExponentialModel
from lowtime.graph_utils import add_sink_node, add_source_node
from lowtime.operation import CandidateExecutionOptions, ExecutionOption, Operation, OperationSpec
from lowtime.solver import PhillipsDessouky


def _op_specs(
    profile_csv: str, p_block_w: float, unit_time_s: float, driver: str
) -> dict[Any, Any]:
    rows: dict[tuple[int, str], list[ExecutionOption[int]]] = defaultdict(list)
    with open(profile_csv, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            rows[(int(row["stage"]), row["instruction"])].append(
                ExecutionOption[int](
                    real_time=float(row["time"]),
                    unit_time=unit_time_s,
                    cost=float(row["energy"]),
                    knob=int(float(row["frequency"])),
                )
            )
    specs = {}
    for key, options in rows.items():
        if driver == "example":
            # lowtime's examples/perseus.py: effective energy E − P_block · t first, so
            # the Pareto filter below keeps every clock that saves effective energy.
            _to_effective(options, p_block_w)
        candidates = CandidateExecutionOptions[int](options=options)
        if len(candidates.options) <= 3:
            # Too few options left: a noisy profile; both drivers retry with slack.
            candidates = CandidateExecutionOptions[int](options=options, noise_factor=0.95)
        if driver == "artifact":
            # Perseus's SOSP'24 artifact: Pareto filter on raw energy, then effective.
            _to_effective(candidates.options, p_block_w)
        model = ExponentialModel(candidates, search_strategy="best")
        specs[key] = OperationSpec[int](options=candidates, cost_model=model)
    return specs


def _to_effective(options: list[ExecutionOption[int]], p_block_w: float) -> None:
    for option in options:
        option.cost -= p_block_w * option.quant_time * option.unit_time


def _quant_makespan(dag: nx.DiGraph, order: list[int]) -> int:
    """Longest path in quantized time with the ops' current durations."""
    finish: dict[int, int] = {}
    for node in order:
        op = dag.nodes[node]["op"]
        start = max((finish[p] for p in dag.predecessors(node)), default=0)
        finish[node] = start + op.duration
    return max(finish.values())


def main(request_path: str, reply_path: str) -> None:
    """Fit, solve, and write every iteration's plan to ``reply_path``."""
    with open(request_path, encoding="utf-8") as handle:
        req = json.load(handle)
    p_block, unit, stages = req["p_block_w"], req["unit_time_s"], req["num_stages"]
    limit = req.get("time_limit_s")

    reply: dict[str, Any] = {"version": lowtime_version, "iterations": [], "truncated": False}
    t0 = time.perf_counter()
    try:
        specs = _op_specs(req["profile_csv"], p_block, unit, req.get("driver", "example"))
    except (ValueError, RuntimeError) as exc:
        reply.update(fit_s=time.perf_counter() - t0, solve_s=0.0, error=f"fit failed: {exc}")
        with open(reply_path, "w", encoding="utf-8") as handle:
            json.dump(reply, handle)
        return
    reply["fit_s"] = time.perf_counter() - t0

    dag = nx.DiGraph()
    node_ids = []
    for node_id, stage, kind in req["nodes"]:
        # Ids 0 and 1 are lowtime's dummy source and sink; shift ours past them.
        dag.add_node(node_id + 2, op=Operation[int](spec=specs[(stage, kind)]))
        node_ids.append(node_id + 2)
    dag.add_edges_from((a + 2, b + 2) for a, b in req["edges"])
    add_source_node(dag, 0)
    add_sink_node(dag, 1)
    dag.graph["source_node"] = 0
    dag.graph["sink_node"] = 1
    order = list(nx.topological_sort(dag))
    ops = [dag.nodes[n]["op"] for n in node_ids]

    def record(iteration: int) -> None:
        quant = _quant_makespan(dag, order)
        cost = sum(op.get_cost() for op in ops)
        reply["iterations"].append(
            {
                "iteration": iteration,
                "pred_makespan_s": quant * unit,
                # Perseus's total: model cost + S · P_block · T (predicted).
                "pred_energy_j": cost + stages * p_block * quant * unit,
                "knobs": [op.assigned_knob for op in ops],
            }
        )

    # Iteration 0: the all-slowest start lowtime begins from.
    record(0)
    t1 = time.perf_counter()
    solve_time = 0.0
    try:
        solver = PhillipsDessouky(dag)
        for result in solver.run():
            solve_time = time.perf_counter() - t1
            record(result.iteration)
            if limit is not None and solve_time > limit:
                reply["truncated"] = True
                break
    except Exception as exc:  # report any lowtime failure as a result
        reply["error"] = f"{type(exc).__name__}: {exc}"
    # Recording costs a little per iteration; solve_s includes it (a small overestimate).
    reply["solve_s"] = time.perf_counter() - t1
    with open(reply_path, "w", encoding="utf-8") as handle:
        json.dump(reply, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
