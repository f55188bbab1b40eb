"""Building blocks shared by several model families."""
from __future__ import annotations

import torch
from torch import nn


class GlobalAvgPool(nn.Module):
    """Global average pooling as a mean over the spatial dimensions, then flatten: (B, C, H, W) -> (B, C).

    ``nn.AdaptiveAvgPool2d`` has no deterministic CUDA backward (it raises under
    ``torch.use_deterministic_algorithms(True)``); a plain mean does.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class SpatialMean(nn.Module):
    """Drop-in replacement for torchvision's ``avgpool`` (``AdaptiveAvgPool2d(1)``): keeps (B, C, 1, 1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3), keepdim=True)


class BodyHead(nn.Module):
    """The model contract: ``body`` maps inputs to features, ``classifier`` maps features to logits,
    and ``forward`` returns ``(features, logits)``. Subclasses set ``body``, ``classifier`` and
    ``feature_dim`` in ``__init__``."""

    body: nn.Module
    classifier: nn.Module
    feature_dim: int

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(x)
        return features, self.classifier(features)
