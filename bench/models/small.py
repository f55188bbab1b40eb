"""Small models for the embedded ``digits`` dataset (8x8 grey images, 10 classes)."""
from __future__ import annotations

import math

from torch import nn

from bench.models.registry import register_model
from bench.models.layers import BodyHead


class MLP(BodyHead):
    """Flatten -> [Linear -> ReLU] * len(hidden) -> Linear. Features are the last hidden layer."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (128, 64)) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(in_shape)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.body = nn.Sequential(*layers)
        self.feature_dim = width
        self.classifier = nn.Linear(width, num_classes)


class SmallCNN(BodyHead):
    """Two 3x3 conv blocks (conv -> BN -> ReLU, max-pool after the second) -> FC features -> linear head.

    Sized for 8x8 inputs; BatchNorm is on by default so that FedAvg's handling of BN buffers is
    exercised by the default suite. ``final_block`` is the second conv block (FedAlign's final block,
    :mod:`bench.models.slimmable`).
    """

    body: nn.Sequential

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, channels: tuple[int, int] = (16, 32),
                 feature_dim: int = 64, batch_norm: bool = True) -> None:
        super().__init__()
        c_in, h, w = in_shape
        c1, c2 = channels

        def block(cin: int, cout: int) -> list[nn.Module]:
            norm: list[nn.Module] = [nn.BatchNorm2d(cout)] if batch_norm else []
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=not batch_norm), *norm, nn.ReLU()]

        first, second = block(c_in, c1), block(c1, c2)
        self.body = nn.Sequential(*first, *second, nn.MaxPool2d(2), nn.Flatten(),
                                  nn.Linear(c2 * (h // 2) * (w // 2), feature_dim), nn.ReLU())
        self._final_block_span = (len(first), len(first) + len(second))
        self.feature_dim = feature_dim
        self.classifier = nn.Linear(feature_dim, num_classes)

    @property
    def final_block(self) -> nn.Sequential:
        """The second conv block (conv -> [BN] -> ReLU), a view on ``body``'s modules."""
        return self.body[slice(*self._final_block_span)]


@register_model("mlp", example_input=((1, 8, 8), 10))
def mlp(in_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] | list[int] = (128, 64)) -> nn.Module:
    """Multi-layer perceptron on flattened pixels."""
    return MLP(in_shape, num_classes, tuple(hidden))


@register_model("mlp_deep", example_input=((1, 8, 8), 10))
def mlp_deep(in_shape: tuple[int, ...], num_classes: int,
             hidden: tuple[int, ...] | list[int] = (256, 128, 84)) -> nn.Module:
    """A deeper, wider perceptron (three hidden layers, 84-d features): the second architecture of the FedAL
    proxy's heterogeneous clients beside ``mlp`` with hidden (128, 84), both cheap on a CPU."""
    return MLP(in_shape, num_classes, tuple(hidden))


@register_model("cnn", example_input=((1, 8, 8), 10))
def cnn(in_shape: tuple[int, ...], num_classes: int, channels: tuple[int, int] | list[int] = (16, 32),
        feature_dim: int = 64, batch_norm: bool = True) -> nn.Module:
    """Small two-block CNN with BatchNorm, for 8x8 digits."""
    return SmallCNN(in_shape, num_classes, (int(channels[0]), int(channels[1])), feature_dim, batch_norm)
