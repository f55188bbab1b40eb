"""Checkpoint and resume: a run killed at any moment and started again with the same command finishes
with metrics bitwise identical to an uninterrupted run's; per-client records."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.runner.checkpoint import CHECKPOINT
from bench.runner.executor import RunRequest, run_experiment
from tests.conftest import small_config

RECORDS = ("metrics.json", "curves.csv", "records.csv")


class _Killed(Exception):
    pass


def _kill_after(round_index: int):  # type: ignore[no-untyped-def]
    def progress(t: int, row: dict[str, float]) -> None:
        if t == round_index:
            raise _Killed  # after round t's checkpoint, as a kill would find it
    return progress


@pytest.mark.parametrize("sections", [
    {"training": {"optimizer": {"name": "adam", "lr": 0.003, "persistent": True}},
     "participation": {"fraction": 0.5}},
    {"algorithm": {"name": "moon"}},
    {"algorithm": {"name": "fedgen"}, "training": {"optimizer": {"name": "adam", "lr": 0.001}}},
    {"algorithm": {"name": "fedhkd", "mode": "code"}},
    {"algorithm": {"name": "fedmd"}, "public": {"size": 40, "source": "carve"}},
    {"algorithm": {"name": "fedproto", "distance": "mse"}},
    {"algorithm": {"name": "standalone"}, "evaluation": {"clients_on_global_test": True}},
    *({"algorithm": algorithm, "model": {"name": "dafkd_resnet11", "kwargs": {"width": 4, "blocks": [1, 1, 1]}},
       "training": {"local_epochs": None, "local_steps": 2}, "participation": {"fraction": 0.5}}
      for algorithm in ({"name": "dafkd", "generator_width": 8, "distill_batches": 1, "distill_epochs": 1},
                        {"name": "dafkd", "mode": "code", "generator_width": 8, "distill_batches": 1,
                         "distill_epochs": 1},
                        {"name": "dafkd", "sharing": "separate", "generator_width": 8, "distill_batches": 1,
                         "distill_epochs": 1},
                        {"name": "fedftg", "iterations": 2})),
], ids=["fedavg-adam-partial", "moon", "fedgen", "fedhkd-code", "fedmd", "fedproto", "standalone",
        "dafkd",          # the server generator, the personal heads (in the models), ŵ and S_t of the diagnostics
        "dafkd-code",     # the one shared head, clients one after another
        "dafkd-separate",  # each client's discriminator D_k and its optimiser
        "fedftg"])        # the server's conditional generator
def test_a_resumed_run_equals_an_uninterrupted_one(data_dir: Path, tmp_path: Path, sections: dict) -> None:
    cfg = small_config(training={"rounds": 4, **sections.pop("training", {})}, **sections)
    whole = tmp_path / "whole"
    run_experiment(RunRequest(cfg, whole, data_dir))
    cut = tmp_path / "cut"
    with pytest.raises(_Killed):
        run_experiment(RunRequest(cfg, cut, data_dir), progress=_kill_after(2))
    assert (cut / CHECKPOINT).exists() and not (cut / "metrics.json").exists()
    run_experiment(RunRequest(cfg, cut, data_dir))
    for name in RECORDS:
        assert (cut / name).read_bytes() == (whole / name).read_bytes(), name
    assert '"resumed_from_round": 2' in (cut / "timing.json").read_text()
    assert not (cut / CHECKPOINT).exists()  # a finished run leaves no checkpoint behind


def test_checkpoint_of_another_config_is_not_resumed(data_dir: Path, tmp_path: Path) -> None:
    first, second = small_config(seed=1), small_config(seed=2)
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        run_experiment(RunRequest(first, out, data_dir), progress=_kill_after(1))
    run_experiment(RunRequest(second, out, data_dir, keep_checkpoint=True))
    run_experiment(RunRequest(second, tmp_path / "fresh", data_dir))
    assert (out / "metrics.json").read_bytes() == (tmp_path / "fresh" / "metrics.json").read_bytes()
    assert (out / CHECKPOINT).exists()  # kept on request


def test_kill_9_at_a_random_moment_then_the_same_command_resumes_bitwise(data_dir: Path, tmp_path: Path) -> None:
    """The real thing: ``bench run`` killed with SIGKILL while training, started again."""
    config = Path(__file__).resolve().parents[1] / "examples" / "fedavg_digits.yaml"
    command = [sys.executable, "-m", "bench.cli", "run", str(config), "--data-dir", str(data_dir), "--no-progress",
               "-S", "training.rounds=12", "-S", "tracking.mlflow=false", "--out"]
    subprocess.run([*command, str(tmp_path / "whole")], check=True, capture_output=True)
    out = tmp_path / "killed"
    rng = np.random.default_rng()
    proc = subprocess.Popen([*command, str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / CHECKPOINT).exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(float(rng.uniform(0, 0.2)))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if (out / "metrics.json").exists():
        pytest.skip("the run finished before the kill (machine too fast for this window)")
    subprocess.run([*command, str(out)], check=True, capture_output=True)
    for name in RECORDS:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert not list(out.glob(f"*{CHECKPOINT}*")) and not list(out.glob(f".{CHECKPOINT}*"))


def test_records_hold_every_clients_value_for_every_evaluated_round(data_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(training={"rounds": 4}, evaluation={"every": 2, "last": 1, "clients_on_global_test": True},
                       partition={"num_clients": 4, "validation_fraction": 0.25})
    run_experiment(RunRequest(cfg, tmp_path, data_dir))
    with open(tmp_path / "records.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted({int(r["round"]) for r in rows if r["metric"] == "global_acc"}) == [2, 4]
    assert [int(r["round"]) for r in rows if r["metric"] == "train_loss"] == [1, 2, 3, 4]
    for metric in ("local_acc", "client_global_acc", "val_acc"):
        at_4 = [r for r in rows if r["metric"] == metric and r["round"] == "4"]
        assert [int(r["client"]) for r in at_4] == [0, 1, 2, 3], metric
    with open(tmp_path / "curves.csv", newline="") as handle:
        curves = {int(r["round"]): r for r in csv.DictReader(handle)}
    local = [float(r["value"]) for r in rows if r["metric"] == "local_acc" and r["round"] == "4"]
    assert repr(float(np.mean(local))) == curves[4]["local_acc"]  # the curve is the client mean of the records
    assert curves[3]["local_acc"] == ""  # round 3 not scheduled
