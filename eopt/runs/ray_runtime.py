"""The Ray runtime a distributed sweep runs on: importing Ray, starting or joining one.

Ray is an optional dependency (``pip install 'eopt[ray]'``); :func:`import_ray` says how
to install it when it is missing. A runtime of a sweep's own (``--ray local``) is bound to
127.0.0.1: Ray decides when it is imported whether its servers listen on the machine's
network address or on the loopback one, so eopt asks for the loopback one before the first
import (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, Ray's own switch for single-machine use).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

from eopt.runs.sweep import SweepError

__all__ = [
    "RAY_INSTALL",
    "RayMissingError",
    "RaySweepError",
    "import_ray",
    "ray_runtime",
    "start_local_runtime",
]

#: How to install what ``--ray`` needs.
RAY_INSTALL = "pip install 'eopt[ray]'"

# Ray reads this once, when it is imported: off, a runtime started here and every process
# it starts use the loopback address, and its servers listen on 127.0.0.1 only.
_LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class RayMissingError(SweepError):
    """``--ray`` without Ray installed."""


class RaySweepError(SweepError):
    """A Ray sweep that cannot start: no GPUs, workers that cannot open theirs …."""


def import_ray(local: bool = False) -> ModuleType:
    """Import Ray; for a runtime of this process's own (``local``), bound to 127.0.0.1.

    Raises:
        RayMissingError: when Ray is not installed, saying how to install it.
    """
    already = "ray" in sys.modules
    previous = os.environ.get(_LOCAL_ONLY_ENV)
    if local and not already:
        os.environ[_LOCAL_ONLY_ENV] = "0"
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise RayMissingError(
            f"--ray needs Ray, which is not installed here: {RAY_INSTALL} (or pip install "
            "'ray>=2.40')"
        ) from None
    finally:
        if local and not already:
            if previous is None:
                os.environ.pop(_LOCAL_ONLY_ENV, None)
            else:
                os.environ[_LOCAL_ONLY_ENV] = previous


@contextlib.contextmanager
def _visible_gpus(gpus: Sequence[str]) -> Iterator[None]:
    """``CUDA_VISIBLE_DEVICES`` for a runtime started now: Ray offers those GPUs, with
    those ids, and hands each worker one of them."""
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous


def start_local_runtime(gpus: Sequence[str]) -> ModuleType:
    """Start a Ray runtime on this machine, bound to 127.0.0.1, offering ``gpus``.

    The binding holds when this process imports Ray here first (:func:`import_ray`), as
    ``eopt sweep --ray local`` does; Ray imported before keeps the choice it made then.

    Args:
        gpus: The GPUs' ids as ``CUDA_VISIBLE_DEVICES`` writes them: UUIDs of real GPUs,
            indices of simulated ones. A simulated GPU needs no hardware: Ray only counts.

    Returns:
        The ``ray`` module, connected.

    Raises:
        RayMissingError: without Ray.
        RaySweepError: when this process is connected to a runtime already.
    """
    ray = import_ray(local=True)
    if ray.is_initialized():
        raise RaySweepError(
            "this process is connected to a Ray runtime already; use it (address=None) "
            "instead of starting another"
        )
    with _visible_gpus(gpus):
        ray.init(
            address="local",
            num_gpus=len(gpus),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    return ray


@contextlib.contextmanager
def ray_runtime(
    ray: ModuleType, address: str | None, gpus: Sequence[str] | int | None
) -> Iterator[None]:
    """The Ray runtime the sweep runs on, for as long as it runs."""
    if address is None:
        if not ray.is_initialized():
            raise RaySweepError(
                "no Ray runtime to use: connect to one first (ray.init), or pass "
                "address='local' or a cluster's address"
            )
        yield
        return
    if address == "local":
        if isinstance(gpus, int) or not gpus:
            raise RaySweepError(
                "--ray local needs the GPUs to offer: --gpus 0,1,2,3 (or --gpus all)"
            )
        start_local_runtime(gpus)
    else:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except Exception as exc:  # Ray's own errors for an address it cannot reach
            raise RaySweepError(
                f"--ray {address}: cannot connect to a Ray cluster there ({exc}); start one "
                "with `ray start --head` and pass the address it prints"
            ) from None
    try:
        yield
    finally:
        ray.shutdown()
