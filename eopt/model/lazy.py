"""Package names that load on first use (PEP 562), so importing a package stays cheap.

A command imports only what it uses: ``eopt --help`` must not pay for the calculus, the
solver or matplotlib because ``eopt/__init__.py`` names them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, table: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for names that load on first use.

    Args:
        package: The package's ``__name__``, for the error.
        table: Public name → the module that defines it.
        namespace: The package's ``globals()``; a name, once loaded, is kept there, so it
            is looked up once.

    Example:
        >>> getattr_, dir_ = lazy_attributes("p", {"sqrt": "math"}, {})
        >>> getattr_("sqrt")(4.0)
        2.0
    """

    def get(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted({*namespace, *table})

    return get, names
