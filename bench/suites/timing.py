"""Measuring seconds per round for ``time_of`` budgets (``bench suite time``; pipelines/fedakd/NOTES.md §8 R8, Table 3).

Every method of a timed setting trains the setting's first seed for a few probe rounds in this process,
one after another on the same hardware; the seconds between the ends of consecutive rounds (round 1 left
out: it holds one-off work such as FedSAC's contribution measurement; the last round left out: it is the
one always evaluated) are its round times. The methods take turns, ``repeats`` times, and each keeps its
median, so a load that comes and goes on a shared machine hits them alike. The file records the median
seconds per round per setting and method, the probe's protocol and the machine; runs whose budget is
``time_of`` derive their rounds from it, so they stay deterministic until it is measured again.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from bench.fileio import write_json
from bench.runner.federation import run_federation
from bench.suites import Suite


def probe_seconds(suite: Suite, method: str, setting: str, rounds: int, data_dir: Path | None) -> list[float]:
    """Seconds of rounds 2 … ``rounds`` − 1 of a ``rounds``-round probe of the run (method, setting, first seed),
    evaluated only at its last round, with no checkpoints."""
    config = suite.config(method, setting, suite.params.suite.seeds[0], timed=False)
    config = config.model_copy(update={
        "training": config.training.model_copy(update={"rounds": rounds}),
        "evaluation": config.evaluation.model_copy(update={"every": rounds, "last": 1}),
        "tracking": config.tracking.model_copy(update={"mlflow": False})})
    partition = suite.partition_dir(setting)
    ends: list[float] = []
    run_federation(config, data_dir, partition if (partition / "partition.json").exists() else None,
                   progress=lambda t, row: ends.append(time.perf_counter()))
    return [b - a for a, b in zip(ends[:-2], ends[1:-1])]


def timed_methods(suite: Suite, setting: str) -> list[str]:
    """The methods whose budget on ``setting`` is ``time_of``, and the methods they refer to, in suite order."""
    budgets = {m: suite.budget(m, setting) for m in suite.methods if suite.runs_on(m, setting)}
    timed = {m for m, b in budgets.items() if b is not None and b.time_of is not None}
    timed |= {b.time_of.method for m, b in budgets.items() if m in timed and b is not None and b.time_of is not None}
    return [m for m in suite.methods if m in timed]


def measure(suite: Suite, data_dir: Path | None = None, rounds: int = 5, repeats: int = 3,
            settings: list[str] | None = None) -> dict[str, Any]:
    """The median seconds per round of every method on every timed setting (or ``settings``)."""
    if rounds < 3:
        raise ValueError("a probe needs at least 3 rounds (the first and the last are left out)")
    chosen = settings or suite.timed_settings()
    samples: dict[str, dict[str, list[float]]] = {s: {m: [] for m in timed_methods(suite, s)} for s in chosen}
    for _ in range(repeats):
        for setting in chosen:
            for method in samples[setting]:
                samples[setting][method] += probe_seconds(suite, method, setting, rounds, data_dir)
    return {"settings": {s: {m: statistics.median(v) for m, v in by_method.items()} for s, by_method in samples.items()},
            "protocol": {"probe_rounds": rounds, "repeats": repeats, "statistic": "median of rounds 2..R-1"},
            "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                        "cpus": os.cpu_count(), "torch": torch.__version__,
                        "device": suite.partition_config(chosen[0]).device if chosen else "cpu",
                        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}}


def write_timing(suite: Suite, data_dir: Path | None = None, rounds: int = 5, repeats: int = 3) -> Path:
    """Measure and write the suite's timing file (``suite.timing``)."""
    return write_json(suite.timing_path, measure(suite, data_dir, rounds, repeats))
