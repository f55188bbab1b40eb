"""`bench suite cost`: each method's training FLOPs per trained image measured by counting a short run,
images from the setting's partition, GPU-hours at a stated throughput."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main
from bench.data import load_dataset
from bench.report.cost import cost_table, suite_costs
from bench.runner.federation import partition_for
from bench.suites import load_suite

PARAMS = Path(__file__).resolve().parents[1] / "pipelines" / "fedhkd" / "params.yaml"
OVERRIDES = ["profile=smoke", "methods={fedavg: {}, moon: {}, fedmd: {}}", "profiles.smoke.settings={m5: {partition: "
             "{num_clients: 5, part: 0.25}}}"]


def test_measured_passes_count_each_methods_extra_work() -> None:
    """MOON adds a forward of the frozen global and previous models per trained image (2 passes); FedMD
    trains on a public batch beside each private one (twice FedAvg) and predicts the public set once per
    round (1 pass: the smoke profile's public set is one batch, its clients train 1 epoch of 1 batch)."""
    suite = load_suite(PARAMS, overrides=OVERRIDES)
    costs = {c.method: c for c in suite_costs(suite)}
    passes = {m: c.train_flops_per_image / c.forward_flops for m, c in costs.items()}
    assert passes["moon"] - passes["fedavg"] == pytest.approx(2.0, abs=0.01)
    assert passes["fedmd"] == pytest.approx(2 * passes["fedavg"] + 1, abs=0.01)
    assert passes["fedavg"] > 2.9  # forward and backward
    cfg = suite.config("fedavg", "m5", 0)  # synthetic32's labels are spread evenly: the estimate's sizes are exact
    real = partition_for(cfg, load_dataset("synthetic32"), None)
    batch = cfg.training.batch_size
    assert costs["fedavg"].train_images == cfg.training.rounds * sum(len(t) // batch * batch for t in real.train)
    assert costs["fedavg"].eval_images == cfg.training.rounds * (200 + sum(len(t) for t in real.local_test))
    table = cost_table(suite, 2.0)
    total = sum(c.flops for c in costs.values()) / 2e12 / 3600
    assert table.splitlines()[-1] == f"| total |  |  | {total:.3g} |  |  |"
    assert "GPU-hours at an assumed sustained 2 TFLOP/s" in table


def test_cost_command_refuses_a_nonpositive_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suite", "cost", "--params", str(PARAMS), *sum((["-S", o] for o in OVERRIDES), []),
                 "--tflops", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --tflops 0: the assumed throughput must be positive"


def test_a_method_that_runs_on_none_of_the_settings_has_no_row() -> None:
    """A profile may keep a method whose columns it drops (FedAL's paper_rounds: SVHN only, FedAvg runs on
    the homogeneous columns): the table has rows for the methods that run, and still a total."""
    suite = load_suite(PARAMS, overrides=[*OVERRIDES, "profiles.smoke.settings={m5: {partition: {num_clients: 5, "
                                                      "part: 0.25}, methods: [fedavg, fedmd]}}"])
    table = cost_table(suite, 2.0)
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")][1:]
    assert rows == ["fedavg", "fedmd", "total"]
