"""The fixed cost of one ``bench run``: the process's wall time minus the run's own work, for this
checkout and for a base revision (before the cost was cut), as medians of paired repetitions.

* A ``bench run`` process (``examples/fedavg_digits.yaml``, 10 rounds, MLflow on, into a SQLite store
  already created) is timed from start to exit: interpreter, imports, the run, MLflow, teardown.
* The run's own work is the same run (``run_experiment``: set-up, training, evaluation, checkpoints,
  records; MLflow off) in this warmed-up process, where nothing is left to import.
* fixed cost = process wall - work. Each repetition times the base process, this checkout's process
  and the work, in an order that alternates, so that all three see the same load.

The base revision (``BENCH_FIXED_COST_BASE``, default the commit before the fixed cost was cut) runs from
its ``bench/`` sources extracted with ``git archive``, in this environment. ``uv run``'s own start-up
(it re-checks the environment's bytecode on every call; docs/performance.md "The fixed cost of one `bench run`")
comes before either process and is not in these figures.

Run:  uv run pytest benchmarks/test_fixed_cost.py --benchmark-only -s     (BENCH_REPS=n, default 7)
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path

from bench.experiment import load_config
from bench.runner.executor import RunRequest, run_experiment

REPS = int(os.environ.get("BENCH_REPS", "7"))
BASE = os.environ.get("BENCH_FIXED_COST_BASE", "5be8cc3")  # main before the fixed cost was cut
ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "fedavg_digits.yaml"
OVERRIDES = ["-S", "training.rounds=10"]
# The console script of either revision: `entry` where it exists, else `sys.exit(main())` as before.
LAUNCH = ("import sys, bench.cli as cli; sys.argv[0] = 'bench'; "
          "cli.entry() if hasattr(cli, 'entry') else sys.exit(cli.main())")


def extract(revision: str, into: Path) -> Path:
    """The ``bench/`` package of ``revision``, extracted into ``into``."""
    archive = subprocess.run(["git", "archive", "--format=tar", revision, "bench"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def bench_run(code: Path, out: Path, data_dir: Path) -> float:
    """Wall seconds of one ``bench run`` process running the package in ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", LAUNCH, "run", str(CONFIG), *OVERRIDES, "--no-progress", "--out", str(out),
                    "--data-dir", str(data_dir)], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def test_fixed_cost_of_bench_run(benchmark, data_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = extract(BASE, tmp_path / "base")
    config = load_config(CONFIG, [OVERRIDES[1]])
    walls: dict[str, list[float]] = {"base": [], "head": []}
    work: list[float] = []

    def measure_work() -> None:
        start = time.perf_counter()
        run_experiment(RunRequest(config, tmp_path / "warm", data_dir), mlflow=False)
        work.append(time.perf_counter() - start)

    def repetition() -> None:
        steps = [lambda: walls["base"].append(bench_run(base, tmp_path / "base-run", data_dir)),
                 lambda: walls["head"].append(bench_run(ROOT, tmp_path / "head-run", data_dir)), measure_work]
        turn = len(work) % 3
        for step in steps[turn:] + steps[:turn]:
            step()

    benchmark.pedantic(repetition, rounds=REPS, warmup_rounds=1)  # the warm-up creates the MLflow store
    work = work[-REPS:]
    fixed = {k: [w - u for w, u in zip(v[-REPS:], work)] for k, v in walls.items()}
    saved = statistics.median(b - h for b, h in zip(fixed["base"], fixed["head"]))
    ratio = statistics.median(h / b for b, h in zip(fixed["base"], fixed["head"]))
    load = os.getloadavg()[0]
    benchmark.extra_info.update(base=BASE, work_median_s=statistics.median(work),
                                **{f"{k}_wall_median_s": statistics.median(v[-REPS:]) for k, v in walls.items()},
                                **{f"{k}_fixed_median_s": statistics.median(v) for k, v in fixed.items()},
                                fixed_saved_median_s=saved, fixed_ratio_median=ratio, load_average=load)
    print(f"\n`bench run` fixed cost, {REPS} paired repetitions (load average {load:.2f}): the run's work "
          f"{statistics.median(work):.2f} s | base {BASE}: wall {statistics.median(walls['base'][-REPS:]):.2f} s, "
          f"fixed {statistics.median(fixed['base']):.2f} s | this checkout: wall "
          f"{statistics.median(walls['head'][-REPS:]):.2f} s, fixed {statistics.median(fixed['head']):.2f} s | "
          f"saved {saved:.2f} s per run (median of pairs), fixed-cost ratio {ratio:.2f}")
    assert saved > 0
