"""Energy calculus: signatures, operators, schedules and uncertainty."""

from eopt.calculus.library import (
    Library,
    LibraryError,
    append_signature,
    read_library,
    write_library,
)
from eopt.calculus.operators import CompositionError, idle, max_moments, par, par_multi, seq
from eopt.calculus.signature import Signature, SignatureError

__all__ = [
    "CompositionError",
    "Library",
    "LibraryError",
    "Signature",
    "SignatureError",
    "append_signature",
    "idle",
    "max_moments",
    "par",
    "par_multi",
    "read_library",
    "seq",
    "write_library",
]
