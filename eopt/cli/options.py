"""Options that several commands share, each defined once.

Every function returns a click decorator (``@json_option("Print … as JSON.")``), so one
command can word its help for what it prints while the option itself (its name, its
type, its default) stays the same everywhere. Options that only one command has stay
with that command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, get_args

import click

__all__ = [
    "DEFAULT_SIM_MODEL",
    "GPUS_HELP",
    "GPU_HELP",
    "POWER_BACKENDS",
    "confidence_option",
    "csv_options",
    "domain_option",
    "dominance_option",
    "force_option",
    "gpu_backend_option",
    "gpu_option",
    "gpus_option",
    "json_option",
    "json_output_option",
    "meter_method_option",
    "power_backend_option",
    "quiet_option",
    "recording_options",
    "seed_option",
    "sim_model_option",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The simulated GPU a command uses unless told otherwise.
DEFAULT_SIM_MODEL = "A100-SXM4-40GB"

GPU_HELP = (
    "The GPU: a plain integer is a CUDA ordinal as this process numbers it (0, cuda:1: the "
    "GPU torch.device('cuda:1') uses, after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER), "
    "not nvidia-smi's index (write that nvml:N); or a UUID or unique prefix from "
    "nvidia-smi -L (GPU-8f2c…; MIG-… means its whole GPU), or a PCI bus id (0000:3b:00.0)."
)
GPUS_HELP = (
    "Watch several GPUs: 'all' (the GPUs CUDA_VISIBLE_DEVICES gives this process, or every "
    "GPU when it is unset), or a comma-separated list named as for --gpu (0,1 | GPU-8f2c,"
    "GPU-41aa | nvml:0,nvml:3). One power series each; per-region energy per GPU and summed."
)

#: What ``eopt measure`` can read power from (its own set: RAPL is no GPU backend).
POWER_BACKENDS = ("auto", "nvml", "rapl", "nvml,rapl", "none")


def json_option(help: str) -> Callable[[F], F]:
    """``--json`` (parameter ``as_json``): print the result as JSON on stdout.

    Args:
        help: What the command prints, e.g. "Print eopt.check/1 JSON."
    """

    def to_stderr(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        import sys

        from eopt.cli._common import console

        # stdout carries the JSON only (`| jq` works); notes and tables go to stderr. Set
        # either way: one process may run several commands (tests, notebooks).
        console.file = sys.stderr if value else None  # type: ignore[assignment]
        return value

    return click.option("--json", "as_json", is_flag=True, help=help, callback=to_stderr)


def quiet_option(
    help: str = "No progress bar, tables or notes; errors still show.", *, expose: bool = False
) -> Callable[[F], F]:
    """``-q/--quiet``: nothing on stdout but ``--json``; errors and warnings still show
    on stderr.

    Args:
        help: The option's help.
        expose: Also pass ``quiet`` to the command (for what it prints on stderr itself).
    """

    def silence(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        if value:
            from eopt.cli._common import console

            console.quiet = True
        return value

    return click.option(
        "-q",
        "--quiet",
        is_flag=True,
        expose_value=expose,
        is_eager=True,
        callback=silence,
        help=help,
    )


def force_option(
    help: str = "Overwrite output files that exist (kept otherwise).",
) -> Callable[[F], F]:
    """``--force``: overwrite what exists (see :func:`eopt.cli._common.check_output`)."""
    return click.option("--force", is_flag=True, help=help)


def json_output_option() -> Callable[[F], F]:
    """``-o/--output FILE``: also write the JSON result to a file."""
    return click.option(
        "-o", "--output", type=click.Path(dir_okay=False), help="Also write the JSON to this file."
    )


def gpu_backend_option(
    default: str | None = "auto",
    help: str = "GPUs through NVML, or the simulated GPU (auto: NVML when a GPU is present).",
) -> Callable[[F], F]:
    """``--backend``: which device backend opens the GPUs (choices from the registry,
    :func:`eopt.devices.backends.gpu_backend_choices`).

    Args:
        default: The backend without the option; None lets the command choose.
        help: The option's help.
    """
    from eopt.devices.backends import gpu_backend_choices

    return click.option(
        "--backend",
        type=click.Choice(gpu_backend_choices()),
        default=default,
        show_default=default is not None,
        help=help,
    )


def power_backend_option() -> Callable[[F], F]:
    """``--backend``: the power sources ``eopt measure`` records."""
    return click.option(
        "--backend",
        type=click.Choice(POWER_BACKENDS),
        default="auto",
        show_default=True,
        help="Power sources: NVIDIA GPUs (nvml), the CPU packages and DRAM through Linux "
        "powercap (rapl), both, or none (events only). auto: the GPUs, plus RAPL where "
        "readable.",
    )


def sim_model_option(help: str, name: str = "--sim-model") -> Callable[[F], F]:
    """The simulated GPU's model (default :data:`DEFAULT_SIM_MODEL`).

    Args:
        help: The option's help.
        name: The option's name (``eopt check`` calls it ``--model``).
    """
    return click.option(name, default=DEFAULT_SIM_MODEL, show_default=True, help=help)


def seed_option(help: str, type: Any = int) -> Callable[[F], F]:
    """``--seed`` (default 0): the seed of a command's random numbers.

    Args:
        help: What the seed drives (noise, bootstrap …).
        type: The click type (a range for commands that hand it on to NumPy).
    """
    return click.option("--seed", type=type, default=0, show_default=True, help=help)


def gpu_option() -> Callable[[F], F]:
    """``--gpu`` (default 0): the one GPU a command watches or runs on (:data:`GPU_HELP`)."""
    return click.option("--gpu", "gpu", default="0", show_default=True, help=GPU_HELP)


def gpus_option() -> Callable[[F], F]:
    """``--gpus``: several GPUs to watch (:data:`GPUS_HELP`)."""
    return click.option("--gpus", help=GPUS_HELP)


def meter_method_option() -> Callable[[F], F]:
    """``--method``: read the GPU's energy counter, or sample its power."""
    from eopt.measure.meter import MeterMethod

    return click.option(
        "--method",
        type=click.Choice(get_args(MeterMethod)),
        default="auto",
        show_default=True,
        help="Energy counter or power sampling.",
    )


def domain_option() -> Callable[[F], F]:
    """``--domain``: one power domain of a trace instead of every series summed."""
    from eopt.model.trace import DOMAINS

    return click.option(
        "--domain",
        type=click.Choice(DOMAINS, case_sensitive=False),
        help="Only this power domain (default: every series, summed).",
    )


def dominance_option(help: str) -> Callable[[F], F]:
    """``--dominance``: how a frontier drops cells under uncertainty (default interval)."""
    return click.option(
        "--dominance",
        type=click.Choice(["interval", "point"]),
        default="interval",
        show_default=True,
        help=help,
    )


def confidence_option(help: str) -> Callable[[F], F]:
    """``--confidence`` (default 95%): a probability, ``95%`` or ``0.95``."""
    from eopt.cli._common import Probability

    return click.option(
        "--confidence", default="95%", show_default=True, type=Probability(), help=help
    )


def csv_options(f: click.decorators.FC) -> click.decorators.FC:
    """The options that say how to read another tool's power CSV (``eopt trace``,
    ``eopt report --measurement`` and ``eopt attribute`` read it alike); kept free of
    NumPy so that ``--help`` stays light."""
    options = [
        click.option(
            "--time-column", help="Power CSV: the time column (found automatically by default)."
        ),
        click.option(
            "--power-column",
            help="Power CSV: the power column (default: one whose name contains 'power').",
        ),
        click.option(
            "--time-unit",
            type=click.Choice(["auto", "s", "ms", "us", "ns", "datetime"]),
            default="auto",
            show_default=True,
            help="Power CSV: unit of the time column (datetime: '2024/05/01 12:00:00.123').",
        ),
        click.option(
            "--power-unit",
            type=click.Choice(["W", "mW", "kW"], case_sensitive=False),
            help="Power CSV: unit of bare numbers under a header that names none "
            "(power_mW, 'power (mW)', 'power.draw [W]' name theirs).",
        ),
        click.option(
            "--tz",
            metavar="ZONE",
            help="Power CSV: time zone of date-times without an offset, e.g. UTC or "
            "America/New_York (default: the local zone, $TZ, as nvidia-smi prints).",
        ),
        click.option(
            "--events",
            "events_path",
            type=click.Path(dir_okay=False),
            help="Power CSV: an events.csv (dashboard layout) with the run's regions.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def recording_options(**given: Any) -> Any:
    """The power-CSV reading options of :func:`csv_options`, as
    :func:`eopt.model.trace_io.read_traces` takes them (``events_path`` is ``--events``)."""
    from eopt.model.trace_io import PowerCsvOptions

    return PowerCsvOptions(
        time_column=given.get("time_column"),
        power_column=given.get("power_column"),
        time_unit=given.get("time_unit") or "auto",
        events=given.get("events_path"),
        power_unit=given.get("power_unit"),
        tz=given.get("tz"),
    )
