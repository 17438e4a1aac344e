"""Which physical GPU a process means: CUDA ordinals, UUIDs and PCI bus ids → NVML index.

NVML numbers GPUs its own way; CUDA numbers them after ``CUDA_DEVICE_ORDER`` and then
renumbers the ones ``CUDA_VISIBLE_DEVICES`` lists (Slurm and other launchers set a mask
per task). ``cuda:0`` in a process started with ``CUDA_VISIBLE_DEVICES=2,3`` is physical
GPU 2, not NVML's GPU 0 — perhaps another job's. :func:`resolve_gpu` maps what a user or a
framework says to the NVML index of the GPU that process really uses.

Prefer UUIDs (``GPU-…``, from ``nvidia-smi -L``): they name the same GPU for every tool,
every process and every order. Integers depend on the order CUDA enumerates GPUs in, which
eopt can only assume (see :func:`resolve_gpu`).

The mapping itself (:func:`resolve_gpu_in`) is pure: it takes the GPU inventory and the
environment, so it is tested without NVML. Only :func:`resolve_gpu` asks NVML (through
``eopt.devices.nvml``, the one module that calls it).

Example::

    from eopt.devices.gpu_select import resolve_gpu
    index = resolve_gpu("cuda:0")      # honours CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER
    index = resolve_gpu("GPU-8f2c")    # a UUID or a unique prefix of one
    index = resolve_gpu("0000:3b:00.0")
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from eopt.devices.base import DeviceError, GpuInfo

__all__ = [
    "GpuInfo",
    "GpuSelectError",
    "cuda_order",
    "parse_pci_bus_id",
    "resolve_gpu",
    "resolve_gpu_in",
    "visible_gpus",
]

_PCI = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)
# CUDA 11's MIG names before driver R470: MIG-GPU-<parent UUID>/<GPU instance>/<compute instance>.
_LEGACY_MIG = re.compile(r"^MIG-(?P<parent>GPU-[0-9a-fA-F-]+)/\d+/\d+$")
_ORDERS = ("FASTEST_FIRST", "PCI_BUS_ID")


class GpuSelectError(DeviceError):
    """A GPU specification names no GPU, or names one only under an order eopt cannot know."""


def parse_pci_bus_id(text: str) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of a PCI bus id, or None if ``text`` is not one.

    Accepts NVML's ``00000000:3B:00.0``, the kernel's ``0000:3b:00.0`` and ``3b:00.0``
    (domain 0), in either case.
    """
    match = _PCI.match(text.strip())
    if match is None:
        return None
    return (
        int(match["domain"] or "0", 16),
        int(match["bus"], 16),
        int(match["device"], 16),
        int(match["function"]),
    )


def _pci_key(gpu: GpuInfo) -> tuple[int, int, int, int]:
    parsed = parse_pci_bus_id(gpu.pci_bus_id) if gpu.pci_bus_id else None
    # No bus id: NVML's own order, which follows the PCI bus on Linux, after the known ones.
    return parsed if parsed is not None else (1 << 32, gpu.index, 0, 0)


def cuda_order(gpus: Sequence[GpuInfo], order: str = "FASTEST_FIRST") -> tuple[list[GpuInfo], bool]:
    """The GPUs in the order CUDA numbers them (before ``CUDA_VISIBLE_DEVICES``).

    Args:
        gpus: Every GPU NVML lists.
        order: ``CUDA_DEVICE_ORDER``: ``PCI_BUS_ID`` or ``FASTEST_FIRST`` (CUDA's default).

    Returns:
        (the GPUs in CUDA's order, whether that order is certain).

    Assumptions:
        ``PCI_BUS_ID`` orders by ascending PCI bus id (documented by CUDA). For
        ``FASTEST_FIRST`` CUDA documents only that its guess at the fastest GPU comes first;
        eopt assumes PCI bus order, which is what CUDA does when every GPU is the same
        model (identical speeds), and reports the order as uncertain otherwise.

    Raises:
        GpuSelectError: for an unknown ``order``.
    """
    key = order.strip().upper() or "FASTEST_FIRST"
    if key not in _ORDERS:
        raise GpuSelectError(
            f"CUDA_DEVICE_ORDER={order!r} is not one CUDA knows; use PCI_BUS_ID or FASTEST_FIRST"
        )
    ordered = sorted(gpus, key=_pci_key)
    certain = key == "PCI_BUS_ID" or len({g.name for g in gpus}) <= 1
    return ordered, certain


def _by_uuid(token: str, gpus: Sequence[GpuInfo]) -> GpuInfo | None:
    """The GPU whose UUID is ``token`` or starts with it (CUDA accepts unique prefixes)."""
    want = token.lower()
    exact = [g for g in gpus if g.uuid.lower() == want]
    if exact:
        return exact[0]
    found = [g for g in gpus if g.uuid.lower().startswith(want)]
    return found[0] if len(found) == 1 else None


def _by_pci(key: tuple[int, int, int, int], gpus: Sequence[GpuInfo]) -> GpuInfo | None:
    return next((g for g in gpus if g.pci_bus_id and parse_pci_bus_id(g.pci_bus_id) == key), None)


def _mig_parent(
    token: str, gpus: Sequence[GpuInfo], mig_parent: Callable[[str], int | None] | None
) -> int | None:
    legacy = _LEGACY_MIG.match(token)
    if legacy is not None:
        parent = _by_uuid(legacy["parent"], gpus)
        return parent.index if parent is not None else None
    return mig_parent(token) if mig_parent is not None else None


@dataclass(frozen=True)
class _Visible:
    """The CUDA view of a process: NVML indices by CUDA ordinal, and what was dropped."""

    indices: list[int]
    entries: list[str]
    dropped: str | None  # the first entry CUDA ignores (and everything after it), if any
    uncertain: bool  # an integer entry relied on FASTEST_FIRST among mixed models


def visible_gpus(
    gpus: Sequence[GpuInfo],
    env: Mapping[str, str],
    mig_parent: Callable[[str], int | None] | None = None,
) -> list[int]:
    """NVML indices of the GPUs a CUDA process sees, by CUDA ordinal.

    Args:
        gpus: Every GPU NVML lists.
        env: The process environment (``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER``).
        mig_parent: Maps a ``MIG-…`` UUID to its parent GPU's NVML index.

    Raises:
        GpuSelectError: when an integer entry needs an order eopt cannot know.
    """
    view = _visible(gpus, env, mig_parent)
    if view.uncertain:
        raise GpuSelectError(_uncertain_message(gpus, env))
    return view.indices


def _visible(
    gpus: Sequence[GpuInfo],
    env: Mapping[str, str],
    mig_parent: Callable[[str], int | None] | None,
) -> _Visible:
    ordered, certain = cuda_order(gpus, env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST"))
    mask = env.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return _Visible([g.index for g in ordered], [], None, not certain and len(gpus) > 1)
    indices: list[int] = []
    entries: list[str] = []
    uncertain = False
    seen_plain: set[int] = set()
    tokens = [t.strip() for t in mask.split(",")] if mask.strip() else []
    for position, token in enumerate(tokens):
        index: int | None = None
        plain = True  # a whole GPU (not a MIG instance): listing it twice is invalid
        if re.fullmatch(r"\d+", token):
            k = int(token)
            if k < len(ordered):
                index = ordered[k].index
                uncertain |= not certain
        elif token.upper().startswith("GPU-"):
            found = _by_uuid(token, gpus)
            index = found.index if found is not None else None
        elif token.upper().startswith("MIG-"):
            index = _mig_parent(token, gpus, mig_parent)
            plain = False
        # CUDA ignores an invalid entry and every entry after it; eopt assumes the same
        # for a GPU listed twice.
        if index is None or (plain and index in seen_plain):
            return _Visible(indices, entries, ",".join(tokens[position:]), uncertain)
        if plain:
            seen_plain.add(index)
        indices.append(index)
        entries.append(token)
    return _Visible(indices, entries, None, uncertain)


def _uncertain_message(gpus: Sequence[GpuInfo], env: Mapping[str, str]) -> str:
    models = sorted({g.name for g in gpus})
    mask = env.get("CUDA_VISIBLE_DEVICES")
    where = f"CUDA_VISIBLE_DEVICES={mask!r} uses integers" if mask else "a CUDA ordinal was given"
    return (
        f"{where}, but this node mixes GPU models ({', '.join(models)}) and "
        "CUDA_DEVICE_ORDER is FASTEST_FIRST (the default): CUDA numbers the GPU it guesses "
        "fastest first and does not say how it orders the rest, so eopt cannot tell which "
        "physical GPU is meant. Name GPUs by UUID (nvidia-smi -L) or PCI bus id, or set "
        "CUDA_DEVICE_ORDER=PCI_BUS_ID for the job"
    )


def _inventory(gpus: Sequence[GpuInfo]) -> str:
    return "; ".join(g.label() for g in gpus) or "none"


def resolve_gpu_in(
    spec: int | str,
    gpus: Sequence[GpuInfo],
    env: Mapping[str, str] | None = None,
    mig_parent: Callable[[str], int | None] | None = None,
) -> int:
    """:func:`resolve_gpu` on a given inventory and environment (no NVML call).

    Args:
        spec: See :func:`resolve_gpu`.
        gpus: Every GPU NVML lists.
        env: The process environment (default: ``os.environ``).
        mig_parent: Maps a ``MIG-…`` UUID to its parent GPU's NVML index (None: such
            UUIDs are only understood in the legacy ``MIG-GPU-…/gi/ci`` form).

    Returns:
        The NVML index.

    Raises:
        GpuSelectError: naming the GPUs present when ``spec`` matches none of them, or when
            an integer depends on an order eopt cannot know.
    """
    environ = os.environ if env is None else env
    if isinstance(spec, bool):
        raise GpuSelectError(f"GPU {spec!r}: give a CUDA ordinal, a UUID or a PCI bus id")
    text = str(spec).strip()
    if isinstance(spec, int) or re.fullmatch(r"(?i)(cuda:)?\d+", text):
        return _by_ordinal(int(text.split(":")[-1]), gpus, environ, mig_parent)
    return _given(text, _by_name(text, gpus, mig_parent), gpus, environ, mig_parent)


def _given(
    text: str,
    index: int,
    gpus: Sequence[GpuInfo],
    env: Mapping[str, str],
    mig_parent: Callable[[str], int | None] | None,
) -> int:
    """``index``, unless ``CUDA_VISIBLE_DEVICES`` withholds that GPU from this process.

    A GPU named by UUID, PCI bus id or NVML index may still belong to another job: under
    Slurm without device cgroups the mask is the only word on which GPUs are this one's.
    """
    mask = env.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return index
    visible = _visible(gpus, env, mig_parent).indices
    if index not in visible:
        given = ", ".join(f"nvml:{i}" for i in visible) or "no GPU"
        raise GpuSelectError(
            f"GPU {text} is NVML GPU {index}, which this process was not given: "
            f"CUDA_VISIBLE_DEVICES={mask!r} gives it {given}; name one of those, or change "
            "the mask"
        )
    return index


def _by_name(
    text: str, gpus: Sequence[GpuInfo], mig_parent: Callable[[str], int | None] | None
) -> int:
    """The NVML index of a GPU named by ``nvml:N``, a UUID or a PCI bus id."""
    nvml_index = re.fullmatch(r"(?i)nvml:(\d+)", text)
    if nvml_index is not None:
        index = int(nvml_index[1])
        if not any(g.index == index for g in gpus):
            raise GpuSelectError(
                f"GPU {text}: NVML has no GPU {index}; it lists {_inventory(gpus)}"
            )
        return index
    if text.upper().startswith("GPU-"):
        found = _by_uuid(text, gpus)
        if found is None:
            raise GpuSelectError(
                f"GPU {text}: no GPU has that UUID (or it is the prefix of several); "
                f"NVML lists {_inventory(gpus)}"
            )
        return found.index
    if text.upper().startswith("MIG-"):
        parent = _mig_parent(text, gpus, mig_parent)
        if parent is None:
            raise GpuSelectError(
                f"GPU {text}: no MIG instance has that UUID (give it in full, as "
                f"nvidia-smi -L prints it); NVML lists {_inventory(gpus)}"
            )
        return parent
    key = parse_pci_bus_id(text)
    if key is not None:
        found = _by_pci(key, gpus)
        if found is None:
            raise GpuSelectError(
                f"GPU {text}: no GPU sits at that PCI bus id; NVML lists {_inventory(gpus)}"
            )
        return found.index
    raise GpuSelectError(
        f"GPU {text!r}: give a CUDA ordinal (0, cuda:1), a UUID (GPU-… or MIG-…, from "
        "nvidia-smi -L), a PCI bus id (0000:3b:00.0) or an NVML index (nvml:2)"
    )


def _by_ordinal(
    ordinal: int,
    gpus: Sequence[GpuInfo],
    env: Mapping[str, str],
    mig_parent: Callable[[str], int | None] | None,
) -> int:
    view = _visible(gpus, env, mig_parent)
    mask = env.get("CUDA_VISIBLE_DEVICES")
    if ordinal >= len(view.indices):
        if mask is not None and not view.indices:
            seen = "sees no GPU"
        else:
            seen = f"sees {len(view.indices)} (cuda:0–cuda:{len(view.indices) - 1})"
        dropped = (
            f"; CUDA ignores {view.dropped!r} and everything after it (no such GPU, or "
            "listed twice)"
            if view.dropped
            else ""
        )
        masked = f" with CUDA_VISIBLE_DEVICES={mask!r}" if mask is not None else ""
        raise GpuSelectError(
            f"GPU cuda:{ordinal}: this process{masked} {seen}{dropped}; NVML lists "
            f"{_inventory(gpus)}"
        )
    # Only an integer that went through CUDA's order can be wrong; a mask of UUIDs cannot.
    integer_used = mask is None or re.fullmatch(r"\d+", view.entries[ordinal]) is not None
    if view.uncertain and integer_used:
        raise GpuSelectError(_uncertain_message(gpus, env))
    return view.indices[ordinal]


def resolve_gpu(spec: int | str, env: Mapping[str, str] | None = None) -> int:
    """The NVML index of the physical GPU ``spec`` means to this process.

    ``spec`` may be:

    - a CUDA ordinal (``0``, ``"1"``, ``"cuda:1"``): the GPU ``torch.device("cuda:1")``
      would use, after ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``;
    - a UUID, ``GPU-…`` (or a prefix of one that only one GPU has, as CUDA accepts);
    - a MIG instance's UUID, ``MIG-…``: its parent GPU (NVML controls and measures whole
      GPUs; eopt refuses to change settings on a GPU in MIG mode);
    - a PCI bus id (``00000000:3B:00.0``, ``0000:3b:00.0``, ``3b:00.0``);
    - ``nvml:N``: NVML index ``N`` as it is (what ``nvidia-smi`` numbers).

    ``CUDA_VISIBLE_DEVICES`` is read as CUDA reads it: integers index CUDA's enumeration,
    ``GPU-``/``MIG-`` entries name devices, and the first entry that names no device ends
    the list (eopt treats a GPU listed twice the same way). An empty value hides every GPU.

    Assumptions:
        ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` numbers GPUs by PCI bus id. Under the default,
        ``FASTEST_FIRST``, eopt assumes PCI bus order too, which holds when all GPUs are one
        model; on a node that mixes models an integer that goes through CUDA's order is
        refused (CUDA's guess at "fastest" is not documented) — name the GPU by UUID or
        PCI bus id, or set ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Under device cgroups (Slurm's
        ``ConstrainDevices``) NVML may list only the job's GPUs; UUIDs stay right either way.

    Args:
        spec: What names the GPU (above).
        env: Environment to read (default ``os.environ``).

    Returns:
        The NVML index (for :class:`eopt.devices.nvml.NvmlGPU`).

    Raises:
        GpuSelectError: when ``spec`` names no GPU present (listing those NVML sees), or
            depends on an order eopt cannot know.
        DeviceError: when NVML cannot start.
    """
    from eopt.devices import nvml  # only here: the mapping above never needs NVML

    return resolve_gpu_in(spec, nvml.list_gpus(), env, nvml.mig_parent_index)
