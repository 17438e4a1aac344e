"""The rest of the node: CPU package and DRAM energy from Linux powercap (RAPL).

The kernel's ``intel_rapl`` driver exposes each RAPL domain as a *zone* under
``/sys/class/powercap``: top-level zones ``intel-rapl:<N>`` (named ``package-<P>``, or
``package-<P>-die-<D>`` on multi-die packages, or ``psys``) and subzones
``intel-rapl:<N>:<M>`` named ``core``, ``uncore`` or ``dram``. AMD Zen CPUs are served by the
same driver under the same names (package and core zones, no dram); a zone prefix
``amd-rapl`` is accepted as well. Each zone has a cumulative energy counter ``energy_uj``
(µJ) that wraps at ``max_energy_range_uj``.

Zones and domains:
    ``package`` zones become ``CPU_PKG`` power series and ``dram`` zones ``CPU_DRAM`` series
    (the trace format's two CPU domains), with ``device_id`` = the package index.
    ``core`` and ``uncore`` are parts of their package's energy: they are read and kept in
    the raw counters (:meth:`RaplSampler.counters`) and in :meth:`RaplSampler.describe`
    (energy per zone), never as series, since the trace format has no domain for them.

Zones not used, with the reason recorded in :attr:`RaplDiscovery.skipped`:
    * ``psys`` (platform) zones: on client systems they cover the SoC and the platform
      around it, overlapping the package zones, and they are not the whole node on servers;
      the trace's ``NODE`` domain is for whole-node meters, so psys is not recorded as it.
    * ``intel-rapl-mmio:*`` zones when an ``intel-rapl`` zone of the same kind and package
      exists: the MMIO interface (``processor_thermal`` driver) reads the same package
      counter again. Where only the MMIO zone exists it is used.
    * Zones without ``energy_uj``, with an unreadable or malformed ``max_energy_range_uj``
      or ``name``, or with a name this module does not know.

Wraparound:
    The driver reports ``max_energy_range_uj`` as the counter's all-ones 32-bit register
    value converted to µJ (``rapl_unit_xlate(rd, ENERGY_UNIT, ENERGY_STATUS_MASK, 0)`` in
    ``drivers/powercap/intel_rapl_common.c``), so the range is inclusive: the counter takes
    every value up to and including it, and the next increment after the top lands one
    energy unit (2⁻ᴱˢᵁ J, typically 15.3 or 61 µJ) above it, at 0. The unit itself is not in
    sysfs; it is recovered as ``max_energy_range_uj / (2³² − 1)``, and the wrap modulus is
    ``max_energy_range_uj + unit`` (:func:`wrap_modulus_uj`). That is exact to the counter's
    rounding (≤ 1 µJ a wrap), where the common ``+ 1 µJ`` convention is off by up to one
    unit a wrap.

    **Assumption:** at most one wrap between two readings. A reading below the previous
    one is one wrap. The wrap period is ``modulus / power``: 262 kJ / 200 W ≈ 22 min for a
    package at the usual unit of 61 µJ, 65 kJ / 50 W ≈ 22 min for a server's dram at 15.3
    µJ, i.e. minutes at hundreds of watts, far above any sampling period here (20 ms). A
    second wrap inside one interval would go unseen and lose one modulus of energy.

Permissions:
    Since the fix for CVE-2020-8694 (Linux 5.10, backported to stable kernels in November
    2020) ``energy_uj`` is readable by root only. Reading it otherwise raises
    :class:`RaplPermissionError`, whose one-line message names the file and the fixes.

Power samples (:func:`conservative_power`):
    The counters give the energy of each interval between readings exactly; the trace's
    engine integrates power samples with the trapezoid rule. The series carries knots at
    every reading time and at every interval's midpoint; the midpoint's power is chosen so
    that the trapezoid over each interval equals the counter's energy of that interval.
    So the integral over ``[first, last]`` — and over any window whose edges are reading
    times — reproduces the counters exactly, and constant power stays flat.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eopt.model.trace import PowerSeries

__all__ = [
    "DEFAULT_PERIOD_S",
    "DEFAULT_POWERCAP_ROOT",
    "POWERCAP_ROOT_ENV",
    "RaplCounters",
    "RaplDiscovery",
    "RaplError",
    "RaplPermissionError",
    "RaplReader",
    "RaplSampler",
    "RaplUnavailableError",
    "RaplWrapWarning",
    "RaplZone",
    "SkippedZone",
    "conservative_power",
    "discover_zones",
    "powercap_root",
    "wrap_modulus_uj",
]

#: Where the kernel exposes powercap zones.
DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")
#: Environment variable that overrides :data:`DEFAULT_POWERCAP_ROOT` (tests, containers).
POWERCAP_ROOT_ENV = "EOPT_POWERCAP_ROOT"
#: Sampling period of :class:`RaplSampler`, in s. RAPL updates its counters about every
#: 1 ms, so 20 ms intervals carry a quantization noise of about 5 % in their mean power.
DEFAULT_PERIOD_S = 0.02

# The RAPL energy status register is 32 bits wide (ENERGY_STATUS_MASK in the kernel).
_COUNTER_STEPS = 2**32 - 1
# Prefixes of RAPL zones; the MMIO interface duplicates the MSR one where both exist.
_PRIMARY_PREFIXES = ("intel-rapl", "amd-rapl")
_MMIO_PREFIX = "intel-rapl-mmio"
_ZONE_RE = re.compile(
    r"^(?P<prefix>intel-rapl|intel-rapl-mmio|amd-rapl):(?P<top>\d+)(?::(?P<sub>\d+))?$"
)
_PACKAGE_RE = re.compile(r"^package-(?P<package>\d+)(?:-die-(?P<die>\d+))?$")
_SUBZONE_KINDS = ("core", "uncore", "dram")
_DOMAINS = {"package": "CPU_PKG", "dram": "CPU_DRAM"}
# The kind order used to sort zones (packages first, as a reader expects them).
_KIND_ORDER = {"package": 0, "core": 1, "uncore": 2, "dram": 3}


#: A power no CPU package or DRAM zone draws for long, in W: the wrap time at this power
#: bounds the sampling period before any power has been seen.
PEAK_POWER_W = 1000.0


class RaplError(RuntimeError):
    """RAPL energy cannot be read as asked; the message names the file and the fix."""


class RaplWrapWarning(UserWarning):
    """Readings so far apart that a counter may have wrapped more than once between them."""


class RaplUnavailableError(RaplError):
    """No usable RAPL zone under the powercap root."""


class RaplPermissionError(RaplError, PermissionError):
    """An ``energy_uj`` file is root-only (the CVE-2020-8694 mitigation)."""


def powercap_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The powercap folder to read: ``root``, else ``$EOPT_POWERCAP_ROOT``, else sysfs.

    Args:
        root: An explicit folder (tests use a fake sysfs tree).
    """
    if root is not None:
        return Path(root)
    env = os.environ.get(POWERCAP_ROOT_ENV)
    return Path(env) if env else DEFAULT_POWERCAP_ROOT


def wrap_modulus_uj(max_energy_range_uj: int) -> float:
    """The value, in µJ, after which the counter returns to 0 (see the module docstring).

    Args:
        max_energy_range_uj: The zone's ``max_energy_range_uj``, in µJ (the largest value
            the counter shows).

    Returns:
        ``max_energy_range_uj`` plus one counter unit (the range over ``2³² − 1``), in µJ.
    """
    return max_energy_range_uj + max_energy_range_uj / _COUNTER_STEPS


def _read_text(path: Path) -> str:
    """One sysfs attribute's text (the one place files are read, so tests can inject)."""
    with open(path, encoding="ascii") as f:
        return f.read()


@dataclass(frozen=True)
class RaplZone:
    """One RAPL zone with an energy counter.

    Attributes:
        zone_id: The zone's sysfs name, e.g. ``intel-rapl:0:2``.
        name: The content of its ``name`` file, e.g. ``package-0`` or ``dram``.
        kind: ``package``, ``core``, ``uncore`` or ``dram``.
        package: The CPU package (socket) index, from ``package-<P>``.
        die: The die index on multi-die packages (``package-<P>-die-<D>``), else None.
        device_id: The index of its series in its domain: the package index, or, where a
            package has several dies, the position of (package, die) in sorted order.
        energy_path: The ``energy_uj`` file.
        max_energy_range_uj: The counter's largest value, in µJ.
    """

    zone_id: str
    name: str
    kind: str
    package: int
    die: int | None
    device_id: int
    energy_path: Path
    max_energy_range_uj: int

    @property
    def domain(self) -> str | None:
        """``CPU_PKG`` or ``CPU_DRAM``; None for core and uncore (no trace domain)."""
        return _DOMAINS.get(self.kind)

    @property
    def label(self) -> str:
        """``package-0``, ``dram-1``, ``core-0`` …: unique among the zones used."""
        return f"{self.kind}-{self.device_id}"

    @property
    def modulus_uj(self) -> float:
        """Where the counter wraps, in µJ (:func:`wrap_modulus_uj`)."""
        return wrap_modulus_uj(self.max_energy_range_uj)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "zone": self.zone_id,
            "name": self.name,
            "kind": self.kind,
            "domain": self.domain,
            "package": self.package,
            "die": self.die,
            "device_id": self.device_id,
            "energy_uj": str(self.energy_path),
            "max_energy_range_uj": self.max_energy_range_uj,
        }


@dataclass(frozen=True)
class SkippedZone:
    """A zone found but not used.

    Attributes:
        path: The zone's folder.
        reason: Why, in plain words.
    """

    path: str
    reason: str


@dataclass(frozen=True)
class RaplDiscovery:
    """What :func:`discover_zones` found.

    Attributes:
        root: The powercap folder searched.
        zones: Usable zones, sorted by (package, die, kind).
        skipped: Zones found but not used, with reasons.
        notes: Series a reader might expect but that no zone provides (a package without
            a dram zone, as on AMD).
    """

    root: Path
    zones: tuple[RaplZone, ...]
    skipped: tuple[SkippedZone, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "root": str(self.root),
            "zones": [z.to_dict() for z in self.zones],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class _Candidate:
    """A zone folder with a parsed name, before its counter files are checked."""

    zone_id: str
    prefix: str
    top: int
    path: Path
    kind: str
    package: int
    die: int | None


def _zone_dirs(root: Path) -> dict[str, tuple[re.Match[str], Path]]:
    """RAPL zone folders under ``root`` by zone id.

    ``/sys/class/powercap`` lists every zone flat (symlinks), and a subzone also appears
    inside its parent's folder; both layouts are searched, a zone id counts once, and the
    flat path wins (it is the one the permission fix's glob names).
    """
    found: dict[str, tuple[re.Match[str], Path]] = {}
    tops: list[Path] = []
    for entry in sorted(root.iterdir()):
        m = _ZONE_RE.match(entry.name)
        if m is not None and entry.is_dir():
            found[entry.name] = (m, entry)
            if m["sub"] is None:
                tops.append(entry)
    for top in tops:
        for child in sorted(top.iterdir()):
            m = _ZONE_RE.match(child.name)
            if m is not None and m["sub"] is not None and child.is_dir():
                found.setdefault(child.name, (m, child))
    return found


def _read_name(path: Path) -> str:
    return _read_text(path / "name").strip()


def discover_zones(root: str | os.PathLike[str] | None = None) -> RaplDiscovery:
    """Find the RAPL zones under a powercap folder.

    Reads each zone's ``name`` and ``max_energy_range_uj`` and checks that ``energy_uj``
    exists; it does not read the counters (that is where permissions bite:
    :meth:`RaplReader.read` says what to do).

    Args:
        root: The powercap folder; default :func:`powercap_root`.

    Returns:
        The usable zones, the skipped ones with reasons, and notes.

    Raises:
        RaplUnavailableError: when the folder is missing or holds no usable RAPL zone.
    """
    base = powercap_root(root)
    hint = (
        "load the driver (`sudo modprobe intel_rapl_msr`; in a VM or container the host must "
        "expose RAPL), or measure the GPU only with --backend nvml"
    )
    if not base.is_dir():
        raise RaplUnavailableError(
            f"no RAPL zones under {base}: the folder does not exist, so this CPU or kernel "
            f"exposes none; {hint}"
        )
    try:
        dirs = _zone_dirs(base)
    except OSError as exc:
        raise RaplUnavailableError(
            f"{base}: cannot list the powercap zones ({exc.strerror or exc}); {hint}"
        ) from None

    skipped: list[SkippedZone] = []

    def skip(path: Path, reason: str) -> None:
        skipped.append(SkippedZone(str(path), reason))

    # Names first: a subzone takes its package from its parent's name.
    names: dict[str, str] = {}
    for zone_id, (_, path) in dirs.items():
        try:
            names[zone_id] = _read_name(path)
        except OSError as exc:
            skip(path, f"cannot read {path / 'name'} ({exc.strerror or exc})")

    candidates: list[_Candidate] = []
    for zone_id, (m, path) in dirs.items():
        if zone_id not in names:
            continue
        name, prefix, top = names[zone_id], m["prefix"], int(m["top"])
        if m["sub"] is None:
            if name == "psys":
                skip(
                    path,
                    "psys (platform) zone: overlaps the package zones and is not the whole "
                    "node, so it is not recorded as NODE",
                )
                continue
            pm = _PACKAGE_RE.match(name)
            if pm is None:
                skip(path, f"unknown top-level zone name {name!r} (expected package-<N>)")
                continue
            die = int(pm["die"]) if pm["die"] is not None else None
            candidates.append(
                _Candidate(zone_id, prefix, top, path, "package", int(pm["package"]), die)
            )
        else:
            if name not in _SUBZONE_KINDS:
                skip(path, f"unknown subzone name {name!r} (expected core, uncore or dram)")
                continue
            parent = names.get(f"{prefix}:{top}")
            pm = _PACKAGE_RE.match(parent) if parent is not None else None
            if pm is None:
                skip(path, f"its parent zone {prefix}:{top} has no readable package-<N> name")
                continue
            die = int(pm["die"]) if pm["die"] is not None else None
            candidates.append(_Candidate(zone_id, prefix, top, path, name, int(pm["package"]), die))

    # The MMIO interface duplicates the MSR one: keep it only where it is the sole source.
    primary = {(c.kind, c.package, c.die) for c in candidates if c.prefix in _PRIMARY_PREFIXES}
    kept: list[tuple[_Candidate, int]] = []
    for c in candidates:
        if c.prefix == _MMIO_PREFIX and (c.kind, c.package, c.die) in primary:
            skip(c.path, f"duplicate of the intel-rapl {c.kind} zone of package {c.package} (MMIO)")
            continue
        energy = c.path / "energy_uj"
        if not energy.exists():
            skip(c.path, "no energy_uj file: the zone has no energy counter")
            continue
        range_file = c.path / "max_energy_range_uj"
        try:
            text = _read_text(range_file).strip()
        except OSError as exc:
            skip(c.path, f"cannot read {range_file} ({exc.strerror or exc})")
            continue
        try:
            max_range = int(text)
        except ValueError:
            max_range = -1
        if max_range <= 0:
            skip(c.path, f"{range_file} holds {text!r}, not a positive number of µJ")
            continue
        kept.append((c, max_range))

    if not kept:
        why = "; ".join(f"{s.path}: {s.reason}" for s in skipped)
        raise RaplUnavailableError(
            f"no RAPL zones under {base}: this CPU or kernel exposes none; {hint}"
            + (f" (skipped: {why})" if why else "")
        )

    # device_id: the package index, unless a package has several dies.
    pkg_dies = sorted({(c.package, c.die) for c, _ in kept})
    multi_die = len({p for p, _ in pkg_dies}) < len(pkg_dies)
    device_of = {pd: (i if multi_die else pd[0]) for i, pd in enumerate(pkg_dies)}
    zones = sorted(
        (
            RaplZone(
                zone_id=c.zone_id,
                name=names[c.zone_id],
                kind=c.kind,
                package=c.package,
                die=c.die,
                device_id=device_of[(c.package, c.die)],
                energy_path=c.path / "energy_uj",
                max_energy_range_uj=max_range,
            )
            for c, max_range in kept
        ),
        key=lambda z: (z.package, z.die or 0, _KIND_ORDER[z.kind], z.zone_id),
    )
    notes = tuple(
        f"CPU_DRAM {device_of[pd]}: package {pd[0]} exposes no dram zone (DRAM not measured)"
        for pd in pkg_dies
        if not any(z.kind == "dram" and (z.package, z.die) == pd for z in zones)
    )
    return RaplDiscovery(base, tuple(zones), tuple(skipped), notes)


def _permission_message(zone: RaplZone, root: Path) -> str:
    """The one-line fix for a root-only ``energy_uj`` of a zone under ``root``."""
    prefix = zone.zone_id.split(":", 1)[0]
    return (
        f"{zone.energy_path}: permission denied reading the RAPL energy counter (root-only "
        "on kernels with the CVE-2020-8694 fix); run as root, or allow reads until reboot with "
        f"`sudo chmod a+r {root}/{prefix}:*/energy_uj` (the glob covers subzones), or for "
        'good with a udev rule `SUBSYSTEM=="powercap", ACTION=="add", RUN+="/bin/chmod a+r '
        '/sys%p/energy_uj"`, or measure the GPU only with --backend nvml'
    )


class RaplReader:
    """Reads all zones' counters at once and unwraps them into cumulative energy.

    Args:
        zones: The zones to read (from :func:`discover_zones`).
        root: The powercap folder they are under, named in the permission fix.

    Assumptions:
        At most one wrap per zone between two calls of :meth:`read` (module docstring).
    """

    def __init__(self, zones: Sequence[RaplZone], root: Path = DEFAULT_POWERCAP_ROOT) -> None:
        self.zones = tuple(zones)
        self.root = root
        self._last_uj: list[int] | None = None
        self._offset_uj = [0.0] * len(self.zones)
        self.wraps = [0] * len(self.zones)

    def read_raw_uj(self) -> list[int]:
        """Each zone's ``energy_uj`` as read, in µJ (no unwrapping).

        Raises:
            RaplPermissionError: a counter is root-only.
            RaplError: a counter vanished or holds something other than an integer.
        """
        values: list[int] = []
        for zone in self.zones:
            try:
                text = _read_text(zone.energy_path)
            except PermissionError:
                raise RaplPermissionError(_permission_message(zone, self.root)) from None
            except OSError as exc:
                raise RaplError(
                    f"{zone.energy_path}: cannot read the RAPL energy counter "
                    f"({exc.strerror or exc}); was the intel_rapl driver unloaded? Run "
                    "`eopt measure` again, or measure the GPU only with --backend nvml"
                ) from None
            try:
                values.append(int(text.strip()))
            except ValueError:
                raise RaplError(
                    f"{zone.energy_path}: holds {text.strip()!r}, not an energy in µJ; is "
                    f"{POWERCAP_ROOT_ENV} pointing at a powercap folder?"
                ) from None
        return values

    def read(self) -> tuple[list[int], np.ndarray]:
        """Read every counter once and unwrap it.

        Returns:
            (raw values in µJ, cumulative energy in J since each counter's own zero, with
            every wrap seen so far added).
        """
        raw = self.read_raw_uj()
        if self._last_uj is not None:
            for k, (now, before) in enumerate(zip(raw, self._last_uj, strict=True)):
                if now < before:  # one wrap (see Assumptions)
                    self._offset_uj[k] += self.zones[k].modulus_uj
                    self.wraps[k] += 1
        self._last_uj = raw
        energy_j = (np.asarray(raw, dtype=np.float64) + np.asarray(self._offset_uj)) * 1e-6
        return raw, energy_j


def conservative_power(times_ns: np.ndarray, energy_j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Power samples whose trapezoid reproduces a cumulative counter interval by interval.

    Knots sit at every reading time ``t_i`` and at each interval's midpoint ``m_i``. A
    reading's power ``q_i`` is the harmonic mean of the mean powers ``P`` of the intervals
    on either side (the first and last readings take their interval's ``P``); the midpoint's
    power ``r_i`` solves ``a·(q_{i-1} + r_i)/2 + b·(r_i + q_i)/2 = ΔE_i`` with ``a``, ``b``
    the two half-interval lengths. Hence the trapezoid over every interval equals the
    counter's energy ``ΔE_i``; constant power gives a flat series; and, since a harmonic
    mean never exceeds twice either operand, ``r_i ≥ 0`` whenever the counter does not
    decrease. A step in power shows as a ramp with some overshoot at the midpoint (the price
    of exact conservation with a continuous piecewise-linear curve).

    Args:
        times_ns: Reading times, in ns, increasing by at least 2 ns (int64, length n ≥ 2).
        energy_j: Cumulative (unwrapped) energy at each reading, in J.

    Returns:
        (times in ns, int64, length 2n − 1; power in W).
    """
    t = np.asarray(times_ns, dtype=np.int64)
    e = np.asarray(energy_j, dtype=np.float64)
    if t.size < 2 or t.shape != e.shape:
        raise ValueError("conservative_power needs ≥ 2 readings with one energy each")
    dt_ns = np.diff(t)
    if np.any(dt_ns < 2):
        raise ValueError("reading times must increase by at least 2 ns")
    de = np.diff(e)
    p = de / (dt_ns * 1e-9)
    q = np.empty(t.size)
    q[0], q[-1] = p[0], p[-1]
    a, b = p[:-1], p[1:]
    s = a + b
    q[1:-1] = np.where(s > 0, 2.0 * a * b / np.where(s > 0, s, 1.0), 0.0)
    mid = t[:-1] + dt_ns // 2
    left_s = (mid - t[:-1]) * 1e-9
    right_s = (t[1:] - mid) * 1e-9
    r = (2.0 * de - left_s * q[:-1] - right_s * q[1:]) / (left_s + right_s)
    times = np.empty(2 * t.size - 1, dtype=np.int64)
    power = np.empty(2 * t.size - 1)
    times[0::2], times[1::2] = t, mid
    power[0::2], power[1::2] = q, r
    return times, power


@dataclass(frozen=True)
class RaplCounters:
    """The raw counter readings of a run.

    Attributes:
        zones: The zones, one column each.
        times_ns: Reading times, in ns since the UNIX epoch, strictly increasing (n,).
        raw_uj: ``energy_uj`` as read, in µJ (n, zones).
        energy_j: Cumulative energy with wraps undone, in J (n, zones).
    """

    zones: tuple[RaplZone, ...]
    times_ns: np.ndarray
    raw_uj: np.ndarray
    energy_j: np.ndarray

    def energy_between(self, t0_ns: int, t1_ns: int) -> dict[str, float | None]:
        """Each zone's energy over ``[t0_ns, t1_ns]`` from the counters, in J.

        Between readings the cumulative energy is interpolated linearly (constant power);
        at reading times it is the counter's own value.

        Args:
            t0_ns: Window start, in ns since the epoch.
            t1_ns: Window end, in ns (≥ ``t0_ns``).

        Returns:
            Energy by zone label (:attr:`RaplZone.label`); None for every zone when the
            window reaches outside the readings (unknown, never 0).
        """
        if t1_ns < t0_ns:
            raise ValueError(f"window ends ({t1_ns} ns) before it starts ({t0_ns} ns)")
        n = self.times_ns.size
        if n < 2 or t0_ns < self.times_ns[0] or t1_ns > self.times_ns[-1]:
            return {z.label: None for z in self.zones}
        origin = int(self.times_ns[0])
        # Relative times: epoch ns in float64 would lose a few hundred ns.
        t = (self.times_ns - origin).astype(np.float64)
        x = np.array([t0_ns - origin, t1_ns - origin], dtype=np.float64)
        out: dict[str, float | None] = {}
        for k, zone in enumerate(self.zones):
            e0, e1 = np.interp(x, t, self.energy_j[:, k])
            out[zone.label] = float(e1 - e0)
        return out


class RaplSampler:
    """Samples RAPL counters on a background thread; a power source of eopt traces.

    ``start()`` reads once in the calling thread (so a permission problem surfaces there),
    then every ``period_s`` on a thread; ``stop()`` reads once more and returns the
    ``CPU_PKG`` and ``CPU_DRAM`` power series (:func:`conservative_power`).

    Args:
        root: The powercap folder; default :func:`powercap_root`. Ignored with ``discovery``.
        period_s: Time between readings, in s.
        discovery: Zones already discovered (default: :func:`discover_zones` on ``root``).
        clock_ns: The time source, ns since the UNIX epoch (tests inject one).
        background: Whether ``start()`` starts the thread; without it, the caller takes
            readings with :meth:`sample` (deterministic tests).

    Raises:
        RaplUnavailableError: no usable zone.
        ValueError: a period that is not a positive number of seconds.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        period_s: float = DEFAULT_PERIOD_S,
        *,
        discovery: RaplDiscovery | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        background: bool = True,
    ) -> None:
        if not (isinstance(period_s, int | float) and math.isfinite(period_s) and period_s > 0):
            raise ValueError(f"RAPL sampling period {period_s!r} s must be a positive number")
        self.discovery = discovery if discovery is not None else discover_zones(root)
        self.period_s = float(period_s)
        self.clock_ns = clock_ns
        self.background = background
        self.reader = RaplReader(self.discovery.zones, self.discovery.root)
        self._times: list[int] = []
        self._raw: list[list[int]] = []
        self._energy: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._started = False
        # Per zone: the highest interval power seen (W), and the intervals that may hold
        # an unseen second wrap.
        self._peak_w = [0.0] * len(self.zones)
        self.doubtful = [0] * len(self.zones)
        self._warned = [False] * len(self.zones)
        for zone in self.zones:
            wrap_s = zone.modulus_uj * 1e-6 / PEAK_POWER_W
            if self.period_s >= wrap_s:
                warnings.warn(
                    f"RAPL {zone.label}: a reading every {self.period_s:g} s can miss counter "
                    f"wraps (the counter wraps every {wrap_s:.3g} s at {PEAK_POWER_W:g} W); "
                    f"sample more often than every {wrap_s / 2:.3g} s",
                    RaplWrapWarning,
                    stacklevel=2,
                )

    @property
    def zones(self) -> tuple[RaplZone, ...]:
        """The zones read."""
        return self.discovery.zones

    # lifecycle ---------------------------------------------------------------------------
    def start(self) -> RaplSampler:
        """Take a first reading and start sampling; returns ``self``.

        Raises:
            RaplPermissionError: ``energy_uj`` is root-only (the message says what to do).
            RaplError: another read failure.
        """
        if self._started:
            return self
        self.sample()
        self._started = True
        if self.background:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="eopt-rapl", daemon=True)
            self._thread.start()
        return self

    def sample(self) -> None:
        """Read every counter now and record the reading.

        The timestamp is the midpoint of the clock before and after the reads. A reading
        less than 2 ns after the previous one (or earlier: a wall-clock step) updates the
        wrap state but is not recorded, as series need strictly increasing times.
        """
        with self._lock:
            before = self.clock_ns()
            raw, energy = self.reader.read()
            after = self.clock_ns()
            t = before + (after - before) // 2
            if self._times and t < self._times[-1] + 2:
                return
            if self._times:
                self._check_wraps((t - self._times[-1]) * 1e-9, energy - self._energy[-1])
            self._times.append(t)
            self._raw.append(raw)
            self._energy.append(energy)

    def _check_wraps(self, dt_s: float, energy_j: np.ndarray) -> None:
        """Flag an interval long enough to hold a second wrap at the zone's peak power.

        The counter shows at most one wrap per interval. An interval in which the zone,
        drawing the highest power seen in it so far (or the interval's own), would pass a
        whole modulus may have lost one: it is counted in :attr:`doubtful` and warned about
        once per zone.
        """
        for k, zone in enumerate(self.zones):
            modulus_j = zone.modulus_uj * 1e-6
            power = float(energy_j[k]) / dt_s
            if power * dt_s <= modulus_j:
                self._peak_w[k] = max(self._peak_w[k], power)
            if max(self._peak_w[k], power) * dt_s < modulus_j:
                continue
            self.doubtful[k] += 1
            if not self._warned[k]:
                self._warned[k] = True
                warnings.warn(
                    f"RAPL {zone.label}: {dt_s:.3g} s between two readings, long enough for "
                    f"the counter to wrap more than once at {self._peak_w[k]:.3g} W (it wraps "
                    f"every {modulus_j:.4g} J); energy may be missing: sample more often",
                    RaplWrapWarning,
                    stacklevel=3,
                )

    def _run(self) -> None:
        """The thread: read on a fixed schedule until stopped (late reads skip ahead)."""
        next_t = time.monotonic()
        while True:
            next_t += self.period_s
            now = time.monotonic()
            if next_t < now:
                next_t = now
            if self._stop.wait(next_t - now):
                return
            try:
                self.sample()
            except BaseException as exc:  # kept and raised in the caller's thread by stop()
                self._failure = exc
                return

    def stop(self) -> list[PowerSeries]:
        """Stop sampling, read once more, and return the power series.

        Returns:
            One ``CPU_PKG`` series per package zone and one ``CPU_DRAM`` series per dram
            zone (``device_id`` = :attr:`RaplZone.device_id`).

        Raises:
            RaplError: the background reading failed (the original error, e.g.
                :class:`RaplPermissionError`), the sampler never started, or fewer than
                two readings were taken.
        """
        if not self._started:
            raise RaplError("RAPL sampler: stop() before start(); call start() first")
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._failure is not None:
            raise self._failure
        self.sample()
        return self.series()

    def __enter__(self) -> RaplSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    # results -----------------------------------------------------------------------------
    def counters(self) -> RaplCounters:
        """The raw and unwrapped counter readings so far."""
        with self._lock:
            n, z = len(self._times), len(self.zones)
            return RaplCounters(
                zones=self.zones,
                times_ns=np.asarray(self._times, dtype=np.int64),
                raw_uj=np.asarray(self._raw, dtype=np.int64).reshape(n, z),
                energy_j=np.asarray(self._energy, dtype=np.float64).reshape(n, z),
            )

    def energy_between(self, t0_ns: int, t1_ns: int) -> dict[str, float | None]:
        """Each zone's energy over a window, in J, from the counters.

        See :meth:`RaplCounters.energy_between`.
        """
        return self.counters().energy_between(t0_ns, t1_ns)

    def series(self) -> list[PowerSeries]:
        """The ``CPU_PKG`` and ``CPU_DRAM`` power series of the readings so far.

        Raises:
            RaplError: fewer than two readings.
        """
        c = self.counters()
        if c.times_ns.size < 2:
            raise RaplError(
                f"RAPL sampler: {c.times_ns.size} reading(s); at least 2 are needed for "
                "power (stop() takes the last one, so call start() before)"
            )
        out: list[PowerSeries] = []
        for k, zone in enumerate(c.zones):
            if zone.domain is None:
                continue
            times, power = conservative_power(c.times_ns, c.energy_j[:, k])
            out.append(
                PowerSeries(zone.domain, zone.device_id, times, power, where=str(zone.energy_path))
            )
        return out

    def describe(self) -> dict[str, Any]:
        """What the source was: zones, period, skipped zones and why, energy per zone."""
        c = self.counters()
        zones = []
        for k, zone in enumerate(c.zones):
            d = zone.to_dict()
            d["energy_j"] = (
                float(c.energy_j[-1, k] - c.energy_j[0, k]) if c.times_ns.size >= 2 else None
            )
            d["wraps"] = self.reader.wraps[k]
            d["doubtful_intervals"] = self.doubtful[k]
            zones.append(d)
        return {
            "backend": "rapl",
            "root": str(self.discovery.root),
            "period_s": self.period_s,
            "n_readings": int(c.times_ns.size),
            "zones": zones,
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.discovery.skipped],
            "notes": list(self.discovery.notes),
            "series": "CPU_PKG per package zone, CPU_DRAM per dram zone; core and uncore "
            "only in these counters",
            "power_samples": "conservative piecewise-linear: knots at readings and interval "
            "midpoints; the trapezoid over each interval equals the counter's energy",
        }
