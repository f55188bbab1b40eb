"""Run folders fabricated without training: records.csv, and curves.csv/metrics.json derived from it
the way the runner derives them (client mean: numpy's mean in client-id order; last5: numpy's nanmean
of the last 5 rounds; best: nanmax), with timing.json and provenance.json."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from bench.config import ExperimentConfig
from bench.tracking import curves_csv

PROVENANCE = {"machine": "x86_64", "cpu_capability": "AVX2", "torch": "2.14.1", "python": "3.11.7",
              "uv_lock_sha256": "lock", "platform": "Linux", "git_commit": "abc"}


def fabricate_run(run_dir: Path, config: ExperimentConfig, per_client: dict[str, dict[int, list[float]]],
                  run_level: dict[str, dict[int, float]], records: bool = True) -> dict:
    """Write a finished run: ``per_client`` metric -> round -> values in client-id order, ``run_level``
    metric -> round -> value. Returns metrics.json's content."""
    rounds = config.training.rounds
    rows = [(r, m, None, v) for m, by_round in run_level.items() for r, v in by_round.items()]
    rows += [(r, m, c, v) for m, by_round in per_client.items() for r, vs in by_round.items() for c, v in enumerate(vs)]
    rows.sort(key=lambda row: (row[0], row[1], -1 if row[2] is None else row[2]))
    curves = [{"round": r} for r in range(1, rounds + 1)]
    for metric, by_round in run_level.items():
        for r, v in by_round.items():
            curves[r - 1][metric] = v
    for metric, by_round in per_client.items():
        for r, vs in by_round.items():
            curves[r - 1][metric] = float(np.mean(vs))
    summary: dict = {"final": {}, "last5_mean": {}, "best": {}, "best_round": {}}
    for metric in ("global_acc", "local_acc", "train_loss"):
        values = np.array([row.get(metric, math.nan) for row in curves], dtype=float)
        if np.isnan(values).all():
            continue
        summary["final"][metric] = float(values[-1])
        summary["last5_mean"][metric] = float(np.nanmean(values[-5:]))
        if metric.endswith("acc"):
            summary["best"][metric] = float(np.nanmax(values))
            summary["best_round"][metric] = int(np.nanargmax(values)) + 1
    metrics = {"status": "ok", "config_sha256": config.sha256, "seed": config.seed, "algorithm": config.algorithm.name,
               "rounds": rounds, **summary}
    run_dir.mkdir(parents=True, exist_ok=True)
    if records:
        (run_dir / "records.csv").write_text("round,metric,client,value\n" + "".join(
            f"{r},{m},{'' if c is None else c},{v!r}\n" for r, m, c, v in rows))
    (run_dir / "curves.csv").write_text(curves_csv(curves))
    (run_dir / "timing.json").write_text(json.dumps({"train_time_s": 0.1 * rounds, "wall_time_s": 1.0}))
    (run_dir / "provenance.json").write_text(json.dumps({**PROVENANCE, "config_sha256": config.sha256}))
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    return metrics


def random_run(run_dir: Path, config: ExperimentConfig, rng: np.random.Generator, global_model: bool = True,
               records: bool = True) -> dict:
    """A run with random accuracies (multiples of 1/test size, as real ones) on the runner's schedule:
    evaluated every ``evaluation.every`` rounds and the last 5; train loss every round."""
    rounds, clients = config.training.rounds, config.partition.num_clients
    evaluated = sorted({*range(config.evaluation.every, rounds + 1, config.evaluation.every),
                        *range(max(1, rounds - 4), rounds + 1)})
    sizes = rng.integers(5, 40, size=clients)
    local = {r: [float(rng.integers(0, n + 1) / n) for n in sizes] for r in evaluated}
    run_level = {"train_loss": {r: float(rng.random()) for r in range(1, rounds + 1)}}
    if global_model:
        run_level["global_acc"] = {r: float(rng.integers(0, 451) / 450) for r in evaluated}
    return fabricate_run(run_dir, config, {"local_acc": local}, run_level, records)
