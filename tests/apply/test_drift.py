"""Drift from the schedule: the loop's order, its elements' durations, elements never
entered — recorded in ``ctl.stats()`` and warned about past a threshold."""

from __future__ import annotations

import warnings

import pytest

from eopt.apply import PlanDriftWarning, RuntimeController
from eopt.plan.pipeline import gpipe_order, one_f_one_b_order, pipeline_plan, stage_steps

S, M = 2, 4


def _clock(kind: str, stage: int, m: int) -> float:
    return 1200.0 if kind == "B" else 1410.0  # forward and backward clocks alternate


def _names(order) -> list[str]:
    return [f"{kind[0].upper()}[{0},{m}]" for kind, m in order]


class _Timer:
    """A clock the test moves: each block 'takes' what the test says."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _run(ctl: RuntimeController, names, timer: _Timer | None = None, factor: float = 1.0):
    planned = {e.name: e.duration for e in ctl._schedule.elements}
    for name in names:
        with ctl.element(name):
            if timer is not None:
                timer.t += factor * planned[name]


def test_following_the_schedule_reports_no_drift(build, fake_gpu):
    sch = build.pipeline(S, M, _clock)
    timer = _Timer()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlanDriftWarning)
        with RuntimeController(sch, {"stage0": fake_gpu(0)}, timer=timer) as ctl:
            for _ in range(3):  # iterations repeat the schedule's names
                _run(ctl, ctl.order("stage0"), timer, factor=1.2)
    drift = ctl.stats().drift
    assert drift is not None and not drift.drifted
    (dev,) = drift.devices
    assert dev.iterations == 3 and dev.out_of_order == 0 and dev.never_entered == ()
    assert dev.median_ratio == pytest.approx(1.2)
    assert "drift" not in ctl.stats().summary()


def test_gpipe_order_on_a_1f1b_schedule_is_warned_and_counted(build, fake_gpu):
    """Old code: running GPipe instead of 1F1B passed silently."""
    sch = build.pipeline(S, M, _clock)
    with RuntimeController(sch, {"stage0": fake_gpu(0)}) as ctl:
        assert ctl.order("stage0") == _names(one_f_one_b_order(S, M, 0))
        with pytest.warns(
            PlanDriftWarning, match=r"entered F\[0,2\] where the schedule runs B\[0,0\]"
        ):
            _run(ctl, _names(gpipe_order(S, M, 0)))
    stats = ctl.stats()
    assert stats.drift.devices[0].out_of_order >= 2
    assert "out of the schedule's order" in stats.summary()
    assert stats.to_dict()["drift"]["drifted"] is True


def test_elements_much_slower_than_planned_are_warned_after_an_iteration(build, fake_gpu):
    """Old code: elements taking 3.5–10× their planned time passed silently."""
    sch = build.pipeline(S, M, _clock)
    timer = _Timer()
    ctl = RuntimeController(sch, {"stage0": fake_gpu(0)}, timer=timer)
    with ctl, pytest.warns(PlanDriftWarning, match=r"took 5× their planned time"):
        _run(ctl, ctl.order("stage0"), timer, factor=5.0)
        ctl.enter(ctl.order("stage0")[0])  # the next iteration starts
    dev = ctl.stats().drift.devices[0]
    assert dev.median_ratio == pytest.approx(5.0) and dev.max_ratio == pytest.approx(5.0)
    assert "took 5× their planned time" in ctl.stats().summary()


def test_faster_than_planned_is_recorded_but_not_warned(build, fake_gpu):
    # Asynchronous GPU work: a block only issues kernels, so "fast" is normal there.
    sch = build.pipeline(S, M, _clock)
    timer = _Timer()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlanDriftWarning)
        with RuntimeController(sch, {"stage0": fake_gpu(0)}, timer=timer) as ctl:
            _run(ctl, ctl.order("stage0"), timer, factor=0.01)
    assert ctl.stats().drift.devices[0].median_ratio == pytest.approx(0.01)


def test_elements_never_entered_are_warned_at_the_end(build, fake_gpu):
    """Old code: the demo's AR[s…] elements were never entered, silently, so the
    optimizer step ran at the last backward's clock."""
    e = build.element
    sch = build.schedule(
        [
            e("F", "stage0", 0.0, 0.01, sm=1410),
            e("B", "stage0", 0.01, 0.02, sm=1200),
            e("AR[s0]", "stage0", 0.03, 0.01, sm=1005),
        ],
        ["stage0"],
    )
    ctl = RuntimeController(sch, {"stage0": fake_gpu(0)})
    with pytest.warns(PlanDriftWarning) as record, ctl:
        for _ in range(2):
            _run(ctl, ["F", "B"])
    messages = " ".join(str(w.message) for w in record)
    assert r"never entered (AR[s0])" in messages
    dev = ctl.stats().drift.devices[0]
    assert dev.never_entered == ("AR[s0]",)


def test_no_drift_warnings_when_the_loop_fails_or_when_disabled(build, fake_gpu):
    sch = build.pipeline(S, M, _clock)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlanDriftWarning)
        with pytest.raises(RuntimeError), RuntimeController(sch, {"stage0": fake_gpu(0)}) as ctl:
            ctl.enter(ctl.order("stage0")[0])
            raise RuntimeError("loss is NaN")
        with RuntimeController(sch, {"stage0": fake_gpu(0)}, warn_drift=False) as ctl:
            _run(ctl, _names(gpipe_order(S, M, 0)))
    assert ctl.stats().drift.drifted  # recorded all the same


def test_stage_steps_is_the_generated_plans_order():
    plan = pipeline_plan(4, 6, 80.0)
    for s in range(4):
        on_stage = [e.name for e in plan.elements if e.device == f"stage{s}"]
        steps = stage_steps(s, 4, 6)
        assert [step.name for step in steps] == on_stage
        assert [(step.kind, step.microbatch) for step in steps] == one_f_one_b_order(4, 6, s)
    gpipe = pipeline_plan(2, 3, 80.0, schedule="gpipe")
    assert [st.name for st in stage_steps(1, 2, 3, "gpipe")] == [
        e.name for e in gpipe.elements if e.device == "stage1"
    ]
