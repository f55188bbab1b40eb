"""Named random streams derived from one run seed (docs/architecture.md "Determinism").

Every stream is ``numpy.random.SeedSequence([seed, *key])`` for a key path such as
``("batches", client, round)``; no code touches numpy's or torch's global RNG state except
:func:`seeded_torch`, which forks and restores it around module construction.
"""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import numpy as np
import torch


def _word(part: int | str) -> int:
    if isinstance(part, str):
        return int.from_bytes(hashlib.sha256(part.encode()).digest()[:4], "little")
    if part < 0:
        raise ValueError(f"stream key parts must be non-negative, got {part}")
    return int(part)


def seed_sequence(seed: int, *key: int | str) -> np.random.SeedSequence:
    return np.random.SeedSequence([_word(seed), *(_word(k) for k in key)])


def numpy_stream(seed: int, *key: int | str) -> np.random.Generator:
    """A numpy Generator for the stream ``key`` of run ``seed``."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, *key)))


def torch_seed(seed: int, *key: int | str) -> int:
    return int(seed_sequence(seed, *key).generate_state(1, np.uint64)[0] >> np.uint64(1))


def torch_stream(seed: int, *key: int | str) -> torch.Generator:
    """A CPU torch Generator for the stream ``key`` of run ``seed`` (draws are made on the CPU and moved, so
    that a run draws the same numbers on every device)."""
    return torch.Generator().manual_seed(torch_seed(seed, *key))


@contextlib.contextmanager
def seeded_torch(seed: int, *key: int | str) -> Iterator[None]:
    """Run a block (e.g. ``nn.Module`` construction, whose initialisers draw from torch's global RNG)
    with the global CPU RNG seeded from the stream ``key``, restoring its previous state afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed(seed, *key))
        yield
