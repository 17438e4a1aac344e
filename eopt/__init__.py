"""eopt: measure, compose and optimize GPU energy.

The names most users need are importable from here::

    import eopt
    a = eopt.Signature("gemm", static_power=60.0, time=2e-3, dynamic_energy=0.4)
    b = eopt.Signature("allreduce", static_power=60.0, time=1e-3, dynamic_energy=0.05)
    print(eopt.par(a, b).energy)

Mark the elements of a program once, for every mode (``eopt measure``, ``eopt profile``,
``eopt apply``; nothing at all outside eopt)::

    with eopt.element("F[s0,m0]", kind="stage0.forward"):
        forward()
    eopt.step()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eopt.model.lazy import lazy_attributes

if TYPE_CHECKING:
    from eopt.calculus.frontier import Frontier
    from eopt.calculus.operators import idle, par, par_multi, seq
    from eopt.calculus.schedule import compose_schedule
    from eopt.measure.element import begin_element, element, end_element, step
    from eopt.model.library import Library, read_library, write_library
    from eopt.model.operating_point import OperatingPoint
    from eopt.model.signature import Signature

__version__ = "0.1.0"

# Every name loads on first use: `eopt --help` and `eopt attribute` import eopt itself
# and need none of them (the calculus alone pulls in numpy and YAML).
_LAZY = {
    "OperatingPoint": "eopt.model.operating_point",
    "Signature": "eopt.model.signature",
    "idle": "eopt.calculus.operators",
    "par": "eopt.calculus.operators",
    "par_multi": "eopt.calculus.operators",
    "seq": "eopt.calculus.operators",
    "compose_schedule": "eopt.calculus.schedule",
    "Library": "eopt.model.library",
    "read_library": "eopt.model.library",
    "write_library": "eopt.model.library",
    "Frontier": "eopt.calculus.frontier",
    "element": "eopt.measure.element",
    "begin_element": "eopt.measure.element",
    "end_element": "eopt.measure.element",
    "step": "eopt.measure.element",
}

__all__ = [
    "Frontier",
    "Library",
    "OperatingPoint",
    "Signature",
    "__version__",
    "begin_element",
    "compose_schedule",
    "element",
    "end_element",
    "idle",
    "par",
    "par_multi",
    "read_library",
    "seq",
    "step",
    "write_library",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
