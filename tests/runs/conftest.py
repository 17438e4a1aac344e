"""Shared pieces of the distributed-sweep tests: the acceptance grid, a fast repeat policy,
the serial reference library, and what "the same numbers" means."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from eopt.model.library import cell_key, read_library
from eopt.model.signature import Signature
from eopt.runs.gpus import GpuSpec
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import Grid, Kernel, SimKernel, parse_kernel, sweep

#: The acceptance grid's clocks (MHz) and seed.
CLOCKS = "1410,1305,1200,1095,1005,900"
SEED = 3
MODEL = "A100-SXM4-40GB"

# Short windows keep the library-level tests fast; the CLI tests use the CLI's defaults.
FAST = RepeatPolicy(
    warmup=1, min_runs=3, min_time_s=0.0, min_window_s=0.2, settle_s=0.1, n_boot=100, seed=SEED
)


def numbers(sig: Signature) -> tuple[Any, ...]:
    """What a cell measured: everything that must not depend on where or when.

    Left out are only ``devices`` and ``meta.measured_on`` (which GPU measured it) and
    the wall-clock ``started_at`` / ``finished_at``; the per-window runs are kept, so two
    cells agree only if every window agreed.
    """
    return (
        sig.time,
        sig.energy,
        sig.static_power,
        sig.dynamic_energy,
        sig.var_time,
        sig.var_energy,
        tuple(sig.meta["runs"]["time_s"]),
        tuple(sig.meta["runs"]["energy_j"]),
        sig.meta["static"]["power_w"],
        sig.meta["n"],
    )


def _by_cell(signatures: Iterable[Signature]) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    for sig in signatures:
        key = cell_key(sig)
        assert key not in out, f"cell {key} appears twice"
        out[key] = numbers(sig)
    return out


def gemm_kernel(**fields: Any) -> SimKernel:
    kernel = parse_kernel("sim:gemm")
    assert isinstance(kernel, SimKernel)
    return kernel if not fields else SimKernel(**{**kernel.__dict__, **fields})


@pytest.fixture(scope="session")
def by_cell() -> Callable[[Iterable[Signature]], dict[str, tuple[Any, ...]]]:
    """Cell key → :func:`numbers`; fails on a cell met twice (nothing may count twice)."""
    return _by_cell


@pytest.fixture(scope="session")
def fast() -> RepeatPolicy:
    """:data:`FAST`."""
    return FAST


@pytest.fixture(scope="session")
def gemm() -> Callable[..., SimKernel]:
    """``sim:gemm`` with all its implementations (fields replaced as given)."""
    return gemm_kernel


@pytest.fixture(scope="session")
def sim_spec() -> GpuSpec:
    return GpuSpec("sim", 0, MODEL, SEED)


@pytest.fixture(scope="session")
def acceptance_grid(sim_spec: GpuSpec) -> Callable[[Kernel], Grid]:
    device = sim_spec.open()
    return lambda kernel: Grid.build(kernel, device, clocks=CLOCKS)


@pytest.fixture(scope="session")
def serial_library(
    tmp_path_factory: pytest.TempPathFactory, sim_spec: GpuSpec, acceptance_grid: Any
) -> Path:
    """The acceptance grid swept serially on one simulated GPU (the reference)."""
    path = tmp_path_factory.mktemp("serial") / "serial.jsonl"
    kernel = gemm_kernel()
    sweep(kernel, acceptance_grid(kernel), sim_spec, path, policy=FAST)
    assert len(read_library(path)) == 18
    return path
