"""``eopt plan``: generate plans (pipeline training iterations) from profiles."""

from __future__ import annotations

import os
from pathlib import Path

import click

from eopt.calculus.library import Library, write_library
from eopt.calculus.units import parse_power_w
from eopt.cli._common import UserError, console
from eopt.plan.perseus import read_perseus_profile, stage_count
from eopt.plan.pipeline import SCHEDULES, default_type, pipeline_plan
from eopt.plan.planfile import write_plan

__all__ = ["command"]


@click.group("plan")
def command() -> None:
    """Generate plans (DAGs of elements on devices) for `eopt solve`.

    \b
    Example:
      eopt plan pipeline --profile gpt3.csv --microbatches 12 \\
          --idle-power 83.64W -o plan.yaml
      eopt solve plan.yaml --slowdown 5% -o schedule.json
    """


def _library_file_for(plan_path: Path) -> Path:
    """``plan.yaml`` → ``plan.signatures.jsonl`` next to it."""
    return plan_path.with_name(plan_path.stem + ".signatures.jsonl")


def _parse_gpus(text: str | None, stages: int) -> list[int] | None:
    if text is None:
        return None
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a list like 0,1,2,3", param_hint="--gpus"
        ) from None
    if len(gpus) != stages:
        raise click.BadParameter(
            f"expected {stages} GPU indices, got {len(gpus)}", param_hint="--gpus"
        )
    return gpus


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
    type=click.IntRange(min=1),
    help="Pipeline stages (default: all in the profile).",
)
@click.option(
    "--microbatches",
    "-M",
    type=click.IntRange(min=1),
    required=True,
    help="Microbatches per iteration.",
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
    required=True,
    help="Draw of a waiting stage (idle/blocked), e.g. 83.64W; static power of imported cells.",
)
@click.option("--deadline", type=float, help="Iteration-time bound to store in the plan, s.")
@click.option("--gpus", help="Physical GPU index per stage, e.g. 0,1,2,3.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Plan file to write (.yaml or .json); an imported profile goes next to it as "
    "<name>.signatures.jsonl.",
)
def pipeline(
    profile: Path | None,
    library: Path | None,
    stages: int | None,
    microbatches: int,
    schedule: str,
    idle_power: str,
    deadline: float | None,
    gpus: str | None,
    output: Path,
) -> None:
    """A synchronous pipeline-parallel training iteration (1F1B or GPipe).

    Stage s runs on device stage{s}; its forward/backward of microbatch m are elements
    F[s{s},m{m}] / B[s{s},m{m}] of types stage{s}.forward / stage{s}.backward.

    \b
    Examples:
      eopt plan pipeline --profile gpt3-175b+a100_sxm_bf16.csv -M 12 \\
          --idle-power 83.64W -o gpt3.yaml
      eopt plan pipeline --library stages.jsonl -S 4 -M 8 --schedule gpipe \\
          --idle-power 75W -o plan.json
    """
    if (profile is None) == (library is None):
        raise UserError("give exactly one of --profile CSV or --library JSONL")
    try:
        idle_w = parse_power_w(idle_power, "--idle-power")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--idle-power") from None
    if deadline is not None and deadline <= 0:
        raise click.BadParameter("must be > 0 seconds", param_hint="--deadline")
    plan_dir = output.parent if str(output.parent) else Path(".")
    if profile is not None:
        sigs = read_perseus_profile(profile, idle_w)
        available = stage_count(sigs)
        lib_path = _library_file_for(output)
        source = f"profile {profile}"
    else:
        assert library is not None
        sigs = Library.load(library).signatures
        available = _stages_in(sigs)
        lib_path = library
        source = f"library {library}"
    stages = stages or available
    types = {s.name for s in sigs}
    missing = [
        default_type(s, kind)
        for s in range(stages)
        for kind in ("forward", "backward")
        if default_type(s, kind) not in types
    ]
    if missing:
        raise UserError(
            f"{source} has no cells of type(s) {', '.join(missing[:6])}"
            f"{' …' if len(missing) > 6 else ''}; it covers {available} stage(s) — "
            "lower --stages or use a fuller profile"
        )
    if profile is not None:
        used = [s for s in sigs if int(s.workload.get("stage", 0)) < stages]
        write_library(lib_path, used)
    rel_lib = os.path.relpath(lib_path.resolve(), plan_dir.resolve())
    plan = pipeline_plan(
        stages,
        microbatches,
        idle_w,
        schedule=schedule,
        libraries=[rel_lib],
        deadline=deadline,
        gpus=_parse_gpus(gpus, stages),
        name=output.stem,
    )
    write_plan(output, plan)
    console.print(
        f"Wrote [bold]{output}[/]: {schedule.upper()} pipeline, {stages} stages × "
        f"{microbatches} microbatches = {len(plan.elements)} elements on {stages} devices, "
        f"idle power {idle_w:g} W.",
        highlight=False,
    )
    if profile is not None:
        console.print(
            f"Wrote [bold]{lib_path}[/]: {len(used)} signatures "
            f"({len({s.name for s in used})} element types) from {profile}.",
            highlight=False,
        )
    console.print(f"Next: eopt solve {output} --slowdown 5% -o schedule.json", highlight=False)


def _stages_in(sigs: list) -> int:  # type: ignore[type-arg]
    """Number of leading stages that have both a forward and a backward type."""
    names = {s.name for s in sigs}
    count = 0
    while default_type(count, "forward") in names and default_type(count, "backward") in names:
        count += 1
    return count
