"""Losses that return placeholder tensors."""


def mse_loss(a, b):
    import torch

    return torch.Tensor()
