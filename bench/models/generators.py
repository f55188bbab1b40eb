"""Server-side and shared generators of the data-free methods (kind ``generator`` in the registry).

Every generator has a ``noise_dim`` attribute and ``forward(z, y=None)``: noise z of shape
(B, noise_dim) and, for conditional generators, integer labels y of shape (B,) give a batch of shape
(B, *in_shape), where ``in_shape`` is the shape of one sample (a feature vector or an image).

* ``fedgen_generator``: FedGen's feature generator (pipelines/fedhkd/NOTES.md §4 FedGen; pipelines/dafkd/NOTES.md §2.4, §3.4 G-FedGen).
* ``cond_image_generator``: FedFTG's ``CGeneratorA`` (pipelines/dafkd/NOTES.md §2.5, §3.4 G-cond).
* ``dcgan_generator``: DaFKD's unconditional DCGAN generator (pipelines/dafkd/NOTES.md §3.4 G-DCGAN-32/-28, A6).
* ``embed_feature_generator``: a feature generator as the DaFKD paper describes the one it gives FedGen
  (two embeddings, pipelines/dafkd/NOTES.md §2.4, reading ``dafkd_embed``, ``generator: embed``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.registry import GENERATOR, register_model


class FeatureGenerator(nn.Module):
    """concat(z, onehot(y)) -> Linear(noise_dim + C, hidden) -> BatchNorm1d -> ReLU -> Linear(hidden, d).

    Outputs a latent representation in R^d that is fed to a classifier head. FedHKD's FedGen uses
    noise_dim 64 and hidden 512 with d the backbone's latent dimension; DaFKD's uses 32, 256, d = 256.
    """

    def __init__(self, out_shape: tuple[int, ...], num_classes: int, noise_dim: int, hidden: int) -> None:
        super().__init__()
        (out_dim,) = out_shape
        self.noise_dim = noise_dim
        self.num_classes = num_classes
        self.net = nn.Sequential(nn.Linear(noise_dim + num_classes, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Linear(hidden, out_dim))

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        if y is None:
            raise ValueError("FeatureGenerator is conditional: pass labels y")
        return self.net(torch.cat([z, F.one_hot(y, self.num_classes).to(z.dtype)], dim=1))


class EmbeddingFeatureGenerator(nn.Module):
    """"Two embedding layers (for one-hot label vector and noise vector respectively) and the fully-connected
    layer with LeakyReLU and BatchNorm layers" (DaFKD §4.1, pipelines/dafkd/NOTES.md §3.4) with a feature output, as
    DaFKD says FedGen ran (pipelines/dafkd/NOTES.md §2.4, reading ``dafkd_embed``, ``generator: embed``): noise
    embedding Linear(noise_dim -> hidden) and label embedding Linear(C -> hidden), concatenated ->
    Linear(2 hidden -> hidden) -> BatchNorm1d -> LeakyReLU(0.2) -> Linear(hidden -> d). The widths are not printed: ``hidden`` is FedGen's. Default PyTorch init."""

    def __init__(self, out_shape: tuple[int, ...], num_classes: int, noise_dim: int, hidden: int) -> None:
        super().__init__()
        (out_dim,) = out_shape
        self.noise_dim = noise_dim
        self.num_classes = num_classes
        self.noise_embed = nn.Linear(noise_dim, hidden)
        self.label_embed = nn.Linear(num_classes, hidden)
        self.net = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.BatchNorm1d(hidden), nn.LeakyReLU(0.2),
                                 nn.Linear(hidden, out_dim))

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        if y is None:
            raise ValueError("EmbeddingFeatureGenerator is conditional: pass labels y")
        label = self.label_embed(F.one_hot(y, self.num_classes).to(z.dtype))
        return self.net(torch.cat([self.noise_embed(z), label], dim=1))


class ConditionalImageGenerator(nn.Module):
    """FedFTG ``CGeneratorA``: noise embedding Linear(nz -> 64 (S/4)^2) and one-hot label embedding
    Linear(C -> 64 (S/4)^2), concatenated to (128, S/4, S/4) -> BN -> up x2 -> conv3x3(128 -> 128) -> BN ->
    LeakyReLU(0.2) -> up x2 -> conv3x3(128 -> 64) -> BN -> LeakyReLU(0.2) -> conv3x3(64 -> nc) -> Tanh ->
    BN(nc, affine=False). Nearest upsampling (deterministic backward on CUDA). Default PyTorch init."""

    def __init__(self, out_shape: tuple[int, ...], num_classes: int, noise_dim: int = 100) -> None:
        super().__init__()
        nc, s, s_w = out_shape
        if s != s_w or s % 4:
            raise ValueError(f"CGeneratorA needs square images with side divisible by 4, got {out_shape}")
        self.noise_dim = noise_dim
        self.num_classes = num_classes
        self.init_size = s // 4
        embed = 64 * self.init_size ** 2
        self.noise_embed = nn.Linear(noise_dim, embed)
        self.label_embed = nn.Linear(num_classes, embed)
        self.net = nn.Sequential(
            nn.BatchNorm2d(128), nn.Upsample(scale_factor=2),
            nn.Conv2d(128, 128, 3, padding=1), nn.BatchNorm2d(128), nn.LeakyReLU(0.2), nn.Upsample(scale_factor=2),
            nn.Conv2d(128, 64, 3, padding=1), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
            nn.Conv2d(64, nc, 3, padding=1), nn.Tanh(), nn.BatchNorm2d(nc, affine=False))

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        if y is None:
            raise ValueError("ConditionalImageGenerator is conditional: pass labels y")
        shape = (-1, 64, self.init_size, self.init_size)
        h = torch.cat([self.noise_embed(z).view(shape),
                       self.label_embed(F.one_hot(y, self.num_classes).to(z.dtype)).view(shape)], dim=1)
        return self.net(h)


class DCGANGenerator(nn.Module):
    """Unconditional DCGAN generator: z (as d x 1 x 1) -> ConvT(d -> 256, k4, s1, p0) -> BN -> ReLU (4x4)
    -> ConvT(256 -> 128, k4, s2, p1) -> BN -> ReLU (8x8) -> ConvT(128 -> 64, k4, s2, p) -> BN -> ReLU
    -> ConvT(64 -> nc, k4, s2, p1, bias) -> Tanh, with p = 1 for 32x32 (16x16 -> 32x32) and p = 2 for
    28x28 (14x14 -> 28x28). Hidden ConvTs have no bias. Init: conv weights xavier_normal, BN weight
    N(1, 0.02), BN bias 0 (pipelines/dafkd/NOTES.md §1.6).

    Smaller images drop upsampling stages from the front of the widths (16x16: 128, 64; 8x8: 64), and
    ``width`` (64) scales every hidden width (CPU proxies on the embedded 8x8 digits); the defaults at
    32x32 and 28x28 are the paper's."""

    def __init__(self, out_shape: tuple[int, ...], num_classes: int = 0, noise_dim: int = 100, width: int = 64) -> None:
        super().__init__()
        nc, h, w = out_shape
        stages = {32: 3, 28: 3, 16: 2, 8: 1}.get(h)
        if stages is None or h != w:
            raise ValueError(f"the DCGAN generator makes 32x32, 28x28, 16x16 or 8x8 images, got {out_shape}")
        self.noise_dim = noise_dim
        widths = [width * 2 ** (stages - 1 - i) for i in range(stages)]
        layers: list[nn.Module] = [nn.ConvTranspose2d(noise_dim, widths[0], 4, 1, 0, bias=False),
                                   nn.BatchNorm2d(widths[0]), nn.ReLU()]
        for i in range(1, stages):
            padding = 2 if h == 28 and i == stages - 1 else 1
            layers += [nn.ConvTranspose2d(widths[i - 1], widths[i], 4, 2, padding, bias=False),
                       nn.BatchNorm2d(widths[i]), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.ConvTranspose2d(widths[-1], nc, 4, 2, 1), nn.Tanh())
        for m in self.net.modules():
            if isinstance(m, nn.ConvTranspose2d):
                nn.init.xavier_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """``y`` is ignored (unconditional); it is accepted so all generators share one signature."""
        return self.net(z.view(z.shape[0], self.noise_dim, 1, 1))


@register_model("fedgen_generator", example_input=((64,), 10), kind=GENERATOR)
def fedgen_generator(in_shape: tuple[int, ...], num_classes: int, noise_dim: int = 64, hidden: int = 512) -> nn.Module:
    """FedGen feature generator; defaults are FedHKD's (noise 64, hidden 512); DaFKD's FedGen uses 32, 256."""
    return FeatureGenerator(in_shape, num_classes, noise_dim, hidden)


@register_model("embed_feature_generator", example_input=((256,), 10), kind=GENERATOR)
def embed_feature_generator(in_shape: tuple[int, ...], num_classes: int, noise_dim: int = 32,
                            hidden: int = 256) -> nn.Module:
    """Feature generator with separate noise and label embeddings (DaFKD's description; FedGen's reading dafkd_embed, ``generator: embed``)."""
    return EmbeddingFeatureGenerator(in_shape, num_classes, noise_dim, hidden)


@register_model("cond_image_generator", example_input=((3, 32, 32), 10), kind=GENERATOR)
def cond_image_generator(in_shape: tuple[int, ...], num_classes: int, noise_dim: int = 100) -> nn.Module:
    """FedFTG conditional image generator CGeneratorA (G-cond), nz = 100."""
    return ConditionalImageGenerator(in_shape, num_classes, noise_dim)


@register_model("dcgan_generator", example_input=((3, 32, 32), 10), kind=GENERATOR)
def dcgan_generator(in_shape: tuple[int, ...], num_classes: int, noise_dim: int = 100, width: int = 64) -> nn.Module:
    """DaFKD unconditional DCGAN generator (G-DCGAN-32 / -28), d = 100; num_classes is unused."""
    return DCGANGenerator(in_shape, num_classes, noise_dim, width)
