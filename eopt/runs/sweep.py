"""Sweeps: measure a kernel over implementations κ × operating points ω into signatures.

A sweep walks a :class:`Grid` of cells, one device-wide operating point at a time: set the
point, measure the ready device's static power once, then measure every implementation
there (:func:`eopt.runs.repeat.measure_signature`). Each finished cell is appended to
the ``.jsonl`` library at once, so an interrupted sweep loses at most the cell it was
in; ``resume=True`` skips the cells already in the file. The device's original settings
are restored however the sweep ends.

One writer per library: a sweep holds an exclusive lock on ``<library>.lock`` (see
:mod:`eopt.model.lockfile`) from before it reads the file until it ends, and a second sweep on
the same file stops at once with :class:`LibraryInUseError`, naming the holder. On opening
the library a sweep repairs what a crash leaves at its end (:func:`repair_library_tail`):
a missing final newline is added, and a torn final line is moved to a file beside the
library and removed from it, with a warning saying where.

Cell identity. Resume and deduplication key on a cell's name, implementation κ,
workload θ, operating point ω and GPU *model* (:func:`eopt.model.library.cell_key`), never
on one GPU's name (``gpu0`` and ``sim0`` repeat on every host) or UUID: a cell measured on
any GPU of the model counts once, and a retry on another GPU of that model is not measured
again. Where each cell was measured is kept beside it in ``meta.measured_on`` (host, the
GPU's name and index there, and a real GPU's UUID; :func:`eopt.runs.gpus.place_of`).
Cells of one model measured on different GPUs are kept separate per GPU: a library holds
each cell once, with the GPU that measured it, and a sweep per GPU into its own library
characterizes each GPU on its own. On request they are pooled per model: ``eopt library
merge --pool`` turns the measurements of a cell on several GPUs into one cell
(:func:`eopt.model.library.pool_signatures`); without it, two different measurements of
one cell are a conflict, named by file and line.

Many GPUs. ``shard`` measures one share of the grid's operating points (``--shard K/N``,
:mod:`eopt.runs.shard`, for job arrays), and :mod:`eopt.runs.ray_sweep` spreads a grid
over the GPUs of a Ray cluster, one operating point at a time. Every way measures a point
through :func:`eopt.runs.point.measure_point`, and a simulated GPU given as a
:class:`~eopt.runs.gpus.GpuSpec` is seeded per cell: a simulated library is the same
whether it is swept serially, in shards or on Ray. (A simulated GPU handed in as an object
measures its cells one after another, each inheriting the state the one before left.)

Three kinds of kernel (:func:`parse_kernel`):

* ``sim:<kernel>`` — a kernel of the simulated GPU's catalog (virtual time, any machine);
* ``module:function`` or ``path/to/file.py:function`` — a Python callable run on the wall
  clock on a real GPU, imported so that no file in the working directory can stand in for
  an installed module (:mod:`eopt.runs.user_code`);
* commands, one per implementation (the whole process is the measured region): a shell
  command line, or an argument list run without a shell.

Grids are bounded before anything is allocated: a grid holds at most
:data:`MAX_GRID_CELLS` cells, and so does every ``START:STOP:STEP`` range. Without
``clocks``, :meth:`Grid.build` leaves the clock alone; ``clocks="coarse"`` takes
:func:`coarse_clocks` of the device's supported clocks (what ``eopt sweep`` does by
default), ``"all"`` every one. Values the device does not support are listed all at
once, or snapped to the nearest supported ones with ``snap=True``.

Real work (callables, commands) can only be measured on a real GPU: the simulated GPU's
sensors cannot see it, and :func:`sweep` refuses rather than report made-up numbers.

A window ends when the queued GPU work is done, not when a callable returns: CUDA launches
are asynchronous, and NVML cannot see CUDA streams, so an NVML device's ``synchronize``
returns at once. A Python callable on such a GPU needs a ``sync`` (``--sync``: ``torch``,
``cupy``, ``module:function``, or ``none`` for a callable that waits for its own work);
without one, :func:`resolve_sync` takes ``torch.cuda.synchronize`` or cupy's when exactly
one of them was imported with the kernel, and says so, and refuses otherwise. A command's
work ends with its process.

What a cell records is what the device ran at, read back, never the request alone: the
per-window SM clock, clocks-event reasons and enforced power limit
(:mod:`eopt.runs.repeat`), with flags where they differ from the cell's operating
point; the meter's method, power field and periods; and notes the device made while
setting the point. A setting the GPU cannot make (a memory-clock lock it does not support,
a power limit on a GPU without power management) fails the sweep before that point is
measured.

Example:
    >>> from eopt.sim.gpu import SimulatedGPU
    >>> gpu = SimulatedGPU()
    >>> kernel = parse_kernel("sim:gemm", params={"m": 4096, "n": 4096, "k": 4096})
    >>> grid = Grid.build(kernel, gpu, clocks="1410,1200")
    >>> len(Grid.build(kernel, gpu, clocks="coarse").sm_clocks_mhz)
    21
    >>> result = sweep(kernel, grid, gpu, "gemm.jsonl")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eopt.devices.backends import backend_of
from eopt.devices.base import Device, DeviceError
from eopt.measure.command import MeasureError, require_wall_clock
from eopt.measure.meter import Meter, MeterMethod
from eopt.model.library import (
    append_signature,
    cell_key,
    cell_key_of,
    library_lock,
    read_library,
)
from eopt.model.lockfile import LockBusyError, ProcessLock
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.runs.failed import FailedCell
from eopt.runs.gpus import GpuSpec, fresh_opener
from eopt.runs.point import PointWork, measure_point
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.shard import Shard, shard_points
from eopt.runs.user_code import UserCodeError, import_callable, module_label

__all__ = [
    "MAX_GRID_CELLS",
    "SYNC_WORDS",
    "Cell",
    "CommandKernel",
    "Grid",
    "Kernel",
    "KernelError",
    "LibraryInUseError",
    "PythonKernel",
    "SimKernel",
    "SweepError",
    "SweepPlan",
    "SweepResult",
    "cell_meta",
    "cell_workload",
    "check_sweep",
    "coarse_clocks",
    "grid_cells",
    "hold_library",
    "library_lock",
    "open_sweep_gpu",
    "parse_kernel",
    "parse_params",
    "parse_values",
    "plan_sweep",
    "repair_library_tail",
    "resolve_sync",
    "sweep",
    "synchronize_waits",
]


class SweepError(ValueError):
    """A bad kernel or grid specification, or a sweep that cannot run as asked."""


class KernelError(RuntimeError):
    """The user's kernel (a callable) raised; the original exception is chained."""


class LibraryInUseError(SweepError):
    """Another process is writing to the signature library (it holds its lock)."""


# Kernels ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SimKernel:
    """A kernel of the simulated GPU's catalog.

    Attributes:
        kernel: Catalog name (``gemm``, ``attention`` …).
        workload: θ, completed with the kernel's defaults.
        impls: Implementations to sweep (default: all of the kernel's).
        name: Element name of the signatures (default: the kernel's name).
        wall_s_per_sim_s: Wall-clock seconds each invocation also takes per simulated
            second of it (0: none). The numbers stay the simulator's; the wall time makes
            simulated GPUs behave like real ones where only elapsed time matters (how a
            sweep over many GPUs scales, benchmarks/sweep_scaling.py).
    """

    kernel: str
    workload: Mapping[str, Any]
    impls: tuple[str, ...]
    name: str
    kind: str = "sim"
    needs_wall_clock: bool = False
    wall_s_per_sim_s: float = 0.0

    def implementations(self) -> list[str]:
        """The implementations κ to sweep."""
        return list(self.impls)

    def runner(self, impl: str, device: Device) -> Callable[[], object]:
        """One invocation of ``impl`` on ``device``.

        Raises:
            SweepError: when ``device`` is not a simulated GPU.
        """
        launch = getattr(device, "launch", None)
        if launch is None:
            raise SweepError(
                f"sim:{self.kernel} runs only on the simulated GPU, not on {device.name} "
                f"({device.model}); use --backend sim"
            )
        workload = dict(self.workload)
        scale = self.wall_s_per_sim_s
        if not scale > 0:
            return lambda: launch(self.kernel, impl, workload)

        def run_in_real_time() -> None:
            time.sleep(launch(self.kernel, impl, workload) * scale)

        return run_in_real_time

    def describe(self) -> str:
        """The kernel spec as given on the command line."""
        return f"sim:{self.kernel}"

    def check(self, device: Device) -> None:
        """Refuse, before measuring, what the simulated ``device`` cannot run.

        Raises:
            SweepError: when ``device`` is not simulated, or an invocation would run
                longer than the simulator allows (the catalog's bound, e.g. ``m=1e30``).
        """
        demand = getattr(device, "kernel_demand", None)
        if demand is None:
            raise SweepError(
                f"sim:{self.kernel} runs only on the simulated GPU, not on {device.name} "
                f"({device.model}); use --backend sim"
            )
        for impl in self.impls:
            try:
                demand(self.kernel, impl, dict(self.workload))
            except ValueError as exc:
                raise SweepError(f"sim:{self.kernel}: {exc}") from None


@dataclass(frozen=True)
class PythonKernel:
    """Python callables, either one taking ``impl=`` or one per implementation.

    Attributes:
        functions: Implementation name → callable.
        name: Element name.
        workload: Keyword arguments passed to every call (θ).
        pass_impl: Whether the callable receives ``impl=<name>`` (one callable for all).
        sync: Waits for queued GPU work (``--sync``); the device's own when None (see
            :func:`resolve_sync`: on an NVML GPU that waits for nothing).
        spec: The spec string, for the record.
        sync_spec: How ``sync`` was given (``torch.cuda:synchronize``, ``none`` …), for
            the record.
    """

    functions: Mapping[str, Callable[..., object]]
    name: str
    workload: Mapping[str, Any] = field(default_factory=dict)
    pass_impl: bool = False
    sync: Callable[[], object] | None = None
    spec: str = ""
    kind: str = "python"
    needs_wall_clock: bool = True
    sync_spec: str | None = None

    def implementations(self) -> list[str]:
        """The implementations κ to sweep."""
        return list(self.functions)

    def runner(self, impl: str, device: Device) -> Callable[[], object]:
        """One invocation of ``impl``."""
        fn = self.functions[impl]
        kwargs = dict(self.workload)
        if self.pass_impl:
            kwargs["impl"] = impl

        def run() -> object:
            try:
                return fn(**kwargs)
            except Exception as exc:  # the user's code: say where, keep the chain
                raise KernelError(
                    f"kernel {self.describe()!r}, implementation {impl!r} raised "
                    f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"
                ) from exc

        return run

    def describe(self) -> str:
        """The kernel spec as given on the command line."""
        return self.spec or ",".join(self.functions)


@dataclass(frozen=True)
class CommandKernel:
    """Commands, one per implementation; each run of the process is one invocation.

    Attributes:
        commands: Implementation name → a shell command line (a ``str``, run by
            ``/bin/sh``), or an argument list (a ``tuple`` of strings, run without a
            shell: no globbing, pipes or variable expansion).
        name: Element name.
        workload: θ recorded with the signatures (not passed to the commands).
    """

    commands: Mapping[str, str | tuple[str, ...]]
    name: str
    workload: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "command"
    needs_wall_clock: bool = True
    sync: Callable[[], object] | None = None

    def implementations(self) -> list[str]:
        """The implementations κ to sweep."""
        return list(self.commands)

    def runner(self, impl: str, device: Device) -> Callable[[], object]:
        """One run of ``impl``'s command.

        Raises:
            MeasureError: when the command exits with a non-zero status.
        """
        command = self.commands[impl]
        shell = isinstance(command, str)
        shown = command if isinstance(command, str) else shlex.join(command)

        def run() -> None:
            try:
                status = subprocess.run(command, shell=shell, check=False).returncode
            except OSError as exc:  # an argument list whose program cannot be started
                raise MeasureError(
                    f"command for implementation {impl!r} could not start: {exc}"
                ) from None
            if status != 0:
                raise MeasureError(
                    f"command for implementation {impl!r} exited with status {status}: {shown}"
                )

        return run

    def describe(self) -> str:
        """The commands, for the record (argument lists marked ``argv:``)."""
        return "; ".join(
            f"{k}={v}" if isinstance(v, str) else f"{k}=argv:{shlex.join(v)}"
            for k, v in self.commands.items()
        )


Kernel = SimKernel | PythonKernel | CommandKernel


def _number(text: str) -> float | int | str:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text and "e" not in text else value


def parse_params(items: Iterable[str]) -> dict[str, Any]:
    """``["m=8192", "dtype=bf16"]`` → ``{"m": 8192, "dtype": "bf16"}``.

    Raises:
        SweepError: for an item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SweepError(f"--param {item!r}: expected KEY=VALUE, e.g. --param m=8192")
        out[key.strip()] = _number(value.strip())
    return out


#: ``--sync`` words: frameworks whose own call waits for all of this process's GPU work,
#: and ``none`` for a callable that returns only when its work is done.
SYNC_WORDS: Mapping[str, str] = {
    "torch": "torch.cuda:synchronize",
    "cupy": "cupy.cuda.runtime:deviceSynchronize",
    "none": "",
}


def _no_wait() -> None:
    """``--sync none``: the callable itself returns only when its GPU work is done."""


def _parse_sync(sync: str) -> tuple[Callable[[], object], str]:
    """``--sync`` → (the waiting function, how it was given)."""
    word = sync.strip()
    target = SYNC_WORDS.get(word.lower())
    if target == "":
        return _no_wait, "none"
    spec = target or word
    return _import_callable(spec), spec


def _import_callable(spec: str) -> Callable[..., object]:
    try:
        return import_callable(spec)
    except UserCodeError as exc:
        raise SweepError(str(exc)) from exc.__cause__


def parse_argv(text: str, option: str = "--cmd-argv") -> tuple[str, ...]:
    """``"./train --lr 0.1 'a b'"`` → ``("./train", "--lr", "0.1", "a b")``.

    The text is split by POSIX shell quoting rules (:func:`shlex.split`) but never run by
    a shell, and the program must exist (a path, or a name on ``PATH``).

    Raises:
        SweepError: for unbalanced quotes, an empty list, or a program not found.
    """
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise SweepError(f"{option} {text!r}: {exc}; quote as in a shell") from None
    if not argv:
        raise SweepError(f"{option} {text!r}: empty command")
    if shutil.which(argv[0]) is None:
        raise SweepError(
            f"{option} {text!r}: no program {argv[0]!r} (not an executable file, nor on PATH)"
        )
    return argv


def parse_kernel(
    spec: str | None,
    *,
    params: Mapping[str, Any] | None = None,
    impls: Sequence[str] | None = None,
    commands: Mapping[str, str | tuple[str, ...]] | None = None,
    sync: str | None = None,
    name: str | None = None,
) -> Kernel:
    """Build a kernel from command-line style arguments.

    Args:
        spec: ``sim:<kernel>``, ``module:function`` or ``module:fn_a,module:fn_b``; may
            be None when ``commands`` are given.
        params: Workload θ (``--param``): the simulated kernel's sizes, or keyword
            arguments of the Python callables.
        impls: Implementations (``--impls``): a subset of the simulated kernel's, or the
            names passed as ``impl=`` to a single callable.
        commands: Implementation → shell command line (``--cmd NAME='…'``) or argument
            list (a tuple, ``--cmd-argv``; see :func:`parse_argv`).
        sync: What waits for queued GPU work (``--sync``): ``torch``, ``cupy``,
            ``module:function``, or ``none`` (the callable waits for its own work).
        name: Element name of the signatures.

    Raises:
        SweepError: naming what is wrong and how to write it.
    """
    theta = dict(params or {})
    if commands:
        if spec:
            raise SweepError("give either a KERNEL or --cmd commands, not both")
        if impls:
            raise SweepError("--impls does not apply to --cmd: each --cmd NAME=… is one")
        return CommandKernel(dict(commands), name or "command", theta)
    if not spec:
        raise SweepError("no kernel given: pass sim:<kernel>, module:function or --cmd NAME='…'")
    if spec.startswith("sim:"):
        if sync:
            raise SweepError("--sync does not apply to simulated kernels")
        from eopt.sim.kernels import get_kernel, kernel_names

        kernel = spec[4:]
        try:
            catalog = get_kernel(kernel)
        except (KeyError, ValueError):
            raise SweepError(
                f"{spec!r}: no simulated kernel {kernel!r}; known: {', '.join(kernel_names())}"
            ) from None
        try:
            workload = catalog.workload(theta)
        except (KeyError, ValueError) as exc:
            msg = exc.args[0] if exc.args else str(exc)
            raise SweepError(f"{spec}: {msg}") from None
        known = list(catalog.implementations)
        chosen = list(impls) if impls else known
        unknown = [i for i in chosen if i not in known]
        if unknown:
            raise SweepError(
                f"{spec}: unknown implementation(s) {', '.join(unknown)}; known: {', '.join(known)}"
            )
        return SimKernel(catalog.name, workload, tuple(chosen), name or catalog.name)
    sync_fn, sync_spec = _parse_sync(sync) if sync else (None, None)
    specs = [s.strip() for s in spec.split(",") if s.strip()]
    if len(specs) > 1:
        if impls:
            raise SweepError("--impls does not apply to one callable per implementation")
        functions = {s.rpartition(":")[2].split(".")[-1]: _import_callable(s) for s in specs}
        if len(functions) != len(specs):
            raise SweepError(f"{spec!r}: two callables share a name; implementations must differ")
        element = name or module_label(specs[0].rpartition(":")[0])
        return PythonKernel(functions, element, theta, False, sync_fn, spec, sync_spec=sync_spec)
    fn = _import_callable(specs[0])
    element = name or specs[0].rpartition(":")[2]
    if impls:
        return PythonKernel(
            {i: fn for i in impls}, element, theta, True, sync_fn, spec, sync_spec=sync_spec
        )
    return PythonKernel({"default": fn}, element, theta, False, sync_fn, spec, sync_spec=sync_spec)


# Grids ------------------------------------------------------------------------------------
#: The most cells one sweep may hold (implementations × SM clocks × memory clocks × power
#: limits), and the most values one ``START:STOP:STEP`` range may expand to: checked
#: before anything is allocated. At one second a cell that is almost three hours.
MAX_GRID_CELLS = 10_000

#: How many SM clocks the coarse grid (:func:`coarse_clocks`) takes at most.
COARSE_CLOCKS = 21


def _count_text(count: float) -> str:
    return f"{count:.0f}" if count < 1e6 else f"{count:.3g}"


def parse_values(spec: str, what: str, unit: str) -> list[float]:
    """``"1410,1200"`` or ``"900:1410:30"`` (inclusive range) → numbers, descending.

    Raises:
        SweepError: naming the option and the expected forms, for values that are not
            finite positive numbers, and for ranges or lists of more than
            :data:`MAX_GRID_CELLS` values (checked before they are built).
    """
    text = spec.strip()
    hint = f"expected e.g. {what} 1410,1200 or {what} 900:1410:30 ({unit})"
    if not text:
        raise SweepError(f"{what}: empty; {hint}")
    try:
        parts = [float(p) for p in text.split(":" if ":" in text else ",") if p.strip()]
    except ValueError:
        raise SweepError(f"{what} {spec!r}: not a list or range of numbers; {hint}") from None
    if not all(math.isfinite(p) for p in parts):
        raise SweepError(f"{what} {spec!r}: values must be finite numbers ({unit}); {hint}")
    if ":" in text:
        if len(parts) != 3:
            raise SweepError(f"{what} {spec!r}: a range is START:STOP:STEP; {hint}")
        lo, hi, step = parts
        if step <= 0 or hi < lo:
            raise SweepError(f"{what} {spec!r}: need START ≤ STOP and STEP > 0; {hint}")
        span = (hi - lo) / step + 1.0  # inf when the range overflows a float
        if not span < MAX_GRID_CELLS + 1:
            raise SweepError(
                f"{what} {spec!r}: the range holds {_count_text(span)} values, more than a "
                f"sweep's "
                f"limit of {MAX_GRID_CELLS} cells; use a larger STEP"
            )
        count = math.floor((hi - lo) / step + 1e-9) + 1
        values = [lo + i * step for i in range(count)]
    else:
        if len(parts) > MAX_GRID_CELLS:
            raise SweepError(
                f"{what}: {len(parts)} values, more than a sweep's limit of {MAX_GRID_CELLS} cells"
            )
        values = parts
    if any(not v > 0 for v in values):
        raise SweepError(f"{what} {spec!r}: values must be positive ({unit})")
    return sorted(set(values), reverse=True)


def coarse_clocks(supported: Sequence[float], count: int = COARSE_CLOCKS) -> list[float]:
    """At most ``count`` clocks spread evenly over ``supported``, highest and lowest included.

    Every k-th supported clock from the highest, with the smallest k that keeps the count
    (``k = ceil((n − 1)/(count − 1))``), plus the lowest; all of them when there are no
    more than ``count``. An A100's 81 clocks (210–1410 MHz every 15) give 21, every 60 MHz.

    Args:
        supported: Supported clocks, in MHz (any order).
        count: The most clocks to return (≥ 2).

    Returns:
        Clocks in MHz, descending.
    """
    clocks = sorted({float(c) for c in supported}, reverse=True)
    if len(clocks) <= count:
        return clocks
    stride = math.ceil((len(clocks) - 1) / (max(count, 2) - 1))
    chosen = clocks[::stride]
    if chosen[-1] != clocks[-1]:
        chosen.append(clocks[-1])
    return chosen


@dataclass(frozen=True)
class Cell:
    """One (κ, ω) cell of a sweep."""

    impl: str
    op_point: OperatingPoint


@dataclass(frozen=True)
class Grid:
    """Implementations × SM clocks × power limits (× memory clocks).

    ``None`` in a list means "leave this setting as it is".

    Attributes:
        impls: Implementations κ.
        sm_clocks_mhz: SM clocks to lock, in MHz.
        power_limits_w: Power limits, in W.
        mem_clocks_mhz: Memory clocks to lock, in MHz.
        notes: What :meth:`build` changed in the request (values snapped to supported
            ones), one line each, for the user.
    """

    impls: tuple[str, ...]
    sm_clocks_mhz: tuple[float | None, ...] = (None,)
    power_limits_w: tuple[float | None, ...] = (None,)
    mem_clocks_mhz: tuple[float | None, ...] = (None,)
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def controls(self) -> bool:
        """Whether the grid changes any device setting."""
        return any(
            v is not None for v in (*self.sm_clocks_mhz, *self.power_limits_w, *self.mem_clocks_mhz)
        )

    def op_points(self) -> list[OperatingPoint]:
        """Device-wide operating points, in sweep order."""
        return [
            OperatingPoint(sm, mem, pl)
            for sm in self.sm_clocks_mhz
            for mem in self.mem_clocks_mhz
            for pl in self.power_limits_w
        ]

    def cells(self) -> list[Cell]:
        """Every cell, grouped by operating point."""
        return [Cell(impl, op) for op in self.op_points() for impl in self.impls]

    def __len__(self) -> int:
        return (
            len(self.impls)
            * len(self.sm_clocks_mhz)
            * len(self.mem_clocks_mhz)
            * len(self.power_limits_w)
        )

    def check_size(self) -> None:
        """Refuse a grid of more than :data:`MAX_GRID_CELLS` cells (nothing is built).

        Raises:
            SweepError: naming the factors of the size.
        """
        if len(self) > MAX_GRID_CELLS:
            raise SweepError(
                f"the grid holds {len(self)} cells ({len(self.impls)} implementations × "
                f"{len(self.sm_clocks_mhz)} SM clocks × {len(self.mem_clocks_mhz)} memory "
                f"clocks × {len(self.power_limits_w)} power limits), more than a sweep's "
                f"limit of {MAX_GRID_CELLS}; sweep fewer values"
            )

    @classmethod
    def build(
        cls,
        kernel: Kernel,
        device: Device,
        clocks: str | None = None,
        power_limits: str | None = None,
        mem_clocks: str | None = None,
        *,
        snap: bool = False,
    ) -> Grid:
        """Parse ``--clocks`` / ``--power-limits`` / ``--mem-clocks`` against a device.

        Clock specs are lists, ``START:STOP:STEP`` ranges (MHz), or words: ``all`` (every
        supported clock), ``coarse`` (SM clocks only: :func:`coarse_clocks`), ``current``
        (leave it; the same as None).

        Args:
            kernel: The kernel (its implementations are the grid's κ).
            device: The device whose supported values the grid must use.
            clocks: SM clocks; None leaves the clock as it is.
            power_limits: Power limits in W; None leaves the limit.
            mem_clocks: Memory clocks; None leaves them.
            snap: Move clocks the device does not support to the nearest supported ones
                (listed in :attr:`notes`) instead of refusing them; values outside the
                supported range by more than one step are refused either way.

        Raises:
            SweepError: for a bad spec, values the device does not support (all of them
                in one message, with the supported range and step), or a grid of more
                than :data:`MAX_GRID_CELLS` cells.
        """
        notes: list[str] = []
        sm = _clock_axis(clocks, [float(c) for c in device.supported_sm_clocks_mhz()],
                         "--clocks", "SM clock", device, snap, notes, coarse=True)  # fmt: skip
        mem = _clock_axis(mem_clocks, [float(c) for c in device.supported_mem_clocks_mhz()],
                          "--mem-clocks", "memory clock", device, snap, notes)  # fmt: skip
        pl: list[float | None] = [None]
        if power_limits:
            try:
                lo, hi = device.power_limit_range_w()
            except DeviceError as exc:  # no power management: the request cannot be met
                raise SweepError(
                    f"--power-limits: {device.name} ({device.model}) has no settable power "
                    f"limit ({exc}); leave --power-limits out"
                ) from None
            values = parse_values(power_limits, "--power-limits", "W")
            bad = [v for v in values if not lo - 1e-9 <= v <= hi + 1e-9]
            if bad:
                raise SweepError(
                    f"--power-limits: {', '.join(f'{v:g}' for v in bad)} W outside "
                    f"{device.name}'s settable range {lo:g}–{hi:g} W"
                )
            pl = list(values)
        grid = cls(tuple(kernel.implementations()), tuple(sm), tuple(pl), tuple(mem),
                   tuple(notes))  # fmt: skip
        grid.check_size()
        return grid


def _clock_axis(
    spec: str | None,
    supported: list[float],
    option: str,
    what: str,
    device: Device,
    snap: bool,
    notes: list[str],
    coarse: bool = False,
) -> list[float | None]:
    """One clock axis of a grid: a spec (list, range, word) against supported clocks."""
    word = (spec or "current").strip().lower()
    if word == "current":
        return [None]
    if not supported:
        raise SweepError(f"{option}: {device.name} ({device.model}) reports no settable {what}s")
    if word == "all":
        return list(sorted(set(supported), reverse=True))
    if word == "coarse":
        if not coarse:
            raise SweepError(f"{option} coarse: only --clocks has a coarse grid; use all")
        return list(coarse_clocks(supported))
    values = parse_values(spec or "", option, "MHz")
    return list(_match_supported(values, supported, option, what, device, snap, notes))


def _step_text(supported: list[float]) -> str:
    """``"every 15 MHz"`` or ``"every 7–15 MHz"`` for a table of supported clocks."""
    ordered = sorted(set(supported))
    gaps = sorted({round(b - a, 3) for a, b in itertools.pairwise(ordered)})
    if not gaps:
        return "one value"
    if gaps[-1] - gaps[0] <= 0.5:
        return f"every {gaps[0]:g} MHz"
    return f"every {gaps[0]:g}–{gaps[-1]:g} MHz"


def _match_supported(
    values: list[float],
    supported: list[float],
    option: str,
    what: str,
    device: Device,
    snap: bool,
    notes: list[str],
) -> list[float]:
    """``values`` as supported clocks: exact, snapped (``snap``), or one error for all."""
    lo, hi = min(supported), max(supported)
    ordered = sorted(set(supported))
    widest = max((b - a for a, b in itertools.pairwise(ordered)), default=0.0)
    exact: dict[float, float] = {}
    off: dict[float, float] = {}
    for v in values:
        nearest = min(supported, key=lambda c: abs(c - v))
        (exact if abs(nearest - v) <= 0.5 else off)[v] = nearest
    table = f"supported: {lo:g}–{hi:g} MHz, {_step_text(supported)} ({len(set(supported))} values)"
    if off and not snap:
        plural = "s" if len(off) > 1 else ""
        listed = ", ".join(f"{v:g}" for v in off)
        near = ", ".join(f"{n:g}" for n in off.values())
        raise SweepError(
            f"{option}: {device.name} ({device.model}) does not support {what}{plural} "
            f"{listed} MHz (nearest {near}); {table}; pass --snap to use the nearest, or "
            f"{option} all"
        )
    outside = [v for v in off if not lo - widest - 0.5 <= v <= hi + widest + 0.5]
    if outside:
        raise SweepError(
            f"{option}: {', '.join(f'{v:g}' for v in outside)} MHz is outside "
            f"{device.name}'s {what} range {lo:g}–{hi:g} MHz; --snap only moves values by "
            "less than a step"
        )
    if off:
        moved = ", ".join(f"{v:g}→{n:g}" for v, n in off.items())
        notes.append(f"{option}: snapped to the nearest supported {what}s: {moved} MHz")
    return sorted({*exact.values(), *off.values()}, reverse=True)


# Frameworks a kernel may have imported whose own call waits for all of this process's
# GPU work (see SYNC_WORDS): where that function sits in the imported module.
_FRAMEWORK_SYNC = {
    "torch": ("cuda", "synchronize"),
    "cupy": ("cuda", "runtime", "deviceSynchronize"),
}


def synchronize_waits(device: Device) -> bool:
    """Whether ``device.synchronize`` waits for the work a Python callable queues.

    A device says so in a ``synchronize_waits`` attribute (an NVML GPU's is False: NVML
    cannot see CUDA streams, so its ``synchronize`` returns at once; the simulator's waits
    for its queued kernels); a device that does not say is taken to wait.
    """
    said = getattr(device, "synchronize_waits", None)
    return said if isinstance(said, bool) else True


def resolve_sync(kernel: Kernel, device: Device) -> tuple[Kernel, str | None]:
    """Make sure each window of ``kernel`` on ``device`` waits for its GPU work.

    A Python callable without a ``sync``, on a device whose ``synchronize`` waits for
    nothing (an NVML GPU, :func:`synchronize_waits`), would be measured launching its
    work, not doing it. Then the framework it imported is synchronized: torch's
    ``torch.cuda.synchronize`` or cupy's ``deviceSynchronize``, when exactly one of them is
    imported (by the kernel's module, since eopt imports neither).

    Returns:
        The kernel (with ``sync`` set where one was taken) and a note saying which, or
        None when nothing had to be chosen.

    Raises:
        SweepError: when no sync can be chosen: neither or both frameworks are imported.
    """
    if not isinstance(kernel, PythonKernel) or kernel.sync is not None:
        return kernel, None
    if synchronize_waits(device):
        return kernel, None
    found = [name for name in _FRAMEWORK_SYNC if name in sys.modules]
    if len(found) == 1:
        spec, path = SYNC_WORDS[found[0]], _FRAMEWORK_SYNC[found[0]]
        fn: Any = sys.modules[found[0]]
        try:
            for attr in path:
                fn = getattr(fn, attr)
        except AttributeError:
            fn = None
        if callable(fn):
            note = (
                f"no --sync given: each window waits with {spec.replace(':', '.')}, since "
                f"{found[0]} is imported with kernel {kernel.describe()!r}; pass --sync to "
                "choose (--sync none if the callable waits for its own GPU work)"
            )
            return replace(kernel, sync=fn, sync_spec=f"{spec} (chosen: {found[0]} imported)"), note
    which = (
        f"both {' and '.join(found)} are imported"
        if found
        else "neither torch nor cupy is imported"
    )
    raise SweepError(
        f"kernel {kernel.describe()!r} runs on {device.name} ({device.model}), whose "
        "synchronize cannot see CUDA work: without --sync each window would end when the "
        "work is queued, not done, and measure only its launch. Pass --sync torch, --sync "
        "cupy or --sync module:function, or --sync none if the callable returns only when "
        f"its GPU work is done ({which} with the kernel, so eopt cannot choose)"
    )


def check_sweep(kernel: Kernel, grid: Grid, device: Device, control: bool = True) -> None:
    """Everything that can be refused before a sweep starts, without measuring.

    :func:`sweep` calls it first; a caller may call it earlier to report problems before
    opening the library.

    Raises:
        SweepError: for a grid over :data:`MAX_GRID_CELLS` cells, a grid that sets the
            device when ``control`` is False, a simulated kernel the device cannot run
            (not simulated, or an invocation longer than the simulator's bound), or a
            Python callable whose windows would not wait for its GPU work
            (:func:`resolve_sync`).
        MeasureError: for real work (callables, commands) on a simulated GPU.
    """
    grid.check_size()
    if kernel.needs_wall_clock:
        require_wall_clock(device, f"kernel {kernel.describe()!r}")
    resolve_sync(kernel, device)
    if not control and grid.controls:
        raise SweepError(
            "measure-only mode (--no-control) measures at the current setting and never "
            "changes the GPU: drop --clocks, --power-limits and --mem-clocks"
        )
    if isinstance(kernel, SimKernel):
        kernel.check(device)


# The library file -------------------------------------------------------------------------
def repair_library_tail(path: str | os.PathLike[str]) -> list[str]:
    """Repair what an interrupted write leaves at the end of a ``.jsonl`` library.

    A final line without its newline is completed (else the next appended cell would be
    glued onto it). A final line that is not valid JSON, as a crash in the middle of a
    write leaves it, is moved to ``<library>.torn-<UTC time>`` beside the library and
    removed from the library. Lines before the last are never touched: a bad line there
    is reported by the reader with its line number.

    Call it only while holding the library's lock (:func:`library_lock`).

    Returns:
        One warning per repair, naming the file, the line and where a torn line went.
    """
    lib = Path(path)
    try:
        data = lib.read_bytes()
    except FileNotFoundError:
        return []
    content = data.rstrip()  # trailing blank lines are not a line to judge
    if not content:
        return []
    start = content.rfind(b"\n") + 1
    last = content[start:]
    line_no = content.count(b"\n", 0, start) + 1
    try:
        json.loads(last.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = lib.with_name(f"{lib.name}.torn-{stamp}")
        n = 1
        while aside.exists():  # never overwrite an earlier torn line
            aside = lib.with_name(f"{lib.name}.torn-{stamp}-{n}")
            n += 1
        aside.write_bytes(data[start:])
        with lib.open("r+b") as handle:
            handle.truncate(start)
            handle.flush()
            os.fsync(handle.fileno())
        return [
            f"{lib}:{line_no}: the last line was cut off (an interrupted write); moved it to "
            f"{aside} and removed it from the library; its cell will be measured again"
        ]
    if data.endswith(b"\n"):
        return []
    with lib.open("ab") as handle:
        handle.write(b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    return [f"{lib}:{line_no}: the last line had no newline; added one"]


# The sweep --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepResult:
    """What a sweep produced.

    Attributes:
        signatures: Every cell of the grid (of the shard, for one), in grid order; resumed
            ones read from the file. Cells that failed (``failed``) are not among them.
        measured: The cells measured by this run.
        skipped: Cells already in the file (``resume``).
        path: The library file.
        repairs: Warnings about the library's end repaired on opening it
            (:func:`repair_library_tail`).
        failed: Cells a distributed sweep gave up on (:mod:`eopt.runs.failed`); a serial
            sweep stops at a failing cell instead.
        duplicates: Measurements dropped because their cell was in the library already (a
            worker that finished a cell a retry had measured too).
    """

    signatures: tuple[Signature, ...]
    measured: tuple[Signature, ...]
    skipped: int
    path: Path
    repairs: tuple[str, ...] = ()
    failed: tuple[FailedCell, ...] = ()
    duplicates: int = 0


ProgressFn = Callable[[int, int, Cell, Signature | None], None]


def open_sweep_gpu(gpu: Device | GpuSpec) -> tuple[Device, GpuSpec | None]:
    """The device a sweep measures on, and the spec it was opened from (None for a device
    handed in as an object).

    Raises:
        DeviceError: when a spec's GPU cannot be opened.
    """
    if isinstance(gpu, GpuSpec):
        return gpu.open(), gpu
    return gpu, None


def cell_workload(kernel: Kernel) -> dict[str, Any]:
    """θ as a sweep's signatures record it (a simulated kernel's with its catalog name)."""
    workload = dict(kernel.workload)
    if isinstance(kernel, SimKernel):
        workload = {"kernel": kernel.kernel, **workload}
    return workload


def cell_meta(kernel: Kernel, grid: Grid, device: Device) -> dict[str, Any]:
    """What every cell of a sweep on ``device`` records beside the measurement."""
    extra: dict[str, Any] = {
        "kernel_spec": kernel.describe(),
        "kernel_kind": kernel.kind,
        "sync": _sync_label(kernel),
        "op_point_set": grid.controls,
    }
    uuid = getattr(device, "uuid", None)
    if isinstance(uuid, str):
        extra["device_uuid"] = uuid
    return extra


def grid_cells(grid: Grid, shard: Shard | None = None) -> list[Cell]:
    """The grid's cells in sweep order; only ``shard``'s (:mod:`eopt.runs.shard`) when
    given."""
    cells = grid.cells()
    if shard is None:
        return cells
    mine = set(shard_points(grid.op_points(), len(grid.impls), shard))
    return [c for c in cells if c.op_point in mine]


@dataclass(frozen=True)
class SweepPlan:
    """A sweep's cells against its library, worked out under the library's lock.

    Attributes:
        cells: The sweep's cells, in grid order.
        keys: Each cell's identity (:func:`eopt.model.library.cell_key_of`).
        todo: The cells to measure, with their keys.
        existing: The library's cells by key.
        workload: θ as the signatures record it.
        repairs: Warnings about the library's end repaired on opening it.
    """

    cells: tuple[Cell, ...]
    keys: tuple[str, ...]
    todo: tuple[tuple[Cell, str], ...]
    existing: Mapping[str, Signature]
    workload: Mapping[str, Any]
    repairs: tuple[str, ...]

    def ordered(self, measured: Iterable[Signature]) -> tuple[Signature, ...]:
        """Every cell of the plan, in grid order: ``measured`` or the library's."""
        found = {**self.existing, **{cell_key(s): s for s in measured}}
        return tuple(found[k] for k in self.keys if k in found)


def plan_sweep(
    kernel: Kernel,
    grid: Grid,
    device: Device,
    path: Path,
    *,
    resume: bool,
    warn: Callable[[str], None] | None = None,
    shard: Shard | None = None,
) -> SweepPlan:
    """Repair the library's end, read it, and work out which cells to measure.

    Call it only while holding the library's lock (:func:`library_lock`).

    Raises:
        SweepError: for cells already in the library without ``resume``.
        LibraryError: for a library that cannot be read.
    """
    repairs = repair_library_tail(path)
    for message in repairs:
        _warn(warn, message)
    existing: dict[str, Signature] = {}
    if path.exists() and path.stat().st_size > 0:
        existing = {cell_key(s): s for s in read_library(path)}
    current = device.current_operating_point().device_wide()
    workload = cell_workload(kernel)
    model = str(device.model)
    cells = grid_cells(grid, shard)
    points = [c.op_point if grid.controls else current for c in cells]
    cells = [Cell(c.impl, p) for c, p in zip(cells, points, strict=True)]
    keys = [cell_key_of(kernel.name, c.impl, c.op_point, workload, model) for c in cells]
    already = [k for k in keys if k in existing]
    if already and not resume:
        raise SweepError(
            f"{path}: already holds {len(already)} of this sweep's {len(cells)} cells; pass "
            "--resume to skip them, or write to another file"
        )
    todo = tuple((c, k) for c, k in zip(cells, keys, strict=True) if k not in existing)
    return SweepPlan(tuple(cells), tuple(keys), todo, existing, workload, tuple(repairs))


def sweep(
    kernel: Kernel,
    grid: Grid,
    device: Device | GpuSpec,
    out_path: str | os.PathLike[str],
    *,
    resume: bool = False,
    progress: ProgressFn | None = None,
    policy: RepeatPolicy | None = None,
    control: bool = True,
    method: MeterMethod = "auto",
    before_cell: Callable[[Cell], None] | None = None,
    warn: Callable[[str], None] | None = None,
    shard: Shard | None = None,
) -> SweepResult:
    """Measure every cell of ``grid`` and append each signature to ``out_path`` at once.

    The library is locked for the whole sweep (a second writer gets
    :class:`LibraryInUseError` at once) and its end repaired on opening
    (:func:`repair_library_tail`).

    Args:
        kernel: What to run (:func:`parse_kernel`).
        grid: Implementations × operating points (:meth:`Grid.build`).
        device: The GPU: a :class:`~eopt.runs.gpus.GpuSpec` (a simulated GPU is then
            seeded per cell, :mod:`eopt.runs.gpus`), or a device object, whose cells are
            measured on it one after another.
        out_path: The ``.jsonl`` signature library (created or appended to).
        resume: Skip cells already in ``out_path`` (same name, κ, ω, θ and GPU model, on
            whichever GPU). Without it, finding one of the grid's cells there is an error.
        progress: Called ``(done, total, cell, signature)`` before (signature None) and
            after each cell.
        policy: Repeat counts and durations.
        control: False never changes the device: the grid must not set anything, and
            the cells are measured at the current setting.
        method: Meter method (``auto``: the energy counter where it exists).
        before_cell: Called before each cell is measured (a hook for tests and tools).
        warn: Called with each warning and note (a repaired library, a sync eopt chose,
            something the device noted while setting a point); default: printed to stderr.
        shard: Measure only this share of the grid's points (:mod:`eopt.runs.shard`).

    Each signature's ``meta`` also records ``sync`` (what each window waited with),
    ``op_point_set`` (whether eopt set the point or measured at the current setting),
    ``measured_on`` (host, GPU name, index and UUID where it was measured),
    ``device_uuid``, ``device_notes`` (what the device noted setting the point),
    ``context`` (the entry context φ the cell's windows started from and the runtime
    context ρ, empty: cells run alone; :mod:`eopt.model.context`), ``exit_context``
    (the state the cell left behind) and, from
    the repeat protocol, what the device ran at per window and the flags where that
    differs from the point (:mod:`eopt.runs.repeat`).

    Raises:
        SweepError: for what :func:`check_sweep` refuses, or cells already measured
            without ``resume``.
        LibraryInUseError: when another process writes to ``out_path``.
        MeasureError: for real work (callables, commands) on a simulated GPU.
        MeterError: when the meter failed during a cell (the cell is not saved).
        GpuInUseError: when another eopt process controls the GPU (grids that set it).
        DeviceError: when the device cannot make a point's setting, or it did not take
            (e.g. ``NvmlNotSupportedError`` for a memory-clock lock the GPU does not
            support); cells measured before are saved.
    """
    gpu, spec = open_sweep_gpu(device)
    check_sweep(kernel, grid, gpu, control)
    kernel, sync_note = resolve_sync(kernel, gpu)
    if sync_note is not None:
        _warn(warn, sync_note)
    path = Path(out_path)
    lock = hold_library(path)
    try:
        plan = plan_sweep(kernel, grid, gpu, path, resume=resume, warn=warn, shard=shard)
        return _sweep_locked(
            kernel, grid, gpu, spec, path, plan, progress, policy, method, before_cell, warn
        )
    finally:
        lock.release()


def hold_library(path: Path) -> ProcessLock:
    """Take ``path``'s lock (:func:`library_lock`) for a writer.

    Raises:
        LibraryInUseError: naming the process that holds it.
    """
    lock = library_lock(path)
    try:
        lock.acquire()
    except LockBusyError as exc:
        raise LibraryInUseError(
            f"{path}: another eopt sweep is writing to this library: {exc.who}. Wait for it "
            "to finish and then --resume, or write to another file (-o)"
        ) from None
    return lock


def _warn(warn: Callable[[str], None] | None, message: str) -> None:
    if warn is not None:
        warn(message)
    else:
        print(f"warning: {message}", file=sys.stderr)


def _sync_label(kernel: Kernel) -> str:
    """What each window of ``kernel`` waits with, for ``meta["sync"]``."""
    if isinstance(kernel, CommandKernel):
        return "process exit"
    if isinstance(kernel, PythonKernel) and kernel.sync is not None:
        return kernel.sync_spec or getattr(kernel.sync, "__qualname__", "sync")
    return "device.synchronize"


def _sweep_locked(
    kernel: Kernel,
    grid: Grid,
    device: Device,
    spec: GpuSpec | None,
    path: Path,
    plan: SweepPlan,
    progress: ProgressFn | None,
    policy: RepeatPolicy | None,
    method: MeterMethod,
    before_cell: Callable[[Cell], None] | None,
    warn: Callable[[str], None] | None,
) -> SweepResult:
    """:func:`sweep`, once the library's lock is held and its cells planned."""
    total = len(plan.cells)
    done = total - len(plan.todo)
    pol = policy or RepeatPolicy()
    measured: list[Signature] = []
    extra = cell_meta(kernel, grid, device)
    fresh = fresh_opener(spec, device)
    by_point: dict[OperatingPoint, list[Cell]] = {}
    for cell, _key in plan.todo:
        by_point.setdefault(cell.op_point, []).append(cell)

    def run_cells() -> None:
        # A serial sweep on one device keeps one meter for all its points; per-cell
        # simulated GPUs bring their own.
        with Meter(device, method=method) if fresh is None else contextlib.nullcontext() as m:
            for point, group in by_point.items():
                run_point(point, group, m)

    def run_point(point: OperatingPoint, group: list[Cell], meter: Meter | None) -> None:
        by_impl = {c.impl: c for c in group}

        def starting(impl: str) -> None:
            if progress is not None:
                progress(done, total, by_impl[impl], None)
            if before_cell is not None:
                before_cell(by_impl[impl])

        def finished(sig: Signature) -> None:
            nonlocal done
            append_signature(path, sig)
            measured.append(sig)
            done += 1
            if progress is not None:
                progress(done, total, by_impl[sig.impl], sig)

        measure_point(
            kernel,
            PointWork(point, tuple(by_impl), grid.controls),
            device,
            workload=plan.workload,
            policy=pol,
            method=method,
            sync=getattr(kernel, "sync", None),
            backend=backend_of(device),
            extra_meta=extra,
            fresh=fresh,
            meter=meter,
            warn=lambda note: _warn(warn, note),
            before_cell=starting,
            on_cell=finished,
        )

    if plan.todo:
        path.parent.mkdir(parents=True, exist_ok=True)
        if grid.controls:
            from eopt.devices.guard import restoring_on_exit

            with restoring_on_exit([device]):
                run_cells()
        else:
            run_cells()
    return SweepResult(
        plan.ordered(measured), tuple(measured), total - len(plan.todo), path, plan.repairs
    )
