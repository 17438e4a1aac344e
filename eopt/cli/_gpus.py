"""``--gpu`` / ``--gpus``: which physical GPU a command means.

One reading of GPU options for every command: a plain integer is a CUDA ordinal, the GPU
``torch.device("cuda:N")`` would use in this process, after ``CUDA_VISIBLE_DEVICES`` and
``CUDA_DEVICE_ORDER`` (not ``nvidia-smi``'s numbering, which is ``nvml:N``); UUIDs
(``GPU-…`` or a unique prefix, ``MIG-…`` for an instance's whole GPU) and PCI bus ids name
a GPU the same way for every tool. The mapping itself is the library's
(:func:`eopt.devices.gpu_select.resolve_gpu`); this module turns its errors into one-line
user errors and handles the simulated GPU, which has only indices. The options
themselves, and their help, are :func:`eopt.cli.options.gpu_option` and
:func:`eopt.cli.options.gpus_option`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from eopt.cli._common import UserError
from eopt.devices.gpu_select import GpuInfo, GpuSelectError, resolve_gpu_in, visible_gpus

__all__ = ["parse_gpus", "resolve_gpu_option", "sim_gpu_index"]


def sim_gpu_index(spec: str, option: str = "--gpu", nvml_seen: bool = False) -> int:
    """The simulated GPU's index for ``spec`` (``0``, ``cuda:0`` or ``nvml:0``).

    Args:
        spec: The option's value.
        option: The option's name, for messages.
        nvml_seen: Whether NVML was asked and saw no GPU (the simulator stands in), for
            messages.

    Raises:
        UserError: for anything else: UUIDs and PCI bus ids name real GPUs only.
    """
    from eopt.apply.settings import ApplyError, plain_index

    try:
        return plain_index(spec)
    except ApplyError:
        why = " (NVML sees no NVIDIA GPU here to match it against)" if nvml_seen else ""
        raise UserError(
            f"{option} {spec}: the simulated GPU takes an index (0, cuda:1); UUIDs and PCI "
            f"bus ids name NVIDIA GPUs{why}"
        ) from None


def resolve_gpu_option(spec: str, option: str = "--gpu") -> int:
    """The NVML index of the GPU ``spec`` names (see :data:`eopt.cli.options.GPU_HELP`).

    Raises:
        UserError: naming the option, when ``spec`` names no GPU present (the message
            lists the GPUs NVML sees) or depends on an order eopt cannot know.
        DeviceError: when NVML cannot start.
    """
    from eopt.devices.gpu_select import resolve_gpu

    try:
        return resolve_gpu(spec.strip())
    except GpuSelectError as exc:
        raise UserError(f"{option}: {exc}") from None


def parse_gpus(
    selection: str | None,
    gpus: Sequence[GpuInfo],
    env: Mapping[str, str] | None = None,
    mig_parent: Callable[[str], int | None] | None = None,
    option: str = "--gpus",
) -> list[int]:
    """NVML indices of the GPUs ``selection`` names, in its order.

    Args:
        selection: None or ``all``: the GPUs ``CUDA_VISIBLE_DEVICES`` gives this process
            (every GPU NVML lists when it is unset); else a comma-separated list, each
            named as for ``--gpu``.
        gpus: Every GPU NVML lists.
        env: The environment (default ``os.environ``).
        mig_parent: Maps a ``MIG-…`` UUID to its GPU's NVML index.
        option: The option's name, for messages.

    Raises:
        UserError: for a name that matches no GPU, a GPU named twice, or ``all`` when
            ``CUDA_VISIBLE_DEVICES`` hides every GPU.
    """
    environ = os.environ if env is None else env
    if selection is None or selection.strip().lower() == "all":
        if environ.get("CUDA_VISIBLE_DEVICES") is None:
            return [g.index for g in gpus]
        try:
            seen = visible_gpus(gpus, environ, mig_parent)
        except GpuSelectError as exc:
            raise UserError(f"{option} all: {exc}") from None
        indices = list(dict.fromkeys(seen))  # MIG instances of one GPU: that GPU once
        if not indices and selection is not None:
            raise UserError(
                f"{option} all: CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']!r} "
                "gives this process no GPU; name GPUs by UUID or nvml:N instead"
            )
        return indices
    out: list[int] = []
    for part in selection.split(","):
        token = part.strip()
        if not token:
            raise UserError(f"{option} {selection!r}: an empty entry; give 'all' or 0,1")
        try:
            index = resolve_gpu_in(token, gpus, environ, mig_parent)
        except GpuSelectError as exc:
            raise UserError(f"{option} {selection!r}: {exc}") from None
        if index in out:
            raise UserError(
                f"{option} {selection!r}: {token} names NVML GPU {index}, which is listed "
                "already (each GPU once)"
            )
        out.append(index)
    return out
