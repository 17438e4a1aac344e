"""eopt: measure, compose and optimize GPU energy.

The names most users need are importable from here::

    import eopt
    a = eopt.Signature("gemm", static_power=60.0, time=2e-3, dynamic_energy=0.4)
    b = eopt.Signature("allreduce", static_power=60.0, time=1e-3, dynamic_energy=0.05)
    print(eopt.par(a, b).energy)
"""

from __future__ import annotations

import importlib
from typing import Any

from eopt.calculus.operators import idle, par, par_multi, seq
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature

__version__ = "0.1.0"

# Heavier parts load on first use, so `import eopt` stays fast.
_LAZY = {
    "compose_schedule": "eopt.calculus.schedule",
    "Library": "eopt.model.library",
    "read_library": "eopt.model.library",
    "write_library": "eopt.model.library",
    "Frontier": "eopt.calculus.frontier",
}

__all__ = [
    "OperatingPoint",
    "Signature",
    "__version__",
    "idle",
    "par",
    "par_multi",
    "seq",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eopt' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
