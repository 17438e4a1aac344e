"""A simulated node: several simulated GPUs sharing an interconnect and a power budget.

The GPUs run on one :class:`~eopt.sim.gpu.VirtualClock`. Whenever the running set of
any of them changes, the node re-solves all of them together:

* ``interconnect``: collectives (kernels that move their bytes over the GPU links) on all
  GPUs share a fabric of ``fabric_links`` links' bandwidth; when their summed demand
  exceeds it, every collective's link traffic stretches by ``demand / capacity``.
* ``node_power``: when the GPUs' summed power exceeds ``power_budget_w``, each busy GPU's
  power limit is lowered in proportion to its dynamic power until the sum fits (never
  below the GPU's lowest settable limit), so every busy GPU throttles.

Example::

    node = SimulatedNode("A100-SXM4-40GB", gpus=4, power_budget_w=1000)
    for gpu in node:
        gpu.enqueue("gemm")
    node.synchronize()
"""

from __future__ import annotations

from collections.abc import Iterator

from eopt.sim.gpu import SimulatedGPU, VirtualClock
from eopt.sim.mechanisms import (
    MechanismParams,
    Mechanisms,
    NoiseModel,
    fabric_stretch,
)

__all__ = ["SimulatedNode"]

_BUDGET_ROUNDS = 8
_BUDGET_TOLERANCE = 1e-3  # relative: the proportional cut converges from above


class SimulatedNode:
    """Several :class:`SimulatedGPU` on one clock, one fabric and one power budget.

    Args:
        model: Profile name of every GPU.
        gpus: Number of GPUs (indices 0…gpus−1).
        seed: Seed; GPU ``i`` draws from ``(seed, i)``.
        mechanisms: Mechanisms on (every GPU and the node), as for :class:`SimulatedGPU`.
        params: Mechanism parameters; its ``fabric_links`` sets the fabric's capacity in
            GPU links (default: half the GPUs, a 2:1 oversubscribed fabric).
        noise_model: Noise beyond the profile's jitter.
        power_budget_w: The node's power budget over all GPUs, in W (None: no budget).
        noise: Launch jitter and sensor noise on.
        record_trace: Keep every GPU's exact power trace.

    Raises:
        ValueError: for fewer than one GPU or a non-positive budget.
    """

    def __init__(
        self,
        model: str = "A100-SXM4-40GB",
        gpus: int = 2,
        *,
        seed: int = 0,
        mechanisms: Mechanisms | str | None = None,
        params: MechanismParams | None = None,
        noise_model: NoiseModel | None = None,
        power_budget_w: float | None = None,
        noise: bool = True,
        record_trace: bool = False,
    ) -> None:
        if not isinstance(gpus, int) or gpus < 1:
            raise ValueError(f"SimulatedNode(gpus={gpus!r}): give a whole number of GPUs ≥ 1")
        if power_budget_w is not None and not power_budget_w > 0:
            raise ValueError(
                f"SimulatedNode(power_budget_w={power_budget_w!r}): the budget must be a "
                "positive number of watts, or None for no budget"
            )
        self.mechanisms = Mechanisms.parse(mechanisms)
        self.params = params if params is not None else MechanismParams()
        self.power_budget_w = power_budget_w
        self.clock = VirtualClock()
        self.gpus: list[SimulatedGPU] = []
        for i in range(gpus):
            gpu = SimulatedGPU(
                model,
                index=i,
                clock=self.clock,
                seed=seed,
                noise=noise,
                record_trace=record_trace,
                mechanisms=self.mechanisms,
                params=self.params,
                noise_model=noise_model,
            )
            gpu._node = self  # the node re-solves its GPUs together
            self.gpus.append(gpu)
        links = self.params.fabric_links
        #: The fabric's capacity, in GPU links.
        self.fabric_links: float = links if links is not None else max(gpus / 2.0, 1.0)

    def __len__(self) -> int:
        return len(self.gpus)

    def __iter__(self) -> Iterator[SimulatedGPU]:
        return iter(self.gpus)

    def __getitem__(self, index: int) -> SimulatedGPU:
        return self.gpus[index]

    def synchronize(self) -> None:
        """Advance virtual time until every GPU's queued kernels have finished."""
        for gpu in self.gpus:
            gpu.synchronize()

    def true_power_w(self) -> float:
        """The node's exact power right now (all GPUs), in W."""
        return sum(gpu.true_power_w() for gpu in self.gpus)

    def true_energy_j(self) -> float:
        """Exact energy all GPUs drew since the node was created, in J."""
        return sum(gpu.true_energy_j() for gpu in self.gpus)

    def fabric_stretch(self) -> float:
        """How much the running collectives' link traffic is stretched now (≥ 1)."""
        if not self.mechanisms.interconnect:
            return 1.0
        demands = [d for gpu in self.gpus for d in gpu._link_demands()]
        return fabric_stretch(demands, self.fabric_links)

    def _resolve_all(self) -> None:
        """Re-solve every GPU's rates together (called when a running set changes)."""
        stretch = self.fabric_stretch()
        for gpu in self.gpus:
            gpu._resolve(None, stretch)
        budget = self.power_budget_w
        if budget is None or not self.mechanisms.node_power:
            return
        limits: dict[int, float] = {}
        for _ in range(_BUDGET_ROUNDS):
            powers = [gpu.true_power_w() for gpu in self.gpus]
            excess = sum(powers) - budget
            if excess <= budget * _BUDGET_TOLERANCE:
                return
            busy = [i for i, gpu in enumerate(self.gpus) if gpu._busy()]
            dynamic = {i: max(powers[i] - self.gpus[i].static_power_w(), 0.0) for i in busy}
            total_dynamic = sum(dynamic.values())
            if total_dynamic <= 0.0:
                return  # idle draw alone is over the budget: nothing to throttle
            for i in busy:
                gpu = self.gpus[i]
                floor = gpu.power_limit_range_w()[0]
                target = powers[i] - excess * dynamic[i] / total_dynamic
                limits[i] = max(floor, min(limits.get(i, gpu._limit_now_w()), target))
                gpu._resolve(limits[i], stretch)
