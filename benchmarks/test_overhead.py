"""Engine overhead: one FedAvg run against a bare PyTorch loop doing the same optimiser steps on the
same model and data (target: ≤ 5 % overhead, never more than 15 %). Evaluation is timed separately.

Run:  uv run pytest benchmarks --benchmark-only -s
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.data import load_dataset
from bench.engine.context import Context
from bench.runner.federation import partition_for, run_federation, to_tensor
from bench.engine.setup import configure_torch
from tests.conftest import small_config

CONFIG = dict(partition={"scheme": "iid", "num_clients": 10, "local_test_fraction": 0.2},
              training={"rounds": 10, "local_epochs": 2, "batch_size": 32},
              evaluation={"every": 1})


def bare_loop(data_dir: Path) -> float:
    """The same steps as FedAvg's clients, on one model, with no federation around them."""
    cfg = small_config(**CONFIG)
    device = configure_torch(1, True, "cpu")
    data = load_dataset("digits", data_dir)
    partition = partition_for(cfg, data, None)
    x = to_tensor(data.train_x, data, device)
    y = torch.from_numpy(data.train_y)
    shards = [(x[p], y[p]) for p in map(torch.from_numpy, partition.train)]
    ctx = Context(cfg, data.image_shape, data.num_classes, device)
    model = ctx.build_model("server")
    optimizer = ctx.make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(0)
    model.train()
    start = time.perf_counter()
    for _ in range(cfg.training.rounds):
        for cx, cy in shards:
            for _ in range(cfg.training.local_epochs or 1):
                perm = torch.randperm(len(cy), generator=gen)
                for i in range(0, len(cy), cfg.training.batch_size):
                    idx = perm[i:i + cfg.training.batch_size]
                    loss = F.cross_entropy(model(cx[idx])[1], cy[idx])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
    return time.perf_counter() - start


def test_fedavg_overhead_over_bare_loop(benchmark, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    bare, federated, evaluation = [], [], []

    def pair() -> None:
        bare.append(bare_loop(data_dir))
        timing = run_federation(small_config(**CONFIG), data_dir).timing
        federated.append(timing["train_time_s"])
        evaluation.append(timing["eval_time_s"])

    benchmark.pedantic(pair, rounds=7, warmup_rounds=1)
    ratio = statistics.median(f / b for f, b in zip(federated, bare))
    benchmark.extra_info.update(bare_median_s=statistics.median(bare), federated_median_s=statistics.median(federated),
                                eval_median_s=statistics.median(evaluation), overhead_ratio=ratio)
    print(f"\nbare loop median {statistics.median(bare):.3f} s | FedAvg training median "
          f"{statistics.median(federated):.3f} s | ratio {ratio:.3f} (target <= 1.05) | evaluation, "
          f"separately: median {statistics.median(evaluation):.3f} s for {CONFIG['training']['rounds']} rounds")
    assert ratio <= 1.15
