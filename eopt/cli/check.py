"""``eopt check``: does a placed schedule cost what its signatures predict? If not, why?"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from eopt.cli._common import UserError, check_output, console, write_json
from eopt.cli.options import (
    confidence_option,
    force_option,
    json_option,
    quiet_option,
    seed_option,
    sim_model_option,
)

__all__ = ["command", "read_kernel_map"]


def read_kernel_map(path: Path) -> dict[str, Any]:
    """Element type → how it runs on the simulator, from YAML/JSON.

    The file maps each element to ``{kernel, impl, workload, reads, writes, sm_share,
    sm_clock_mhz}``, directly or under ``elements:``.

    Raises:
        UserError: naming the file and the element for anything malformed.
    """
    from eopt.check.runner import SimElement

    data = _kernel_map_data(path)
    if not data:
        raise UserError(
            f"{path}: expected a mapping element → {{kernel: NAME, reads: [...], ...}}, "
            "e.g. 'gemm_fwd: {kernel: gemm}'"
        )
    out: dict[str, Any] = {}
    for name, spec in data.items():
        where = f"{path}: {name}"
        if isinstance(spec, str):
            spec = {"kernel": spec}
        if not isinstance(spec, Mapping):
            raise UserError(f"{where}: expected {{kernel: NAME, ...}} or a kernel name")
        try:
            out[str(name)] = SimElement.from_dict(spec, where)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    return out


def _read_yaml(path: Path, what: str) -> Any:
    """The YAML/JSON document in ``path``; a file that cannot be read is a UserError."""
    from eopt.model.fileformats import FileFormatError, Where, parse_yaml, read_text

    try:
        at = Where(str(path))
        return parse_yaml(read_text(path, at, what=what), at, language="YAML/JSON")
    except FileFormatError as exc:
        raise UserError(str(exc)) from None


def _kernel_map_data(path: Path) -> Mapping[str, Any]:
    """The element → entry mapping of a --kernels file (directly or under ``elements:``)."""
    data = _read_yaml(path, "a kernel map")
    if isinstance(data, Mapping) and isinstance(data.get("elements"), Mapping):
        data = data["elements"]
    if not isinstance(data, Mapping):
        raise UserError(f"{path}: expected a mapping element → its kernel or program")
    return data


def _default_kernel(name: str, signature: Any) -> Any:
    """A simulated kernel for an element: its library entry's, or the one it is named."""
    from eopt.check.runner import SimElement
    from eopt.sim.kernels import kernel_names

    catalog = set(kernel_names())
    workload = dict(getattr(signature, "workload", {}) or {})
    kernel = workload.pop("kernel", None)
    if kernel in catalog:  # only a library entry has a workload, so ``signature`` is one
        return SimElement(
            str(kernel),
            signature.impl if signature.impl != "default" else None,
            workload or None,
            sm_clock_mhz=signature.op_point.sm_clock_mhz,
        )
    if name in catalog:
        return SimElement(name)
    return None


def _check_measured(
    schedule_file: Path,
    run_file: Path,
    library_files: tuple[Path, ...],
    confidence: float,
    output: Path | None,
    as_json: bool,
) -> None:
    """``eopt check SCHEDULE --measured RUN.json``: the recorded run against the schedule."""
    from eopt.check.measured import MeasuredRunError, check_measured, read_recorded_calls
    from eopt.model.library import LibraryError, read_library
    from eopt.model.schedule import ScheduleError, read_schedule

    try:
        schedule = read_schedule(schedule_file)
        calls = read_recorded_calls(run_file)
        paths = list(library_files) or _plan_libraries(schedule)
        library = [sig for path in paths for sig in read_library(path)]
    except (ScheduleError, MeasuredRunError, LibraryError) as exc:
        raise UserError(str(exc)) from None
    try:
        result = check_measured(schedule, calls, library, confidence=confidence)
    except ValueError as exc:
        raise UserError(f"{run_file}: {exc}") from None
    data = result.to_dict(str(schedule_file), str(run_file))
    if output is not None:
        write_json(output, data)
    if as_json:
        write_json("-", data)
        return
    _print_measured(result)


def _plan_libraries(schedule: Any) -> list[Path]:
    """The libraries of the plan a schedule was solved from, where that plan is at hand."""
    from eopt.model.planfile import PlanError, read_plan

    if not schedule.plan or not Path(schedule.plan).is_file():
        return []
    try:
        plan = read_plan(schedule.plan)
    except PlanError:
        return []
    return [p for p in plan.library_paths() if p.is_file()]


def _print_measured(result: Any) -> None:
    from eopt.model.confidence import c_alpha

    c = c_alpha(result.total.confidence)  # intervals at each test's level
    console.print(
        f"{len(result.elements)} element(s) recorded over {result.iterations} iteration(s); "
        f"{result.tests} tests together at {result.confidence:.0%} (each at "
        f"{result.total.confidence:.4g})"
    )
    low = result.predicted_energy_j - c * result.std_energy_j
    high = result.predicted_energy_j + c * result.std_energy_j
    console.print(
        f"predicted {result.predicted_energy_j:.6g} J [{low:.6g}, {high:.6g}] for the recorded "
        f"elements, measured {result.measured_energy_j:.6g} J per iteration"
    )
    console.print(escape(str(result.total)))
    table = Table(title="elements", show_lines=False)
    for col in ("element", "calls", "predicted J", "interval J", "measured J", "verdict"):
        table.add_column(col)
    for e in result.elements:
        q = e.report.energy
        table.add_row(
            escape(e.element.name),
            str(len(e.calls)),
            f"{q.predicted.mean:.6g}",
            f"[{q.predicted.mean - c * e.std_energy_j:.6g}, "
            f"{q.predicted.mean + c * e.std_energy_j:.6g}]",
            f"{q.measured.mean:.6g}",
            "agrees" if e.report.passed else "[red]DEVIATES[/]",
        )
    console.print(table)
    for line in result.notes:
        console.print(f"note: {escape(line)}")
    if result.unrecorded:
        console.print(
            f"not in the run: {len(result.unrecorded)} element(s), e.g. "
            f"{escape(', '.join(result.unrecorded[:4]))}"
        )
    if result.deviation:
        console.print("[red]deviation[/]: the run does not cost what the schedule predicts")
    else:
        console.print("[green]no deviation[/]: the run agrees with the schedule's prediction")


def _solved_input(schedule_file: Path, library: list[Any]) -> Any:
    """A schedule `eopt solve` wrote, read for the check (None for a placements file)."""
    from eopt.calculus.schedule import PlacementsError
    from eopt.check.schedule_input import is_solved_schedule, read_solved_for_check

    if not is_solved_schedule(schedule_file):
        return None
    if not library:
        raise UserError(
            f"{schedule_file}: a schedule from `eopt solve` is checked against the signatures "
            "it was solved with; add --library LIB.jsonl (the plan's libraries)"
        )
    try:
        return read_solved_for_check(schedule_file, library)
    except PlacementsError as exc:
        raise UserError(str(exc)) from None


def _schedule_model(model: str, device_model: str | None) -> str:
    """The simulated GPU: --model when given, else the GPU the schedule was planned for."""
    from eopt.cli.options import DEFAULT_SIM_MODEL
    from eopt.sim.profiles import available_profiles

    ctx = click.get_current_context(silent=True)
    given = ctx is not None and ctx.get_parameter_source("model") not in (
        click.core.ParameterSource.DEFAULT,
        None,
    )
    if given or device_model is None or model != DEFAULT_SIM_MODEL:
        return model
    return device_model if device_model in available_profiles() else model


def _placement_outline(path: Path) -> tuple[list[str], list[str]]:
    """(element types, devices) a placements file uses, in first-seen order: what to
    characterize and where to run, before the file is read against a library."""
    data = _read_yaml(path, "a placements file")
    items = data.get("placements") if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise UserError(
            f"{path}: expected a list of placements {{element, device, start}} (directly or "
            "under 'placements:') or a schedule written by `eopt solve` (.json)"
        )
    placed = [i for i in items if isinstance(i, Mapping)]
    names = [str(i["element"]) for i in placed if "element" in i]
    devices = [str(i.get("device", "gpu0")) for i in placed]
    return list(dict.fromkeys(names)), list(dict.fromkeys(devices)) or ["gpu0"]


@click.command("check")
@click.argument(
    "schedule_file", metavar="SCHEDULE", type=click.Path(dir_okay=False, path_type=Path)
)
@click.option(
    "--library",
    "library_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Signature library (repeatable). With --sim and no library, every element is "
    "characterized on the simulator first.",
)
@click.option(
    "--graph",
    "graph_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Interaction graph to start from (eopt.interactions/1).",
)
@click.option(
    "--sim", is_flag=True, help="Run on simulated GPUs (each element a simulated kernel)."
)
@click.option(
    "--mechanisms",
    default="all",
    show_default=True,
    help="Interaction mechanisms the simulated GPUs have: all, none, or a comma list "
    "(thermal,contention,power_cap,cache,clock_state,interconnect,node_power). "
    "Run-to-run noise stays on.",
)
@click.option(
    "--kernels",
    "kernels_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML/JSON: element → {kernel, reads, writes, sm_share, sm_clock_mhz, workload}. "
    "Default: the kernel in the element's library workload, or the kernel it is named.",
)
@click.option(
    "--gpu",
    "gpu_specs",
    multiple=True,
    metavar="DEV=GPU",
    help="Without --sim: which GPU runs a schedule device (DEV=0, DEV=cuda:1, DEV=GPU-uuid); "
    "default: the schedule's devices on GPUs 0, 1, … in order.",
)
@click.option(
    "--sync",
    metavar="torch|cupy|none|MOD:FN",
    default="none",
    show_default=True,
    help="Without --sim: what waits for the GPU work an element's callable queued.",
)
@click.option(
    "--cooldown",
    "cooldown_s",
    default=1.0,
    show_default=True,
    type=float,
    help="Without --sim: idle seconds before every run (the null context).",
)
@click.option(
    "--no-control",
    is_flag=True,
    help="Without --sim: never change a GPU setting (elements may not lock clocks).",
)
@click.option(
    "--jitter",
    metavar="PCT",
    help="With --sim: every kernel's launch-time noise, the relative spread of its "
    "duration (e.g. 2%); default: the GPU profile's.",
)
@sim_model_option("Simulated GPU.", name="--model")
@click.option("--power-budget", "power_budget_w", type=float, help="Node power budget, W.")
@click.option("--power-limit", "power_limit_w", type=float, help="Every GPU's power limit, W.")
@click.option(
    "--runs",
    default=30,
    show_default=True,
    type=click.IntRange(min=2),
    help="Runs per measurement.",
)
@seed_option("Seed of the runs.")
@confidence_option("Confidence of the whole-schedule test (energy and time together).")
@click.option(
    "--max-rounds",
    default=4,
    show_default=True,
    type=click.IntRange(min=0),
    help="Most refinement rounds.",
)
@click.option(
    "--measured",
    "measured_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="RUN.json",
    help="Test a recorded run (`eopt measure -o`, one region per element call) against "
    "SCHEDULE's prediction, per element and in total, without running anything.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write eopt.check/1 JSON here.",
)
@click.option(
    "--write-graph",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the grown interaction graph here.",
)
@click.option(
    "--write-library",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the characterized signatures (JSON lines) here.",
)
@json_option("Print eopt.check/1 JSON.")
@force_option()
@quiet_option()
def command(
    schedule_file: Path,
    library_files: tuple[Path, ...],
    graph_file: Path | None,
    sim: bool,
    mechanisms: str,
    kernels_file: Path | None,
    gpu_specs: tuple[str, ...],
    sync: str,
    cooldown_s: float,
    no_control: bool,
    jitter: str | None,
    model: str,
    power_budget_w: float | None,
    power_limit_w: float | None,
    runs: int,
    seed: int,
    confidence: float,
    max_rounds: int,
    measured_file: Path | None,
    output: Path | None,
    write_graph: Path | None,
    write_library: Path | None,
    as_json: bool,
    force: bool,
) -> None:
    """Run SCHEDULE, compare it with its composed prediction, and explain a deviation.

    The paper's five steps (§4.4): compose the prediction; run the schedule --runs times
    and test it in energy and time; on a deviation, localize it (bisection over prefixes,
    then pairs), identify the mechanism with its protocol (co-run against isolation;
    vary the preceding element's data, the idle gap, the predecessors), characterize the
    pair (a contextual signature or a composite), write the edge into the interaction
    graph, and predict again.

    SCHEDULE is a placements file or a schedule `eopt solve` wrote (with the --library it
    was solved with; every element type at each of its settings runs at that setting).
    With --measured RUN.json nothing runs: the recorded run is tested against the
    schedule's prediction, per element and in total.

    \b
    Examples:
      eopt check sched.yaml --sim --kernels kernels.yaml
      eopt check sched.yaml --sim --kernels kernels.yaml --mechanisms none
      eopt check sched.yaml --sim --kernels kernels.yaml --mechanisms none --jitter 2%
      eopt check sched.yaml --library lib.jsonl --sim --mechanisms cache,contention --json
      eopt check sched.yaml --sim --kernels k.yaml --write-graph g.json -o check.json
      eopt check sched.yaml --sim --kernels k.yaml --graph g.json --library lib.jsonl
      eopt check schedule.json --library signatures.jsonl --sim   # from `eopt solve`
      eopt check sched.yaml --kernels real.yaml --sync torch --gpu gpu0=0   # real GPUs
      eopt check schedule.json --measured run.json -o m.json   # a recorded run

    On real GPUs each element is a Python callable in --kernels
    ('gemm: {callable: mykernels.py:matmul, args: {n: 4096}}'); one thread per GPU runs
    its elements in order, and the energy counters measure them. Elements that co-run on
    one GPU need --sim.
    """
    from eopt.calculus.interactions import InteractionsError, read_interactions, write_interactions
    from eopt.calculus.schedule import PlacementsError, read_placements
    from eopt.check.runner import parse_jitter
    from eopt.check.workflow import characterize_element, check_schedule
    from eopt.model.library import LibraryError, read_library
    from eopt.sim.mechanisms import Mechanisms

    for path, option in (
        (output, "--output"),
        (write_graph, "--write-graph"),
        (write_library, "--write-library"),
    ):
        check_output(path, force, option)
    if measured_file is not None:
        ctx = click.get_current_context()
        clash = [
            f"--{name.replace('_', '-')}"
            for name in ("sim", "graph_file", "kernels_file", "write_graph", "write_library")
            if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT
        ]
        if clash:
            raise UserError(
                f"--measured tests a recorded run without running anything: drop {clash[0]}"
            )
        _check_measured(schedule_file, measured_file, library_files, confidence, output, as_json)
        return
    if jitter is not None and not sim:
        raise UserError("--jitter sets the simulated kernels' launch-time noise: add --sim")
    try:
        jitter_fraction = parse_jitter(jitter, "--jitter")
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if sim:
        try:
            Mechanisms.parse(mechanisms)
        except ValueError as exc:
            raise UserError(f"--mechanisms: {exc}") from None
    library = []
    try:
        for path in library_files:
            library.extend(read_library(path))
        graph = read_interactions(graph_file) if graph_file is not None else None
    except (LibraryError, InteractionsError) as exc:
        raise UserError(str(exc)) from None
    by_name = {s.name: s for s in library if s.context is None}
    solved = _solved_input(schedule_file, library)
    if solved is not None:
        library.extend(solved.signatures.values())
        by_name.update(solved.signatures)
        names, devices = list(solved.signatures), list(solved.devices)
        model = _schedule_model(model, solved.device_model)
        if solved.setting_changes and not as_json:
            console.print(
                f"note: {solved.setting_changes} setting change(s) of the schedule are not "
                "run as elements: the GPUs change their settings themselves"
            )
    else:
        names, devices = _placement_outline(schedule_file)
    guard: Any = contextlib.nullcontext()
    if sim:
        runner: Any = _sim_runner(
            schedule_file, kernels_file, names, by_name, devices, model, mechanisms,
            power_limit_w, power_budget_w, jitter_fraction,
            kinds=solved.kinds if solved is not None else None,
        )  # fmt: skip
    else:
        runner, opened = _device_runner(
            kernels_file, names, devices, gpu_specs, sync, cooldown_s, no_control
        )
        if not no_control:
            from eopt.devices.guard import restoring_on_exit

            guard = restoring_on_exit(opened)
    with guard:
        where = "the simulator" if sim else "the GPUs"
        missing = [n for n in names if n not in by_name]
        if missing:
            console.print(
                f"characterizing {len(missing)} element(s) on {where} from the null context "
                f"({runs} runs each): {', '.join(missing)}"
            )
            for k, name in enumerate(missing):
                sig = characterize_element(
                    runner, name, devices[0], runs, seed=seed + 7919 * (k + 1)
                )
                library.append(sig)
                by_name[name] = sig
        if solved is not None:
            placements = list(solved.placements)
        else:
            try:
                placements = list(read_placements(schedule_file, library).placements)
            except PlacementsError as exc:
                raise UserError(str(exc)) from None
        progress = None if as_json else (lambda line: console.print(f"  {escape(line)}"))
        try:
            result = check_schedule(
                placements,
                library,
                runner,
                graph=graph,
                runs=runs,
                seed=seed,
                confidence=confidence,
                max_rounds=max_rounds,
                progress=progress,
            )
        except ValueError as exc:
            raise UserError(str(exc)) from None
    data = result.to_dict()
    if sim:
        data["mechanisms"] = list(runner.mechanisms.enabled())
        data["jitter"] = runner.jitter
        data["model"] = runner.model
    data["schedule"] = str(schedule_file)
    if output is not None:
        write_json(output, data)
    if write_graph is not None:
        write_interactions(write_graph, result.graph)
    if write_library is not None:
        from eopt.model.fileformats import atomic_write_text, dumps_json

        lines = [dumps_json(s.to_dict()) for s in [*library, *result.library]]
        atomic_write_text(write_library, "\n".join(lines) + "\n")
    if as_json:
        write_json("-", data)
        return
    _print(result, data)


def _sim_runner(
    schedule_file: Path,
    kernels_file: Path | None,
    names: list[str],
    by_name: Mapping[str, Any],
    devices: list[str],
    model: str,
    mechanisms: str,
    power_limit_w: float | None,
    power_budget_w: float | None,
    jitter: float | None = None,
    kinds: Mapping[str, str] | None = None,
) -> Any:
    """The simulator's runner: each element a simulated kernel.

    ``kinds`` maps a solved schedule's check elements to their element types: a type's
    kernel (from --kernels or its library entry) runs at the element's own SM clock.
    """
    from dataclasses import replace

    from eopt.check.runner import SimRunner

    given = read_kernel_map(kernels_file) if kernels_file is not None else {}
    kernels = dict(given)
    for name in names:
        kind = (kinds or {}).get(name, name)
        spec = given.get(name) or given.get(kind)
        sig = by_name.get(name)
        if spec is None:
            spec = _default_kernel(kind, sig)
        if spec is None:
            raise UserError(
                f"{schedule_file}: element {kind!r} has no simulated kernel; map it in "
                f"--kernels (e.g. '{kind}: {{kernel: gemm}}')"
            )
        clock = sig.op_point.sm_clock_mhz if kinds and sig is not None else None
        kernels[name] = replace(spec, sm_clock_mhz=clock) if clock is not None else spec
    try:
        return SimRunner(
            kernels,
            devices,
            model=model,
            mechanisms=mechanisms,
            power_limit_w=power_limit_w,
            power_budget_w=power_budget_w,
            jitter=jitter,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _device_runner(
    kernels_file: Path | None,
    names: list[str],
    devices: list[str],
    gpu_specs: tuple[str, ...],
    sync: str,
    cooldown_s: float,
    no_control: bool,
) -> tuple[Any, list[Any]]:
    """The runner for real GPUs: callables from --kernels, GPUs from --gpu."""
    from eopt.check.device_runner import CallableElement, DeviceRunner
    from eopt.devices import open_devices, resolve_gpu
    from eopt.runs.sweep import _parse_sync
    from eopt.runs.user_code import UserCodeError, import_callable

    if kernels_file is None:
        raise UserError(
            "on real GPUs every element needs its program: give --kernels FILE mapping each "
            "to {callable: file.py:fn, args: {...}}, or run on the simulator with --sim"
        )
    data = _kernel_map_data(kernels_file)
    elements: dict[str, CallableElement] = {}
    for name in names:
        entry = data.get(name)
        where = f"{kernels_file}: {name}"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("callable"), str):
            raise UserError(f"{where}: give {{callable: file.py:fn}} for this element")
        unknown = sorted(set(entry) - {"callable", "args", "sm_clock_mhz"})
        if unknown:
            raise UserError(f"{where}: unknown key(s) {unknown}; use callable, args, sm_clock_mhz")
        args = entry.get("args") or {}
        if not isinstance(args, Mapping):
            raise UserError(f"{where}: 'args' must map argument names to values")
        try:
            fn = import_callable(entry["callable"])
        except UserCodeError as exc:
            raise UserError(f"{where}: {exc}") from None
        clock = entry.get("sm_clock_mhz")
        elements[name] = CallableElement(
            fn, dict(args), entry["callable"], float(clock) if clock is not None else None
        )
    bad = [spec for spec in gpu_specs if "=" not in spec]
    if bad:
        raise UserError(f"--gpu {bad[0]!r}: write DEV=GPU, e.g. --gpu gpu0=0")
    mapping = dict(spec.split("=", 1) for spec in gpu_specs)
    try:
        indices = [resolve_gpu(mapping.get(d, str(k))) for k, d in enumerate(devices)]
        opened = open_devices("nvml", indices=indices, control=not no_control)
    except Exception as exc:  # no driver, no GPU, a bad --gpu: one line, and the way out
        raise UserError(
            f"cannot open the GPUs for {', '.join(devices)} ({exc}); on a machine without "
            "NVIDIA GPUs run the schedule on the simulator with --sim"
        ) from None
    try:
        sync_fn = None if sync.strip().lower() == "none" else _parse_sync(sync)[0]
        runner = DeviceRunner(
            elements,
            dict(zip(devices, opened, strict=True)),
            sync=sync_fn,
            cooldown_s=cooldown_s,
            control=not no_control,
        )
    except (ValueError, UserCodeError) as exc:
        raise UserError(str(exc)) from None
    return runner, opened


def _print(result: Any, data: Mapping[str, Any]) -> None:
    from eopt.report.check_verdict import refined_verdict

    pred, meas = data["predicted"], data["measured"]
    console.print(
        f"predicted {pred['energy_j']:.6g} J ± {pred['se_energy_j']:.2g} (mean's SE), "
        f"measured {meas['energy_j']:.6g} J over {meas['runs']} runs"
    )
    console.print(escape(str(result.initial)))
    if result.confirmation is not None:
        verdict = "confirm it" if result.deviation else "do not confirm it"
        console.print(f"fresh runs {verdict}:")
        console.print(escape(str(result.confirmation)))
    if not result.deviation:
        console.print("[green]no deviation[/]: the composition agrees with the measurement")
        return
    table = Table(title="interactions found", show_lines=False)
    for col in ("elements", "kind", "mechanism", "scope", "ΔE", "ΔT", "evidence"):
        table.add_column(col)
    for f in result.found:
        table.add_row(
            " → ".join(f.elements) if f.kind == "entry" else " ↔ ".join(f.elements),
            f.kind,
            f.mechanism,
            f.scope,
            f"{f.energy_rel:+.2%}",
            f"{f.time_rel:+.2%}",
            escape(f.evidence),
        )
    console.print(table)
    verdict = refined_verdict(data)
    if verdict is not None:
        # Both answers, as the HTML report gives them: whether the means agree now, and
        # whether the one-run interval covers the measurement.
        colour = "green" if verdict.resolved else "red"
        console.print(f"[{colour}]{escape(verdict.words())}[/]")
