"""Measurements of the ``domaindigits`` datasets (``docs/datasets.md`` quotes them), and its figure.

* ``fedavg``: FedAvg on an iid split of ``domaindigits28`` or ``domaindigits32`` with a proxy's model and
  training as the proxy's params file resolves them today (its FedAvg row on one of its settings; only the
  dataset and the partition replaced: ``iid``, the proxy's client count, 20 % local test): the global
  model's test accuracy after the proxy's rounds (evaluated once, at the end), and the training seconds
  per round and per thousand trained images (one thread): wall clock, which other processes on the
  machine slow down (the load average is printed with it), and the process's CPU seconds, which they
  slow down less (setup and evaluation included). ``--train N`` uses the first N training images (a prefix
  variant, ``register_domain_digits``); ``--rounds R`` runs R rounds instead of the proxy's; ``--every K``
  adds the accuracy every K rounds (the curve; evaluation time is not in the training seconds); ``-S
  key=value`` overrides the config (diagnostics only: then it is no longer the proxy's training).
* ``domains``: how distinguishable the domains are: a small CNN (the ``cnn`` model) trained to tell an
  image's domain, on the train split, scored on the test split (chance: 1 / domains).
* ``features``: a diagnostic of a training, not of the data: the ``cnn`` trained centrally for a few
  steps from several initialisations, its test accuracy and the share of its features that died.
* ``figure``: samples per domain of both variants, ``docs/figures/domaindigits.png``.

Run (each prints one JSON line per measurement):

    uv run python benchmarks/domaindigits.py fedavg --proxy default --shape 32
    uv run python benchmarks/domaindigits.py domains --shape 28
    uv run python benchmarks/domaindigits.py figure
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.config import ExperimentConfig, apply_overrides  # noqa: E402
from bench.data import dataset_names, get_dataset_spec, load_dataset  # noqa: E402
from bench.data.domaindigits import DOMAINS, register_domain_digits  # noqa: E402
from bench.experiment import build_config  # noqa: E402
from bench.rng import numpy_stream, seeded_torch  # noqa: E402

# proxy -> (params file, the setting whose FedAvg run is measured, model overrides)
PROXIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "default": ("params.yaml", "iid", {}),
    "fedal-cnn": ("pipelines/fedal/params.yaml", "hom-a2", {"name": "cnn", "kwargs": {}}),
    "fedal-mlp": ("pipelines/fedal/params.yaml", "hom-a2", {"name": "mlp", "kwargs": {}}),
    "dafkd": ("pipelines/dafkd/params.yaml", "a1", {}),
    "fedakd": ("pipelines/fedakd/params.yaml", "ics5", {}),
    "fedhkd": ("pipelines/fedhkd/params.yaml", "m10", {}),
}
SHAPES = {"28": ("domaindigits28", (1, 28, 28)), "32": ("domaindigits32", (3, 32, 32)), "8": ("domaindigits8", (1, 8, 8))}


def dataset_name(shape: str, num_train: int | None) -> str:
    """The registered variant of ``shape``, or a prefix variant of ``num_train`` training images."""
    name, dims = SHAPES[shape]
    if num_train is None:
        return name
    variant = f"{name}-n{num_train}"
    if variant not in dataset_names():
        register_domain_digits(variant, dims, num_train, get_dataset_spec(name).num_test)
    return variant


def proxy_config(proxy: str, dataset: str, rounds: int | None, every: int | None = None,
                 overrides: list[str] | None = None) -> ExperimentConfig:
    """The proxy's FedAvg config with the dataset and an iid partition swapped in; the global model evaluated
    at the end (and every ``every`` rounds); then ``overrides`` (``key.path=value``, as ``bench run -S``)."""
    from bench.suites import load_suite

    params_file, setting, model = PROXIES[proxy]
    config = load_suite(ROOT / params_file).config("fedavg", setting, 0)
    raw = config.model_dump(mode="json", exclude_none=True)
    raw["dataset"]["name"] = dataset
    raw["partition"] = {"scheme": "iid", "num_clients": config.partition.num_clients, "local_test_fraction": 0.2,
                        "seed": 0}
    raw["public"] = {"size": 0}
    raw["tracking"] = {"mlflow": False}
    raw["device"] = "cpu"
    raw["model"] = {**raw["model"], **model, "candidates": []}
    if rounds is not None:
        raw["training"]["rounds"] = rounds
    raw["evaluation"] = {**raw.get("evaluation", {}), "every": every or raw["training"]["rounds"], "last": 1}
    return build_config(apply_overrides(raw, overrides or []))


def trained_images(config: ExperimentConfig, sizes: list[int]) -> int:
    """Images the round's participating clients train on (every client's local epochs or steps)."""
    t = config.training
    clients = max(1, int(round(config.participation.fraction * len(sizes))))
    if t.local_steps is not None:
        return t.local_steps * t.batch_size * clients
    per_client = sum(n // t.batch_size * t.batch_size if t.drop_last else n for n in sizes) / len(sizes)
    return int(t.local_epochs * per_client * clients)


def measure_fedavg(args: argparse.Namespace) -> dict[str, Any]:
    from bench.runner.federation import run_federation

    config = proxy_config(args.proxy, dataset_name(args.shape, args.train), args.rounds, args.every, args.set)
    cpu = time.process_time()
    result = run_federation(config, args.data_dir)
    cpu = time.process_time() - cpu
    final = result.summary()["final"]
    data = load_dataset(config.dataset.name, args.data_dir)
    per_client = len(data.train_y) // config.partition.num_clients
    held = round(per_client * config.partition.local_test_fraction)
    images = trained_images(config, [per_client - held] * config.partition.num_clients)
    rounds = config.training.rounds
    return {"measure": "fedavg", "proxy": args.proxy, **({"set": args.set} if args.set else {}),
            "dataset": config.dataset.name, "model": config.model.name,
            "model_kwargs": config.model.kwargs, "clients": config.partition.num_clients, "rounds": rounds,
            "train_images": len(data.train_y), "local_test_per_client": held,
            "global_acc": final.get("global_acc"), "images_per_round": images,
            **({"curve": {int(row["round"]): round(row["global_acc"], 4) for row in result.curves
                          if not math.isnan(row.get("global_acc", math.nan))}} if args.every else {}),
            "train_s_per_round": round(result.timing["train_time_s"] / rounds, 3),
            "train_s_per_1000_images": round(1000 * result.timing["train_time_s"] / (rounds * images), 4),
            "eval_s": round(result.timing["eval_time_s"], 2), "wall_s": round(result.timing["wall_time_s"], 1),
            "cpu_s": round(cpu, 1), "cpu_s_per_1000_images": round(1000 * cpu / (rounds * images), 4),
            "load_average_1min": round(os.getloadavg()[0], 2)}


def measure_domains(args: argparse.Namespace) -> dict[str, Any]:
    """A ``cnn`` told to predict the domain: Adam 1e-3, batch 64, ``--epochs`` over the first ``--train``
    training images, scored on the whole test split."""
    from bench.models.registry import build_model

    torch.set_num_threads(1)
    data = load_dataset(SHAPES[args.shape][0], args.data_dir)
    assert data.train_domain is not None and data.test_domain is not None
    mean = torch.tensor(data.mean).view(1, -1, 1, 1)
    std = torch.tensor(data.std).view(1, -1, 1, 1)

    def inputs(x: np.ndarray) -> torch.Tensor:
        return (torch.from_numpy(x).float() / 255 - mean) / std

    n = args.train or len(data.train_y)
    x, d = inputs(data.train_x[:n]), torch.from_numpy(data.train_domain[:n])
    model = build_model("cnn", data.image_shape, len(DOMAINS), seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    started = time.perf_counter()
    rng = numpy_stream(0, "domain-classifier")
    model.train()
    for _ in range(args.epochs):
        for batch in np.array_split(rng.permutation(n), max(1, n // 64)):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[batch])[1], d[batch])
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        predicted = model(inputs(data.test_x))[1].argmax(1).numpy()
    per_domain = [float((predicted[data.test_domain == k] == k).mean()) for k in range(len(DOMAINS))]
    return {"measure": "domains", "dataset": data.name, "train_images": n, "epochs": args.epochs,
            "domain_acc": round(float((predicted == data.test_domain).mean()), 4), "chance": round(1 / len(DOMAINS), 4),
            "per_domain_acc": dict(zip([dm.name for dm in DOMAINS], [round(a, 3) for a in per_domain])),
            "train_s": round(time.perf_counter() - started, 1), "load_average_1min": round(os.getloadavg()[0], 2)}


def measure_features(args: argparse.Namespace) -> dict[str, Any]:
    """A diagnostic of training, not of the data: the ``cnn`` trained centrally for ``--steps`` steps of batch
    32 on the first 4,000 training images (``--optimizer``, ``--lr``), from ``--seeds`` initialisations: its
    accuracy on the first 1,000 test images and the share of its features that are dead (zero on every one
    of those images)."""
    from bench.models.registry import build_model

    torch.set_num_threads(1)
    data = load_dataset(SHAPES[args.shape][0], args.data_dir)
    mean = torch.tensor(data.mean).view(1, -1, 1, 1)
    std = torch.tensor(data.std).view(1, -1, 1, 1)
    x = (torch.from_numpy(data.train_x[:4000]).float() / 255 - mean) / std
    y = torch.from_numpy(data.train_y[:4000])
    test_x = (torch.from_numpy(data.test_x[:1000]).float() / 255 - mean) / std
    runs = []
    for seed in range(args.seeds):
        model = build_model("cnn", data.image_shape, data.num_classes, seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr) if args.optimizer == "sgd" else \
            torch.optim.Adam(model.parameters(), lr=args.lr)
        rng = numpy_stream(seed, "features-diagnostic")
        for _ in range(args.steps):
            batch = torch.from_numpy(rng.choice(len(y), 32, replace=False))
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch])[1], y[batch]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            features, logits = model(test_x)
        runs.append({"seed": seed, "test_acc": round(float((logits.argmax(1).numpy() == data.test_y[:1000]).mean()), 4),
                     "dead_features": round(float((features.abs().sum(0) == 0).float().mean()), 4)})
    return {"measure": "features", "dataset": data.name, "optimizer": args.optimizer, "lr": args.lr,
            "steps": args.steps, "runs": runs, "load_average_1min": round(os.getloadavg()[0], 2)}


def draw_figure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.report.dataset_plots import plot_domain_samples

    datasets = [load_dataset(SHAPES[s][0], args.data_dir) for s in ("32", "28")]
    path = plot_domain_samples(datasets, args.out)
    return {"measure": "figure", "path": str(path), "sha256": {d.name: d.sha256 for d in datasets}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="data folder (default: $BENCH_DATA_DIR or ./data)")
    sub = parser.add_subparsers(dest="command", required=True)
    fedavg = sub.add_parser("fedavg", help="FedAvg iid with a proxy's model: accuracy and seconds per round")
    fedavg.add_argument("--proxy", choices=sorted(PROXIES), required=True)
    fedavg.add_argument("--shape", choices=sorted(SHAPES), required=True)
    fedavg.add_argument("--train", type=int, default=None, help="use the first N training images (multiple of 100)")
    fedavg.add_argument("--rounds", type=int, default=None, help="R rounds (default: the proxy's)")
    fedavg.add_argument("--every", type=int, default=None, help="also evaluate every K rounds (the curve)")
    fedavg.add_argument("-S", "--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, as `bench run -S` (a diagnostic: not the proxy's own)")
    fedavg.set_defaults(func=measure_fedavg)
    domains = sub.add_parser("domains", help="a small CNN's accuracy at telling the domain")
    domains.add_argument("--shape", choices=sorted(SHAPES), required=True)
    domains.add_argument("--train", type=int, default=2000, help="training images (default 2000; 0: all)")
    domains.add_argument("--epochs", type=int, default=2)
    domains.set_defaults(func=measure_domains)
    features = sub.add_parser("features", help="a diagnostic of training: dead features after central steps")
    features.add_argument("--shape", choices=sorted(SHAPES), required=True)
    features.add_argument("--optimizer", choices=["sgd", "adam"], required=True)
    features.add_argument("--lr", type=float, required=True)
    features.add_argument("--steps", type=int, required=True)
    features.add_argument("--seeds", type=int, default=6)
    features.set_defaults(func=measure_features)
    figure = sub.add_parser("figure", help="samples per domain of both variants")
    figure.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "domaindigits.png")
    figure.set_defaults(func=draw_figure)
    args = parser.parse_args()
    with seeded_torch(0, "benchmark"):
        print(json.dumps(args.func(args)))


if __name__ == "__main__":
    main()
