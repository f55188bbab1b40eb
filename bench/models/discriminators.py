"""Discriminators trained beside the classifiers.

* ``fedal_discriminator``: FedAL's server discriminator, an MLP from a client's softened logits to
  client-index logits (pipelines/fedal/NOTES.md §2.1, §2.6 A7).
* ``dafkd_discriminator``: the separate DCGAN-style discriminators of the DaFKD^{no-sharing} ablation
  (the official ``model/gan.py``, pipelines/dafkd/NOTES.md §1.5).
"""
from __future__ import annotations

from torch import nn

from bench.models.layers import BodyHead
from bench.models.registry import register_model


ACTIVATIONS = {"relu": nn.ReLU, "leaky_relu": lambda: nn.LeakyReLU(0.2)}


class ClientDiscriminator(BodyHead):
    """FedAL's server discriminator h(p, w): R^K -> R^N (pipelines/fedal/NOTES.md §2.1, §2.6 A7):
    Linear(K, 32) -> ReLU -> Linear(32, 265) -> ReLU (features) -> Linear(265, N) client-index logits
    (``activation``: ReLU, or LeakyReLU(0.2), A7's alternative).
    Its input is the temperature softmax psi(f_n, 2) of a client's logits.

    The shape is a reading: the paper gives "two fully-connected layers with 32 and 265 neurons" and an
    output over the N clients. Neither 32 nor 265 can be that output (N is 10 to 100), so the two layers
    are read as the *hidden* layers and a third linear layer maps to the N logits (three linear layers in
    all); 265 is kept as printed (``hidden=(32, 256)`` if it is a misprint of 256)."""

    def __init__(self, in_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, int] = (32, 265),
                 activation: str = "relu") -> None:
        super().__init__()
        (k,) = in_shape
        act = ACTIVATIONS[activation]
        self.body = nn.Sequential(nn.Linear(k, hidden[0]), act(), nn.Linear(hidden[0], hidden[1]), act())
        self.feature_dim = hidden[1]
        self.classifier = nn.Linear(hidden[1], num_classes)


class ConvDiscriminator(BodyHead):
    """DaFKD^{no-sharing} discriminator (pipelines/dafkd/NOTES.md §1.5). ``forward`` returns (features, logit of
    "real", shape (B, 1)); the official sigmoid is left to a with-logits loss. Default PyTorch init.

    * 3x32x32 (``DiscriminatorCifar``, DCGAN D): conv4x4 s2 (64) -> LReLU -> conv4x4 s2 (128, no bias)
      -> BN -> LReLU -> conv4x4 s2 (256, no bias) -> BN -> LReLU; features = the 256x4x4 map flattened;
      the final conv4x4 (256 -> 1) on a 4x4 map is written as the equivalent Linear(4096, 1). 663,361 parameters.
    * 1x28x28 (``Discriminator``): conv5x5 p2 (32) -> LReLU -> avgpool 2 -> conv5x5 p2 (64) -> LReLU ->
      avgpool 2 -> FC 3136 -> 1024 -> LReLU (features) -> FC 1024 -> 1. About 3.27M parameters.
    * 8x8 (the embedded digits of the CPU proxy; no official counterpart): the DCGAN D's first two
      stages, conv4x4 s2 (64) -> LReLU -> conv4x4 s2 (128, no bias) -> BN -> LReLU; features = the 128x2x2
      map flattened -> Linear(512, 1).
    """

    def __init__(self, in_shape: tuple[int, ...], num_classes: int = 1) -> None:
        super().__init__()
        c, h, w = in_shape
        if (h, w) == (32, 32):
            self.body = nn.Sequential(
                nn.Conv2d(c, 64, 4, 2, 1), _lrelu(),
                nn.Conv2d(64, 128, 4, 2, 1, bias=False), nn.BatchNorm2d(128), _lrelu(),
                nn.Conv2d(128, 256, 4, 2, 1, bias=False), nn.BatchNorm2d(256), _lrelu(), nn.Flatten())
            self.feature_dim = 256 * 4 * 4
        elif (h, w) == (28, 28):
            self.body = nn.Sequential(
                nn.Conv2d(c, 32, 5, padding=2), _lrelu(), nn.AvgPool2d(2),
                nn.Conv2d(32, 64, 5, padding=2), _lrelu(), nn.AvgPool2d(2), nn.Flatten(),
                nn.Linear(64 * 7 * 7, 1024), _lrelu())
            self.feature_dim = 1024
        elif (h, w) == (8, 8):
            self.body = nn.Sequential(
                nn.Conv2d(c, 64, 4, 2, 1), _lrelu(),
                nn.Conv2d(64, 128, 4, 2, 1, bias=False), nn.BatchNorm2d(128), _lrelu(), nn.Flatten())
            self.feature_dim = 128 * 2 * 2
        else:
            raise ValueError(f"DaFKD discriminators exist for 32x32, 28x28 and 8x8 images, got in_shape={in_shape}")
        self.classifier = nn.Linear(self.feature_dim, num_classes)


def _lrelu() -> nn.Module:
    return nn.LeakyReLU(0.2)


@register_model("fedal_discriminator", example_input=((10,), 20))
def fedal_discriminator(in_shape: tuple[int, ...], num_classes: int,
                        hidden: tuple[int, int] | list[int] = (32, 265), activation: str = "relu") -> nn.Module:
    """FedAL server discriminator MLP K -> 32 -> 265 -> N (in_shape = (K,), num_classes = N clients)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    return ClientDiscriminator(in_shape, num_classes, (int(hidden[0]), int(hidden[1])), activation)


@register_model("dafkd_discriminator", example_input=((3, 32, 32), 1))
def dafkd_discriminator(in_shape: tuple[int, ...], num_classes: int = 1) -> nn.Module:
    """DaFKD^{no-sharing} separate domain discriminator (DCGAN D for 32x32, CNN for 28x28)."""
    return ConvDiscriminator(in_shape, num_classes)
