"""eopt.element: nothing outside eopt (and cheap), a region under `eopt measure`, a hook's
callbacks otherwise."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import eopt
from eopt.measure import element as marker
from eopt.measure import regions
from eopt.measure.regions import RegionRecorder, read_region_windows


@pytest.fixture
def no_hook(monkeypatch):
    monkeypatch.delenv(marker.ELEMENT_HOOK_ENV, raising=False)
    monkeypatch.delenv(regions.REGIONS_FILE_ENV, raising=False)
    marker._reset()
    yield
    marker._reset()


def _median_ns(fn, n: int = 100_000) -> float:
    """Median cost of one call of ``fn`` in batches of 100, in ns."""
    batches = []
    for _ in range(n // 100):
        t0 = time.perf_counter_ns()
        for _ in range(100):
            fn()
        batches.append((time.perf_counter_ns() - t0) / 100)
    batches.sort()
    return batches[len(batches) // 2]


def test_outside_eopt_a_marker_does_nothing_in_under_a_microsecond(no_hook):
    def marked():
        with eopt.element("F[s0,m0]", kind="stage0.forward"):
            pass

    def empty():
        pass

    marked()
    assert marker.installed_hook() is None
    cost, base = _median_ns(marked), _median_ns(empty)
    # Robust to a loaded machine: the marker is compared with an empty call measured the
    # same way, and bounded generously in absolute terms.
    assert cost < 3_000, f"a marker costs {cost:.0f} ns"
    assert cost < 40 * max(base, 25), (cost, base)
    b = _median_ns(lambda: (eopt.begin_element("x"), eopt.end_element("x")))
    s = _median_ns(eopt.step)
    assert b < 3_000 and s < 3_000, (b, s)


def test_a_marker_under_a_recorder_is_a_region_with_its_kind(no_hook):
    rec = RegionRecorder()
    with regions.use_recorder(rec):
        with eopt.element("F[s0,m0]", kind="stage0.forward"), regions.region("inner"):
            pass
        eopt.begin_element("B[s0,m0]")
        eopt.end_element("B[s0,m0]")
    assert [(w.key, w.element_kind) for w in rec.windows] == [
        ("F[s0,m0]/inner", "inner"),
        ("F[s0,m0]", "stage0.forward"),
        ("B[s0,m0]", "B[s0,m0]"),
    ]
    # Outside the block the marker records nothing again.
    with eopt.element("after"):
        pass
    assert len(rec.windows) == 3


def test_misnested_end_is_an_error(no_hook):
    rec = RegionRecorder()
    with regions.use_recorder(rec):
        eopt.begin_element("a")
        with pytest.raises(marker.ElementError, match="innermost open element is 'a'"):
            eopt.end_element("b")
        eopt.end_element("a")
    with pytest.raises(marker.ElementError, match="without '/'"), regions.use_recorder(rec):
        eopt.begin_element("a/b")


class _Calls:
    def __init__(self):
        self.log = []

    def begin(self, name, kind):
        self.log.append(("begin", name, kind))

    def end(self, name, kind):
        self.log.append(("end", name, kind))

    def step(self):
        self.log.append(("step",))


def test_a_hook_gets_every_marker_even_from_a_decorator(no_hook):
    hook = _Calls()

    @eopt.element("work", kind="k")
    def work():
        return 3

    with marker.use_hook(hook):
        assert work() == 3
        with pytest.raises(ZeroDivisionError), eopt.element("boom"):
            _ = 1 / 0
        eopt.step()
    assert hook.log == [
        ("begin", "work", "k"),
        ("end", "work", "k"),
        ("begin", "boom", "boom"),
        ("end", "boom", "boom"),
        ("step",),
    ]


def test_the_environment_names_the_hook_and_a_bad_one_says_so(no_hook, monkeypatch):
    monkeypatch.setenv(marker.ELEMENT_HOOK_ENV, "no_such_module_xyz:factory")
    with pytest.raises(marker.ElementError, match="cannot load it"):
        eopt.step()
    marker._reset()
    monkeypatch.setenv(marker.ELEMENT_HOOK_ENV, "nocolon")
    with pytest.raises(marker.ElementError, match="expected module:factory"):
        eopt.step()


def test_under_eopt_measure_a_child_writes_its_elements_with_kinds(tmp_path):
    path = tmp_path / "regions.jsonl"
    code = (
        "import eopt\n"
        "with eopt.element('F[s0,m0]', kind='stage0.forward'):\n"
        "    pass\n"
        "with eopt.element('solo'):\n"
        "    pass\n"
    )
    env = {"EOPT_REGIONS_FILE": str(path), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    got = read_region_windows(path)
    assert [(w.name, w.element_kind) for w in got] == [
        ("F[s0,m0]", "stage0.forward"),
        ("solo", "solo"),
    ]
    assert "kind" not in got[1].to_dict()  # written only where it differs from the name


def test_profile_offers_the_meters_methods():
    from typing import get_args

    from eopt.cli.profile import METER_METHODS
    from eopt.measure.meter import MeterMethod

    assert set(METER_METHODS) == set(get_args(MeterMethod))
