"""Where runs execute never changes what they compute: serial, local processes and a Ray cluster give
bitwise-identical records; a Ray task whose worker dies resumes; a shared MLflow server loses nothing."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.runner.checkpoint import EVERY_ROUND
from bench.runner.executor import Executor, RunRequest, listen
from bench.runner.parallel import run_many
from tests.conftest import small_config

RECORDS = ("metrics.json", "curves.csv", "records.csv")


def _requests(root: Path, data_dir: Path, rounds: int = 3) -> list[RunRequest]:
    configs = [small_config(seed=s, algorithm={"name": name}, training={"rounds": rounds})
               for name in ("fedavg", "fedproto") for s in (0, 1)]
    return [RunRequest(c, root / f"{c.algorithm.name}-s{c.seed}", data_dir) for c in configs]


def _files(requests: list[RunRequest]) -> list[bytes]:
    return [(r.out_dir / name).read_bytes() for r in requests for name in RECORDS]


@pytest.mark.slow
def test_serial_processes_and_ray_give_bitwise_identical_records(data_dir: Path, tmp_path: Path) -> None:
    outcomes = {}
    for kind in ("serial", "processes", "ray"):
        requests = _requests(tmp_path / kind, data_dir)
        rounds: list[tuple[int, int]] = []
        metrics = run_many(requests, Executor(kind, 2), lambda i, t: rounds.append((i, t)))
        assert [m["seed"] for m in metrics] == [0, 1, 0, 1]  # request order, whatever finished first
        assert sorted(rounds) == [(i, t) for i in range(4) for t in (1, 2, 3)]  # progress from every worker
        outcomes[kind] = _files(requests)
    assert outcomes["serial"] == outcomes["processes"] == outcomes["ray"]


def _kill_worker_after_round_3(rounds: list[int], killed: list[int]) -> None:
    """Kill -9 the Ray worker running the task once it has reported round 3 (a node failure)."""
    import psutil

    deadline = time.monotonic() + 120
    while len(rounds) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any("_run_task" in part for part in proc.info["cmdline"] or []):
            os.kill(proc.info["pid"], signal.SIGKILL)
            killed.append(proc.info["pid"])


@pytest.mark.slow
def test_a_ray_task_whose_worker_dies_is_retried_and_resumes_to_the_same_result(data_dir: Path,
                                                                                tmp_path: Path) -> None:
    reference = [RunRequest(small_config(training={"rounds": 40}), tmp_path / "reference", data_dir)]
    run_many(reference, Executor("serial"))
    request = [RunRequest(small_config(training={"rounds": 40}), tmp_path / "ray", data_dir, checkpoint=EVERY_ROUND)]
    killed: list[int] = []
    rounds: list[int] = []
    killer = threading.Thread(target=_kill_worker_after_round_3, args=(rounds, killed))
    killer.start()
    run_many(request, Executor("ray", 1, max_retries=2), lambda i, t: rounds.append(t))
    killer.join()
    assert killed, "no Ray worker was found to kill"
    # resumed from a checkpoint (every round has one): rounds 1-3 are never trained twice
    assert [rounds.count(t) for t in (1, 2, 3)] == [1, 1, 1] and rounds[-1] == 40 and set(rounds) == set(range(1, 41))
    assert _files(request) == _files(reference)
    assert not (tmp_path / "ray" / "checkpoint.pt").exists()


@pytest.mark.slow
def test_ray_round_reports_all_reach_the_driver_and_a_lost_one_never_fails_the_run() -> None:
    """Workers send round reports without waiting and wait for them once, at the end of the run: the driver
    then holds them all; when the driver's inbox is gone, that wait passes (progress is lost, not the run)."""
    import ray

    from bench.runner.ray_executor import _RoundInbox, _RoundReporter

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        inbox = ray.remote(num_cpus=0)(_RoundInbox).remote()
        reporter = _RoundReporter(inbox)
        for item in [(0, 1), (0, 2), (1, 1)]:
            reporter.put(item)
        reporter.flush()
        assert ray.get(inbox.take.remote()) == [(0, 1), (0, 2), (1, 1)] and reporter.sent == []
        ray.kill(inbox)
        reporter.put((0, 3))
        reporter.flush()
    finally:
        ray.shutdown()


def test_an_unreachable_ray_cluster_is_one_clear_error(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(BenchError, match=r"cannot start Ray on 127\.0\.0\.1:1: .*--executor processes"):
        run_many(_requests(tmp_path, data_dir)[:1], Executor("ray", 1, ray_address="127.0.0.1:1"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_concurrent_runs_into_a_shared_mlflow_server_lose_nothing(data_dir: Path, tmp_path: Path) -> None:
    """`mlflow server` with a SQL backend and an artifact root, on loopback; six `bench run`
    processes log into it at once: six FINISHED runs."""
    import mlflow
    import requests

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "2",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--default-artifact-root",
         str(tmp_path / "artifacts")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"{uri}/health", timeout=5).ok:
                    break
            except requests.RequestException:  # not listening yet, or too busy starting to answer
                pass
            assert time.monotonic() < deadline and server.poll() is None, "mlflow server did not start"
            time.sleep(0.5)
        config = Path(__file__).resolve().parents[1] / "examples" / "fedavg_digits.yaml"
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
        procs = [subprocess.Popen([sys.executable, "-m", "bench.cli", "run", str(config), "--no-progress",
                                   "--data-dir", str(data_dir), "-S", "training.rounds=1", "-S", f"seed={s}",
                                   "-S", "tracking.experiment=shared", "--out", str(tmp_path / f"r{s}")], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in range(6)]
        outcomes = [(p.wait(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
        assert all(code == 0 for code, _ in outcomes), outcomes
        mlflow.set_tracking_uri(uri)
        runs = mlflow.search_runs(experiment_names=["shared"], output_format="list")
        assert sorted((r.data.tags["seed"], r.info.status) for r in runs) == [(str(s), "FINISHED") for s in range(6)]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_the_round_listener_stops_quietly_when_the_queue_manager_is_gone() -> None:
    """Ctrl-C ends the queue's manager process with the suite: the listener then stops without a traceback,
    having passed on every round it heard before."""
    heard: list[tuple[int, object]] = []

    class DeadManagerQueue:
        items = [(0, "round 1"), (1, "round 1")]

        def get(self) -> object:
            if self.items:
                return self.items.pop(0)
            raise EOFError

    listen(DeadManagerQueue(), lambda index, rnd: heard.append((index, rnd)))
    assert heard == [(0, "round 1"), (1, "round 1")]


def test_a_run_at_other_cpu_kernels_runs_in_a_process_started_at_them(data_dir: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What `bench audit --rerun` relies on: a run re-executed at the kernels its record names, whatever this
    process's; at this process's own kernels it runs here."""
    from bench import CPU_KERNEL_VARIABLES
    from bench.runner.parallel import run_at_kernels

    for key in (*CPU_KERNEL_VARIABLES, "BENCH_CPU_KERNELS"):
        monkeypatch.delenv(key, raising=False)
    portable = "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=AVX2"
    request = _requests(tmp_path, data_dir, rounds=1)[0]
    runs = {level: RunRequest(request.config, tmp_path / level, data_dir) for level in ("native", portable)}
    for level, run in runs.items():
        run_at_kernels(run, level)
        assert json.loads((run.out_dir / "provenance.json").read_text())["cpu_kernels"] == level
    assert os.environ.get("MKL_CBWR") is None  # this process's environment is left as it was
