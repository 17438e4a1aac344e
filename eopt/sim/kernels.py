"""The simulated GPU's kernel catalog: what each kernel computes and moves.

A kernel maps a workload θ (sizes) to FLOPs and bytes; an implementation κ sets how close
it gets to the GPU's peaks and how busy it keeps the chip. Together with a GPU profile
this gives the :class:`~eopt.sim.physics.KernelDemand` the physics runs.

Workloads are bounded: sizes must be finite and non-negative, and one invocation may run
at most :data:`MAX_INVOCATION_S` of simulated time at the GPU's lowest clock, so the
simulator (which steps through virtual time) always finishes promptly.

Units: FLOPs are floating-point operations (a multiply-add is 2), bytes are bytes moved
to/from DRAM (or over the GPU link for ``allreduce``), sizes are element counts,
``dtype_bytes`` is bytes per element.

Kernels: ``gemm``, ``attention``, ``layernorm``, ``allreduce``, ``memcpy``,
``transformer_fwd`` / ``transformer_bwd`` (pipeline stages of transformer layers), and
``perseus_{gpt3,bloom}_{fwd,bwd}``: the per-stage forward/backward of the Perseus (SOSP'24)
8-stage pipelines, whose FLOPs, bytes and activities are fitted to the measured A100
profiles (``profiles/perseus-stages.yaml``, written by ``benchmarks/sim_calibration.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from eopt.sim.physics import KernelDemand
from eopt.sim.profiles import GpuProfile

__all__ = [
    "MAX_INVOCATION_S",
    "Implementation",
    "SimKernel",
    "get_kernel",
    "kernel_names",
]

_CALIBRATION_FILE = "perseus-stages.yaml"

#: The longest one invocation of a simulated kernel may run, in s of simulated time, at the
#: GPU's lowest SM clock. The simulator steps through virtual time (every 10 ms while a
#: kernel runs), so this bounds the real time one invocation costs to well under a second;
#: the largest default workload of the catalog takes about 10 s at the lowest clock.
MAX_INVOCATION_S = 60.0

# Vector (non-tensor-core) arithmetic runs at about 1/16 of the dense tensor peak on
# A100/H100-class GPUs; element-wise kernels express their efficiency against that.
_VECTOR_FRACTION = 1.0 / 16.0


@dataclass(frozen=True)
class Implementation:
    """One implementation κ of a kernel.

    Attributes:
        name: The implementation's name (e.g. ``cublas``).
        compute_eff: Fraction of the profile's peak FLOP/s it reaches (tensor peak, or
            vector peak for kernels marked ``vector``).
        memory_eff: Fraction of the peak DRAM (or link) bandwidth it reaches.
        activity: Dynamic core activity while computing (power scale, about 0–1.2).
        mem_activity: Memory-system activity while moving data (power scale).
        overlap_p: How well compute and memory overlap (p-norm exponent, ≥ 1).
        flops_factor: Extra arithmetic relative to the kernel's nominal FLOPs.
        bytes_factor: Extra traffic relative to the kernel's nominal bytes.
        launch_s: Fixed launch/tail overhead, in s.
    """

    name: str
    compute_eff: float
    memory_eff: float
    activity: float
    mem_activity: float = 0.8
    overlap_p: float = 3.0
    flops_factor: float = 1.0
    bytes_factor: float = 1.0
    launch_s: float = 5e-6


CostFn = Callable[[Mapping[str, float], Implementation], tuple[float, float]]


@dataclass(frozen=True)
class SimKernel:
    """A kernel of the catalog.

    Attributes:
        name: Catalog name (used as ``sim:<name>`` on the command line).
        description: One line, with the workload's meaning and units.
        default_workload: θ used when none is given; also lists the accepted keys.
        implementations: κ name → :class:`Implementation`, the first being the default.
        cost: θ, κ → (FLOPs, bytes).
        vector: Compute is vector (not tensor-core) arithmetic.
        over_link: Bytes go over the GPU-to-GPU link, not DRAM.
        tuned: For calibrated kernels: θ → (effective FLOPs, effective bytes, κ with the
            fitted activities), at 100 % efficiency; the table varies with θ (the stage).
        notes: Provenance (e.g. the measured data a calibrated kernel was fitted to).
    """

    name: str
    description: str
    default_workload: Mapping[str, float]
    implementations: Mapping[str, Implementation]
    cost: CostFn
    vector: bool = False
    over_link: bool = False
    tuned: Callable[[Mapping[str, float]], tuple[float, float, Implementation]] | None = None
    notes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def default_impl(self) -> str:
        """The first (reference) implementation's name."""
        return next(iter(self.implementations))

    def workload(self, workload: Mapping[str, Any] | None = None) -> dict[str, float]:
        """θ completed with defaults and checked.

        The time an invocation of θ takes is bounded later, where the GPU is known
        (:meth:`demand`).

        Raises:
            ValueError: on unknown keys, or sizes that are not finite non-negative numbers.
        """
        merged: dict[str, float] = dict(self.default_workload)
        for key, value in (workload or {}).items():
            if key not in self.default_workload:
                raise ValueError(
                    f"sim kernel {self.name!r}: unknown workload key {key!r}; "
                    f"expected some of {sorted(self.default_workload)}"
                )
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"sim kernel {self.name!r}: workload {key}={value!r} must be a finite "
                    "non-negative number"
                )
            merged[key] = float(value)
        return merged

    def implementation(self, impl: str | None) -> Implementation:
        """The implementation called ``impl`` (the default one for ``None``).

        Raises:
            ValueError: naming the available implementations.
        """
        name = impl or self.default_impl
        try:
            return self.implementations[name]
        except KeyError:
            raise ValueError(
                f"sim kernel {self.name!r} has no implementation {name!r}; "
                f"available: {', '.join(self.implementations)}"
            ) from None

    def flops_and_bytes(
        self, impl: str | None = None, workload: Mapping[str, Any] | None = None
    ) -> tuple[float, float]:
        """FLOPs and bytes of one invocation of ``impl`` on θ (with κ's overheads)."""
        spec = self.implementation(impl)
        flops, nbytes = self.cost(self.workload(workload), spec)
        return flops * spec.flops_factor, nbytes * spec.bytes_factor

    def memory_efficiency(
        self, impl: str | None = None, workload: Mapping[str, Any] | None = None
    ) -> float:
        """Share of the peak DRAM (or link) bandwidth one invocation draws while moving
        data: what it leaves to kernels co-running with it (0–1)."""
        spec = self.implementation(impl)
        if self.tuned is not None:
            spec = self.tuned(self.workload(workload))[2]
        return spec.memory_eff

    def demand(
        self,
        profile: GpuProfile,
        impl: str | None = None,
        workload: Mapping[str, Any] | None = None,
    ) -> KernelDemand:
        """What one invocation asks of a GPU of ``profile``.

        Raises:
            ValueError: for a bad workload (:meth:`workload`), or one whose invocation
                would run longer than :data:`MAX_INVOCATION_S` at the lowest clock.
        """
        spec = self.implementation(impl)
        theta = self.workload(workload)
        if self.tuned is not None:
            flops, nbytes, spec = self.tuned(theta)
        else:
            flops, nbytes = self.flops_and_bytes(impl, theta)
        peak = profile.peak_flops * (_VECTOR_FRACTION if self.vector else 1.0)
        bandwidth = (
            profile.link_bandwidth_bytes_per_s
            if self.over_link
            else profile.memory_bandwidth_bytes_per_s
        )
        demand = KernelDemand(
            compute_s=flops / (peak * spec.compute_eff) if flops else 0.0,
            memory_s=nbytes / (bandwidth * spec.memory_eff) if nbytes else 0.0,
            activity=spec.activity,
            mem_activity=spec.mem_activity,
            overlap_p=spec.overlap_p,
            launch_s=spec.launch_s,
        )
        # An upper bound of the run time at the lowest clock (a p-norm never exceeds the
        # sum); written so that NaN (e.g. inf·0 from huge sizes) fails the test too.
        slowest_s = (
            demand.compute_s * profile.max_sm_clock_mhz / profile.min_sm_clock_mhz
            + demand.memory_s
            + demand.launch_s
        )
        if not slowest_s <= MAX_INVOCATION_S:
            given = {k: v for k, v in theta.items() if v != self.default_workload.get(k)}
            sizes = ", ".join(f"{k}={v:g}" for k, v in given.items()) or "the default sizes"
            raise ValueError(
                f"sim kernel {self.name!r}, implementation {spec.name!r}: with {sizes} one "
                f"invocation would run {slowest_s:.3g} s of simulated time at "
                f"{profile.min_sm_clock_mhz:g} MHz on {profile.model}, more than the "
                f"simulator's limit of {MAX_INVOCATION_S:g} s; use smaller sizes"
            )
        return demand


def _impls(*items: Implementation) -> dict[str, Implementation]:
    return {i.name: i for i in items}


def _gemm_cost(w: Mapping[str, float], _: Implementation) -> tuple[float, float]:
    m, n, k, b = w["m"], w["n"], w["k"], w["dtype_bytes"]
    return 2.0 * m * n * k, (m * k + k * n + m * n) * b


def _attention_cost(w: Mapping[str, float], impl: Implementation) -> tuple[float, float]:
    bh = w["batch"] * w["heads"]
    s, d, b = w["seq"], w["head_dim"], w["dtype_bytes"]
    flops = 4.0 * bh * s * s * d
    nbytes = 4.0 * bh * s * d * b  # Q, K, V in, O out
    if impl.name == "naive":
        # Materialises the s×s score matrix: written and read back twice (S, then P).
        nbytes += 4.0 * bh * s * s * b
    return flops, nbytes


def _layernorm_cost(w: Mapping[str, float], _: Implementation) -> tuple[float, float]:
    elements = w["rows"] * w["hidden"]
    return 8.0 * elements, (2.0 * elements + 2.0 * w["hidden"]) * w["dtype_bytes"]


def _allreduce_cost(w: Mapping[str, float], _: Implementation) -> tuple[float, float]:
    n = max(w["world_size"], 1.0)
    share = (n - 1.0) / n
    # Ring all-reduce: each GPU sends and receives 2(n-1)/n of the buffer.
    return share * w["bytes"] / 2.0, 2.0 * share * w["bytes"]


def _memcpy_cost(w: Mapping[str, float], _: Implementation) -> tuple[float, float]:
    return 0.0, 2.0 * w["bytes"]  # read + write


def _transformer_flops(w: Mapping[str, float]) -> float:
    b, s, h, layers = w["batch"], w["seq"], w["hidden"], w["layers"]
    # Megatron-LM's count for one forward pass: 24·b·s·h²·(1 + s/(6h)) per layer.
    return 24.0 * b * s * h * h * layers * (1.0 + s / (6.0 * h))


def _transformer_bytes(w: Mapping[str, float]) -> float:
    b, s, h, layers = w["batch"], w["seq"], w["hidden"], w["layers"]
    weights = 12.0 * h * h * w["dtype_bytes"]
    activations = 34.0 * b * s * h * w["dtype_bytes"]
    return layers * (weights + activations)


def _transformer_fwd_cost(w: Mapping[str, float], _: Implementation) -> tuple[float, float]:
    return _transformer_flops(w), _transformer_bytes(w)


def _transformer_bwd_cost(w: Mapping[str, float], _: Implementation) -> tuple[float, float]:
    return 2.0 * _transformer_flops(w), 2.0 * _transformer_bytes(w)


_TRANSFORMER_WORKLOAD = {"batch": 1.0, "seq": 2048.0, "hidden": 12288.0, "layers": 12.0}
_TRANSFORMER_IMPLS = _impls(
    Implementation("megatron", 0.55, 0.7, activity=0.95, mem_activity=0.6, overlap_p=1.6),
    Implementation("eager", 0.42, 0.55, activity=0.85, mem_activity=0.7, overlap_p=1.3),
)

_BUILTIN: dict[str, SimKernel] = {
    k.name: k
    for k in (
        SimKernel(
            "gemm",
            "Dense matrix multiply C[m,n] = A[m,k]·B[k,n]; sizes in elements.",
            {"m": 8192.0, "n": 8192.0, "k": 8192.0, "dtype_bytes": 2.0},
            _impls(
                Implementation("cublas", 0.80, 0.85, activity=0.90, overlap_p=4.0),
                Implementation("cutlass", 0.74, 0.80, activity=0.86, overlap_p=4.0),
                # No tensor cores and poor data reuse.
                Implementation("naive", 0.05, 0.45, activity=0.55, overlap_p=2.0, bytes_factor=8.0),
            ),
            _gemm_cost,
        ),
        SimKernel(
            "attention",
            "Attention forward over batch×heads sequences of seq tokens, head_dim wide.",
            {"batch": 8.0, "heads": 32.0, "seq": 4096.0, "head_dim": 128.0, "dtype_bytes": 2.0},
            _impls(
                Implementation("flash", 0.62, 0.80, activity=0.92, overlap_p=4.0),
                Implementation("sdpa", 0.50, 0.75, activity=0.85, overlap_p=3.0),
                Implementation("naive", 0.35, 0.70, activity=0.70, overlap_p=1.5),
            ),
            _attention_cost,
        ),
        SimKernel(
            "layernorm",
            "LayerNorm over rows×hidden elements (memory bound).",
            {"rows": 16384.0, "hidden": 8192.0, "dtype_bytes": 2.0},
            _impls(
                Implementation("apex", 0.60, 0.85, activity=0.35, mem_activity=1.0),
                Implementation("triton", 0.55, 0.80, activity=0.35, mem_activity=1.0),
                Implementation(
                    "naive", 0.30, 0.60, activity=0.30, mem_activity=0.9, bytes_factor=3.0
                ),
            ),
            _layernorm_cost,
            vector=True,
        ),
        SimKernel(
            "allreduce",
            "All-reduce of a buffer of `bytes` bytes across world_size GPUs over the links.",
            {"bytes": 268435456.0, "world_size": 8.0},
            _impls(
                Implementation("nccl_ring", 0.30, 0.85, activity=0.20, mem_activity=0.5),
                Implementation("nccl_tree", 0.30, 0.75, activity=0.20, mem_activity=0.5),
                Implementation("naive", 0.10, 0.40, activity=0.25, mem_activity=0.5),
            ),
            _allreduce_cost,
            vector=True,
            over_link=True,
        ),
        SimKernel(
            "memcpy",
            "Device-to-device copy of `bytes` bytes.",
            {"bytes": 1073741824.0},
            _impls(
                Implementation("cuda_memcpy", 1.0, 0.90, activity=0.10, mem_activity=1.0),
                Implementation("copy_kernel", 1.0, 0.82, activity=0.20, mem_activity=1.0),
                Implementation("naive", 1.0, 0.50, activity=0.25, mem_activity=0.9),
            ),
            _memcpy_cost,
        ),
        SimKernel(
            "transformer_fwd",
            "Forward of `layers` transformer layers (batch × seq tokens, hidden wide).",
            {**_TRANSFORMER_WORKLOAD, "dtype_bytes": 2.0},
            _TRANSFORMER_IMPLS,
            _transformer_fwd_cost,
        ),
        SimKernel(
            "transformer_bwd",
            "Backward of `layers` transformer layers (batch × seq tokens, hidden wide).",
            {**_TRANSFORMER_WORKLOAD, "dtype_bytes": 2.0},
            _TRANSFORMER_IMPLS,
            _transformer_bwd_cost,
        ),
    )
}


def _stage_range(key: Any, where: str) -> range:
    text = str(key)
    try:
        if "-" in text:
            lo, hi = (int(part) for part in text.split("-", 1))
            return range(lo, hi + 1)
        return range(int(text), int(text) + 1)
    except ValueError:
        raise ValueError(f"{where}: stage key {key!r} is not N or N-M") from None


def _calibrated_kernel(name: str, data: Mapping[str, Any], where: str) -> SimKernel:
    stages: dict[int, tuple[float, float, Implementation]] = {}
    for key, entry in dict(data["stages"]).items():
        spec = Implementation(
            "megatron",
            compute_eff=1.0,
            memory_eff=1.0,
            activity=float(entry["activity"]),
            mem_activity=float(entry["mem_activity"]),
            overlap_p=float(entry["overlap_p"]),
            launch_s=0.0,
        )
        for stage in _stage_range(key, f"{where}: {name}"):
            stages[stage] = (float(entry["flops"]), float(entry["bytes"]), spec)
    last = max(stages)

    def by_stage(w: Mapping[str, float]) -> tuple[float, float, Implementation]:
        stage = int(w["stage"])
        if stage not in stages:
            raise ValueError(f"sim kernel {name!r}: stage must be 0..{last}, got {stage}")
        return stages[stage]

    return SimKernel(
        name,
        str(data.get("description", f"Perseus pipeline stage {name}; workload: stage index.")),
        {"stage": 0.0},
        {"megatron": stages[0][2]},
        lambda w, _impl: by_stage(w)[:2],
        tuned=by_stage,
        notes={"source": str(data.get("source", ""))},
    )


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, SimKernel]:
    catalog = dict(_BUILTIN)
    path = resources.files("eopt.sim").joinpath("data", _CALIBRATION_FILE)
    if path.is_file():
        where = f"profiles/{_CALIBRATION_FILE}"
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        try:
            for name, entry in dict(data.get("kernels") or {}).items():
                catalog[str(name)] = _calibrated_kernel(str(name), entry, where)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: malformed kernel entry ({exc})") from exc
    return catalog


def kernel_names() -> list[str]:
    """Names of all kernels in the catalog."""
    return list(_catalog())


def get_kernel(name: str) -> SimKernel:
    """The catalog kernel called ``name`` (a leading ``sim:`` is accepted).

    Raises:
        ValueError: naming the available kernels.
    """
    key = name.removeprefix("sim:")
    try:
        return _catalog()[key]
    except KeyError:
        raise ValueError(
            f"unknown simulated kernel {name!r}; available: {', '.join(kernel_names())}"
        ) from None
