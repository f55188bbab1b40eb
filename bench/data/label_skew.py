"""Label-skew partitions as two papers' released code draws them, beside the generic ``dirichlet`` scheme
(:mod:`bench.data.partition`).

* ``fedhkd``: one per-class Dirichlet draw cuts both the train and the test split, then each part is
  subsampled (FedHKD's released code, pipelines/fedhkd/NOTES.md §5.2).
* ``dafkd``: NIID-Bench's per-class Dirichlet with the balance cap, redrawn until every client holds enough
  (DaFKD, pipelines/dafkd/NOTES.md §3.2).
"""
from __future__ import annotations

import numpy as np
from pydantic import Field

from bench.data.partition import (DirichletParams, Indices, SchemeParams, Split, _dirichlet_per_class,
                                  register_partitioner)


class FedHKDParams(SchemeParams):
    alpha: float = Field(gt=0, description="Dirichlet concentration β")
    part: float | None = Field(None, gt=0, description="subsampling fraction; default num_clients / 100")
    replace: bool = Field(True, description="subsample with replacement (the released code)")
    min_size: int = Field(10, ge=0, description="redraw until every train partition has this many")


@register_partitioner("fedhkd", FedHKDParams, needs=("seed", "test_labels"))
def fedhkd(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: FedHKDParams, *,
           seed: int, test_labels: np.ndarray) -> Split:
    """FedHKD's released-code partition (pipelines/fedhkd/NOTES.md §5.2): per-class Dirichlet shared by train and test.

    One ``Dir(β)`` draw per class cuts both the shuffled train class and the (unshuffled) test
    class, each with its own balance cap; redrawn until every train part has ``min_size``; each
    train part is shuffled, then subsampled to ``int(part·n)`` and each test part to
    ``int(2·part·n)``, with replacement. Uses numpy's legacy stream ``np.random.seed(seed)``
    through a private ``RandomState`` (never the global one) so the seed-0 vectors of
    pipelines/fedhkd/NOTES.md §5.2 hold.
    Local test indices point into the test split."""
    legacy = np.random.RandomState(seed)
    m, n, n_test = num_clients, len(labels), len(test_labels)
    num_classes = int(max(labels.max(), test_labels.max())) + 1
    min_size = -1
    while min_size < params.min_size:
        batch: list[list[int]] = [[] for _ in range(m)]
        batch_test: list[list[int]] = [[] for _ in range(m)]
        for k in range(num_classes):
            idx_k = np.where(labels == k)[0]
            idx_k_test = np.where(test_labels == k)[0]
            legacy.shuffle(idx_k)
            p = legacy.dirichlet(np.repeat(params.alpha, m))
            p_tr = np.array([pj * (len(b) < n / m) for pj, b in zip(p, batch)])
            p_te = np.array([pj * (len(b) < n_test / m) for pj, b in zip(p, batch_test)])
            p_tr, p_te = p_tr / p_tr.sum(), p_te / p_te.sum()
            cuts_tr = (np.cumsum(p_tr) * len(idx_k)).astype(int)[:-1]
            cuts_te = (np.cumsum(p_te) * len(idx_k_test)).astype(int)[:-1]
            batch = [b + part.tolist() for b, part in zip(batch, np.split(idx_k, cuts_tr))]
            batch_test = [b + part.tolist() for b, part in zip(batch_test, np.split(idx_k_test, cuts_te))]
        min_size = min(len(b) for b in batch)
    for b in batch:
        legacy.shuffle(b)
    part = params.part if params.part is not None else m / 100
    train = [np.asarray(b)[legacy.choice(len(b), int(part * len(b)), replace=params.replace)] for b in batch]
    test = [np.asarray(b, dtype=np.int64)[legacy.choice(len(b), int(2 * part * len(b)), replace=params.replace)]
            for b in batch_test]
    return Split([np.sort(t).astype(np.int64) for t in train], [np.sort(t) for t in test], "test")


class DaFKDParams(SchemeParams):
    alpha: float = Field(gt=0, description="Dirichlet concentration α")
    min_size: int = Field(100, ge=0, description="resample until every client has this many (min_require)")


@register_partitioner("dafkd", DaFKDParams)
def dafkd(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: DaFKDParams) -> Indices:
    """DaFKD's partition (pipelines/dafkd/NOTES.md §3.2): the NIID-Bench per-class Dirichlet with the balance cap
    over all training samples, resampled until every client holds ≥ 100; evaluation uses the
    full test set, so no local test split."""
    return _dirichlet_per_class(labels, num_clients, DirichletParams(alpha=params.alpha, min_size=params.min_size),
                                rng)
