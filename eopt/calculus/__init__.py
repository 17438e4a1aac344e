"""Energy calculus: signatures, operators, schedules, uncertainty and contexts.

Every name here loads on first use: the whole calculus pulls in numpy and YAML, and a
command that needs one operator should not wait for all of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eopt.model.lazy import lazy_attributes

if TYPE_CHECKING:
    from eopt.calculus.contextual import ContextOutsideError, ContextualSignature, ContextWarning
    from eopt.calculus.contextual_schedule import ContextualComposition, compose_with_interactions
    from eopt.calculus.deviation import DeviationReport, MeanEstimate, Runs, deviation_report
    from eopt.calculus.expression import (
        ExpressionError,
        compose_expression,
        parse_expression,
        resolve_element,
    )
    from eopt.calculus.insensitivity import PairDecision, pair_insensitivity
    from eopt.calculus.interactions import (
        EntryEdge,
        InteractionGraph,
        InteractionsError,
        RuntimeEdge,
        read_interactions,
        write_interactions,
    )
    from eopt.calculus.operators import CompositionError, idle, max_moments, par, par_multi, seq
    from eopt.calculus.schedule import Placement, compose_schedule, read_placements
    from eopt.calculus.uncertainty import (
        Interval,
        c_alpha,
        compare,
        deviation_test,
        prediction_interval,
    )
    from eopt.model.context import Context, EntryContext, RuntimeContext
    from eopt.model.library import (
        Library,
        LibraryError,
        append_signature,
        read_library,
        write_library,
    )
    from eopt.model.signature import Signature, SignatureError

_LAZY = {
    "ContextOutsideError": "eopt.calculus.contextual",
    "ContextualSignature": "eopt.calculus.contextual",
    "ContextWarning": "eopt.calculus.contextual",
    "ContextualComposition": "eopt.calculus.contextual_schedule",
    "compose_with_interactions": "eopt.calculus.contextual_schedule",
    "DeviationReport": "eopt.calculus.deviation",
    "MeanEstimate": "eopt.calculus.deviation",
    "Runs": "eopt.calculus.deviation",
    "deviation_report": "eopt.calculus.deviation",
    "ExpressionError": "eopt.calculus.expression",
    "compose_expression": "eopt.calculus.expression",
    "parse_expression": "eopt.calculus.expression",
    "resolve_element": "eopt.calculus.expression",
    "PairDecision": "eopt.calculus.insensitivity",
    "pair_insensitivity": "eopt.calculus.insensitivity",
    "EntryEdge": "eopt.calculus.interactions",
    "InteractionGraph": "eopt.calculus.interactions",
    "InteractionsError": "eopt.calculus.interactions",
    "RuntimeEdge": "eopt.calculus.interactions",
    "read_interactions": "eopt.calculus.interactions",
    "write_interactions": "eopt.calculus.interactions",
    "CompositionError": "eopt.calculus.operators",
    "idle": "eopt.calculus.operators",
    "max_moments": "eopt.calculus.operators",
    "par": "eopt.calculus.operators",
    "par_multi": "eopt.calculus.operators",
    "seq": "eopt.calculus.operators",
    "Placement": "eopt.calculus.schedule",
    "compose_schedule": "eopt.calculus.schedule",
    "read_placements": "eopt.calculus.schedule",
    "Interval": "eopt.calculus.uncertainty",
    "c_alpha": "eopt.calculus.uncertainty",
    "compare": "eopt.calculus.uncertainty",
    "deviation_test": "eopt.calculus.uncertainty",
    "prediction_interval": "eopt.calculus.uncertainty",
    "Context": "eopt.model.context",
    "EntryContext": "eopt.model.context",
    "RuntimeContext": "eopt.model.context",
    "Library": "eopt.model.library",
    "LibraryError": "eopt.model.library",
    "append_signature": "eopt.model.library",
    "read_library": "eopt.model.library",
    "write_library": "eopt.model.library",
    "Signature": "eopt.model.signature",
    "SignatureError": "eopt.model.signature",
}

__all__ = [
    "CompositionError",
    "Context",
    "ContextOutsideError",
    "ContextWarning",
    "ContextualComposition",
    "ContextualSignature",
    "DeviationReport",
    "EntryContext",
    "EntryEdge",
    "ExpressionError",
    "InteractionGraph",
    "InteractionsError",
    "Interval",
    "Library",
    "LibraryError",
    "MeanEstimate",
    "PairDecision",
    "Placement",
    "Runs",
    "RuntimeContext",
    "RuntimeEdge",
    "Signature",
    "SignatureError",
    "append_signature",
    "c_alpha",
    "compare",
    "compose_expression",
    "compose_schedule",
    "compose_with_interactions",
    "deviation_report",
    "deviation_test",
    "idle",
    "max_moments",
    "pair_insensitivity",
    "par",
    "par_multi",
    "parse_expression",
    "prediction_interval",
    "read_interactions",
    "read_library",
    "read_placements",
    "resolve_element",
    "seq",
    "write_interactions",
    "write_library",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
