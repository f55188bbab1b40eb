"""Named statistics from per-client records (bench/suites/statistics.py), each checked by hand."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from bench.experiment import build_config
from bench.errors import BenchError
from bench.suites.statistics import (Records, Statistic, aggregate, cf, last_k, mean_max_abs_dev, mean_std,
                                     rounds_to_target)
from tests.fabricated import random_run

# 3 clients, evaluated at rounds 2 and 4 (the last); a global model; the train loss every round
RECORDS = """round,metric,client,value
1,train_loss,,0.9
2,global_acc,,0.5
2,local_acc,0,0.25
2,local_acc,1,0.5
2,local_acc,2,0.75
2,train_loss,,0.7
3,train_loss,,0.6
4,global_acc,,0.625
4,local_acc,0,0.5
4,local_acc,1,1.0
4,local_acc,2,0.75
4,train_loss,,0.5
"""
STANDALONE = """round,metric,client,value
4,local_acc,0,0.25
4,local_acc,1,0.75
4,local_acc,2,0.5
"""


def value(name: str, text: str = RECORDS, reference: str | None = None) -> float | None:
    ref = Records.from_csv(reference, "standalone.csv") if reference else None
    return Statistic.model_validate(name).compute(Records.from_csv(text, "records.csv"), ref)


def test_cf_is_100_times_pearson_across_clients_by_hand() -> None:
    """Acc_s = (.1 .2 .3 .4), Acc_p = (.1 .3 .2 .4): deviations (-1.5 -.5 .5 1.5)/10 and (-1.5 .5 -.5 1.5)/10,
    Σ products 4, Σ squares 5 and 5 (in 1/100): ρ = 4/5, CF = 80 (pipelines/fedakd/NOTES.md §3.1)."""
    assert cf([0.1, 0.2, 0.3, 0.4], [0.1, 0.3, 0.2, 0.4]) == pytest.approx(80.0, abs=1e-12)
    assert cf([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]) == pytest.approx(-100.0, abs=1e-12)
    assert math.isnan(cf([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]))  # undefined on equal accuracies


def test_cf_statistic_compares_each_round_with_the_standalone_runs_last_round() -> None:
    """Acc_s = (.25 .75 .5); round 4 Acc_p = (.5 1 .75): deviations (-.25 .25 0) and (-.25 .25 0), ρ = 1;
    round 2 Acc_p = (.25 .5 .75): deviations (-.25 .25 0)·(-.25 0 .25) = 1/16, norms 1/8 each: ρ = 1/2."""
    assert value("final_cf(standalone)_local_acc", reference=STANDALONE) == pytest.approx(100.0)
    assert value("max_cf(standalone)_local_acc", reference=STANDALONE) == pytest.approx(100.0)
    rounds_2_to_4 = "round,metric,client,value\n" + "".join(
        f"{r},local_acc,{c},{v}\n" for r, accs in ((2, (0.5, 1.0, 0.75)), (3, (0.25, 0.5, 0.75)), (4, (0.5, 1.0, 0.75)))
        for c, v in enumerate(accs))
    assert value("last3_cf(standalone)_local_acc", rounds_2_to_4, STANDALONE) == pytest.approx((100 + 50 + 100) / 3)
    with pytest.raises(BenchError, match=r"records.csv: final_cf\(standalone\)_local_acc: CF needs local_acc of the "
                                         r"same clients as standalone.csv"):
        value("final_cf(standalone)_local_acc", reference=STANDALONE.replace("4,local_acc,2,0.5\n", ""))


def test_client_reductions_then_round_statistics() -> None:
    """Per round the clients' values (mean, max, min), then the round statistic."""
    assert value("final_local_acc") == float(np.mean([0.5, 1.0, 0.75])) == 0.75
    assert value("final_clientmax_local_acc") == 1.0  # FedAKD's Max Client Accuracy at the last round
    assert value("final_clientmin_local_acc") == 0.5
    assert value("max_clientmin_local_acc") == 0.5 and value("max_local_acc") == 0.75
    assert value("final_global_acc") == 0.625 and value("last3_train_loss") == pytest.approx((0.7 + 0.6 + 0.5) / 3)
    assert value("final_client_global_acc") is None  # a metric the run lacks: no value
    with pytest.raises(BenchError, match="final_clientmax_global_acc: global_acc has no per-client values"):
        value("final_clientmax_global_acc")


def test_last_k_needs_every_one_of_the_last_k_rounds() -> None:
    assert last_k({3: 1.0, 4: 0.5}, 4, 2) == 0.75
    assert last_k({1: 1.0, 2: 0.5}, 2, 5) == 0.75  # a run shorter than k: all its rounds
    with pytest.raises(BenchError, match=r"not recorded at rounds \[3\] of the last 2"):
        value("last2_local_acc")
    with pytest.raises(BenchError, match="not recorded at the last round 5"):
        value("final_local_acc", RECORDS + "5,train_loss,,0.4\n")


def test_rounds_to_target_is_the_first_round_at_or_above_it() -> None:
    """pipelines/dafkd/NOTES.md §3.6: the first round t with accuracy ≥ target; never reached: inf ("> T")."""
    series = {5: 0.5, 10: 0.85, 15: 0.84, 20: 0.9}
    assert rounds_to_target(series, 0.85) == 10 and rounds_to_target(series, 0.86) == 20
    assert rounds_to_target(series, 0.95) == math.inf
    assert value("reach0.55_global_acc") == 4 and value("reach0.5_global_acc") == 2
    assert value("reach0.8_global_acc") == math.inf
    assert not Statistic.model_validate("reach0.8_global_acc").higher_is_better  # fewer rounds rank first


def test_seed_aggregates() -> None:
    """DaFKD's "±" over 3 seeds is the maximum absolute deviation from the mean: {21, 22, 25} -> 22.67 ± 2.33
    (pipelines/dafkd/NOTES.md §3.7); accuracies use the sample std."""
    mean, dev = mean_max_abs_dev([21, 22, 25])
    assert (round(mean, 2), round(dev, 2)) == (22.67, 2.33)  # type: ignore[arg-type]
    assert mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0) and mean_std([4.0]) == (4.0, None)
    assert aggregate([21, 22, 25], "max_abs_dev") == (mean, dev)
    assert aggregate([12.0, math.inf, 15.0], "max_abs_dev") == (math.inf, None)  # a seed never reached it


def test_two_values_have_a_spread_and_each_spread_is_its_own() -> None:
    """Two seeds are enough for a spread, and ``aggregate`` picks the one it is asked for: {1, 3} has sample std
    √2 and maximum absolute deviation 1."""
    assert mean_std([1.0, 3.0]) == (2.0, pytest.approx(math.sqrt(2)))
    assert mean_max_abs_dev([1.0, 4.0]) == (2.5, 1.5) and mean_max_abs_dev([3.0]) == (3.0, None)
    assert aggregate([1.0, 3.0], "std") == (2.0, pytest.approx(math.sqrt(2)))
    assert aggregate([1.0, 3.0], "max_abs_dev") == (2.0, 1.0)


def test_clients_std_and_the_released_codes_cf_beside_the_papers() -> None:
    """Round 4's local accuracies (.5 1 .75) have population std √((.25² + .25² + 0) / 3); CF is defined from two
    clients; where every federated accuracy is 0 the paper's CF is undefined and the released code's is 0."""
    assert value("final_clientstd_local_acc") == pytest.approx(math.sqrt(0.125 / 3))
    assert cf([0.1, 0.2], [0.3, 0.1]) == pytest.approx(-100.0)
    assert math.isnan(cf([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]))  # constant standalone accuracies
    zeros = "round,metric,client,value\n" + "".join(f"4,local_acc,{c},0.0\n" for c in range(3))
    assert value("final_cf(standalone)_local_acc", zeros, STANDALONE) is None
    assert value("final_cfcode(standalone)_local_acc", zeros, STANDALONE) == 0.0
    assert value("final_cfcode(standalone)_local_acc", reference=STANDALONE) == pytest.approx(100.0)
    with pytest.raises(BenchError, match=r"standalone.csv: no local_acc at its last round 4 to use as the standalone"):
        value("final_cf(standalone)_local_acc", reference="round,metric,client,value\n4,global_acc,,0.5\n")


@pytest.mark.parametrize("name, fields", [
    ("final_global_acc", {"metric": "global_acc"}),
    ("last5_local_acc", {"metric": "local_acc", "rounds": "last", "k": 5}),
    ("max_global_acc", {"metric": "global_acc", "rounds": "max"}),
    ("final_clientmax_local_acc", {"metric": "local_acc", "clients": "max"}),
    ("last3_clientmin_client_global_acc", {"metric": "client_global_acc", "rounds": "last", "k": 3, "clients": "min"}),
    ("last3_cf(standalone)_local_acc", {"metric": "local_acc", "rounds": "last", "k": 3, "clients": "cf",
                                        "reference": "standalone"}),
    ("reach0.85_global_acc", {"metric": "global_acc", "rounds": "reach", "target": 0.85}),
    ("final_client_global_acc", {"metric": "client_global_acc"}),
])
def test_names_and_fields_are_one_statistic(name: str, fields: dict) -> None:
    statistic = Statistic.model_validate(name)
    assert statistic == Statistic.model_validate(fields) and statistic.name == name
    assert statistic.secondary == (fields.get("rounds") == "max")


@pytest.mark.parametrize("name, accuracy", [
    ("final_global_acc", True), ("last3_local_acc", True), ("max_global_acc", True),
    ("final_clientmax_local_acc", True), ("last3_clientmin_client_global_acc", True),
    ("reach0.85_global_acc", False),  # rounds
    ("count_global_acc", False),  # rounds completed
    ("count_train_loss", False), ("final_train_loss", False),  # not an _acc metric
    ("final_clientstd_client_global_acc", False),  # a spread over clients
    ("last3_cfcode(standalone)_local_acc", False),  # a correlation
])
def test_a_statistic_is_an_accuracy_when_it_reduces_an_accuracy_to_one_of_its_values(name: str,
                                                                                    accuracy: bool) -> None:
    """Accuracies are fractions; the headline's seeds for a target in accuracy points apply to these only."""
    assert Statistic.model_validate(name).accuracy is accuracy


@pytest.mark.parametrize("bad, message", [
    ("best_global_acc", "is not a statistic name"),
    ("final_cf()_local_acc", "is not a statistic name"),
    ({"metric": "local_acc", "rounds": "last"}, "k is required with rounds=last"),
    ({"metric": "local_acc", "clients": "cf"}, "reference is required"),
    ({"metric": "local_acc", "target": 0.5}, "target is not allowed with rounds=final"),
])
def test_bad_statistics(bad: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Statistic.model_validate(bad)


def test_records_file_problems_name_the_file() -> None:
    with pytest.raises(BenchError, match="r.csv: header is not round,metric,client,value"):
        Records.from_csv("round,value\n", "r.csv")
    with pytest.raises(BenchError, match="r.csv: malformed row"):
        Records.from_csv("round,metric,client,value\n1,local_acc,x,0.5\n", "r.csv")


def test_curves_give_run_level_records_only() -> None:
    """A run trained before records.csv: its curves.csv holds the client mean, and no client values."""
    records = Records.from_curves("round,global_acc,local_acc,train_loss\n1,,,0.9\n2,0.5,0.75,0.8\n", "curves.csv")
    assert records.last_round == 2 and Statistic.model_validate("final_local_acc").compute(records) == 0.75
    with pytest.raises(BenchError, match="predates records.csv"):
        Statistic.model_validate("final_clientmin_local_acc").compute(records)


@pytest.mark.parametrize("seed", range(5))
def test_records_reproduce_metrics_json_bitwise(tmp_path: Path, seed: int) -> None:
    """final / last5 / max of records.csv equal metrics.json's final / last5_mean / best exactly, and so do
    those of curves.csv: pinned values keep comparing whichever file a run has."""
    config = build_config({"training": {"rounds": 12}, "evaluation": {"every": 3}, "partition": {"num_clients": 7},
                           "tracking": {"mlflow": False}})
    metrics = random_run(tmp_path, config, np.random.default_rng(seed))
    for records in (Records.from_csv((tmp_path / "records.csv").read_text(), "records.csv"),
                    Records.from_curves((tmp_path / "curves.csv").read_text(), "curves.csv")):
        for metric in ("global_acc", "local_acc", "train_loss"):
            for rounds, group in (("final", "final"), ("last5", "last5_mean"), ("max", "best")):
                if group in metrics and metric in metrics[group]:
                    assert Statistic.model_validate(f"{rounds}_{metric}").compute(records) == metrics[group][metric]
