"""Pipeline-parallel training iterations as plans: 1F1B and GPipe.

S stages × M microbatches; stage s runs on device ``stage{s}`` and its forward and
backward of one microbatch are elements ``F[s{s},m{m}]`` and ``B[s{s},m{m}]`` of types
``stage{s}.forward`` and ``stage{s}.backward`` (the names a Perseus profile imports to).

Dependencies (design.md): F(s,m) after F(s−1,m); B(s,m) after B(s+1,m); B(S−1,m) after
F(S−1,m); and the tasks of one stage run in the schedule's order, each after the previous.

1F1B order on stage s: ``w = min(S−s−1, M)`` warm-up forwards, then alternately one
forward and one backward until every forward is issued, then the remaining backwards.
GPipe order: all M forwards, then all M backwards, both in microbatch order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from eopt.model.planfile import Plan, PlanDevice, PlanElement, PlanError
from eopt.model.signature import Signature

__all__ = [
    "MAX_ELEMENTS",
    "MAX_MICROBATCHES",
    "MAX_STAGES",
    "SCHEDULES",
    "Step",
    "check_size",
    "gpipe_order",
    "library_device_model",
    "one_f_one_b_order",
    "pipeline_plan",
    "stage_order",
    "stage_steps",
    "task_name",
]

SCHEDULES = ("1f1b", "gpipe")

#: Size limits of a generated pipeline, checked before anything is allocated: far above
#: any real pipeline, low enough that a typo (``-M 1000000``) fails at once instead of
#: filling memory. A plan of ``MAX_ELEMENTS`` elements takes minutes to solve.
MAX_STAGES = 512
MAX_MICROBATCHES = 16384
MAX_ELEMENTS = 200_000

Op = tuple[str, int]  # ("forward" | "backward", microbatch)


def task_name(kind: str, stage: int, microbatch: int) -> str:
    """The element name of a forward/backward: ``F[s0,m3]`` / ``B[s0,m3]``."""
    return f"{'F' if kind == 'forward' else 'B'}[s{stage},m{microbatch}]"


def one_f_one_b_order(stages: int, microbatches: int, stage: int) -> list[Op]:
    """The 1F1B order of one stage's operations.

    Args:
        stages: S, the number of pipeline stages.
        microbatches: M, microbatches per iteration.
        stage: s in 0 … S−1.

    Returns:
        ``[("forward", m) | ("backward", m), …]`` in execution order.

    Example:
        >>> [k[0] + str(m) for k, m in one_f_one_b_order(2, 3, 0)]
        ['f0', 'f1', 'b0', 'f2', 'b1', 'b2']
    """
    _check(stages, microbatches, stage)
    warmup = min(stages - stage - 1, microbatches)
    order: list[Op] = [("forward", m) for m in range(warmup)]
    next_f, next_b = warmup, 0
    while next_f < microbatches:
        order.append(("forward", next_f))
        next_f += 1
        order.append(("backward", next_b))
        next_b += 1
    order.extend(("backward", m) for m in range(next_b, microbatches))
    return order


def gpipe_order(stages: int, microbatches: int, stage: int) -> list[Op]:
    """The GPipe order of one stage: all forwards, then all backwards (microbatch order).

    Example:
        >>> [k[0] + str(m) for k, m in gpipe_order(2, 2, 1)]
        ['f0', 'f1', 'b0', 'b1']
    """
    _check(stages, microbatches, stage)
    return [("forward", m) for m in range(microbatches)] + [
        ("backward", m) for m in range(microbatches)
    ]


def stage_order(schedule: str, stages: int, microbatches: int, stage: int) -> list[Op]:
    """The order of ``schedule`` (``"1f1b"`` or ``"gpipe"``) on one stage."""
    key = schedule.lower()
    if key == "1f1b":
        return one_f_one_b_order(stages, microbatches, stage)
    if key == "gpipe":
        return gpipe_order(stages, microbatches, stage)
    raise PlanError(f"unknown pipeline schedule {schedule!r}; choose one of {list(SCHEDULES)}")


class Step(NamedTuple):
    """One operation of a stage, as a training loop runs it.

    Attributes:
        kind: ``"forward"`` or ``"backward"``.
        microbatch: m in 0 … M−1.
        name: The plan's element name, ``F[s{stage},m{m}]`` / ``B[s{stage},m{m}]``: what
            to pass to ``RuntimeController.element``.
    """

    kind: str
    microbatch: int
    name: str


def stage_steps(stage: int, stages: int, microbatches: int, schedule: str = "1f1b") -> list[Step]:
    """The operations of one stage in the order the generated plan runs them.

    A training loop that iterates over this list runs what ``eopt plan pipeline`` planned
    (and what the runtime controller expects), element name included.

    Args:
        stage: s in 0 … S−1 (this rank's stage).
        stages: S.
        microbatches: M.
        schedule: ``"1f1b"`` or ``"gpipe"``.

    Example:
        >>> [step.name for step in stage_steps(0, 2, 3)]
        ['F[s0,m0]', 'F[s0,m1]', 'B[s0,m0]', 'F[s0,m2]', 'B[s0,m1]', 'B[s0,m2]']
    """
    return [
        Step(kind, m, task_name(kind, stage, m))
        for kind, m in stage_order(schedule, stages, microbatches, stage)
    ]


def check_size(stages: int, microbatches: int) -> None:
    """Refuse pipelines outside the documented limits, before allocating anything.

    Raises:
        PlanError: naming the value, the limit and what to do.
    """
    for value, what in ((stages, "stages"), (microbatches, "microbatches")):
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(f"{what} must be a whole number, got {value!r}")
    if stages < 1 or microbatches < 1:
        raise PlanError(
            f"a pipeline needs ≥ 1 stage and ≥ 1 microbatch, got S={stages}, M={microbatches}"
        )
    if stages > MAX_STAGES:
        raise PlanError(f"{stages} stages is above the limit of {MAX_STAGES} stages")
    if microbatches > MAX_MICROBATCHES:
        raise PlanError(
            f"{microbatches} microbatches is above the limit of {MAX_MICROBATCHES} "
            "microbatches per iteration"
        )
    if 2 * stages * microbatches > MAX_ELEMENTS:
        raise PlanError(
            f"{stages} stages × {microbatches} microbatches make {2 * stages * microbatches} "
            f"elements, above the limit of {MAX_ELEMENTS}; plan fewer microbatches (the "
            "steady state repeats, so a few dozen show it)"
        )


def _check(stages: int, microbatches: int, stage: int) -> None:
    check_size(stages, microbatches)
    if not 0 <= stage < stages:
        raise PlanError(f"stage {stage} is outside 0 … {stages - 1}")


def default_type(stage: int, kind: str) -> str:
    """Element type of a stage's forward/backward: ``stage{s}.{kind}``."""
    return f"stage{stage}.{kind}"


def library_device_model(signatures: Iterable[Signature]) -> str | None:
    """The GPU model every signature was measured on (its ``meta.device_model``).

    Returns:
        The model's name, or None when the signatures do not say or disagree.
    """
    models = {s.meta.get("device_model") for s in signatures}
    if len(models) == 1:
        (model,) = models
        return model if isinstance(model, str) and model else None
    return None


def pipeline_plan(
    stages: int,
    microbatches: int,
    idle_power_w: float | Sequence[float],
    schedule: str = "1f1b",
    libraries: Sequence[str] = (),
    deadline: float | None = None,
    type_of: Callable[[int, str], str] = default_type,
    gpus: Sequence[int] | None = None,
    name: str | None = None,
    device_model: str | None = None,
) -> Plan:
    """A training iteration of a synchronous pipeline as a plan.

    Args:
        stages: S, the number of stages (one device ``stage{s}`` each).
        microbatches: M, microbatches per iteration.
        idle_power_w: s̄ per device in W (one value for all, or one per stage): the draw
            while a stage waits (Perseus's P_block).
        schedule: ``"1f1b"`` or ``"gpipe"``.
        libraries: Signature library paths the plan references.
        deadline: Optional iteration-time bound, in s.
        type_of: Element type of (stage, kind); default ``stage{s}.{kind}``.
        gpus: Physical GPU index per stage, when known.
        name: Plan name.
        device_model: The GPU model the signatures were measured on (a simulator
            profile name such as ``"A40"``); None: not recorded.

    Returns:
        The plan, with precedence as in the module docstring.
    """
    if schedule.lower() not in SCHEDULES:
        raise PlanError(f"unknown pipeline schedule {schedule!r}; choose one of {list(SCHEDULES)}")
    _check(stages, microbatches, 0)
    powers = (
        [float(idle_power_w)] * stages
        if isinstance(idle_power_w, (int, float))
        else list(map(float, idle_power_w))
    )
    if len(powers) != stages:
        raise PlanError(
            f"idle power: expected 1 or {stages} values (one per stage), got {len(powers)}"
        )
    if gpus is not None:
        if len(gpus) != stages:
            raise PlanError(f"gpus: expected {stages} GPU indices (one per stage), got {len(gpus)}")
        if any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in gpus):
            raise PlanError(f"gpus: GPU indices are integers ≥ 0, got {list(gpus)}")
        if len(set(gpus)) != len(gpus):
            raise PlanError(f"gpus: each stage needs its own GPU, got {list(gpus)}")
    devices = tuple(
        PlanDevice(f"stage{s}", powers[s], None if gpus is None else int(gpus[s]))
        for s in range(stages)
    )
    elements: list[PlanElement] = []
    for s in range(stages):
        previous: str | None = None
        for kind, m in stage_order(schedule, stages, microbatches, s):
            after: list[str] = []
            if previous is not None:
                after.append(previous)
            if kind == "forward" and s > 0:
                after.append(task_name("forward", s - 1, m))
            if kind == "backward":
                if s < stages - 1:
                    after.append(task_name("backward", s + 1, m))
                else:
                    after.append(task_name("forward", s, m))
            # The same-stage predecessor may coincide with a cross-stage one.
            after = list(dict.fromkeys(after))
            elem = PlanElement(task_name(kind, s, m), f"stage{s}", type_of(s, kind), tuple(after))
            elements.append(elem)
            previous = elem.name
    return Plan(
        devices=devices,
        elements=tuple(elements),
        deadline=deadline,
        libraries=tuple(libraries),
        name=name or f"{schedule.lower()}-s{stages}-m{microbatches}",
        meta={
            "generator": "pipeline",
            "schedule": schedule.lower(),
            "stages": stages,
            "microbatches": microbatches,
        },
        device_model=device_model,
    )
