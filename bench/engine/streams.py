"""Named, seeded batch streams (docs/architecture.md "The engine"): a client's train data, a public set shared in
lockstep by every client, and noise for generators. Each is a pure function of the run seed and its
key, so a resumed run draws exactly what an uninterrupted one draws.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from bench.rng import torch_stream


def batches_per_pass(n: int, batch_size: int, drop_last: bool) -> int:
    """Mini-batches in one pass over ``n`` samples as :func:`epoch_batches` cuts them: batches of
    ``min(batch_size, n)``, the last partial one dropped when ``drop_last``."""
    size = min(batch_size, n)
    return n // size if drop_last else -(-n // size)


def epoch_batches(n: int, batch_size: int, drop_last: bool, generator: torch.Generator,
                  device: torch.device, epochs: int | None = None, steps: int | None = None) -> Iterator[torch.Tensor]:
    """Index tensors of mini-batches over ``n`` samples: one seeded permutation per epoch, cut into
    batches of ``min(batch_size, n)`` (a set smaller than one batch is one batch even with
    ``drop_last``), for ``epochs`` epochs or, when ``steps`` is given, exactly that many batches."""
    if (epochs is None) == (steps is None):
        raise ValueError("epoch_batches needs exactly one of epochs and steps")
    size = min(batch_size, n)
    stop = n - n % size if drop_last else n
    steps_left, epochs_left = steps, epochs
    while (steps_left is None or steps_left > 0) and (epochs_left is None or epochs_left > 0):
        perm = torch.randperm(n, generator=generator).to(device)
        for start in range(0, stop, size):
            yield perm[start:start + size]
            if steps_left is not None:
                steps_left -= 1
                if steps_left == 0:
                    return
        if epochs_left is not None:
            epochs_left -= 1


@dataclass(frozen=True)
class SharedBatches:
    """A public set handed out in lockstep: iteration ``i`` gives every client the same mini-batch
    (FedAL, pipelines/fedal/NOTES.md §2.2 line 9 and §2.6 A10; FedMD, CFD, FCCL). Epoch ``e`` is the permutation of
    the stream ``(*key, e)``, so any iteration can be drawn on its own and a client's ``i``-th batch never depends on
    who asked before."""

    x: torch.Tensor
    batch_size: int
    seed: int
    key: tuple[int | str, ...] = ("public",)
    drop_last: bool = True

    @property
    def batches_per_epoch(self) -> int:
        return batches_per_pass(len(self.x), self.batch_size, self.drop_last)

    def indices(self, iteration: int) -> torch.Tensor:
        epoch, b = divmod(iteration, self.batches_per_epoch)
        perm = torch.randperm(len(self.x), generator=torch_stream(self.seed, *self.key, epoch))
        size = min(self.batch_size, len(self.x))
        return perm[b * size:(b + 1) * size].to(self.x.device)

    def batch(self, iteration: int) -> torch.Tensor:
        return self.x[self.indices(iteration)]


@dataclass
class NoiseStream:
    """Noise for generators: ``batch(n)`` draws n vectors of ``dim`` from ``uniform`` U(0,1) or
    ``normal`` N(0,1) off one seeded generator (on the CPU, then moved, so every device draws alike)."""

    generator: torch.Generator
    dim: int
    device: torch.device
    kind: str = "uniform"

    def batch(self, n: int) -> torch.Tensor:
        draw = torch.rand if self.kind == "uniform" else torch.randn
        return draw(n, self.dim, generator=self.generator).to(self.device)
