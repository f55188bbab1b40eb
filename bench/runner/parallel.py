"""Running many experiments: serially, in local processes, or on a Ray cluster (:class:`Executor`).

Results never depend on the executor: each run derives all randomness from its own seed and runs
single-threaded by default, and outcomes are handled in the order the requests were given.
"""
from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.errors import BenchError
from bench.runner.executor import DoneFn, Executor, Failure, RoundFn, RunRequest, listen, run_quiet
from bench.tracking import log_mlflow


def run_many(requests: list[RunRequest], executor: Executor | int = 1, on_round: RoundFn | None = None,
             on_done: DoneFn | None = None) -> list[dict[str, Any]]:
    """Run every request on ``executor`` (an int: that many local processes); results in request
    order. ``on_round`` and ``on_done`` are called in this process as runs progress and end.

    Workers only train and write records; this process logs every run to MLflow from those records,
    in request order, so workers never import MLflow and the store sees one writer. A diverged run
    is an outcome (its failure.json is its record; the report counts it); raises :class:`BenchError`
    listing every run that failed otherwise, after all have finished."""
    if isinstance(executor, int):
        executor = Executor("serial" if executor <= 1 else "processes", executor)

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
    elif executor.kind == "serial" or executor.jobs <= 1 or len(requests) <= 1:
        outcomes = record(run_quiet(r, i, _Direct(on_round) if on_round else None) for i, r in enumerate(requests))
    else:
        with multiprocessing.Manager() as manager, ProcessPoolExecutor(
                max_workers=executor.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            rounds = manager.Queue() if on_round else None
            listener = None if rounds is None else threading.Thread(target=listen, args=(rounds, on_round), daemon=True)
            if listener:
                listener.start()
            outcomes = record(pool.map(run_quiet, requests, range(len(requests)), [rounds] * len(requests)))
            if listener and rounds is not None:
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
