"""Import the user's Python callables without letting local files stand in for installed modules.

``eopt sweep mykernels:matmul`` must find ``mykernels.py`` in the folder it runs from, but
putting that folder in front of ``sys.path`` (as ``python -m`` does) lets any file there
replace a module eopt imports: a stray ``pynvml.py`` or ``numpy.py`` would run, as root
when eopt runs under sudo. So the working directory never goes on ``sys.path``. Instead:

* ``path/to/file.py:function`` (any spec whose module part ends in ``.py`` or holds a
  ``/``) loads that file, and only that file, by its path.
* ``name:function`` or ``pkg.sub:function`` looks the top-level name up twice: among the
  installed modules (``sys.path`` without the working directory, plus builtins and
  installers' finders) and as ``name.py`` or ``name/__init__.py`` in the working
  directory. Found only installed: imported normally (``torch.cuda:synchronize``). Found
  only in the working directory: loaded from its path. Found in both (a local file named
  like an installed module): refused, naming both — eopt never guesses which one runs.
* While the user's module runs, the modules next to it can be imported, but only after
  every installed module (a finder at the end of ``sys.meta_path``) and never under a
  name eopt or its dependencies use, nor a standard-library name.

Example:
    >>> fn = import_callable("math:sqrt")
    >>> fn(9.0)
    3.0
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["PROTECTED_MODULES", "UserCodeError", "import_callable", "split_spec"]

#: Top-level modules that eopt imports (itself, its dependencies and their main helpers).
#: A user's file of one of these names is never loaded in their place, even where the
#: real one is not installed (nvidia-ml-py is optional on machines without a GPU).
PROTECTED_MODULES = frozenset(
    {
        "eopt", "solvers", "pynvml", "numpy", "scipy", "networkx", "pulp", "highspy",
        "click", "rich", "yaml", "matplotlib", "PIL", "pyparsing", "kiwisolver",
        "cycler", "fontTools", "dateutil", "packaging", "markdown_it", "pygments",
        "mdurl", "contourpy", "six", "setuptools", "pkg_resources", "_distutils_hack",
        "pytest", "hypothesis",
    }
)  # fmt: skip


class UserCodeError(ValueError):
    """A ``module:function`` spec that cannot be resolved or imported safely."""


def split_spec(spec: str) -> tuple[str, str]:
    """``"pkg.mod:fn"`` or ``"dir/file.py:fn"`` → (module part, attribute part).

    Raises:
        UserCodeError: when either part is missing.
    """
    module, sep, attr = spec.strip().rpartition(":")
    if not sep or not module or not attr:
        raise UserCodeError(
            f"{spec!r}: expected module:function (e.g. mykernels:matmul) or "
            "path/to/file.py:function"
        )
    return module, attr


def _is_path(module: str) -> bool:
    return module.endswith(".py") or "/" in module or os.sep in module


def module_label(module: str) -> str:
    """A short name for a module part: the file's stem for paths, else the name itself."""
    return Path(module).stem if _is_path(module) else module


def _is_cwd(entry: str) -> bool:
    if entry in ("", "."):
        return True
    try:
        return os.path.realpath(entry) == os.path.realpath(os.getcwd())
    except OSError:
        return False


def _installed_origin(top: str) -> str | None:
    """Where ``top`` would be imported from if the working directory were not searched.

    Returns:
        The module's file, ``"built-in"``, or None when nothing but the working
        directory provides it.
    """
    loaded = sys.modules.get(top)
    if loaded is not None:
        return getattr(loaded, "__file__", None) or "built-in"
    path = [p for p in sys.path if not _is_cwd(p)]
    for finder in sys.meta_path:
        if isinstance(finder, _FolderFinder):
            continue  # our own fallback is not an installation
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            if finder is importlib.machinery.PathFinder:
                spec = importlib.machinery.PathFinder.find_spec(top, path)
            else:
                spec = find(top, None)
        except (ImportError, ValueError, AttributeError, TypeError):
            continue  # a finder that cannot answer for this name does not provide it
        if spec is None:
            continue
        origin = spec.origin if spec.origin not in (None, "namespace") else None
        if origin is None and spec.submodule_search_locations:
            locations = [
                p for p in spec.submodule_search_locations if not _is_cwd(str(Path(p).parent))
            ]
            if not locations:
                continue  # a namespace package made only of a folder in the working directory
            origin = locations[0]
        return origin or "built-in"
    return None


def _local_candidate(top: str, folder: Path) -> Path | None:
    """``folder/top.py`` or ``folder/top/__init__.py``, whichever exists."""
    for candidate in (folder / f"{top}.py", folder / top / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class _FolderFinder(importlib.abc.MetaPathFinder):
    """Finds top-level modules in the user's kernel folders, after every other finder.

    It sits at the end of ``sys.meta_path``, so a module any installed location provides
    is found there first; protected and standard-library names are never looked up.
    """

    def __init__(self) -> None:
        self.folders: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is not None or "." in fullname or _protected(fullname):
            return None  # submodules are found through their package's __path__
        return importlib.machinery.PathFinder.find_spec(fullname, self.folders)


_FINDER = _FolderFinder()


def _protected(top: str) -> bool:
    return top in PROTECTED_MODULES or top in getattr(sys, "stdlib_module_names", ())


def _allow_neighbours(folder: Path) -> None:
    """Let the user's module import the modules beside it (never in place of others)."""
    entry = str(folder.resolve())
    if entry not in _FINDER.folders:
        _FINDER.folders.append(entry)
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    sys.meta_path.append(_FINDER)  # last, also after finders installed since


def _load_file(file: Path, spec: str, name: str | None = None) -> ModuleType:
    """Load the module (or package, for ``__init__.py``) at ``file`` by its path.

    Args:
        file: The ``.py`` file.
        spec: The user's spec, for messages.
        name: The name to register it under; default: its stem where that name is free,
            else a private ``_eopt_user_<stem>`` name (so it never hides a module).
    """
    path = file.resolve()
    package = path.name == "__init__.py"
    stem = path.parent.name if package else path.stem
    for module in list(sys.modules.values()):
        known = getattr(module, "__file__", None)
        if isinstance(known, str) and known.endswith(path.name) and _same_file(known, path):
            return module  # loaded before (e.g. the kernel and its --sync from one file)
    if name is None:
        free = (
            stem.isidentifier()
            and stem not in sys.modules
            and not _protected(stem)
            and _installed_origin(stem) is None
        )
        name = stem if free else f"_eopt_user_{''.join(c if c.isalnum() else '_' for c in stem)}"
    locations = [str(path.parent)] if package else None
    module_spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=locations
    )
    if module_spec is None or module_spec.loader is None:
        raise UserCodeError(f"{spec!r}: {file} is not a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look it up
    _allow_neighbours(path.parent.parent if package else path.parent)
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _import_module(module: str, spec: str) -> ModuleType:
    """Resolve ``module`` (a dotted name or a file path) as the module docstring says."""
    if _is_path(module):
        file = Path(module).expanduser()
        if not file.is_file():
            raise UserCodeError(f"{spec!r}: no file {file} (relative to {Path.cwd()})")
        if file.suffix != ".py":
            raise UserCodeError(f"{spec!r}: {file} is not a .py file")
        return _load_file(file, spec)
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        raise UserCodeError(
            f"{spec!r}: {module!r} is not a module name; give a file as path/to/file.py:function"
        )
    top = parts[0]
    attr = spec.rpartition(":")[2]
    installed = _installed_origin(top)
    local = _local_candidate(top, Path.cwd())
    if local is not None and installed is not None and not _same_file(local, installed):
        shown = local.relative_to(Path.cwd())
        raise UserCodeError(
            f"{spec!r}: {shown} in the working directory has the name of the installed "
            f"module {top!r} ({installed}); eopt never lets a local file stand in for an "
            f"installed module: rename the file, or give its path (./{shown}:{attr})"
        )
    if local is not None and installed is None:
        if _protected(top):
            raise UserCodeError(
                f"{spec!r}: {local} has the name of a module eopt uses ({top!r}); rename it"
            )
        loaded = _load_file(local, spec, name=top)
        return loaded if len(parts) == 1 else importlib.import_module(module)
    if installed is None:
        raise UserCodeError(
            f"{spec!r}: cannot import module {top!r}: no {top}.py in the working directory "
            f"({Path.cwd()}) and no installed module of that name; give the file's path, "
            f"e.g. path/to/{top}.py:{attr}"
        )
    return importlib.import_module(module)


def import_callable(spec: str) -> Callable[..., Any]:
    """The callable named by ``spec`` (``module:function``, ``path/file.py:function``).

    ``function`` may be dotted (``module:Class.method``). See the module docstring for how
    the module is found.

    Raises:
        UserCodeError: naming the spec and the fix, for a spec that does not resolve, a
            module whose import raised (the original exception is chained), a missing
            attribute or one that is not callable.
    """
    module_name, attr = split_spec(spec)
    try:
        module = _import_module(module_name, spec)
    except UserCodeError:
        raise
    except Exception as exc:  # the user's code ran and failed: say where, keep the chain
        raise UserCodeError(
            f"{spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc} "
            "(run with --debug for the traceback)"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UserCodeError(f"{spec!r}: module {module_name!r} has no {attr!r}")
    if not callable(obj):
        raise UserCodeError(f"{spec!r}: {attr!r} is not callable")
    return obj  # type: ignore[no-any-return]
