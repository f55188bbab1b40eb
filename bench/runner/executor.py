"""Executing runs: one in this process with its records written, or many in parallel processes.

Results never depend on the executor: each run derives all randomness from its own seed and runs
single-threaded by default, and results are returned in the order the configs were given.
"""
from __future__ import annotations

import json
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.config import ExperimentConfig
from bench.runner.checkpoint import remove_checkpoint
from bench.runner.federation import ProgressFn, run_federation
from bench.errors import BenchError, Diverged
from bench.tracking import clear_run, log_mlflow, write_failure, write_run


@dataclass(frozen=True)
class RunRequest:
    """One run and how to execute it: where its records go, its data and partition, and its
    checkpoints (every ``checkpoint_every`` rounds, 0: never; removed when the run finishes unless
    ``keep_checkpoint``). Execution settings never change a result, so they are not in the config."""

    config: ExperimentConfig
    out_dir: Path
    data_dir: Path | None = None
    partition_dir: Path | None = None
    checkpoint_every: int = 1
    keep_checkpoint: bool = False


def run_experiment(request: RunRequest, progress: ProgressFn | None = None, mlflow: bool = True) -> dict[str, Any]:
    """Run one experiment, write its records to ``out_dir`` (and, unless ``mlflow`` is False or the
    config says otherwise, log them to MLflow); return metrics.json's content.

    A run whose folder holds a checkpoint of the same run resumes from it. A diverged run writes
    ``failure.json`` (never ``metrics.json``), is marked FAILED in MLflow and re-raises :class:`Diverged`."""
    cfg = request.config
    log = mlflow and cfg.tracking.mlflow
    clear_run(request.out_dir)
    try:
        result = run_federation(cfg, request.data_dir, request.partition_dir, progress,
                                Path(request.out_dir) if request.checkpoint_every else None, request.checkpoint_every)
    except Diverged as exc:
        write_failure(request.out_dir, cfg, str(exc))
        remove_checkpoint(request.out_dir)
        if log:
            log_mlflow(cfg, request.out_dir)
        raise
    write_run(result, request.out_dir)
    if not request.keep_checkpoint:
        remove_checkpoint(request.out_dir)
    if log:
        log_mlflow(cfg, request.out_dir)
    return json.loads((Path(request.out_dir) / "metrics.json").read_text())


@dataclass(frozen=True)
class Failure:
    """A run that ended without metrics: it ``diverged`` (an outcome of the method, recorded in its
    failure.json and counted by the report) or its input was bad."""

    message: str
    diverged: bool


RoundFn = Callable[[int, int], None]
"""``(request index, round)``: a run finished a round."""
DoneFn = Callable[[int, "dict[str, Any] | Failure"], None]
"""``(request index, metrics or why it failed)``: a run ended."""


def _run_quiet(request: RunRequest, index: int = 0, rounds: Any = None) -> dict[str, Any] | Failure:
    """One run in a worker; ``rounds`` (a queue) hears ``(index, round)`` after every round."""
    progress = None if rounds is None else (lambda t, row: rounds.put((index, t)))
    try:
        return run_experiment(request, progress, mlflow=False)
    except (Diverged, BenchError) as exc:
        return Failure(f"{request.out_dir}: {exc}", isinstance(exc, Diverged))


def run_many(requests: list[RunRequest], jobs: int = 1, on_round: RoundFn | None = None,
             on_done: DoneFn | None = None) -> list[dict[str, Any]]:
    """Run every request (``jobs`` processes at once); results in request order. ``on_round`` and
    ``on_done`` are called in this process as runs progress and end.

    Worker processes only train and write records; this process logs every run to MLflow from
    those records, in request order, so workers never import MLflow and the store sees one writer.
    A diverged run is an outcome (its failure.json is its record; the report counts it); raises
    :class:`BenchError` listing every run that failed otherwise, after all have finished."""
    def record(outcomes: Iterator[dict[str, Any] | Failure]) -> list[dict[str, Any] | Failure]:
        done = []
        for index, (request, outcome) in enumerate(zip(requests, outcomes)):  # logging overlaps the runs still going
            if request.config.tracking.mlflow:
                log_mlflow(request.config, request.out_dir)
            if on_done is not None:
                on_done(index, outcome)
            done.append(outcome)
        return done

    if jobs <= 1 or len(requests) <= 1:
        outcomes = record(_run_quiet(r, i, _Direct(on_round) if on_round else None) for i, r in enumerate(requests))
    else:
        with multiprocessing.Manager() as manager, ProcessPoolExecutor(
                max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            rounds = manager.Queue() if on_round else None
            listener = threading.Thread(target=_listen, args=(rounds, on_round), daemon=True) if rounds else None
            if listener:
                listener.start()
            outcomes = record(pool.map(_run_quiet, requests, range(len(requests)), [rounds] * len(requests)))
            if listener:
                rounds.put(None)
                listener.join()
    failures = [o.message for o in outcomes if isinstance(o, Failure) and not o.diverged]
    if failures:
        raise BenchError(f"{len(failures)} of {len(requests)} runs failed:\n  " + "\n  ".join(failures))
    return [o for o in outcomes if isinstance(o, dict)]


@dataclass(frozen=True)
class _Direct:
    """A queue stand-in that calls ``on_round`` at once (serial runs in this process)."""

    on_round: RoundFn

    def put(self, item: tuple[int, int]) -> None:
        self.on_round(*item)


def _listen(rounds: Any, on_round: RoundFn) -> None:
    while (item := rounds.get()) is not None:
        on_round(*item)
