"""FedAKD's simulation networks (specs/fedakd.md §1.8 SimpleCNN; §2.7 the 2-/3-layer CNNs of its
Appendix D / Table 5, as ``METHOD/standalone.py`` defines them). Default PyTorch initialisation."""
from __future__ import annotations

from torch import nn

from bench.models.registry import register_model
from bench.models.layers import BodyHead


class SimpleCNN(BodyHead):
    """2 x [conv3x3(pad 1) -> BN -> ReLU -> maxpool 2] with 32 and 64 channels, flatten (the features,
    64 * (H/4) * (W/4)) -> Linear to the classes. 50,378 parameters on FMNIST, 60,554 on CIFAR-10."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = in_shape
        self.body = nn.Sequential(
            nn.Conv2d(c, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten())
        self.feature_dim = 64 * (h // 4) * (w // 4)
        self.classifier = nn.Linear(self.feature_dim, num_classes)


class PlainCNN(BodyHead):
    """[conv3x3(pad 1) -> ReLU] per entry of ``channels`` (no BN, no pooling), flatten (the features)
    -> Linear to the classes."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, channels: tuple[int, ...]) -> None:
        super().__init__()
        c, h, w = in_shape
        layers: list[nn.Module] = []
        for width in channels:
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU()]
            c = width
        self.body = nn.Sequential(*layers, nn.Flatten())
        self.feature_dim = c * h * w
        self.classifier = nn.Linear(self.feature_dim, num_classes)


@register_model("fedakd_simplecnn", example_input=((1, 28, 28), 10))
def fedakd_simplecnn(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedAKD SimpleCNN (FMNIST 1x28x28, CIFAR-10 3x32x32)."""
    return SimpleCNN(in_shape, num_classes)


@register_model("fedakd_cnn2", example_input=((1, 28, 28), 10))
def fedakd_cnn2(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedAKD Table 5 "2-layer CNN" (``TwoLayerCNN_MNIST``: conv 16, conv 32, FC), FMNIST."""
    return PlainCNN(in_shape, num_classes, (16, 32))


@register_model("fedakd_cnn3", example_input=((3, 32, 32), 10))
def fedakd_cnn3(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedAKD Table 5 "3-layer CNN" (``ThreeLayerCNN_CIFAR``: conv 32, 64, 128, FC), CIFAR-10."""
    return PlainCNN(in_shape, num_classes, (32, 64, 128))
