"""The stages of a solve, each a function of the solve's `Incumbent` and a `Budget`.

The relax method on an uncoupled problem runs, in order:

1. **rounding** (`solvers.relax.rounding_stage`): the hull LP (the bound), its rounding,
   sweeps of deadlines and LP dives; `GENERATOR_SHARE` of the time;
2. **tiling** (`tiling_stage`): plans that repeat one cyclic plan over the steady
   state of repeated DAGs (`solvers.periodic`); what rounding left of its share, and
   at least `TILING_SHARE` of the time. Where the LP is solved through its network
   (large problems) the order is the first tile, the LP point rounded to the nearer mode
   (`solvers.relax.nearest_rounding`), rounding, the other tiles (rounding first at
   the fastest makespan); a plan within `NETWORK_POLISH_GAP` of the bound ends them;
3. **improvement** (`improvement_stage`): iterated improvement of the best plan
   (`solvers.perturb`) with the rest.

`relax_stages` runs the three. The auto method adds **windows** (`windows_stage`:
MILP windows, `solvers.lns`) and the **exact** MILP (`accept_exact` takes its plan).
Coupled problems (groups, transition costs) have their own relax stage in
`solvers.coupled`. Every stage offers its plans to the incumbent, which keeps the
cheapest one that meets the deadline, and stops when its budget or the watch says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from solvers.budget import Budget
from solvers.exceptions import TimeLimitReached
from solvers.improve import improve, repair
from solvers.incumbent import Incumbent
from solvers.indexed import IndexedProblem, meets
from solvers.lns import lns
from solvers.lp import HullLP, LPPoint
from solvers.milp import MilpResult
from solvers.periodic import Repetition, find_repetition, tiled_plans
from solvers.perturb import perturb_search
from solvers.relax import lp_stage, nearest_rounding, rounding_stage
from solvers.stopping import RUN_TO_LIMIT, Watch

#: Share of the relax stages' time that rounding (sweeps and dives) may use.
GENERATOR_SHARE = 0.4

#: Share of the relax stages' time that tiling may use at least, after rounding.
TILING_SHARE = 0.2

#: On problems whose LP is solved through its network (`HullLP.method`), a plan this
#: close to its certified bound (relative) after any step ends the solve there (GPT-3
#: 8 × 512 at +5 %: further search took 9 of 14 s CPU and ended on the same plan).
NETWORK_POLISH_GAP = 0.005

#: Modes a second that `HullLP` builds, about (390 000 measured on one core for its
#: HiGHS model; its network is built faster): below the time that building needs, the
#: relax stages go without the LP.
HULL_MODES_PER_S = 300_000

#: Solver descriptions.
RELAX_SOLVER = "HiGHS LP + rounding + local search"
NETWORK_RELAX_SOLVER = "network LP + rounding + local search"
LP_OUT_OF_TIME = "fastest plan + local search (the LP relaxation ran out of time)"


def relax_stages(
    ip: IndexedProblem, inc: Incumbent, t_fast: float, budget: Budget, lp: HullLP | None = None
) -> None:
    """Rounding, tiling and improvement of an uncoupled problem, within `budget`.

    Without an LP optimum in time (building the LP would take longer than the budget,
    or its first solve reaches the end) there is no bound: the incumbent's plan (the
    fastest one) is improved by exact slack-to-energy moves instead, and
    `Incumbent.out_of_time` is set. On an LP solved through its network (large
    problems), a plan within `NETWORK_POLISH_GAP` of the bound after any step ends the
    stages there.

    Args:
        ip: the (scaled) problem, uncoupled.
        inc: the solve's best plan; its deadline is the one solved for.
        t_fast: the fastest makespan, in `ip`'s time unit.
        budget: the time the stages may take.
        lp: the problem's hull LP, when the caller keeps one (a frontier).
    """
    modes_in_all = sum(len(d) for d in ip.durations)
    point: LPPoint | None = None
    try:
        # Building the hull LP cannot be interrupted (0.8 s for 8000 tasks × 38 modes).
        if lp is None and modes_in_all / HULL_MODES_PER_S > budget.remaining():
            raise TimeLimitReached("no time left to build the LP relaxation")
        lp = lp or HullLP(ip)
        lp.budget = budget
        inc.solver = RELAX_SOLVER if lp.method == "highs" else NETWORK_RELAX_SOLVER
        generators = budget.until(GENERATOR_SHARE)

        def tiling() -> Budget:  # what rounding left of its share, at least TILING_SHARE
            return budget.child(max(generators.remaining(), TILING_SHARE * budget.limit_s))

        network = lp.method == "network"
        point = lp_stage(lp, inc) if network else rounding_stage(lp, inc, t_fast, generators)
        if point is None:  # the LP says infeasible: only by float rounding at the boundary
            inc.solver = "fastest plan"
            return
        if network:
            # The most promising first: 64 × 512 × 30 at 1.10 ×: first tile 0.50 %; GPT-3
            # 8 × 512 at +5 %: nearest 0.37 %, rounded down 0.51 % (2.6 s CPU), tiles
            # 0.44–0.61 %; at its fastest makespan: rounded down 0.60 %, nearest 1.01 %.
            def rounding() -> bool:
                rounding_stage(lp, inc, t_fast, generators, point)
                return _polished(inc, "rounding")

            first = inc.deadline is not None and inc.deadline <= t_fast * (1 + 1e-9)
            if first and rounding():
                return
            tiling_stage(lp, inc, point, tiling(), tiles=slice(0, 1))
            if _polished(inc, "tiling"):
                return
            nearest = nearest_rounding(lp, point, inc.deadline, lp.budget or budget)
            if nearest is not None:
                inc.offer(nearest, inc.solver)
            if _polished(inc, "rounding") or (not first and rounding()):
                return
            tiling_stage(lp, inc, point, tiling(), tiles=slice(1, None))
            if _polished(inc, "tiling"):
                return
        else:
            tiling_stage(lp, inc, point, tiling())
    except TimeLimitReached:
        if point is None:
            _without_lp(inc, budget)
            return
    finally:
        if lp is not None:
            lp.budget = None
            lp.unfix_all()
    improvement_stage(inc, budget)


def _polished(inc: Incumbent, after: str) -> bool:
    """True, with a note, when the plan is within `NETWORK_POLISH_GAP` of its bound."""
    if inc.gap() > NETWORK_POLISH_GAP:
        return False
    inc.notes.append(
        f"within {NETWORK_POLISH_GAP:.1%} of the bound after {after}: no further search"
    )
    return True


def relax_plan(
    ip: IndexedProblem,
    deadline: float | None,
    start: Sequence[int],
    t_fast: float,
    budget: Budget,
    *,
    lp: HullLP | None = None,
    watch: Watch | None = None,
) -> Incumbent:
    """`relax_stages` from the plan `start` (one meeting `deadline`); the incumbent.

    Args:
        ip: the (scaled) problem, uncoupled.
        deadline: in `ip`'s time unit, or None.
        start: a plan meeting the deadline (the fastest plan).
        t_fast: the fastest makespan, in `ip`'s time unit.
        budget: the time the stages may take.
        lp: the problem's hull LP, when the caller keeps one.
        watch: the stop rule (default: search to the end of the budget).
    """
    inc = Incumbent.start(ip, deadline, start, watch or Watch(rule=RUN_TO_LIMIT))
    relax_stages(ip, inc, t_fast, budget, lp=lp)
    return inc


def _without_lp(inc: Incumbent, budget: Budget) -> None:
    """No LP optimum in time: the fastest plan, improved with the time left."""
    inc.out_of_time = True
    inc.notes.append("no lower bound within the time limit")
    inc.offer(improve(inc.ip, inc.modes, inc.deadline, budget), LP_OUT_OF_TIME)
    if not budget.expired():
        modes = perturb_search(inc.ip, inc.modes, inc.deadline, budget, watch=inc.watch)
        inc.offer(modes, LP_OUT_OF_TIME)
    inc.solver = LP_OUT_OF_TIME


def _deadline_binds(ip: IndexedProblem, point: LPPoint, deadline: float) -> bool:
    """True when the LP uses the whole deadline (the steady state then has a period to
    meet; with slack to spare, tiling has nothing to trade)."""
    return ip.problem.hold == "deadline" or point.horizon >= deadline * (1 - 1e-6)


def repetition(ip: IndexedProblem) -> Repetition | None:
    """`find_repetition`, cached on the problem object (a frontier asks once per point)."""
    if not hasattr(ip, "_repetition"):
        ip._repetition = find_repetition(ip)  # type: ignore[attr-defined]
    return ip._repetition  # type: ignore[attr-defined]


def tiling_stage(
    lp: HullLP, inc: Incumbent, point: LPPoint, budget: Budget, tiles: slice = slice(None)
) -> None:
    """Tile the steady state of a repeated DAG when the deadline binds (`tiled_plans`;
    `tiles`: which of its tiles, in the order it tries them).

    On 16 × 128 × 30 at 1.05 × T_allmax the best tiled plan is 0.54 % above the bound
    after improvement, against 0.82 % for one rounded LP.
    """
    deadline = inc.deadline
    if deadline is None or inc.should_stop() or inc.gap() <= 1e-9:
        return
    if not _deadline_binds(lp.ip, point, deadline):
        return
    rep = repetition(lp.ip)
    if rep is None:
        return
    try:
        for modes in tiled_plans(lp, deadline, point, rep, budget, tiles=tiles):
            inc.offer(modes, inc.solver)
    except TimeLimitReached:
        pass  # the pinned LP reached the end of the LP's budget
    finally:
        lp.unfix_all()


def improvement_stage(inc: Incumbent, budget: Budget) -> None:
    """Iterated improvement of the incumbent (`solvers.perturb.perturb_search`).

    From here on the search only improves a finished plan, so the watch's stall rule
    is armed; the stage stops early on a stall, the stop gap or Ctrl-C.
    """
    inc.watch.arm()
    if inc.should_stop() or inc.gap() <= 1e-9 or budget.expired():
        return
    modes = perturb_search(inc.ip, inc.modes, inc.deadline, budget, watch=inc.watch)
    inc.offer(modes, inc.solver)


def windows_stage(inc: Incumbent, budget: Budget) -> None:
    """MILP windows over the incumbent (`solvers.lns.lns`), uncoupled problems."""
    modes = lns(inc.ip, inc.modes, inc.deadline, budget, watch=inc.watch)
    inc.offer(modes, inc.solver + " + MILP windows")


def accept_exact(inc: Incumbent, res: MilpResult, solver: str) -> None:
    """Take the exact MILP's plan and bound (`solvers.milp.solve_milp`).

    HiGHS accepts integrality within 1e-6, so its plan can overrun the deadline by
    about a millionth: such a plan is repaired (what is critical sped up, then the
    slack spent) on uncoupled problems, and dropped on coupled ones.
    """
    inc.offer_bound(res.bound)
    if res.modes is None:
        if res.message:
            inc.notes.append(res.message)
        return
    deadline = inc.deadline
    ip = inc.ip
    late = not meets(ip.evaluate(res.modes).makespan, deadline)
    if late and deadline is not None and not ip.coupled:
        fixed = improve(
            ip, repair(ip, res.modes, deadline), deadline, Budget.of(1.0, inc.watch.clock)
        )
        if inc.offer(fixed, solver + " (repaired to the deadline)"):
            inc.notes.append(
                f"{res.solver} MILP plan missed the deadline by its tolerance; repaired"
            )
    elif not inc.offer(res.modes, solver) and late:
        inc.notes.append(f"{res.solver} MILP plan missed the deadline by its tolerance; not used")


def lp_bound(inc: Incumbent) -> None:
    """Offer the hull LP's bound (uncoupled problems without a bound yet)."""
    lp = HullLP(inc.ip)
    lp.set_deadline(inc.deadline)
    point = lp.solve()
    if point is not None:
        inc.offer_bound(point.energy_bound(inc.ip, inc.deadline))
