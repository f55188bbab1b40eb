"""Checkpoint and resume: a run killed at any moment and started again with the same command finishes
with metrics bitwise identical to an uninterrupted run's; a damaged or planted checkpoint is refused in
one line and never changes a number; per-client records."""
from __future__ import annotations

import csv
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.runner.checkpoint import (BUDGET, CHECKPOINT, EVERY_ROUND, FOOTER, MAGIC, PREVIOUS, CheckpointPolicy,
                                     DamagedCheckpoint, read_checkpoint)
from bench.runner.executor import RunRequest, run_experiment
from tests.conftest import small_config

RECORDS = ("metrics.json", "curves.csv", "records.csv")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fedavg_digits.yaml"


class _Killed(Exception):
    pass


def _kill_after(round_index: int):  # type: ignore[no-untyped-def]
    def progress(t: int, row: dict[str, float]) -> None:
        if t == round_index:
            raise _Killed  # after round t's checkpoint, as a kill would find it
    return progress


def killed_and_resumed(config, data_dir: Path, out: Path, after: int = 2) -> list[str]:  # type: ignore[no-untyped-def]
    """Run ``config`` into ``out`` with a checkpoint every round, stop it after round ``after``, check that the
    checkpoint is there, and run it again; the lines the resumed run said."""
    with pytest.raises(_Killed):
        run_experiment(RunRequest(config, out, data_dir, checkpoint=EVERY_ROUND), progress=_kill_after(after))
    assert (out / CHECKPOINT).exists() and not (out / "metrics.json").exists()
    said: list[str] = []
    run_experiment(RunRequest(config, out, data_dir, checkpoint=EVERY_ROUND), say=said.append)
    timing = json.loads((out / "timing.json").read_text())
    assert timing["resumed_from_round"] == after and timing["processes"] == 2, timing
    assert said[-1] == f"resuming {out} after round {after} of {config.training.rounds}, from {CHECKPOINT}", said
    return said


def assert_resumes_bitwise(config, data_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A run killed after round 2 (its checkpoint there) and started again resumes from round 2 and ends
    with the records of an uninterrupted run."""
    run_experiment(RunRequest(config, tmp_path / "whole", data_dir))
    killed_and_resumed(config, data_dir, tmp_path / "cut")
    for name in RECORDS:
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert not list((tmp_path / "cut").glob("*checkpoint*"))  # a finished run leaves no checkpoint behind


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
    assert_resumes_bitwise(cfg, data_dir, tmp_path)


def test_timing_sums_the_processes_of_a_resumed_run_and_names_this_ones_own(data_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(training={"rounds": 4})
    killed_and_resumed(cfg, data_dir, tmp_path)
    timing = json.loads((tmp_path / "timing.json").read_text())
    assert timing["processes"] == 2 and timing["wall_time_s"] > timing["process_wall_time_s"] > 0
    assert timing["wall_time_s"] >= timing["train_time_s"] + timing["eval_time_s"] + timing["checkpoint_time_s"]
    assert timing["checkpoint_time_s"] > 0  # rounds 1 and 2 were checkpointed in the first process
    assert 0 < timing["cpu_time_s"] <= timing["wall_time_s"] + 0.05  # single-threaded: CPU time within wall time


def test_checkpoint_of_another_config_is_ignored_and_said(data_dir: Path, tmp_path: Path) -> None:
    first, second = small_config(seed=1), small_config(seed=2)
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        run_experiment(RunRequest(first, out, data_dir, checkpoint=EVERY_ROUND), progress=_kill_after(1))
    said: list[str] = []
    run_experiment(RunRequest(second, out, data_dir, checkpoint=EVERY_ROUND, keep_checkpoint=True), say=said.append)
    run_experiment(RunRequest(second, tmp_path / "fresh", data_dir))
    assert (out / "metrics.json").read_bytes() == (tmp_path / "fresh" / "metrics.json").read_bytes()
    assert said == [f"ignored {out / CHECKPOINT}: it is of another run (its config hash differs)",
                    f"starting {out} at round 1: it holds no intact checkpoint of this run"]
    assert (out / CHECKPOINT).exists()  # kept on request
    assert "resumed_from_round" not in json.loads((out / "timing.json").read_text())


def _flip(path: Path, offset: int, count: int = 64) -> None:
    data = bytearray(path.read_bytes())
    data[offset:offset + count] = bytes(b ^ 0xFF for b in data[offset:offset + count])
    path.write_bytes(bytes(data))


def _interrupted(config, data_dir: Path, out: Path, after: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(_Killed):
        run_experiment(RunRequest(config, out, data_dir, checkpoint=EVERY_ROUND), progress=_kill_after(after))


def test_a_damaged_checkpoint_is_refused_and_the_run_resumes_from_the_one_before(data_dir: Path,
                                                                                 tmp_path: Path) -> None:
    """The attack: 64 bytes flipped inside a tensor of a killed run's checkpoint. It is refused in one
    line, the run resumes from the checkpoint before it, and every number is the uninterrupted run's."""
    cfg = small_config(training={"rounds": 5})
    run_experiment(RunRequest(cfg, tmp_path / "whole", data_dir))
    out = tmp_path / "cut"
    _interrupted(cfg, data_dir, out, 3)
    assert read_checkpoint(out / PREVIOUS, torch.device("cpu")).round == 2
    _flip(out / CHECKPOINT, (out / CHECKPOINT).stat().st_size // 2)  # inside the model tensors
    said: list[str] = []
    run_experiment(RunRequest(cfg, out, data_dir, checkpoint=EVERY_ROUND), say=said.append)
    assert said == [f"refused {out / CHECKPOINT}: its content does not match its sha256 (the file was changed or "
                    "damaged)", f"resuming {out} after round 2 of 5, from {PREVIOUS}"]
    for name in RECORDS:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


@pytest.mark.parametrize("damage, why", [
    (lambda p: _flip(p, 100), "its content does not match its sha256"),
    (lambda p: p.write_bytes(p.read_bytes()[:-1000]), "no digest footer"),  # truncated
    (lambda p: p.write_bytes(b"garbage" * 100), "no digest footer"),
    (lambda p: p.write_bytes(b""), "no digest footer"),
], ids=["flipped", "truncated", "garbage", "empty"])
def test_with_no_intact_checkpoint_the_run_starts_at_round_1_and_says_so(data_dir: Path, tmp_path: Path,
                                                                         damage, why: str) -> None:  # type: ignore[no-untyped-def]
    cfg = small_config(training={"rounds": 4})
    run_experiment(RunRequest(cfg, tmp_path / "whole", data_dir))
    out = tmp_path / "cut"
    _interrupted(cfg, data_dir, out, 2)
    for name in (CHECKPOINT, PREVIOUS):
        damage(out / name)
    said: list[str] = []
    run_experiment(RunRequest(cfg, out, data_dir, checkpoint=EVERY_ROUND), say=said.append)
    assert len(said) == 3 and all(why in line for line in said[:2]), said
    assert said[2] == f"starting {out} at round 1: it holds no intact checkpoint of this run"
    for name in RECORDS:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


class _Planted:
    """A pickle that runs a command when loaded by the plain unpickler."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return os.system, (f"touch {self.marker}",)


def _with_digest(content: bytes) -> bytes:
    import hashlib

    return content + MAGIC + hashlib.sha256(content).digest()


def test_a_planted_checkpoint_never_runs_its_code(data_dir: Path, tmp_path: Path) -> None:
    """A file placed in a run folder with a valid digest footer, whose pickle calls ``os.system`` (a plain
    pickle, and the same inside a torch file): refused without being executed; the run starts at round 1."""
    import io

    marker = tmp_path / "pwned"
    cfg = small_config(training={"rounds": 2})
    out = tmp_path / "run"
    out.mkdir()
    buffer = io.BytesIO()
    torch.save({"model": _Planted(marker)}, buffer)
    for content in (pickle.dumps(_Planted(marker)), buffer.getvalue()):
        (out / CHECKPOINT).write_bytes(_with_digest(content))
        with pytest.raises(DamagedCheckpoint):
            read_checkpoint(out / CHECKPOINT, torch.device("cpu"))
        said: list[str] = []
        run_experiment(RunRequest(cfg, out, data_dir, checkpoint=EVERY_ROUND, keep_checkpoint=True), say=said.append)
        assert not marker.exists()
        assert said[-1] == f"starting {out} at round 1: it holds no intact checkpoint of this run", said
    assert "posix.system" in said[0] and "which a checkpoint never holds" in said[0], said


def test_checkpoints_hold_only_allow_listed_classes_and_their_footer_is_last(data_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(training={"rounds": 2}, algorithm={"name": "moon"})
    _interrupted(cfg, data_dir, tmp_path, 1)
    data = (tmp_path / CHECKPOINT).read_bytes()
    assert data[-FOOTER:-32] == MAGIC
    checkpoint = read_checkpoint(tmp_path / CHECKPOINT, torch.device("cpu"))
    assert checkpoint.round == 1 and type(checkpoint.clients[0].state).__name__ == "MoonClient"


@pytest.mark.parametrize("policy, round_index, since, last_write, due", [
    (CheckpointPolicy(), 3, 59.9, 0.5, False),      # within the interval
    (CheckpointPolicy(), 3, 60.0, 0.5, True),
    (CheckpointPolicy(), 3, 60.0, 2.0, False),      # a 2 s write stretches the interval to 100 s (2 %)
    (CheckpointPolicy(), 3, 100.0, 2.0, True),
    (CheckpointPolicy(every=2), 3, 1e9, 0.0, False),  # not a multiple of `every`
    (CheckpointPolicy(every=0), 4, 1e9, 0.0, False),  # never
    (EVERY_ROUND, 1, 0.0, 5.0, True),               # interval 0: every round, whatever it costs
])
def test_the_checkpoint_policy_keeps_checkpoints_under_2_percent_of_the_time(
        policy: CheckpointPolicy, round_index: int, since: float, last_write: float, due: bool) -> None:
    assert BUDGET == 0.02
    assert policy.due(round_index, since, last_write) is due


def test_under_the_default_policy_a_run_of_short_rounds_writes_no_checkpoint(data_dir: Path, tmp_path: Path) -> None:
    request = RunRequest(small_config(training={"rounds": 3}), tmp_path, data_dir)
    assert request.checkpoint == CheckpointPolicy(every=1, interval_s=60.0)
    with pytest.raises(_Killed):
        run_experiment(request, progress=_kill_after(2))
    assert not list(tmp_path.glob("*checkpoint*"))  # 2 rounds of a second: nothing worth 2 % to save


def test_kill_9_at_a_checkpointed_round_then_the_same_command_resumes_bitwise(data_dir: Path, tmp_path: Path) -> None:
    """The real thing: ``bench run`` killed with SIGKILL while training, after a checkpoint it waits for and
    a random moment more, started again: it says where it resumes and ends with the same records."""
    command = [sys.executable, "-m", "bench.cli", "run", str(EXAMPLE), "--data-dir", str(data_dir), "--no-progress",
               "-S", "training.rounds=30", "-S", "tracking.mlflow=false", "--checkpoint-interval", "0", "--out"]
    subprocess.run([*command, str(tmp_path / "whole")], check=True, capture_output=True)
    out = tmp_path / "killed"
    proc = subprocess.Popen([*command, str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / CHECKPOINT).exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(float(np.random.default_rng().uniform(0, 0.05)))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists(), "the run finished before the kill: give it more rounds"
    resumed = subprocess.run([*command, str(out)], check=True, capture_output=True, text=True)
    line = [x for x in resumed.stderr.splitlines() if x.startswith("resuming")]
    assert len(line) == 1 and line[0].startswith(f"resuming {out} after round ") and " of 30, from " in line[0], \
        resumed.stderr
    for name in RECORDS:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert not list(out.glob(f"*{CHECKPOINT}*")) and not list(out.glob(f".{CHECKPOINT}*"))
    assert not list(out.glob("*checkpoint*"))


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
