"""Wide ResNets WRN-d-k (Zagoruyko & Komodakis), pre-activation, no dropout: FedAL's SVHN clients
(pipelines/fedal/NOTES.md §4.1). The paper names the architectures only; the definition is the standard one.
Default PyTorch initialisation."""
from __future__ import annotations

import torch
from torch import nn

from bench.models.layers import BodyHead, GlobalAvgPool
from bench.models.registry import register_model


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


def _register_wrn(depth: int, width: int) -> None:
    @register_model(f"wrn{depth}_{width}", example_input=((3, 32, 32), 10),
                    description=f"Wide ResNet WRN-{depth}-{width}, pre-activation, no dropout (FedAL SVHN).")
    def factory(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return WideResNet(in_shape, num_classes, depth, width)


for _depth, _width in ((10, 1), (10, 2), (16, 1)):
    _register_wrn(_depth, _width)
