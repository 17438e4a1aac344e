"""One marker for every mode: ``with eopt.element(name, kind=None):``.

An *element* is one call of a part of a program whose energy a plan reasons about (a
pipeline stage's forward pass on one microbatch); its *kind* is the element type that
characterization aggregates (``stage0.forward``), and defaults to its name::

    import eopt

    for step in range(steps):
        for m in range(microbatches):
            with eopt.element(f"F[s0,m{m}]", kind="stage0.forward"):
                forward(m)
        eopt.step()  # the end of an iteration

``begin_element`` / ``end_element`` mark code that is not one block; ``@eopt.element(…)``
decorates a function.

What a marker does depends on who runs the program, told through the environment:

* nobody (no ``$EOPT_ELEMENT_HOOK``, no ``$EOPT_REGIONS_FILE``): nothing, in well under
  a microsecond;
* ``eopt measure`` (``$EOPT_REGIONS_FILE``): it records a region, exactly as
  :func:`eopt.measure.regions.region` does (that function is this marker, falling back to
  an in-memory recorder), and so does :func:`eopt.measure.regions.use_recorder`;
* any other mode (``eopt profile``, ``eopt apply``): ``$EOPT_ELEMENT_HOOK`` names a
  ``module:factory`` imported on the first marker; the factory returns an
  :class:`ElementHook` whose ``begin`` / ``end`` / ``step`` run at each marker. This is
  how the layers above the measurement (profiling, per-element settings) act on a program
  that only imports eopt.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, TypeVar

__all__ = [
    "ELEMENT_HOOK_ENV",
    "ElementError",
    "ElementHook",
    "begin_element",
    "element",
    "end_element",
    "installed_hook",
    "step",
    "use_hook",
]

#: ``module:factory`` of the hook a marker calls (set by ``eopt profile`` / ``eopt apply``).
ELEMENT_HOOK_ENV = "EOPT_ELEMENT_HOOK"
_REGIONS_FILE_ENV = "EOPT_REGIONS_FILE"  # eopt.measure.regions.REGIONS_FILE_ENV
#: The hook of a program under ``eopt measure`` (each element a region).
_REGIONS_HOOK = "eopt.measure.regions:RecorderHook"

F = TypeVar("F", bound=Callable[..., Any])


class ElementError(ValueError):
    """A misused marker, or an ``$EOPT_ELEMENT_HOOK`` that cannot be loaded."""


class ElementHook(Protocol):
    """What runs at the markers of a program (one object per process)."""

    def begin(self, name: str, kind: str) -> None:
        """Element ``name`` of type ``kind`` starts."""

    def end(self, name: str, kind: str) -> None:
        """The innermost open element, ``name``, ends."""

    def step(self) -> None:
        """An iteration of the program ends."""


# Resolved on the first marker, not at import: a program may set its environment first.
_UNRESOLVED: Any = object()
_hook: Any = _UNRESOLVED
_lock = threading.Lock()
_local = threading.local()  # per thread: the open elements' (name, kind, hook)


def _load_hook() -> ElementHook | None:
    spec = os.environ.get(ELEMENT_HOOK_ENV, "").strip()
    if not spec and os.environ.get(_REGIONS_FILE_ENV):
        # eopt measure's regions are one more plug-in, loaded by name like the others
        # (the regions module is built on this one, so it is not imported here).
        spec = _REGIONS_HOOK
    if not spec:
        return None
    module_name, sep, factory_name = spec.partition(":")
    if not sep or not module_name or not factory_name:
        raise ElementError(
            f"${ELEMENT_HOOK_ENV}={spec!r}: expected module:factory, e.g. "
            "eopt.runs.profile_child:hook"
        )
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise ElementError(
            f"${ELEMENT_HOOK_ENV}={spec!r}: cannot load it ({exc}); unset it to run "
            "the program without eopt"
        ) from None
    return factory()  # type: ignore[no-any-return]


def installed_hook() -> ElementHook | None:
    """The hook the markers call now (loading it on first use); None: markers do nothing."""
    global _hook
    hook = _hook
    if hook is _UNRESOLVED:
        with _lock:
            if _hook is _UNRESOLVED:
                _hook = _load_hook()
            hook = _hook
    return hook  # type: ignore[no-any-return]


@contextlib.contextmanager
def use_hook(hook: ElementHook | None) -> Any:
    """Make ``hook`` the one every marker calls inside the ``with`` block (None: none)."""
    global _hook
    with _lock:
        previous, _hook = _hook, hook
    try:
        yield hook
    finally:
        with _lock:
            _hook = previous


def _reset() -> None:
    """Forget the loaded hook: the next marker reads the environment again (tests)."""
    global _hook
    with _lock:
        _hook = _UNRESOLVED


def _open_stack() -> list[tuple[str, str, Any]]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack  # type: ignore[no-any-return]


def _check_name(name: object, kind: object) -> None:
    if not isinstance(name, str) or not name or "/" in name:
        raise ElementError(f"element name must be a non-empty string without '/', got {name!r}")
    if kind is not None and (not isinstance(kind, str) or not kind):
        raise ElementError(f"element {name!r}: kind must be a non-empty string, got {kind!r}")


def begin_element(name: str, kind: str | None = None) -> None:
    """Element ``name`` (of type ``kind``, default ``name``) starts; close it with
    :func:`end_element`. Does nothing outside eopt."""
    hook = _hook if _hook is not _UNRESOLVED else installed_hook()
    if hook is None:
        return
    _check_name(name, kind)
    kind = kind or name
    _open_stack().append((name, kind, hook))
    hook.begin(name, kind)


def end_element(name: str | None = None) -> None:
    """The innermost open element of this thread ends (``name``, when given, must be it).

    Raises:
        ElementError: when no element is open, or ``name`` is not the innermost one.
    """
    hook = _hook if _hook is not _UNRESOLVED else installed_hook()
    stack = getattr(_local, "stack", None)
    if hook is None and not stack:
        return
    if not stack:
        raise ElementError(f"end_element({name!r}): no element is open in this thread")
    if name is not None and stack[-1][0] != name:
        raise ElementError(
            f"end_element({name!r}): the innermost open element is {stack[-1][0]!r}; "
            "elements must nest"
        )
    open_name, kind, opened_on = stack.pop()
    opened_on.end(open_name, kind)


def step() -> None:
    """One iteration of the program ends (``eopt profile --in-run`` switches here)."""
    hook = _hook if _hook is not _UNRESOLVED else installed_hook()
    if hook is not None:
        hook.step()


class _Element(contextlib.ContextDecorator):
    """``with element(…):`` / ``@element(…)``: one element call per block or call."""

    __slots__ = ("_opened", "kind", "name")

    def __init__(self, name: str, kind: str | None = None) -> None:
        self.name = name
        self.kind = kind
        self._opened = False

    def _recreate_cm(self) -> _Element:
        # A decorated function may run in many threads at once: a handle per call.
        return type(self)(self.name, self.kind)

    def _fallback(self) -> ElementHook | None:
        """The hook when none is installed (None: do nothing)."""
        return None

    def __enter__(self) -> _Element:
        hook = _hook if _hook is not _UNRESOLVED else installed_hook()
        if hook is None:
            hook = self._fallback()
            if hook is None:
                return self
        _check_name(self.name, self.kind)
        kind = self.kind or self.name
        _open_stack().append((self.name, kind, hook))
        self._opened = True
        hook.begin(self.name, kind)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # An element that raised still ran and still spent energy: it is closed too.
        if self._opened:
            self._opened = False
            end_element(self.name)


def element(name: str, kind: str | None = None) -> _Element:
    """Mark one element call: ``with eopt.element("F[s0,m0]", kind="stage0.forward"):``.

    Args:
        name: The element's name (unique per call within an iteration, e.g. the name a
            schedule gives it); no ``/``.
        kind: Its element type, which ``eopt profile`` aggregates (default: ``name``).

    Returns:
        A context manager that is also a decorator. Outside eopt it does nothing.
    """
    return _Element(name, kind)
