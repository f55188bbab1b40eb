"""Covariate-shift partitions: scheme ``fedakd``, FedAKD's partition generator (pipelines/fedakd/NOTES.md §2.2-2.5).

Power-law client sizes (POW), an equal covariate shift per client (BCS) and power-law sizes with a shift
of strength C (ICS(C)), each by Algorithm 2 in a low-dimensional PCA space or as ``devide.py`` cuts the
PC1 order; and the label shifts of its Appendix D (CLA, DIR(α)) on the same pool.
"""
from __future__ import annotations

from dataclasses import dataclass
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
    local_test: Literal["held_out", "as_drawn"] = Field("held_out", description=(
        "paper-form BCS/ICS, which draw with replacement from one pool: held_out (default): every client's local "
        "test images leave the pool before any client draws its training data, so no client trains on any "
        "client's test image; as_drawn: each client's draw is split on its own unique indices only, so another "
        "client may train on its test images (pipelines/fedakd/NOTES.md §2.3, A17)"))
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


def importance_weights(coords: np.ndarray, centre: np.ndarray, sigma_inv: np.ndarray) -> np.ndarray:
    """Algorithm 2's sampling probabilities: the density N(x; centre, Σ) of every sample, log-sum-exp
    normalised to sum to 1."""
    centred = coords - centre
    log_w = -0.5 * np.einsum("ij,jk,ik->i", centred, sigma_inv, centred)
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def covariate_shift_sample(coords: np.ndarray, counts: np.ndarray, shift: float,
                           rng: np.random.Generator) -> tuple[Indices, np.ndarray, np.ndarray]:
    """FedAKD Algorithm 2 (pipelines/fedakd/NOTES.md §2.3): for each client k draw δ_k = √C·L·u_k (Σ = LLᵀ,
    u_k uniform on the sphere), so δ_kᵀΣ⁻¹δ_k = C exactly; weight every sample by the density
    N(x; μ+δ_k, Σ) (:func:`importance_weights`) and draw n_k indices with replacement. Returns the
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
        p = importance_weights(coords, mu + delta, sigma_inv)
        clients.append(rng.choice(len(coords), size=int(n_k), replace=True, p=p).astype(np.int64))
        deltas.append(delta)
    return clients, np.asarray(deltas), sigma


def tested_and_trained(train: Indices, local_test: Indices) -> np.ndarray:
    """Per local test entry (all clients' local test arrays concatenated, duplicates kept): whether any
    client's training split holds the same image. Meaningful where local tests point into the train split."""
    trained = np.unique(np.concatenate([np.asarray(t, dtype=np.int64) for t in train] or [np.zeros(0, np.int64)]))
    tested = np.concatenate([np.asarray(h, dtype=np.int64) for h in local_test] or [np.zeros(0, np.int64)])
    return np.isin(tested, trained)


def trained_test_share(train: Indices, local_test: Indices) -> float:
    """The share of local test entries that some client trains on (0 when there are no local tests)."""
    hits = tested_and_trained(train, local_test)
    return float(hits.mean()) if len(hits) else 0.0


@dataclass(frozen=True)
class Algorithm2Partition:
    """A paper-form BCS/ICS partition as Algorithm 2 makes it: each client's n_k draws (``drawn``), its local
    split as drawn (``as_drawn_train``, ``local_test``), the training data it trains on (``train``: the
    as-drawn part, or with ``local_test: held_out`` a fresh draw that avoids every client's test images),
    the shifts δ_k (rows) and Σ."""

    drawn: Indices
    as_drawn_train: Indices
    train: Indices
    local_test: Indices
    deltas: np.ndarray
    sigma: np.ndarray


def algorithm2_partition(coords: np.ndarray, counts: np.ndarray, params: FedAKDParams,
                         rng: np.random.Generator) -> Algorithm2Partition:
    """Algorithm 2's draws (:func:`covariate_shift_sample`), then each client's local split on its unique
    indices (§2.5). With ``local_test: held_out`` (A17), the union of all clients' local test images then
    leaves the pool and each client draws its training data again from what is left, by the same
    importance weights and with replacement, as many images as its as-drawn training part: no client trains
    on any client's test image, and every local test set, size and δ_k is the as-drawn one. The as-drawn
    reading consumes a prefix of the same stream, so its arrays do not depend on the option."""
    drawn, deltas, sigma = covariate_shift_sample(coords, counts, params.shift, rng)
    pairs = [_client_test_split(c, params.test_fraction, "paper", rng) for c in drawn]
    as_drawn_train, local_test = [p[0] for p in pairs], [p[1] for p in pairs]
    train = as_drawn_train
    if params.local_test == "held_out" and params.test_fraction > 0:
        held = np.unique(np.concatenate(local_test))
        mu, sigma_inv = coords.mean(axis=0), np.linalg.inv(sigma)
        train = []
        for delta, part in zip(deltas, as_drawn_train):
            p = importance_weights(coords, mu + delta, sigma_inv)
            p[held] = 0.0
            if p.sum() <= 0:
                raise BenchError("partition fedakd: a client's importance weights lie entirely on other clients' "
                                 "test images; lower test_fraction or use local_test: as_drawn")
            train.append(np.sort(rng.choice(len(coords), size=len(part), replace=True, p=p / p.sum())
                                 .astype(np.int64)))
    return Algorithm2Partition(drawn, as_drawn_train, train, local_test, deltas, sigma)


def _client_test_split(part: np.ndarray, fraction: float, form: str,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """FedAKD's per-client split (pipelines/fedakd/NOTES.md §2.5): code form is sklearn's
    ``train_test_split(test_size=0.2, random_state=42, shuffle=True)``; paper form splits the
    client's *unique* indices, so the client trains on no duplicate of its own test images (another
    client may: :func:`algorithm2_partition` holds them out of everyone's training data, A17)."""
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


def algorithm2_draws(features: np.ndarray, num_clients: int, seed: int, params: FedAKDParams) -> Algorithm2Partition:
    """The paper-form BCS/ICS partition made again by Algorithm 2 from its seed, with its draws and as-drawn
    split (partition sanity, pipelines/fedakd/NOTES.md §8 R0)."""
    coords = pca_coordinates(features)[:, : params.pca_dims]
    return algorithm2_partition(coords, client_sizes(len(features), num_clients, params), params,
                                numpy_stream(seed, "partition", "fedakd"))


@register_partitioner("fedakd", FedAKDParams, needs=("features",), figure="summary")
def fedakd(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: FedAKDParams, *,
           features: np.ndarray) -> Split:
    """FedAKD's POW / BCS / ICS(C) covariate-shift partitions of half the train split (pipelines/fedakd/NOTES.md §2.2-2.5),
    and the label-shift CLA / DIR(α) of its Appendix D (§2.7).

    POW: a random half cut into power-law sizes (both forms); CLA and DIR split the same random half. Paper form (Algorithm 2, §2.3):
    BCS/ICS draw equal / power-law counts by Gaussian importance sampling around μ+δ_k in the top
    ``pca_dims`` PCA coordinates, with replacement; by default (``local_test: held_out``, A17) the clients'
    training data is then drawn again without any client's local test images (:func:`algorithm2_partition`),
    ``as_drawn`` keeps the draws as they are. Code form (``devide.py``, §2.4): the half with
    the lowest PC1 cut into contiguous equal (BCS) or power-law (ICS) chunks, client 1 lowest;
    C is unused. Then each client's 80/20 local train/test split (§2.5); local tests point into
    the train split. POW, CLA, DIR and the code form give every image to one client at most, so no
    client trains on another's test image in any reading."""
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
        if params.form == "paper":
            made = algorithm2_partition(coords[:, : params.pca_dims], sizes, params, rng)
            return Split(made.train, made.local_test, "train")
        lowest = np.argsort(coords[:, 0], kind="stable")[:n_half]
        clients = np.split(lowest[: sizes.sum()], np.cumsum(sizes)[:-1])
    pairs = [_client_test_split(np.asarray(c, dtype=np.int64), params.test_fraction, params.form, rng)
             for c in clients]
    return Split([p[0] for p in pairs], [p[1] for p in pairs], "train")


def client_shift(partition_train: Indices, features: np.ndarray) -> np.ndarray:
    """Each client's mean first principal coordinate (in units of its std over the train split), the
    covariate-shift axis of FedAKD's partitions, for :func:`bench.report.partition_plots.plot_client_summary`."""
    pc1 = pca_coordinates(features, 1)[:, 0]
    pc1 = (pc1 - pc1.mean()) / max(pc1.std(), 1e-12)
    return np.array([pc1[p].mean() if len(p) else np.nan for p in partition_train])
