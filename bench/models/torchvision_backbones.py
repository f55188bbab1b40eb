"""Torchvision backbones as latent classifiers, FedHKD's networks (pipelines/fedhkd/NOTES.md §2, §5.4): a torchvision
backbone whose final ``fc`` maps to the latent dimension d is the feature extractor R_phi, and ``Linear(d, n)``
is the classifier G_omega, as the released ``models.py`` builds them. Random initialisation (torchvision's), no
pretrained weights.
"""
from __future__ import annotations

import torch
from torch import nn

from bench.models.registry import register_model
from bench.models.layers import SpatialMean


class LatentClassifier(nn.Module):
    """``forward(x) = (h, z)`` with h = R_phi(x) in R^d and z = G_omega(h); no activation between them.

    ``final_block`` names the submodule that is the network's final block (FedAlign,
    pipelines/fedhkd/NOTES.md §4, :mod:`bench.models.slimmable`), e.g. ``"feature_extractor.layer4"``.
    """

    def __init__(self, extractor: nn.Module, latent_dim: int, num_classes: int,
                 final_block: str | None = None) -> None:
        super().__init__()
        self.feature_extractor = extractor
        self.feature_dim = latent_dim
        self.classifier = nn.Linear(latent_dim, num_classes)
        self.final_block_path = final_block

    @property
    def final_block(self) -> nn.Module | None:
        return None if self.final_block_path is None else self.get_submodule(self.final_block_path)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.feature_extractor(x)
        return features, self.classifier(features)


def _check_rgb(in_shape: tuple[int, ...]) -> None:
    if in_shape[0] != 3:
        raise ValueError(f"torchvision backbones take 3-channel images, got in_shape={in_shape}")


@register_model("fedhkd_resnet18", example_input=((3, 32, 32), 10))
def fedhkd_resnet18(in_shape: tuple[int, ...], num_classes: int, latent_dim: int = 64) -> nn.Module:
    """torchvision ResNet-18 (ImageNet stem) with fc 512 -> d, then Linear(d, n); d = 64 (FedHKD CIFAR).

    Its ``avgpool`` is replaced by a spatial mean, which has a deterministic CUDA backward. Final block:
    ``layer4`` (pipelines/fedhkd/NOTES.md §4 FedAlign).
    """
    _check_rgb(in_shape)
    from torchvision import models as tv  # imported here: 1.5 s that runs on other models do not need

    extractor = tv.resnet18(weights=None, num_classes=latent_dim)
    extractor.avgpool = SpatialMean()
    return LatentClassifier(extractor, latent_dim, num_classes, final_block="feature_extractor.layer4")


@register_model("fedhkd_shufflenetv2", example_input=((3, 32, 32), 10))
def fedhkd_shufflenetv2(in_shape: tuple[int, ...], num_classes: int, latent_dim: int = 32) -> nn.Module:
    """torchvision ShuffleNetV2 x1.0 with fc 1024 -> d, then Linear(d, n); d = 32 (FedHKD SVHN).

    torchvision's ShuffleNetV2 already pools with ``x.mean([2, 3])``, so nothing is replaced. Final block:
    ``conv5`` (1x1 conv 464 -> 1024, BN, ReLU; pipelines/fedhkd/NOTES.md §4 FedAlign [R]).
    """
    _check_rgb(in_shape)
    from torchvision import models as tv

    return LatentClassifier(tv.shufflenet_v2_x1_0(weights=None, num_classes=latent_dim), latent_dim, num_classes,
                            final_block="feature_extractor.conv5")
