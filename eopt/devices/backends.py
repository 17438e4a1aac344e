"""The one registry of device backends: the only code that names ``nvml``, ``sim`` ….

A backend is a module that opens devices; this table says which module, whether its
devices are real hardware, and how ``auto`` tries it. The module is imported only when
the backend is used, so naming the backends never imports NVML or the simulator.

Adding a backend (AMD GPUs through ``amdsmi``, say) is one module that defines
``open_backend(indices, *, control, sim_model, seed)`` (and ``device_count()`` for real
hardware) and one :class:`Backend` line in :data:`BACKENDS`; devices it opens carry the
backend's name in their ``backend`` attribute.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AUTO",
    "BACKENDS",
    "Backend",
    "backend",
    "backend_of",
    "gpu_backend_choices",
    "gpu_backend_names",
    "real_gpus_present",
]

#: The choice that means "real GPUs when there are any, else the simulator".
AUTO = "auto"


@dataclass(frozen=True)
class Backend:
    """One device backend.

    Attributes:
        name: What users type (``--backend NAME``) and what devices report.
        module: The module that opens its devices (imported on first use).
        real: True for hardware; ``auto`` tries real backends in table order and falls
            back to the first simulated one.
        description: One line for ``--help`` and messages.
        library: What messages call the backend's library (``NVML``).
        install: How to install that library, for the message when it cannot be imported.
    """

    name: str
    module: str
    real: bool
    description: str
    library: str = ""
    install: str = ""


#: Every device backend, in the order ``auto`` tries them.
BACKENDS: tuple[Backend, ...] = (
    Backend(
        "nvml",
        "eopt.devices.nvml",
        real=True,
        description="NVIDIA GPUs through NVML",
        library="NVML",
        install="pip install nvidia-ml-py",
    ),
    Backend("sim", "eopt.sim.gpu", real=False, description="the simulated GPU (eopt sim)"),
)


def gpu_backend_names() -> tuple[str, ...]:
    """The registered backends' names, in table order (``("nvml", "sim")``)."""
    return tuple(b.name for b in BACKENDS)


def gpu_backend_choices() -> tuple[str, ...]:
    """What a ``--backend`` option offers: ``auto``, then every backend."""
    return (AUTO, *gpu_backend_names())


def backend(name: str) -> Backend:
    """The backend called ``name``.

    Raises:
        ValueError: for a name no backend has, listing the choices.
    """
    for b in BACKENDS:
        if b.name == name:
            return b
    raise ValueError(
        f"unknown device backend {name!r}; choose one of {', '.join(gpu_backend_choices())}"
    )


def real_gpus_present() -> bool:
    """True when some real backend sees at least one GPU (NVML initialised, say)."""
    import importlib

    for entry in BACKENDS:
        if not entry.real:
            continue
        try:
            module = importlib.import_module(entry.module)
        except ImportError:
            continue
        if module.device_count() > 0:
            return True
    return False


def backend_of(device: object) -> str:
    """The backend a device came from: its ``backend`` attribute, else its class name."""
    name = getattr(device, "backend", None)
    return name if isinstance(name, str) else type(device).__name__
