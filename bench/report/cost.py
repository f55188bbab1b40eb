"""What a suite's runs cost, estimated before running them (``bench suite cost``; pipelines/fedhkd/NOTES.md §10
"compute basis").

A run's FLOPs = (training FLOPs per trained image) × (images trained) + (forward FLOPs per image) ×
(images evaluated); GPU-hours = FLOPs / an assumed sustained throughput, stated with the estimate.

- **Training FLOPs per trained image** are measured per method: torch's ``FlopCounterMode`` counts
  every FLOP of a 2-round and a 1-round run of the method (its model, hyperparameters, local epochs,
  batch size) on 2 clients of about 1.5 batches of a stand-in dataset (the run's dataset if prepared,
  else an embedded one of the same image shape); the difference is round 2, where every method has
  its whole objective, divided by the images it trained. Extra forward passes (MOON's frozen models, FedMD's public
  batch), backward passes, knowledge extraction and server-side training (FedGen's generator) are
  thereby counted, not assumed. The measurement's clients hold local test sets in the run's own ratio of local
  test to train images, so a method that also trains or scores on its local test split (FedAKD's, CFFL's and
  CGSV's released code train on train + local test) has that work counted in the same proportion as in the run.
- **Images trained**: rounds × local epochs (or steps × batch) × each client's train size (whole
  batches only with ``drop_last``), with the setting's partition built on labels of the dataset's sizes
  spread evenly over its classes (no data needed; exact for balanced datasets, an approximation otherwise;
  a scheme needing more than labels, LEAF's users, by an iid split of the same sizes).
- **Images evaluated**: on every evaluated round, the global test set, the local test sets and, where
  configured, every client model on the global test set.

**Measured step times instead of the assumed throughput** (``--gpu FILE``): ``benchmarks/gpu.py`` times, on a
GPU, one training step of every client model of every paper profile at its paper shape, batch and optimiser,
and one evaluation forward, and counts their FLOPs the same way. The achieved seconds per FLOP of the run's
model (the mean over its candidates for heterogeneous clients) then price the run's training and evaluation
FLOPs. Small models at batch 32 are launch-bound (0.03–2 TFLOP/s measured on an H200), large ones are not
(11–18 TFLOP/s), so one assumed rate misprices both. The method's extra passes (a frozen teacher's forward,
a generator's steps) are priced at its client model's measured efficiency.

FLOPs are counted as ``bench models`` counts them: matmuls and convolutions, a multiply-add as 2 FLOPs.
Two limits, stated with the estimate in the pipelines' READMEs: a method's per-round fixed work (FedGen's
generator training on the server) is counted per image of the measurement's small clients, which
overstates it where the model is small; and the counter's figure for a backward pass is taken as
it is (ShuffleNetV2 counts 5.9 forward-equivalents per trained image, ResNet-18 2.9).
"""
from __future__ import annotations

import json
import math
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.config import ExperimentConfig
from bench.data import dataset_names, get_dataset_spec, load_dataset
from bench.data.partition import Partition, class_counts, get_partitioner, make_partition
from bench.errors import BenchError
from bench.experiment import build_config
from bench.models import build_model, get_model_entry
from bench.models.inventory import forward_flops
from bench.rng import numpy_stream
from bench.report.paper_report import markdown_table
from bench.report.runs import find_runs
from bench.runner.federation import evaluation_rounds, partition_for, run_federation
from bench.suites import Suite

MEASURE_CLIENTS = 2
DEFAULT_TFLOPS = 3.0
"""Assumed sustained TFLOP/s of one GPU: pipelines/fedhkd/NOTES.md §10 estimates (does not measure) 3-6 ms per
ResNet-18 step of batch 64 on an H100 in eager PyTorch; a step counts 13.9 GFLOP here (64 images ×
74.1 MFLOP × 2.93 for forward and backward), so 13.9 GFLOP / 4.5 ms ≈ 3 TFLOP/s."""


def step_key(model: str, kwargs: Mapping[str, Any], shape: tuple[int, ...] | list[int], classes: int, batch: int,
             optimizer: str, momentum: float = 0.0) -> str:
    """One line naming a training step as ``benchmarks/gpu.py`` measures it:
    ``model{kwargs} CxHxW/classes b=batch optimiser[(m=momentum)]``."""
    args = ",".join(f"{k}={v}" for k, v in sorted(kwargs.items()))
    return (f"{model}{{{args}}} {'x'.join(str(s) for s in shape)}/{classes} b={batch} {optimizer}"
            + (f"(m={momentum:g})" if momentum else ""))


@dataclass(frozen=True)
class RunCost:
    """One run's estimated FLOPs: training (per trained image × images) and evaluation; ``steps`` names the
    training step of each of its client architectures (:func:`step_key`), ``evaluated`` the model whose forward
    evaluation counts."""

    method: str
    setting: str
    train_flops_per_image: float
    forward_flops: int
    train_images: int
    eval_images: int
    steps: tuple[str, ...] = ()
    evaluated: str = ""

    @property
    def flops(self) -> float:
        return self.train_flops_per_image * self.train_images + self.forward_flops * self.eval_images


@dataclass(frozen=True)
class MeasuredSteps:
    """Step times one GPU gave ``benchmarks/gpu.py measure`` (its JSON file): per step key, seconds per
    training FLOP and per evaluation FLOP, under the runs' settings (deterministic kernels, no TF32)."""

    device: str
    train_seconds_per_flop: dict[str, float]
    eval_seconds_per_flop: dict[str, float]

    @classmethod
    def load(cls, path: Path) -> MeasuredSteps:
        try:
            raw = json.loads(Path(path).read_text())
            rows = raw["steps"]
            return cls(str(raw["device"]),
                       {r["key"]: r["deterministic"]["step_s"] / r["deterministic"]["step_flops"] for r in rows},
                       {r["key"]: r["deterministic"]["forward_s"] / r["deterministic"]["forward_flops"] for r in rows})
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
            raise BenchError(f"--gpu {path}: not a step-time file of benchmarks/gpu.py measure ({exc}); measure "
                             "one on a GPU machine (benchmarks/gpu.py's docstring says how)") from None

    def seconds(self, cost: RunCost) -> float:
        """GPU-seconds of one run: its training FLOPs at the mean measured seconds per FLOP of its
        architectures' steps, its evaluation FLOPs at the evaluated model's."""
        if missing := [k for k in cost.steps if k not in self.train_seconds_per_flop]:
            raise BenchError(f"{cost.method} on {cost.setting}: no step measured on {self.device} for {missing[0]}; "
                             "run `uv run python benchmarks/gpu.py workload` and measure again on a GPU")
        train = statistics.fmean(self.train_seconds_per_flop[k] for k in cost.steps)
        evaluate = self.eval_seconds_per_flop.get(cost.evaluated) or statistics.fmean(
            self.eval_seconds_per_flop[k] for k in cost.steps)
        return cost.train_flops_per_image * cost.train_images * train + cost.forward_flops * cost.eval_images * evaluate


def stand_in(config: ExperimentConfig, data_dir: Path | None = None) -> str:
    """The dataset a method's step is measured on: the run's own if it is embedded or prepared here, else
    an embedded dataset of the same image shape (same number of classes preferred)."""
    spec = get_dataset_spec(config.dataset.name)
    try:
        load_dataset(config.dataset.name, data_dir)
        return config.dataset.name
    except BenchError:
        pass
    same = sorted((get_dataset_spec(n).num_classes != spec.num_classes, n) for n in dataset_names()
                  if get_dataset_spec(n).embedded and get_dataset_spec(n).image_shape == spec.image_shape)
    if not same:
        raise BenchError(f"cost of {config.dataset.name}: it is not prepared here and no embedded dataset has its "
                         f"image shape {spec.image_shape} to measure the methods on; prepare it first")
    return same[0][1]


def _measurement(config: ExperimentConfig, dataset: str, rounds: int) -> ExperimentConfig:
    """``config`` for ``rounds`` rounds on 2 iid clients of ``dataset`` holding about 1.5 batches each
    (the rest held out) and a public set (if any) of one batch (it runs with ``evaluating=False``: :func:`_counted`).
    FLOPs do not depend on the loss, so an exploding loss does not stop the measurement (``divergence_factor:
    null``: FedAKD's released Standalone reference, Adam at lr 0.15, explodes on the stand-in); a non-finite one
    still does."""
    batch = config.training.batch_size
    public = config.public.size and batch
    per_client = (get_dataset_spec(dataset).num_train - public) / MEASURE_CLIENTS
    raw = config.to_dict()
    raw |= {"name": "cost", "seed": 0, "dataset": {"name": dataset}, "device": "cpu", "threads": 1,
            "partition": {"scheme": "iid", "num_clients": MEASURE_CLIENTS, "seed": 0,
                          "local_test_fraction": max(0.0, 1 - 1.5 * batch / per_client),
                          "validation_fraction": config.partition.validation_fraction},
            "participation": {"fraction": 1.0}, "public": {"size": public, "source": "carve"},
            "training": {**raw["training"], "rounds": rounds, "divergence_factor": None},
            "tracking": {"mlflow": False}}
    return build_config(raw)


def _counted(config: ExperimentConfig, data_dir: Path | None, partition_dir: Path) -> int:
    with FlopCounterMode(display=False) as counter:
        run_federation(config, data_dir, partition_dir, evaluating=False)
    return int(counter.get_total_flops())


def measurement_partition(measured: ExperimentConfig, data_dir: Path | None, local_test_ratio: float) -> Partition:
    """The measurement's partition: its config's clients (about 1.5 batches of train images each), with local
    test sets of ``local_test_ratio`` times their train size, drawn (a seeded choice) from the images the config
    holds out; the other held-out images are used by no client."""
    data = load_dataset(measured.dataset.name, data_dir)
    partition = partition_for(measured, data, None)
    stream = numpy_stream(measured.partition.seed, "cost-local-test")
    partition.local_test = [np.sort(stream.choice(held, min(len(held), round(local_test_ratio * len(train))),
                                                  replace=False))
                            for train, held in zip(partition.train, partition.local_test)]
    partition.local_test_counts = class_counts(data.train_y, partition.local_test, partition.num_classes)
    return partition


_MEASURED: dict[tuple[str, float], float] = {}  # (measurement config sha256, local test ratio) -> FLOPs per image


def _train_flops_per_image(measured: ExperimentConfig, local_test_ratio: float, data_dir: Path | None) -> float:
    """FLOPs of round 2 of ``measured`` (a 2-round measurement config) per train image it trained, its clients
    holding local test sets ``local_test_ratio`` times their train size (:func:`measurement_partition`); measured
    once per process (settings that differ only in their partition and share the ratio share it)."""
    key = (measured.sha256, local_test_ratio)
    if key not in _MEASURED:
        one = _measurement(measured, measured.dataset.name, 1)
        partition = measurement_partition(measured, data_dir, local_test_ratio)
        with tempfile.TemporaryDirectory() as folder:
            saved = partition.save(folder)
            _MEASURED[key] = (_counted(measured, data_dir, saved) - _counted(one, data_dir, saved)) / \
                images_per_round(measured, [len(t) for t in partition.train])
    return _MEASURED[key]


def images_per_round(config: ExperimentConfig, sizes: list[int]) -> int:
    """Images the clients train on in one round (every client takes part in the count)."""
    t = config.training
    if t.local_steps is not None:
        return t.local_steps * t.batch_size * len(sizes)
    per_epoch = [n // t.batch_size * t.batch_size if t.drop_last else n for n in sizes]
    assert t.local_epochs is not None  # the config requires local_steps or local_epochs
    return t.local_epochs * sum(per_epoch)


def _paper_sizes(config: ExperimentConfig) -> tuple[list[int], list[int]]:
    """Train and local-test sizes per client of the setting's partition, on evenly spread labels (and, for a
    scheme that selects by the images, on seeded random images of the dataset's shape: sizes only); a scheme
    that needs more (LEAF's users) is estimated by an iid split of the same sizes."""
    spec = get_dataset_spec(config.dataset.name)
    p = config.partition
    labels = np.arange(spec.num_train - (config.public.size if config.public.source == "carve" else 0)) \
        % spec.num_classes
    needs = set(get_partitioner(p.scheme).needs)
    scheme, params = (p.scheme, p.scheme_params) if needs <= {"seed", "test_labels", "features"} else ("iid", {})
    features = None
    if scheme == p.scheme and "features" in needs:
        features = numpy_stream(0, "cost-images").integers(0, 256, (len(labels), *spec.image_shape), dtype=np.uint8)
    part = make_partition(labels, spec.num_classes, scheme, p.num_clients, p.seed, params,
                          p.local_test_fraction, test_labels=np.arange(spec.num_test) % spec.num_classes,
                          features=features)
    return [len(t) for t in part.train], [len(t) for t in part.local_test]


def run_cost(config: ExperimentConfig, method: str, setting: str, data_dir: Path | None = None) -> RunCost:
    spec = get_dataset_spec(config.dataset.name)
    entry = get_model_entry(config.model.name)
    with torch.device("meta"):
        model = build_model(config.model.name, spec.image_shape, spec.num_classes, **config.model.kwargs)
    train, local_test = _paper_sizes(config)
    fraction = config.participation.fraction
    ev = config.evaluation
    per_round = ev.global_model * spec.num_test + ev.local_models * sum(local_test) \
        + ev.clients_on_global_test * len(train) * spec.num_test
    measured = _measurement(config, stand_in(config, data_dir), 2)
    local_test_ratio = round(sum(local_test) / max(sum(train), 1), 3)
    return RunCost(method, setting, _train_flops_per_image(measured, local_test_ratio, data_dir),
                   forward_flops(model, entry.kind, spec.image_shape),
                   math.ceil(fraction * config.training.rounds * images_per_round(config, train)),
                   len(evaluation_rounds(config)) * per_round, run_steps(config),
                   _step(config, config.model.name, config.model.kwargs))


def _step(config: ExperimentConfig, model: str, kwargs: Mapping[str, Any]) -> str:
    spec = get_dataset_spec(config.dataset.name)
    t = config.training
    return step_key(model, kwargs, spec.image_shape, spec.num_classes, t.batch_size, t.optimizer.name,
                    t.optimizer.momentum)


def run_steps(config: ExperimentConfig) -> tuple[str, ...]:
    """The training step of each client architecture of a run (its candidates, or its one model)."""
    m = config.model
    return tuple(_step(config, name, m.kwargs if name == m.name else {}) for name in m.candidates or [m.name])


def suite_costs(suite: Suite, data_dir: Path | None = None) -> list[RunCost]:
    """Every run's cost (one per method and setting: seeds cost the same)."""
    seed = suite.params.suite.seeds[0]
    return [run_cost(suite.config(method, setting, seed, timed=False), method, setting, data_dir)
            for method in suite.params.methods for setting in suite.settings_of(method)]


def cost_table(suite: Suite, tflops: float | None = None, data_dir: Path | None = None,
               gpus: Sequence[MeasuredSteps] = ()) -> str:
    """Per method: forward passes per trained image (measured), FLOPs and GPU-hours of all its runs at
    ``tflops`` sustained TFLOP/s (default :data:`DEFAULT_TFLOPS`) and, for each of ``gpus``, at the step times
    measured on that GPU; the measured training time per round relative to the first method where the
    suite's runs exist (a check of the FLOP model's ratios); the total."""
    tflops = DEFAULT_TFLOPS if tflops is None else tflops
    if tflops <= 0:
        raise BenchError(f"--tflops {tflops:g}: the assumed throughput must be positive")
    costs = suite_costs(suite, data_dir)
    measured_hours = [{c: gpu.seconds(c) / 3600 for c in costs} for gpu in gpus]
    seeds = len(suite.params.suite.seeds)
    found, _ = find_runs(suite)
    reference = next(iter(suite.params.methods))
    header = ["method", "passes/trained image", "PFLOP per run (mean)", "GPU-h (all settings × seeds)",
              f"FLOP ratio to {reference}", f"measured time ratio to {reference}"]
    header[4:4] = [f"GPU-h on {gpu.device} (measured steps)" for gpu in gpus]

    def measured_time(method: str) -> float | None:
        times = [r.seconds_per_round for (m, _, _), r in found.items() if m == method]
        return sum(times) / len(times) if times and len(times) == len(suite.settings_of(method)) * seeds else None

    rows, total, total_measured = [], 0.0, [0.0] * len(gpus)
    base = [c for c in costs if c.method == reference]
    base_train = sum(c.train_flops_per_image * c.train_images for c in base)
    for method in suite.params.methods:
        mine = [c for c in costs if c.method == method]
        if not mine:  # the method runs on none of the suite's settings (e.g. a profile's subset of columns)
            continue
        flops = sum(c.flops for c in mine) * seeds
        total += flops
        train = sum(c.train_flops_per_image * c.train_images for c in mine)
        ratio = None if (mt := measured_time(method)) is None or (rt := measured_time(reference)) is None else mt / rt
        row = [method, f"{sum(c.train_flops_per_image / c.forward_flops for c in mine) / len(mine):.2f}",
               f"{flops / seeds / len(mine) / 1e15:.3g}", f"{flops / (tflops * 1e12) / 3600:.3g}",
               f"{train / base_train:.2f}", "—" if ratio is None else f"{ratio:.2f}"]
        hours = [sum(on_gpu[c] for c in mine) * seeds for on_gpu in measured_hours]
        total_measured = [t + h for t, h in zip(total_measured, hours)]
        row[4:4] = [f"{h:.3g}" for h in hours]
        rows.append(row)
    rows.append(["total", "", "", f"{total / (tflops * 1e12) / 3600:.3g}", "", ""])
    rows[-1][4:4] = [f"{t:.3g}" for t in total_measured]
    measured = "" if not gpus else (f"; and at the training and evaluation step times measured on "
                                    f"{' and on '.join(gpu.device for gpu in gpus)} (--gpu, benchmarks/gpu.py), "
                                    "one run at a time")
    return (f"suite {suite.name}: {len(suite.params.methods)} methods × {len(suite.params.settings)} settings × "
            f"{seeds} seeds; GPU-hours at an assumed sustained {tflops:g} TFLOP/s (--tflops){measured}\n\n"
            + markdown_table(header, rows))
