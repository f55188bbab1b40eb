"""Plain convolutional classifiers of the papers' experiments: LeNet-5 and LEAF's CelebA CNN (FedAL's
MNIST and CelebA clients, pipelines/fedal/NOTES.md §4.1), the two-block SimpleCNN (FedAKD's simulations,
pipelines/fedakd/NOTES.md §1.8) and the 2-/3-layer CNNs of FedAKD's Appendix D / Table 5 (§2.7, as
``METHOD/standalone.py`` defines them). Default PyTorch initialisation."""
from __future__ import annotations

from torch import nn

from bench.models.layers import BodyHead
from bench.models.registry import register_model


class LeNet5(BodyHead):
    """conv5x5(6, pad 2) -> ReLU -> pool -> conv5x5(16) -> ReLU -> pool -> FC 120 -> ReLU -> FC 84 -> ReLU
    (features) -> FC to K. 61,706 parameters on 1x28x28 with K = 10."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = in_shape
        flat = 16 * ((h // 2 - 4) // 2) * ((w // 2 - 4) // 2)
        self.body = nn.Sequential(
            nn.Conv2d(c, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU())
        self.feature_dim = 84
        self.classifier = nn.Linear(84, num_classes)


class CelebACNN(BodyHead):
    """LEAF CelebA reference CNN: 4 x [conv3x3(32, "same") -> BN -> maxpool 2 -> ReLU], flatten
    (800 on 84x84; the features) -> FC to K."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, channels: int = 32) -> None:
        super().__init__()
        c, h, w = in_shape
        layers: list[nn.Module] = []
        for _ in range(4):
            layers += [nn.Conv2d(c, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.MaxPool2d(2), nn.ReLU()]
            c, h, w = channels, h // 2, w // 2
        self.body = nn.Sequential(*layers, nn.Flatten())
        self.feature_dim = c * h * w
        self.classifier = nn.Linear(self.feature_dim, num_classes)


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


@register_model("lenet5", example_input=((1, 28, 28), 10))
def lenet5(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """LeNet-5 (FedAL MNIST)."""
    return LeNet5(in_shape, num_classes)


@register_model("celeba_cnn", example_input=((3, 84, 84), 2))
def celeba_cnn(in_shape: tuple[int, ...], num_classes: int, channels: int = 32) -> nn.Module:
    """LEAF CelebA CNN (FedAL CelebA)."""
    return CelebACNN(in_shape, num_classes, channels)


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
