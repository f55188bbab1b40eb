"""Suite runs as Ray tasks: on an existing cluster (its address) or a local one started for the suite.

Each run is one task that trains and writes its records exactly as a local worker process does
(:func:`~bench.runner.executor.run_quiet`), so results are bitwise those of the other executors.
Outcomes are handed back in request order, never in completion order, so MLflow logging and the
suite's failure list are ordered as with the local executors. A task whose worker or node dies is
retried (``max_retries``) and resumes from the run's last checkpoint. Workers start with this
process's CPU-kernel variables (``bench/__init__.py``; a pinned suite's level, set by ``run_many``) and refuse to run code that differs from the
driver's (source hash), since a cluster of mismatched checkouts would silently mix versions.
"""
from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench import CPU_KERNEL_VARIABLES
from bench.errors import BenchError
from bench.runner.executor import Executor, Failure, RoundFn, RunRequest, run_quiet

# Ray's `uv run` integration would start every worker through `uv run` in a copy of the working
# directory; workers here use the driver's interpreter and environment as they are (read when ray is
# imported, so set before any `import ray`).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def _worker_environment() -> dict[str, str]:
    keys = ["BENCH_CPU_KERNELS", *CPU_KERNEL_VARIABLES, "MLFLOW_TRACKING_URI", "BENCH_DATA_DIR"]
    return {k: os.environ[k] for k in keys if k in os.environ}


class _RoundInbox:
    """A Ray actor (reserving no CPU) that collects the workers' ``(index, round)`` reports."""

    def __init__(self) -> None:
        self.items: list[tuple[int, int]] = []

    def report(self, item: tuple[int, int]) -> None:
        self.items.append(item)

    def take(self) -> list[tuple[int, int]]:
        items, self.items = self.items, []
        return items


@dataclass
class _RoundReporter:
    """A worker's side of the inbox: ``put`` sends a report without waiting for its answer, ``flush``
    waits for all of them before the task returns, so the driver hears every round while the inbox lives;
    a report lost with it never fails the run. (A round trip per round, as ``ray.util.queue.Queue.put``
    makes, cost about 20 ms of each round's time while both cores trained: +0.4 s a default-suite run,
    measured.)"""

    inbox: Any
    sent: list[Any] = field(default_factory=list)

    def put(self, item: tuple[int, int]) -> None:
        self.sent.append(self.inbox.report.remote(item))

    def flush(self) -> None:
        import ray

        try:
            ray.get(self.sent)
        except ray.exceptions.RayError:  # the inbox is gone (its node died): progress is lost, never the run
            pass
        self.sent.clear()


def _relay(inbox: Any, on_round: RoundFn, stop: threading.Event) -> None:
    """In the driver: hand the inbox's reports to ``on_round`` a few times a second until ``stop``."""
    import ray

    while True:
        stopping = stop.wait(0.2)
        try:
            items = ray.get(inbox.take.remote())
        except ray.exceptions.RayError:  # the inbox is gone: no more progress, the runs go on
            return
        for item in items:
            on_round(*item)
        if stopping:
            return


def _run_task(request: RunRequest, index: int, rounds: _RoundReporter | None, source: str) -> dict[str, Any] | Failure:
    from bench.tracking import source_sha256

    if source_sha256() != source:
        return Failure(f"{request.out_dir}: this Ray worker runs other code (source sha256 {source_sha256()[:12]}, "
                       f"the driver's {source[:12]}); give every node the same checkout and environment", False)
    try:
        return run_quiet(request, index, rounds)
    finally:
        if rounds is not None:
            rounds.flush()


def _outcome(ref: Any, request: RunRequest) -> dict[str, Any] | Failure:
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:  # the task died more often than max_retries allows
        return Failure(f"{request.out_dir}: Ray task failed: {str(exc).splitlines()[0]}", False)


def _check_reachable(address: str) -> None:
    """Fail at once when a ``host:port`` address does not answer (Ray itself retries for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms: Ray resolves them and fails fast itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {host}:{port} ({exc.strerror or exc})") from None


def _start(executor: Executor) -> bool:
    """Connect to the cluster (or start a local one); True when this call started it."""
    import ray

    if ray.is_initialized():
        return False
    runtime_env = {"env_vars": _worker_environment()}
    try:
        if executor.ray_address:
            _check_reachable(executor.ray_address)
            ray.init(address=executor.ray_address, runtime_env=runtime_env, log_to_driver=False)
        else:
            ray.init(num_cpus=executor.jobs, num_gpus=0 if executor.gpus_per_run == 0 else None,
                     runtime_env=runtime_env, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = executor.ray_address or "a local cluster"
        raise BenchError(f"cannot start Ray on {where}: {str(exc).splitlines()[0] if str(exc) else exc!r}; "
                         "check the address (`ray status` on the head node) or use --executor processes") from None
    return True


@contextlib.contextmanager
def ray_outcomes(requests: list[RunRequest], executor: Executor,
                 on_round: RoundFn | None) -> Iterator[Iterator[dict[str, Any] | Failure]]:
    """Submit every request as a Ray task; yield their outcomes in request order."""
    import ray

    from bench.tracking import source_sha256

    started = _start(executor)
    try:
        task = ray.remote(num_cpus=executor.cpus_per_run, num_gpus=executor.gpus_per_run,
                          max_retries=executor.max_retries)(_run_task)
        inbox = ray.remote(num_cpus=0)(_RoundInbox).remote() if on_round else None
        stop = threading.Event()
        relay = None if inbox is None else threading.Thread(target=_relay, args=(inbox, on_round, stop), daemon=True)
        if relay:
            relay.start()
        source = source_sha256()
        reporter = None if inbox is None else _RoundReporter(inbox)
        refs = [task.remote(r, i, reporter, source) for i, r in enumerate(requests)]
        yield (_outcome(ref, request) for ref, request in zip(refs, requests))
        if relay:
            stop.set()
            relay.join()
    finally:
        if started:
            ray.shutdown()
