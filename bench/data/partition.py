"""Partitions of a training set across clients, as reproducible, hashed artifacts.

A partitioner is a pure function ``(labels, num_clients, rng, params, **inputs) -> list of index
arrays`` registered under a scheme name with a pydantic model of its parameters. A scheme that
needs more than the train labels names them in ``register_partitioner(..., needs=...)`` and gets
them as keyword arguments (see :data:`INPUTS`: ``seed``, ``test_labels``, ``features``,
``groups``, ``test_groups``, ``domains``); the registration also names the figure its partitions are drawn
as (``figure``, :data:`FigureKind`; the heatmap unless it says otherwise). A scheme that builds its own per-client local test sets returns a
:class:`Split` instead of a list. :func:`make_partition` adds each client's local test split
(unless the scheme made one) and the statistics. The same ``(scheme, params, seed)`` always
yields the same arrays and so the same sha256.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bench.data.prepared import PreparedDataset
from bench.rng import numpy_stream
from bench.errors import BenchError
from bench.fileio import canonical_json, sha256_array, sha256_bytes, write_json, write_npy

Indices = list[np.ndarray]


class SchemeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Split:
    """What a scheme returns when it also builds each client's local test set."""

    train: Indices
    local_test: Indices
    local_test_source: Literal["train", "test"]  # the split the local test indices point into


PartitionFn = Callable[..., "Indices | Split"]
PartitionFnT = TypeVar("PartitionFnT", bound=PartitionFn)

# Extra inputs a scheme may ask for: the run seed, the test-split labels, the train images
# (uint8 N x C x H x W), the per-sample group ids of the train and test splits (LEAF users), and the
# per-sample domain ids of the train split (bench/data/domain_partitions.py).
INPUTS = ("seed", "test_labels", "features", "groups", "test_groups", "domains")


FigureKind = Literal["heatmap", "bubble", "summary"]
"""How a scheme's partitions are drawn (bench/report/partition_plots.py): a client x class heatmap, one bubble per
(client, class), or a per-client summary of sizes and class mix."""


@dataclass(frozen=True)
class Partitioner:
    scheme: str
    params: type[SchemeParams]
    split: PartitionFn
    description: str
    needs: tuple[str, ...] = ()
    figure: FigureKind | Callable[[dict[str, Any]], FigureKind] = "heatmap"  # the one its paper draws, or by params

    def figure_for(self, params: dict[str, Any]) -> FigureKind:
        """The figure a partition of this scheme with ``params`` is drawn as."""
        return self.figure(params) if callable(self.figure) else self.figure


_PARTITIONERS: dict[str, Partitioner] = {}


def register_partitioner(scheme: str, params: type[SchemeParams], needs: tuple[str, ...] = (),
                         figure: FigureKind | Callable[[dict[str, Any]], FigureKind] = "heatmap"
                         ) -> Callable[[PartitionFnT], PartitionFnT]:
    if unknown := set(needs) - set(INPUTS):
        raise ValueError(f"partition scheme {scheme!r} needs unknown inputs {sorted(unknown)}")

    def decorate(fn: PartitionFnT) -> PartitionFnT:
        if scheme in _PARTITIONERS:
            raise ValueError(f"partition scheme {scheme!r} registered twice")
        _PARTITIONERS[scheme] = Partitioner(scheme, params, fn, (fn.__doc__ or "").strip().splitlines()[0],
                                            tuple(needs), figure)
        return fn

    return decorate


def get_partitioner(scheme: str) -> Partitioner:
    if scheme not in _PARTITIONERS:
        raise BenchError(f"unknown partition scheme {scheme!r}; available: {', '.join(sorted(_PARTITIONERS))}")
    return _PARTITIONERS[scheme]


def partition_schemes() -> list[str]:
    return sorted(_PARTITIONERS)



# ----------------------------------------------------------------------------------------------
# Schemes


class IIDParams(SchemeParams):
    pass


@register_partitioner("iid", IIDParams)
def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: IIDParams) -> Indices:
    """Uniformly random split into near-equal parts (sizes differ by at most one)."""
    return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), num_clients)]


class ShardsParams(SchemeParams):
    shards_per_client: int = Field(2, ge=1)


@register_partitioner("shards", ShardsParams)
def shards(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: ShardsParams) -> Indices:
    """McMahan et al. 2017: sort by label, cut into ``num_clients * shards_per_client`` equal shards,
    give each client ``shards_per_client`` shards at random."""
    n_shards = num_clients * params.shards_per_client
    if n_shards > len(labels):
        raise BenchError(f"partition: {n_shards} shards need at least as many samples, got {len(labels)}")
    order = rng.permutation(len(labels))
    order = order[np.argsort(labels[order], kind="stable")]  # by label, random within a label
    pieces = np.array_split(order, n_shards)
    assignment = rng.permutation(n_shards).reshape(num_clients, params.shards_per_client)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in assignment]


class DirichletParams(SchemeParams):
    alpha: float = Field(gt=0, description="Dirichlet concentration; smaller is more heterogeneous")
    mode: Literal["per_class", "per_client"] = Field(
        "per_class", description="per_class: NIID-Bench (FedHKD, DaFKD); per_client: FedAL equal sizes")
    balance: bool = Field(True, description="per_class: a client already holding N/K samples gets no more")
    min_size: int = Field(10, ge=0, description="per_class: redraw until every client has this many")
    max_redraws: int = Field(1000, ge=1)


def dirichlet_figure(params: dict[str, Any]) -> FigureKind:
    """The per-client reading drawn as bubbles (one per client and class), the per-class reading as a heatmap."""
    return "bubble" if params.get("mode") == "per_client" else "heatmap"


@register_partitioner("dirichlet", DirichletParams, figure=dirichlet_figure)
def dirichlet(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: DirichletParams) -> Indices:
    """Dirichlet label skew, in the two readings the papers use (see ``mode``)."""
    if params.mode == "per_client":
        return _dirichlet_per_client(labels, num_clients, params.alpha, rng)
    return _dirichlet_per_class(labels, num_clients, params, rng)


def _dirichlet_per_class(labels: np.ndarray, num_clients: int, params: DirichletParams,
                         rng: np.random.Generator) -> Indices:
    """NIID-Bench / FedML "hetero" partitioner (pipelines/dafkd/NOTES.md §3.2, pipelines/fedhkd/NOTES.md §5.2): for each
    class draw p ~ Dir_K(alpha), zero the share of clients already holding N/K samples (``balance``),
    cut the shuffled class at the cumulative shares; redraw everything until every client holds at
    least ``min_size`` samples. Client sizes are unequal."""
    n, classes = len(labels), np.unique(labels)
    for _ in range(params.max_redraws):
        batches: list[list[int]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx_c = np.flatnonzero(labels == c)
            rng.shuffle(idx_c)
            p = rng.dirichlet(np.full(num_clients, params.alpha))
            if params.balance:
                p = p * np.array([len(b) < n / num_clients for b in batches])
                p = p / p.sum()
            cuts = (np.cumsum(p) * len(idx_c)).astype(int)[:-1]
            for b, part in zip(batches, np.split(idx_c, cuts)):
                b.extend(part.tolist())
        if min(len(b) for b in batches) >= params.min_size:
            return [np.sort(np.asarray(b, dtype=np.int64)) for b in batches]
    raise BenchError(f"partition: no Dirichlet draw gave every client >= {params.min_size} samples in "
                     f"{params.max_redraws} tries; lower partition.min_size or use fewer clients")


def _dirichlet_per_client(labels: np.ndarray, num_clients: int, alpha: float,
                          rng: np.random.Generator) -> Indices:
    """FedAL default (pipelines/fedal/NOTES.md §4.2): each client draws class proportions q ~ Dir_C(alpha) and
    gets m = ⌊|D_train| / N⌋ samples (N clients) drawn by those proportions without replacement; when a class runs
    out, q is renormalised over the classes left and the shortfall redrawn. Leftovers are dropped."""
    classes = np.unique(labels)
    m = len(labels) // num_clients
    pools = {int(c): list(rng.permutation(np.flatnonzero(labels == c))) for c in classes}
    clients: Indices = []
    for _ in range(num_clients):
        q = rng.dirichlet(np.full(len(classes), alpha))
        taken: list[int] = []
        need = m
        while need > 0:
            left = np.array([len(pools[int(c)]) for c in classes], dtype=float)
            share = q * (left > 0)
            if share.sum() == 0:  # the classes this client wants are empty: take from what is left
                share = left
            counts = rng.multinomial(need, share / share.sum())
            for c, k in zip(classes, counts):
                k = min(int(k), len(pools[int(c)]))
                taken += pools[int(c)][:k]
                del pools[int(c)][:k]
                need -= k
        clients.append(np.sort(np.asarray(taken, dtype=np.int64)))
    return clients


# ----------------------------------------------------------------------------------------------
# The artifact


@dataclass
class Partition:
    """Per-client train indices (into the train split) and local test indices.

    ``local_test_source`` says which split the local test indices point into: ``"train"`` when each
    client's local test set is held out of its own partition, ``"test"`` when it is drawn from the
    global test split (FedHKD's released code). ``public`` holds the unlabelled public set carved out
    of the train split before partitioning, when there is one (no client holds those images).
    """

    scheme: str
    params: dict[str, Any]
    seed: int
    num_classes: int
    train: Indices
    local_test: Indices
    local_test_source: Literal["train", "test"]
    train_counts: np.ndarray  # clients x classes
    local_test_counts: np.ndarray
    dataset: dict[str, str] | None = None  # {"name", "sha256"} of the prepared dataset, when known
    public: np.ndarray | None = None
    local_test_fraction: float | None = None  # as asked for, when known

    @property
    def num_clients(self) -> int:
        return len(self.train)

    @property
    def sha256(self) -> str:
        digest = [sha256_array(a) for a in (*self.train, *self.local_test)]
        public = {} if self.public is None else {"public": sha256_array(self.public)}
        return sha256_bytes(canonical_json({"scheme": self.scheme, "params": self.params, "seed": self.seed,
                                            "source": self.local_test_source, "arrays": digest,
                                            **public}).encode())

    def summary(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "params": self.params, "seed": self.seed, "num_clients": self.num_clients,
                "num_classes": self.num_classes, "local_test_source": self.local_test_source,
                "train_sizes": [len(a) for a in self.train], "local_test_sizes": [len(a) for a in self.local_test],
                "train_counts": self.train_counts.tolist(), "local_test_counts": self.local_test_counts.tolist(),
                "public_size": 0 if self.public is None else len(self.public),
                "sha256": self.sha256, **({"dataset": self.dataset} if self.dataset else {}),
                **({} if self.local_test_fraction is None else {"local_test_fraction": self.local_test_fraction})}

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        write_npy(folder / "train_indices.npy", np.concatenate(self.train) if self.train else np.zeros(0, np.int64))
        write_npy(folder / "local_test_indices.npy",
                  np.concatenate(self.local_test) if self.local_test else np.zeros(0, np.int64))
        if self.public is not None:
            write_npy(folder / "public_indices.npy", self.public)
        write_json(folder / "partition.json", self.summary())
        return folder


def load_partition(folder: str | Path) -> Partition:
    folder = Path(folder)
    try:
        meta = json.loads((folder / "partition.json").read_text())
        flat_train = np.load(folder / "train_indices.npy", allow_pickle=False)
        flat_test = np.load(folder / "local_test_indices.npy", allow_pickle=False)
        train = np.split(flat_train, np.cumsum(meta["train_sizes"])[:-1])
        local_test = np.split(flat_test, np.cumsum(meta["local_test_sizes"])[:-1])
        part = Partition(meta["scheme"], meta["params"], meta["seed"], meta["num_classes"], train, local_test,
                         meta["local_test_source"], np.asarray(meta["train_counts"]),
                         np.asarray(meta["local_test_counts"]), meta.get("dataset"),
                         np.load(folder / "public_indices.npy", allow_pickle=False)
                         if meta.get("public_size") else None, meta.get("local_test_fraction"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BenchError(f"partition at {folder} is missing or unreadable ({exc}); create it with "
                         "`bench partition`") from None
    if part.sha256 != meta["sha256"]:
        raise BenchError(f"partition at {folder} does not match its sha256 (corrupted); create it again "
                         "with `bench partition`")
    return part


def class_counts(labels: np.ndarray, parts: Indices, num_classes: int) -> np.ndarray:
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts]) if parts else \
        np.zeros((0, num_classes), np.int64)


def holdout_local_test(labels: np.ndarray, train: Indices, fraction: float,
                       rng: np.random.Generator) -> tuple[Indices, Indices]:
    """Hold ``fraction`` of each client's samples out as its local test set, stratified by class
    (each class contributes ``round(fraction * count)`` samples), so train and local test share the
    client's label distribution."""
    kept, held = [], []
    for part in train:
        out: list[np.ndarray] = []
        for c in np.unique(labels[part]):
            members = rng.permutation(part[labels[part] == c])
            out.append(members[: int(round(fraction * len(members)))])
        held_part = np.sort(np.concatenate(out)) if out else np.zeros(0, np.int64)
        kept.append(np.setdiff1d(part, held_part))
        held.append(held_part)
    return kept, held


def make_partition(labels: np.ndarray, num_classes: int, scheme: str, num_clients: int, seed: int,
                   params: dict[str, Any] | None = None, local_test_fraction: float = 0.0,
                   **inputs: Any) -> Partition:
    """Split ``labels`` for ``num_clients`` with ``scheme``; hold out ``local_test_fraction`` per client
    unless the scheme builds its own local test sets. ``inputs`` supplies what the scheme needs
    (:data:`INPUTS`)."""
    partitioner = get_partitioner(scheme)
    checked = partitioner.params.model_validate(params or {})
    if num_clients > len(labels):
        raise BenchError(f"partition.num_clients={num_clients} exceeds the {len(labels)} training samples")
    inputs = {"seed": seed, **inputs}
    if missing := [k for k in partitioner.needs if inputs.get(k) is None]:
        raise BenchError(f"partition scheme {scheme!r} needs {', '.join(missing)}; use a dataset that provides "
                         "them (build_partition passes everything a prepared dataset has)")
    out = partitioner.split(np.asarray(labels), num_clients, numpy_stream(seed, "partition", scheme), checked,
                            **{k: inputs[k] for k in partitioner.needs})
    if isinstance(out, Split):
        if local_test_fraction:
            raise BenchError(f"partition scheme {scheme!r} builds its own local test sets; set "
                             "local_test_fraction to 0")
        kept = [np.asarray(p, dtype=np.int64) for p in out.train]
        held = [np.asarray(p, dtype=np.int64) for p in out.local_test]
        source = out.local_test_source
    else:
        train = [np.asarray(p, dtype=np.int64) for p in out]
        kept, held = holdout_local_test(labels, train, local_test_fraction, numpy_stream(seed, "local-test"))
        source = "train"
    test_side = labels if source == "train" else inputs.get("test_labels")
    if test_side is None:
        raise BenchError(f"partition scheme {scheme!r} draws local tests from the test split; pass test_labels")
    return Partition(scheme, checked.model_dump(mode="json"), seed, num_classes, kept, held, source,
                     class_counts(labels, kept, num_classes), class_counts(np.asarray(test_side), held, num_classes))


def partition_dataset(data: PreparedDataset, scheme: str, num_clients: int, seed: int,
                      params: dict[str, Any] | None = None, local_test_fraction: float = 0.0,
                      public_size: int = 0) -> Partition:
    """Partition a loaded prepared dataset: every input a scheme may need (test labels, images, LEAF
    groups, domains) comes from the dataset itself. With ``public_size``, that many training images are first
    drawn (stream ``(seed, "public")``) as the unlabelled public set and the rest are partitioned."""
    n = len(data.train_y)
    if public_size >= n:
        raise BenchError(f"public.size={public_size} leaves no training images for the clients (of {n})")
    public = numpy_stream(seed, "public").choice(n, size=public_size, replace=False) if public_size else None
    keep = np.setdiff1d(np.arange(n), public) if public is not None else slice(None)
    groups = None if data.train_group is None else data.train_group[keep]
    domains = None if data.train_domain is None else data.train_domain[keep]
    part = make_partition(data.train_y[keep], data.num_classes, scheme, num_clients, seed, params,
                          local_test_fraction, test_labels=data.test_y, features=data.train_x[keep], groups=groups,
                          test_groups=data.test_group, domains=domains)
    if isinstance(keep, np.ndarray):  # public drawn: indices of the kept subset -> indices of the train split
        part.train = [keep[p] for p in part.train]
        if part.local_test_source == "train":
            part.local_test = [keep[p] for p in part.local_test]
        part.public = public
    part.dataset = {"name": data.name, "sha256": data.sha256}
    part.local_test_fraction = local_test_fraction
    return part


def build_partition(dataset_name: str, scheme: str, num_clients: int, seed: int,
                    params: dict[str, Any] | None = None, local_test_fraction: float = 0.0,
                    data_dir: str | Path | None = None) -> Partition:
    """Partition the prepared dataset ``dataset_name`` (loaded from ``data_dir``)."""
    from bench.data.registry import load_dataset

    return partition_dataset(load_dataset(dataset_name, data_dir), scheme, num_clients, seed, params,
                             local_test_fraction)
