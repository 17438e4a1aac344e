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
from rich.table import Table

from eopt.calculus.signature import Signature
from eopt.cli._common import UserError, console, err_console
from eopt.devices.base import DevicePermissionError
from eopt.measure.command import MeasureError
from eopt.measure.meter import MeterError
from eopt.measure.repeat import RepeatPolicy
from eopt.sweep import (
    Cell,
    Grid,
    KernelError,
    LibraryInUseError,
    SweepError,
    SweepResult,
    parse_kernel,
    parse_params,
    sweep,
)

__all__ = ["command", "print_cells", "print_frontier"]


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _commands(items: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, cmd = item.partition("=")
        if not sep or not name.strip() or not cmd.strip():
            raise UserError(
                f"--cmd {item!r}: expected NAME='shell command', e.g. --cmd fast='./run'"
            )
        if name.strip() in out:
            raise UserError(f"--cmd: implementation {name.strip()!r} given twice")
        out[name.strip()] = cmd.strip()
    return out


def _pm(sig: Signature, key: str, scale: float = 1.0) -> str:
    """``±`` half the width of the bootstrap CI stored in ``meta[key]``."""
    ci = sig.meta.get(key)
    if not ci or len(ci) != 2:
        return ""
    return f" ±{(ci[1] - ci[0]) * scale / 2:.2g}"


def print_cells(signatures: tuple[Signature, ...], title: str) -> None:
    """The measured cells as a table (per invocation, ± half the 95 % bootstrap CI)."""
    table = Table(title=title, title_justify="left")
    for col in ("impl κ", "ω", "time ms", "energy J", "s W", "d J", "n", "flags"):
        table.add_column(col, justify="left" if col in ("impl κ", "ω", "flags") else "right")
    for sig in signatures:
        flags = ",".join(sorted({f["code"] for f in sig.meta.get("flags", [])}))
        table.add_row(
            escape(sig.impl),
            escape(sig.op_point.label()),
            f"{sig.time * 1e3:.4g}{_pm(sig, 'ci_time_s', 1e3)}",
            f"{sig.energy:.4g}{_pm(sig, 'ci_energy_j')}",
            f"{sig.static_power:.4g}",
            f"{sig.dynamic_energy:.4g}",
            str(sig.meta.get("n", "")),
            f"[yellow]{flags}[/]" if flags else "",
        )
    console.print(table)


def print_frontier(signatures: tuple[Signature, ...], dominance: str) -> None:
    """The Pareto frontier (time, energy) of the cells, with the chosen κ / ω."""
    from eopt.frontier import Frontier

    front = Frontier.from_signatures(signatures, dominance=dominance)
    table = Table(
        title=f"Pareto frontier ({dominance} dominance, {front.confidence:.0%} intervals)",
        title_justify="left",
    )
    for col in ("impl κ", "ω", "time ms", "energy J", "energy interval J", "d J"):
        table.add_column(col, justify="left" if col in ("impl κ", "ω") else "right")
    for row in front.to_rows():
        table.add_row(
            escape(row["impl"]),
            escape(row["op_point"]),
            f"{row['time_s'] * 1e3:.4g}",
            f"{row['energy_j']:.4g}",
            f"[{row['energy_low_j']:.4g}, {row['energy_high_j']:.4g}]",
            f"{row['dynamic_energy_j']:.4g}",
        )
    console.print(table)
    fast, cheap = front.fastest, front.min_energy
    if fast is not cheap and fast.time > 0:
        console.print(
            f"min-energy point saves {1 - cheap.energy / fast.energy:.1%} energy for "
            f"{cheap.time / fast.time - 1:+.1%} time against the fastest."
        )


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
    help="A shell command per implementation (repeat); each run is one invocation.",
)
@click.option("--sync", help="module:function that waits for queued GPU work.")
@click.option("--name", help="Element name of the signatures (default: the kernel's).")
@click.option("--clocks", help="SM clocks in MHz: 1410,1200 | 900:1410:30 | all.")
@click.option("--power-limits", help="Power limits in W: 250,300 | 200:400:50.")
@click.option("--mem-clocks", help="Memory clocks in MHz: 1593,1215 | all.")
@click.option(
    "--no-control",
    is_flag=True,
    help="Never change the GPU: measure at its current setting (shared machines).",
)
@click.option("--resume", is_flag=True, help="Skip cells already in the output file.")
@click.option(
    "--backend",
    type=click.Choice(["auto", "nvml", "sim"]),
    default=None,
    help="Device backend (default: sim for sim: kernels, else auto).",
)
@click.option("--gpu", "gpu_index", type=int, default=0, show_default=True, help="GPU index.")
@click.option(
    "--sim-model", default="A100-SXM4-40GB", show_default=True, help="Simulated GPU model."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed (sim noise, bootstrap).")
@click.option(
    "--method",
    type=click.Choice(["auto", "counter", "sampler"]),
    default="auto",
    show_default=True,
    help="Energy counter or power sampling.",
)
@click.option("--warmup", type=int, default=2, show_default=True, help="Warm-up windows.")
@click.option("--min-runs", type=int, default=10, show_default=True, help="Minimum windows.")
@click.option(
    "--min-time",
    type=float,
    default=1.0,
    show_default=True,
    help="Minimum measured time per cell, s.",
)
@click.option("--max-runs", type=int, default=200, show_default=True, help="Maximum windows.")
@click.option(
    "--cooldown", type=float, default=0.0, show_default=True, help="Idle time between windows, s."
)
@click.option(
    "--min-window",
    type=float,
    default=None,
    help="Shortest measured window, s (default: ten sensor update periods).",
)
@click.option(
    "--dominance",
    type=click.Choice(["interval", "point"]),
    default="interval",
    show_default=True,
    help="Frontier dominance under uncertainty.",
)
def command(
    kernel: str | None,
    output: str,
    impls: str | None,
    params: tuple[str, ...],
    cmds: tuple[str, ...],
    sync: str | None,
    name: str | None,
    clocks: str | None,
    power_limits: str | None,
    mem_clocks: str | None,
    no_control: bool,
    resume: bool,
    backend: str | None,
    gpu_index: int,
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
) -> None:
    """Measure a kernel over implementations κ × operating points ω.

    KERNEL is sim:<name> (the simulated GPU's catalog), module:function (called as
    function(**params), or function(impl=…, **params) with --impls), or
    module:fn_a,module:fn_b (one callable per implementation); or give --cmd instead.
    Asynchronous GPU work (CUDA, PyTorch) needs --sync so each window waits for it.

    Each finished cell is appended to the output library at once; an interrupted sweep
    continues with --resume. The GPU's settings are restored however the sweep ends.

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
      eopt sweep sim:gemm --clocks 1410,1200 -o gemm.jsonl
      eopt sweep sim:gemm --param m=8192 --param n=8192 --clocks 900:1410:30 -o gemm.jsonl
      eopt sweep mykernels:matmul --impls cublas,triton --sync torch.cuda:synchronize \\
          --clocks all --power-limits 250,300 -o matmul.jsonl
      eopt sweep --cmd fast='./train --fast' --cmd slow='./train' --name train \\
          --no-control -o train.jsonl
    """
    try:
        spec = parse_kernel(
            kernel,
            params=parse_params(params),
            impls=_split(impls) or None,
            commands=_commands(cmds) or None,
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
    except (SweepError, ValueError) as exc:
        raise UserError(str(exc)) from None
    chosen = backend or ("sim" if spec.kind == "sim" else "auto")
    if spec.kind == "sim" and chosen == "nvml":
        raise UserError(f"{spec.describe()} is a simulated kernel; it runs only with --backend sim")
    from eopt.devices import open_devices

    device = open_devices(chosen, [gpu_index], sim_model, seed, control=not no_control)[0]
    try:
        grid = Grid.build(spec, device, clocks, power_limits, mem_clocks)
    except SweepError as exc:
        raise UserError(str(exc)) from None
    result = _run(spec, grid, device, output, resume, policy, not no_control, method)
    if result.skipped:
        err_console.print(
            f"resumed: {result.skipped} of {len(grid)} cells were already in {output}"
        )
    print_cells(
        result.signatures, escape(f"{spec.name} on {device.name} ({device.model}), per invocation")
    )
    print_frontier(result.signatures, dominance)
    console.print(f"wrote {len(result.measured)} new cell(s) to {output}")


def _run(
    spec: Any,
    grid: Grid,
    device: Any,
    output: str,
    resume: bool,
    policy: RepeatPolicy,
    control: bool,
    method: str,
) -> SweepResult:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(f"sweep {spec.name}", total=len(grid))

        def progress(done: int, total: int, cell: Cell, sig: Signature | None) -> None:
            label = f"sweep {spec.name}: {cell.impl} @ {cell.op_point.label()}"
            bar.update(task, completed=done, description=label)

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
            )
        except DevicePermissionError as exc:
            raise UserError(
                f"{exc}; or pass --no-control to measure at the current setting"
            ) from None
        except LibraryInUseError as exc:
            raise UserError(str(exc)) from None
        except (SweepError, MeasureError, KernelError, MeterError) as exc:
            raise UserError(f"{exc}; finished cells are saved, --resume continues") from None
        except KeyboardInterrupt:
            err_console.print(
                f"interrupted: finished cells are saved in {output}; the same command with "
                "--resume continues"
            )
            raise
