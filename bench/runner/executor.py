"""Executing one run with its records written (:func:`run_experiment`), as a worker of many
(:func:`run_quiet`), and the description of where many runs execute (:class:`Executor`,
:mod:`bench.runner.parallel`)."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench import cpu_kernels_in_force, kernel_level_name, parse_cpu_kernels
from bench.config import ExperimentConfig
from bench.runner.checkpoint import CheckpointPolicy, Checkpoints, Say, remove_checkpoint
from bench.runner.federation import ProgressFn, run_federation
from bench.errors import BenchError, Diverged
from bench.tracking import clear_run, log_mlflow, write_curves, write_failure, write_run


@dataclass(frozen=True)
class RunRequest:
    """One run and how to execute it: where its records go, its data and partition, and its
    checkpoints (when :class:`~bench.runner.checkpoint.CheckpointPolicy` says; removed when the run
    finishes unless ``keep_checkpoint``). Execution settings never change a result, so they are not in
    the config."""

    config: ExperimentConfig
    out_dir: Path
    data_dir: Path | None = None
    partition_dir: Path | None = None
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    keep_checkpoint: bool = False


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def run_folder(out_dir: Path) -> Iterator[Path]:
    """Hold ``out_dir`` for one run: created and checked writable before anything trains, and locked
    (``flock`` on the folder itself, so no file is added to it) until the run's records are written. A
    second run into a held folder is refused; the lock dies with its process, so a folder whose run was
    killed (``kill -9`` included) is free at once."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        handle = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise BenchError(f"cannot use {out} as a run folder ({exc.strerror}); give a folder you can write") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BenchError(f"run folder {out} is in use by another run; wait for it to finish, or give this run "
                             "another folder") from None
        try:
            fd, probe = tempfile.mkstemp(dir=out, prefix=".write-check.")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise BenchError(f"cannot write in run folder {out} ({exc.strerror}); give a folder you can write") from None
        yield out
    finally:
        os.close(handle)  # releases the lock


def run_experiment(request: RunRequest, progress: ProgressFn | None = None, mlflow: bool = True,
                   logger: Callable[[ExperimentConfig, Path], None] = log_mlflow, say: Say = _stderr) -> dict[str, Any]:
    """Run one experiment, write its records to ``out_dir`` (and, unless ``mlflow`` is False or the
    config says otherwise, log them to MLflow with ``logger``); return metrics.json's content.

    The folder is held for the run (:func:`run_folder`). A run whose folder holds a checkpoint of the
    same run resumes from it, and says so with ``say`` (one line; so is a checkpoint refused). A
    diverged run writes ``failure.json`` (never ``metrics.json``), is marked FAILED in MLflow and
    re-raises :class:`Diverged`; one that trained on after its divergence (``training.on_divergence: train_on``)
    also keeps its curves (``write_curves``), and its failure.json says so."""
    cfg = request.config
    log = mlflow and cfg.tracking.mlflow
    with run_folder(request.out_dir) as out:
        clear_run(out)
        checkpoints = Checkpoints(out, request.checkpoint, say) if request.checkpoint.every else None
        try:
            result = run_federation(cfg, request.data_dir, request.partition_dir, progress, checkpoints)
            if result.diverged is not None:
                write_curves(result, out)
                raise Diverged(result.diverged.round_index, result.diverged.client,
                               f"{result.diverged.reason}; trained on to round {cfg.training.rounds} "
                               "(training.on_divergence: train_on; curves.csv and records.csv hold every round)")
        except Diverged as exc:
            write_failure(out, cfg, str(exc))
            remove_checkpoint(out)
            if log:
                logger(cfg, out)
            raise
        write_run(result, out)
        if not request.keep_checkpoint:
            remove_checkpoint(out)
        if log:
            logger(cfg, out)
        return json.loads((out / "metrics.json").read_text())


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


def run_quiet(request: RunRequest, index: int = 0, rounds: Any = None) -> dict[str, Any] | Failure:
    """One run in a worker; ``rounds`` (a queue) hears ``(index, round)`` after every round."""
    progress = None if rounds is None else (lambda t, row: rounds.put((index, t)))
    try:
        return run_experiment(request, progress, mlflow=False)
    except (Diverged, BenchError) as exc:
        return Failure(f"{request.out_dir}: {exc}", isinstance(exc, Diverged))


@dataclass(frozen=True)
class Executor:
    """Where a suite's runs execute (results never depend on it).

    ``serial``: one after another in this process. ``processes``: ``jobs`` single-threaded spawned
    processes on this machine. ``ray``: Ray tasks on the cluster at ``ray_address`` (None: a local
    cluster of ``jobs`` CPUs started for the suite), each declaring ``cpus_per_run`` CPUs and
    ``gpus_per_run`` GPUs (a fraction lets several small runs share a GPU) and retried up to
    ``max_retries`` times when its worker or node dies — the retry resumes from the run's last
    checkpoint, which must therefore be on storage every node sees (see docs/scale.md). ``cpu_kernels``:
    the CPU-kernel variables the runs take, as provenance writes them (``native``, or ``A=a B=b``;
    bench/__init__.py); None: this process's. Other kernels than this process's run in started processes
    (a serial run then in one spawned process), since a process's kernels are chosen when torch first computes."""

    kind: Literal["serial", "processes", "ray"] = "processes"
    jobs: int = 2
    ray_address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    max_retries: int = 3
    cpu_kernels: str | None = None

    @property
    def switches_kernels(self) -> bool:
        """Whether the runs take other CPU kernels than this process's."""
        wanted = None if self.cpu_kernels is None else parse_cpu_kernels(self.cpu_kernels)
        return wanted is not None and wanted != cpu_kernels_in_force()

    def describe(self) -> str:
        where = (f"Ray ({self.ray_address or f'local cluster, {self.jobs} CPUs'})" if self.kind == "ray" else
                 "1 process" if self.kind == "serial" or self.jobs <= 1 else f"{self.jobs} processes")
        return where + ("" if self.cpu_kernels is None else f", CPU kernels {kernel_level_name(self.cpu_kernels)}")


def listen(rounds: Any, on_round: RoundFn) -> None:
    """Call ``on_round`` for every ``(index, round)`` a queue hears, until it hears None or its manager
    process is gone (Ctrl-C stops the manager with the suite; the suite then says "interrupted" alone)."""
    try:
        while (item := rounds.get()) is not None:
            on_round(*item)
    except (EOFError, ConnectionError):
        return
