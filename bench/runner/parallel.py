"""Running many experiments: serially, in local processes, or on a Ray cluster (:class:`Executor`).

Results never depend on the executor: each run derives all randomness from its own seed and runs
single-threaded by default, and outcomes are handled in the order the requests were given.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench import cpu_kernels_for_children, cpu_kernels_in_force, parse_cpu_kernels
from bench.errors import BenchError
from bench.runner.executor import DoneFn, Executor, Failure, RoundFn, RunRequest, listen, run_experiment, run_quiet
from bench.tracking import log_mlflow


def run_many(requests: list[RunRequest], executor: Executor | int = 1, on_round: RoundFn | None = None,
             on_done: DoneFn | None = None) -> list[dict[str, Any]]:
    """Run every request on ``executor`` (an int: that many local processes); results in request
    order. ``on_round`` and ``on_done`` are called in this process as runs progress and end.

    Workers only train and write records; this process logs every run to MLflow from those records,
    in request order, so workers never import MLflow and the store sees one writer. A diverged run
    is an outcome (its failure.json is its record; the report counts it); raises :class:`BenchError`
    listing every run that failed otherwise, after all have finished. Runs at other CPU kernels than
    this process's (``executor.cpu_kernels``) run in processes started at those kernels."""
    if isinstance(executor, int):
        executor = Executor("serial" if executor <= 1 else "processes", executor)
    switch = parse_cpu_kernels(executor.cpu_kernels) if executor.switches_kernels and executor.cpu_kernels else None
    with cpu_kernels_for_children(switch) if switch is not None else contextlib.nullcontext():
        outcomes = _outcomes(requests, executor, on_round, on_done)
    failures = [o.message for o in outcomes if isinstance(o, Failure) and not o.diverged]
    if failures:
        raise BenchError(f"{len(failures)} of {len(requests)} runs failed:\n  " + "\n  ".join(failures))
    return [o for o in outcomes if isinstance(o, dict)]


def _outcomes(requests: list[RunRequest], executor: Executor, on_round: RoundFn | None,
              on_done: DoneFn | None) -> list[dict[str, Any] | Failure]:
    def record(outcomes: Iterator[dict[str, Any] | Failure]) -> list[dict[str, Any] | Failure]:
        done = []
        for index, (request, outcome) in enumerate(zip(requests, outcomes)):  # logging overlaps the runs still going
            if request.config.tracking.mlflow:
                log_mlflow(request.config, request.out_dir)
            if on_done is not None:
                on_done(index, outcome)
            done.append(outcome)
        return done

    if executor.kind == "ray":
        from bench.runner.ray_executor import ray_outcomes

        with ray_outcomes(requests, executor, on_round) as outcomes_in_order:
            outcomes = record(outcomes_in_order)
    elif not executor.switches_kernels and (executor.kind == "serial" or executor.jobs <= 1 or len(requests) <= 1):
        outcomes = record(run_quiet(r, i, _Direct(on_round) if on_round else None) for i, r in enumerate(requests))
    else:
        jobs = 1 if executor.kind == "serial" else min(executor.jobs, len(requests))
        with multiprocessing.Manager() as manager, ProcessPoolExecutor(
                max_workers=max(jobs, 1), mp_context=multiprocessing.get_context("spawn")) as pool:
            rounds = manager.Queue() if on_round else None
            listener = None if rounds is None else threading.Thread(target=listen, args=(rounds, on_round), daemon=True)
            if listener:
                listener.start()
            outcomes = record(pool.map(run_quiet, requests, range(len(requests)), [rounds] * len(requests)))
            if listener and rounds is not None:
                rounds.put(None)
                listener.join()
    return outcomes


def run_at_kernels(request: RunRequest, cpu_kernels: str) -> dict[str, Any]:
    """One run, not logged to MLflow, at the CPU kernels ``cpu_kernels`` (as provenance writes them): in this
    process when they are its own, else in one process started at them. Raises what the run raised, or
    :class:`BenchError` with a started process's failure. Kernels that name no variables (``unknown``) run here."""
    wanted = parse_cpu_kernels(cpu_kernels)
    if wanted is None or wanted == cpu_kernels_in_force():
        return run_experiment(request, mlflow=False)
    with cpu_kernels_for_children(wanted), ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        outcome = pool.submit(run_quiet, request).result()
    if isinstance(outcome, Failure):
        raise BenchError(outcome.message)
    return outcome


@dataclass(frozen=True)
class _Direct:
    """A queue stand-in that calls ``on_round`` at once (serial runs in this process)."""

    on_round: RoundFn

    def put(self, item: tuple[int, int]) -> None:
        self.on_round(*item)
