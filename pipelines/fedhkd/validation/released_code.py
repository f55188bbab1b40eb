"""FedHKD ``mode: code`` and FedAvg side by side with the authors' released code, round by round.

    uv run python pipelines/fedhkd/validation/released_code.py CHECKOUT [--seeds 0 1 2 3 4] [--rounds 20] [--jobs 4] \
        [--device cpu|cuda] [--out DIR] ...
    uv run python pipelines/fedhkd/validation/released_code.py CHECKOUT --replay [--dtype float64] [--ours-clip-twice] ...

CHECKOUT is a checkout of github.com/CityChan/Federated-Hyper-Knowledge-Distillation at commit 8a930f4
(``git clone`` it and ``git checkout 8a930f4`` outside this repository; it is only read, never copied
here). In a work folder the script

1. upscales the embedded digits (1,347 train / 450 test 8x8 grey images) to 32x32x3 by pixel repetition
   and writes them as SVHN's ``train_32x32.mat`` / ``test_32x32.mat`` (``X``: H x W x C x N uint8, ``y``:
   label 10 for the digit 0), which the released code reads with ``torchvision.datasets.SVHN``;
2. runs the released ``main.py`` (``--dataset SVHN --model shufflenet --code_len 32``, ``--alg FedAvg`` and
   ``FedHKD``) once per run seed, each in a subprocess (this script with ``--released-child``), unmodified but
   for data loading: three imports that only log or measure memory (``tensorboardX``, ``calmsize``,
   ``imageio``) get no-op stand-ins where they are not installed, torchvision's md5 check of the
   (fabricated) ``.mat`` files is skipped, the script seeds the code's random streams, which the code itself
   leaves unseeded (below), and ``gc.collect`` is a no-op unless ``--released-gc keep`` (the code calls it
   after every batch of its knowledge pass; it changes no value and takes minutes of a FedHKD run);
3. runs ours on the same arrays (registered here as ``released-digits32``) with the released code's
   partition (scheme ``fedhkd``) and the ``fedhkd_code`` row's protocol: ``mode: code``,
   ``Normalize(0.5, 0.5)`` inputs, mean of per-batch accuracies, constant lr; FedAvg with unweighted
   averaging under the same protocol;
4. checks that both sides give every client the same train and local-test index multisets, and writes
   ``runs.json`` (every run's per-round training loss, local and global accuracy) and ``report.md``
   (per-round mean ± std over seeds for both sides, the accuracies of round ``--report-round`` with a
   Welch t-test and a Mann-Whitney test of the gap, divergence counts) to ``--out``.

Seeds. The partition seed (``--partition-seed``, default 0: the authors' partition) is separate from the
run seed: every run seed trains on the same clients, and a run seed changes only the training randomness
(``--partition-seed run`` ties the two, as the code does). On the released side the partition seed is the
code's ``--seed`` (it seeds numpy's global stream before partitioning); the script then seeds torch's
global stream with the run seed (initialisation, batch order, noise; the code never seeds torch) and,
with a separate partition seed, re-seeds numpy with the run seed once the loaders are built (the code's
random client order of each round). On our side the run seed is ``seed`` and the partition seed
``partition.seed``.

Divergence is counted the same way on both sides: a run diverges at the first round whose training loss
(the mean over clients of the mean batch loss) is not finite, and that round is recorded. The released
code trains on with NaN weights (its later rows are kept in ``runs.json``; its accuracies fall to
chance); so does ours by default (``--ours-on-divergence train_on``: ``training.on_divergence: train_on``,
whose run ends as failed with its curves kept); with ``stop`` ours ends at the divergence (``Diverged``;
parameters that turn non-finite after a finite loss then stop it one round before the released code's loss
shows it). The 1000x loss guard, which the released code lacks, is off (``training.divergence_factor:
null``). Per-round means are over the runs not diverged by that round, on both sides; the divergence table
gives the final-round accuracies of the runs that trained on, flagged as such.

``--device cuda`` runs both sides on the GPU (the released code picks it up itself), ``--jobs N`` runs N
runs at once, each in its own process. ``--replay`` instead runs each method and seed on both sides from
the same random draws, in process, and compares them round by round (:func:`replay_one`).

Settings default to the size where the released code's instability shows: 10 clients, β = 0.5,
``--part 1.0``, 20 rounds, 5 local epochs, batch 32, Adam 1e-3 constant, gradient clipping 1.1,
ShuffleNetV2 with d = 32, run seeds 0-4. A partition that leaves some client fewer train or local test
images than one batch is refused up front (the released code's ``drop_last`` loader would be empty, and
it divides by zero): partition seeds 1 and 2 do so at batch 32.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import gc
import importlib
import io
import json
import math
import multiprocessing
import os
import re
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.io
import scipy.stats
import torch

import bench.algorithms.fedhkd as fedhkd_module
import bench.runner.federation as federation
from bench.algorithms import get_algorithm
from bench.config import ExperimentConfig
from bench.data import load_dataset, prepare_dataset
from bench.data.partition import partition_dataset
from bench.data.prepared import PreparedDataset, channel_stats
from bench.data.registry import DatasetSpec, get_dataset_spec, register_dataset
from bench.errors import BenchError, Diverged
from bench.report.released import repeat_command, require_checkout
from bench.experiment import build_config
from bench.fileio import write_json, write_text
from bench.engine.aggregate import weighted_average
from bench.rng import numpy_stream, torch_stream
from bench.runner.federation import run_federation

DATASET = "released-digits32"
METHODS = {"FedAvg": {"name": "fedavg", "weighting": "uniform"}, "FedHKD": {"name": "fedhkd", "mode": "code"}}
SIDES = {"released": "released code", "ours": "ours, mode: code"}
METRICS = ("global_acc", "local_acc", "train_loss")

CHILD = "--released-child"  # argv[1] of this script run as the released code's process


def released_imports(checkout: str) -> None:
    """Make the released code importable in this process, unmodified: its folder on ``sys.path``; no-op
    stand-ins for three imports that only log or measure memory (``tensorboardX``, ``calmsize``,
    ``imageio``) where they are not installed; torchvision's md5 check and download of the SVHN files
    (fabricated here) skipped."""
    sys.path.insert(0, checkout)
    writer = type("SummaryWriter", (), {"__init__": lambda self, *a, **k: None, "add_scalar": lambda self, *a, **k: None})
    for name, attrs in {"tensorboardX": {"SummaryWriter": writer}, "calmsize": {"size": float}, "imageio": {}}.items():
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name)
            for key, value in attrs.items():
                setattr(sys.modules[name], key, value)
    import torchvision.datasets

    torchvision.datasets.SVHN._check_integrity = lambda self: True  # type: ignore[method-assign]
    torchvision.datasets.SVHN.download = lambda self: None  # type: ignore[method-assign]


def released_child(checkout: str, settings: dict[str, Any]) -> None:
    """The released ``main.py`` in this process (run as ``released_code.py --released-child CHECKOUT JSON``):
    torch seeded with the run seed (the code never seeds it), each client's train and local-test indices
    written to ``settings["indices"]``, and numpy re-seeded with the run seed once the loaders are built when
    the partition seed is separate (``reseed_numpy``); with ``skip_gc``, ``gc.collect`` is a no-op (the code
    calls it after every batch of its knowledge pass and after every client: 920 calls in a 20-round run of
    FedHKD, 0.26 s of CPU each here, which frees memory and changes no value)."""
    released_imports(checkout)
    if settings["skip_gc"]:
        gc.collect = lambda generation=2: 0
    torch.set_num_threads(1)
    torch.manual_seed(settings["run_seed"])
    import sampling  # the released code's module

    made: list[list[list[int]]] = []
    original = sampling.LocalDataloaders

    def recording(*a: Any, **k: Any) -> Any:
        loaders = original(*a, **k)
        made.append([[int(i) for i in loader.dataset.idxs] for loader in loaders])
        Path(settings["indices"]).write_text(json.dumps(made))
        if len(made) == 2 and settings["reseed_numpy"] is not None:  # train and local test loaders built
            np.random.seed(settings["reseed_numpy"])
        return loaders

    sampling.LocalDataloaders = recording
    sys.argv = ["main.py", *settings["argv"]]
    runpy.run_path(str(Path(checkout) / "main.py"), run_name="__main__")


@dataclass
class Run:
    """One run's per-round curves (``round``, ``train_loss``, ``local_acc``, ``global_acc``; the released
    code's rows go on after a divergence, ours too unless it stopped there) and the round its training loss first became
    non-finite (None: it did not)."""

    side: str
    method: str
    seed: int
    curves: list[dict[str, float]] = field(default_factory=list)
    diverged_round: int | None = None
    reason: str = ""
    wall_s: float = 0.0
    error: str = ""
    partitions_equal: tuple[int, int] = (0, 0)

    def value(self, metric: str, round_index: int) -> float | None:
        """``metric`` at ``round_index`` if the run had not diverged by then (the same rule on both sides)."""
        if self.diverged_round is not None and round_index >= self.diverged_round:
            return None
        for row in self.curves:
            if row["round"] == round_index:
                return row.get(metric)
        return None


def first_non_finite(curves: list[dict[str, float]]) -> int | None:
    """The first round whose training loss is not finite (the divergence rule of both sides)."""
    return next((int(row["round"]) for row in curves if not math.isfinite(row["train_loss"])), None)


def parse_released(text: str) -> list[dict[str, float]]:
    """The per-round lines the released server prints: ``average loss``, ``average local test accuracy``,
    ``global test accuracy`` (``nan`` and ``inf`` included)."""
    losses = re.findall(r"average loss:\s+(\S+)", text)
    local = re.findall(r"average local test accuracy:\s+(\S+)", text)
    glob = re.findall(r"global test accuracy:\s+(\S+)", text)
    return [{"round": r + 1, "train_loss": float(a), "local_acc": float(b), "global_acc": float(c)}
            for r, (a, b, c) in enumerate(zip(losses, local, glob))]


def digits32(data_dir: Path) -> PreparedDataset:
    """The embedded digits as 3 x 32 x 32 uint8 images (each pixel repeated 4 x 4, grey in every channel)."""
    digits = load_dataset("digits", data_dir)

    def up(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.repeat(x.repeat(4, axis=2).repeat(4, axis=3), 3, axis=1))

    train_x, test_x = up(digits.train_x), up(digits.test_x)
    mean, std = channel_stats(train_x)
    return PreparedDataset(DATASET, train_x, digits.train_y, test_x, digits.test_y, 10, mean, std,
                           source={"origin": "the embedded digits upscaled to 32x32x3 (pipelines/fedhkd/validation/released_code.py)"})


def register_digits32() -> None:
    """Register ``released-digits32`` in this process (once; the pool's workers do it at start)."""
    try:
        get_dataset_spec(DATASET)
    except BenchError:
        digits = get_dataset_spec("digits")
        register_dataset(DatasetSpec(DATASET, 10, (3, 32, 32), digits.num_train, digits.num_test, digits32,
                                     embedded=True))


def write_svhn_mat(data: PreparedDataset, folder: Path) -> None:
    """SVHN's cropped-digits format: ``X`` H x W x C x N uint8, ``y`` N x 1 with 10 for the digit 0."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, x, y in (("train", data.train_x, data.train_y), ("test", data.test_x, data.test_y)):
        scipy.io.savemat(folder / f"{split}_32x32.mat",
                         {"X": np.transpose(x, (2, 3, 1, 0)), "y": np.where(y == 0, 10, y).astype(np.uint8)[:, None]})


def partition_seed(args: argparse.Namespace, seed: int) -> int:
    return seed if args.partition_seed == "run" else int(args.partition_seed)


def run_released(checkout: Path, method: str, seed: int, args: argparse.Namespace, work: Path) -> Run:
    """The released main.py; its per-round printed loss and accuracies."""
    run_dir = work / "released" / f"{method}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)  # it writes ./logs and ./checkpoint here
    pseed = partition_seed(args, seed)
    argv = ["--dataset", "SVHN", "--model", "shufflenet", "--code_len", "32", "--num_classes", "10",
            "--num_clients", str(args.clients), "--beta", str(args.beta), "--num_epochs", str(args.rounds),
            "--local_ep", str(args.local_epochs), "--batch_size", str(args.batch_size), "--lr", "0.001",
            "--clip_grad", "1.1", "--part", str(args.part), "--seed", str(pseed), "--alg", method]
    settings = {"run_seed": seed, "reseed_numpy": None if args.partition_seed == "run" else seed, "argv": argv,
                "indices": str(run_dir / "indices.json"), "skip_gc": args.released_gc == "skip"}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif args.device.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = args.device.split(":")[1]
    with open(run_dir / "stdout.log", "w") as out, open(run_dir / "stderr.log", "w") as err:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), CHILD, str(checkout), json.dumps(settings)],
                              cwd=run_dir, stdout=out, stderr=err, env=env)
    run = Run("released", method, seed, parse_released((run_dir / "stdout.log").read_text()))
    if done.returncode != 0:
        lines = (run_dir / "stderr.log").read_text().strip().splitlines()
        run.error = f"the released code failed ({run_dir / 'stderr.log'}): {lines[-1] if lines else 'no output'}"
    run.diverged_round = first_non_finite(run.curves)
    if run.diverged_round is not None:
        run.reason = "the training loss became NaN or inf"
    return run


def ours_config(method: str, seed: int, args: argparse.Namespace) -> ExperimentConfig:
    """Ours under the released code's protocol: its partition, ``Normalize(0.5, 0.5)``, batch-mean accuracy,
    constant lr, clipping 1.1; divergence only at a non-finite loss (the released code has no loss guard),
    trained on or stopped at (``--ours-on-divergence``)."""
    return build_config({
        "seed": seed, "device": args.device, "deterministic": args.deterministic == "on",
        "dataset": {"name": DATASET, "normalize": "half"},
        "partition": {"scheme": "fedhkd", "num_clients": args.clients, "alpha": args.beta, "part": args.part,
                      "seed": partition_seed(args, seed), "local_test_fraction": 0.0},
        "model": {"name": "fedhkd_shufflenetv2", "kwargs": {"latent_dim": 32}},
        "algorithm": METHODS[method],
        "training": {"rounds": args.rounds, "local_epochs": args.local_epochs, "batch_size": args.batch_size,
                     "drop_last": True, "optimizer": {"name": "adam", "lr": 0.001}, "grad_clip": 1.1,
                     "lr_decay": {"every": None}, "divergence_factor": None,
                     "on_divergence": args.ours_on_divergence},
        "evaluation": {"every": 1, "last": 1, "accuracy": "batches"}, "tracking": {"mlflow": False}})


def run_ours(method: str, seed: int, args: argparse.Namespace, data_dir: Path) -> Run:
    """Ours with the released code's protocol; rows collected round by round, to the last round when it trains
    on after a divergence (then diverged at its first non-finite training loss, the released side's rule),
    else until the divergence stops it."""
    config = ours_config(method, seed, args)
    run = Run("ours", method, seed)

    def record(round_index: int, row: dict[str, float]) -> None:
        run.curves.append({"round": round_index, **{m: float(row[m]) for m in METRICS if m in row}})

    try:
        result = run_federation(config, data_dir, progress=record)
        if result.diverged is not None:
            run.diverged_round = first_non_finite(run.curves) or result.diverged.round_index
            run.reason = f"{result.diverged}; trained on"
    except Diverged as exc:
        run.diverged_round, run.reason = exc.round_index, str(exc)
        run.curves.append({"round": exc.round_index, "train_loss": math.nan})
    except BenchError as exc:
        run.error = str(exc)
    return run


def run_one(task: tuple[str, str, int], checkout: Path, args: argparse.Namespace, work: Path) -> Run:
    """One run: ``(side, method, seed)`` with side ``released`` or ``ours``."""
    side, method, seed = task
    started = time.perf_counter()
    run = run_released(checkout, method, seed, args, work) if side == "released" else \
        run_ours(method, seed, args, work / "bench-data")
    run.wall_s = time.perf_counter() - started
    return run


def replay_one(task: tuple[str, int], checkout: Path, args: argparse.Namespace, work: Path) -> list[dict[str, float]]:
    """``--replay``: the released code and ours from the same random draws, in this (fresh) process.

    Ours runs first; the released code's classes then run in process with our draws in place of its own:
    the initial weights, each client's batch order (``("batches", client, round)``; FedHKD's knowledge pass
    ``("hk-batches", client, round)``; our index order of the same multiset), FedHKD's client order
    (``("client-order", round)``) and noise vectors (``("dp-noise", client, round)``); its model average sums
    in client-id order as ours does (else they differ in the last bit). Both sides in ``--dtype``. With
    ``--ours-clip-twice`` ours clips FedHKD's gradients a second time at 1.1 from round 2, as the code does (a
    factor 1.1/(‖g‖ + 1e-6) ≈ 1 − 1e-6 where the first clip acted, which code mode leaves out). With
    ``--replay-self EPS`` the released side is ours again with FedHKD's feature term scaled by (1 + EPS): the
    control, how far two runs one rounding step apart drift. Returns, per round: both training losses, both
    global models' exact test accuracy, the largest parameter difference and the largest relative
    BatchNorm-buffer difference."""
    method, seed = task
    dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
    torch.set_default_dtype(dtype)
    torch.set_num_threads(1)

    def to_tensor(images: np.ndarray, data: PreparedDataset, device: torch.device, normalize: str = "stats") -> torch.Tensor:
        # ToTensor then Normalize(0.5, 0.5), computed in the default dtype as torchvision computes it
        return (torch.from_numpy(images).to(device=device, dtype=dtype).div_(255.0) - 0.5) / 0.5

    federation.to_tensor = to_tensor
    data = load_dataset(DATASET, work / "bench-data")
    init, ours_states, ours_rows = replay_ours(method, seed, args, work / "bench-data")
    if args.replay_self is None:
        model, released_states, released_rows = replay_released(method, seed, args, checkout, work, data, init, dtype)
    else:
        _, released_states, released_rows = replay_ours(method, seed, args, work / "bench-data", args.replay_self)
        released_states = [{k.replace("classifier.", "classifier.0.", 1): v for k, v in state.items()}
                           for state in released_states]
        released_imports(str(checkout))
        from models import ShuffLeNet  # the released model, for its key names

        model = ShuffLeNet(None, code_length=32, num_classes=10)
    test_x, test_y = to_tensor(data.test_x, data, torch.device("cpu")), torch.from_numpy(data.test_y)
    names = {k for k, _ in model.named_parameters()}

    def exact(state: dict[str, torch.Tensor]) -> float:
        model.load_state_dict(state)
        model.eval()
        with torch.no_grad():
            return float((model(test_x)[1].argmax(1) == test_y).double().mean())

    rows = []
    for t, (mine, theirs) in enumerate(zip(ours_states, released_states), start=1):
        mine = {k.replace("classifier.", "classifier.0.", 1): v for k, v in mine.items()}  # the code's key names
        rows.append({"round": t, "loss_released": released_rows[t - 1]["train_loss"],
                     "loss_ours": ours_rows[t - 1]["train_loss"], "acc_released": exact(theirs), "acc_ours": exact(mine),
                     "param_diff": max(float((theirs[k] - mine[k]).abs().max()) for k in names),
                     "buffer_rel_diff": max(float(((theirs[k] - mine[k]).abs() / mine[k].abs().clamp(min=1e-3)).max())
                                            for k in mine if k not in names and mine[k].is_floating_point())})
    return rows


def replay_ours(method: str, seed: int, args: argparse.Namespace, data_dir: Path, perturb: float | None = None
                ) -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Tensor]], list[dict[str, float]]]:
    """Ours for :func:`replay_one`: the initial global state, the global state after each round, the curves;
    with ``perturb``, FedHKD's feature term scaled by (1 + perturb)."""
    algorithm = get_algorithm(METHODS[method]["name"])
    init: dict[str, torch.Tensor] = {}
    ours_states: list[dict[str, torch.Tensor]] = []
    init_server, aggregate, local_loss = algorithm.init_server, algorithm.aggregate, algorithm.local_loss
    feature_alignment = fedhkd_module.feature_alignment
    if perturb is not None:
        fedhkd_module.feature_alignment = lambda *a, **k: feature_alignment(*a, **k) * (1 + perturb)

    def recorded_init(self: Any) -> Any:
        server = init_server(self)
        init.update(copy.deepcopy(server.model.state_dict()))
        return server

    def recorded_aggregate(self: Any, round_index: int, server: Any, updates: Any) -> Any:
        metrics = aggregate(self, round_index, server, updates)
        ours_states.append(copy.deepcopy(server.model.state_dict()))
        return metrics

    algorithm.init_server, algorithm.aggregate = recorded_init, recorded_aggregate  # type: ignore[method-assign]
    clip = torch.nn.utils.clip_grad_norm_
    if args.ours_clip_twice:  # the code's FedHKD rounds >= 2 clip at --clip_grad, then at 1.1 again (§3.9 D10)
        local_loss, twice = algorithm.local_loss, [False]

        def noting_round(self: Any, step: Any, client: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            twice[0] = method == "FedHKD" and step.round >= 2
            return local_loss(self, step, client, x, y)

        def clip_twice(params: Any, max_norm: float, *a: Any, **k: Any) -> torch.Tensor:
            params = list(params)
            norm = clip(params, max_norm, *a, **k)
            if twice[0]:
                clip(params, 1.1)
            return norm

        algorithm.local_loss = noting_round  # type: ignore[method-assign]
        torch.nn.utils.clip_grad_norm_ = clip_twice
    ours_rows: list[dict[str, float]] = []
    try:
        run_federation(ours_config(method, seed, args), data_dir, progress=lambda t, row: ours_rows.append(row))
    except Diverged:
        pass
    torch.nn.utils.clip_grad_norm_ = clip
    algorithm.init_server, algorithm.aggregate, algorithm.local_loss = init_server, aggregate, local_loss  # type: ignore[method-assign]
    fedhkd_module.feature_alignment = feature_alignment
    return init, ours_states, ours_rows


def replay_released(method: str, seed: int, args: argparse.Namespace, checkout: Path, work: Path,
                    data: PreparedDataset, init: dict[str, torch.Tensor], dtype: torch.dtype
                    ) -> tuple[torch.nn.Module, list[dict[str, torch.Tensor]], list[dict[str, float]]]:
    """The released code for :func:`replay_one`, in process, drawing our draws: its global model, its global
    state after each round, its printed curves."""
    released_imports(str(checkout))
    if args.released_gc == "skip":
        gc.collect = lambda generation=2: 0
    import sampling
    from models import ShuffLeNet
    import Client.ClientFedHKD as client_hkd
    import Server.ServerFedAvg as server_avg
    import Server.ServerFedHKD as server_hkd

    run_dir = work / "replay" / f"{method}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(run_dir)  # the code reads ../data/SVHN
    write_svhn_mat(data, work / "replay" / "data" / "SVHN")
    pseed = partition_seed(args, seed)
    partition = partition_dataset(data, "fedhkd", args.clients, pseed, {"alpha": args.beta, "part": args.part})
    code_args = types.SimpleNamespace(
        num_clients=args.clients, beta=args.beta, seed=pseed, dataset="SVHN", batch_size=args.batch_size,
        part=args.part, num_epochs=args.rounds, local_ep=args.local_epochs, lr=0.001, clip_grad=1.1, code_len=32,
        num_classes=10, sampling_rate=1, upload_model=True, lr_sh_rate=10, lam=0.05, gamma=0.05, temp=0.5, std=2.0)
    get_item = sampling.LocalDataset.__getitem__
    sampling.LocalDataset.__getitem__ = lambda self, i: (lambda x, y: (x.to(dtype), y))(*get_item(self, i))
    train_set, test_set, train_map, test_map = sampling.partition_data(args.clients, args.beta, pseed, "SVHN")
    train_loaders = sampling.LocalDataloaders(train_set, train_map, args.batch_size, frac=args.part)
    test_loaders = sampling.LocalDataloaders(test_set, test_map, args.batch_size, frac=2 * args.part)
    passes = args.local_epochs + (method == "FedHKD")  # the local epochs, then FedHKD's knowledge pass

    class OurOrder(torch.utils.data.Sampler[int]):
        def __init__(self, cid: int, n: int) -> None:
            self.cid, self.n, self.calls = cid, n, 0

        def __len__(self) -> int:
            return self.n

        def __iter__(self) -> Any:
            r, e = divmod(self.calls, passes)
            self.calls += 1
            if e == 0:
                self.stream = torch_stream(seed, "batches", self.cid, r + 1)
            stream = self.stream if e < args.local_epochs else torch_stream(seed, "hk-batches", self.cid, r + 1)
            return iter(torch.randperm(self.n, generator=stream).tolist())

    for cid, loader in enumerate(train_loaders):
        if Counter(loader.dataset.idxs) != Counter(partition.train[cid].tolist()):
            raise BenchError(f"client {cid}'s train indices differ between the released code and ours")
        loader.dataset.idxs = [int(i) for i in partition.train[cid]]  # the same multiset, our order
        train_loaders[cid] = torch.utils.data.DataLoader(loader.dataset, batch_size=args.batch_size,
                                                         sampler=OurOrder(cid, len(loader.dataset)), drop_last=True)
    global_loader = torch.utils.data.DataLoader(test_set, batch_size=args.batch_size, shuffle=True)
    model = ShuffLeNet(code_args, code_length=32, num_classes=10)
    model.load_state_dict({k.replace("classifier.", "classifier.0.", 1): v for k, v in init.items()})
    round_now = [0]

    class OurClientOrder:  # stands in for the server module's numpy: np.random.choice gives our order
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        class random:
            @staticmethod
            def choice(pool: Any, m: int, replace: bool = False) -> np.ndarray:
                round_now[0] += 1
                return numpy_stream(seed, "client-order", round_now[0]).permutation(len(pool))

    server_hkd.np = OurClientOrder()
    aggregate_knowledge = client_hkd.ClientFedHKD.local_knowledge_aggregation

    def our_noise(self: Any, features: Any, soft: Any, std: float) -> Any:
        randn = torch.randn
        torch.randn = lambda n: randn(1, n, generator=torch_stream(seed, "dp-noise", self.idx, round_now[0]))[0]
        try:
            return aggregate_knowledge(self, features, soft, std)
        finally:
            torch.randn = randn

    client_hkd.ClientFedHKD.local_knowledge_aggregation = our_noise
    module = server_avg if method == "FedAvg" else server_hkd
    code_average = module.average_weights
    released_states: list[dict[str, torch.Tensor]] = []

    def in_id_order(weights: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        out = weighted_average([c.model.state_dict() for c in server.LocalModels], [1.0] * len(weights))
        out.update({k: v for k, v in code_average(weights).items() if not v.is_floating_point()})
        released_states.append(copy.deepcopy(out))
        return out

    module.average_weights = in_id_order
    server_cls = server_avg.ServerFedAvg if method == "FedAvg" else server_hkd.ServerFedHKD
    server = server_cls(code_args, model, train_loaders, test_loaders, global_loader,
                        sys.modules["tensorboardX"].SummaryWriter(), torch.device("cpu"))
    server.Create_Clints()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        server.train()
    released_rows = parse_released(printed.getvalue())
    return model, released_states, released_rows


def check_loaders(data: PreparedDataset, args: argparse.Namespace) -> None:
    """The released code divides by the number of batches of each client's ``drop_last`` loaders, so every
    client's train and local test set must hold a whole batch."""
    for pseed in sorted({partition_seed(args, s) for s in args.seeds}):
        partition = partition_dataset(data, "fedhkd", args.clients, pseed, {"alpha": args.beta, "part": args.part})
        smallest = min(len(i) for i in [*partition.train, *partition.local_test])
        if smallest < args.batch_size:
            raise BenchError(f"partition seed {pseed} gives a client {smallest} train or local test images, fewer "
                             f"than one batch of {args.batch_size}: the released code's drop_last loaders would be "
                             "empty (it divides by zero); choose another --partition-seed (or --seeds with "
                             "--partition-seed run), a larger --part or a smaller --batch-size")


def same_partitions(data: PreparedDataset, pseed: int, args: argparse.Namespace, indices: Path) -> tuple[int, int]:
    """How many of the clients' train and local-test index multisets agree, of how many."""
    if not indices.is_file():
        return 0, 2 * args.clients
    released = json.loads(indices.read_text())  # [train loaders, local test loaders]
    ours = partition_dataset(data, "fedhkd", args.clients, pseed, {"alpha": args.beta, "part": args.part})
    pairs = [*zip(released[0], ours.train), *zip(released[1], ours.local_test)]
    return sum(Counter(a) == Counter(b.tolist()) for a, b in pairs), len(pairs)


# -- the report -------------------------------------------------------------------------------------------

def mean_std(values: list[float], digits: int = 3) -> str:
    if not values:
        return "—"
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.{digits}f}{spread}"


def alive_values(runs: list[Run], metric: str, round_index: int) -> list[float]:
    return [v for r in runs if (v := r.value(metric, round_index)) is not None and math.isfinite(v)]


def per_round_table(runs: dict[tuple[str, str], list[Run]], method: str, rounds: int) -> list[str]:
    """Per-round mean ± std over the seeds not diverged by that round, both sides (``(k/n)``: k of n runs)."""
    head = ["round"] + [f"{m.replace('_', ' ')} {s}" for m in METRICS for s in SIDES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in range(1, rounds + 1):
        cells = [str(t)]
        for metric in METRICS:
            for side in SIDES:
                group = runs.get((method, side), [])
                values = alive_values(group, metric, t)
                count = "" if len(values) == len(group) else f" ({len(values)}/{len(group)})"
                cells.append(mean_std(values) + count)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def gap_test(released: list[float], ours: list[float]) -> str:
    """The released minus ours difference of means, Welch's t-test and the Mann-Whitney U test (two-sided)."""
    if len(released) < 2 or len(ours) < 2:
        return "—"
    diff = statistics.fmean(released) - statistics.fmean(ours)
    with warnings.catch_warnings():  # near-identical samples (early rounds at chance): scipy warns, p is still given
        warnings.simplefilter("ignore", RuntimeWarning)
        welch = scipy.stats.ttest_ind(released, ours, equal_var=False).pvalue
        mwu = scipy.stats.mannwhitneyu(released, ours, alternative="two-sided").pvalue
    return f"{diff:+.3f} (Welch p = {welch:.3f}, Mann-Whitney p = {mwu:.3f})"


def round_table(runs: dict[tuple[str, str], list[Run]], methods: list[str], round_index: int) -> list[str]:
    lines = [f"| method | implementation | global acc, round {round_index} (per seed) | mean ± std | "
             f"local acc, round {round_index} (per seed) | mean ± std |", "|---|---|---|---|---|---|"]
    for method in methods:
        for side, label in SIDES.items():
            group = runs.get((method, side), [])
            cells = []
            for metric in ("global_acc", "local_acc"):
                per_seed = [r.value(metric, round_index) for r in group]
                cells.append(", ".join(f"{r.seed}: {'div.' if v is None else f'{v:.3f}'}" for r, v in zip(group, per_seed)))
                cells.append(mean_std(alive_values(group, metric, round_index)))
            lines.append(f"| {method} | {label} | " + " | ".join(cells) + " |")
        gaps = [gap_test(alive_values(runs.get((method, "released"), []), metric, round_index),
                         alive_values(runs.get((method, "ours"), []), metric, round_index))
                for metric in ("global_acc", "local_acc")]
        lines.append(f"| {method} | released − ours | | {gaps[0]} | | {gaps[1]} |")
    return lines


def losses_before(run: Run, count: int = 3) -> str:
    """The training losses of the ``count`` rounds before the run's divergence: how it arrived."""
    assert run.diverged_round is not None
    rows = [row for row in run.curves if run.diverged_round - count <= row["round"] < run.diverged_round]
    return f"{run.seed}: " + " → ".join(f"{row['train_loss']:.3f}" for row in rows)


def divergence_table(runs: dict[tuple[str, str], list[Run]], methods: list[str], rounds: int) -> list[str]:
    lines = ["| method | implementation | diverged | rounds (seed: round) | training loss, 3 rounds before | final-round "
             "global / local acc, runs not diverged | the same, diverged runs that trained on |",
             "|---|---|---|---|---|---|---|"]
    for method in methods:
        for side, label in SIDES.items():
            group = runs.get((method, side), [])
            diverged = [r for r in group if r.diverged_round is not None]
            where = ", ".join(f"{r.seed}: {r.diverged_round}" for r in diverged) or "—"
            before = "; ".join(losses_before(r) for r in diverged) or "—"
            alive = [mean_std(alive_values(group, m, rounds)) for m in ("global_acc", "local_acc")]
            finals = [row for r in diverged for row in r.curves if row["round"] == rounds and "global_acc" in row]
            after = (f"{mean_std([row['global_acc'] for row in finals])} / {mean_std([row['local_acc'] for row in finals])}"
                     if finals else "— (stopped)" if diverged else "—")
            lines.append(f"| {method} | {label} | {len(diverged)}/{len(group)} | {where} | {before} | "
                         f"{alive[0]} / {alive[1]} | {after} |")
    return lines


def report(runs: dict[tuple[str, str], list[Run]], args: argparse.Namespace, agree: tuple[int, int],
           command: str) -> str:
    methods = [m for m in args.methods if any(k[0] == m for k in runs)]
    seeds = " ".join(map(str, args.seeds))
    out = [f"# FedHKD: the released code (8a930f4) against ours, round by round", "",
           f"`{command}`", "",
           f"Digits upscaled to SVHN format, ShuffleNetV2 (d = 32), {args.clients} clients, β = {args.beta}, "
           f"part {args.part}, {args.rounds} rounds × {args.local_epochs} local epochs, batch {args.batch_size}, "
           f"Adam 1e-3 constant, clipping 1.1; run seeds {seeds}, partition seed "
           f"{'= run seed' if args.partition_seed == 'run' else args.partition_seed}; device {args.device}. "
           f"Client train and local-test index multisets equal on both sides: {agree[0]}/{agree[1]}.", "",
           "A run diverges at the first round whose training loss is not finite; per-round values are over the "
           "runs not diverged by that round ((k/n) where fewer than all). The released code trains on after a "
           "divergence; ours " + ("does too (`training.on_divergence: train_on`)" if args.ours_on_divergence == "train_on"
                                  else "stops there") + ".", "",
           f"## Round {args.report_round}", "", *round_table(runs, methods, args.report_round), "",
           "## Divergence", "", *divergence_table(runs, methods, args.rounds), ""]
    for method in methods:
        out += [f"## {method}: per round, mean ± std over seeds", "", *per_round_table(runs, method, args.rounds), ""]
    failed = [r for group in runs.values() for r in group if r.error]
    if failed:
        out += ["## Failed runs", ""] + [f"- {r.side} {r.method} seed {r.seed}: {r.error}" for r in failed] + [""]
    return "\n".join(out)


def replay_report(results: dict[tuple[str, int], list[dict[str, float]]], args: argparse.Namespace,
                  command: str) -> str:
    title = ("the released code (8a930f4) and ours" if args.replay_self is None else
             f"ours and ours with its feature term scaled by (1 + {args.replay_self:g}) (in the released code's columns)")
    out = [f"# FedHKD: {title}, replayed from the same random draws", "", f"`{command}`", "",
           f"{args.clients} clients, β = {args.beta}, part {args.part}, {args.rounds} rounds × {args.local_epochs} local "
           f"epochs, batch {args.batch_size}, partition seed {args.partition_seed}; {args.dtype}"
           f"{'; ours clips twice from round 2, as the code' if args.ours_clip_twice else ''}. "
           + ("Both sides start from our initial weights and draw our batch order, client order and noise; the "
              "released model average sums in client-id order. " if args.replay_self is None else
              "Both sides are ours, from the same seed; they differ only by the perturbed feature term. ")
           + "Global accuracy: exact, on the 450 test images.", ""]
    for (method, seed), rows in sorted(results.items()):
        other = "released" if args.replay_self is None else "perturbed"
        out += [f"## {method}, seed {seed}", "", f"| round | training loss, {other} | ours | global acc, {other} | ours | "
                "max abs. parameter difference | max rel. BatchNorm-buffer difference |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r['round']} | {r['loss_released']:.10f} | {r['loss_ours']:.10f} | {r['acc_released']:.4f} | "
                f"{r['acc_ours']:.4f} | {r['param_diff']:.2e} | {r['buffer_rel_diff']:.2e} |" for r in rows]
        out.append("")
    return "\n".join(out)


def replay(args: argparse.Namespace, work: Path, out_dir: Path, command: str) -> int:
    """``--replay``: every (method, seed) in its own fresh process; replay.json and replay.md in ``out_dir``."""
    tasks = [(method, seed) for seed in args.seeds for method in args.methods]
    with multiprocessing.get_context("spawn").Pool(args.jobs, initializer=register_digits32, maxtasksperchild=1) as pool:
        rows = pool.map(functools.partial(replay_one, checkout=args.checkout.resolve(), args=args, work=work), tasks)
    results = dict(zip(tasks, rows))
    text = replay_report(results, args, command)
    write_json(out_dir / "replay.json", finite_or_text({"settings": {k: str(v) if isinstance(v, Path) else v
                                                                      for k, v in vars(args).items()},
                                                         "replays": [{"method": m, "seed": s, "rounds": r}
                                                                     for (m, s), r in results.items()]}))
    write_text(out_dir / "replay.md", text + "\n")
    print(text)
    return 0


def finite_or_text(value: Any) -> Any:
    """JSON has no NaN or inf: non-finite floats are written as the strings ``nan``, ``inf``, ``-inf``."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite_or_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_text(v) for v in value]
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="checkout of the authors' code at commit 8a930f4")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="run seeds")
    parser.add_argument("--partition-seed", default="0",
                        help="the partition's seed for every run (default 0, the authors' partition), or 'run': "
                             "each run's own seed, as the released code ties them")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--part", type=float, default=1.0, help="the code's --part: share of each client's data")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--sides", nargs="+", choices=list(SIDES), default=list(SIDES))
    parser.add_argument("--report-round", type=int,
                        help="the round whose accuracies are tabled per seed (default 4, or the last if fewer)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N, for both sides")
    parser.add_argument("--deterministic", choices=["on", "off"], default="on",
                        help="our side's deterministic kernels (off: cuDNN autotuning, as the released code runs)")
    parser.add_argument("--released-gc", choices=["skip", "keep"], default="skip",
                        help="the released code's gc.collect() calls: a no-op (default; they only free memory, and "
                             "take minutes of a FedHKD run) or kept")
    parser.add_argument("--replay", action="store_true",
                        help="run each method and seed on both sides from the same random draws and compare them "
                             "round by round (CPU), instead of independent seeds")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="--replay: both sides' dtype (float64 keeps rounding differences from growing)")
    parser.add_argument("--replay-self", type=float, metavar="EPS",
                        help="--replay: in the released code's place, ours with FedHKD's feature term scaled by "
                             "(1 + EPS), e.g. 1e-15: how far two runs one rounding step apart drift (a control)")
    parser.add_argument("--ours-clip-twice", action="store_true",
                        help="--replay: ours clips FedHKD's gradients a second time at 1.1 from round 2, as the code does")
    parser.add_argument("--ours-on-divergence", choices=["train_on", "stop"], default="train_on",
                        help="ours after a divergence: train on as the released code does (default) or stop")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process (one thread each)")
    parser.add_argument("--work", type=Path, help="folder for the data and the released code's logs (default: temp)")
    parser.add_argument("--out", type=Path, help="folder for runs.json and report.md (default: the work folder)")
    args = parser.parse_args(argv)
    if args.partition_seed != "run" and not args.partition_seed.isdigit():
        parser.error(f"--partition-seed must be a non-negative integer or 'run', got {args.partition_seed!r}")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        parser.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if args.report_round is None:
        args.report_round = min(4, args.rounds)
    if not 1 <= args.report_round <= args.rounds:
        parser.error(f"--report-round must lie in 1..--rounds ({args.rounds}), got {args.report_round}")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.replay and args.device != "cpu":
        parser.error("--replay runs the released code in process on the CPU: use --device cpu")
    if not args.replay and (args.dtype != "float32" or args.ours_clip_twice or args.replay_self is not None):
        parser.error("--dtype, --ours-clip-twice and --replay-self apply to --replay only")
    if args.replay_self is not None and args.methods != ["FedHKD"]:
        parser.error("--replay-self perturbs FedHKD's feature term: use --methods FedHKD")
    return args


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == [CHILD]:
        released_child(given[1], json.loads(given[2]))
        return 0
    args = parse_args(given)
    command = repeat_command("pipelines/fedhkd/validation/released_code.py", given, args.checkout)
    try:
        require_checkout(args.checkout, ["main.py", "Server/ServerFedHKD.py"], "FedHKD",
                         "CityChan/Federated-Hyper-Knowledge-Distillation", "8a930f4")
        if args.device != "cpu":
            import torch

            if not torch.cuda.is_available():
                raise BenchError(f"--device {args.device} but CUDA is not available here; use --device cpu")
        work = (args.work or Path(tempfile.mkdtemp(prefix="fedhkd-released-"))).resolve()
        out_dir = (args.out or work).resolve()
        data_dir = work / "bench-data"
        register_digits32()
        prepare_dataset(DATASET, data_dir)
        data = load_dataset(DATASET, data_dir)
        check_loaders(data, args)
        write_svhn_mat(data, work / "released" / "data" / "SVHN")  # the code reads ../data/SVHN/
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.replay:
        return replay(args, work, out_dir, command)
    tasks = [(side, method, seed) for seed in args.seeds for method in args.methods for side in args.sides]
    runs: dict[tuple[str, str], list[Run]] = {}
    started = time.perf_counter()

    def write_outputs() -> str:
        """runs.json and report.md of the runs finished so far (rewritten after each run, so that a run
        cut short by a time limit leaves what it finished)."""
        agree = (sum(r.partitions_equal[0] for g in runs.values() for r in g),
                 sum(r.partitions_equal[1] for g in runs.values() for r in g))
        text = report(runs, args, agree, command)
        write_json(out_dir / "runs.json", finite_or_text({
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "partitions_equal": list(agree), "wall_s": time.perf_counter() - started, "runs_planned": len(tasks),
            "runs": [asdict(r) for group in runs.values() for r in group]}))
        write_text(out_dir / "report.md", text + "\n")
        return text

    # spawned workers (CUDA-safe) register the dataset themselves; each run is single-threaded
    with multiprocessing.get_context("spawn").Pool(args.jobs, initializer=register_digits32) as pool:
        for run in pool.imap_unordered(functools.partial(run_one, checkout=args.checkout.resolve(), args=args,
                                                         work=work), tasks):
            if run.side == "released":
                run.partitions_equal = same_partitions(data, partition_seed(args, run.seed), args,
                                                       work / "released" / f"{run.method}-seed{run.seed}" / "indices.json")
            group = runs.setdefault((run.method, run.side), [])
            group.append(run)
            group.sort(key=lambda r: r.seed)
            last = run.curves[-1] if run.curves else {}
            print(f"{run.side} {run.method} seed {run.seed}: {len(run.curves)} rounds, last {last}, diverged at "
                  f"{run.diverged_round}, {run.wall_s:.0f} s{'; ' + run.error if run.error else ''}", flush=True)
            write_outputs()
    print(write_outputs())
    print(f"\nwritten: {out_dir / 'runs.json'}, {out_dir / 'report.md'}")
    return 1 if any(r.error for g in runs.values() for r in g) else 0

if __name__ == "__main__":
    sys.exit(main())
