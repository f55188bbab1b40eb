"""FedAL's client architectures and server discriminator (specs/fedal.md §4.1, §2.6 A7).

The paper names the architectures only; the definitions are the standard ones the spec gives. The
CIFAR ResNets live in :mod:`bench.models.resnet_cifar`. Default PyTorch initialisation.
"""
from __future__ import annotations

import torch
from torch import nn

from bench.models.registry import register_model
from bench.models.layers import BodyHead, GlobalAvgPool


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


class PreActBlock(nn.Module):
    """Wide-ResNet basic block: BN -> ReLU -> conv3x3 -> BN -> ReLU -> conv3x3, plus identity or a 1x1
    conv shortcut (taken from the pre-activated input) when the shape changes. No dropout."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.shortcut: nn.Module | None = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Conv2d(c_in, c_out, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = torch.relu(self.bn1(x))
        out = self.conv2(torch.relu(self.bn2(self.conv1(pre))))
        return out + (x if self.shortcut is None else self.shortcut(pre))


class WideResNet(BodyHead):
    """WRN-d-k (Zagoruyko & Komodakis): conv3x3(16) stem, three groups of n = (d - 4) / 6 pre-activation
    blocks with widths 16k, 32k, 64k and strides 1, 2, 2, then BN -> ReLU -> global mean pool
    (features, 64k-d) -> FC to K."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, depth: int, width: int) -> None:
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"WRN depth must be 6n + 4, got {depth}")
        n = (depth - 4) // 6
        layers: list[nn.Module] = [nn.Conv2d(in_shape[0], 16, 3, 1, 1, bias=False)]
        c_in = 16
        for group, stride in enumerate((1, 2, 2)):
            c_out = 16 * width * 2 ** group
            for i in range(n):
                layers.append(PreActBlock(c_in, c_out, stride if i == 0 else 1))
                c_in = c_out
        self.body = nn.Sequential(*layers, nn.BatchNorm2d(c_in), nn.ReLU(), GlobalAvgPool())
        self.feature_dim = c_in
        self.classifier = nn.Linear(c_in, num_classes)


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


ACTIVATIONS = {"relu": nn.ReLU, "leaky_relu": lambda: nn.LeakyReLU(0.2)}


class ClientDiscriminator(BodyHead):
    """FedAL's server discriminator h(p, w): R^K -> R^N (specs/fedal.md §2.1, §2.6 A7):
    Linear(K, 32) -> ReLU -> Linear(32, 265) -> ReLU (features) -> Linear(265, N) client-index logits
    (``activation``: ReLU, or LeakyReLU(0.2), A7's alternative).
    Its input is the temperature softmax psi(f_n, 2) of a client's logits."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, int] = (32, 265),
                 activation: str = "relu") -> None:
        super().__init__()
        (k,) = in_shape
        act = ACTIVATIONS[activation]
        self.body = nn.Sequential(nn.Linear(k, hidden[0]), act(), nn.Linear(hidden[0], hidden[1]), act())
        self.feature_dim = hidden[1]
        self.classifier = nn.Linear(hidden[1], num_classes)


@register_model("lenet5", example_input=((1, 28, 28), 10))
def lenet5(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """LeNet-5 (FedAL MNIST)."""
    return LeNet5(in_shape, num_classes)


def _register_wrn(depth: int, width: int) -> None:
    @register_model(f"wrn{depth}_{width}", example_input=((3, 32, 32), 10),
                    description=f"Wide ResNet WRN-{depth}-{width}, pre-activation, no dropout (FedAL SVHN).")
    def factory(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return WideResNet(in_shape, num_classes, depth, width)


for _depth, _width in ((10, 1), (10, 2), (16, 1)):
    _register_wrn(_depth, _width)


@register_model("celeba_cnn", example_input=((3, 84, 84), 2))
def celeba_cnn(in_shape: tuple[int, ...], num_classes: int, channels: int = 32) -> nn.Module:
    """LEAF CelebA CNN (FedAL CelebA)."""
    return CelebACNN(in_shape, num_classes, channels)


@register_model("fedal_discriminator", example_input=((10,), 20))
def fedal_discriminator(in_shape: tuple[int, ...], num_classes: int,
                        hidden: tuple[int, int] | list[int] = (32, 265), activation: str = "relu") -> nn.Module:
    """FedAL server discriminator MLP K -> 32 -> 265 -> N (in_shape = (K,), num_classes = N clients)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    return ClientDiscriminator(in_shape, num_classes, (int(hidden[0]), int(hidden[1])), activation)
