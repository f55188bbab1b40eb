"""Engine overhead on the tiny digits CNN: one FedAvg run (10 clients, 10 rounds of 2 local epochs at
batch 32: 800 optimiser steps, evaluation every round) against a bare PyTorch loop doing the same
optimiser steps on one model and the same evaluation passes (the global test set and each client's
local test split, forwarded at the training batch of 32). Medians of paired repetitions; target
<= 1.05 for training, never more than 1.15 (the assertion). Measured figures: docs/performance.md "Speed".

Not a test of correctness and never run by ``uv run pytest`` (timings belong here, not in tests/).

Run:  uv run pytest benchmarks --benchmark-only -s     (BENCH_REPS=n repetitions, default 7)
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

from bench.data import load_dataset
from bench.engine.context import Context
from bench.runner.federation import run_federation
from benchmarks.bare_loop import bare_data, bare_local_training
from tests.conftest import small_config

REPS = int(os.environ.get("BENCH_REPS", "7"))
CONFIG = dict(partition={"scheme": "iid", "num_clients": 10, "local_test_fraction": 0.2},
              training={"rounds": 10, "local_epochs": 2, "batch_size": 32},
              evaluation={"every": 1})


def bare_loop(data_dir: Path) -> tuple[float, float]:
    """The same steps as FedAvg's clients, on one model, with no federation around them, and every round
    the same evaluation passes; returns (training seconds, evaluation seconds)."""
    cfg = small_config(**CONFIG)
    device, partition, (x, y), (test_x, test_y), shards = bare_data(cfg, "digits", data_dir)
    data = load_dataset("digits", data_dir)
    splits = [(test_x, test_y)] + [(x[p], y[p]) for p in map(torch.from_numpy, partition.local_test)]
    ctx = Context(cfg, data.image_shape, data.num_classes, device)
    model = ctx.build_model("server")
    optimizer = ctx.make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(0)
    size = cfg.training.batch_size
    train_s = eval_s = 0.0
    model.train()
    for _ in range(cfg.training.rounds):
        start = time.perf_counter()
        for cx, cy in shards:
            bare_local_training(model, optimizer, cx, cy, cfg.training.local_epochs or 1, size, gen)
        train_s += time.perf_counter() - start
        start = time.perf_counter()
        model.eval()
        with torch.no_grad():
            for ex, ey in splits:
                correct = sum(int((model(ex[i:i + size])[1].argmax(1) == ey[i:i + size]).sum())
                              for i in range(0, len(ey), size))
                assert 0 <= correct <= len(ey)
        model.train()
        eval_s += time.perf_counter() - start
    return train_s, eval_s


def test_fedavg_overhead_over_bare_loop(benchmark, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    bare, bare_eval, federated, evaluation = [], [], [], []

    def pair() -> None:
        train_s, eval_s = bare_loop(data_dir)
        bare.append(train_s)
        bare_eval.append(eval_s)
        timing = run_federation(small_config(**CONFIG), data_dir).timing
        federated.append(timing["train_time_s"])
        evaluation.append(timing["eval_time_s"])

    benchmark.pedantic(pair, rounds=REPS, warmup_rounds=1)
    bare, bare_eval, federated, evaluation = (v[-REPS:] for v in (bare, bare_eval, federated, evaluation))
    ratio = statistics.median(f / b for f, b in zip(federated, bare))
    whole = statistics.median((f + e) / (b + be) for f, e, b, be in zip(federated, evaluation, bare, bare_eval))
    benchmark.extra_info.update(bare_median_s=statistics.median(bare), federated_median_s=statistics.median(federated),
                                bare_eval_median_s=statistics.median(bare_eval),
                                eval_median_s=statistics.median(evaluation), overhead_ratio=ratio,
                                whole_run_ratio=whole)
    print(f"\ndigits, {CONFIG['training']['rounds']} rounds, medians of {REPS} pairs: training bare "
          f"{statistics.median(bare):.3f} s | FedAvg {statistics.median(federated):.3f} s | ratio {ratio:.3f} "
          f"(target <= 1.05);  evaluation every round bare {statistics.median(bare_eval):.3f} s | FedAvg "
          f"{statistics.median(evaluation):.3f} s;  whole run ratio {whole:.3f}")
    assert ratio <= 1.15
