"""A node of a Ray cluster (2 nodes × 2 simulated GPUs) removed in the middle of a sweep:
its points are measured again elsewhere; no cell is lost, none is counted twice."""

from __future__ import annotations

from typing import Any

from eopt.model.library import read_library
from eopt.runs.ray_runtime import import_ray
from eopt.runs.ray_sweep import ray_sweep


def test_a_node_removed_mid_sweep_loses_nothing_and_counts_nothing_twice(
    tmp_path, gemm, fast, sim_spec, acceptance_grid, serial_library, by_cell
):
    ray = import_ray(local=True)
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False},
    )
    try:
        nodes = [cluster.add_node(num_cpus=1, num_gpus=2) for _ in range(2)]
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes()
        # Cells that take wall time (the numbers stay the simulator's), so that points
        # are in flight on the node when it goes.
        kernel = gemm(wall_s_per_sim_s=0.5)
        removed: list[int] = []

        def remove_a_node(done: int, total: int, rates: Any) -> None:
            if done >= 3 and not removed:
                cluster.remove_node(nodes[1])
                removed.append(done)

        warnings: list[str] = []
        lib = tmp_path / "lib.jsonl"
        result = ray_sweep(
            kernel, acceptance_grid(kernel), sim_spec.open(), sim_spec, lib, address=None,
            policy=fast, progress=remove_a_node, warn=warnings.append,
        )  # fmt: skip
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert removed and removed[0] < 18
    died = [w for w in warnings if "died" in w]
    assert died, f"no point was in flight on the removed node: {warnings}"
    assert result.failed == () and result.duplicates == 0
    cells = read_library(lib)
    assert by_cell(cells) == by_cell(read_library(serial_library))  # 0 lost, 0 twice
    # After the removal the surviving node measured the rest; the removed node can only
    # have delivered what it had already finished (at most one point per GPU: results on
    # their way to the driver when the node went).
    after = [s.meta["measured_on"]["ray_node"] for s in cells[removed[0] :]]
    survivor = after[-1]
    per_point = sum(1 for s in cells if s.op_point == cells[0].op_point)
    late = [node for node in after if node != survivor]
    assert len(late) <= 2 * per_point, after
