"""Covariate-shift partitions: scheme ``fedakd``, FedAKD's partition generator (pipelines/fedakd/NOTES.md §2.2-2.5).

Power-law client sizes (POW), an equal covariate shift per client (BCS) and power-law sizes with a shift
of strength C (ICS(C)), each by Algorithm 2 in a low-dimensional PCA space or as ``devide.py`` cuts the
PC1 order; and the label shifts of its Appendix D (CLA, DIR(α)) on the same pool.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from bench.data.partition import Indices, SchemeParams, Split, register_partitioner
from bench.errors import BenchError
from bench.rng import numpy_stream


class FedAKDParams(SchemeParams):
    setting: Literal["pow", "bcs", "ics", "cla", "dir"] = Field(description=(
        "POW sizes, BCS equal shift, ICS POW + shift (Table 1); CLA k classes for client k, DIR Dirichlet "
        "label shift (Appendix D, Table 5)"))
    form: Literal["paper", "code"] = Field(
        "paper", description="paper: Algorithm 2 in low-D PCA space; code: devide.py's PC1 sort and chunk")
    shift: float = Field(5.0, gt=0, description="C in δᵀΣ⁻¹δ = C (BCS 5; ICS 2, 5, 10); unused by form=code")
    pca_dims: int = Field(2, ge=1, le=100, description="paper form: PCA coordinates used for Algorithm 2")
    test_fraction: float = Field(0.2, ge=0, lt=1, description="per-client local test fraction")
    pool_fraction: float = Field(0.5, gt=0, le=1, description=(
        "share of the train split partitioned (Algorithm 2 lines 5–6 and devide.py: half)"))
    alpha: float = Field(1.0, gt=0, description="DIR: Dirichlet concentration α")
    cla_size: int = Field(600, ge=1, description="CLA: samples per client (CFFL/CGSV's 600 [I])")


PCA_COMPONENTS = 100  # devide.py: PCA(n_components=100, random_state=42) on pixel/255
CODE_SPLIT_STATE = 42  # train_test_split(test_size=0.2, random_state=42, shuffle=True)


def power_law_counts(total: int, num_clients: int) -> np.ndarray:
    """n_k = ⌊total·(1/k)/Z⌋, Z = Σ 1/k, remainder +1 from client 1 on (pipelines/fedakd/NOTES.md §2.2-2.4)."""
    shares = 1.0 / np.arange(1, num_clients + 1)
    counts = np.floor(total * shares / shares.sum()).astype(np.int64)
    counts[: total - counts.sum()] += 1
    return counts


def pca_coordinates(features: np.ndarray, dims: int = PCA_COMPONENTS) -> np.ndarray:
    """devide.py's PCA of the flattened pixel/255 images (``random_state=42``)."""
    from sklearn.decomposition import PCA

    flat = features.reshape(len(features), -1).astype(np.float64) / 255.0
    return PCA(n_components=min(dims, *flat.shape), random_state=42).fit_transform(flat)


def covariate_shift_sample(coords: np.ndarray, counts: np.ndarray, shift: float,
                           rng: np.random.Generator) -> tuple[Indices, np.ndarray, np.ndarray]:
    """FedAKD Algorithm 2 (pipelines/fedakd/NOTES.md §2.3): for each client k draw δ_k = √C·L·u_k (Σ = LLᵀ,
    u_k uniform on the sphere), so δ_kᵀΣ⁻¹δ_k = C exactly; weight every sample by the density
    N(x; μ+δ_k, Σ) (log-sum-exp normalised) and draw n_k indices with replacement. Returns the
    index arrays, the δ_k (rows) and Σ."""
    mu = coords.mean(axis=0)
    sigma = np.atleast_2d(np.cov(coords, rowvar=False))
    chol = np.linalg.cholesky(sigma)
    sigma_inv = np.linalg.inv(sigma)
    clients, deltas = [], []
    for n_k in counts:
        z = rng.standard_normal(len(mu))
        delta = np.sqrt(shift) * chol @ (z / np.linalg.norm(z))
        if not np.isclose(delta @ sigma_inv @ delta, shift, rtol=1e-8):
            raise AssertionError(f"δᵀΣ⁻¹δ = {delta @ sigma_inv @ delta} != C = {shift}")
        centred = coords - (mu + delta)
        log_w = -0.5 * np.einsum("ij,jk,ik->i", centred, sigma_inv, centred)
        w = np.exp(log_w - log_w.max())
        clients.append(rng.choice(len(coords), size=int(n_k), replace=True, p=w / w.sum()).astype(np.int64))
        deltas.append(delta)
    return clients, np.asarray(deltas), sigma


def _client_test_split(part: np.ndarray, fraction: float, form: str,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """FedAKD's per-client split (pipelines/fedakd/NOTES.md §2.5): code form is sklearn's
    ``train_test_split(test_size=0.2, random_state=42, shuffle=True)``; paper form splits the
    client's *unique* indices, so no duplicate of a test image is trained on (§2.3)."""
    if fraction == 0:
        return np.sort(part), np.zeros(0, np.int64)
    if form == "code":
        from sklearn.model_selection import train_test_split
        train, test = train_test_split(part, test_size=fraction, random_state=CODE_SPLIT_STATE, shuffle=True)
        return np.sort(train), np.sort(test)
    unique = rng.permutation(np.unique(part))
    held = unique[: int(np.ceil(fraction * len(unique)))]
    in_test = np.isin(part, held)
    return np.sort(part[~in_test]), np.sort(part[in_test])


def class_count_split(pool: np.ndarray, labels: np.ndarray, num_clients: int, size: int,
                      rng: np.random.Generator) -> Indices:
    """FedAKD Appendix D "CLA" (pipelines/fedakd/NOTES.md §2.7 [I]): client k (1-based) gets ``size`` samples of the
    classes 0..k−1, equally many of each (the remainder to the lowest classes), drawn without replacement
    from the pool in its (shuffled) order."""
    classes = int(labels.max()) + 1
    if num_clients > classes:
        raise BenchError(f"partition: CLA gives client k data of k classes, so at most {classes} clients; "
                         f"got num_clients={num_clients}")
    queues = {c: list(pool[labels[pool] == c]) for c in range(classes)}
    clients = []
    for k in range(1, num_clients + 1):
        per_class = [size // k + (1 if c < size % k else 0) for c in range(k)]
        taken = []
        for c, count in enumerate(per_class):
            if len(queues[c]) < count:
                raise BenchError(f"partition: CLA needs {count} more samples of class {c} for client {k} but the "
                                 f"pool has {len(queues[c])} left; lower cla_size or raise pool_fraction")
            taken += queues[c][:count]
            del queues[c][:count]
        clients.append(rng.permutation(np.asarray(taken, dtype=np.int64)))
    return clients


def dirichlet_label_split(pool: np.ndarray, labels: np.ndarray, num_clients: int, alpha: float,
                          rng: np.random.Generator) -> Indices:
    """FedAKD Appendix D "DIR(α)" (pipelines/fedakd/NOTES.md §2.7): per class c, p_c ~ Dir(α·1_K), client k gets the
    next ⌊p_{c,k}·|D_c|⌋ samples of the pool's class c (no balance cap, no redraw)."""
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for c in range(int(labels.max()) + 1):
        members = pool[labels[pool] == c]
        counts = np.floor(rng.dirichlet(np.full(num_clients, alpha)) * len(members)).astype(np.int64)
        for part, piece in zip(parts, np.split(members[:counts.sum()], np.cumsum(counts)[:-1])):
            part += piece.tolist()
    return [rng.permutation(np.asarray(p, dtype=np.int64)) for p in parts]


def client_sizes(num_samples: int, num_clients: int, params: FedAKDParams) -> np.ndarray:
    """Each client's sample count before its local split: the pool (``pool_fraction`` of the train split)
    in equal parts (BCS) or power-law parts (the others, §2.2)."""
    pool = int(num_samples * params.pool_fraction)
    return np.full(num_clients, pool // num_clients) if params.setting == "bcs" else power_law_counts(pool, num_clients)


def algorithm2_draws(features: np.ndarray, num_clients: int, seed: int,
                     params: FedAKDParams) -> tuple[Indices, np.ndarray, np.ndarray]:
    """The paper-form BCS/ICS partition's Algorithm-2 draws again, from its seed: the clients' index multisets
    (before their local splits), the shifts δ_k and Σ (partition sanity, pipelines/fedakd/NOTES.md §8 R0)."""
    coords = pca_coordinates(features)[:, : params.pca_dims]
    return covariate_shift_sample(coords, client_sizes(len(features), num_clients, params), params.shift,
                                  numpy_stream(seed, "partition", "fedakd"))


@register_partitioner("fedakd", FedAKDParams, needs=("features",))
def fedakd(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: FedAKDParams, *,
           features: np.ndarray) -> Split:
    """FedAKD's POW / BCS / ICS(C) covariate-shift partitions of half the train split (pipelines/fedakd/NOTES.md §2.2-2.5),
    and the label-shift CLA / DIR(α) of its Appendix D (§2.7).

    POW: a random half cut into power-law sizes (both forms); CLA and DIR split the same random half. Paper form (Algorithm 2, §2.3):
    BCS/ICS draw equal / power-law counts by Gaussian importance sampling around μ+δ_k in the top
    ``pca_dims`` PCA coordinates, with replacement. Code form (``devide.py``, §2.4): the half with
    the lowest PC1 cut into contiguous equal (BCS) or power-law (ICS) chunks, client 1 lowest;
    C is unused. Then each client's 80/20 local train/test split (§2.5); local tests point into
    the train split."""
    n_half = int(len(labels) * params.pool_fraction)
    sizes = client_sizes(len(labels), num_clients, params)
    if params.setting in ("pow", "cla", "dir"):
        chosen = rng.permutation(rng.permutation(len(labels))[:n_half])
        if params.setting == "pow":
            clients = np.split(chosen, np.cumsum(sizes)[:-1])
        elif params.setting == "cla":
            clients = class_count_split(chosen, labels, num_clients, params.cla_size, rng)
        else:
            clients = dirichlet_label_split(chosen, labels, num_clients, params.alpha, rng)
    else:
        coords = pca_coordinates(features)
        if params.form == "code":
            lowest = np.argsort(coords[:, 0], kind="stable")[:n_half]
            clients = np.split(lowest[: sizes.sum()], np.cumsum(sizes)[:-1])
        else:
            clients = covariate_shift_sample(coords[:, : params.pca_dims], sizes, params.shift, rng)[0]
    pairs = [_client_test_split(np.asarray(c, dtype=np.int64), params.test_fraction, params.form, rng)
             for c in clients]
    return Split([p[0] for p in pairs], [p[1] for p in pairs], "train")


def client_shift(partition_train: Indices, features: np.ndarray) -> np.ndarray:
    """Each client's mean first principal coordinate (in units of its std over the train split), the
    covariate-shift axis of FedAKD's partitions, for :func:`bench.report.partition_plots.plot_client_summary`."""
    pc1 = pca_coordinates(features, 1)[:, 0]
    pc1 = (pc1 - pc1.mean()) / max(pc1.std(), 1e-12)
    return np.array([pc1[p].mean() if len(p) else np.nan for p in partition_train])
