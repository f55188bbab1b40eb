"""What checkpoints cost a run, under the old policy (a checkpoint after every round) and the default one
(``CheckpointPolicy()``: at least 60 s apart and 50 times the last write's time: bench/runner/checkpoint.py).

Two workloads, each run to the end with its records written (``run_experiment``, MLflow off):

* the workload shared with PFLlib and FL-bench (``test_shared_workload.py``): FedAvg, 20 clients x 600
  MNIST-shaped images, PFLlib's FedAvgCNN (582,026 parameters), batch 32, ``ROUNDS`` rounds (default 14,
  long enough that the default policy writes at least one checkpoint), evaluation every round;
* a run of the default suite (``params.yaml``): FedAvg on the IID setting, seed 0, 20 rounds;
* a run of each paper's pinned proxy (``pipelines/<paper>/params.yaml`` at the profile it names): the paper's own
  method on its first setting, its first seed.

Each repetition runs the workload three times back to back (no checkpoints, every round, the default
policy). Reported as medians over the repetitions: the checkpoint's size and the time one write takes
(``checkpoint_time_s`` over the checkpoints written), the share of the run's time checkpoints took
(``checkpoint_time_s / process_wall_time_s``, within one run, so free of run-to-run noise), and each
policy's whole run against the run without checkpoints (paired, same repetition). The load average
before and after is printed with the figures; docs/performance.md "Checkpoints" quotes them.

Run:  uv run pytest benchmarks/test_checkpoint_cost.py --benchmark-only -s   (BENCH_REPS=n, default 3;
      BENCH_CHECKPOINT_ROUNDS=r for the shared workload's rounds)
"""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from bench.config import ExperimentConfig
from bench.data import prepare_dataset
from bench.runner.checkpoint import CHECKPOINT, EVERY_ROUND, NEVER, CheckpointPolicy
from bench.runner.executor import RunRequest, run_experiment
from bench.suites import load_suite
from benchmarks.test_shared_workload import CONFIG
from tests.conftest import small_config

REPS = int(os.environ.get("BENCH_REPS", "3"))
ROUNDS = int(os.environ.get("BENCH_CHECKPOINT_ROUNDS", "14"))
POLICIES = {"none": NEVER, "every round": EVERY_ROUND, "default": CheckpointPolicy()}
ROOT = Path(__file__).resolve().parents[1]


def one_run(config: ExperimentConfig, policy: CheckpointPolicy, out: Path, data_dir: Path) -> dict[str, float]:
    """One whole run under ``policy``: its time, its checkpoints' time, how many it wrote and their size."""
    written: dict[int, int] = {}  # inode -> size of each checkpoint file seen after a round (each write is a new file)

    def seen(t: int, row: dict[str, float]) -> None:
        if (out / CHECKPOINT).exists():
            stat = (out / CHECKPOINT).stat()
            written[stat.st_ino] = stat.st_size

    run_experiment(RunRequest(config, out, data_dir, checkpoint=policy), seen, mlflow=False)
    timing = json.loads((out / "timing.json").read_text())
    return {"wall_s": timing["process_wall_time_s"], "checkpoint_s": timing["checkpoint_time_s"],
            "checkpoints": len(written), "size_mb": max(written.values(), default=0) / 1e6}


def measure(benchmark: Any, name: str, config: ExperimentConfig, data_dir: Path, tmp_path: Path) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in POLICIES}
    load = [os.getloadavg()[0]]

    def once() -> None:
        for label, policy in POLICIES.items():
            runs[label].append(one_run(config, policy, tmp_path / f"{label}-{len(runs[label])}", data_dir))

    benchmark.pedantic(once, rounds=REPS, warmup_rounds=0)
    load.append(os.getloadavg()[0])
    every, default, none = runs["every round"], runs["default"], runs["none"]
    info = {
        "rounds": config.training.rounds,
        "checkpoint_mb": statistics.median(r["size_mb"] for r in every),
        "write_s": statistics.median(r["checkpoint_s"] / r["checkpoints"] for r in every),
        "run_none_s": statistics.median(r["wall_s"] for r in none),
        "share_every": statistics.median(r["checkpoint_s"] / r["wall_s"] for r in every),
        "share_default": statistics.median(r["checkpoint_s"] / r["wall_s"] for r in default),
        "checkpoints_default": statistics.median(r["checkpoints"] for r in default),
        "ratio_every": statistics.median(e["wall_s"] / n["wall_s"] for e, n in zip(every, none)),
        "ratio_default": statistics.median(d["wall_s"] / n["wall_s"] for d, n in zip(default, none)),
        "load_before": load[0], "load_after": load[1]}
    benchmark.extra_info.update(info)
    print(f"\n{name}: {info['rounds']} rounds, medians of {REPS} repetitions, load average {load[0]:.2f} -> {load[1]:.2f}"
          f"\n  checkpoint {info['checkpoint_mb']:.1f} MB, one write {info['write_s']:.3f} s; run without checkpoints "
          f"{info['run_none_s']:.2f} s"
          f"\n  every round: {100 * info['share_every']:.2f} % of the run's time in checkpoints, whole run "
          f"{info['ratio_every']:.3f}x the run without"
          f"\n  default policy: {info['checkpoints_default']:.0f} checkpoint(s), {100 * info['share_default']:.2f} % of "
          f"the run's time, whole run {info['ratio_default']:.3f}x the run without")
    return info


def test_checkpoint_cost_on_the_shared_workload(benchmark: Any, data_dir: Path, tmp_path: Path) -> None:
    config = small_config(**{**CONFIG, "training": {**CONFIG["training"], "rounds": ROUNDS}})
    info = measure(benchmark, "shared workload (FedAvg, 20 clients, FedAvgCNN)", config, data_dir, tmp_path)
    assert info["share_default"] <= 0.02


def test_checkpoint_cost_on_a_default_suite_run(benchmark: Any, data_dir: Path, tmp_path: Path) -> None:
    config = load_suite(ROOT / "params.yaml").config("fedavg", "iid", 0)
    config = ExperimentConfig.model_validate({**config.to_dict(), "tracking": {"mlflow": False}})
    info = measure(benchmark, "default suite (fedavg, iid, seed 0)", config, data_dir, tmp_path)
    assert info["share_default"] <= 0.02


@pytest.mark.parametrize("paper", sorted(p.parent.name for p in (ROOT / "pipelines").glob("*/paper.py")))
def test_checkpoint_cost_on_a_paper_proxy_run(paper: str, benchmark: Any, data_dir: Path, tmp_path: Path) -> None:
    suite = load_suite(ROOT / "pipelines" / paper / "params.yaml")
    config = suite.config(paper, suite.settings_of(paper)[0], suite.params.suite.seeds[0])
    config = ExperimentConfig.model_validate({**config.to_dict(), "tracking": {"mlflow": False}})
    if not (data_dir / "prepared" / config.dataset.name).is_dir():
        prepare_dataset(config.dataset.name, data_dir)
    info = measure(benchmark, f"{paper} proxy ({paper}, {suite.settings_of(paper)[0]}, seed "
                   f"{suite.params.suite.seeds[0]})", config, data_dir, tmp_path)
    assert info["share_default"] <= 0.02
