"""The federation loop: build clients and server, run rounds (:mod:`bench.runner.rounds`), evaluate on schedule,
record every per-client value and every round's communication (``upload_bytes``, ``download_bytes``: the bytes
the round's messages took, summed over its clients, counted as the rounds deliver them; :mod:`bench.engine.ledger`),
checkpoint, resume."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.algorithms import Algorithm, get_algorithm
from bench.config import ExperimentConfig
from bench.data import load_dataset
from bench.data.partition import Partition, load_partition, partition_dataset
from bench.data.prepared import PreparedDataset
from bench.engine.chunks import chunk_size
from bench.engine.context import Context
from bench.engine.evaluation import Evaluation, eval_mode
from bench.engine.ledger import Ledger
from bench.engine.setup import configure_torch
from bench.engine.state import Client, ClientData, Server
from bench.errors import BenchError, Diverged
from bench.rng import numpy_stream
from bench.runner.checkpoint import Checkpoint, Checkpoints, ClientSnapshot, Record
from bench.runner.rounds import run_round
from bench.tracking import code_version

LAST_K = 5
SUMMARY_METRICS = ("global_acc", "local_acc", "client_global_acc", "val_acc", "train_loss")
ProgressFn = Callable[[int, dict[str, float]], None]


@dataclass
class RunState:
    """The live objects of a finished run (for tests and notebooks; never written)."""

    partition: Partition
    algorithm: Algorithm
    server: Server
    clients: list[Client]


@dataclass
class RunResult:
    config: ExperimentConfig
    dataset_sha256: str
    partition_sha256: str
    curves: list[dict[str, float]]  # one row per round; NaN where not evaluated
    records: list[Record]  # every evaluated value, per client for client models
    timing: dict[str, float]
    device: str
    architectures: list[str]
    state: RunState
    diverged: Diverged | None = None  # training.on_divergence: train_on: the run's first divergence; it trained on

    def summary(self) -> dict[str, Any]:
        """Final-round value, mean of the last 5 rounds and (secondary) best over rounds per metric."""
        out: dict[str, Any] = {"final": {}, f"last{LAST_K}_mean": {}, "best": {}, "best_round": {}}
        for metric in SUMMARY_METRICS:
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
        made_for = (built.dataset or {}).get("name"), (built.dataset or {}).get("sha256")
        if made_for[1] is not None and made_for[1] != data.sha256:
            raise BenchError(f"partition at {partition_dir} was made for dataset {made_for[0]} ({made_for[1][:12]}), "
                             f"not {data.name} ({data.sha256[:12]}); re-create it with `bench partition` or drop "
                             "--partition")
        if built.local_test_fraction is not None and built.local_test_fraction != p.local_test_fraction:
            raise BenchError(f"partition at {partition_dir} was made with local_test_fraction="
                             f"{built.local_test_fraction}, but the config asks for {p.local_test_fraction}; "
                             "re-create it with `bench partition` or drop --partition")
        used = np.concatenate([*built.train, *(built.local_test if built.local_test_source == "train" else [])])
        if len(used) and used.max() >= len(data.train_y):
            raise BenchError(f"partition at {partition_dir} indexes {used.max() + 1} training images but "
                             f"{data.name} has {len(data.train_y)}; it was made for another dataset: re-create it")
        return built
    return partition_dataset(data, p.scheme, p.num_clients, p.seed, p.scheme_params, p.local_test_fraction, carve)


def public_indices(config: ExperimentConfig, partition: Partition, num_train: int) -> np.ndarray:
    """``public.size`` training images, drawn with the partition seed so every method and run seed sees the
    same public set, in a fixed order: the partition's carved public set; a draw from the images it leaves
    unused (held by no client, neither for training nor as local test); or (``overlap``) a draw from the
    images the clients train on, which they keep."""
    if config.public.source == "carve":
        assert partition.public is not None and len(partition.public) == config.public.size
        return partition.public
    held = np.concatenate(partition.train)
    if config.public.source == "overlap":
        pool = np.unique(held)
        if len(pool) < config.public.size:
            raise BenchError(f"public.size={config.public.size} but the clients hold only {len(pool)} training "
                             "images; lower public.size")
        return numpy_stream(config.partition.seed, "public").choice(pool, size=config.public.size, replace=False)
    used = np.concatenate([held, *(partition.local_test if partition.local_test_source == "train" else [])])
    pool = np.setdiff1d(np.arange(num_train), used)
    if len(pool) < config.public.size:
        raise BenchError(f"public.size={config.public.size} but only {len(pool)} training images are held by no "
                         "client; lower public.size or use a partition that leaves data unused")
    return numpy_stream(config.partition.seed, "public").choice(pool, size=config.public.size, replace=False)


def validation_split(config: ExperimentConfig, cid: int, train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(train, validation)``: ``partition.validation_fraction`` of the client's train indices held out,
    drawn with the partition seed (so every method and run seed holds out the same images)."""
    fraction = config.partition.validation_fraction
    if fraction == 0 or len(train) < 2:
        return train, train[:0]
    held = np.zeros(len(train), dtype=bool)
    count = min(len(train) - 1, max(1, round(fraction * len(train))))
    held[numpy_stream(config.partition.seed, "validation", cid).permutation(len(train))[:count]] = True
    return train[~held], train[held]


def to_tensor(images: np.ndarray, data: PreparedDataset, device: torch.device,
              normalize: str = "stats") -> torch.Tensor:
    """uint8 N x C x H x W -> float32 on ``device``, normalised per channel by the dataset's mean and std
    (``stats``) or by 0.5 and 0.5 (``half``: torchvision's ``Normalize(0.5, 0.5)``, inputs in [-1, 1]), or only
    divided by 255 (``unit``, inputs in [0, 1])."""
    x = torch.from_numpy(images).to(device=device, dtype=torch.float32).div_(255.0)
    if normalize == "unit":
        return x
    if normalize == "half":
        return (x - 0.5) / 0.5
    mean = torch.tensor(data.mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(data.std, device=device).view(1, -1, 1, 1)
    return (x - mean) / std


def evaluation_rounds(config: ExperimentConfig) -> set[int]:
    """Rounds ``every``, ``2·every``, … and the last ``evaluation.last`` rounds (the final one always)."""
    rounds, ev = config.training.rounds, config.evaluation
    return set(range(ev.every, rounds + 1, ev.every)) | set(range(max(1, rounds - ev.last + 1), rounds + 1))


def sample_clients(config: ExperimentConfig, round_index: int) -> list[int]:
    """Clients taking part in ``round_index``: all, or a sample of ``fraction`` (sorted) seeded by the run seed,
    or by ``participation.seed`` when given (the same schedule for every run seed)."""
    n, participation = config.partition.num_clients, config.participation
    if participation.fraction >= 1.0:
        return list(range(n))
    k = max(1, round(participation.fraction * n))
    seed = config.seed if participation.seed is None else participation.seed
    chosen = numpy_stream(seed, "participation", round_index).choice(n, size=k, replace=False)
    return sorted(int(c) for c in chosen)


def _split(client: Client, split: str, test_x: torch.Tensor, test_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    data = client.data
    if split == "local_all":
        return data.with_test
    return {"global_test": (test_x, test_y), "local_test": (data.test_x, data.test_y),
            "validation": (data.val_x, data.val_y)}[split]


def accuracy(ctx: Context, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, drop_last: bool,
             *key: int | str) -> float:
    """``evaluation.accuracy``: exact sample-level accuracy, or the mean of per-batch accuracies over the
    seeded batches of the stream ``("eval-batches", *key)``."""
    if ctx.config.evaluation.accuracy == "samples":
        return ctx.accuracy(model, x, y)
    return ctx.batch_mean_accuracy(model, x, y, drop_last, "eval-batches", *key)


def evaluate(ctx: Context, algorithm: Algorithm, server: Server, clients: list[Client], evaluations: list[Evaluation],
             test_x: torch.Tensor, test_y: torch.Tensor,
             round_index: int) -> tuple[dict[str, float], list[tuple[str, int | None, float]]]:
    """The declared evaluations: a curves row (client models: the unweighted mean over clients with a
    non-empty split, pipelines/fedhkd/NOTES.md §3.7) and one record per value. With ``evaluation.accuracy: batches``
    the global test set keeps its last partial batch and client splits drop it when ``training.drop_last``
    (the released FedHKD code's loaders)."""
    row: dict[str, float] = {}
    records: list[tuple[str, int | None, float]] = []
    drop_last = ctx.config.training.drop_last
    receives_global = ctx.config.evaluation.local_model == "global"
    for evaluation in evaluations:
        if evaluation.model in ("global", "method"):
            model = (algorithm.global_model(server) if evaluation.model == "global"
                     else algorithm.method_model(evaluation.metric, server, clients))
            if model is not None:
                row[evaluation.metric] = accuracy(ctx, model, test_x, test_y, False, round_index, evaluation.metric)
                records.append((evaluation.metric, None, row[evaluation.metric]))
            continue
        values = []
        for client in clients:
            x, y = _split(client, evaluation.split, test_x, test_y)
            if y is None or x is None or not len(y):
                continue
            local_split = evaluation.split in ("local_test", "local_all")
            model = algorithm.global_model(server) if receives_global and local_split else algorithm.client_model(server, client)
            if model is None:
                raise BenchError(f"evaluation.local_model: global, but {algorithm.name} has no global model; "
                                 "use local_model: own")
            values.append(accuracy(ctx, model, x, y, drop_last, round_index, evaluation.metric, client.cid))
            records.append((evaluation.metric, client.cid, values[-1]))
        if values:
            row[evaluation.metric] = float(np.mean(values))
    if ctx.config.evaluation.global_train_loss and (model := algorithm.global_model(server)) is not None:
        row["global_train_loss"] = global_loss(ctx, model, [c.data for c in clients])
        records.append(("global_train_loss", None, row["global_train_loss"]))
    extra = algorithm.extra_metrics(server, clients)
    row.update(extra)
    records += [(k, None, float(v)) for k, v in extra.items()]
    return row, records


@torch.no_grad()
def global_loss(ctx: Context, model: torch.nn.Module, data: list[ClientData]) -> float:
    """The model's mean cross-entropy over the union of the clients' train splits, in eval mode
    (``evaluation.global_train_loss``)."""
    total, count = torch.zeros((), dtype=torch.float64, device=ctx.device), 0
    with eval_mode(model):
        for client in data:
            size = chunk_size(model, client.x, ctx.config.evaluation.batch_size)
            for start in range(0, client.num_samples, size):
                _, logits = model(client.x[start:start + size])
                total += torch.nn.functional.cross_entropy(logits, client.y[start:start + size], reduction="sum")
            count += client.num_samples
    return float(total) / max(count, 1)


@torch.no_grad()
def check_parameters(round_index: int, server: Server, clients: list[Client]) -> None:
    """Divergence that no loss shows: non-finite parameters in the global model (or, without one, in
    the models trained this round)."""
    models = [("server", server.model)] if server.model is not None else [(c.cid, c.model) for c in clients]
    for who, model in models:
        if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            raise Diverged(round_index, who, "its parameters became NaN or inf")


def run_identity(config: ExperimentConfig, dataset_sha256: str, partition_sha256: str) -> dict[str, str]:
    """What a checkpoint must match to be resumed: config, data, partition and the source code."""
    return {"config_sha256": config.sha256, "dataset_sha256": dataset_sha256, "partition_sha256": partition_sha256,
            "code_sha256": code_version()["code_sha256"]}


def run_federation(config: ExperimentConfig, data_dir: str | Path | None = None,
                   partition_dir: str | Path | None = None, progress: ProgressFn | None = None,
                   checkpoints: Checkpoints | None = None, evaluating: bool = True) -> RunResult:
    """Run one experiment in this process and return its curves and records. With ``checkpoints``,
    resume from the checkpoint in its folder (if it belongs to this run) and write one when its policy
    says; nothing else is written. ``evaluating=False`` evaluates in no round, the final one included (the cost
    model's measurement, which counts training alone and prices evaluation apart).

    ``timing``: ``train_time_s``, ``eval_time_s``, ``checkpoint_time_s``, ``setup_time_s``, ``wall_time_s`` and
    ``cpu_time_s`` (this process's CPU time while it ran the run) are summed over the processes that ran the run
    (a resumed run: the earlier ones up to the checkpoint it resumed from; work lost to a kill is not counted);
    ``process_wall_time_s`` is this process's alone;
    ``processes`` counts them and ``resumed_from_round`` says where this one started."""
    started, cpu_started = time.perf_counter(), time.process_time()
    device = configure_torch(config.threads, config.deterministic, config.device)
    data = load_dataset(config.dataset.name, data_dir)
    partition = partition_for(config, data, partition_dir)
    normalize = config.dataset.normalize
    train_x, test_x = to_tensor(data.train_x, data, device, normalize), to_tensor(data.test_x, data, device, normalize)
    train_y = torch.from_numpy(data.train_y).to(device)
    test_y = torch.from_numpy(data.test_y).to(device)
    local_x, local_y = (train_x, train_y) if partition.local_test_source == "train" else (test_x, test_y)

    ctx = Context(config, data.image_shape, data.num_classes, device,
                  public_x=train_x[torch.from_numpy(public_indices(config, partition, len(train_y)))]
                  if config.public.size else None, test_x=test_x)
    algorithm_cls = get_algorithm(config.algorithm.name)
    algorithm = algorithm_cls(algorithm_cls.Params.model_validate(config.algorithm.params), ctx)
    server = algorithm.init_server()
    clients = []
    for cid in range(partition.num_clients):
        train_idx, val_idx = validation_split(config, cid, partition.train[cid])
        tr, va = torch.from_numpy(train_idx).to(device), torch.from_numpy(val_idx).to(device)
        te = torch.from_numpy(partition.local_test[cid]).to(device)
        stored = (torch.from_numpy(np.argsort(np.concatenate([train_idx, partition.local_test[cid]]), kind="stable"))
                  .to(device) if partition.local_test_source == "train" else None)
        held_out = len(val_idx) > 0
        cdata = ClientData(train_x[tr], train_y[tr], local_x[te], local_y[te],
                           val_x=train_x[va] if held_out else None, val_y=train_y[va] if held_out else None,
                           stored_order=stored)
        clients.append(Client(cid, cdata, algorithm.init_client_model(cid, server), algorithm.init_client_state(cid)))
    ctx.client_data = [c.data for c in clients]

    identity = run_identity(config, data.sha256, partition.sha256)
    curves: list[dict[str, float]] = []
    records: list[Record] = []
    timing = {"train_time_s": 0.0, "eval_time_s": 0.0, "checkpoint_time_s": 0.0, "setup_time_s": 0.0,
              "wall_time_s": 0.0, "processes": 0}
    start_round = 1
    resumed = None if checkpoints is None else checkpoints.resume(identity, device, config.training.rounds)
    if resumed is not None:
        server = resumed.server
        for client, snapshot in zip(clients, resumed.clients):
            client.model, client.optimizer, client.state = snapshot.model, snapshot.optimizer, snapshot.state
        curves, records, timing = resumed.curves, resumed.records, {**timing, **resumed.timing}
        ctx.loss_guard.reference = resumed.loss_reference
        if resumed.divergence is not None:
            ctx.loss_guard.diverged = Diverged(*resumed.divergence)
        start_round = resumed.round + 1
        timing["resumed_from_round"] = resumed.round
    before = dict(timing)  # the earlier processes' sums
    timing["processes"] += 1

    def elapsed() -> dict[str, float]:  # the sums with this process's time so far
        return {"wall_time_s": before["wall_time_s"] + time.perf_counter() - started,
                "cpu_time_s": before.get("cpu_time_s", 0.0) + time.process_time() - cpu_started,
                "process_wall_time_s": time.perf_counter() - started}

    evaluations = algorithm.evaluations()
    eval_at = evaluation_rounds(config) if evaluating else set()
    timing["setup_time_s"] = before["setup_time_s"] + time.perf_counter() - started
    for t in range(start_round, config.training.rounds + 1):
        tick = time.perf_counter()
        selected = [clients[c] for c in sample_clients(config, t)]
        ledger = Ledger()  # the round's communication
        row: dict[str, float] = {"round": t, **run_round(algorithm, t, server, selected, ledger)}
        try:
            check_parameters(t, server, selected)
        except Diverged as divergence:
            ctx.loss_guard.diverge(divergence)  # raises it unless the run trains on
        timing["train_time_s"] += time.perf_counter() - tick
        records += [(t, k, None, float(v)) for k, v in row.items() if k != "round"]
        records += [(t, k, None, v) for k, v in ledger.take().items()]  # bytes up and down (records only)
        records += [(t, metric, cid, float(v)) for metric, values in algorithm.client_records(server, selected).items()
                    for cid, v in sorted(values.items())]
        if t in eval_at:
            tick = time.perf_counter()
            values, evaluated = evaluate(ctx, algorithm, server, clients, evaluations, test_x, test_y, t)
            row.update(values)
            records += [(t, metric, cid, value) for metric, cid, value in evaluated]
            timing["eval_time_s"] += time.perf_counter() - tick
        curves.append(row)
        if checkpoints is not None and t < config.training.rounds:
            timing["checkpoint_time_s"] += checkpoints.after_round(t, lambda: Checkpoint(
                identity, t, server, [ClientSnapshot(c.model, c.optimizer, c.state) for c in clients], curves, records,
                {**timing, **elapsed()}, ctx.loss_guard.reference, divergence_of(ctx.loss_guard.diverged)))
        if progress is not None:
            progress(t, row)
    timing.update(elapsed())
    return RunResult(config, data.sha256, partition.sha256, curves, records, timing, str(device), ctx.architectures,
                     RunState(partition, algorithm, server, clients), ctx.loss_guard.diverged)


def divergence_of(diverged: Diverged | None) -> tuple[int, int | str, str] | None:
    """A divergence as a checkpoint keeps it: round, who, reason."""
    return None if diverged is None else (diverged.round_index, diverged.client, diverged.reason)
