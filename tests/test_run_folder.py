"""A run folder belongs to one run while it runs: a second run into it is refused in one line (issue 29
item 2: two runs into one --out got each other's numbers), and the hold dies with its process, so a
folder whose run was killed with ``kill -9`` is free at once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.runner.checkpoint import CHECKPOINT
from bench.runner.executor import RunRequest, run_experiment, run_folder
from bench.errors import BenchError
from tests.conftest import small_config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fedavg_digits.yaml"
RECORDS = ("metrics.json", "curves.csv", "records.csv")


def test_a_second_run_into_a_held_folder_is_refused_and_touches_nothing(data_dir: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    run_experiment(RunRequest(small_config(training={"rounds": 1}), out, data_dir))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with run_folder(out):  # another run holds it
        config = tmp_path / "c.yaml"
        config.write_text("training: {rounds: 1}\ntracking: {mlflow: false}\n")
        assert main(["run", str(config), "--data-dir", str(data_dir), "--no-progress", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == f"error: run folder {out} is in use by another run; wait for it to finish, or give this run " \
                      "another folder\n"
        with pytest.raises(BenchError, match="in use by another run"):
            run_experiment(RunRequest(small_config(training={"rounds": 1}), out, data_dir))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the holder's records untouched
    run_experiment(RunRequest(small_config(training={"rounds": 1}), out, data_dir))  # free again


def test_two_commands_into_one_folder_one_is_refused_and_a_killed_holder_frees_it(data_dir: Path,
                                                                                  tmp_path: Path) -> None:
    """The attack, with real processes: `bench run` with lr 0.05 is training into --out when `bench run` with
    lr 0.01 is started into the same --out; the second exits 2 in one line. Then the first is killed with
    SIGKILL (its lock dies with it) and started again: it resumes and ends with an uninterrupted run's records."""
    command = [sys.executable, "-m", "bench.cli", "run", str(EXAMPLE), "--data-dir", str(data_dir), "--no-progress",
               "-S", "tracking.mlflow=false", "-S", "training.rounds=30", "--checkpoint-interval", "0"]
    out = tmp_path / "shared"
    subprocess.run([*command, "-S", "training.optimizer.lr=0.05", "--out", str(tmp_path / "alone")], check=True,
                   capture_output=True)
    first = subprocess.Popen([*command, "-S", "training.optimizer.lr=0.05", "--out", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / CHECKPOINT).exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.killpg(first.pid, signal.SIGSTOP)  # holds the folder for as long as the second command takes
    try:
        assert first.poll() is None and not (out / "metrics.json").exists()
        second = subprocess.run([*command, "-S", "training.optimizer.lr=0.01", "--out", str(out)],
                                capture_output=True, text=True)
        assert second.returncode == 2, second.stderr
        assert second.stderr == f"error: run folder {out} is in use by another run; wait for it to finish, or give " \
                                "this run another folder\n"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    again = subprocess.run([*command, "-S", "training.optimizer.lr=0.05", "--out", str(out)], capture_output=True,
                           text=True)
    assert again.returncode == 0, again.stderr
    assert f"resuming {out} after round " in again.stderr
    for name in RECORDS:
        assert (out / name).read_bytes() == (tmp_path / "alone" / name).read_bytes(), name
