"""FedHKD ``mode: code`` side by side with the authors' released code, on the same data and partitions.

    uv run python pipelines/fedhkd/validation/released_code.py CHECKOUT [--seeds 0 1 2] [--rounds 20] [--part 1.0] ...

CHECKOUT is a checkout of github.com/CityChan/Federated-Hyper-Knowledge-Distillation at commit 8a930f4
(for example ``git clone`` it and ``git checkout 8a930f4`` outside this repository; it is only read,
never copied here). In a temporary folder the script

1. upscales the embedded digits (1,347 train / 450 test 8x8 grey images) to 32x32x3 by pixel repetition
   and writes them as SVHN's ``train_32x32.mat`` / ``test_32x32.mat`` (``X``: H x W x C x N uint8, ``y``:
   label 10 for the digit 0), which the released code reads with ``torchvision.datasets.SVHN``;
2. runs the released ``main.py`` (``--dataset SVHN --model shufflenet --code_len 32``, FedAvg and FedHKD)
   once per seed in a subprocess of this interpreter, with ``torch.manual_seed(seed)`` first (the code
   seeds only numpy, from ``--seed``). Three imports of the code that only log or measure memory
   (``tensorboardX``, ``calmsize``, ``imageio``) are replaced by no-op stand-ins when they are not
   installed, and torchvision's md5 check of the ``.mat`` files (fabricated here) is skipped;
3. runs ours on the same arrays (registered in this process as ``released-digits32``) with the released
   code's partition (scheme ``fedhkd``, partition seed = the seed) and the ``fedhkd_code`` row's config
   (``mode: code``, ``Normalize(0.5, 0.5)``, mean of per-batch accuracies, constant lr), and FedAvg with
   unweighted averaging under the same protocol;
4. checks that both sides' clients hold the same train and local-test index multisets, and prints the
   round-``rounds`` accuracies (mean ± std over seeds) with the number of seeds whose training loss went
   NaN (released code: it trains on and its accuracies fall to chance) or that diverged (ours: the run
   stops; its accuracies are not counted).

Settings default to 10 clients, β = 0.5, ``--part 1.0``, 20 rounds, 5 local epochs, batch 32, Adam 1e-3
constant, gradient clipping 1.1, ShuffleNetV2 with d = 32, seeds 0, 3 and 4: seeds 1 and 2 leave some
client fewer local test images than one batch, which the released code cannot run (its ``drop_last``
loader is empty and it divides by zero); the script refuses such settings up front.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import math
import re
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.io

from bench.data import load_dataset, prepare_dataset
from bench.data.partition import partition_dataset
from bench.data.prepared import PreparedDataset, channel_stats
from bench.data.registry import DatasetSpec, register_dataset
from bench.errors import BenchError, Diverged
from bench.experiment import build_config
from bench.runner.federation import run_federation

DATASET = "released-digits32"
METHODS = {"FedAvg": {"name": "fedavg", "weighting": "uniform"}, "FedHKD": {"name": "fedhkd", "mode": "code"}}

# Runs the released main.py in a fresh interpreter: argv[1] = checkout, argv[2] = JSON settings.
RELEASED = r'''
import json, runpy, sys, types
checkout, settings = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, checkout)
for name, attrs in {"tensorboardX": {"SummaryWriter": type("SummaryWriter", (), {
                        "__init__": lambda self, *a, **k: None, "add_scalar": lambda self, *a, **k: None})},
                    "calmsize": {"size": float}, "imageio": {}}.items():
    try:
        __import__(name)
    except ImportError:
        sys.modules[name] = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(sys.modules[name], key, value)
import torch, torchvision.datasets
torch.set_num_threads(1)
torchvision.datasets.SVHN._check_integrity = lambda self: True  # fabricated files: no published md5
torchvision.datasets.SVHN.download = lambda self: None
torch.manual_seed(settings["seed"])
import sampling
made = []
original = sampling.LocalDataloaders
def recording(*args, **kwargs):
    loaders = original(*args, **kwargs)
    made.append([[int(i) for i in loader.dataset.idxs] for loader in loaders])
    with open(settings["indices"], "w") as handle:
        json.dump(made, handle)
    return loaders
sampling.LocalDataloaders = recording
sys.argv = ["main.py", *settings["argv"]]
runpy.run_path(checkout + "/main.py", run_name="__main__")
'''


@dataclass
class Outcome:
    global_acc: float
    local_acc: float
    nan: bool  # released: the loss went NaN; ours: the run diverged (no accuracies)


def digits32(data_dir: Path) -> PreparedDataset:
    """The embedded digits as 3 x 32 x 32 uint8 images (each pixel repeated 4 x 4, grey in every channel)."""
    digits = load_dataset("digits", data_dir)

    def up(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.repeat(x.repeat(4, axis=2).repeat(4, axis=3), 3, axis=1))

    train_x, test_x = up(digits.train_x), up(digits.test_x)
    mean, std = channel_stats(train_x)
    return PreparedDataset(DATASET, train_x, digits.train_y, test_x, digits.test_y, 10, mean, std,
                           source={"origin": "the embedded digits upscaled to 32x32x3 "
                                             "(pipelines/fedhkd/validation/released_code.py)"})


def write_svhn_mat(data: PreparedDataset, folder: Path) -> None:
    """SVHN's cropped-digits format: ``X`` H x W x C x N uint8, ``y`` N x 1 with 10 for the digit 0."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, x, y in (("train", data.train_x, data.train_y), ("test", data.test_x, data.test_y)):
        scipy.io.savemat(folder / f"{split}_32x32.mat",
                         {"X": np.transpose(x, (2, 3, 1, 0)), "y": np.where(y == 0, 10, y).astype(np.uint8)[:, None]})


def run_released(checkout: Path, method: str, seed: int, args: argparse.Namespace, work: Path) -> Outcome:
    """The released main.py; its round-``rounds`` printed accuracies."""
    run_dir = work / "released" / f"{method}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)  # it writes ./logs and ./checkpoint here
    argv = ["--dataset", "SVHN", "--model", "shufflenet", "--code_len", "32", "--num_classes", "10",
            "--num_clients", str(args.clients), "--beta", str(args.beta), "--num_epochs", str(args.rounds),
            "--local_ep", str(args.local_epochs), "--batch_size", str(args.batch_size), "--lr", "0.001",
            "--clip_grad", "1.1", "--part", str(args.part), "--seed", str(seed), "--alg", method]
    settings = {"seed": seed, "argv": argv, "indices": str(run_dir / "indices.json")}
    with open(run_dir / "stdout.log", "w") as log:
        done = subprocess.run([sys.executable, "-c", RELEASED, str(checkout), json.dumps(settings)], cwd=run_dir,
                              stdout=log, stderr=subprocess.STDOUT)
    text = (run_dir / "stdout.log").read_text()
    if done.returncode != 0:
        raise BenchError(f"the released code failed ({run_dir / 'stdout.log'}): "
                         f"{text.strip().splitlines()[-1] if text.strip() else 'no output'}")
    local = re.findall(r"average local test accuracy: (\S+)", text)
    glob = re.findall(r"global test accuracy:\s+(\S+)", text)
    losses = re.findall(r"average loss:\s+(\S+)", text)
    return Outcome(float(glob[-1]), float(local[-1]), any(math.isnan(float(v)) for v in losses))


def run_ours(method: str, seed: int, args: argparse.Namespace, data_dir: Path) -> Outcome:
    config = build_config({
        "seed": seed, "dataset": {"name": DATASET, "normalize": "half"},
        "partition": {"scheme": "fedhkd", "num_clients": args.clients, "alpha": args.beta, "part": args.part,
                      "seed": seed, "local_test_fraction": 0.0},
        "model": {"name": "fedhkd_shufflenetv2", "kwargs": {"latent_dim": 32}},
        "algorithm": METHODS[method],
        "training": {"rounds": args.rounds, "local_epochs": args.local_epochs, "batch_size": args.batch_size,
                     "drop_last": True, "optimizer": {"name": "adam", "lr": 0.001}, "grad_clip": 1.1},
        "evaluation": {"every": 1, "last": 1, "accuracy": "batches"}, "tracking": {"mlflow": False}})
    try:
        final = run_federation(config, data_dir).curves[-1]
    except Diverged:
        return Outcome(math.nan, math.nan, True)
    return Outcome(final["global_acc"], final["local_acc"], False)


def run_one(task: tuple[str, str, int], checkout: Path, args: argparse.Namespace, work: Path) -> Outcome:
    """One run: ``(side, method, seed)`` with side ``released`` or ``ours``."""
    side, method, seed = task
    return run_released(checkout, method, seed, args, work) if side == "released" else \
        run_ours(method, seed, args, work / "bench-data")


def check_loaders(data: PreparedDataset, args: argparse.Namespace) -> None:
    """The released code divides by the number of batches of each client's ``drop_last`` loaders, so every
    client's train and local test set must hold a whole batch."""
    for seed in args.seeds:
        partition = partition_dataset(data, "fedhkd", args.clients, seed, {"alpha": args.beta, "part": args.part})
        smallest = min(len(i) for i in [*partition.train, *partition.local_test])
        if smallest < args.batch_size:
            raise BenchError(f"seed {seed} gives a client {smallest} train or local test images, fewer than one batch "
                             f"of {args.batch_size}: the released code's drop_last loaders would be empty (it divides "
                             "by zero); choose other --seeds, a larger --part or a smaller --batch-size")


def same_partitions(data: PreparedDataset, seed: int, args: argparse.Namespace, indices: Path) -> tuple[int, int]:
    """How many of the clients' train and local-test index multisets agree, of how many."""
    released = json.loads(indices.read_text())  # [train loaders, local test loaders]
    ours = partition_dataset(data, "fedhkd", args.clients, seed, {"alpha": args.beta, "part": args.part})
    pairs = [*zip(released[0], ours.train), *zip(released[1], ours.local_test)]
    return sum(Counter(a) == Counter(b.tolist()) for a, b in pairs), len(pairs)


def cell(outcomes: list[Outcome], metric: str) -> str:
    values = [getattr(o, metric) for o in outcomes if not math.isnan(getattr(o, metric))]
    if not values:
        return "—"
    spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.3f}{spread}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="checkout of the authors' code at commit 8a930f4")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 3, 4])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--part", type=float, default=1.0, help="the code's --part: share of each client's data")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each single-threaded)")
    parser.add_argument("--work", type=Path, help="folder for the data and the released code's logs (default: temp)")
    args = parser.parse_args(argv)
    try:
        if not (args.checkout / "main.py").is_file() or not (args.checkout / "Server" / "ServerFedHKD.py").is_file():
            raise BenchError(f"{args.checkout} is not a checkout of the released FedHKD code (no main.py and "
                             "Server/ServerFedHKD.py); clone github.com/CityChan/Federated-Hyper-Knowledge-Distillation "
                             "and check out 8a930f4")
        work = args.work or Path(tempfile.mkdtemp(prefix="fedhkd-released-"))
        data_dir = work / "bench-data"
        data = digits32(data_dir)
        register_dataset(DatasetSpec(DATASET, 10, (3, 32, 32), len(data.train_y), len(data.test_y), lambda root: data))
        prepare_dataset(DATASET, data_dir)
        check_loaders(data, args)
        write_svhn_mat(data, work / "released" / "data" / "SVHN")  # the code reads ../data/SVHN/
        tasks = [(side, method, seed) for method in args.methods for seed in args.seeds for side in ("released", "ours")]
        # forked workers inherit the dataset registered above; each run is single-threaded
        outcomes: dict[tuple[str, str, int], Outcome] = {}
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            pending = [(t, pool.apply_async(run_one, (t, args.checkout.resolve(), args, work))) for t in tasks]
            for task, result in pending:
                outcomes[task] = result.get()
                print(f"{' '.join(map(str, task))}: {outcomes[task]}", flush=True)
        results: dict[tuple[str, str], list[Outcome]] = {}
        agree, total = 0, 0
        for method in args.methods:
            for seed in args.seeds:
                released, ours = outcomes["released", method, seed], outcomes["ours", method, seed]
                results.setdefault((method, "released code"), []).append(released)
                results.setdefault((method, "ours, mode: code"), []).append(ours)
                a, n = same_partitions(data, seed, args, work / "released" / f"{method}-seed{seed}" / "indices.json")
                agree, total = agree + a, total + n
                print(f"{method} seed {seed}: released global {released.global_acc:.4f} local {released.local_acc:.4f}"
                      f"{' (NaN loss)' if released.nan else ''}; ours global {ours.global_acc:.4f} local "
                      f"{ours.local_acc:.4f}{' (diverged)' if ours.nan else ''}; partitions {a}/{n} equal")
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"\n{args.clients} clients, beta {args.beta}, part {args.part}, {args.rounds} rounds x {args.local_epochs} "
          f"local epochs, batch {args.batch_size}, seeds {args.seeds}; client index multisets equal: {agree}/{total}\n")
    print(f"| method | implementation | global acc, round {args.rounds} | local acc, round {args.rounds} | "
          "NaN / diverged seeds |")
    print("|---|---|---|---|---|")
    for (method, side), outcomes in results.items():
        print(f"| {method} | {side} | {cell(outcomes, 'global_acc')} | {cell(outcomes, 'local_acc')} | "
              f"{sum(o.nan for o in outcomes)}/{len(outcomes)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
