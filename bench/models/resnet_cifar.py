"""ResNet-18/34, CIFAR variant (pipelines/fedal/NOTES.md §4.1): 3x3 stride-1 stem, no max-pool, BasicBlocks,
widths 64-512, global average pooling, 512-d features. Default PyTorch initialisation (§2.6)."""
from __future__ import annotations

import torch
from torch import nn

from bench.models.registry import register_model
from bench.models.layers import BodyHead, GlobalAvgPool


class BasicBlock(nn.Module):
    """conv3x3 -> BN -> ReLU -> conv3x3 -> BN, plus identity or 1x1-conv+BN shortcut, then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class CifarResNet(BodyHead):
    """Stem conv3x3(C_in -> 64) -> BN -> ReLU, four stages of BasicBlocks (64, 128, 256, 512; strides
    1, 2, 2, 2) -> global mean pool (features) -> Linear(512, num_classes)."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, blocks: tuple[int, int, int, int]) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(in_shape[0], 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
        c_in = 64
        for stage, (width, n) in enumerate(zip((64, 128, 256, 512), blocks, strict=True)):
            for i in range(n):
                layers.append(BasicBlock(c_in, width, 2 if stage > 0 and i == 0 else 1))
                c_in = width
        self.body = nn.Sequential(*layers, GlobalAvgPool())
        self.feature_dim = c_in
        self.classifier = nn.Linear(c_in, num_classes)


@register_model("resnet18_cifar", example_input=((3, 32, 32), 10))
def resnet18_cifar(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-18, CIFAR variant, BasicBlocks [2, 2, 2, 2] (FedAL CIFAR-10/CINIC-10)."""
    return CifarResNet(in_shape, num_classes, (2, 2, 2, 2))


@register_model("resnet34_cifar", example_input=((3, 32, 32), 10))
def resnet34_cifar(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-34, CIFAR variant, BasicBlocks [3, 4, 6, 3] (FedAL CIFAR-10/CINIC-10)."""
    return CifarResNet(in_shape, num_classes, (3, 4, 6, 3))
