"""Sweeps: measure a kernel over implementations κ × operating points ω into signatures.

A sweep walks a :class:`Grid` of cells, one device-wide operating point at a time: set the
point, measure the ready device's static power once, then measure every implementation
there (:func:`eopt.measure.repeat.measure_signature`). Each finished cell is appended to
the ``.jsonl`` library at once, so an interrupted sweep loses at most the cell it was
in; ``resume=True`` skips the cells already in the file. The device's original settings
are restored however the sweep ends.

One writer per library: a sweep holds an exclusive lock on ``<library>.lock`` (see
:mod:`eopt.lockfile`) from before it reads the file until it ends, and a second sweep on
the same file stops at once with :class:`LibraryInUseError`, naming the holder. On opening
the library a sweep repairs what a crash leaves at its end (:func:`repair_library_tail`):
a missing final newline is added, and a torn final line is moved to a file beside the
library and removed from it, with a warning saying where.

Three kinds of kernel (:func:`parse_kernel`):

* ``sim:<kernel>`` — a kernel of the simulated GPU's catalog (virtual time, any machine);
* ``module:function`` — a Python callable run on the wall clock on a real GPU;
* shell commands, one per implementation (the whole process is the measured region).

Real work (callables, commands) can only be measured on a real GPU: the simulated GPU's
sensors cannot see it, and :func:`sweep` refuses rather than report made-up numbers.

Example:
    >>> from eopt.devices.sim import SimulatedGPU
    >>> gpu = SimulatedGPU()
    >>> kernel = parse_kernel("sim:gemm", params={"m": 4096, "n": 4096, "k": 4096})
    >>> grid = Grid.build(kernel, gpu, clocks="1410,1200")
    >>> result = sweep(kernel, grid, gpu, "gemm.jsonl")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eopt.calculus.library import append_signature, read_library
from eopt.calculus.signature import Signature
from eopt.devices.base import Device
from eopt.devices.operating_point import OperatingPoint
from eopt.lockfile import LockBusyError, ProcessLock
from eopt.measure.command import MeasureError, require_wall_clock
from eopt.measure.meter import Meter, MeterMethod
from eopt.measure.repeat import RepeatPolicy, measure_signature, measure_static_power

__all__ = [
    "Cell",
    "CommandKernel",
    "Grid",
    "Kernel",
    "KernelError",
    "LibraryInUseError",
    "PythonKernel",
    "SimKernel",
    "SweepError",
    "SweepResult",
    "cell_key",
    "library_lock",
    "parse_kernel",
    "parse_params",
    "parse_values",
    "repair_library_tail",
    "sweep",
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
    """

    kernel: str
    workload: Mapping[str, Any]
    impls: tuple[str, ...]
    name: str
    kind: str = "sim"
    needs_wall_clock: bool = False

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
        return lambda: launch(self.kernel, impl, workload)

    def describe(self) -> str:
        """The kernel spec as given on the command line."""
        return f"sim:{self.kernel}"


@dataclass(frozen=True)
class PythonKernel:
    """Python callables, either one taking ``impl=`` or one per implementation.

    Attributes:
        functions: Implementation name → callable.
        name: Element name.
        workload: Keyword arguments passed to every call (θ).
        pass_impl: Whether the callable receives ``impl=<name>`` (one callable for all).
        sync: Waits for queued GPU work (``--sync``); the device's own when None.
        spec: The spec string, for the record.
    """

    functions: Mapping[str, Callable[..., object]]
    name: str
    workload: Mapping[str, Any] = field(default_factory=dict)
    pass_impl: bool = False
    sync: Callable[[], object] | None = None
    spec: str = ""
    kind: str = "python"
    needs_wall_clock: bool = True

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
    """Shell commands, one per implementation; each run of the process is one invocation.

    Attributes:
        commands: Implementation name → shell command line.
        name: Element name.
        workload: θ recorded with the signatures (not passed to the commands).
    """

    commands: Mapping[str, str]
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

        def run() -> None:
            status = subprocess.run(command, shell=True, check=False).returncode
            if status != 0:
                raise MeasureError(
                    f"command for implementation {impl!r} exited with status {status}: {command}"
                )

        return run

    def describe(self) -> str:
        """The commands, for the record."""
        return "; ".join(f"{k}={v}" for k, v in self.commands.items())


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


def _import_callable(spec: str) -> Callable[..., object]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SweepError(f"{spec!r}: expected module:function (e.g. mykernels:matmul)")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules next to the user
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SweepError(f"{spec!r}: cannot import module {module_name!r} ({exc})") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise SweepError(f"{spec!r}: module {module_name!r} has no {attr!r}")
    if not callable(obj):
        raise SweepError(f"{spec!r}: {attr!r} is not callable")
    return obj  # type: ignore[no-any-return]


def parse_kernel(
    spec: str | None,
    *,
    params: Mapping[str, Any] | None = None,
    impls: Sequence[str] | None = None,
    commands: Mapping[str, str] | None = None,
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
        commands: Implementation → shell command (``--cmd NAME='…'``).
        sync: ``module:function`` called to wait for queued GPU work (``--sync``).
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
        from eopt.devices.sim_kernels import get_kernel, kernel_names

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
    sync_fn = _import_callable(sync) if sync else None
    specs = [s.strip() for s in spec.split(",") if s.strip()]
    if len(specs) > 1:
        if impls:
            raise SweepError("--impls does not apply to one callable per implementation")
        functions = {s.partition(":")[2].split(".")[-1]: _import_callable(s) for s in specs}
        if len(functions) != len(specs):
            raise SweepError(f"{spec!r}: two callables share a name; implementations must differ")
        return PythonKernel(functions, name or specs[0].partition(":")[0], theta, False, sync_fn,
                            spec)  # fmt: skip
    fn = _import_callable(specs[0])
    element = name or specs[0].partition(":")[2]
    if impls:
        return PythonKernel({i: fn for i in impls}, element, theta, True, sync_fn, spec)
    return PythonKernel({"default": fn}, element, theta, False, sync_fn, spec)


# Grids ------------------------------------------------------------------------------------
def parse_values(spec: str, what: str, unit: str) -> list[float]:
    """``"1410,1200"`` or ``"900:1410:30"`` (inclusive range) → numbers.

    Raises:
        SweepError: naming the option and the expected forms.
    """
    text = spec.strip()
    hint = f"expected e.g. {what} 1410,1200 or {what} 900:1410:30 ({unit})"
    if not text:
        raise SweepError(f"{what}: empty; {hint}")
    try:
        parts = [float(p) for p in text.split(":" if ":" in text else ",") if p.strip()]
    except ValueError:
        raise SweepError(f"{what} {spec!r}: not a list or range of numbers; {hint}") from None
    if ":" in text:
        if len(parts) != 3:
            raise SweepError(f"{what} {spec!r}: a range is START:STOP:STEP; {hint}")
        lo, hi, step = parts
        if step <= 0 or hi < lo:
            raise SweepError(f"{what} {spec!r}: need START ≤ STOP and STEP > 0; {hint}")
        count = math.floor((hi - lo) / step + 1e-9) + 1
        values = [lo + i * step for i in range(count)]
    else:
        values = parts
    if any(not v > 0 for v in values):
        raise SweepError(f"{what} {spec!r}: values must be positive ({unit})")
    return sorted(set(values), reverse=True)


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
    """

    impls: tuple[str, ...]
    sm_clocks_mhz: tuple[float | None, ...] = (None,)
    power_limits_w: tuple[float | None, ...] = (None,)
    mem_clocks_mhz: tuple[float | None, ...] = (None,)

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
        return len(self.impls) * len(self.op_points())

    @classmethod
    def build(
        cls,
        kernel: Kernel,
        device: Device,
        clocks: str | None = None,
        power_limits: str | None = None,
        mem_clocks: str | None = None,
    ) -> Grid:
        """Parse ``--clocks`` / ``--power-limits`` / ``--mem-clocks`` against a device.

        ``clocks="all"`` takes every SM clock the device supports.

        Raises:
            SweepError: for a bad spec or a value the device does not support (naming the
                nearest supported one).
        """
        sm: list[float | None] = [None]
        if clocks:
            supported = [float(c) for c in device.supported_sm_clocks_mhz()]
            if clocks.strip().lower() == "all":
                sm = list(supported)
            else:
                sm = list(_check_supported(parse_values(clocks, "--clocks", "MHz"), supported,
                                           "--clocks", "SM clock", "MHz", device))  # fmt: skip
        mem: list[float | None] = [None]
        if mem_clocks:
            supported = [float(c) for c in device.supported_mem_clocks_mhz()]
            if mem_clocks.strip().lower() == "all":
                mem = list(supported)
            else:
                mem = list(_check_supported(parse_values(mem_clocks, "--mem-clocks", "MHz"),
                                            supported, "--mem-clocks", "memory clock", "MHz",
                                            device))  # fmt: skip
        pl: list[float | None] = [None]
        if power_limits:
            lo, hi = device.power_limit_range_w()
            values = parse_values(power_limits, "--power-limits", "W")
            bad = [v for v in values if not lo - 1e-9 <= v <= hi + 1e-9]
            if bad:
                raise SweepError(
                    f"--power-limits: {', '.join(f'{v:g}' for v in bad)} W outside "
                    f"{device.name}'s settable range {lo:g}–{hi:g} W"
                )
            pl = list(values)
        return cls(tuple(kernel.implementations()), tuple(sm), tuple(pl), tuple(mem))


def _check_supported(
    values: list[float],
    supported: list[float],
    option: str,
    what: str,
    unit: str,
    device: Device,
) -> list[float]:
    out = []
    for v in values:
        nearest = min(supported, key=lambda c: abs(c - v))
        if abs(nearest - v) > 0.5:
            raise SweepError(
                f"{option}: {device.name} ({device.model}) does not support {what} {v:g} {unit} "
                f"(range {min(supported):g}–{max(supported):g} {unit}; nearest {nearest:g})"
            )
        out.append(nearest)
    return out


# Resume keys ------------------------------------------------------------------------------
def _canonical(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def cell_key(
    name: str, impl: str, op_point: OperatingPoint, workload: Mapping[str, Any], device: str
) -> str:
    """The identity of a cell for ``--resume``: name, κ, ω, θ and device."""
    return json.dumps(
        [name, impl, _canonical(op_point.to_dict()), _canonical(workload), device],
        sort_keys=True,
    )


def _signature_key(sig: Signature) -> str:
    device = sig.devices[0] if sig.devices else ""
    return cell_key(sig.name, sig.impl, sig.op_point, sig.workload, device)


# The library file -------------------------------------------------------------------------
def library_lock(path: Path) -> ProcessLock:
    """The lock that makes one process at a time write ``path``: ``<path>.lock``."""
    return ProcessLock(path.with_name(path.name + ".lock"))


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
        signatures: Every cell of the grid, in grid order (resumed ones read from the file).
        measured: The cells measured by this run.
        skipped: Cells already in the file (``resume``).
        path: The library file.
        repairs: Warnings about the library's end repaired on opening it
            (:func:`repair_library_tail`).
    """

    signatures: tuple[Signature, ...]
    measured: tuple[Signature, ...]
    skipped: int
    path: Path
    repairs: tuple[str, ...] = ()


ProgressFn = Callable[[int, int, Cell, Signature | None], None]


def _backend_of(device: Device) -> str:
    backend = getattr(device, "backend", None)
    if isinstance(backend, str):
        return backend
    return "sim" if type(device).__name__ == "SimulatedGPU" else type(device).__name__


def sweep(
    kernel: Kernel,
    grid: Grid,
    device: Device,
    out_path: str | os.PathLike[str],
    *,
    resume: bool = False,
    progress: ProgressFn | None = None,
    policy: RepeatPolicy | None = None,
    control: bool = True,
    method: MeterMethod = "auto",
    before_cell: Callable[[Cell], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> SweepResult:
    """Measure every cell of ``grid`` and append each signature to ``out_path`` at once.

    The library is locked for the whole sweep (a second writer gets
    :class:`LibraryInUseError` at once) and its end repaired on opening
    (:func:`repair_library_tail`).

    Args:
        kernel: What to run (:func:`parse_kernel`).
        grid: Implementations × operating points (:meth:`Grid.build`).
        device: The GPU.
        out_path: The ``.jsonl`` signature library (created or appended to).
        resume: Skip cells already in ``out_path`` (same name, κ, ω, θ and device).
            Without it, finding one of the grid's cells there is an error.
        progress: Called ``(done, total, cell, signature)`` before (signature None) and
            after each cell.
        policy: Repeat counts and durations.
        control: False never changes the device: the grid must not set anything, and
            the cells are measured at the current setting.
        method: Meter method (``auto``: the energy counter where it exists).
        before_cell: Called before each cell is measured (a hook for tests and tools).
        warn: Called with each warning (a repaired library); default: printed to stderr.

    Raises:
        SweepError: for a grid that needs control when ``control`` is False, or cells
            already measured without ``resume``.
        LibraryInUseError: when another process writes to ``out_path``.
        MeasureError: for real work (callables, commands) on a simulated GPU.
        MeterError: when the meter failed during a cell (the cell is not saved).
        GpuInUseError: when another eopt process controls the GPU (grids that set it).
    """
    if kernel.needs_wall_clock:
        require_wall_clock(device, f"kernel {kernel.describe()!r}")
    if not control and grid.controls:
        raise SweepError(
            "measure-only mode (--no-control) measures at the current setting and never "
            "changes the GPU: drop --clocks, --power-limits and --mem-clocks"
        )
    path = Path(out_path)
    lock = library_lock(path)
    try:
        lock.acquire()
    except LockBusyError as exc:
        raise LibraryInUseError(
            f"{path}: another eopt sweep is writing to this library: {exc.who}. Wait for it "
            "to finish and then --resume, or write to another file (-o)"
        ) from None
    try:
        return _sweep_locked(
            kernel, grid, device, path, resume, progress, policy, control, method, before_cell,
            warn,
        )  # fmt: skip
    finally:
        lock.release()


def _sweep_locked(
    kernel: Kernel,
    grid: Grid,
    device: Device,
    path: Path,
    resume: bool,
    progress: ProgressFn | None,
    policy: RepeatPolicy | None,
    control: bool,
    method: MeterMethod,
    before_cell: Callable[[Cell], None] | None,
    warn: Callable[[str], None] | None,
) -> SweepResult:
    """:func:`sweep`, once the library's lock is held."""
    repairs = repair_library_tail(path)
    for message in repairs:
        if warn is not None:
            warn(message)
        else:
            print(f"warning: {message}", file=sys.stderr)
    existing: dict[str, Signature] = {}
    if path.exists() and path.stat().st_size > 0:
        existing = {_signature_key(s): s for s in read_library(path)}
    current = device.current_operating_point().device_wide()
    workload = dict(kernel.workload)
    if kernel.kind == "sim":
        workload = {"kernel": kernel.kernel, **workload}  # type: ignore[union-attr]

    def point_of(cell: Cell) -> OperatingPoint:
        return cell.op_point if grid.controls else current

    cells = grid.cells()
    keys = [cell_key(kernel.name, c.impl, point_of(c), workload, device.name) for c in cells]
    already = [k for k in keys if k in existing]
    if already and not resume:
        raise SweepError(
            f"{path}: already holds {len(already)} of this sweep's {len(cells)} cells; pass "
            "--resume to skip them, or write to another file"
        )
    todo = [(c, k) for c, k in zip(cells, keys, strict=True) if k not in existing]
    total = len(cells)
    done = total - len(todo)
    pol = policy or RepeatPolicy()
    backend = _backend_of(device)
    measured: list[Signature] = []
    extra = {"kernel_spec": kernel.describe(), "kernel_kind": kernel.kind}
    sync = getattr(kernel, "sync", None)

    def run_cells() -> None:
        nonlocal done
        with Meter(device, method=method) as meter:
            by_point: dict[OperatingPoint, list[tuple[Cell, str]]] = {}
            for cell, key in todo:
                by_point.setdefault(point_of(cell), []).append((cell, key))
            for point, group in by_point.items():
                if grid.controls:
                    device.set_operating_point(point)
                readback = device.current_operating_point().to_dict()
                static = measure_static_power(device, meter, pol.static_idle_s, pol.settle_s)
                for cell, _key in group:
                    if progress is not None:
                        progress(done, total, cell, None)
                    if before_cell is not None:
                        before_cell(cell)
                    sig = measure_signature(
                        kernel.name,
                        kernel.runner(cell.impl, device),
                        device,
                        meter,
                        impl=cell.impl,
                        workload=workload,
                        op_point=point,
                        policy=pol,
                        sync=sync,
                        static=static,
                        backend=backend,
                        extra_meta={**extra, "op_point_readback": readback},
                    )
                    append_signature(path, sig)
                    measured.append(sig)
                    done += 1
                    if progress is not None:
                        progress(done, total, cell, sig)

    if todo:
        path.parent.mkdir(parents=True, exist_ok=True)
        if grid.controls:
            from eopt.devices.guard import restoring_on_exit

            with restoring_on_exit([device]):
                run_cells()
        else:
            run_cells()
    fresh = {_signature_key(s): s for s in measured}
    ordered = tuple(fresh.get(k) or existing[k] for k in keys)
    return SweepResult(ordered, tuple(measured), total - len(todo), path, tuple(repairs))
