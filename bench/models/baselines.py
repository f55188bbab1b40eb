"""Models of other federated-learning libraries, for measurements side by side with them.

``fedavg_cnn``: the CNN PFLlib (``FedAvgCNN``) and FL-bench (``avgcnn``) train on MNIST — McMahan et
al.'s two-conv CNN: conv 5x5 (32) -> ReLU -> max-pool 2 -> conv 5x5 (64) -> ReLU -> max-pool 2 ->
FC 512 -> ReLU -> FC n; 582,026 parameters at 1x28x28 and 10 classes. ReLUs are in place as in
PFLlib. Features are the 512-wide hidden layer.
"""
from __future__ import annotations

from torch import nn

from bench.models.layers import BodyHead
from bench.models.registry import register_model


class FedAvgCNN(BodyHead):
    def __init__(self, in_shape: tuple[int, ...], num_classes: int, hidden: int = 512) -> None:
        super().__init__()
        c, h, w = in_shape
        side = lambda n: ((n - 4) // 2 - 4) // 2  # noqa: E731  (two valid 5x5 convs, each pooled by 2)
        flat = 64 * side(h) * side(w)
        self.body = nn.Sequential(
            nn.Conv2d(c, 32, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(flat, hidden), nn.ReLU(inplace=True))
        self.feature_dim = hidden
        self.classifier = nn.Linear(hidden, num_classes)


@register_model("fedavg_cnn", example_input=((1, 28, 28), 10))
def fedavg_cnn(in_shape: tuple[int, ...], num_classes: int, hidden: int = 512) -> nn.Module:
    """PFLlib's FedAvgCNN / FL-bench's avgcnn (two 5x5 conv blocks, FC 512), for MNIST-shaped data."""
    return FedAvgCNN(in_shape, num_classes, hidden)
