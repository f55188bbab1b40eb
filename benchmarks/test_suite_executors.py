"""Where a suite's runs execute, timed: the default suite under each executor, and what a Ray worker adds
per run.

* ``test_default_suite_under_each_executor``: ``bench suite train`` of the default suite
  (``params.yaml``: every method, 4 settings, 3 seeds, MLflow on, as a user runs it) as one command per
  executor — ``serial``, ``processes`` and ``ray`` (a local cluster started for the command), both of
  the latter with ``--jobs 2`` — each into its own root, timed from process start to exit. Then every
  run's ``metrics.json`` is compared across the three: they must be byte-identical.
  ``BENCH_SUITE_METHODS=fedavg,fedmd`` limits the methods (default: all; the three took 16 min here).
* ``test_what_a_ray_worker_adds_per_run``: the default suite's 12 FedAvg runs (MLflow off, so only the
  executor differs), in this process, paired repetitions in alternating order of: a process pool of 2
  (spawned for the call, as ``processes`` does), a local Ray cluster of 2 CPUs started and shut down for
  the call (``ray`` without an address), and a Ray cluster already running (first call: its workers
  start and import the project; second call: workers warm). Reported: medians, the start and shutdown of
  the cluster, and the added wall time per run against the process pool, ``(ray - processes) / 12``.

Not a test of correctness (tests/test_executors.py checks bitwise equality on small runs) and never run
by ``uv run pytest``. Measured figures: docs/performance.md "Executors" and docs/scale.md "What a Ray worker adds".

Run:  uv run pytest benchmarks/test_suite_executors.py --benchmark-only -s     (BENCH_REPS=n, default 3)
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.data import load_dataset
from bench.runner.executor import Executor
from bench.runner.federation import partition_for
from bench.runner.parallel import run_many
from bench.suites import load_suite

REPS = int(os.environ.get("BENCH_REPS", "3"))
ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
EXECUTORS = ("serial", "processes", "ray")
LAUNCH = "import sys, bench.cli as cli; sys.argv[0] = 'bench'; cli.entry()"


def bench_command(*args: str, env: dict[str, str] | None = None) -> float:
    """Wall seconds of one ``bench`` process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", LAUNCH, *args], check=True, capture_output=True,
                   env={**os.environ, **(env or {})})
    return time.perf_counter() - start


def test_default_suite_under_each_executor(benchmark, data_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    methods = [m for m in os.environ.get("BENCH_SUITE_METHODS", "").split(",") if m]
    selection = [arg for m in methods for arg in ("--method", m)]
    walls: dict[str, float] = {}

    def all_three() -> None:
        for kind in EXECUTORS:
            root = tmp_path / kind
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            common = ["--params", str(PARAMS), "--root", str(root), "--data-dir", str(data_dir)]
            bench_command("suite", "partition", *common)
            walls[kind] = bench_command("suite", "train", *common, *selection, "--executor", kind, "--jobs", "2",
                                        env={"MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"})

    benchmark.pedantic(all_three, rounds=1)
    records = {kind: {p.relative_to(tmp_path / kind): p.read_bytes()
                      for p in sorted((tmp_path / kind / "results").rglob("metrics.json"))} for kind in EXECUTORS}
    runs = len(records["serial"])
    assert runs > 0 and records["serial"] == records["processes"] == records["ray"]
    print(f"\ndefault suite, {runs} runs ({', '.join(methods) or 'every method'}), load average before "
          f"{os.getloadavg()[0]:.1f}; metrics.json byte-identical across the three executors")
    for kind in EXECUTORS:
        print(f"  {kind:9s} {walls[kind]:8.1f} s   {walls[kind] / runs:.2f} s a run   "
              f"{walls[kind] / walls['processes']:.2f}x processes")


def test_what_a_ray_worker_adds_per_run(benchmark, data_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import ray

    suite = load_suite(PARAMS, tmp_path, ["suite.base.tracking.mlflow=false"])
    for setting in suite.params.settings:
        config = suite.partition_config(setting)
        partition_for(config, load_dataset(config.dataset.name, data_dir), None).save(suite.partition_dir(setting))
    requests = suite.requests("fedavg", data_dir)
    times: dict[str, list[float]] = {k: [] for k in ("processes", "ray, cluster started for the call",
                                                     "ray, running cluster, cold workers",
                                                     "ray, running cluster, warm workers", "cluster start",
                                                     "cluster shutdown")}

    def timed(key: str, action: Callable[[], object]) -> None:
        start = time.perf_counter()
        action()
        times[key].append(time.perf_counter() - start)

    def train(kind: str) -> Callable[[], object]:
        def go() -> object:
            shutil.rmtree(tmp_path / "results", ignore_errors=True)
            return run_many(requests, Executor(kind, 2), lambda index, round_: None)
        return go

    def running_cluster() -> None:
        timed("cluster start", lambda: ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False))
        timed("ray, running cluster, cold workers", train("ray"))
        timed("ray, running cluster, warm workers", train("ray"))
        timed("cluster shutdown", ray.shutdown)

    def repetition() -> None:
        steps = [lambda: timed("processes", train("processes")),
                 lambda: timed("ray, cluster started for the call", train("ray")), running_cluster]
        turn = len(times["processes"]) % len(steps)
        for step in steps[turn:] + steps[:turn]:
            step()

    benchmark.pedantic(repetition, rounds=REPS)
    runs = len(requests)
    base = statistics.median(times["processes"])
    print(f"\nthe default suite's FedAvg: {runs} runs of {requests[0].config.training.rounds} rounds, 2 workers, "
          f"medians of {REPS} repetitions, load average after {os.getloadavg()[0]:.1f}")
    for key, values in times.items():
        median = statistics.median(values)
        added = "" if key.startswith("cluster") or key == "processes" else \
            f"   {(median - base) / runs:+.2f} s a run against processes"
        print(f"  {key:38s} {median:7.2f} s{added}")
