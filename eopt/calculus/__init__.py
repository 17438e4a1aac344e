"""Energy calculus: signatures, operators, schedules, uncertainty and contexts."""

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
