"""What cuts the fixed cost of one ``bench run`` keeps every guarantee: MLflow logged from a helper
process gets exactly what in-process logging gives, a failed helper loses nothing, a run without
MLflow leaves no store behind, and exiting without the interpreter's teardown still runs atexit
handlers, flushes output and returns the exit status (benchmarks/test_fixed_cost.py times them)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from bench.config import read_yaml_mapping
from bench.experiment import build_config
from bench.runner.executor import RunRequest, run_experiment
from bench.tracking import mlflow_record, write_mlflow
from bench.tracking.background import BackgroundLogger

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "fedavg_digits.yaml"


def _bench_run(data_dir: Path, out: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.cli", "run", str(CONFIG), "--no-progress", "--data-dir",
                           str(data_dir), "-S", "training.rounds=2", *overrides, "--out", str(out)],
                          capture_output=True, text=True, env=os.environ.copy())


def _logged(experiment: str) -> list:  # type: ignore[type-arg]
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    return mlflow.search_runs(experiment_names=[experiment], output_format="list")


def test_bench_run_logs_through_the_helper_exactly_what_in_process_logging_logs(data_dir: Path,
                                                                                 tmp_path: Path) -> None:
    import mlflow

    write_mlflow(dataclasses.replace(mlflow_record(build_config({}), tmp_path), experiment="warm"))  # a store exists
    done = _bench_run(data_dir, tmp_path / "run", "-S", "tracking.experiment=helper")
    assert done.returncode == 0, done.stderr
    assert "run: final global_acc=" in done.stdout  # printed and flushed before the process left
    config = build_config(read_yaml_mapping(tmp_path / "run" / "config.yaml", "run config"))
    write_mlflow(dataclasses.replace(mlflow_record(config, tmp_path / "run"), experiment="in-process"))
    [helper], [direct] = _logged("helper"), _logged("in-process")
    assert helper.info.status == direct.info.status == "FINISHED"
    assert helper.info.run_name == direct.info.run_name
    assert helper.data.params == direct.data.params and helper.data.metrics == direct.data.metrics
    own = ({k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")} for run in (helper, direct))
    assert next(own) == next(own)
    client = mlflow.MlflowClient()
    assert all([(m.step, m.value) for m in client.get_metric_history(helper.info.run_id, key)]
               == [(m.step, m.value) for m in client.get_metric_history(direct.info.run_id, key)]
               for key in helper.data.metrics)


def test_a_failed_helper_loses_nothing(data_dir: Path, tmp_path: Path) -> None:
    config = build_config({"training": {"rounds": 1}, "tracking": {"experiment": "fallback"}})
    logger = BackgroundLogger()
    assert logger.process is not None
    logger.process.kill()  # the helper died before the run ended
    run_experiment(RunRequest(config, tmp_path / "run", data_dir), logger=logger.log)
    assert [r.info.status for r in _logged("fallback")] == ["FINISHED"]


def test_a_run_without_mlflow_leaves_no_store(data_dir: Path, tmp_path: Path) -> None:
    done = _bench_run(data_dir, tmp_path / "run", "-S", "tracking.mlflow=false")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "metrics.json").exists()
    assert not (tmp_path / "mlflow.db").exists()


def test_an_unused_helper_is_stopped_having_written_nothing(tmp_path: Path) -> None:
    logger = BackgroundLogger()
    process = logger.process
    assert process is not None
    logger.close()
    assert process.returncode is not None
    assert not (tmp_path / "mlflow.db").exists()


def test_exit_without_teardown_runs_atexit_handlers_flushes_output_and_keeps_the_status() -> None:
    code = ("import atexit, sys, bench; atexit.register(lambda: print('atexit ran')); "
            "sys.stdout.write('unflushed'); bench.exit_without_teardown(3)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 3
    assert done.stdout == "unflushedatexit ran\n"


def test_bench_refuses_bad_input_with_status_2_through_the_console_entry(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.cli", "run", str(tmp_path / "missing.yaml")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("error: config file") and "Traceback" not in done.stderr
