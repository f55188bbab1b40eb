"""Natural partitions: one client per user of a dataset that records who made each sample.

* ``leaf``: LEAF's CelebA users as clients (FedAL, pipelines/fedal/NOTES.md §4.1); the users not chosen are left
  for FedAL's unlabelled public set (§4.3, A12), :func:`public_split`.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from bench.data.partition import SchemeParams, Split, register_partitioner
from bench.errors import BenchError
from bench.rng import numpy_stream


class LEAFParams(SchemeParams):
    select: Literal["random", "largest"] = Field(
        "random", description="which users become the clients: a seeded random choice, or the largest")


@register_partitioner("leaf", LEAFParams, needs=("groups", "test_groups"), figure="summary")
def leaf(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: LEAFParams, *,
         groups: np.ndarray, test_groups: np.ndarray) -> Split:
    """LEAF's natural partition (pipelines/fedal/NOTES.md §4.1): one client per LEAF user (group id).

    ``num_clients`` users are chosen (seeded, or the largest); each gets all its train samples and,
    as local test set, its LEAF test samples (indices into the test split). Users not chosen are
    left for FedAL's public set (:func:`public_split` with their samples as candidates)."""
    users, sizes = np.unique(groups, return_counts=True)
    if num_clients > len(users):
        raise BenchError(f"partition.num_clients={num_clients} exceeds the {len(users)} LEAF users")
    if params.select == "largest":
        chosen = users[np.argsort(-sizes, kind="stable")[:num_clients]]
    else:
        chosen = rng.choice(users, size=num_clients, replace=False)
    return Split([np.flatnonzero(groups == u).astype(np.int64) for u in chosen],
                 [np.flatnonzero(test_groups == u).astype(np.int64) for u in chosen], "test")


def public_split(num_samples: int, size: int, seed: int, disjoint: bool = False,
                 candidates: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """FedAL's unlabelled public set 𝒫 (pipelines/fedal/NOTES.md §4.3, §2.6 A12): ``size`` train-split
    indices (|𝒫| ∈ {200, …, 1000}, default 1000) drawn uniformly without replacement from
    ``candidates`` (default: all), and the indices left for the clients: the whole train split by
    default (𝒫 ⊂ ∪𝒟_n), or the complement of 𝒫 when ``disjoint``. For CelebA pass as
    ``candidates`` the samples of LEAF users that are not clients. Both arrays are sorted."""
    pool = np.arange(num_samples) if candidates is None else np.unique(np.asarray(candidates, dtype=np.int64))
    if not 0 < size <= len(pool):
        raise BenchError(f"public set size {size} must be between 1 and the {len(pool)} candidate samples")
    public = np.sort(numpy_stream(seed, "public-set").choice(pool, size=size, replace=False)).astype(np.int64)
    remaining = np.setdiff1d(np.arange(num_samples), public) if disjoint else np.arange(num_samples)
    return public, remaining.astype(np.int64)
