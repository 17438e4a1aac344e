"""Run a program at a per-element schedule: ``eopt apply SCHEDULE [-o RUN.json] -- CMD``.

The program marks its elements with :func:`eopt.element`; it is started with the
environment of :mod:`eopt.apply.element_hook`, whose hook switches the GPU at each
element. On real GPUs this process holds the devices layer's guard over the whole run (the
GPUs come back however the program ends) and, for ``-o``, watches the first plan device
as ``eopt measure`` does; the run is then an ``eopt.regions-report/1`` measurement whose
regions are the element calls (each with its ``kind``). On the simulator
(:func:`run_on_sim`) the program's own process holds the simulated GPU and reports the
same measurement, on virtual time.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eopt.apply.element_hook import SIM_SWITCH_SPEC, apply_env
from eopt.apply.guard import device_guard
from eopt.apply.settings import ApplyError
from eopt.devices.base import Device
from eopt.model.schedule import Schedule

__all__ = ["check_device_model", "run_on_devices", "run_on_sim", "schedule_device_model"]


def schedule_device_model(schedule: Schedule, path: str | os.PathLike[str]) -> str | None:
    """The GPU model a schedule was planned for (its ``device_model``), if it records one."""
    model = getattr(schedule, "device_model", None)
    if model is None:
        import json

        try:
            model = json.loads(Path(path).read_text(encoding="utf-8")).get("device_model")
        except (OSError, ValueError, AttributeError):
            model = None
    return model if isinstance(model, str) and model else None


def _normal(model: str) -> str:
    text = model.strip().lower().replace("_", "-").replace(" ", "-")
    return text.removeprefix("nvidia-")


def check_device_model(
    schedule_model: str | None, devices: Mapping[str, Device], path: str
) -> None:
    """Refuse GPUs of another model than the schedule's.

    Raises:
        ApplyError: naming both models and the fix.
    """
    if schedule_model is None:
        return
    want = _normal(schedule_model)
    for name, device in devices.items():
        got = _normal(str(getattr(device, "model", "")))
        if got and want not in got and got not in want:
            raise ApplyError(
                f"{path}: planned for {schedule_model}, but {name} runs on a {device.model}; "
                "plan it again from signatures measured on this GPU (eopt profile / eopt "
                "sweep), or pass --sim-model to simulate the planned GPU"
            )


def _measurement(command: Sequence[str], code: int, device: str, model: str, report: Any) -> dict:
    """``eopt measure -o``'s layout (:meth:`eopt.measure.command.CommandMeasurement.to_dict`)."""
    return {
        "command": list(command),
        "returncode": code,
        "device": device,
        "model": model,
        "gpu": 0,
        "start_unix_ns": 0,
        **report,
    }


def run_on_sim(
    schedule_path: str,
    command: Sequence[str],
    kernels: Mapping[str, Mapping[str, Any]],
    *,
    model: str,
    seed: int = 0,
    kernels_file: str = "--kernels",
    stdout: Any = None,
) -> tuple[int, dict[str, Any]]:
    """Run ``command`` with a simulated GPU in its process, switched per element.

    Args:
        schedule_path: The schedule file (the program's process reads it).
        command: Program and arguments.
        kernels: Element kind → its simulated kernel (``--kernels``).
        model: The simulated GPU's profile.
        seed: Seed of the simulator's noise.
        kernels_file: How to name the kernels' file in messages.
        stdout: Where the program's standard output goes (None: this process's).

    Returns:
        The exit status, and the run as an ``eopt.regions-report/1`` measurement.

    Raises:
        ApplyError: a command that cannot start, marks no element, or has a kind
            without a kernel.
    """
    from eopt.runs.profile_child import ChildError, read_records, write_config

    with tempfile.TemporaryDirectory(prefix="eopt-apply-") as tmp:
        config = {
            "records": str(Path(tmp) / "run.json"),
            "model": model,
            "seed": seed,
            "kernels": {k: dict(v) for k, v in kernels.items()},
            "kernels_file": kernels_file,
            "points": [],
            "schedule": os.path.abspath(schedule_path),
            "switch": SIM_SWITCH_SPEC,
        }
        env = write_config(Path(tmp) / "config.json", config)
        code = _call(command, env, stdout)
        try:
            per_process = read_records(config["records"])
        except ChildError as exc:
            raise ApplyError(str(exc)) from None
    first = per_process[0]
    report = _merged([r["report"] for r in per_process])
    return code, _measurement(command, code, first["device"], first["model"], report)


def _merged(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One measurement of several processes, each with a simulated GPU of its own (the
    ranks of a ``torchrun`` job): their regions and calls side by side (``pid`` tells them
    apart), energies summed, the span the longest one; the samples are the first's."""
    if len(reports) == 1:
        return dict(reports[0])
    out = dict(reports[0])
    total = sum(r["total_energy_j"] for r in reports)
    span = max(r["total_time_s"] for r in reports)
    outside = sum(r["outside_energy_j"] for r in reports)
    regions = [dict(x) for r in reports for x in r["regions"]]
    for x in regions:
        x["share"] = x["energy_j"] / total if total > 0 else 0.0
    events = [e for r in reports for e in r["events"]]
    out.update(
        total_energy_j=total,
        total_time_s=span,
        mean_power_w=total / span if span > 0 else 0.0,
        outside_energy_j=outside,
        outside_time_s=min(r["outside_time_s"] for r in reports),
        outside_share=outside / total if total > 0 else 0.0,
        regions=regions,
        events=sorted(events, key=lambda e: (e["start_s"], e["depth"])),
    )
    return out


def run_on_devices(
    schedule_path: str,
    command: Sequence[str],
    devices: Mapping[str, Device],
    gpu_map: Mapping[str, int],
    *,
    backend: str,
    measure: bool = False,
    method: str = "auto",
    stdout: Any = None,
) -> tuple[int, dict[str, Any] | None]:
    """Run ``command`` on real GPUs, its element hook switching them per element.

    Args:
        schedule_path: The schedule file (the program's process reads it too).
        command: Program and arguments.
        devices: Plan device → its opened GPU (guarded here for the whole run).
        gpu_map: Plan device → NVML index (handed to the program's process).
        backend: The device backend the program's process opens.
        measure: Watch the first plan device's energy, per element (``-o``).
        method: Meter method for ``measure``.
        stdout: Where the program's standard output goes (None: this process's).

    Returns:
        The exit status, and with ``measure`` the ``eopt.regions-report/1`` measurement.
    """
    env = apply_env(schedule_path, gpu_map, backend)
    with device_guard(list(devices.values()), keep=False):
        if not measure:
            return _call(command, env, stdout), None
        from eopt.measure.command import MeasureError, measure_command

        first = next(iter(devices.values()))
        try:
            run = measure_command(
                command,
                first,
                method=method,  # type: ignore[arg-type]
                env=env,
                stdout=stdout,
            )
        except MeasureError as exc:
            raise ApplyError(str(exc)) from None
        return run.returncode, run.to_dict()


def _call(command: Sequence[str], env: Mapping[str, str], stdout: Any = None) -> int:
    from eopt.measure.command import run_program

    if not command:
        raise ApplyError("no command given; usage: eopt apply SCHEDULE --elements -- CMD [ARGS…]")
    return run_program(command, env, ApplyError, stdout)
