"""``eopt plan``: generate plans (pipeline training iterations) from profiles."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import click
from rich.markup import escape

from eopt.cli._common import (
    GpuList,
    Quantity,
    UserError,
    check_output,
    console,
    write_json,
)
from eopt.cli.options import force_option, json_option, quiet_option
from eopt.model.library import Library, write_library
from eopt.model.planfile import write_plan
from eopt.model.units import format_power
from eopt.plan.perseus import profile_device_model, read_perseus_profile
from eopt.plan.pipeline import (
    MAX_ELEMENTS,
    MAX_MICROBATCHES,
    MAX_STAGES,
    SCHEDULES,
    check_size,
    default_type,
    library_device_model,
    pipeline_plan,
)

__all__ = ["command"]


@click.group("plan")
def command() -> None:
    """Generate plans (DAGs of elements on devices) for `eopt solve`.

    \b
    Example:
      eopt plan pipeline --profile examples/gpt3-a100.csv --microbatches 12 \\
          --idle-power 83.64W -o plan.yaml
      eopt solve plan.yaml --slowdown 5% -o schedule.json
    """


def _library_file_for(plan_path: Path) -> Path:
    """``plan.yaml`` → ``plan.signatures.jsonl`` next to it."""
    return plan_path.with_name(plan_path.stem + ".signatures.jsonl")


@command.command("pipeline")
@click.option(
    "--profile",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Perseus/Zeus stage profile CSV (stage,instruction,frequency,time,energy).",
)
@click.option(
    "--library",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Existing signature library with types stage{s}.forward / stage{s}.backward.",
)
@click.option(
    "--stages",
    "-S",
    type=click.IntRange(min=1, max=MAX_STAGES),
    help=f"Pipeline stages (default: all in the profile; at most {MAX_STAGES}).",
)
@click.option(
    "--microbatches",
    "-M",
    type=click.IntRange(min=1, max=MAX_MICROBATCHES),
    required=True,
    help=f"Microbatches per iteration (at most {MAX_MICROBATCHES}; 2·S·M elements at most "
    f"{MAX_ELEMENTS}).",
)
@click.option(
    "--schedule",
    type=click.Choice(SCHEDULES, case_sensitive=False),
    default="1f1b",
    show_default=True,
    help="Pipeline schedule.",
)
@click.option(
    "--idle-power",
    type=Quantity("W"),
    required=True,
    help="Draw of a waiting stage (idle/blocked), e.g. 83.64W or 83640mW; static power of "
    "imported cells.",
)
@click.option(
    "--deadline",
    type=Quantity("s", positive=True),
    help="Iteration-time bound to store in the plan, e.g. 3s.",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="TYPE=NAME",
    help="With --library: the library element a stage type is, e.g. forward=gemm_fwd "
    "(every stage's forwards), backward=gemm_bwd, stage1.forward=big_fwd. Repeatable; "
    "without it the library must hold stage{s}.forward / stage{s}.backward.",
)
@click.option("--gpus", type=GpuList(), help="Physical GPU index per stage, e.g. 0,1,2,3.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Plan file to write (.yaml or .json); an imported profile goes next to it as "
    "<name>.signatures.jsonl.",
)
@force_option()
@json_option("Print what was written as JSON.")
@quiet_option()
def pipeline(
    profile: Path | None,
    library: Path | None,
    stages: int | None,
    microbatches: int,
    schedule: str,
    idle_power: float,
    deadline: float | None,
    types: tuple[str, ...],
    gpus: list[int] | None,
    output: Path,
    force: bool,
    as_json: bool,
) -> None:
    """A synchronous pipeline-parallel training iteration (1F1B or GPipe).

    Stage s runs on device stage{s}; its forward/backward of microbatch m are elements
    F[s{s},m{m}] / B[s{s},m{m}] of types stage{s}.forward / stage{s}.backward.

    \b
    Examples:
      eopt plan pipeline --profile examples/gpt3-a100.csv -M 12 \\
          --idle-power 83.64W -o plan.yaml
      eopt plan pipeline --library stages.jsonl -S 4 -M 8 --schedule gpipe \\
          --idle-power 75W -o plan.json
      eopt plan pipeline --library gemm.jsonl -S 2 -M 4 --type forward=gemm \\
          --type backward=gemm --idle-power 60W -o plan.yaml
    """
    if (profile is None) == (library is None):
        raise UserError("give exactly one of --profile CSV or --library JSONL")
    if types and profile is not None:
        raise UserError("--type maps a library's elements; a --profile names its own stages")
    mapping = _type_map(types)
    if mapping and stages is None:
        raise UserError("--type maps elements to stage types: give the number of stages, -S N")
    if stages is not None:
        check_size(stages, microbatches)
    lib_path = _library_file_for(output) if profile is not None else library
    check_output(output, force)
    if profile is not None:
        check_output(lib_path, force, option="--output (its signature library)")
    plan_dir = output.parent if str(output.parent) else Path(".")
    if profile is not None:
        sigs = read_perseus_profile(profile, idle_power)
        source = f"profile {profile}"
        device_model = profile_device_model(profile)
    else:
        assert library is not None
        sigs = Library.load(library).signatures
        source = f"library {library}"
        device_model = library_device_model(sigs)
    names = {s.name for s in sigs}

    def type_of(stage: int, kind: str) -> str:
        own = default_type(stage, kind)
        return mapping.get(own, mapping.get(kind, own))

    available = _available_stages(sigs, source, from_profile=profile is not None, type_of=type_of)
    stages = stages or available
    if stages == 0:
        raise UserError(
            f"{source} holds no stage types (stage0.forward, stage0.backward …); it holds "
            f"{', '.join(sorted(names)[:8])}{' …' if len(names) > 8 else ''}: say which "
            "element each stage runs with --type forward=NAME --type backward=NAME, and "
            "the number of stages with --stages"
        )
    check_size(stages, microbatches)  # before any list of 2·S·M elements exists
    if gpus is not None and len(gpus) != stages:
        raise UserError(f"--gpus: expected {stages} GPU indices (one per stage), got {len(gpus)}")
    missing = sorted(
        {
            type_of(s, kind)
            for s in range(stages)
            for kind in ("forward", "backward")
            if type_of(s, kind) not in names
        }
    )
    if missing:
        fix = (
            "lower --stages or use a fuller profile"
            if profile is not None
            else "map the stage types to elements it holds with --type TYPE=NAME, or lower --stages"
        )
        raise UserError(
            f"{source} has no cells of {', '.join(missing[:6])}"
            f"{' …' if len(missing) > 6 else ''}; it holds {', '.join(sorted(names)[:8])}"
            f"{' …' if len(names) > 8 else ''} — {fix}"
        )
    assert lib_path is not None
    if profile is not None:
        used = [s for s in sigs if int(s.workload.get("stage", 0)) < stages]
        write_library(lib_path, used)
    rel_lib = os.path.relpath(lib_path.resolve(), plan_dir.resolve())
    plan = pipeline_plan(
        stages,
        microbatches,
        idle_power,
        schedule=schedule,
        libraries=[rel_lib],
        deadline=deadline,
        type_of=type_of,
        gpus=gpus,
        name=output.stem,
        device_model=device_model,
    )
    write_plan(output, plan)
    if as_json:
        write_json(
            "-",
            {
                "plan": str(output),
                "library": str(lib_path),
                "schedule": schedule.lower(),
                "stages": stages,
                "microbatches": microbatches,
                "elements": len(plan.elements),
                "idle_power_w": idle_power,
                "device_model": device_model,
            },
        )
        return
    console.print(
        f"Wrote [bold]{escape(str(output))}[/]: {schedule.upper()} pipeline, {stages} stages × "
        f"{microbatches} microbatches = {len(plan.elements)} elements on {stages} devices, "
        f"idle power {format_power(idle_power)}.",
        highlight=False,
    )
    if profile is not None:
        console.print(
            f"Wrote [bold]{escape(str(lib_path))}[/]: {len(used)} signatures "
            f"({len({s.name for s in used})} element types) from {escape(str(profile))}.",
            highlight=False,
        )
    console.print(
        f"Next: eopt solve {escape(str(output))} --slowdown 5% -o schedule.json", highlight=False
    )


def _type_map(items: tuple[str, ...]) -> dict[str, str]:
    """``--type TYPE=NAME`` pairs: a stage type (``stage1.forward``) or a kind
    (``forward``: every stage's) → a library element name."""
    mapping: dict[str, str] = {}
    for item in items:
        key, sep, name = item.partition("=")
        key, name = key.strip(), name.strip()
        kind = key.rpartition(".")[2]
        valid_key = key in ("forward", "backward") or (
            key.startswith("stage") and kind in ("forward", "backward")
            and key[5 : -len(kind) - 1].isdigit()
        )  # fmt: skip
        if not sep or not name or not valid_key:
            raise UserError(
                f"--type {item!r}: write TYPE=NAME with TYPE forward, backward or "
                "stage<S>.forward / stage<S>.backward, e.g. --type forward=gemm_fwd"
            )
        if key in mapping:
            raise UserError(f"--type {key}: given twice")
        mapping[key] = name
    return mapping


def _available_stages(
    sigs: list,  # type: ignore[type-arg]
    source: str,
    from_profile: bool,
    type_of: Callable[[int, str], str] = default_type,
) -> int:
    """The stages a profile (max stage index + 1) or a library (leading stages with both
    a forward and a backward) covers. A profile's stage index is refused above
    ``MAX_STAGES`` before any per-stage list is made: a row of stage 100000000 would
    otherwise have eopt loop over a hundred million stages."""
    if not from_profile:
        return _stages_in(sigs, type_of)
    highest = max((int(s.workload.get("stage", 0)) for s in sigs), default=0)
    if highest >= MAX_STAGES:
        raise UserError(
            f"{source}: stage index {highest} is above the limit of {MAX_STAGES - 1} "
            f"(at most {MAX_STAGES} stages); check the profile's stage column"
        )
    return highest + 1


def _stages_in(sigs: list, type_of: Callable[[int, str], str] = default_type) -> int:  # type: ignore[type-arg]
    """Number of leading stages that have both a forward and a backward type; a mapping
    that gives every stage the same elements covers any number (the limit stands)."""
    names = {s.name for s in sigs}
    count = 0
    while type_of(count, "forward") in names and type_of(count, "backward") in names:
        count += 1
        if count >= MAX_STAGES:
            break
    return count
