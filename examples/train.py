"""A small training loop with eopt regions: what ``eopt measure -- python …`` charges.

A two-layer MLP learns a noisy linear map for a few epochs. Each step's phases run in
``eopt.measure.regions.region(…)`` blocks (``forward``, ``backward``, ``optimizer``)
inside one ``epoch`` region, so that ``eopt measure`` reports the energy of each phase
and of what ran outside all of them (data preparation).

It runs on a CUDA GPU with PyTorch when both are there, else on the CPU with NumPy
(then ``eopt measure`` has no GPU energy to charge, but the regions and times are real).

Examples::

    eopt measure --json -o run.json -- python examples/train.py
    eopt apply static.json --until-exit -- python examples/train.py --epochs 2
    python examples/train.py --epochs 1 --cpu
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from eopt.measure import regions

#: Bounds of the command-line sizes: enough for a measurable run, far from exhausting
#: memory (a 16384-wide layer of 16384 samples is 1 GiB in fp32).
MAX_WIDTH = 16384
MAX_EPOCHS = 1000


def _numpy_epoch(rng: np.random.Generator, w1: np.ndarray, w2: np.ndarray, args: Any) -> float:
    """One epoch of plain-NumPy SGD; returns the last batch's loss."""
    width = w1.shape[0]
    target = np.ascontiguousarray(np.eye(width)[:, ::-1])  # the map: reverse the features
    loss = 0.0
    for _ in range(args.steps):
        x = rng.standard_normal((args.batch, width))  # outside every region: data
        y = x @ target + 0.01 * rng.standard_normal((args.batch, width))
        with regions.region("forward"):
            h = np.maximum(x @ w1, 0.0)
            out = h @ w2
            err = out - y
            loss = float(np.mean(err**2))
        with regions.region("backward"):
            g_out = 2.0 * err / err.size
            g_w2 = h.T @ g_out
            g_h = (g_out @ w2.T) * (h > 0)
            g_w1 = x.T @ g_h
        with regions.region("optimizer"):
            w1 -= args.lr * g_w1
            w2 -= args.lr * g_w2
    return loss


def _torch_epoch(torch: Any, model: Any, opt: Any, target: Any, args: Any) -> float:
    """One epoch on the GPU; returns the last batch's loss."""
    width = target.shape[0]
    loss = torch.zeros(())
    for _ in range(args.steps):
        x = torch.randn(args.batch, width, device="cuda")
        y = x @ target + 0.01 * torch.randn(args.batch, width, device="cuda")
        with regions.region("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
            torch.cuda.synchronize()  # the region ends when the GPU work does
        with regions.region("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.cuda.synchronize()
        with regions.region("optimizer"):
            opt.step()
            torch.cuda.synchronize()
    return float(loss)


def main(argv: list[str] | None = None) -> int:
    """Train; print one line per epoch. Returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs (1 … 1000)")
    parser.add_argument("--steps", type=int, default=50, help="steps per epoch")
    parser.add_argument("--batch", type=int, default=256, help="samples per step")
    parser.add_argument("--width", type=int, default=512, help="features (≤ 16384)")
    parser.add_argument("--lr", type=float, default=5.0, help="learning rate")
    parser.add_argument("--cpu", action="store_true", help="NumPy on the CPU even with a GPU")
    args = parser.parse_args(argv)
    for name, value, high in (
        ("--epochs", args.epochs, MAX_EPOCHS),
        ("--steps", args.steps, 100_000),
        ("--batch", args.batch, MAX_WIDTH),
        ("--width", args.width, MAX_WIDTH),
    ):
        if not 1 <= value <= high:
            parser.error(f"{name} must be in 1 … {high}, got {value}")
    if not (np.isfinite(args.lr) and args.lr > 0):
        parser.error(f"--lr must be a finite number > 0, got {args.lr}")

    torch = None
    if not args.cpu:
        try:
            import torch  # type: ignore[no-redef]

            if not torch.cuda.is_available():
                torch = None
        except ImportError:
            torch = None
    where = "CUDA GPU (PyTorch)" if torch is not None else "CPU (NumPy)"
    print(f"training a {args.width}-wide MLP on the {where}")
    rng = np.random.default_rng(0)
    if torch is None:
        scale = 1.0 / np.sqrt(args.width)
        w1 = rng.standard_normal((args.width, args.width)) * scale
        w2 = rng.standard_normal((args.width, args.width)) * scale
    else:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(args.width, args.width),
            torch.nn.ReLU(),
            torch.nn.Linear(args.width, args.width),
        ).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        target = torch.eye(args.width, device="cuda").flip(1)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        with regions.region("epoch"):
            if torch is None:
                loss = _numpy_epoch(rng, w1, w2, args)
            else:
                loss = _torch_epoch(torch, model, opt, target, args)
        print(f"epoch {epoch + 1}: loss {loss:.4f} ({time.perf_counter() - start:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
