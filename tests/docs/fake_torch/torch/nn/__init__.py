"""Layers that return placeholder tensors."""

from torch.nn import functional  # noqa: F401


class Module:
    def __init__(self, *args):
        self.args = args

    def to(self, device):
        return self

    def parameters(self):
        return []

    def __call__(self, x):
        import torch

        return torch.Tensor()


class Linear(Module):
    pass


class ReLU(Module):
    pass


class Sequential(Module):
    pass
