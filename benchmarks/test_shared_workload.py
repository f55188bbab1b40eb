"""The workload shared with PFLlib and FL-bench: FedAvg, 20 clients x 600 MNIST-shaped images (the
embedded, fabricated ``synthetic28``: 12,000 train images split iid, 4,000 test images), PFLlib's
FedAvgCNN (``fedavg_cnn``, 582,026 parameters), batch 32, one local epoch, SGD, 2 rounds (380
optimiser steps a round), the global model evaluated on the 4,000 test images every round.

Against a bare PyTorch loop doing the same optimiser steps on one model and the same evaluation passes
(the 4,000 test images forwarded in eval mode at the training batch of 32), as medians of paired
repetitions (bare loop, FedAvg, FedAvg with chunking off, back to back):

* training-only ratio: the engine's ``train_time_s`` over the bare loop's training time;
* whole-run ratio with evaluation every round: training plus evaluation, engine over bare;
* minor page faults (``ru_minflt`` deltas) over the rounds, split into those of training (what a run
  without evaluation faults) and those of evaluation;
* the same for FedAvg with evaluation chunks of ``evaluation.batch_size`` = 1024 whatever their
  activations (:mod:`bench.engine.chunks` off: as before it existed);
* the evaluation pass alone: ``Context.accuracy`` against bare forwards at batch 32 and 1024, with
  the chunking off and on.

Not a test of correctness and never run by ``uv run pytest`` (timings belong here, not in tests/).
Measured figures: docs/performance.md "Speed".

Run:  uv run pytest benchmarks --benchmark-only -s     (BENCH_REPS=n repetitions, default 5)
"""
from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import bench.engine.chunks as chunks
import bench.runner.federation as federation
from bench.data import load_dataset
from bench.engine.context import Context
from bench.engine.setup import configure_torch
from bench.runner.federation import run_federation, to_tensor
from benchmarks.bare_loop import bare_data, bare_local_training
from tests.conftest import small_config

REPS = int(os.environ.get("BENCH_REPS", "5"))
CONFIG: dict[str, Any] = dict(
    dataset={"name": "synthetic28"},
    partition={"scheme": "iid", "num_clients": 20, "local_test_fraction": 0.0},
    model={"name": "fedavg_cnn"},
    training={"rounds": 2, "local_epochs": 1, "batch_size": 32, "optimizer": {"name": "sgd", "lr": 0.01}},
    evaluation={"every": 1})


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def bare_run(data_dir: Path) -> dict[str, float]:
    """FedAvg's optimiser steps on one model with no federation around it, and the global evaluation of
    every round as a bare forward over the test set at the training batch size."""
    cfg = small_config(**CONFIG)
    device, partition, (x, y), (test_x, test_y), shards = bare_data(cfg, "synthetic28", data_dir)
    data = load_dataset("synthetic28", data_dir)
    ctx = Context(cfg, data.image_shape, data.num_classes, device)
    model = ctx.build_model("server")
    optimizer = ctx.make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(0)
    size = cfg.training.batch_size
    train_s = eval_s = 0.0
    train_faults = eval_faults = 0
    model.train()
    for _ in range(cfg.training.rounds):
        tick, f0 = time.perf_counter(), faults()
        for cx, cy in shards:
            bare_local_training(model, optimizer, cx, cy, cfg.training.local_epochs or 1, size, gen)
        train_s += time.perf_counter() - tick
        train_faults += faults() - f0
        tick, f0 = time.perf_counter(), faults()
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(test_x[i:i + size])[1].argmax(1) == test_y[i:i + size]).sum())
                          for i in range(0, len(test_y), size))
        model.train()
        assert 0 <= correct <= len(test_y)
        eval_s += time.perf_counter() - tick
        eval_faults += faults() - f0
    return {"train_s": train_s, "eval_s": eval_s, "train_faults": train_faults, "eval_faults": eval_faults}


def engine_run(data_dir: Path, monkeypatch: pytest.MonkeyPatch, chunking: bool = True) -> dict[str, float]:
    """One FedAvg run; page faults over its rounds (from the start of round 1), split into those of
    :func:`~bench.runner.federation.evaluate` and the rest. ``chunking=False``: evaluation in chunks of
    ``evaluation.batch_size`` whatever their activations (as before :mod:`bench.engine.chunks`)."""
    marks: dict[str, int] = {"eval_faults": 0}
    original_rounds, original_evaluate = federation.evaluation_rounds, federation.evaluate

    def rounds_start(cfg: Any) -> set[int]:  # called once, just before round 1
        marks["start"] = faults()
        return original_rounds(cfg)

    def timed_evaluate(*args: Any) -> Any:
        f0 = faults()
        out = original_evaluate(*args)
        marks["eval_faults"] += faults() - f0
        return out

    with monkeypatch.context() as patch:
        patch.setattr(federation, "evaluation_rounds", rounds_start)
        patch.setattr(federation, "evaluate", timed_evaluate)
        if not chunking:
            patch.setattr(chunks, "ACTIVATION_BUDGET", 1 << 62)
        timing = run_federation(small_config(**CONFIG), data_dir).timing
    total = faults() - marks["start"]
    return {"train_s": timing["train_time_s"], "eval_s": timing["eval_time_s"],
            "train_faults": total - marks["eval_faults"], "eval_faults": marks["eval_faults"]}


def paired(benchmark: Any, runs: dict[str, Callable[[], dict[str, float]]]) -> dict[str, list[dict[str, float]]]:
    out: dict[str, list[dict[str, float]]] = {name: [] for name in runs}

    def once() -> None:
        for name, run in runs.items():
            out[name].append(run())

    benchmark.pedantic(once, rounds=REPS, warmup_rounds=1)
    return {name: values[-REPS:] for name, values in out.items()}


def median(values: list[dict[str, float]], key: Callable[[dict[str, float]], float]) -> float:
    return statistics.median(key(v) for v in values)


def test_shared_workload_fedavg_over_bare_loop(benchmark: Any, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_dataset("synthetic28", data_dir)
    r = paired(benchmark, {"bare": lambda: bare_run(data_dir), "engine": lambda: engine_run(data_dir, monkeypatch),
                           "unchunked": lambda: engine_run(data_dir, monkeypatch, chunking=False)})
    whole = lambda v: v["train_s"] + v["eval_s"]  # noqa: E731
    info: dict[str, float] = {}
    for name in r:
        info |= {f"{name}_train_s": median(r[name], lambda v: v["train_s"]),
                 f"{name}_eval_s": median(r[name], lambda v: v["eval_s"]), f"{name}_whole_s": median(r[name], whole),
                 f"{name}_train_faults": median(r[name], lambda v: v["train_faults"]),
                 f"{name}_eval_faults": median(r[name], lambda v: v["eval_faults"])}
        if name != "bare":
            for part, key in (("train", lambda v: v["train_s"]), ("eval", lambda v: v["eval_s"]), ("whole", whole)):
                info[f"{name}_{part}_ratio"] = statistics.median(key(e) / key(b) for e, b in zip(r[name], r["bare"]))
    benchmark.extra_info.update(info)
    rounds = CONFIG["training"]["rounds"]
    print(f"\nshared workload: {rounds} rounds, evaluation every round; medians of {REPS} paired repetitions"
          f"\n{'':>28}{'training':>10}{'evaluation':>12}{'whole run':>11}{'train ratio':>13}{'whole ratio':>13}"
          f"{'faults: training':>18}{'evaluation':>12}")
    for name, label in (("bare", "bare loop (eval at 32)"), ("engine", "FedAvg"),
                        ("unchunked", "FedAvg, eval chunks of 1024")):
        ratios = ("", "") if name == "bare" else (f"{info[f'{name}_train_ratio']:.3f}", f"{info[f'{name}_whole_ratio']:.3f}")
        print(f"{label:>28}{info[f'{name}_train_s']:>9.2f}s{info[f'{name}_eval_s']:>11.2f}s{info[f'{name}_whole_s']:>10.2f}s"
              f"{ratios[0]:>13}{ratios[1]:>13}{info[f'{name}_train_faults']:>18.0f}{info[f'{name}_eval_faults']:>12.0f}")


def test_evaluation_pass_against_bare_forward(benchmark: Any, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One evaluation of FedAvgCNN on the 4,000 test images: ``Context.accuracy`` with the config's batch of
    1024, chunking off (the budget lifted: 1024-image chunks) and on, against bare forwards at 32 and 1024."""
    cfg = small_config(**CONFIG)
    device = configure_torch(1, True, "cpu")
    data = load_dataset("synthetic28", data_dir)
    test_x, test_y = to_tensor(data.test_x, data, device), torch.from_numpy(data.test_y)
    ctx = Context(cfg, data.image_shape, data.num_classes, device)
    model = ctx.build_model("server")

    @torch.no_grad()
    def bare(size: int) -> int:
        model.eval()
        correct = sum(int((model(test_x[i:i + size])[1].argmax(1) == test_y[i:i + size]).sum())
                      for i in range(0, len(test_y), size))
        model.train()
        return correct

    def unchunked() -> float:
        with monkeypatch.context() as patch:
            patch.setattr(chunks, "ACTIVATION_BUDGET", 1 << 62)
            return ctx.accuracy(model, test_x, test_y)

    runs: dict[str, Callable[[], object]] = {
        "bare_32": lambda: bare(32), "bare_1024": lambda: bare(1024), "accuracy_unchunked": unchunked,
        "accuracy": lambda: ctx.accuracy(model, test_x, test_y)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    flts: dict[str, list[int]] = {k: [] for k in runs}
    results: dict[str, object] = {}

    def once() -> None:
        for name, run in runs.items():
            tick, f0 = time.perf_counter(), faults()
            results[name] = run()
            times[name].append(time.perf_counter() - tick)
            flts[name].append(faults() - f0)

    benchmark.pedantic(once, rounds=max(REPS, 5) * 2, warmup_rounds=1)
    assert results["accuracy"] == results["accuracy_unchunked"] == results["bare_32"] / len(test_y)
    ratio = {k: statistics.median(t / b for t, b in zip(times[k], times["bare_32"])) for k in runs}
    size = chunks.chunk_size(model.eval(), test_x, cfg.evaluation.batch_size)
    benchmark.extra_info.update({f"{k}_s": statistics.median(v) for k, v in times.items()})
    benchmark.extra_info.update({f"{k}_faults": statistics.median(v) for k, v in flts.items()})
    benchmark.extra_info.update({f"{k}_over_bare_32": v for k, v in ratio.items()}, chunk=size)
    print(f"\nevaluation of 4,000 images (medians; ratio to the bare forward at batch 32, paired), chunk {size}:")
    for k in runs:
        print(f"  {k:>20}: {statistics.median(times[k]) * 1e3:7.1f} ms  ratio {ratio[k]:.3f}  "
              f"minor faults {statistics.median(flts[k]):.0f}")
