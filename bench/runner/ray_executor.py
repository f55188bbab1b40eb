"""Suite runs as Ray tasks: on an existing cluster (its address) or a local one started for the suite.

Each run is one task that trains and writes its records exactly as a local worker process does
(:func:`~bench.runner.executor.run_quiet`), so results are bitwise those of the other executors.
Outcomes are handed back in request order, never in completion order, so MLflow logging and the
suite's failure list are ordered as with the local executors. A task whose worker or node dies is
retried (``max_retries``) and resumes from the run's last checkpoint. Workers start with this
process's CPU-kernel pinning (``bench/__init__.py``) and refuse to run code that differs from the
driver's (source hash), since a cluster of mismatched checkouts would silently mix versions.
"""
from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

from bench import CPU_KERNEL_VARIABLES
from bench.errors import BenchError
from bench.runner.executor import Executor, Failure, RoundFn, RunRequest, listen, run_quiet

# Ray's `uv run` integration would start every worker through `uv run` in a copy of the working
# directory; workers here use the driver's interpreter and environment as they are (read when ray is
# imported, so set before any `import ray`).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def _worker_environment() -> dict[str, str]:
    keys = ["BENCH_CPU_KERNELS", *CPU_KERNEL_VARIABLES, "MLFLOW_TRACKING_URI", "BENCH_DATA_DIR"]
    return {k: os.environ[k] for k in keys if k in os.environ}


def _run_task(request: RunRequest, index: int, rounds: Any, source: str) -> dict[str, Any] | Failure:
    from bench.tracking import source_sha256

    if source_sha256() != source:
        return Failure(f"{request.out_dir}: this Ray worker runs other code (source sha256 {source_sha256()[:12]}, "
                       f"the driver's {source[:12]}); give every node the same checkout and environment", False)
    return run_quiet(request, index, rounds)


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
    from ray.util.queue import Queue

    from bench.tracking import source_sha256

    started = _start(executor)
    try:
        task = ray.remote(num_cpus=executor.cpus_per_run, num_gpus=executor.gpus_per_run,
                          max_retries=executor.max_retries)(_run_task)
        rounds = Queue(actor_options={"num_cpus": 0}) if on_round else None
        listener = None if rounds is None else threading.Thread(target=listen, args=(rounds, on_round), daemon=True)
        if listener:
            listener.start()
        source = source_sha256()
        refs = [task.remote(r, i, rounds, source) for i, r in enumerate(requests)]
        yield (_outcome(ref, request) for ref, request in zip(refs, requests))
        if listener:
            rounds.put(None)
            listener.join()
    finally:
        if started:
            ray.shutdown()
