"""GPU model profiles for the simulated GPU, kept as YAML data in ``data/``.

A profile names the model, its SM clock table, memory clocks, power-limit range, SM count,
peak FLOP/s, memory and link bandwidth, its power sensor's averaging window, and its
physical parameters (:class:`~eopt.sim.physics.GpuPhysics`). ``base:`` inherits
another profile and overrides some keys (the ``physics`` section key by key).

Each profile says where its physics comes from (``provenance``): fitted to measured data
(with the fit's held-out error under ``fit``), or an extrapolation (``extrapolated:
true``; the H100 and H200 profiles, which no data in this project measure). A profile may
also be a file of the user's (``eopt sim fit LIB.jsonl -o my-gpu.json`` writes one):
:func:`load_profile` takes its path wherever it takes a name.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from eopt.sim.physics import GpuPhysics

__all__ = [
    "DEFAULT_POWER_AVERAGE_WINDOW_S",
    "SENSOR_PERIOD_S",
    "GpuProfile",
    "available_profiles",
    "load_profile",
]

#: NVML-like power readings refresh every 100 ms (on every profile).
SENSOR_PERIOD_S = 0.1
#: The averaged power reading covers only the last 25 ms of each 100 ms refresh interval:
#: what Yang, Adamek and Armour (SC24) measured for nvmlDeviceGetPowerUsage on A100 and
#: H100 boards. Used when a profile does not say.
DEFAULT_POWER_AVERAGE_WINDOW_S = 0.025

_PACKAGE = "eopt.sim"
_DIR = "data"


@dataclass(frozen=True)
class GpuProfile:
    """One GPU model as the simulator knows it.

    Attributes:
        model: Profile name, e.g. ``A100-SXM4-40GB``.
        nvml_name: The name NVML reports for such a board.
        sm_clocks_mhz: Supported SM clocks, descending, in MHz.
        mem_clocks_mhz: Supported memory clocks, descending, in MHz.
        idle_sm_clock_mhz: SM clock of an idle GPU whose clocks are not locked, in MHz.
        power_limit_min_w: Lowest settable power limit, in W.
        power_limit_max_w: Highest settable power limit, in W.
        power_limit_default_w: The board's default limit, in W.
        sm_count: Streaming multiprocessors.
        peak_flops: Dense BF16 tensor throughput at the top clock, in FLOP/s.
        memory_bandwidth_bytes_per_s: Peak DRAM bandwidth, in B/s.
        link_bandwidth_bytes_per_s: GPU-to-GPU link bandwidth, one direction, in B/s.
        physics: Physical parameters.
        power_average_window_s: How much of each ``SENSOR_PERIOD_S`` refresh interval the
            averaged power reading covers, in s: the mean over the last window before each
            refresh (0 < window ≤ the period). Load outside the windows is never seen.
        provenance: Where the physics comes from (data, fit, or extrapolation).
        extrapolated: True when no measured data of this model were fitted.
    """

    model: str
    nvml_name: str
    sm_clocks_mhz: tuple[float, ...]
    mem_clocks_mhz: tuple[float, ...]
    idle_sm_clock_mhz: float
    power_limit_min_w: float
    power_limit_max_w: float
    power_limit_default_w: float
    sm_count: int
    peak_flops: float
    memory_bandwidth_bytes_per_s: float
    link_bandwidth_bytes_per_s: float
    physics: GpuPhysics
    power_average_window_s: float = DEFAULT_POWER_AVERAGE_WINDOW_S
    provenance: str = ""
    extrapolated: bool = False

    @property
    def max_sm_clock_mhz(self) -> float:
        """The top SM clock, in MHz."""
        return self.sm_clocks_mhz[0]

    @property
    def min_sm_clock_mhz(self) -> float:
        """The lowest SM clock, in MHz."""
        return self.sm_clocks_mhz[-1]


def _profile_files() -> dict[str, Any]:
    root = resources.files(_PACKAGE).joinpath(_DIR)
    return {p.name[: -len(".yaml")]: p for p in root.iterdir() if p.name.endswith(".yaml")}


_FILE_SUFFIXES = (".json", ".yaml", ".yml")


def _is_path(name: str) -> bool:
    return name.lower().endswith(_FILE_SUFFIXES) or "/" in name or "\\" in name


def _where(name: str) -> str:
    return name if _is_path(name) else f"{_DIR}/{name}.yaml"


def _read_user_file(name: str) -> Any:
    path = Path(name)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ValueError(
            f"{name}: no such GPU profile file; write one with `eopt sim fit LIB.jsonl -o "
            f"{name}` or name a built-in model ({', '.join(available_profiles())})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name}: cannot read this GPU profile ({exc})") from None
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(
            f"{name}: not valid JSON/YAML ({exc}); rewrite it with `eopt sim fit`"
        ) from None


@functools.cache
def _raw(name: str) -> dict[str, Any]:
    if _is_path(name):
        data = _read_user_file(name)
    else:
        files = _profile_files()
        if name not in files:
            raise ValueError(
                f"unknown simulated GPU model {name!r}; available: "
                f"{', '.join(available_profiles())} (or the path of a profile file)"
            )
        data = yaml.safe_load(files[name].read_text(encoding="utf-8"))
    where = _where(name)
    if not isinstance(data, dict) or data.get("kind") != "gpu":
        raise ValueError(f"{where}: not a GPU profile (expected 'kind: gpu')")
    base = data.get("base")
    if base is None:
        return data
    if _is_path(str(base)):
        raise ValueError(f"{where}: base must name a built-in profile, not a file ({base!r})")
    merged = dict(_raw(str(base)))
    physics = dict(merged.get("physics") or {})
    physics.update(data.get("physics") or {})
    merged.update(data)
    merged["physics"] = physics
    merged.pop("base", None)
    return merged


def available_profiles() -> list[str]:
    """Names of the GPU models the simulator can be built as, sorted."""
    names = []
    for name, path in _profile_files().items():
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue
        if isinstance(data, dict) and data.get("kind") == "gpu":
            names.append(name)
    return sorted(names)


def _clock_list(value: Any, where: str) -> tuple[float, ...]:
    if isinstance(value, Mapping):
        try:
            lo, hi, step = float(value["min"]), float(value["max"]), float(value["step"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: needs numeric min, max and step") from exc
        count = round((hi - lo) / step)
        clocks = [hi - i * step for i in range(count + 1)]
    elif isinstance(value, Sequence) and not isinstance(value, str):
        clocks = [float(v) for v in value]
    else:
        raise ValueError(f"{where}: expected a list of MHz or {{min, max, step}}")
    if not clocks:
        raise ValueError(f"{where}: empty clock list")
    return tuple(sorted(clocks, reverse=True))


@functools.cache
def load_profile(name: str) -> GpuProfile:
    """The profile called ``name`` (e.g. ``"A100-SXM4-40GB"``), or the profile file at
    path ``name`` (``.json``, ``.yaml``; e.g. one ``eopt sim fit`` wrote).

    Raises:
        ValueError: for an unknown name (listing the available ones) or a malformed file.
    """
    data = _raw(name)
    where = _where(name)
    try:
        limits = data["power_limit_w"]
        sm_clocks = _clock_list(data["sm_clocks_mhz"], f"{where}: sm_clocks_mhz")
        window_s = data.get("power_average_window_s", DEFAULT_POWER_AVERAGE_WINDOW_S)
        if (
            isinstance(window_s, bool)
            or not isinstance(window_s, (int, float))
            or not 0.0 < window_s <= SENSOR_PERIOD_S
        ):
            raise ValueError(
                f"{where}: power_average_window_s must be a number of s in "
                f"(0, {SENSOR_PERIOD_S:g}] (the sensor's refresh period), got {window_s!r}"
            )
        return GpuProfile(
            model=str(data["model"]),
            nvml_name=str(data.get("nvml_name", f"NVIDIA {data['model']}")),
            sm_clocks_mhz=sm_clocks,
            mem_clocks_mhz=_clock_list(data["mem_clocks_mhz"], f"{where}: mem_clocks_mhz"),
            idle_sm_clock_mhz=float(data.get("idle_sm_clock_mhz", sm_clocks[-1])),
            power_limit_min_w=float(limits["min"]),
            power_limit_max_w=float(limits["max"]),
            power_limit_default_w=float(limits["default"]),
            sm_count=int(data["sm_count"]),
            peak_flops=float(data["peak_flops"]),
            memory_bandwidth_bytes_per_s=float(data["memory_bandwidth_bytes_per_s"]),
            link_bandwidth_bytes_per_s=float(data["link_bandwidth_bytes_per_s"]),
            physics=GpuPhysics.from_dict(data.get("physics") or {}, f"{where}: physics"),
            power_average_window_s=float(window_s),
            provenance=str(data.get("provenance", "")).strip(),
            extrapolated=bool(data.get("extrapolated", False)),
        )
    except KeyError as exc:
        raise ValueError(f"{where}: missing key {exc.args[0]!r}") from exc
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(where):
            raise
        raise ValueError(f"{where}: {exc}") from exc
