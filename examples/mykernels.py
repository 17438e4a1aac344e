"""A kernel module for ``eopt sweep``: one matrix multiply, several implementations.

``eopt sweep examples/mykernels.py:matmul --impls …`` calls ``matmul(impl=…, **params)``
once per measured invocation (``--param n=8192`` sets the size). The implementations:

- ``cublas``: ``torch.matmul`` in fp32 with TF32 off (cuBLAS SGEMM);
- ``tf32``: the same with TF32 tensor cores allowed;
- ``fp16``: ``torch.matmul`` in half precision (tensor cores);
- ``numpy``: NumPy on the CPU, a reference that leaves the GPU idle.

The GPU implementations need PyTorch with CUDA and, for the sweep, ``--sync
torch.cuda:synchronize`` so that each measured window waits for the queued kernels.
Inputs are made once per (impl, n) and kept, so a window measures the multiply only.

Run it by hand to check it works here (it prints each implementation's time)::

    python3 examples/mykernels.py
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

IMPLS = ("cublas", "tf32", "fp16", "numpy")

#: Largest n accepted: an n × n fp32 operand of 32768 is 4 GiB.
MAX_N = 32768


@functools.cache
def _operands(impl: str, n: int) -> tuple[Any, Any]:
    """Two n × n operands for ``impl``, made once (their creation is not measured)."""
    if impl == "numpy":
        rng = np.random.default_rng(0)
        return rng.standard_normal((n, n)), rng.standard_normal((n, n))
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"impl {impl!r} needs a CUDA GPU; use --impls numpy without one")
    dtype = torch.float16 if impl == "fp16" else torch.float32
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=dtype, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=dtype, generator=gen)
    return a, b


def matmul(impl: str = "cublas", n: int = 8192) -> None:
    """One n × n matrix multiply with implementation ``impl`` (queued, not waited for).

    Args:
        impl: One of ``IMPLS``.
        n: Matrix size (``--param n=…``), 1 … ``MAX_N``.

    Raises:
        ValueError: for an unknown implementation or a size out of range.
    """
    n = int(n)
    if impl not in IMPLS:
        raise ValueError(f"unknown impl {impl!r}; choose from {', '.join(IMPLS)}")
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n must be in 1 … {MAX_N}, got {n}")
    a, b = _operands(impl, n)
    if impl == "numpy":
        a @ b
        return
    import torch

    # TF32 is a global switch of PyTorch: set it for each call, as the impl asks.
    torch.backends.cuda.matmul.allow_tf32 = impl == "tf32"
    torch.matmul(a, b)


def _main() -> None:
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    for impl in IMPLS if gpu else ("numpy",):
        n = 4096 if impl != "numpy" else 1024
        matmul(impl, n)  # warm-up (and operands)
        start = time.perf_counter()
        matmul(impl, n)
        if impl != "numpy":
            torch.cuda.synchronize()
        print(f"{impl:7s} n={n}: {time.perf_counter() - start:.4f} s")
    if not gpu:
        print("no CUDA GPU (or no PyTorch): only the numpy implementation ran")


if __name__ == "__main__":
    _main()
