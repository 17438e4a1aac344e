"""Energy calculus: signatures, operators, schedules and uncertainty."""

from eopt.calculus.expression import (
    ExpressionError,
    compose_expression,
    parse_expression,
    resolve_element,
)
from eopt.calculus.library import (
    Library,
    LibraryError,
    append_signature,
    read_library,
    write_library,
)
from eopt.calculus.operators import CompositionError, idle, max_moments, par, par_multi, seq
from eopt.calculus.schedule import Placement, compose_schedule, read_placements
from eopt.calculus.signature import Signature, SignatureError
from eopt.calculus.uncertainty import (
    Interval,
    c_alpha,
    compare,
    deviation_test,
    prediction_interval,
)

__all__ = [
    "CompositionError",
    "ExpressionError",
    "Interval",
    "Library",
    "LibraryError",
    "Placement",
    "Signature",
    "SignatureError",
    "append_signature",
    "c_alpha",
    "compare",
    "compose_expression",
    "compose_schedule",
    "deviation_test",
    "idle",
    "max_moments",
    "par",
    "par_multi",
    "parse_expression",
    "prediction_interval",
    "read_library",
    "read_placements",
    "resolve_element",
    "seq",
    "write_library",
]
