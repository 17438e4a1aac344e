"""A stand-in for the few PyTorch names docs/pytorch_1f1b.py uses: no tensor math, so
the script's control flow (its markers, ranks and order) runs where PyTorch is not
installed. Every operation returns a placeholder tensor."""

from __future__ import annotations

from torch import cuda, distributed, nn, optim  # noqa: F401


class Tensor:
    """A placeholder: every operation gives another one."""

    grad = None

    def to(self, *args, **kwargs):
        return self

    def flip(self, *args):
        return Tensor()

    def relu(self):
        return Tensor()

    def detach(self):
        return Tensor()

    def requires_grad_(self):
        self.grad = Tensor()
        return self

    def backward(self, *args):
        return None

    def item(self):
        return 1.0

    def __truediv__(self, other):
        return Tensor()


class device:  # noqa: N801 - torch's spelling
    def __init__(self, *args):
        self.args = args


class Generator:
    def manual_seed(self, seed):
        return self


def manual_seed(seed):
    return None


def randn(*shape, generator=None):
    return Tensor()


def empty(*shape, device=None):
    return Tensor()
