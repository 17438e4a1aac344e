"""``eopt sweep``: measure a kernel over implementations × operating points."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from eopt.cli._common import Number, UserError, console, err_console, write_json
from eopt.cli._gpus import resolve_gpu_option, sim_gpu_index
from eopt.cli.options import (
    dominance_option,
    gpu_backend_option,
    gpu_option,
    json_option,
    meter_method_option,
    quiet_option,
    seed_option,
    sim_model_option,
)
from eopt.devices.base import DeviceError, DevicePermissionError
from eopt.measure.command import MeasureError
from eopt.measure.meter import MeterError
from eopt.model.signature import Signature
from eopt.runs.gpus import GpuSpec, is_simulated
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.shard import Shard, ShardError
from eopt.runs.sweep import (
    Cell,
    Grid,
    KernelError,
    LibraryInUseError,
    SweepError,
    SweepResult,
    check_sweep,
    coarse_clocks,
    parse_argv,
    parse_kernel,
    parse_params,
    resolve_sync,
    sweep,
)

__all__ = ["command", "open_sweep_device"]


def open_sweep_device(backend: str, gpu: str, sim_model: str, seed: int, control: bool) -> Any:
    """The GPU a sweep runs on.

    Args:
        backend: ``auto``, ``nvml`` or ``sim``.
        gpu: The ``--gpu`` value (see :data:`eopt.cli.options.GPU_HELP`): resolved to the
            physical GPU through NVML where NVML sees GPUs; the simulated GPU takes an
            index.
        sim_model: Simulated GPU model.
        seed: Seed of the simulator's noise.
        control: False opens the GPU measure-only.

    Raises:
        UserError: for a GPU that is not there, or a UUID without NVIDIA GPUs.
    """
    from eopt.devices import open_devices

    if backend == "sim":
        index = sim_gpu_index(gpu)
    elif backend == "auto" and _nvml_gpu_count() == 0:
        index = sim_gpu_index(gpu, nvml_seen=True)
    else:
        try:
            index = resolve_gpu_option(gpu)
        except DeviceError as exc:  # NVML cannot start: --backend nvml asked for it
            raise UserError(str(exc)) from None
    return open_devices(backend, [index], sim_model, seed, control=control)[0]


def _nvml_gpu_count() -> int:
    """The GPUs NVML sees; 0 when it cannot start or pynvml is missing (``open_devices``
    then says why it falls back to the simulator)."""
    try:
        from eopt.devices import nvml
    except ImportError:
        return 0
    return nvml.device_count()


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _commands(shell: tuple[str, ...], argv: tuple[str, ...]) -> dict[str, str | tuple[str, ...]]:
    """``--cmd NAME='line'`` (shell) and ``--cmd-argv NAME='prog args'`` (no shell)."""
    out: dict[str, str | tuple[str, ...]] = {}
    for option, items in (("--cmd", shell), ("--cmd-argv", argv)):
        for item in items:
            name, sep, cmd = item.partition("=")
            if not sep or not name.strip() or not cmd.strip():
                raise UserError(
                    f"{option} {item!r}: expected NAME='shell command', e.g. {option} fast='./run'"
                    if option == "--cmd"
                    else f"{option} {item!r}: expected NAME='program args', e.g. "
                    f"{option} fast='./run --fast'"
                )
            if name.strip() in out:
                raise UserError(f"{option}: implementation {name.strip()!r} given twice")
            out[name.strip()] = cmd.strip() if option == "--cmd" else parse_argv(cmd, option)
    return out


_SECONDS_HELP = "s; a bare number, or with s or ms"


@click.command("sweep")
@click.argument("kernel", required=False)
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Signature library (.jsonl) to append each finished cell to.",
)
@click.option(
    "--impls",
    help="Implementations: a subset of a sim kernel's, or names passed "
    "as impl= to one Python callable (comma-separated).",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Workload θ: sim kernel sizes, or keyword arguments of the callables.",
)
@click.option(
    "--cmd",
    "cmds",
    multiple=True,
    metavar="NAME='CMD'",
    help="A shell command line per implementation (repeat); run by /bin/sh, so quoting, "
    "pipes and $VARS work. Each run is one invocation.",
)
@click.option(
    "--cmd-argv",
    "cmd_argvs",
    multiple=True,
    metavar="NAME='PROG ARGS'",
    help="A program and its arguments per implementation (repeat), run without a shell: "
    "split by shell quoting rules, but no globbing, pipes or $VARS.",
)
@click.option(
    "--sync",
    help="What each window waits with for queued GPU work: torch (torch.cuda.synchronize), "
    "cupy, module:function, or none (the callable returns only when its work is done). "
    "Python callables on an NVIDIA GPU need it: NVML cannot see CUDA work; without it eopt "
    "takes torch's or cupy's when the kernel imported exactly one of them, and says so.",
)
@click.option("--name", help="Element name of the signatures (default: the kernel's).")
@click.option(
    "--clocks",
    help="SM clocks in MHz: 1410,1200 | 900:1410:30 | all | coarse | current. "
    "Default: coarse (at most 21 supported clocks, highest to lowest), or current with "
    "--power-limits, --mem-clocks or --no-control.",
)
@click.option(
    "--snap",
    is_flag=True,
    help="Move clocks the GPU does not support to the nearest supported ones (and say "
    "which) instead of refusing them.",
)
@click.option("--power-limits", help="Power limits in W: 250,300 | 200:400:50.")
@click.option("--mem-clocks", help="Memory clocks in MHz: 1593,1215 | all.")
@click.option(
    "--no-control",
    is_flag=True,
    help="Never change the GPU: measure at its current setting (shared machines).",
)
@click.option("--resume", is_flag=True, help="Skip cells already in the output file.")
@click.option(
    "--shard",
    metavar="K/N",
    help="Measure only share K of N of the grid's operating points (1 ≤ K ≤ N), e.g. "
    "--shard $SLURM_ARRAY_TASK_ID/8 in a job array: every share computes the same split, "
    "balanced by expected cost, and `eopt library merge` joins the parts.",
)
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="local",
    default=None,
    metavar="local|ADDRESS",
    help="Spread the sweep over the GPUs of a Ray cluster, one worker per GPU and one "
    "operating point at a time: local starts a runtime on this machine (bound to "
    "127.0.0.1) and stops it after; ADDRESS joins a running cluster (ray start --head). "
    "Needs pip install 'eopt[ray]'.",
)
@click.option(
    "--gpus",
    "ray_gpus",
    metavar="all|LIST|N",
    help="With --ray: the GPUs to use. --ray local: all (default: every GPU this process "
    "may use) or a list named as for --gpu (0,1,2,3; simulated GPUs are listed by "
    "index); --ray ADDRESS: all (default) or how many.",
)
@gpu_backend_option(None, "Device backend (default: sim for sim: kernels, else auto).")
@gpu_option()
@sim_model_option("Simulated GPU model, or a profile file from `eopt sim fit`.")
@seed_option("Seed (sim noise, bootstrap).", type=Number(int, 0, 2**32 - 1))
@meter_method_option()
@click.option(
    "--warmup", type=Number(int, 0, 1000), default=2, show_default=True, help="Warm-up windows."
)
@click.option(
    "--min-runs",
    type=Number(int, 1, 10_000),
    default=10,
    show_default=True,
    help="Minimum measured windows per cell.",
)
@click.option(
    "--min-time",
    type=Number(float, 0, 300, "s"),
    default=1.0,
    show_default=True,
    help=f"Minimum measured time per cell, 0–300 ({_SECONDS_HELP}).",
)
@click.option(
    "--max-runs",
    type=Number(int, 1, 10_000),
    default=200,
    show_default=True,
    help="Maximum windows per cell (raised to --min-runs if lower).",
)
@click.option(
    "--cooldown",
    type=Number(float, 0, 600, "s"),
    default=0.0,
    show_default=True,
    help=f"Idle time between windows, 0–600 ({_SECONDS_HELP}).",
)
@click.option(
    "--min-window",
    type=Number(float, 0, 60, "s", lo_open=True),
    default=None,
    help=f"Shortest measured window, up to 60 ({_SECONDS_HELP}; default: ten sensor "
    "update periods).",
)
@dominance_option("Frontier dominance under uncertainty.")
@json_option("Print the cells and the frontier as JSON.")
@quiet_option(expose=True)
def command(
    kernel: str | None,
    output: str,
    impls: str | None,
    params: tuple[str, ...],
    cmds: tuple[str, ...],
    cmd_argvs: tuple[str, ...],
    sync: str | None,
    name: str | None,
    clocks: str | None,
    snap: bool,
    power_limits: str | None,
    mem_clocks: str | None,
    no_control: bool,
    resume: bool,
    shard: str | None,
    ray_address: str | None,
    ray_gpus: str | None,
    backend: str | None,
    gpu: str,
    sim_model: str,
    seed: int,
    method: str,
    warmup: int,
    min_runs: int,
    min_time: float,
    max_runs: int,
    cooldown: float,
    min_window: float | None,
    dominance: str,
    as_json: bool,
    quiet: bool,
) -> None:
    """Measure a kernel over implementations κ × operating points ω.

    KERNEL is sim:<name> (the simulated GPU's catalog), module:function (called as
    function(**params), or function(impl=…, **params) with --impls), path/to/file.py:function,
    or a comma-separated list of callables (one per implementation); or give --cmd /
    --cmd-argv instead. Asynchronous GPU work (CUDA, PyTorch) needs --sync so each window
    waits for it: on an NVIDIA GPU a Python callable without --sync is refused, unless
    the kernel imported torch or cupy (exactly one), whose synchronize is then used and
    named; --sync none says the callable waits for its own work.

    --gpu names the GPU as this process's CUDA does: a plain integer is a CUDA ordinal
    (after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER), not nvidia-smi's index (nvml:N);
    UUIDs (GPU-…, from nvidia-smi -L) and PCI bus ids name one GPU for every tool.

    Each cell records what the GPU ran at, read back per window (SM clock, clocks-event
    reasons, enforced power limit, where the GPU reports them), and is flagged where that
    differs from its setting (sm_clock_off_request, mem_clock_off_request,
    power_limit_not_enforced), where the GPU throttled itself (throttled) or the meter's
    readings failed (meter_gap). A setting the GPU cannot make fails the sweep.

    \b
    Where module:function comes from (a stray file never runs in place of a library):
      path/to/file.py:fn   that file, loaded by its path
      name:fn              name.py (or name/) in the working directory, or an installed
                           module; a local file named like an installed module (numpy.py)
                           is refused, never guessed; the working directory is never put
                           on the module path, so files there cannot replace eopt's own
                           imports (pynvml, numpy …)
    Modules next to your kernel file can be imported from it, after every installed module.

    Without --clocks, a sweep locks a coarse grid of SM clocks: at most 21 of the GPU's
    supported clocks, from the highest to the lowest (an A100: every 60 MHz); --clocks all
    takes every one, --clocks current leaves the clock as it is. Clocks the GPU does not
    support are listed in one error with the supported range and step; --snap moves them
    to the nearest supported ones instead. A grid holds at most 10000 cells.

    Each finished cell is appended to the output library at once; an interrupted sweep
    continues with --resume. The GPU's settings are restored however the sweep ends.

    A cell is its kernel, implementation, workload, operating point and GPU model: a cell
    measured on any GPU of the model is in the library, and --resume skips it on every
    other GPU of that model. Each cell records where it was measured (host, GPU, UUID).
    A simulated GPU measures each cell as a fresh GPU seeded from --seed and the cell, so
    a simulated library is the same swept serially, with --shard or with --ray.

    Many GPUs: --shard K/N measures one share of the grid (a Slurm job array runs the N
    shares; `eopt library merge` joins them). --ray spreads one sweep over a Ray cluster:
    only this process writes the library; a cell whose worker dies or whose kernel raises
    is tried twice more, preferably on another GPU, then written with its error to
    OUTPUT.failed.jsonl while the rest of the grid goes on (the command then exits 1).

    Without an NVIDIA GPU, sim: kernels run on the simulated GPU; Python callables and
    shell commands need a real GPU (the simulator cannot see real work).

    One process at a time: while a sweep runs it holds OUTPUT.lock, and a second sweep on
    the same library stops at once (it does not wait), naming the running one's PID and
    command; a sweep that changes clocks or power limits also holds the GPU's lock, and
    another eopt run that wants to change that GPU stops the same way (--no-control
    sweeps take no GPU lock). On opening the library, a last line without its newline is
    completed, and a last line cut off by a crash is moved to OUTPUT.torn-<time> with a
    warning. A failure of the energy meter fails the sweep; the failed cell is not saved.

    \b
    Examples:
      eopt sweep sim:gemm -o gemm.jsonl
      eopt sweep sim:gemm --param m=8192 --param n=8192 --clocks 900:1410:30 -o gemm.jsonl
      eopt sweep ./mykernels.py:matmul --impls cublas,triton --sync torch.cuda:synchronize \\
          --clocks all --power-limits 250,300 -o matmul.jsonl
      eopt sweep --cmd-argv fast='./train --fast' --cmd-argv slow='./train' --name train \\
          --no-control -o train.jsonl
      eopt sweep sim:gemm --clocks 1000,1400 --snap --json -q -o gemm.jsonl
    """
    try:
        shard_spec = Shard.parse(shard) if shard is not None else None
        spec = parse_kernel(
            kernel,
            params=parse_params(params),
            impls=_split(impls) or None,
            commands=_commands(cmds, cmd_argvs) or None,
            sync=sync,
            name=name,
        )
        policy = RepeatPolicy(
            warmup=warmup,
            min_runs=min_runs,
            min_time_s=min_time,
            max_runs=max(max_runs, min_runs),
            cooldown_s=cooldown,
            min_window_s=min_window,
            seed=seed,
        )
    except (SweepError, ShardError, ValueError) as exc:
        raise UserError(str(exc)) from None
    _check_many_gpus(shard_spec, ray_address, ray_gpus, no_control)
    chosen = backend or ("sim" if spec.kind == "sim" else "auto")
    if spec.kind == "sim" and chosen == "nvml":
        raise UserError(f"{spec.describe()} is a simulated kernel; it runs only with --backend sim")
    try:
        device = open_sweep_device(chosen, gpu, sim_model, seed, control=not no_control)
    except DeviceError as exc:
        raise UserError(str(exc)) from None
    by_default = clocks is None and not (no_control or power_limits or mem_clocks)
    if by_default and not device.supported_sm_clocks_mhz():
        # Nothing was asked for explicitly: a GPU without clock tables keeps its clock.
        by_default = False
        clocks = "current"
        if not quiet:
            err_console.print(
                f"note: {escape(device.name)} reports no settable SM clocks: measuring at "
                "the current clock",
                highlight=False,
            )
    try:
        grid = Grid.build(
            spec,
            device,
            "coarse" if by_default else clocks,
            power_limits,
            mem_clocks,
            snap=snap,
        )
        check_sweep(spec, grid, device, control=not no_control)
        spec, sync_note = resolve_sync(spec, device)
    except (SweepError, MeasureError) as exc:
        raise UserError(str(exc)) from None
    if sync_note is not None and not quiet:
        err_console.print(f"note: {escape(sync_note)}", highlight=False)
    if not quiet:
        if by_default:
            supported = list(device.supported_sm_clocks_mhz())
            picked = coarse_clocks(supported)
            err_console.print(
                f"note: no --clocks given: sweeping {len(picked)} of {device.name}'s "
                f"{len(supported)} SM clocks ({picked[0]:g}–{picked[-1]:g} MHz); --clocks all "
                "for every one, --clocks current to keep the clock",
                highlight=False,
            )
        for note in grid.notes:
            err_console.print(f"note: {escape(note)}", highlight=False)
    gpu_spec = GpuSpec(
        getattr(device, "backend", chosen), device.index, sim_model, seed, not no_control
    )
    if ray_address is not None:
        gpus = _ray_gpus(ray_address, ray_gpus, device)
        result = _run_ray(
            spec, grid, device, gpu_spec, output, resume, policy, method, quiet,
            ray_address, gpus,
        )  # fmt: skip
    else:
        # A simulated GPU is swept from its spec: each cell on a fresh GPU seeded for it.
        target = gpu_spec if is_simulated(device) else device
        result = _run(spec, grid, target, output, resume, policy, not no_control, method, quiet,
                      shard_spec)  # fmt: skip
    if as_json:
        from eopt.report.sweep_table import result_json

        write_json("-", result_json(result, grid, device, dominance))
        return
    if quiet:
        return
    if result.skipped:
        err_console.print(
            f"resumed: {result.skipped} of {len(grid)} cells were already in {output}"
        )
    from eopt.report.sweep_table import print_cells, print_frontier

    title = escape(f"{spec.name} on {device.name} ({device.model}), per invocation")
    print_cells(result.signatures, title, console)
    if result.signatures:
        print_frontier(result.signatures, dominance, console)
    where = f" (shard {shard_spec.label()})" if shard_spec is not None else ""
    console.print(f"wrote {len(result.measured)} new cell(s) to {output}{where}")
    _fail_on_failed(result, grid, output)


def _fail_on_failed(result: SweepResult, grid: Grid, output: str) -> None:
    """A sweep that gave up on cells ends with an error naming their file."""
    if not result.failed:
        return
    from eopt.runs.failed import failed_path

    raise UserError(
        f"{len(result.failed)} of {len(grid)} cells could not be measured; their errors are "
        f"in {failed_path(output)}; the same command with --resume tries them again"
    )


def _check_many_gpus(
    shard: Shard | None, ray_address: str | None, ray_gpus: str | None, no_control: bool
) -> None:
    """Refuse combinations of --shard, --ray and --gpus that mean nothing."""
    if ray_address is None:
        if ray_gpus is not None:
            raise UserError(
                "--gpus goes with --ray (one sweep over several GPUs); a sweep on one GPU "
                "takes --gpu"
            )
        return
    if shard is not None:
        raise UserError(
            "--shard splits a grid over separate runs, --ray spreads one run over a "
            "cluster: use one of them"
        )
    if no_control:
        raise UserError(
            "--no-control measures one point: there is nothing to spread over GPUs; drop --ray"
        )


def _ray_gpus(address: str, value: str | None, device: Any) -> list[str] | int | None:
    """``--gpus`` with ``--ray``: the GPUs a local runtime offers (as
    ``CUDA_VISIBLE_DEVICES`` writes them: UUIDs, simulated GPUs' indices), or how many
    workers a cluster starts (None: one per GPU it has)."""
    word = (value or "all").strip()
    if address != "local":
        if word.lower() == "all":
            return None
        if word.isdigit() and int(word) > 0:
            return int(word)
        raise UserError(
            f"--gpus {word}: with --ray ADDRESS the cluster places the workers; give --gpus "
            "all or how many GPUs to use (--gpus 8)"
        )
    if is_simulated(device):
        if word.lower() == "all":
            raise UserError(
                "--ray local with simulated GPUs: name them, e.g. --gpus 0,1,2,3 (there is "
                "no hardware to count)"
            )
        indices = [sim_gpu_index(token.strip(), "--gpus") for token in word.split(",")]
        if len(set(indices)) != len(indices):
            raise UserError(f"--gpus {word}: a GPU is listed twice (each GPU once)")
        return [str(i) for i in indices]
    from eopt.cli._gpus import parse_gpus
    from eopt.devices import nvml

    inventory = nvml.list_gpus()
    chosen = parse_gpus(None if word.lower() == "all" else word, inventory,
                        mig_parent=nvml.mig_parent_index)  # fmt: skip
    uuids = {g.index: g.uuid for g in inventory}
    return [uuids[i] for i in chosen]


def _run_ray(
    spec: Any,
    grid: Grid,
    device: Any,
    gpu: GpuSpec,
    output: str,
    resume: bool,
    policy: RepeatPolicy,
    method: str,
    quiet: bool,
    address: str,
    gpus: list[str] | int | None,
) -> SweepResult:
    """The sweep on a Ray cluster, with one progress bar and each GPU's rate."""
    from eopt.runs.ray_sweep import ray_sweep

    bar = _sweep_bar(quiet)
    with bar:
        task = bar.add_task(f"sweep {spec.name} on Ray", total=len(grid))

        def progress(done: int, total: int, rates: Any) -> None:
            per_gpu = " · ".join(f"{escape(k)} {v:.2g}/s" for k, v in rates.items())
            bar.update(task, completed=done, description=f"sweep {spec.name}: {per_gpu}")

        def warn(message: str) -> None:
            err_console.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)

        try:
            return ray_sweep(
                spec, grid, device, gpu, output, address=address, gpus=gpus, resume=resume,
                policy=policy, method=method, progress=progress, warn=warn,  # type: ignore[arg-type]
            )  # fmt: skip
        except LibraryInUseError as exc:
            raise UserError(str(exc)) from None
        except (SweepError, MeasureError, DeviceError) as exc:
            raise UserError(f"{exc}; finished cells are saved, --resume continues") from None
        except KeyboardInterrupt:
            err_console.print(
                f"interrupted: every worker stopped and restored its GPU; finished cells are "
                f"saved in {output}; the same command with --resume continues"
            )
            raise


def _sweep_bar(quiet: bool) -> Progress:
    """The sweep's progress bar on stderr: cells done of the grid, elapsed and ETA."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    return Progress(*columns, console=err_console, transient=True, disable=quiet)


def _run(
    spec: Any,
    grid: Grid,
    device: Any,
    output: str,
    resume: bool,
    policy: RepeatPolicy,
    control: bool,
    method: str,
    quiet: bool = False,
    shard: Shard | None = None,
) -> SweepResult:
    bar = _sweep_bar(quiet)
    with bar:
        task = bar.add_task(f"sweep {spec.name}", total=len(grid))
        if shard is not None:
            bar.update(task, total=None)  # the share's size comes with the first cell

        def progress(done: int, total: int, cell: Cell, sig: Signature | None) -> None:
            label = f"sweep {spec.name}: {cell.impl} @ {cell.op_point.label()}"
            bar.update(task, completed=done, total=total, description=label)

        def warn(message: str) -> None:
            err_console.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)

        try:
            return sweep(
                spec,
                grid,
                device,
                output,
                resume=resume,
                progress=progress,
                policy=policy,
                control=control,
                method=method,  # type: ignore[arg-type]
                warn=warn,
                shard=shard,
            )
        except DevicePermissionError as exc:
            raise UserError(
                f"{exc}; or pass --no-control to measure at the current setting"
            ) from None
        except LibraryInUseError as exc:
            raise UserError(str(exc)) from None
        except (SweepError, MeasureError, KernelError, MeterError, DeviceError) as exc:
            # DeviceError: a setting the GPU cannot make or that did not take; the GPU
            # was restored, and no cell was saved at that setting.
            raise UserError(f"{exc}; finished cells are saved, --resume continues") from None
        except KeyboardInterrupt:
            err_console.print(
                f"interrupted: finished cells are saved in {output}; the same command with "
                "--resume continues"
            )
            raise
