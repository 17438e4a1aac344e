"""The RAPL backend against a fake powercap tree in a temporary folder.

The tree mirrors the kernel's: zone folders live under ``devices/`` with subzones nested in
their package's folder, and the powercap root lists every zone flat as symlinks. Counters
are plain files the tests rewrite between readings, and the sampler's clock is a value the
tests set, so every reading is deterministic.
"""

from __future__ import annotations

import errno
import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from eopt.attribute.engine import window_energy
from eopt.measure import rapl
from eopt.measure.rapl import (
    RaplError,
    RaplPermissionError,
    RaplSampler,
    RaplUnavailableError,
    conservative_power,
    discover_zones,
    powercap_root,
    wrap_modulus_uj,
)
from eopt.model.trace import PowerSeries, Trace

# The value real Intel packages show: (2³² − 1) × 61.035 µJ, truncated by the kernel.
MAX_UJ = 262_143_328_850
T0_NS = 1_700_000_000_000_000_000  # an epoch timestamp, as time.time_ns() gives


class FakePowercap:
    """A powercap tree: ``zone(...)`` adds a zone, ``set(...)`` writes its counter."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "powercap"
        self.devices = tmp / "devices"
        self.root.mkdir()
        self.devices.mkdir()
        self.dirs: dict[str, Path] = {}

    def zone(
        self,
        zone_id: str,
        name: str,
        energy_uj: int | None = 0,
        max_uj: int | str | None = MAX_UJ,
    ) -> Path:
        parts = zone_id.split(":")
        if len(parts) == 3:  # a subzone sits inside its package's folder
            folder = self.dirs[f"{parts[0]}:{parts[1]}"] / zone_id
        else:
            folder = self.devices / zone_id
        folder.mkdir()
        (folder / "name").write_text(name + "\n")
        if energy_uj is not None:
            (folder / "energy_uj").write_text(f"{energy_uj}\n")
        if max_uj is not None:
            (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
        (self.root / zone_id).symlink_to(folder)
        self.dirs[zone_id] = folder
        return folder

    def set(self, zone_id: str, energy_uj: int) -> None:
        (self.dirs[zone_id] / "energy_uj").write_text(f"{energy_uj}\n")

    def two_packages(self) -> None:
        """Two sockets with core, uncore and dram, an MMIO duplicate and a psys zone."""
        for p in (0, 1):
            self.zone(f"intel-rapl:{p}", f"package-{p}")
            for m, kind in enumerate(("core", "uncore", "dram")):
                self.zone(f"intel-rapl:{p}:{m}", kind)
        self.zone("intel-rapl:2", "psys")
        self.zone("intel-rapl-mmio:0", "package-0")


class Clock:
    """A time source the test moves: every call returns ``t`` (ns)."""

    def __init__(self, t: int = T0_NS) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def manual_sampler(fake: FakePowercap, clock: Clock) -> RaplSampler:
    return RaplSampler(fake.root, period_s=0.02, clock_ns=clock, background=False)


def step(sampler: RaplSampler, clock: Clock, dt_ns: int, counters: dict[str, int]) -> None:
    """Advance the clock, write new counter values, take one reading."""
    clock.t += dt_ns
    for zone_id, value in counters.items():
        sampler_fake_set(sampler, zone_id, value)
    sampler.sample()


def sampler_fake_set(sampler: RaplSampler, zone_id: str, value: int) -> None:
    zone = next(z for z in sampler.zones if z.zone_id == zone_id)
    zone.energy_path.write_text(f"{value}\n")


def series_by_key(series: list[PowerSeries]) -> dict[tuple[str, int], PowerSeries]:
    return {s.key: s for s in series}


# discovery -------------------------------------------------------------------------------
def test_two_packages_are_found_with_kinds_packages_and_domains(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.two_packages()

    found = discover_zones(fake.root)

    got = [(z.zone_id, z.kind, z.package, z.domain) for z in found.zones]
    assert got == [
        ("intel-rapl:0", "package", 0, "CPU_PKG"),
        ("intel-rapl:0:0", "core", 0, None),
        ("intel-rapl:0:1", "uncore", 0, None),
        ("intel-rapl:0:2", "dram", 0, "CPU_DRAM"),
        ("intel-rapl:1", "package", 1, "CPU_PKG"),
        ("intel-rapl:1:0", "core", 1, None),
        ("intel-rapl:1:1", "uncore", 1, None),
        ("intel-rapl:1:2", "dram", 1, "CPU_DRAM"),
    ]
    assert [z.device_id for z in found.zones] == [0, 0, 0, 0, 1, 1, 1, 1]
    # Each zone once, by its flat path (the one the chmod glob of the fix names).
    assert found.zones[1].energy_path == fake.root / "intel-rapl:0:0" / "energy_uj"
    assert all(z.max_energy_range_uj == MAX_UJ for z in found.zones)
    reasons = {Path(s.path).name: s.reason for s in found.skipped}
    assert set(reasons) == {"intel-rapl-mmio:0", "intel-rapl:2"}
    assert "duplicate" in reasons["intel-rapl-mmio:0"]
    assert "psys" in reasons["intel-rapl:2"]
    assert found.notes == ()


def test_mmio_zone_is_used_where_it_is_the_only_source(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl-mmio:0", "package-0")

    found = discover_zones(fake.root)

    assert [(z.zone_id, z.kind, z.domain) for z in found.zones] == [
        ("intel-rapl-mmio:0", "package", "CPU_PKG")
    ]


def test_amd_style_prefix_and_package_numbering_from_the_name(tmp_path: Path) -> None:
    # The zone number need not equal the package index: the name decides.
    fake = FakePowercap(tmp_path)
    fake.zone("amd-rapl:0", "package-1")
    fake.zone("amd-rapl:0:0", "core")

    found = discover_zones(fake.root)

    assert [(z.kind, z.package, z.device_id) for z in found.zones] == [
        ("package", 1, 1),
        ("core", 1, 1),
    ]
    assert found.notes == ("CPU_DRAM 1: package 1 exposes no dram zone (DRAM not measured)",)


def test_multi_die_packages_get_distinct_device_ids(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0-die-0")
    fake.zone("intel-rapl:1", "package-0-die-1")

    found = discover_zones(fake.root)

    assert [(z.package, z.die, z.device_id) for z in found.zones] == [(0, 0, 0), (0, 1, 1)]


def test_missing_zones_are_skipped_with_reasons(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0")
    fake.zone("intel-rapl:0:0", "core", energy_uj=None)  # no counter
    fake.zone("intel-rapl:0:1", "uncore", max_uj="lots")  # malformed range
    fake.zone("intel-rapl:0:2", "dram", max_uj=None)  # no range file
    fake.zone("intel-rapl:1", "package-1")  # no subzones at all
    fake.zone("intel-rapl:1:0", "gpu")  # a name this backend does not know

    found = discover_zones(fake.root)

    assert [z.zone_id for z in found.zones] == ["intel-rapl:0", "intel-rapl:1"]
    reasons = {Path(s.path).name: s.reason for s in found.skipped}
    assert "no energy_uj file" in reasons["intel-rapl:0:0"]
    assert "'lots'" in reasons["intel-rapl:0:1"]
    assert "max_energy_range_uj" in reasons["intel-rapl:0:2"]
    assert "unknown subzone name 'gpu'" in reasons["intel-rapl:1:0"]
    assert found.notes == (
        "CPU_DRAM 0: package 0 exposes no dram zone (DRAM not measured)",
        "CPU_DRAM 1: package 1 exposes no dram zone (DRAM not measured)",
    )

    # And a run over what is left gives just the package series.
    clock = Clock()
    sampler = manual_sampler(fake, clock).start()
    step(sampler, clock, 20_000_000, {"intel-rapl:0": 1_000_000, "intel-rapl:1": 2_000_000})
    keys = [s.key for s in sampler.stop()]
    assert keys == [("CPU_PKG", 0), ("CPU_PKG", 1)]
    assert len(sampler.describe()["skipped"]) == 4


def test_unreadable_range_file_skips_the_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0")
    dram = fake.zone("intel-rapl:0:0", "dram")
    deny = dram / "max_energy_range_uj"
    real = rapl._read_text

    def read(path: Path) -> str:
        if Path(path).resolve() == deny.resolve():
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(rapl, "_read_text", read)
    found = discover_zones(fake.root)

    assert [z.kind for z in found.zones] == ["package"]
    (skip,) = found.skipped
    assert "cannot read" in skip.reason and "Permission denied" in skip.reason


# wraparound ------------------------------------------------------------------------------
@pytest.mark.parametrize("unit_nj", [61035, 15258])  # the kernel's units for ESU 14 and 16
def test_wrap_modulus_is_the_kernel_range_plus_one_unit(unit_nj: int) -> None:
    # intel_rapl_common: range = 0xFFFFFFFF × unit, the counter wraps after 2³² units.
    max_uj = (2**32 - 1) * unit_nj // 1000
    true_modulus_uj = 2**32 * unit_nj / 1000
    assert abs(wrap_modulus_uj(max_uj) - true_modulus_uj) <= 1.0
    # The "+1 µJ" convention would be off by most of a unit.
    assert abs(max_uj + 1 - true_modulus_uj) > 10.0


def test_a_wrapping_counter_gives_the_right_energy_and_non_negative_power(
    tmp_path: Path,
) -> None:
    start_uj = MAX_UJ - 2_000_000
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0", energy_uj=start_uj)
    clock = Clock()
    sampler = manual_sampler(fake, clock).start()
    modulus = wrap_modulus_uj(MAX_UJ)

    # 150 W for 20 ms = 3 J: the counter passes its top and restarts near 1 J.
    after_wrap = round(start_uj + 3_000_000 - modulus)
    step(sampler, clock, 20_000_000, {"intel-rapl:0": after_wrap})
    step(sampler, clock, 20_000_000, {"intel-rapl:0": after_wrap + 3_000_000})
    (series,) = sampler.stop()

    c = sampler.counters()
    assert c.raw_uj[:, 0].tolist() == [start_uj, after_wrap, after_wrap + 3_000_000]
    assert 0 < after_wrap < 1_000_000
    assert sampler.energy_between(T0_NS, T0_NS + 40_000_000)["package-0"] == pytest.approx(
        6.0, abs=1e-6
    )
    assert window_energy(series, T0_NS, T0_NS + 40_000_000) == pytest.approx(6.0, abs=1e-6)
    assert np.all(series.power_w >= 0.0)
    assert series.power_w == pytest.approx(np.full(5, 150.0), rel=1e-6)
    assert sampler.describe()["zones"][0]["wraps"] == 1


def test_a_small_range_wraps_several_times_over_a_run(tmp_path: Path) -> None:
    max_uj = 999_999
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0", energy_uj=0, max_uj=max_uj)
    clock = Clock()
    with pytest.warns(rapl.RaplWrapWarning):  # a 1 J range: 1 ms at 1 kW
        sampler = manual_sampler(fake, clock).start()
    modulus = wrap_modulus_uj(max_uj)

    true_uj = 0.0
    for _ in range(10):  # 0.6 J per 10 ms step: 6 J over a modulus just under 1 J
        true_uj += 600_000
        step(sampler, clock, 10_000_000, {"intel-rapl:0": int(true_uj % modulus)})
    (series,) = sampler.stop()

    assert sampler.describe()["zones"][0]["wraps"] == 6
    total = window_energy(series, *series.span_ns)
    assert total == pytest.approx(6.0, abs=1e-5)
    assert np.all(series.power_w >= 0.0)


def test_an_interval_that_can_hide_a_second_wrap_is_warned_and_counted(tmp_path: Path) -> None:
    """Two wraps in one interval look like one: the energy of a whole modulus is lost.
    The sampler cannot see it, so it says so, naming the zone, and counts the interval."""
    max_uj = 999_999  # a modulus just under 1 J
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0", energy_uj=0, max_uj=max_uj)
    clock = Clock()
    with pytest.warns(rapl.RaplWrapWarning, match="can miss counter wraps"):
        sampler = manual_sampler(fake, clock).start()  # 1 J wraps in 1 ms at 1 kW
    modulus = wrap_modulus_uj(max_uj)
    true_uj = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):  # 60 W in 10 ms steps: 0.6 J, under one modulus
            true_uj += 600_000
            step(sampler, clock, 10_000_000, {"intel-rapl:0": int(true_uj % modulus)})
        assert not caught
        true_uj += 1_500_000  # 30 ms at 50 W: 1.5 J, more than a modulus, in one interval
        step(sampler, clock, 30_000_000, {"intel-rapl:0": int(true_uj % modulus)})
    (said,) = [w for w in caught if issubclass(w.category, rapl.RaplWrapWarning)]
    assert "package-0" in str(said.message) and "more than once" in str(said.message)
    assert sampler.describe()["zones"][0]["doubtful_intervals"] == 1
    sampler.stop()


def test_a_period_longer_than_the_wrap_time_is_warned_up_front(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0", energy_uj=0, max_uj=999_999)
    with pytest.warns(rapl.RaplWrapWarning, match="can miss counter wraps"):
        RaplSampler(fake.root, period_s=0.01, clock_ns=Clock(), background=False)
    (tmp_path / "real").mkdir()
    fake2 = FakePowercap(tmp_path / "real")
    fake2.zone("intel-rapl:0", "package-0", energy_uj=0)  # 262 kJ: minutes at 1 kW
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RaplSampler(fake2.root, period_s=0.02, clock_ns=Clock(), background=False)


# permissions and unavailability ----------------------------------------------------------
def test_a_root_only_counter_gives_the_permission_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakePowercap(tmp_path)
    fake.two_packages()
    denied = fake.root / "intel-rapl:1:2" / "energy_uj"
    real = rapl._read_text

    def read(path: Path) -> str:  # what a non-root reader meets on a patched kernel
        if Path(path) == denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(rapl, "_read_text", read)
    sampler = RaplSampler(fake.root, background=False)

    with pytest.raises(RaplPermissionError) as info:
        sampler.start()

    message = str(info.value)
    assert isinstance(info.value, PermissionError)
    assert "\n" not in message
    assert message.startswith(f"{denied}: permission denied")
    assert "run as root" in message
    assert f"sudo chmod a+r {fake.root}/intel-rapl:*/energy_uj" in message
    assert "udev rule" in message
    assert "--backend nvml" in message


def test_a_permission_error_in_the_background_thread_surfaces_at_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0")
    sampler = RaplSampler(fake.root, period_s=0.001).start()
    real = rapl._read_text

    def read(path: Path) -> str:
        if Path(path).name == "energy_uj":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(rapl, "_read_text", read)
    deadline = time.monotonic() + 5.0
    while sampler._thread is not None and sampler._thread.is_alive():
        assert time.monotonic() < deadline, "the sampler thread never hit the failure"
        time.sleep(0.001)

    with pytest.raises(RaplPermissionError, match="permission denied"):
        sampler.stop()


def test_a_counter_that_cannot_be_read_names_the_file(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    folder = fake.zone("intel-rapl:0", "package-0", energy_uj=None)
    (folder / "energy_uj").mkdir()  # exists (so discovery keeps it) but cannot be read

    with pytest.raises(RaplError) as info:
        RaplSampler(fake.root, background=False).start()

    assert not isinstance(info.value, RaplPermissionError)
    assert str(info.value).startswith(f"{fake.root / 'intel-rapl:0' / 'energy_uj'}: cannot read")


def test_garbage_in_a_counter_is_a_clear_error(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0")
    (fake.dirs["intel-rapl:0"] / "energy_uj").write_text("n/a\n")

    with pytest.raises(RaplError, match=r"holds 'n/a', not an energy in µJ"):
        RaplSampler(fake.root, background=False).start()


def test_no_powercap_folder_gives_the_unavailable_message(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-powercap"

    with pytest.raises(RaplUnavailableError) as info:
        RaplSampler(missing)

    message = str(info.value)
    assert message.startswith(f"no RAPL zones under {missing}: the folder does not exist")
    assert "this CPU or kernel exposes none" in message
    assert "--backend nvml" in message and "\n" not in message


def test_a_powercap_folder_without_rapl_zones_is_unavailable(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    (fake.root / "dtpm").mkdir()  # another powercap driver
    fake.zone("intel-rapl:0", "psys")

    with pytest.raises(RaplUnavailableError) as info:
        discover_zones(fake.root)

    message = str(info.value)
    assert message.startswith(f"no RAPL zones under {fake.root}: this CPU or kernel exposes none")
    assert "psys" in message  # what was skipped, and why


def test_the_root_comes_from_the_argument_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EOPT_POWERCAP_ROOT", raising=False)
    assert powercap_root() == Path("/sys/class/powercap")
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0")
    monkeypatch.setenv("EOPT_POWERCAP_ROOT", str(fake.root))
    assert powercap_root() == fake.root
    assert powercap_root(tmp_path) == tmp_path
    assert discover_zones().root == fake.root


# power samples ---------------------------------------------------------------------------
def test_the_series_integrate_to_the_counters_energy(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.two_packages()
    clock = Clock()
    sampler = manual_sampler(fake, clock).start()
    rng = np.random.default_rng(7)
    zone_ids = [z.zone_id for z in sampler.zones]
    counters = dict.fromkeys(zone_ids, 0)
    for _ in range(200):
        dt_ns = int(rng.integers(15_000_000, 25_000_001))  # 20 ms ± jitter
        for zone_id in zone_ids:  # power that jumps between 5 and 250 W
            counters[zone_id] += int(rng.uniform(5.0, 250.0) * dt_ns * 1e-3)
        step(sampler, clock, dt_ns, counters)
    series = series_by_key(sampler.stop())

    assert set(series) == {("CPU_PKG", 0), ("CPU_PKG", 1), ("CPU_DRAM", 0), ("CPU_DRAM", 1)}
    c = sampler.counters()
    trace = Trace((), tuple(series.values()))  # validates: increasing times, finite power
    assert trace.start_ns == T0_NS
    for k, zone in enumerate(c.zones):
        if zone.domain is None:
            continue
        s = series[(zone.domain, zone.device_id)]
        counted = c.energy_j[-1, k] - c.energy_j[0, k]
        assert window_energy(s, *s.span_ns) == pytest.approx(counted, rel=1e-9)
        # Any window between two readings is exact too, and agrees with energy_between.
        a, b = int(c.times_ns[17]), int(c.times_ns[121])
        assert window_energy(s, a, b) == pytest.approx(c.energy_j[121, k] - c.energy_j[17, k])
        assert sampler.energy_between(a, b)[zone.label] == pytest.approx(
            window_energy(s, a, b), rel=1e-9
        )
        assert np.all(s.power_w >= 0.0)
    describe = sampler.describe()
    core0 = next(z for z in describe["zones"] if z["zone"] == "intel-rapl:0:0")
    assert core0["energy_j"] == pytest.approx(counters["intel-rapl:0:0"] * 1e-6)
    assert describe["n_readings"] == 201 and describe["period_s"] == 0.02


def test_energy_between_outside_the_readings_is_unknown(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0")
    clock = Clock()
    sampler = manual_sampler(fake, clock).start()
    step(sampler, clock, 10_000_000, {"intel-rapl:0": 1_000_000})  # 100 W

    assert sampler.energy_between(T0_NS + 2_500_000, T0_NS + 7_500_000) == {
        "package-0": pytest.approx(0.5)
    }
    assert sampler.energy_between(T0_NS - 1, T0_NS + 5_000_000) == {"package-0": None}


def test_conservative_power_is_exact_per_interval_and_never_negative() -> None:
    rng = np.random.default_rng(3)
    t = T0_NS + np.cumsum(rng.integers(2, 30_000_000, size=300)).astype(np.int64)
    power = rng.choice([0.0, 1.0, 400.0], size=299)  # idle gaps and sharp steps
    e = np.concatenate([[5.0], 5.0 + np.cumsum(power * np.diff(t) * 1e-9)])

    times, p = conservative_power(t, e)

    assert times.size == 2 * t.size - 1 and np.all(np.diff(times) > 0)
    assert np.all(p >= -1e-9)
    s = PowerSeries("CPU_PKG", 0, times, p)
    for i in (0, 1, 150, 298):
        assert window_energy(s, int(t[i]), int(t[i + 1])) == pytest.approx(
            e[i + 1] - e[i], rel=1e-9, abs=1e-12
        )


def test_constant_power_gives_a_flat_series() -> None:
    t = T0_NS + np.array([0, 20_000_000, 41_000_000, 59_000_000], dtype=np.int64)
    e = 80.0 * (t - t[0]) * 1e-9

    _, p = conservative_power(t, e)

    assert p == pytest.approx(np.full(7, 80.0))


# the background thread -------------------------------------------------------------------
def test_the_background_thread_samples_on_the_wall_clock(tmp_path: Path) -> None:
    fake = FakePowercap(tmp_path)
    fake.zone("intel-rapl:0", "package-0")
    fake.zone("intel-rapl:0:0", "dram")
    sampler = RaplSampler(fake.root, period_s=0.002)
    before = time.time_ns()
    sampler.start()
    stop_writing = threading.Event()

    counter = fake.dirs["intel-rapl:0"] / "energy_uj"

    def burn() -> None:  # a counter that keeps rising while the thread reads it
        value = 0
        while not stop_writing.is_set():
            value += 1000
            # Replace the file whole, as sysfs never shows a half-written value.
            counter.with_suffix(".new").write_text(f"{value}\n")
            os.replace(counter.with_suffix(".new"), counter)
            time.sleep(0.0005)

    writer = threading.Thread(target=burn)
    writer.start()
    time.sleep(0.1)
    stop_writing.set()
    writer.join()
    series = series_by_key(sampler.stop())
    after = time.time_ns()

    c = sampler.counters()
    assert c.times_ns.size >= 10  # ~50 readings at 2 ms; slow CI still gets 10
    assert before <= c.times_ns[0] and c.times_ns[-1] <= after
    pkg = series[("CPU_PKG", 0)]
    counted = c.energy_j[-1, 0] - c.energy_j[0, 0]
    assert counted > 0
    assert window_energy(pkg, *pkg.span_ns) == pytest.approx(counted, rel=1e-9)
    assert window_energy(series[("CPU_DRAM", 0)], *pkg.span_ns) == 0.0
    assert sampler._thread is None
