"""DaFKD's "ResNet11" (pipelines/dafkd/NOTES.md §3.3), the official code's ``MTLResNet(Bottleneck, [2, 2, 2])``: a
multi-task ResNet whose shared extractor phi feeds a classifier head h_c and the client's
domain-discriminator head h_d."""
from __future__ import annotations

import torch
from torch import nn

from bench.models.layers import BodyHead, GlobalAvgPool
from bench.models.registry import register_model


class TripleConvBlock(nn.Module):
    """The code's "Bottleneck" (all three convs are 3x3; expansion 4):
    ReLU(BN(conv(in->p))) -> ReLU(BN(conv(p->p, stride))) -> BN(conv(p->4p)), plus the shortcut, then ReLU.
    The shortcut is 1x1 conv(stride) + BN when the stride or the channel count changes."""

    expansion = 4

    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        c_out = planes * self.expansion
        self.residual = nn.Sequential(
            nn.Conv2d(c_in, planes, 3, 1, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
            nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
            nn.Conv2d(planes, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out))
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.residual(x) + self.shortcut(x))


class MTLResNet(BodyHead):
    """Shared extractor phi: conv3x3(C_in -> 16) -> BN -> ReLU, three stages of two blocks with planes
    16, 32, 64 (strides 1, 2, 2) -> global mean pool (256-d features). Heads: ``classifier`` h_c =
    Linear(256, C) and ``discriminator`` h_d = Linear(256, 1), whose sigmoid is the probability that x
    comes from this client's domain. Conv weights kaiming_normal(fan_out, relu), BN (1, 0), Linear
    PyTorch default (pipelines/dafkd/NOTES.md §1.6). ``width`` (the stem's and first stage's planes, 16) and
    ``blocks`` per stage ((2, 2, 2)) scale it down for CPU proxies; the defaults are the paper's."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, blocks: tuple[int, ...] = (2, 2, 2),
                 width: int = 16) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(in_shape[0], width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                   nn.ReLU()]
        c_in = width
        for stage, n in enumerate(blocks):
            planes = width * 2 ** stage
            for i in range(n):
                layers.append(TripleConvBlock(c_in, planes, 2 if stage > 0 and i == 0 else 1))
                c_in = planes * TripleConvBlock.expansion
        self.body = nn.Sequential(*layers, GlobalAvgPool())
        self.feature_dim = c_in
        self.classifier = nn.Linear(c_in, num_classes)
        self.discriminator = nn.Linear(c_in, 1)
        for m in self.body.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def domain_logit(self, features: torch.Tensor) -> torch.Tensor:
        """h_d(phi(x)) before the sigmoid, shape (B,); pair it with a with-logits BCE for stability."""
        return self.discriminator(features).squeeze(1)


@register_model("dafkd_resnet11", example_input=((3, 32, 32), 10))
def dafkd_resnet11(in_shape: tuple[int, ...], num_classes: int, width: int = 16,
                   blocks: tuple[int, ...] | list[int] = (2, 2, 2)) -> nn.Module:
    """DaFKD "ResNet11" (MTLResNet) with classifier and shared-trunk domain-discriminator heads."""
    return MTLResNet(in_shape, num_classes, tuple(blocks), width)
