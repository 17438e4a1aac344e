"""The element hook inside a program run by ``eopt profile --sim`` / ``eopt apply --sim``.

The parent writes a JSON configuration and names it in ``$EOPT_CHILD_CONFIG``; it sets
``$EOPT_ELEMENT_HOOK`` to :func:`hook`, which the first :func:`eopt.element` of the
program loads (:mod:`eopt.measure.element`). The child then holds a simulated GPU of its
own: entering an element runs its kind's simulated kernel (from ``--kernels``), at the
operating point the parent chose; the GPU's meter is read at every element edge, on the
simulator's virtual clock, by the same attribution as ``eopt measure``
(:func:`eopt.measure.regions.attribute_regions`). When the program ends, each of its
processes that marked an element writes what it saw beside the records path the
configuration names (``<stem>.<pid>.json``: a ``torchrun`` job has one simulated GPU
per rank); the parent reads them all (:func:`read_records`).

Configuration keys: ``records`` (path), ``model``, ``seed``, ``kernels`` (kind →
``{kernel, impl, workload, reads, writes, sm_share}``), ``points`` (operating points, the
first set at start), ``every_steps`` (switch to the next point every K ``eopt.step()``;
None: one point for the run), ``static_idle_s`` (idle window measuring each point's
static power, in s), ``mechanisms`` (the simulator's, default all) and ``switch``
(``module:factory`` of a per-element switcher, ``eopt apply``'s).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CHILD_CONFIG_ENV",
    "InRunChild",
    "SimChild",
    "hook",
    "in_run_hook",
    "read_records",
    "read_switches",
    "write_config",
]

#: Environment variable naming the child's JSON configuration.
CHILD_CONFIG_ENV = "EOPT_CHILD_CONFIG"
#: ``$EOPT_ELEMENT_HOOK`` for a simulated child.
HOOK_SPEC = "eopt.runs.profile_child:hook"
#: Idle before each point's static window, in s (clocks and sensor settle).
SETTLE_S = 0.5


class ChildError(RuntimeError):
    """The child could not run or report as configured (a kind without a kernel …)."""


def write_config(
    path: str | os.PathLike[str], config: Mapping[str, Any], hook_spec: str = HOOK_SPEC
) -> dict[str, str]:
    """Write a child configuration; the environment that makes a child use it."""
    Path(path).write_text(json.dumps(dict(config), allow_nan=False), encoding="utf-8")
    return {CHILD_CONFIG_ENV: str(path), "EOPT_ELEMENT_HOOK": hook_spec}


def _own_records(path: Path) -> Path:
    """Where this process writes: one file per process (``torchrun`` starts several, each
    with a simulated GPU of its own)."""
    return path.with_name(f"{path.stem}.{os.getpid()}{path.suffix}")


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """What the program's processes wrote (:meth:`SimChild.finish`), one per process.

    Raises:
        ChildError: no process wrote anything (none marked an element, or they died
            first), or one reported an error.
    """
    p = Path(path)
    files = sorted(p.parent.glob(f"{p.stem}.*{p.suffix}"))
    if not files:
        raise ChildError(
            "the program marked no element (or died before it ended): mark its parts with "
            "`with eopt.element(name, kind=...):`"
        )
    out = []
    for f in files:
        data = json.loads(f.read_text(encoding="utf-8"))
        if data.get("error"):
            raise ChildError(str(data["error"]))
        out.append(data)
    return out


class SimChild:
    """A simulated GPU driven by a program's element markers.

    Args:
        config: The parent's configuration (see the module docstring).
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        from eopt.measure.meter import Meter
        from eopt.measure.regions import RegionRecorder
        from eopt.model.operating_point import OperatingPoint
        from eopt.sim.gpu import SimulatedGPU

        self.records = Path(config["records"])
        self.kernels: dict[str, dict[str, Any]] = dict(config.get("kernels") or {})
        self.points = [OperatingPoint.from_dict(p) for p in config.get("points") or []]
        self.every_steps: int | None = config.get("every_steps")
        self.static_idle_s = float(config.get("static_idle_s") or 1.0)
        self.kernels_file = str(config.get("kernels_file") or "--kernels")
        self.gpu = SimulatedGPU(
            str(config["model"]),
            seed=int(config.get("seed") or 0),
            mechanisms=config.get("mechanisms") or "all",
        )
        self.meter = Meter(self.gpu).start()
        self.recorder = RegionRecorder(clock=self.gpu.clock)
        self.point_index = 0
        self.steps = 0
        self.static: list[dict[str, Any]] = []
        self.call_points: list[int] = []  # the point of each closed call, in order
        self._open_points: list[int] = []
        self.switch: Callable[[str], None] | None = None
        if config.get("switch"):
            module, _, name = str(config["switch"]).partition(":")
            self.switch = getattr(importlib.import_module(module), name)(self.gpu, config)
        if self.points:
            self._set_point(0)
        self.start_s = self.meter.mark()
        self._finished = False

    def _set_point(self, index: int) -> None:
        """Lock point ``index`` and measure the ready GPU's static power there."""
        from eopt.runs.repeat import measure_static_power

        self.point_index = index
        self.gpu.set_operating_point(self.points[index])
        static = measure_static_power(self.gpu, self.meter, self.static_idle_s, SETTLE_S)
        self.static.append({"point": index, **static.to_meta()})

    # The hook ------------------------------------------------------------------------------
    def begin(self, name: str, kind: str) -> None:
        """Switch (``eopt apply``), then run the kind's kernel inside the region."""
        spec = self.kernels.get(kind)
        if spec is None:
            self._fail(
                f"element {name!r}: its kind {kind!r} has no simulated kernel in "
                f"{self.kernels_file}; add a line like '{kind}: {{kernel: gemm}}'"
            )
        if self.switch is not None:
            self.switch(name)
        # The counter is read at the edge itself (virtual time stands still until the
        # launch), so the element's energy is a counter delta, not an interpolation.
        self.meter.mark()
        self.recorder.enter(name, "" if kind == name else kind)
        self._open_points.append(self.point_index)
        self.gpu.launch(
            spec["kernel"],
            spec.get("impl"),
            spec.get("workload"),
            reads=tuple(spec.get("reads") or ()),
            writes=tuple(spec.get("writes") or ()),
            sm_share=spec.get("sm_share"),
        )

    def end(self, name: str, kind: str) -> None:
        """Close the region once the GPU is done."""
        self.gpu.synchronize()
        self.meter.mark()
        self.recorder.exit(name)
        self.call_points.append(self._open_points.pop())

    def step(self) -> None:
        """Every ``every_steps`` steps, move on to the next operating point."""
        self.steps += 1
        if self.every_steps and self.steps % self.every_steps == 0 and self.points:
            nxt = self.point_index + 1
            if nxt < len(self.points):
                self._set_point(nxt)

    # The records ---------------------------------------------------------------------------
    def _fail(self, message: str) -> None:
        self._write({"error": message})
        self._finished = True
        raise SystemExit(f"eopt: {message}")

    def _write(self, data: Mapping[str, Any]) -> None:
        target = _own_records(self.records)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(dict(data), allow_nan=False), encoding="utf-8")
        tmp.replace(target)

    def finish(self) -> None:
        """Charge every element call its energy and write the records (at exit)."""
        if self._finished:
            return
        self._finished = True
        from eopt.measure.regions import attribute_regions

        self.gpu.synchronize()
        end = self.meter.mark()
        windows = list(self.recorder.windows)
        report = attribute_regions(windows, self.meter, self.start_s, end)
        # An event's id is its window's place in the list, plus one (0: not attributed).
        energy = {e.id - 1: e.energy_j for e in report.events if e.id > 0}
        calls = [
            {
                "name": w.name,
                "kind": w.element_kind,
                "point": self.call_points[k],
                "time_s": w.duration_s,
                "energy_j": energy.get(k, 0.0),
                "short": bool(self.meter.energy(w.start_s, w.end_s).short),
            }
            for k, w in enumerate(windows)
        ]
        self.meter.stop()
        self._write(
            {
                "device": self.gpu.name,
                "model": self.gpu.model,
                "report": report.to_dict(),
                "calls": calls,
                "static": self.static,
                "points": [p.to_dict() for p in self.points],
                "steps": self.steps,
            }
        )


class InRunChild:
    """``eopt profile --in-run`` on a real GPU: the program's process switches its GPU to
    the next operating point every ``every_steps`` ``eopt.step()`` calls, and notes when
    (``switches``: one ``{"point", "unix_ns"}`` line per switch, after the GPU took it).

    Elements are recorded as regions for the ``eopt measure`` around the program; the
    parent holds the devices layer's guard and restores the GPU.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        from eopt.measure.regions import RecorderHook
        from eopt.model.operating_point import OperatingPoint

        self.points = [OperatingPoint.from_dict(p) for p in config["points"]]
        self.every_steps = int(config["every_steps"])
        self.switches = Path(config["switches"])
        module, _, name = str(config.get("open") or "eopt.devices:open_devices").partition(":")
        opener = getattr(importlib.import_module(module), name)
        backend = str(config.get("backend") or "nvml")
        self.device = opener(backend, [int(config.get("gpu") or 0)], control=True)[0]
        self.regions = RecorderHook() if os.environ.get("EOPT_REGIONS_FILE") else None
        self.point_index = 0
        self.steps = 0

    def begin(self, name: str, kind: str) -> None:
        """Open the element's region."""
        if self.regions is not None:
            self.regions.begin(name, kind)

    def end(self, name: str, kind: str) -> None:
        """Close the element's region."""
        if self.regions is not None:
            self.regions.end(name, kind)

    def step(self) -> None:
        """Every ``every_steps`` steps, switch to the next point and note when."""
        import time

        self.steps += 1
        nxt = self.point_index + 1
        if self.steps % self.every_steps or nxt >= len(self.points):
            return
        self.device.synchronize()
        self.device.set_operating_point(self.points[nxt])
        self.point_index = nxt
        with self.switches.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"point": nxt, "unix_ns": time.time_ns()}) + "\n")


def read_switches(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """(unix_ns, point) of every switch an :class:`InRunChild` noted, in time order."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            out.append((int(data["unix_ns"]), int(data["point"])))
    return sorted(out)


def in_run_hook() -> InRunChild:
    """``$EOPT_ELEMENT_HOOK`` factory of ``eopt profile --in-run`` on a real GPU."""
    return InRunChild(_config())


def _config() -> dict[str, Any]:
    path = os.environ.get(CHILD_CONFIG_ENV)
    if not path:
        raise SystemExit(
            f"eopt: ${CHILD_CONFIG_ENV} is unset; run the program under `eopt profile` or "
            "`eopt apply`, or unset EOPT_ELEMENT_HOOK"
        )
    return json.loads(Path(path).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def hook() -> SimChild:
    """``$EOPT_ELEMENT_HOOK`` factory: the simulated child of ``$EOPT_CHILD_CONFIG``."""
    child = SimChild(_config())
    atexit.register(child.finish)
    sys.stdout.flush()
    return child
