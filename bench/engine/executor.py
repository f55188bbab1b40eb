"""Executing runs: one in this process with its records written, or many in parallel processes.

Results never depend on the executor: each run derives all randomness from its own seed and runs
single-threaded by default, and results are returned in the order the configs were given.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config import ExperimentConfig
from bench.engine.federation import ProgressFn, run_federation
from bench.errors import BenchError, Diverged
from bench.tracking import init_mlflow, log_mlflow, write_failure, write_run


@dataclass(frozen=True)
class RunRequest:
    config: ExperimentConfig
    out_dir: Path
    data_dir: Path | None = None
    partition_dir: Path | None = None


def run_experiment(request: RunRequest, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run one experiment, write its records to ``out_dir`` and MLflow; return metrics.json's content.

    A diverged run writes ``failure.json`` (never ``metrics.json``), is marked FAILED in MLflow and
    re-raises :class:`Diverged`."""
    cfg = request.config
    try:
        result = run_federation(cfg, request.data_dir, request.partition_dir, progress)
    except Diverged as exc:
        write_failure(request.out_dir, cfg, str(exc))
        if cfg.tracking.mlflow:
            log_mlflow(cfg, None, request.out_dir, "FAILED", str(exc))
        raise
    write_run(result, request.out_dir)
    if cfg.tracking.mlflow:
        log_mlflow(cfg, result, request.out_dir, "FINISHED")
    import json

    return json.loads((Path(request.out_dir) / "metrics.json").read_text())


def _run_quiet(request: RunRequest) -> dict[str, Any] | str:
    try:
        return run_experiment(request)
    except (Diverged, BenchError) as exc:
        return f"{request.out_dir}: {exc}"


def run_many(requests: list[RunRequest], jobs: int = 1) -> list[dict[str, Any]]:
    """Run every request (``jobs`` processes at once); results in request order.

    Raises :class:`BenchError` listing every failed run after all have finished."""
    for experiment in sorted({r.config.tracking.experiment for r in requests if r.config.tracking.mlflow}):
        init_mlflow(experiment)  # create the store once, before the fan-out
    if jobs <= 1 or len(requests) <= 1:
        outcomes = [_run_quiet(r) for r in requests]
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            outcomes = list(pool.map(_run_quiet, requests))
    failures = [o for o in outcomes if isinstance(o, str)]
    if failures:
        raise BenchError(f"{len(failures)} of {len(requests)} runs failed:\n  " + "\n  ".join(failures))
    return [o for o in outcomes if isinstance(o, dict)]
