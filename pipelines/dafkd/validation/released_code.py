"""DaFKD ``mode: code`` beside the authors' released code (haozhaowang/DaFKD2023 at 39a536c), on the CPU.

    uv run python pipelines/dafkd/validation/released_code.py CHECKOUT --one-round [--seeds 0] [--out DIR] ...
    uv run python pipelines/dafkd/validation/released_code.py CHECKOUT [--seeds 0 1 2] [--rounds 5] [--out DIR] ...

CHECKOUT is a checkout of github.com/haozhaowang/DaFKD2023 at commit 39a536c371a557461a26cf9a912150b0e5dfd3e2
(pipelines/dafkd/NOTES.md [C]; ``git clone`` it and ``git checkout 39a536c`` outside this repository; it is only read,
never copied here). Its files run unmodified. Only as released can only ``--dataset cifar10`` run (§1.7.16), so the
script runs it with ``--dataset cifar10`` and replaces its data loading, ``data_loader.load_partition_data_cifar10``, at
run time by :func:`released_data`: the first ``--train-images`` of the embedded digits (8x8 grey, upscaled to
3x32x32 by pixel repetition) partitioned among ``--clients`` clients by our Dirichlet partitioner, and the 450 test
images, all as our runner feeds them (``Normalize(0.5, 0.5)``); each client's training batches are one list of full
batches shuffled once (a stream of the run seed), iterated in that order in every epoch, as the code's loaders make
them (§1.7.20); the test set is cut into batches in order, and the batches dealt round-robin to the clients as their
"local test" sets, so that the code's logged ``test_acc`` (Σ correct / Σ samples over the clients' local test sets,
§1.7.15) is the accuracy on the whole test set, which ours logs as ``global_acc``. Besides data loading, three things
are set in the released code's process and nothing else: ``h5py`` (imported for EMNIST only) gets an empty stand-in
where it is not installed; the global seeds are set to the run seed once the code has set them to 0 (its
initialisation and noise then follow the run seed); and ``torch.nn.Module.to`` copies the module's tensors, as a move
to a GPU does, so that the code's ``.cpu().state_dict()`` snapshots are copies, as on the authors' GPUs (§1.7.19: on a
CPU they are views of the live model, each client then starts from the previous client's model, and code mode
follows the CUDA behaviour; ``--device-semantics cpu`` leaves ``to`` alone).

``--one-round``: **one server round on identical inputs.** The released code runs rounds 0 and 1 (the first with
distillation) in this process; recording wrappers (which change nothing) keep each client's upload (extractor,
classifier head, generator; the shared discriminator head as the client left it), the generated samples D̂^g, the
normalised α̂, the teacher logits Σ_k α̂_k z_k and the distilled model the code returns (after its test-set passes,
§1.7.17). Ours (``mode: code``) then runs two rounds whose client updates are those uploads, in the code's client
order, and whose D̂^g is the code's samples; its α̂, teacher, distilled weights, BatchNorm buffers and broadcast
generator are compared with the code's (``one_round.json``, ``one_round.md``).

Default: **curves.** The released ``main_fed.py`` (in a subprocess per seed) and ours (``mode: code`` with the code's
hyperparameters: Adam at ``--lr`` on the classifier without weight decay and on the generator with weight decay 1e-4,
distillation at ``--es-lr``, τ = 20, ``--ed-epoch`` batches × passes) on the same clients' data, each seed's
per-round accuracy on the test set; per round mean ± std over seeds and a Welch t-test of the two sides
(``runs.json``, ``report.md``). Every client takes part in every round. The run seeds drive initial weights, batch
order and noise on each side, not the same draws on both sides. ``--lr`` defaults to 1e-3, the code's own default
(the authors' script sets 1e-4, at which this workload stays at chance for a few rounds on both sides).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib
import json
import logging
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
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import bench.algorithms.dafkd as dafkd_module
from bench.algorithms.dafkd import DaFKD, DomainUpload
from bench.algorithms.server_bn import ServerBNRule
from bench.config import ExperimentConfig
from bench.data import load_dataset, prepare_dataset
from bench.data.partition import Partition, partition_dataset
from bench.data.prepared import PreparedDataset, channel_stats
from bench.data.registry import DatasetSpec, get_dataset_spec, register_dataset
from bench.engine.context import Context
from bench.engine.messages import Update
from bench.errors import BenchError
from bench.report.released import p_text, repeat_command, require_checkout, welch_p
from bench.experiment import build_config
from bench.fileio import write_json, write_text
from bench.rng import numpy_stream
from bench.runner.federation import run_federation, to_tensor

DATASET = "dafkd-released-digits32"
COMMIT = "39a536c371a557461a26cf9a912150b0e5dfd3e2"
CHILD = "--released-child"  # argv[1] of this script run as the released code's process


# -- the shared workload ------------------------------------------------------------------------------------


def digits32(data_dir: Path, train_images: int) -> PreparedDataset:
    """The first ``train_images`` embedded digits and all 450 test digits as 3 x 32 x 32 uint8 images (each pixel
    repeated 4 x 4, grey in every channel)."""
    digits = load_dataset("digits", data_dir)

    def up(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.repeat(x.repeat(4, axis=2).repeat(4, axis=3), 3, axis=1))

    train_x, test_x = up(digits.train_x[:train_images]), up(digits.test_x)
    mean, std = channel_stats(train_x)
    return PreparedDataset(DATASET, train_x, digits.train_y[:train_images], test_x, digits.test_y, 10, mean, std,
                           source={"origin": "the embedded digits upscaled to 32x32x3 "
                                             "(pipelines/dafkd/validation/released_code.py)"})


def register_digits32(train_images: int) -> None:
    """Register the workload's dataset in this process (once)."""
    try:
        get_dataset_spec(DATASET)
    except BenchError:
        digits = get_dataset_spec("digits")
        register_dataset(DatasetSpec(DATASET, 10, (3, 32, 32), train_images, digits.num_test,
                                     functools.partial(digits32, train_images=train_images), embedded=True))


def partition(data: PreparedDataset, args: argparse.Namespace) -> Partition:
    """The clients' training indices: our Dirichlet partitioner (DaFKD's NIID-Bench reading), partition seed 0."""
    return partition_dataset(data, "dirichlet", args.clients, 0, {"alpha": args.alpha, "min_size": args.batch_size})


def released_data(data: PreparedDataset, part: Partition, batch_size: int, seed: int) -> tuple[Any, ...]:
    """What the code's ``load_partition_data_cifar10`` returns — (clients, train count, test count, global train
    batches, global test batches, {client: train count}, {client: train batches}, {client: local test batches},
    classes) — for our data: each client's training images shuffled once (stream ``(seed, "released-batches",
    client)``) and cut into full batches (the code's ``drop_last``), the test set in order in batches of
    ``batch_size`` (the last partial), dealt round-robin to the clients as local test sets. Images as our runner feeds
    them (``Normalize(0.5, 0.5)``), labels int64."""
    x_train = to_tensor(data.train_x, data, torch.device("cpu"), "half")
    x_test = to_tensor(data.test_x, data, torch.device("cpu"), "half")
    y_train, y_test = torch.from_numpy(data.train_y).long(), torch.from_numpy(data.test_y).long()
    clients = len(part.train)
    train_local, counts = {}, {}
    for cid, indices in enumerate(part.train):
        order = numpy_stream(seed, "released-batches", cid).permutation(np.asarray(indices))
        full = len(order) - len(order) % batch_size
        train_local[cid] = [(x_train[order[i:i + batch_size]], y_train[order[i:i + batch_size]])
                            for i in range(0, full, batch_size)]
        counts[cid] = len(indices)
    test = [(x_test[i:i + batch_size], y_test[i:i + batch_size]) for i in range(0, len(y_test), batch_size)]
    test_local = {cid: test[cid::clients] for cid in range(clients)}
    train_global = [batch for cid in range(clients) for batch in train_local[cid]]
    return (clients, sum(counts.values()), len(y_test), train_global, test, counts, train_local, test_local,
            data.num_classes)


# -- the released code in this process ----------------------------------------------------------------------


def released_imports(checkout: str) -> None:
    """The released code importable, unmodified: its folder on ``sys.path``, an empty ``h5py`` where none is
    installed (the code imports it for EMNIST only)."""
    if checkout not in sys.path:
        sys.path.insert(0, checkout)
    try:
        importlib.import_module("h5py")
    except ImportError:
        sys.modules["h5py"] = types.ModuleType("h5py")


@contextlib.contextmanager
def cuda_semantics(on: bool = True) -> Iterator[None]:
    """``Module.to(device)`` copies the module's tensors, as a host-to-GPU move does (§1.7.19); off: unchanged."""
    original = torch.nn.Module.to
    if on:
        def to(self: torch.nn.Module, *a: Any, **k: Any) -> torch.nn.Module:
            original(self, *a, **k)
            return self._apply(lambda t: t.clone())

        torch.nn.Module.to = to  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.to = original  # type: ignore[method-assign]


def code_args(args: argparse.Namespace, rounds: int) -> list[str]:
    """``main_fed.py``'s command line for the workload (τ = 20 and d = 100 as the authors' script sets them)."""
    return ["--dataset", "cifar10", "--model", "DaFKD", "--baseline", "DaFKD", "--client_num_in_total",
            str(args.clients), "--client_num_per_round", str(args.clients), "--comm_round", str(rounds),
            "--epochs", str(args.local_epochs), "--batch_size", str(args.batch_size), "--client_optimizer", "adam",
            "--lr", str(args.lr), "--es_lr", str(args.es_lr), "--ed_epoch", str(args.ed_epoch), "--noise_dimension", "100",
            "--temperature", "20.0"]


def reseeding_loader(shim_data: tuple[Any, ...], seed: int) -> Any:
    """The replacement of ``load_partition_data_cifar10``: the global seeds set to the run seed (the code has just
    set them to 0, and builds its model next), then :func:`released_data`'s tuple."""
    def load(*_: Any, **__: Any) -> tuple[Any, ...]:
        import random

        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        return shim_data
    return load


def released_child(checkout: str, settings: dict[str, Any]) -> None:
    """``released_code.py --released-child CHECKOUT JSON``: the released ``main_fed.py`` on the workload."""
    torch.set_num_threads(1)
    released_imports(checkout)
    register_digits32(settings["train_images"])
    args = argparse.Namespace(**settings["args"])
    data = load_dataset(DATASET, Path(settings["data_dir"]))
    import data_loader  # the released code's module

    data_loader.load_partition_data_cifar10 = reseeding_loader(
        released_data(data, partition(data, args), args.batch_size, settings["seed"]), settings["seed"])
    sys.argv = ["main_fed.py", *code_args(args, args.rounds)]
    with cuda_semantics(settings["cuda_semantics"]):
        runpy.run_path(str(Path(checkout) / "main_fed.py"), run_name="__main__")


def parse_released(text: str) -> list[float]:
    """The per-round ``test_acc`` the released server logs (``{'test_acc': ..., 'test_loss': ...}``)."""
    return [float(v) for v in re.findall(r"'test_acc': ([-+0-9.eE]+|nan)", text)]


# -- one server round on identical inputs ---------------------------------------------------------------------


def our_key(code_key: str, code_keys: list[str], our_keys: list[str]) -> str:
    """The name in ``dafkd_resnet11`` (or our DCGAN generator) of the released model's ``code_key``: the two
    state dicts list the same tensors in the same order (module registration order), so position gives the name."""
    return our_keys[code_keys.index(code_key)]


def key_map(code_state: dict[str, torch.Tensor], our_state: dict[str, torch.Tensor]) -> dict[str, str]:
    """{released name: our name}, refused unless both list tensors of the same shapes, leaf names and count."""
    code_keys, our_keys = list(code_state), list(our_state)
    if len(code_keys) != len(our_keys):
        raise BenchError(f"the released model has {len(code_keys)} tensors, ours {len(our_keys)}")
    mapping = {}
    for theirs, ours in zip(code_keys, our_keys):
        if code_state[theirs].shape != our_state[ours].shape or theirs.rsplit(".", 1)[1] != ours.rsplit(".", 1)[1]:
            raise BenchError(f"released {theirs} {tuple(code_state[theirs].shape)} does not match our {ours} "
                             f"{tuple(our_state[ours].shape)}")
        mapping[theirs] = ours
    return mapping


def code_model_state(model: torch.nn.Module, shared: dict[str, torch.Tensor], classify: dict[str, torch.Tensor],
                     head: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The released MTL's full state dict from its three parts (``sharedlayer``, ``classify``, ``discriminator``)."""
    parts = {"sharedlayer": shared, "classify": classify, "discriminator": head}
    return {k: parts[k.split(".", 1)[0]][k.split(".", 1)[1]] for k in model.state_dict()}


@dataclass
class CodeRound:
    """What the released code did in its rounds 0 and 1, recorded: per round the clients' uploads in its order
    (client, samples, MTL state, generator state), the generated samples, its normalised α̂ (clients × samples) of
    round 1, the teacher logits (samples × classes), ŵ and the model it returned (MTL state, generator state)."""

    uploads: dict[int, list[tuple[int, int, dict[str, torch.Tensor], dict[str, torch.Tensor]]]] = field(
        default_factory=dict)
    samples: dict[int, torch.Tensor] = field(default_factory=dict)
    alpha: torch.Tensor | None = None
    teacher: dict[int, torch.Tensor] = field(default_factory=dict)
    averaged: dict[str, torch.Tensor] | None = None
    distilled: dict[str, torch.Tensor] | None = None
    before_test_passes: dict[str, torch.Tensor] | None = None
    generator: dict[str, torch.Tensor] | None = None
    errors: list[str] = field(default_factory=list)


def run_code_rounds(checkout: Path, data: PreparedDataset, args: argparse.Namespace, seed: int) -> CodeRound:
    """The released code's rounds 0 and 1, in this process, with recording wrappers (module docstring)."""
    released_imports(str(checkout))
    import client as code_client
    import DaFKD as code_dafkd
    from model.model_multitask import MTL
    from trainer.my_model_trainer_MTL import MyModelTrainer

    import main_fed

    out = CodeRound()
    shim = released_data(data, partition(data, args), args.batch_size, seed)
    code = main_fed.add_args(argparse.ArgumentParser()).parse_args(code_args(args, 2))
    main_fed.load_partition_data_cifar10 = reseeding_loader(shim, seed)
    dataset = main_fed.load_data(code, code.dataset)  # its own filtering of the test batches included
    model = MTL(class_num=dataset[7])
    trainer = MyModelTrainer(model=model, args=code)
    train, get_pd_log, distil = code_client.Client.train, MyModelTrainer.get_pd_log, MyModelTrainer.weighted_ensemble_distillation
    share = MyModelTrainer.get_distillation_share_data
    rounds: list[int] = []

    def recording_train(self: Any, w_global: Any, share_data: Any, test_global: Any, round_idx: int) -> Any:
        weights, pd, pd_t = train(self, w_global, share_data, test_global, round_idx)
        head = copy.deepcopy(self.model_trainer.model_d.discriminator.state_dict())
        state = code_model_state(model, copy.deepcopy(weights[0]), copy.deepcopy(weights[1]), head)
        out.uploads.setdefault(round_idx, []).append((self.client_idx, self.local_sample_number, state,
                                                      copy.deepcopy(weights[2])))
        return weights, pd, pd_t

    def recording_share(self: Any, noise: torch.Tensor, device: Any) -> Any:
        samples = share(self, noise, device)
        rounds.append(len(rounds))
        out.samples[rounds[-1]] = torch.cat([x for x, _ in samples]).clone()
        return samples

    def recording_pd_log(self: Any, client_indexes: Any, device: Any, ds_data: Any, model_dict: Any, pd_dict: Any,
                         num: int) -> Any:
        log = get_pd_log(self, client_indexes, device, ds_data, model_dict, pd_dict, num)
        if pd_dict is api.probability_density_dict and num not in out.teacher:
            out.teacher[num] = log.detach().clone()
        if pd_dict is api.probability_density_dict_t and num == 0:  # the distilled student, before its test passes
            d = self.model_d
            out.before_test_passes = code_model_state(model, copy.deepcopy(d.sharedlayer.state_dict()),
                                                      copy.deepcopy(d.classify.state_dict()),
                                                      copy.deepcopy(d.discriminator.state_dict()))
        return log

    def recording_distil(self: Any, *a: Any) -> Any:
        avg = a[-1]
        out.averaged = code_model_state(model, copy.deepcopy(avg[0]), copy.deepcopy(avg[1]),
                                        copy.deepcopy(self.model_d.discriminator.state_dict()))
        returned = distil(self, *a)
        out.distilled = code_model_state(model, copy.deepcopy(returned[0]), copy.deepcopy(returned[1]),
                                         copy.deepcopy(self.model_d.discriminator.state_dict()))
        out.generator = copy.deepcopy(returned[2])
        return returned

    error = logging.error
    patches = [(code_client.Client, "train", recording_train), (MyModelTrainer, "get_pd_log", recording_pd_log),
               (MyModelTrainer, "weighted_ensemble_distillation", recording_distil),
               (MyModelTrainer, "get_distillation_share_data", recording_share),
               (logging, "error", lambda msg, *a, **k: (out.errors.append(str(msg)), error(msg, *a, **k)))]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        api = code_dafkd.DaFKD(dataset, torch.device("cpu"), code, trainer)
        with cuda_semantics(args.device_semantics == "cuda"), contextlib.chdir(tempfile.mkdtemp(prefix="dafkd-code-")):
            api.train()  # it writes DaFKD_mnist.txt to the working folder
    finally:
        for owner, name, _ in patches:
            setattr(owner, name, {"train": train, "get_pd_log": get_pd_log, "weighted_ensemble_distillation": distil,
                                  "get_distillation_share_data": share, "error": error}[name])
    order = [int(i) for i in api.client_indexes]
    out.alpha = torch.tensor([[p for batch in api.probability_density_dict[c] for p in batch] for c in order])
    return out


def ours_config(args: argparse.Namespace, seed: int, rounds: int) -> ExperimentConfig:
    """Ours on the workload: ``mode: code`` with the released code's hyperparameters and protocol."""
    return build_config({
        "seed": seed, "device": "cpu", "dataset": {"name": DATASET, "normalize": "half"},
        "partition": {"scheme": "dirichlet", "num_clients": args.clients, "alpha": args.alpha,
                      "min_size": args.batch_size, "seed": 0, "local_test_fraction": 0.0},
        "participation": {"fraction": 1.0},
        "model": {"name": "dafkd_resnet11"},
        "algorithm": {"name": "dafkd", "mode": "code", "distill_lr": args.es_lr, "generator_lr": args.lr,
                      "generator_weight_decay": 1e-4, "temperature": 20.0, "distill_batches": args.ed_epoch,
                      "distill_epochs": args.ed_epoch},
        "training": {"rounds": rounds, "local_epochs": args.local_epochs, "batch_size": args.batch_size,
                     "drop_last": True, "optimizer": {"name": "adam", "lr": args.lr, "weight_decay": 0.0}},
        "evaluation": {"every": 1, "last": 1, "local_models": False}, "tracking": {"mlflow": False}})


@dataclass
class OurRound:
    """Ours on the code's inputs, recorded in its second round: α̂ (clients × samples), the teacher logits
    Σ_k α̂_k z_k (samples × classes), ŵ, the distilled model and the broadcast generator."""

    alpha: torch.Tensor | None = None
    teacher: torch.Tensor | None = None
    averaged: dict[str, torch.Tensor] | None = None
    distilled: dict[str, torch.Tensor] | None = None
    generator: dict[str, torch.Tensor] | None = None


def run_ours_on(code: CodeRound, args: argparse.Namespace, seed: int, data_dir: Path, model_keys: dict[str, str],
                generator_keys: dict[str, str], code_teacher: torch.Tensor | None = None) -> OurRound:
    """Ours for two rounds whose client updates are the code's uploads (renamed to our keys), the clients in the
    code's order, and whose second-round D̂^g is the code's samples; with ``code_teacher``, its distillation target
    is softmax(code_teacher / τ), the code's teacher logits in place of ours (the control that separates the
    distillation from the teacher's rounding)."""
    out = OurRound()
    local_update, aggregate_with_rule = DaFKD.local_update, DaFKD.aggregate_with_rule
    distillation_set, client_order = DaFKD.distillation_set, Context.client_order
    weights, teacher = dafkd_module.correlation_weights, dafkd_module.ensemble_teacher

    def upload(self: DaFKD, round_index: int, client: Any) -> Any:
        cid, n, state, generator = next(u for u in code.uploads[round_index - 1] if u[0] == client.cid)
        ours = {model_keys[k]: v.clone() for k, v in state.items()}
        client.model.load_state_dict(ours)  # what the client holds after training (the head: the next one's start)
        payload = DomainUpload({generator_keys[k]: v.clone() for k, v in generator.items()}, None, math.nan,
                               math.nan, math.nan)
        return Update(cid, n, ours, payload), math.nan

    distilling = [False]  # the diagnostics call the same functions on the test set

    def recording_weights(domain: torch.Tensor) -> torch.Tensor:
        alpha = weights(domain)
        if distilling[0]:
            out.alpha = alpha
        return alpha

    def recording_teacher(logits: torch.Tensor, alpha: torch.Tensor, *a: Any) -> torch.Tensor:
        if distilling[0]:
            out.teacher = (alpha.unsqueeze(2) * logits).sum(0)
            if code_teacher is not None:
                return torch.softmax(code_teacher / a[0], dim=1)
        return teacher(logits, alpha, *a)

    def recording_aggregate(self: DaFKD, round_index: int, server: Any, updates: Any) -> Any:
        distilling[0] = round_index == 2
        metrics = aggregate_with_rule(self, round_index, server, updates)
        distilling[0] = False
        if round_index == 2:
            out.averaged = copy.deepcopy(server.state.averaged)
            out.distilled = copy.deepcopy(server.model.state_dict())
            out.generator = copy.deepcopy(server.state.generator.state_dict())
        return metrics

    code_order = {t + 1: [u[0] for u in ups] for t, ups in code.uploads.items()}
    patches = [(DaFKD, "local_update", upload), (DaFKD, "aggregate_with_rule", recording_aggregate),
               (DaFKD, "distillation_set", lambda self, t, g: code.samples[t - 1].clone()),
               (Context, "client_order", lambda self, t, n: list(code_order[t])),
               (dafkd_module, "correlation_weights", recording_weights),
               (dafkd_module, "ensemble_teacher", recording_teacher)]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        run_federation(ours_config(args, seed, 2), data_dir)
    finally:
        originals = {"local_update": local_update, "aggregate_with_rule": aggregate_with_rule,
                     "distillation_set": distillation_set, "client_order": client_order,
                     "correlation_weights": weights, "ensemble_teacher": teacher}
        for owner, name, _ in patches:
            setattr(owner, name, originals[name])
    return out


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def compare_states(theirs: dict[str, torch.Tensor], ours: dict[str, torch.Tensor], names: dict[str, str],
                   parameters: set[str], step: float = 1e-4) -> dict[str, float]:
    """Largest absolute difference of the parameters, of the BatchNorm running means and variances (absolute and
    relative to ours, floor 1e-3), and of the batch counters, between two states (released names → ours), and the
    share of parameter entries that differ by more than half an Adam ``step`` (the learning rate: Adam's first step
    moves every parameter by ±lr, whatever its gradient's size, so a gradient whose sign is decided by rounding
    makes a difference of 2·lr)."""
    diff: dict[str, float] = {"params": 0.0, "bn_mean": 0.0, "bn_var": 0.0, "bn_rel": 0.0, "bn_count": 0.0}
    off, entries = 0, 0
    for theirs_key, our_key_ in names.items():
        a, b = theirs[theirs_key].double(), ours[our_key_].double()
        d = float((a - b).abs().max()) if a.numel() else 0.0
        if our_key_ in parameters:
            diff["params"] = max(diff["params"], d)
            off, entries = off + int(((a - b).abs() > step / 2).sum()), entries + a.numel()
        elif our_key_.endswith("num_batches_tracked"):
            diff["bn_count"] = max(diff["bn_count"], d)
        else:
            kind = "bn_mean" if our_key_.endswith("running_mean") else "bn_var"
            diff[kind] = max(diff[kind], d)
            diff["bn_rel"] = max(diff["bn_rel"], float(((a - b).abs() / b.abs().clamp(min=1e-3)).max()))
    diff["params_off"] = off / max(entries, 1)
    return diff


def code_test_passes(code: CodeRound, args: argparse.Namespace, seed: int, data: PreparedDataset,
                     model: torch.nn.Module, names: dict[str, str]) -> float:
    """Our ``student_bn_stats: test`` passes (bench/algorithms/server_bn.py) run on the code's distilled student as
    it was before its own test-set passes: the largest difference of the BatchNorm buffers they give from the code's
    (the rule alone, on identical parameters)."""
    assert code.before_test_passes is not None and code.distilled is not None
    model = copy.deepcopy(model)
    model.load_state_dict({names[k]: v for k, v in code.before_test_passes.items()})
    stub = types.SimpleNamespace(ctx=types.SimpleNamespace(
        test_x=to_tensor(data.test_x, data, torch.device("cpu"), "half"), config=ours_config(args, seed, 2)))
    ServerBNRule.test_set_passes(stub, model)  # type: ignore[arg-type]
    state = model.state_dict()
    return max(max_abs(code.distilled[k], state[v]) for k, v in names.items()
               if "running" in v and not v.startswith(dafkd_module.HEAD))


def accuracy(model: torch.nn.Module, state: dict[str, torch.Tensor], names: dict[str, str] | None,
             data: PreparedDataset) -> float:
    """The test accuracy of ``state`` (released names renamed by ``names``) in eval mode."""
    model = copy.deepcopy(model)
    model.load_state_dict({names[k]: v for k, v in state.items()} if names else state)
    model.eval()
    with torch.no_grad():
        logits = model(to_tensor(data.test_x, data, torch.device("cpu"), "half"))[1]
    return float((logits.argmax(1) == torch.from_numpy(data.test_y)).double().mean())


def one_round(args: argparse.Namespace, data: PreparedDataset, data_dir: Path, seed: int) -> dict[str, Any]:
    """The released code's first distilling round and ours on its inputs, compared (:func:`compare_states`)."""
    torch.set_num_threads(1)
    code = run_code_rounds(args.checkout.resolve(), data, args, seed)
    if code.errors or code.distilled is None or code.alpha is None or code.generator is None:
        raise BenchError("the released code logged an error or skipped its distillation: "
                         + "; ".join(e.splitlines()[-1] for e in code.errors if e.strip()) or "no distillation")
    ours_model = ours_config(args, seed, 2)
    from bench.models import build_model

    reference = build_model("dafkd_resnet11", (3, 32, 32), 10, seed=seed, key=("init", "model"))
    generator = build_model("dcgan_generator", (3, 32, 32), 10, seed=seed, key=("init", "generator"), noise_dim=100)
    model_keys = key_map(code.uploads[0][0][2], reference.state_dict())
    generator_keys = key_map(code.uploads[0][0][3], generator.state_dict())
    ours = run_ours_on(code, args, seed, data_dir, model_keys, generator_keys)
    assert ours.alpha is not None and ours.teacher is not None and ours.distilled is not None
    assert ours.averaged is not None and ours.generator is not None
    teacher = torch.cat([code.teacher[i] for i in sorted(code.teacher)])
    control = run_ours_on(code, args, seed, data_dir, model_keys, generator_keys, teacher)
    assert control.distilled is not None
    parameters = {k for k, _ in reference.named_parameters()}
    heads = {k: v for k, v in model_keys.items() if not v.startswith(dafkd_module.HEAD)}
    distilled = compare_states(code.distilled, ours.distilled, heads, parameters, args.es_lr)
    same_teacher = compare_states(code.distilled, control.distilled, heads, parameters, args.es_lr)
    ours_names = {v: v for v in heads.values()}
    rounding = compare_states(control.distilled, ours.distilled, ours_names, parameters, args.es_lr)
    averaged = compare_states(code.averaged, ours.averaged, heads, parameters)
    test_passes = code_test_passes(code, args, seed, data, reference, model_keys)
    moved = max(max_abs(code.distilled[k], code.averaged[k]) for k, v in heads.items() if v in parameters)
    return {"seed": seed, "config": ours_model.algorithm.params, "samples": len(code.samples[1]),
            "alpha": max_abs(code.alpha, ours.alpha), "alpha_max": float(code.alpha.max()),
            "teacher": max_abs(teacher, ours.teacher), "teacher_scale": float(teacher.abs().max()),
            "averaged": averaged, "distilled": distilled,
            "distilled_same_teacher": same_teacher, "rounding_control": rounding, "test_passes": test_passes,
            "accuracy": {"released": accuracy(reference, code.distilled, model_keys, data),
                         "ours": accuracy(reference, ours.distilled, None, data),
                         "ours_code_teacher": accuracy(reference, control.distilled, None, data)}, "distillation_moved": moved,
            "generator": max(max_abs(code.generator[k], ours.generator[v]) for k, v in generator_keys.items())}


TOLERANCES = {"alpha": 1e-6, "teacher": 1e-5, "averaged": 1e-6, "test_passes": 1e-5, "generator": 0.0,
              "control_factor": 2.0}


def agreement(r: dict[str, Any]) -> list[tuple[str, str, str, str, bool]]:
    """The one-round checks of one seed: (quantity, released − ours, rounding control, tolerance, holds).

    Float tolerances: α̂ 1e-6 (a quotient of float32 sigmoids against a softmax of log-sigmoids, values ≤ 1);
    teacher logits 1e-5 relative to the largest |logit| (sums of K float32 products in another order); ŵ 1e-6 (the same
    weighted sums); the test-set passes on identical parameters 1e-5; the broadcast generator exactly (a copy). The
    distilled weights and the buffers the test passes leave cannot be held to a float tolerance: Adam's first step
    moves every parameter by ±lr whatever the size of its gradient, so a gradient whose sign rounding decides gives
    2·lr, and later steps carry it on. Their tolerance is the rounding control — ours again, its teacher replaced by
    the code's (a change of the teacher at float32 rounding level only): released − ours may be at most twice ours −
    that control."""
    t, a, d, c = TOLERANCES, r["averaged"], r["distilled"], r["rounding_control"]
    factor = t["control_factor"]
    rows = [("α̂", f"{r['alpha']:.1e}", "", f"{t['alpha']:.0e}", r["alpha"] <= t["alpha"]),
            ("teacher logits Σ α̂ z", f"{r['teacher']:.1e}", "", f"{t['teacher']:.0e} × {max(1.0, r['teacher_scale']):.2f}",
             r["teacher"] <= t["teacher"] * max(1.0, r["teacher_scale"])),
            ("ŵ parameters / BN means / BN variances", f"{a['params']:.1e} / {a['bn_mean']:.1e} / {a['bn_var']:.1e}",
             "", f"{t['averaged']:.0e}", max(a["params"], a["bn_mean"], a["bn_var"]) <= t["averaged"]),
            ("broadcast generator (the last client's)", f"{r['generator']:.1e}", "", "0", r["generator"] <= t["generator"]),
            ("BN buffers of the test-set passes, on the code's distilled parameters", f"{r['test_passes']:.1e}", "",
             f"{t['test_passes']:.0e}", r["test_passes"] <= t["test_passes"])]
    for label, key in (("distilled parameters, max", "params"), ("distilled parameters, share off by > lr/2", "params_off"),
                       ("distilled BN means (after the test passes)", "bn_mean"),
                       ("distilled BN variances (after the test passes)", "bn_var")):
        rows.append((label, f"{d[key]:.1e}", f"{c[key]:.1e}", f"{factor:g} × control", d[key] <= factor * c[key]))
    acc = r["accuracy"]
    rows.append(("test accuracy of the distilled model (released / ours / ours, code's teacher)",
                 f"{acc['released']:.4f} / {acc['ours']:.4f}", f"{acc['ours_code_teacher']:.4f}", "—", True))
    return rows


def one_round_report(results: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    lines = [f"# DaFKD: one server round, the released code ({COMMIT[:7]}) and ours on the same inputs", "",
             f"`{command}`", "",
             f"{args.clients} clients (all in every round), the first {args.train_images} digits at 32x32x3, batch "
             f"{args.batch_size}, {args.local_epochs} local epoch(s); the code's round 1 (its first distillation): "
             f"D̂^g {args.ed_epoch} × {args.batch_size} samples, {args.ed_epoch} passes, client lr {args.lr:g}, distillation "
             f"lr {args.es_lr:g}, τ = 20; float32, "
             f"CPU, device semantics {args.device_semantics}. Largest absolute differences; the rounding control is "
             "ours against ours with the code's teacher logits (tolerances: `agreement` in the script).", ""]
    for r in results:
        lines += [f"## Seed {r['seed']}", "", "| quantity | released − ours | rounding control | tolerance | holds |",
                  "|---|---|---|---|---|"]
        lines += [f"| {q} | {v} | {c or '—'} | {t} | {'yes' if ok else '**no**'} |" for q, v, c, t, ok in agreement(r)]
        lines += ["", f"The distillation moved the parameters by up to {r['distillation_moved']:.1e}; the BatchNorm batch "
                      f"counters differ by {r['distilled']['bn_count']:.0f} (ours copies the first client's, the code averages "
                      "them as floats and truncates them on loading; no value depends on them at momentum 0.1).", ""]
    return "\n".join(lines)


# -- curves over seeds ----------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run's per-round test accuracy."""

    side: str
    seed: int
    accuracy: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    error: str = ""


def run_released(checkout: Path, seed: int, args: argparse.Namespace, work: Path) -> Run:
    run_dir = work / "released" / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)  # it writes DaFKD_mnist.txt here
    settings = {"seed": seed, "train_images": args.train_images, "data_dir": str(work / "bench-data"),
                "cuda_semantics": args.device_semantics == "cuda",
                "args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str))}}
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    with open(run_dir / "stdout.log", "w") as out, open(run_dir / "stderr.log", "w") as err:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), CHILD, str(checkout), json.dumps(settings)],
                              cwd=run_dir, stdout=out, stderr=err, env=env)
    log = (run_dir / "stderr.log").read_text()
    run = Run("released", seed, parse_released(log))
    if done.returncode != 0 or "Error!" in log:
        run.error = f"the released code failed or logged an error ({run_dir / 'stderr.log'})"
    return run


def run_ours(seed: int, args: argparse.Namespace, data_dir: Path) -> Run:
    """Ours on the workload; the diagnostics of NOTES §6 R10 (ensemble accuracies, ŵ's), which change no weight,
    are not evaluated."""
    run = Run("ours", seed)
    evaluations = DaFKD.evaluations
    DaFKD.evaluations = lambda self: [e for e in evaluations(self) if e.model != "method"]  # type: ignore[method-assign]
    try:
        run_federation(ours_config(args, seed, args.rounds), data_dir,
                       progress=lambda t, row: run.accuracy.append(float(row["global_acc"])))
    finally:
        DaFKD.evaluations = evaluations  # type: ignore[method-assign]
    return run


def run_one(task: tuple[str, int], checkout: Path, args: argparse.Namespace, work: Path) -> Run:
    side, seed = task
    torch.set_num_threads(1)
    register_digits32(args.train_images)
    started = time.perf_counter()
    try:
        run = run_released(checkout, seed, args, work) if side == "released" else run_ours(seed, args, work / "bench-data")
    except BenchError as exc:
        run = Run(side, seed, error=str(exc))
    run.wall_s = time.perf_counter() - started
    return run


def mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.3f}"


def curves_report(runs: list[Run], args: argparse.Namespace, command: str) -> str:
    sides = {side: sorted((r for r in runs if r.side == side and not r.error), key=lambda r: r.seed)
             for side in ("released", "ours")}
    lines = [f"# DaFKD: the released code ({COMMIT[:7]}) and ours (mode: code), per round", "", f"`{command}`", "",
             f"{args.clients} clients (all in every round), the first {args.train_images} digits at 32x32x3, "
             f"{args.rounds} rounds × {args.local_epochs} local epoch(s), batch {args.batch_size}, D̂^g "
             f"{args.ed_epoch} × {args.batch_size} samples over {args.ed_epoch} passes, client lr {args.lr:g}, "
             f"distillation lr {args.es_lr:g}, τ = 20; seeds "
             f"{' '.join(map(str, args.seeds))}; CPU, device semantics {args.device_semantics}. Test accuracy (450 "
             "images), mean ± std over seeds; Welch's t-test of the two sides' means.", "",
             "| round | released code | ours, mode: code | Welch p |", "|---|---|---|---|"]
    for t in range(args.rounds):
        values = {s: [r.accuracy[t] for r in group if len(r.accuracy) > t] for s, group in sides.items()}
        lines.append(f"| {t + 1} | {mean_std(values['released'])} | {mean_std(values['ours'])} | "
                     f"{p_text(welch_p(values['released'], values['ours']))} |")
    lines += ["", "Per seed, the last round: " + "; ".join(
        f"{s} " + ", ".join(f"{r.seed}: {r.accuracy[-1]:.3f}" for r in group if r.accuracy) for s, group in sides.items())]
    failed = [r for r in runs if r.error]
    if failed:
        lines += ["", "Failed runs:"] + [f"- {r.side} seed {r.seed}: {r.error}" for r in failed]
    return "\n".join(lines)


# -- command line ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help=f"checkout of haozhaowang/DaFKD2023 at commit {COMMIT[:7]}")
    parser.add_argument("--one-round", action="store_true", help="one server round on identical inputs (else curves)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="run seeds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=1.0, help="the Dirichlet partition's concentration")
    parser.add_argument("--train-images", type=int, default=256, help="the first N embedded digits are the clients'")
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--ed-epoch", type=int, default=3,
                        help="the code's ED_EPOCH: D̂^g batches and distillation passes per round")
    parser.add_argument("--lr", type=float, default=1e-3,
                        help="the code's --lr: the clients' Adam (classifier, discriminator, generator); 1e-3 is its "
                             "default, the authors' script sets 1e-4")
    parser.add_argument("--es-lr", type=float, default=1e-4, help="the code's --es_lr: the distillation's Adam")
    parser.add_argument("--device-semantics", choices=["cuda", "cpu"], default="cuda",
                        help="the released code's .cpu().state_dict() snapshots: copies as on a GPU (default, what "
                             "code mode follows) or views of the live model as on a CPU (§1.7.19)")
    parser.add_argument("--sides", nargs="+", choices=["released", "ours"], default=["released", "ours"],
                        help="which sides' curve runs to run")
    parser.add_argument("--report-from", type=Path, nargs="+", metavar="RUNS_JSON",
                        help="write report.md from these runs.json files (runs of the same settings made apart) "
                             "instead of running")
    parser.add_argument("--jobs", type=int, default=1, help="curve runs at once, each in its own process")
    parser.add_argument("--work", type=Path, help="folder for the data and the released code's logs (default: temp)")
    parser.add_argument("--out", type=Path, help="folder for the results (default: the work folder)")
    args = parser.parse_args(argv)
    for name in ("rounds", "clients", "train_images", "local_epochs", "batch_size", "ed_epoch", "jobs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.train_images > 1347:
        parser.error(f"--train-images must be at most 1347 (the embedded digits), got {args.train_images}")
    if args.clients * args.batch_size > args.train_images:
        parser.error(f"--train-images {args.train_images} cannot give {args.clients} clients a batch of "
                     f"{args.batch_size} each; raise it or lower --clients or --batch-size")
    return args


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == [CHILD]:
        released_child(given[1], json.loads(given[2]))
        return 0
    args = parse_args(given)
    command = repeat_command("pipelines/dafkd/validation/released_code.py", given, args.checkout)
    try:
        require_checkout(args.checkout, ["main_fed.py", "DaFKD.py", "trainer/my_model_trainer_MTL.py"], "DaFKD",
                         "haozhaowang/DaFKD2023", COMMIT)
        work = (args.work or Path(tempfile.mkdtemp(prefix="dafkd-released-"))).resolve()
        out_dir = (args.out or work).resolve()
        data_dir = work / "bench-data"
        register_digits32(args.train_images)
        prepare_dataset(DATASET, data_dir)
        data = load_dataset(DATASET, data_dir)
        partition(data, args)
        if args.one_round:
            results = [one_round(args, data, data_dir, seed) for seed in args.seeds]
            text = one_round_report(results, args, command)
            write_json(out_dir / "one_round.json", {"settings": _settings(args), "results": results})
            write_text(out_dir / "one_round.md", text + "\n")
            print(text)
            return 0 if all(ok for r in results for *_, ok in agreement(r)) else 1
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runs: list[Run] = []
    if args.report_from:
        runs = [Run(**r) for f in args.report_from for r in json.loads(f.read_text())["runs"]]
        args.seeds = sorted({r.seed for r in runs})
        text = curves_report(runs, args, command)
        write_text(out_dir / "report.md", text + "\n")
        print(text)
        return 0
    tasks = [(side, seed) for seed in args.seeds for side in args.sides]
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for run in pool.imap_unordered(functools.partial(run_one, checkout=args.checkout.resolve(), args=args,
                                                         work=work), tasks):
            runs.append(run)
            print(f"{run.side} seed {run.seed}: {run.accuracy} {run.wall_s:.0f} s {run.error}", flush=True)
            write_json(out_dir / "runs.json", {"settings": _settings(args), "runs": [asdict(r) for r in runs]})
            write_text(out_dir / "report.md", curves_report(runs, args, command) + "\n")  # what is done so far
    text = curves_report(runs, args, command)
    write_text(out_dir / "report.md", text + "\n")
    print(text)
    return 1 if any(r.error for r in runs) else 0


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


if __name__ == "__main__":
    sys.exit(main())
