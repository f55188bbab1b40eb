"""The released-code comparison (pipelines/fedhkd/validation/released_code.py) counts divergence the same way on both sides
and tables per-round values over the runs not diverged by then."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.data import registry
from bench.data.partition import partition_dataset
from bench.errors import BenchError

from tests.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "pipelines" / "fedhkd" / "validation" / "released_code.py"
script: Any = load_script(SCRIPT, "fedhkd_released_code")
Run, check_loaders, digits32, finite_or_text = script.Run, script.check_loaders, script.digits32, script.finite_or_text
first_non_finite, parse_args, parse_released = script.first_non_finite, script.parse_args, script.parse_released
per_round_table, round_table, divergence_table = script.per_round_table, script.round_table, script.divergence_table
same_partitions = script.same_partitions

RELEASED_STDOUT = """\
 | Global Training Round : 1 |
| Global Round : 0 | Client: 3 | Local Epoch : 0 | [0/144 (0%)]\tLoss: 2.302585
average loss:   1.25
average local test accuracy: 0.5
global test accuracy:  0.40625
 | Global Training Round : 2 |
average loss:   0.75
average local test accuracy: 0.625
global test accuracy:  0.59375
 | Global Training Round : 3 |
average loss:   nan
average local test accuracy: 0.1
global test accuracy:  0.09375
 | Global Training Round : 4 |
average loss:   nan
average local test accuracy: 0.1
global test accuracy:  0.09375
"""


def released_run(seed: int = 0) -> Run:
    run = Run("released", "FedHKD", seed, parse_released(RELEASED_STDOUT))
    run.diverged_round = first_non_finite(run.curves)
    return run


def test_released_rows_are_parsed_round_by_round_nan_included() -> None:
    rows = parse_released(RELEASED_STDOUT)
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert rows[1] == {"round": 2, "train_loss": 0.75, "local_acc": 0.625, "global_acc": 0.59375}
    assert math.isnan(rows[2]["train_loss"])


def test_a_run_diverges_at_its_first_non_finite_training_loss() -> None:
    assert first_non_finite([{"round": 1, "train_loss": 1.0}, {"round": 2, "train_loss": math.inf},
                             {"round": 3, "train_loss": math.nan}]) == 2
    assert first_non_finite([{"round": 1, "train_loss": 1.0}]) is None


def test_released_and_ours_count_the_same_divergence_although_only_the_released_code_trains_on() -> None:
    released = released_run()
    ours = Run("ours", "FedHKD", 0, [{"round": 1, "train_loss": 1.2, "local_acc": 0.5, "global_acc": 0.4},
                                     {"round": 2, "train_loss": 0.8, "local_acc": 0.6, "global_acc": 0.6},
                                     {"round": 3, "train_loss": math.nan}], diverged_round=3)
    assert released.diverged_round == ours.diverged_round == 3
    for run in (released, ours):  # values stop at the divergence on both sides
        assert run.value("global_acc", 2) is not None
        assert run.value("global_acc", 3) is None and run.value("global_acc", 4) is None


def test_per_round_means_are_over_the_runs_not_diverged_by_then() -> None:
    alive = Run("released", "FedHKD", 1, [{"round": t, "train_loss": 1.0, "local_acc": 0.7, "global_acc": 0.6}
                                          for t in (1, 2, 3, 4)])
    table = per_round_table({("FedHKD", "released"): [released_run(), alive]}, "FedHKD", 4)
    cells = {line.split(" | ")[0].strip("| "): line.split(" | ")[1] for line in table[2:]}
    assert cells["2"] == "0.597 ± 0.004"  # both runs: 0.59375 and 0.6
    assert cells["3"] == "0.600 (1/2)"  # the released run's 0.09375 after its NaN is left out


def test_round_table_lists_every_seed_and_marks_diverged_ones() -> None:
    lines = round_table({("FedHKD", "released"): [released_run(0)]}, ["FedHKD"], 3)
    assert "0: div." in lines[2]
    assert "0: 0.594" in round_table({("FedHKD", "released"): [released_run(0)]}, ["FedHKD"], 2)[2]


def test_json_gets_non_finite_values_as_text() -> None:
    assert finite_or_text({"a": [math.nan, 1.0, -math.inf]}) == {"a": ["nan", 1.0, "-inf"]}


def test_partitions_whose_clients_hold_less_than_a_batch_are_refused(data_dir: Path) -> None:
    data = digits32(data_dir)
    ok = parse_args(["checkout", "--partition-seed", "0"])
    check_loaders(data, ok)  # the default partition seed leaves every client a whole batch
    with pytest.raises(BenchError, match="partition seed 1 gives a client"):
        check_loaders(data, parse_args(["checkout", "--partition-seed", "run", "--seeds", "0", "1"]))


def test_bad_arguments_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["c", "--device", "gpu"], ["c", "--partition-seed", "x"], ["c", "--rounds", "3", "--report-round", "4"]):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(bad)
        assert exit_info.value.code == 2
    assert parse_args(["c", "--rounds", "2"]).report_round == 2
    assert isinstance(parse_args(["c"]), argparse.Namespace)


def test_the_divergence_table_gives_the_trained_on_runs_final_accuracy_and_says_when_a_run_stopped() -> None:
    stopped = Run("ours", "FedHKD", 0, [{"round": 1, "train_loss": 1.2, "local_acc": 0.5, "global_acc": 0.4},
                                        {"round": 2, "train_loss": 0.8, "local_acc": 0.6, "global_acc": 0.6},
                                        {"round": 3, "train_loss": math.nan}], diverged_round=3)
    runs = {("FedHKD", "released"): [released_run()], ("FedHKD", "ours"): [stopped]}
    released_line, ours_line = divergence_table(runs, ["FedHKD"], 4)[2:]
    assert "| 1/1 | 0: 3 | 0: 1.250 → 0.750 |" in released_line
    assert released_line.endswith("| 0.094 / 0.100 |")  # round 4 after training on with NaN weights: chance
    assert ours_line.endswith("| — (stopped) |")


def test_identical_partitions_are_counted_client_by_client(data_dir: Path, tmp_path: Path) -> None:
    data, args = digits32(data_dir), parse_args(["checkout"])
    ours = partition_dataset(data, "fedhkd", args.clients, 0, {"alpha": args.beta, "part": args.part})
    indices = tmp_path / "indices.json"
    loaders = [[p.tolist()[::-1] for p in ours.train], [p.tolist() for p in ours.local_test]]  # order is free
    indices.write_text(json.dumps(loaders))
    assert same_partitions(data, 0, args, indices) == (20, 20)
    loaders[0][4] = loaders[0][4][1:]  # one client misses one image
    indices.write_text(json.dumps(loaders))
    assert same_partitions(data, 0, args, indices) == (19, 20)
    assert same_partitions(data, 0, args, tmp_path / "missing.json") == (0, 20)


def test_ours_trains_on_after_a_divergence_unless_told_to_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_DATASETS", dict(registry._DATASETS))  # the script's dataset, for this test only
    script.register_digits32()
    assert script.ours_config("FedHKD", 0, parse_args(["c"])).training.on_divergence == "train_on"
    assert script.ours_config("FedAvg", 0, parse_args(["c", "--ours-on-divergence", "stop"])).training.on_divergence \
        == "stop"


def test_the_replay_control_perturbs_fedhkd_only_and_only_in_a_replay(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["c", "--replay", "--replay-self", "1e-15", "--methods", "FedHKD"]).replay_self == 1e-15
    for bad in (["c", "--replay-self", "1e-15", "--methods", "FedHKD"], ["c", "--replay", "--replay-self", "1e-15"]):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(bad)
        assert exit_info.value.code == 2
