"""Clients trained together (``training.vectorize_clients``, bench/engine/vectorized.py) against the
serial loop, on whatever device this runs on: CUDA when there is one (``BENCH_DEVICE=cpu|cuda`` to
choose), else the CPU.

The workload is the one shared with PFLlib and FL-bench (benchmarks/test_shared_workload.py): FedAvg,
MNIST-shaped images (the embedded, fabricated ``synthetic28``), PFLlib's FedAvgCNN (582,026
parameters), clients of 600 images each, batch 32, one local epoch, SGD, 2 rounds; 10 and 20 clients a
round (``BENCH_CLIENTS``, default "10,20": 20 clients, all or half of them sampled each round). Only
training is timed (the run's ``train_time_s``; both variants evaluate alike). Each repetition runs the
loop and the vectorised run back to back, in alternating order; reported: the medians and the median
of the paired ratios loop / vectorised (above 1: vectorised is faster).

Not a test of correctness (tests/test_vectorized.py checks the equivalence) and never run by
``uv run pytest``. Measured figures: docs/performance.md "Clients trained together".

Run:  uv run pytest benchmarks/test_vectorized.py --benchmark-only -s     (BENCH_REPS=n, default 3)
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest
import torch

from bench.runner.federation import run_federation
from tests.conftest import small_config

REPS = int(os.environ.get("BENCH_REPS", "3"))
DEVICE = os.environ.get("BENCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
CLIENTS = [int(k) for k in os.environ.get("BENCH_CLIENTS", "10,20").split(",")]


def train_seconds(clients: int, vectorize: bool, data_dir: Path) -> float:
    config = small_config(
        dataset={"name": "synthetic28"}, device=DEVICE, model={"name": "fedavg_cnn"},
        partition={"scheme": "iid", "num_clients": 20, "local_test_fraction": 0.0},
        participation={"fraction": clients / 20},
        training={"rounds": 2, "local_epochs": 1, "batch_size": 32, "optimizer": {"name": "sgd", "lr": 0.01},
                  "vectorize_clients": vectorize},
        evaluation={"every": 2, "last": 1, "local_models": False})
    return run_federation(config, data_dir).timing["train_time_s"]


@pytest.mark.parametrize("clients", CLIENTS)
def test_clients_trained_together_against_the_loop(benchmark, clients: int,  # type: ignore[no-untyped-def]
                                                    data_dir: Path) -> None:
    times: dict[bool, list[float]] = {False: [], True: []}

    def pair() -> None:
        order = (False, True) if len(times[False]) % 2 == 0 else (True, False)
        for vectorize in order:
            times[vectorize].append(train_seconds(clients, vectorize, data_dir))

    benchmark.pedantic(pair, rounds=REPS, warmup_rounds=1)
    loop, together = times[False][-REPS:], times[True][-REPS:]
    speedup = statistics.median(a / b for a, b in zip(loop, together))
    benchmark.extra_info.update(device=DEVICE, clients=clients, loop_median_s=statistics.median(loop),
                                vectorized_median_s=statistics.median(together), speedup_median=speedup,
                                load_average=os.getloadavg()[0])
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU"
    print(f"\n{clients} clients a round, 2 rounds of FedAvg on {name} ({DEVICE}), medians of {REPS} pairs "
          f"(load average {os.getloadavg()[0]:.2f}): training loop {statistics.median(loop):.2f} s | together "
          f"{statistics.median(together):.2f} s | speed-up loop/together {speedup:.2f}x")
