"""Back-to-back repeats on the simulated GPU, and the spread figures of any repeats.

The Kareus A100 logs (``data/dvfs/kareus_attention_overlap``) give, per configuration of
an attention kernel, three repeats measured back to back, each a mean over many
iterations. :func:`repeat_figures` reduces such a table (real or simulated) to the
figures the simulator's noise is judged by; :func:`simulate_repeats` runs the same
protocol on a :class:`~eopt.sim.gpu.SimulatedGPU`; :func:`reference_figures` reads the
real figures kept in ``eopt/sim/data/kareus-a100-repeats.yaml``.

Assumptions:
    The logs do not say how long a repeat lasts or how long the GPU idles between
    configurations. The protocol here takes a repeat of ``repeat_s`` (one second, ten
    power-sensor periods: the shortest window a 100 ms sensor resolves) and a
    configuration switch of ``switch_s`` idle (kernels rebuilt for the next one).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import yaml

__all__ = [
    "ATTENTION_CONFIGS",
    "RepeatFigures",
    "reference_figures",
    "repeat_figures",
    "simulate_repeats",
]

#: Attention workloads of the simulated configurations: 3–12 ms per launch on the
#: A100, the range of the Kareus iterations (2.7–12.8 ms).
ATTENTION_CONFIGS: tuple[dict[str, float], ...] = tuple(
    {"batch": 4.0, "heads": 32.0, "seq": seq} for seq in (3072.0, 4096.0, 5120.0, 6144.0)
)

_REFERENCE = "kareus-a100-repeats.yaml"


@dataclass(frozen=True)
class RepeatFigures:
    """Spread of repeated measurements, over configurations.

    Attributes:
        configs: Configurations (rows) the figures summarise.
        energy_cv: Median over configurations of the repeats' energy CV (SD / mean).
        time_cv: Median over configurations of the repeats' time CV.
        first_slowest: Share of configurations whose repeat 0 took the longest.
        first_energy_offset: Median relative energy of repeat 0 against the mean of the
            later repeats (negative: repeat 0 drew less).
    """

    configs: int
    energy_cv: float
    time_cv: float
    first_slowest: float
    first_energy_offset: float

    def as_dict(self) -> dict[str, float]:
        """The figures as plain numbers (a YAML or JSON record)."""
        return {
            "configs": self.configs,
            "energy_cv": self.energy_cv,
            "time_cv": self.time_cv,
            "first_slowest": self.first_slowest,
            "first_energy_offset": self.first_energy_offset,
        }


def repeat_figures(energy_j: Any, time_s: Any) -> RepeatFigures:
    """Figures of a table of repeats.

    Args:
        energy_j: Energy per iteration, in J: one row per configuration, one column per
            repeat in the order measured (at least two).
        time_s: Time per iteration, in s, the same shape.

    Raises:
        ValueError: the shapes differ or fewer than two repeats are given.
    """
    e = np.asarray(energy_j, dtype=float)
    t = np.asarray(time_s, dtype=float)
    if e.shape != t.shape or e.ndim != 2 or e.shape[1] < 2 or e.shape[0] < 1:
        raise ValueError(
            f"repeats need matching (configurations × ≥2 repeats) tables, got energy "
            f"{e.shape} and time {t.shape}"
        )
    cv_e = e.std(axis=1, ddof=1) / e.mean(axis=1)
    cv_t = t.std(axis=1, ddof=1) / t.mean(axis=1)
    return RepeatFigures(
        configs=int(e.shape[0]),
        energy_cv=float(np.median(cv_e)),
        time_cv=float(np.median(cv_t)),
        first_slowest=float(np.mean(np.argmax(t, axis=1) == 0)),
        first_energy_offset=float(np.median(e[:, 0] / e[:, 1:].mean(axis=1) - 1.0)),
    )


def simulate_repeats(
    sm_clock_mhz: float | None,
    seed: int,
    rounds: int = 3,
    repeats: int = 3,
    repeat_s: float = 1.0,
    switch_s: float = 3.0,
    model: str = "A100-SXM4-40GB",
) -> tuple[np.ndarray, np.ndarray]:
    """Run the Kareus-style protocol on a simulated GPU with its default noise.

    Each of ``rounds`` passes over :data:`ATTENTION_CONFIGS` idles ``switch_s``, then
    measures ``repeats`` back-to-back repeats of the configuration, each as many
    launches as fill ``repeat_s``. Only the noise mechanism is on (the attention
    kernel runs alone, so the interaction mechanisms would not act).

    Args:
        sm_clock_mhz: Locked SM clock, in MHz; None: the default (unlocked) clock.
        seed: Seed of the GPU's noise.
        rounds: Passes over the configurations.
        repeats: Repeats per configuration.
        repeat_s: Length of a repeat, in s.
        switch_s: Idle between configurations, in s.
        model: Simulated GPU profile.

    Returns:
        Energy per iteration (J) and time per iteration (s), one row per configuration
        visited, one column per repeat.
    """
    from eopt.model.operating_point import OperatingPoint
    from eopt.sim.gpu import SimulatedGPU

    gpu = SimulatedGPU(model, seed=seed, mechanisms="noise")
    if sm_clock_mhz is not None:
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=sm_clock_mhz))
    energy, time = [], []
    for _ in range(rounds):
        for workload in ATTENTION_CONFIGS:
            gpu.idle(switch_s)
            row_e, row_t = [], []
            for _ in range(repeats):
                e0, t0, n = gpu.true_energy_j(), gpu.clock.now(), 0
                while gpu.clock.now() - t0 < repeat_s:
                    gpu.launch("attention", "flash", workload)
                    n += 1
                row_e.append((gpu.true_energy_j() - e0) / n)
                row_t.append((gpu.clock.now() - t0) / n)
            energy.append(row_e)
            time.append(row_t)
    return np.array(energy), np.array(time)


def reference_figures() -> dict[str, RepeatFigures]:
    """The Kareus A100 figures kept in the package, by setting (``"1200"``, ``"default"``)."""
    text = resources.files("eopt.sim").joinpath("data", _REFERENCE).read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    return {key: RepeatFigures(**value) for key, value in raw["settings"].items()}
