"""May a pair compose context-independently? (paper §4.1, §4.2, Definition 4.5)

:func:`pair_insensitivity` takes two elements characterized over contexts (their
:class:`~eopt.calculus.contextual.ContextualSignature`, from measurements that recorded
φ and ρ) and an operator, and applies:

* Eq. (11), history-insensitivity, to each element over the null context and the entry
  contexts the composition realizes for it: under ⊗ the second element's contexts
  *after* the first (``entry.after`` = the first's name); the first element's own
  characterized entry contexts unless the composition starts at the null context; under
  ⊕ and ⊕multi both elements' characterized entry contexts (none when starting at null);
* Eq. (12), interference-insensitivity, to each element of a ⊕ / ⊕multi pair: its values
  while co-running with the other (``runtime.corunners`` holds the other's name) against
  its isolated values;
* the Reduction Theorem's multipliers (Eq. 13) to price staying context-independent:
  the bias bound m₁·c_α·σ_E1 + m₂·c_α·σ_E2.

A pair stays context-independent when every test passes; otherwise the decision names
the interaction-graph edges to characterize (entry edge A → B, runtime edge A ↔ B), with
the deviation that triggered them as metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eopt.calculus.contextual import ContextualSignature
from eopt.calculus.interactions import EntryEdge, RuntimeEdge
from eopt.calculus.uncertainty import (
    _OPERATOR_ALIASES,
    DEFAULT_CONFIDENCE,
    BiasBound,
    InsensitivityResult,
    history_insensitivity,
    interference_insensitivity,
    reduction_bias,
    reduction_multipliers,
)
from eopt.model.context import NULL_ENTRY, EntryContext
from eopt.model.signature import Signature

__all__ = ["PairDecision", "null_point", "pair_insensitivity"]


def null_point(element: ContextualSignature) -> Signature:
    """The element's values at the null context in isolation.

    Raises:
        ValueError: when it was never characterized there (the reference of every test).
    """
    for sig in element.points:
        ctx = sig.context
        if ctx is None or ctx.is_null:
            return sig
    raise ValueError(
        f"{element.name}: no values at the null context in isolation; characterize it "
        "there first (the insensitivity tests compare every context with it)"
    )


@dataclass(frozen=True)
class PairDecision:
    """Whether a composed pair may stay context-independent (Definition 4.5).

    Attributes:
        first: The first element's name.
        second: The second element's name.
        op: ``"seq"``, ``"par"`` or ``"par_multi"``.
        history: Eq. (11) per element (None: no other entry context realized).
        interference: Eq. (12) per element (None: the operator does not co-run them).
        context_independent: True when every test passed.
        multipliers: The Reduction Theorem's (m₁, m₂).
        bias: The bias bound of composing the pair at the null context, J.
        reasons: What failed or could not be tested, in words.
        edges: Interaction-graph edges to characterize for the failures.
    """

    first: str
    second: str
    op: str
    history: tuple[InsensitivityResult | None, InsensitivityResult | None]
    interference: tuple[InsensitivityResult | None, InsensitivityResult | None]
    context_independent: bool
    multipliers: tuple[int, int]
    bias: BiasBound
    reasons: tuple[str, ...]
    edges: tuple[EntryEdge | RuntimeEdge, ...]

    def __bool__(self) -> bool:
        return self.context_independent

    def __str__(self) -> str:
        head = "context-independent" if self.context_independent else "CONTEXT-DEPENDENT"
        m1, m2 = self.multipliers
        text = (
            f"{self.first} {self.op} {self.second}: {head} (m = {m1}, {m2}; bias bound "
            f"{self.bias.bias:.4g} J)"
        )
        return "\n".join([text, *(f"  {r}" for r in self.reasons)])


def _isolated(
    element: ContextualSignature, keep: Callable[[EntryContext], bool]
) -> list[Signature]:
    """The element's isolated points other than the null one whose entry passes ``keep``."""
    out = []
    for sig in element.points:
        ctx = sig.context
        if ctx is None or ctx.is_null or not ctx.runtime.isolated:
            continue
        if keep(ctx.entry):
            out.append(sig)
    return out


def _corun(element: ContextualSignature, partner: str) -> list[Signature]:
    """The element's values while co-running with ``partner`` at the null entry context."""
    return [
        s
        for s in element.points
        if s.context is not None
        and partner in s.context.runtime.corunners
        and s.context.entry == NULL_ENTRY
    ]


def pair_insensitivity(
    first: ContextualSignature,
    second: ContextualSignature,
    op: str = "seq",
    confidence: float = DEFAULT_CONFIDENCE,
    starts_at_null: bool = False,
) -> PairDecision:
    """Decide whether ``first op second`` may compose at the null context.

    Assumptions:
        Each element's null-context point is its reference (threshold c_α·σ_E of that
        point). Co-run values are compared at the null entry context. A context the
        characterization did not reach cannot be tested: the decision then says so and
        counts the pair as context-dependent until it is measured.

    Args:
        first: The first element (for ⊗, the one that runs first).
        second: The second element.
        op: ``"seq"``/``"⊗"``, ``"par"``/``"⊕"`` or ``"par_multi"``/``"⊕multi"``.
        confidence: 1 − α.
        starts_at_null: Whether the composition starts at the null context.

    Raises:
        ValueError: an unknown operator, or an element without null-context values.
    """
    m1, m2 = reduction_multipliers(op, starts_at_null)
    kind = _OPERATOR_ALIASES[op]  # a known operator: reduction_multipliers checked it
    ref1, ref2 = null_point(first), null_point(second)
    reasons: list[str] = []
    edges: list[EntryEdge | RuntimeEdge] = []

    def any_entry(_: EntryContext) -> bool:
        return not starts_at_null

    def after_first(entry: EntryContext) -> bool:
        return entry.after == first.name

    keep2 = after_first if kind == "seq" else any_entry
    history: list[InsensitivityResult | None] = []
    for element, ref, keep, source in (
        (first, ref1, any_entry, None),
        (second, ref2, keep2, first.name if kind == "seq" else None),
    ):
        others = _isolated(element, keep)
        if not others:
            history.append(None)
            if source is not None:
                reasons.append(
                    f"{element.name} was never measured after {source}: Eq. (11) cannot be "
                    f"tested; measure it with entry context after={source!r}"
                )
            continue
        result = history_insensitivity(ref, others, confidence)
        history.append(result)
        if not result.passed:
            reasons.append(f"{element.name} is history-sensitive (Eq. 11): {result}")
            if source is not None:
                phi = tuple(s.context.entry for s in others if s.context is not None)
                edges.append(
                    EntryEdge(
                        source,
                        element.name,
                        characterized=phi,
                        deviation={"bound_j": result.bound, "threshold_j": result.threshold},
                    )
                )
    interference: list[InsensitivityResult | None] = [None, None]
    if kind in ("par", "par_multi"):
        for k, (element, ref, partner) in enumerate(
            ((first, ref1, second.name), (second, ref2, first.name))
        ):
            runs = _corun(element, partner)
            if not runs:
                reasons.append(
                    f"{element.name} was never measured co-running with {partner}: Eq. (12) "
                    "cannot be tested; measure the pair together"
                )
                continue
            result = interference_insensitivity(ref, runs, confidence)
            interference[k] = result
            if not result.passed:
                reasons.append(f"{element.name} is interference-sensitive (Eq. 12): {result}")
        failed = [r for r in interference if r is not None and not r.passed]
        if failed:
            edges.append(
                RuntimeEdge(
                    (first.name, second.name),
                    signatures={first.name: first.name, second.name: second.name},
                    deviation={
                        "bound_j": max(r.bound for r in failed),
                        "threshold_j": min(r.threshold for r in failed),
                    },
                )
            )
    untested = kind in ("par", "par_multi") and any(r is None for r in interference)
    untested = untested or (kind == "seq" and history[1] is None)
    passed = all(r is None or r.passed for r in [*history, *interference]) and not untested
    bias = reduction_bias(kind, ref1, ref2, confidence, starts_at_null)
    return PairDecision(
        first.name,
        second.name,
        kind,
        (history[0], history[1]),
        (interference[0], interference[1]),
        passed,
        (m1, m2),
        bias,
        tuple(reasons),
        tuple(edges),
    )
