"""The four papers' own partitions, beyond the generic ``iid`` / ``shards`` / ``dirichlet`` schemes.

* FedAL (specs/fedal.md §4.2): ``dirichlet`` with ``mode=per_client`` (equal sizes) or ``per_class``;
  its unlabelled public set (§4.3, A12) is :func:`public_split`.
* FedHKD (specs/fedhkd.md §5.2): scheme ``fedhkd``, the released-code procedure.
* DaFKD (specs/dafkd.md §3.2): scheme ``dafkd``.
* FedAKD (specs/fedakd.md §2.2-2.5): scheme ``fedakd`` (POW, BCS, ICS(C); Algorithm 2 or ``devide.py``).
* LEAF CelebA (specs/fedal.md §4.1): scheme ``leaf``, one client per user.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from bench.data.partition import (
    DirichletParams,
    Indices,
    SchemeParams,
    Split,
    _dirichlet_per_class,
    register_partitioner,
)
from bench.rng import numpy_stream
from bench.errors import BenchError

# ----------------------------------------------------------------------------------------------
# FedAL public set


def public_split(num_samples: int, size: int, seed: int, disjoint: bool = False,
                 candidates: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """FedAL's unlabelled public set 𝒫 (specs/fedal.md §4.3, §2.6 A12): ``size`` train-split
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


# ----------------------------------------------------------------------------------------------
# FedHKD


class FedHKDParams(SchemeParams):
    alpha: float = Field(gt=0, description="Dirichlet concentration β")
    part: float | None = Field(None, gt=0, description="subsampling fraction; default num_clients / 100")
    replace: bool = Field(True, description="subsample with replacement (the released code)")
    min_size: int = Field(10, ge=0, description="redraw until every train partition has this many")


@register_partitioner("fedhkd", FedHKDParams, needs=("seed", "test_labels"))
def fedhkd(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: FedHKDParams, *,
           seed: int, test_labels: np.ndarray) -> Split:
    """FedHKD's released-code partition (specs/fedhkd.md §5.2): per-class Dirichlet shared by train and test.

    One ``Dir(β)`` draw per class cuts both the shuffled train class and the (unshuffled) test
    class, each with its own balance cap; redrawn until every train part has ``min_size``; each
    train part is shuffled, then subsampled to ``int(part·n)`` and each test part to
    ``int(2·part·n)``, with replacement. Uses numpy's legacy stream ``np.random.seed(seed)``
    through a private ``RandomState`` (never the global one) so the spec's seed-0 vectors hold.
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


# ----------------------------------------------------------------------------------------------
# DaFKD


class DaFKDParams(SchemeParams):
    alpha: float = Field(gt=0, description="Dirichlet concentration α")
    min_size: int = Field(100, ge=0, description="resample until every client has this many (min_require)")


@register_partitioner("dafkd", DaFKDParams)
def dafkd(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: DaFKDParams) -> Indices:
    """DaFKD's partition (specs/dafkd.md §3.2): the NIID-Bench per-class Dirichlet with the balance cap
    over all training samples, resampled until every client holds ≥ 100; evaluation uses the
    full test set, so no local test split."""
    return _dirichlet_per_class(labels, num_clients, DirichletParams(alpha=params.alpha, min_size=params.min_size),
                                rng)


# ----------------------------------------------------------------------------------------------
# FedAKD


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
        "share of the train split partitioned (Algorithm 2 line 3 and devide.py: half)"))
    alpha: float = Field(1.0, gt=0, description="DIR: Dirichlet concentration α")
    cla_size: int = Field(600, ge=1, description="CLA: samples per client (CFFL/CGSV's 600 [I])")


PCA_COMPONENTS = 100  # devide.py: PCA(n_components=100, random_state=42) on pixel/255
CODE_SPLIT_STATE = 42  # train_test_split(test_size=0.2, random_state=42, shuffle=True)


def power_law_counts(total: int, num_clients: int) -> np.ndarray:
    """n_k = ⌊total·(1/k)/Z⌋, Z = Σ 1/k, remainder +1 from client 1 on (specs/fedakd.md §2.2-2.4)."""
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
    """FedAKD Algorithm 2 (specs/fedakd.md §2.3): for each client k draw δ_k = √C·L·u_k (Σ = LLᵀ,
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
    """FedAKD's per-client split (specs/fedakd.md §2.5): code form is sklearn's
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
    """FedAKD Appendix D "CLA" (specs/fedakd.md §2.7 [I]): client k (1-based) gets ``size`` samples of the
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
    """FedAKD Appendix D "DIR(α)" (specs/fedakd.md §2.7): per class c, p_c ~ Dir(α·1_K), client k gets the
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
    (before their local splits), the shifts δ_k and Σ (partition sanity, specs/fedakd.md §8 R0)."""
    coords = pca_coordinates(features)[:, : params.pca_dims]
    return covariate_shift_sample(coords, client_sizes(len(features), num_clients, params), params.shift,
                                  numpy_stream(seed, "partition", "fedakd"))


@register_partitioner("fedakd", FedAKDParams, needs=("features",))
def fedakd(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: FedAKDParams, *,
           features: np.ndarray) -> Split:
    """FedAKD's POW / BCS / ICS(C) covariate-shift partitions of half the train split (specs/fedakd.md §2.2-2.5),
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


# ----------------------------------------------------------------------------------------------
# LEAF


class LEAFParams(SchemeParams):
    select: Literal["random", "largest"] = Field(
        "random", description="which users become the clients: a seeded random choice, or the largest")


@register_partitioner("leaf", LEAFParams, needs=("groups", "test_groups"))
def leaf(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: LEAFParams, *,
         groups: np.ndarray, test_groups: np.ndarray) -> Split:
    """LEAF's natural partition (specs/fedal.md §4.1): one client per LEAF user (group id).

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


def client_shift(partition_train: Indices, features: np.ndarray) -> np.ndarray:
    """Each client's mean first principal coordinate (in units of its std over the train split), the
    covariate-shift axis of FedAKD's partitions, for :func:`bench.report.partition_plots.plot_client_summary`."""
    pc1 = pca_coordinates(features, 1)[:, 0]
    pc1 = (pc1 - pc1.mean()) / max(pc1.std(), 1e-12)
    return np.array([pc1[p].mean() if len(p) else np.nan for p in partition_train])
