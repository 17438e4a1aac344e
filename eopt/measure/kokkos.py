"""eopt's Kokkos Tools connector: built on first use, attached through the environment.

The connector (``kokkos_connector.c``, shipped in this package) is a shared library that
an unmodified Kokkos application loads when ``KOKKOS_TOOLS_LIBS`` (Kokkos 4) or
``KOKKOS_PROFILE_LIBRARY`` (Kokkos 3) names it. Its callbacks timestamp regions, kernels,
deep copies and fences on ``CLOCK_REALTIME`` (ns since the UNIX epoch, the clock of
:func:`time.time_ns`), and it writes them as ``events.csv`` + ``metadata.json`` in the
dashboard layout; ``eopt measure --kokkos`` adds the power it sampled meanwhile.

While the program runs, the callbacks only store binary records; the connector's own
thread appends them to ``events.records`` in the trace folder every 10 ms. The text is
written once, when the program ends: by ``Kokkos::finalize``, by an exit without it, or
by a fatal signal (SIGABRT, SIGSEGV, SIGTERM, SIGINT …, after which the program's own
handler or the default action still runs). ``metadata.json`` then says how it ended
(``"ended"``, ``"message"``: "the program was killed by SIGABRT; 2001 events kept").
After a SIGKILL only the records remain, and eopt's reader takes the events from them.
Names are written as valid UTF-8 and whole; unnamed kernels' type names are demangled;
regions nest to any depth.

The library is compiled with the system C compiler into a per-user cache
(``$XDG_CACHE_HOME/eopt/kokkos/<hash>/``, default ``~/.cache``), once per source version
and compiler.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

__all__ = [
    "CONNECTOR_ENV",
    "KokkosBuildError",
    "build_connector",
    "connector_env",
    "connector_source",
    "find_compiler",
]

#: The variables the connector reads (output folder; recording fences).
CONNECTOR_ENV = ("EOPT_KOKKOS_TRACE_DIR", "EOPT_KOKKOS_FENCES")
LIBRARY_NAME = "libeopt_kokkos.so"


class KokkosBuildError(RuntimeError):
    """The connector cannot be built here; the message says what to install or fix."""


def connector_source() -> str:
    """The connector's C source."""
    return resources.files("eopt.measure").joinpath("kokkos_connector.c").read_text("utf-8")


def find_compiler() -> str:
    """The C compiler to use: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH.

    Raises:
        KokkosBuildError: naming the packages that provide one.
    """
    candidates = [os.environ["CC"]] if os.environ.get("CC") else []
    candidates += ["cc", "gcc", "clang"]
    for name in candidates:
        path = shutil.which(name.split()[0])
        if path:
            return path
    raise KokkosBuildError(
        "no C compiler found (tried $CC, cc, gcc, clang): install one, e.g. "
        "`apt-get install gcc` (Debian/Ubuntu), `dnf install gcc` (Fedora/RHEL), or set CC"
    )


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eopt" / "kokkos"


def build_connector(
    *, force: bool = False, cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Compile the connector (once per source and compiler) and return the library's path.

    Args:
        force: Rebuild even when a built library is cached.
        cache_dir: Where to build (default: the per-user cache).

    Raises:
        KokkosBuildError: no compiler, or the compiler failed (its message is included).
    """
    source = connector_source()
    compiler = find_compiler()
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, check=False, timeout=30
        ).stdout.splitlines()[:1]
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KokkosBuildError(f"{compiler} --version failed ({exc}); check the compiler") from None
    key = hashlib.sha256((source + compiler + "".join(version)).encode()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir is not None else _cache_dir()
    target = folder / key / LIBRARY_NAME
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="eopt-kokkos-", dir=target.parent) as tmp:
        src = Path(tmp) / "kokkos_connector.c"
        src.write_text(source, encoding="utf-8")
        out = Path(tmp) / LIBRARY_NAME
        cmd = [compiler, "-O2", "-fPIC", "-shared", "-pthread", "-o", str(out), str(src)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KokkosBuildError(f"building the Kokkos connector failed: {exc}") from None
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise KokkosBuildError(
                f"building the Kokkos connector with {compiler} failed: {' | '.join(detail)}"
            )
        os.replace(out, target)  # atomic: a concurrent build never sees half a library
    return target


def connector_env(
    library: str | os.PathLike[str], trace_dir: str | os.PathLike[str]
) -> dict[str, str]:
    """The environment that attaches the connector to a Kokkos program.

    Both the Kokkos 4 variable (``KOKKOS_TOOLS_LIBS``) and the Kokkos 3 one
    (``KOKKOS_PROFILE_LIBRARY``) are set, so either version loads it.
    """
    lib = str(Path(library).resolve())
    return {
        "KOKKOS_TOOLS_LIBS": lib,
        "KOKKOS_PROFILE_LIBRARY": lib,
        "EOPT_KOKKOS_TRACE_DIR": str(Path(trace_dir).resolve()),
    }
