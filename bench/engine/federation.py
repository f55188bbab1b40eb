"""The federation loop: build clients and server, run rounds, evaluate, collect curves."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.algorithms import get_algorithm
from bench.config import ExperimentConfig
from bench.data import load_dataset
from bench.data.partition import Partition, load_partition, partition_dataset
from bench.data.prepared import PreparedDataset
from bench.engine.context import Context
from bench.engine.rng import numpy_stream
from bench.engine.setup import configure_torch
from bench.engine.state import Client, ClientData
from bench.errors import BenchError

LAST_K = 5
ProgressFn = Callable[[int, dict[str, float]], None]


@dataclass
class RunResult:
    config: ExperimentConfig
    dataset_sha256: str
    partition_sha256: str
    curves: list[dict[str, float]]  # one row per round; NaN where not evaluated
    timing: dict[str, float]
    device: str
    architectures: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Final-round value, mean of the last 5 rounds and (secondary) best over rounds per metric."""
        out: dict[str, Any] = {"final": {}, f"last{LAST_K}_mean": {}, "best": {}, "best_round": {}}
        for metric in ("global_acc", "local_acc", "train_loss"):
            values = np.array([row.get(metric, math.nan) for row in self.curves], dtype=float)
            if np.isnan(values).all():
                continue
            out["final"][metric] = float(values[-1])
            out[f"last{LAST_K}_mean"][metric] = float(np.nanmean(values[-LAST_K:]))
            if metric.endswith("acc"):
                out["best"][metric] = float(np.nanmax(values))
                out["best_round"][metric] = int(np.nanargmax(values)) + 1
        return out


def partition_for(config: ExperimentConfig, data: PreparedDataset, partition_dir: str | Path | None) -> Partition:
    """The config's partition: loaded from ``partition_dir`` (and checked to match) or built."""
    p = config.partition
    carve = config.public.size if config.public.source == "carve" else 0
    if partition_dir is not None:
        built = load_partition(partition_dir)
        expected = (p.scheme, p.num_clients, p.seed, p.scheme_params, carve)
        found = (built.scheme, built.num_clients, built.seed, built.params,
                 0 if built.public is None else len(built.public))
        if expected != found:
            raise BenchError(f"partition at {partition_dir} was made with {found}, but the config asks for "
                             f"{expected}; re-create it with `bench partition` or drop --partition")
        return built
    return partition_dataset(data, p.scheme, p.num_clients, p.seed, p.scheme_params, p.local_test_fraction, carve)


def public_indices(config: ExperimentConfig, partition: Partition, num_train: int) -> np.ndarray:
    """``public.size`` training images held by no client (their train or local test), drawn with the
    partition seed so every method and run seed sees the same public set, in a fixed order: the
    partition's carved public set, or a draw from the images it leaves unused."""
    if config.public.source == "carve":
        assert partition.public is not None and len(partition.public) == config.public.size
        return partition.public
    used = np.concatenate([*partition.train, *(partition.local_test if partition.local_test_source == "train"
                                               else [])])
    pool = np.setdiff1d(np.arange(num_train), used)
    if len(pool) < config.public.size:
        raise BenchError(f"public.size={config.public.size} but only {len(pool)} training images are held by no "
                         "client; lower public.size or use a partition that leaves data unused")
    return numpy_stream(config.partition.seed, "public").choice(pool, size=config.public.size, replace=False)


def to_tensor(images: np.ndarray, data: PreparedDataset, device: torch.device) -> torch.Tensor:
    """uint8 N x C x H x W -> normalised float32 on ``device``."""
    x = torch.from_numpy(images).to(device=device, dtype=torch.float32).div_(255.0)
    mean = torch.tensor(data.mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(data.std, device=device).view(1, -1, 1, 1)
    return (x - mean) / std


def evaluation_rounds(config: ExperimentConfig) -> set[int]:
    rounds = config.training.rounds
    every = set(range(config.evaluation.every, rounds + 1, config.evaluation.every))
    return every | set(range(max(1, rounds - LAST_K + 1), rounds + 1))


def sample_clients(config: ExperimentConfig, round_index: int) -> list[int]:
    """Clients taking part in ``round_index``: all, or a seeded sample of ``fraction`` (sorted)."""
    n = config.partition.num_clients
    if config.participation.fraction >= 1.0:
        return list(range(n))
    k = max(1, round(config.participation.fraction * n))
    chosen = numpy_stream(config.seed, "participation", round_index).choice(n, size=k, replace=False)
    return sorted(int(c) for c in chosen)


def run_federation(config: ExperimentConfig, data_dir: str | Path | None = None,
                   partition_dir: str | Path | None = None, progress: ProgressFn | None = None) -> RunResult:
    """Run one experiment in this process and return its curves; writes nothing."""
    started = time.perf_counter()
    device = configure_torch(config.threads, config.deterministic, config.device)
    data = load_dataset(config.dataset.name, data_dir)
    partition = partition_for(config, data, partition_dir)
    train_x, test_x = to_tensor(data.train_x, data, device), to_tensor(data.test_x, data, device)
    train_y = torch.from_numpy(data.train_y).to(device)
    test_y = torch.from_numpy(data.test_y).to(device)
    local_x, local_y = (train_x, train_y) if partition.local_test_source == "train" else (test_x, test_y)

    ctx = Context(config, data.image_shape, data.num_classes, device,
                  public_x=train_x[torch.from_numpy(public_indices(config, partition, len(train_y)))]
                  if config.public.size else None)
    algorithm_cls = get_algorithm(config.algorithm.name)
    algorithm = algorithm_cls(algorithm_cls.Params.model_validate(config.algorithm.params), ctx)
    server = algorithm.init_server()
    clients = []
    for cid in range(partition.num_clients):
        tr = torch.from_numpy(partition.train[cid]).to(device)
        te = torch.from_numpy(partition.local_test[cid]).to(device)
        cdata = ClientData(train_x[tr], train_y[tr], local_x[te], local_y[te])
        clients.append(Client(cid, cdata, algorithm.init_client_model(cid, server)))

    eval_at = evaluation_rounds(config)
    curves: list[dict[str, float]] = []
    train_time = eval_time = 0.0
    setup_time = time.perf_counter() - started
    for t in range(1, config.training.rounds + 1):
        tick = time.perf_counter()
        selected = [clients[c] for c in sample_clients(config, t)]
        row: dict[str, float] = {"round": t, **algorithm.run_round(t, server, selected)}
        train_time += time.perf_counter() - tick
        if t in eval_at:
            tick = time.perf_counter()
            row.update(evaluate(config, ctx, algorithm, server, clients, test_x, test_y))
            eval_time += time.perf_counter() - tick
        curves.append(row)
        if progress is not None:
            progress(t, row)
    timing = {"wall_time_s": time.perf_counter() - started, "setup_time_s": setup_time,
              "train_time_s": train_time, "eval_time_s": eval_time}
    return RunResult(config, data.sha256, partition.sha256, curves, timing, str(device), ctx.architectures,
                     {"partition": partition, "algorithm": algorithm, "server": server, "clients": clients})


def evaluate(config: ExperimentConfig, ctx: Context, algorithm: Any, server: Any, clients: list[Client],
             test_x: torch.Tensor, test_y: torch.Tensor) -> dict[str, float]:
    """Global model on the global test set; each client's current model on its local test split
    (unweighted mean over clients with a non-empty local test set, specs/fedhkd.md §3.7)."""
    out: dict[str, float] = {}
    model = algorithm.global_model(server)
    if config.evaluation.global_model and model is not None:
        out["global_acc"] = ctx.accuracy(model, test_x, test_y)
    if config.evaluation.local_models:
        accs = [ctx.accuracy(c.model, c.data.test_x, c.data.test_y) for c in clients if len(c.data.test_y)]
        if accs:
            out["local_acc"] = float(np.mean(accs))
    out.update(algorithm.extra_metrics(server, clients))
    return out
