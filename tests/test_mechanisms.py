"""Mechanism diagnostics (bench/engine/mechanisms.py): each method that declares a mechanism records its diagnostic
every round, and computing it changes nothing else — a run's every other record is bitwise what it is with the
diagnostic's computation stubbed out (no random draw, no training step, no BatchNorm statistics moved). The
report's table reads them from records, says "not recorded" for runs without them, and marks a claim resting on
an inert mechanism "not exercised" (tests/test_verdicts.py)."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench.algorithms import dafkd, fedal, fedftg, fedgen, fedhkd, get_algorithm
from bench.engine.mechanisms import Mechanism
from bench.runner.federation import run_federation
from bench.suites.mechanisms import MechanismCell, mechanism_cells, run_mean, seed_means, statuses
from bench.suites.paper import FinishedRun
from bench.suites.statistics import Records
from tests.test_communication import CASES

STUBS: dict[str, list[tuple[Any, str]]] = {  # per method, the functions computing its diagnostics
    "fedal": [(fedal, "client_recognition"), (fedal.FedAL, "adversarial_share")],
    "dafkd": [(dafkd, "class_coverage")],
    "fedgen": [(fedgen, "teacher_fidelity")],
    "fedftg": [(fedftg, "named_share")],
    "fedhkd": [(fedhkd, "knowledge_share")],
}
DIAGNOSTICS = {"fedal": {"disc_acc", "adv_share", "disc_chance"}, "dafkd": {"gen_coverage", "alpha_entropy_uniform"},
               "fedgen": {"gen_fidelity", "gen_chance"}, "fedftg": {"gen_fidelity", "gen_chance"},
               "fedhkd": {"knowledge_share"}}


def records(result: Any, leave_out: set[str]) -> list[tuple]:
    """Every record but the diagnostics, NaN spelled out so that two NaNs compare equal."""
    return [(round_, metric, client, "nan" if math.isnan(value) else value)
            for round_, metric, client, value in result.records if metric not in leave_out]


@pytest.mark.parametrize("name", sorted(STUBS))
def test_recording_a_diagnostic_changes_no_other_record(name: str, data_dir: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    config, _ = CASES[name]
    declared = get_algorithm(name).mechanisms(get_algorithm(name).Params.model_validate(config().algorithm.params))
    assert declared, f"{name} declares its mechanisms"
    with_diagnostics = run_federation(config(), data_dir)
    recorded = {metric for _, metric, _, _ in with_diagnostics.records}
    assert {m.metric for m in declared} <= recorded  # each declared diagnostic is recorded
    for owner, function in STUBS[name]:
        monkeypatch.setattr(owner, function, lambda *args, **kwargs: -1.0)
    without = run_federation(config(), data_dir)
    stubbed = {metric for _, metric, _, value in without.records if value == -1.0}
    assert stubbed & {m.metric for m in declared}  # the stub did replace the diagnostic
    assert records(with_diagnostics, DIAGNOSTICS[name]) == records(without, DIAGNOSTICS[name])
    assert [c.get("global_acc") for c in with_diagnostics.curves] == [c.get("global_acc") for c in without.curves]


CHANCE = Mechanism("tells the clients apart", "disc_acc", "disc_chance", "above", 0.25, relative=True)


def test_a_mechanism_is_active_inert_mixed_or_not_recorded() -> None:
    def cell(values: dict[int, float]) -> MechanismCell:
        return MechanismCell("fedal", "s", CHANCE, values, {seed: 0.125 for seed in values})

    assert CHANCE.threshold(0.125) == pytest.approx(0.15625)
    assert cell({0: 0.5, 1: 0.3}).status == "active"
    assert cell({0: 0.125, 1: 0.13}).status == "inert"  # at chance (1/8) on both seeds
    assert cell({0: 0.5, 1: 0.13}).status == "mixed"
    assert cell({}).status == "not recorded"  # a run trained before the diagnostic existed


def test_a_run_without_the_diagnostic_reads_as_not_recorded() -> None:
    pinned_like = Records.from_csv("round,metric,client,value\n1,train_loss,,0.5\n2,train_loss,,0.4\n", "x")
    assert run_mean(pinned_like, "disc_acc") is None
    recorded = Records.from_csv("round,metric,client,value\n1,disc_acc,,0.2\n2,disc_acc,,0.4\n", "x")
    assert run_mean(recorded, "disc_acc") == pytest.approx(0.3)


class Run:
    """A finished run (:class:`bench.suites.paper.FinishedRun`) of which the mechanism table reads the records."""

    def __init__(self, csv: str) -> None:
        self.run_dir, self.seconds_per_round = Path("x"), 1.0
        self.records = Records.from_csv("round,metric,client,value\n" + csv, "x")


def test_the_records_beside_a_diagnostic_are_each_seeds_mean_where_recorded() -> None:
    """``Mechanism.beside``: per record, each seed's mean over its rounds, keyed by seed; a seed whose run is missing or
    did not record it is absent (not shifted onto another seed), and a record no run has is left out."""
    runs: dict[int, FinishedRun | None] = {0: Run("1,d_real,,0.5\n2,d_real,,0.7\n1,d_fake,,0.25\n"), 1: None, 2: Run("1,d_real,,0.9\n")}
    assert seed_means(runs, ("d_real", "d_fake", "g_loss")) == {"d_real": {0: pytest.approx(0.6), 2: 0.9},
                                                                "d_fake": {0: 0.25}}


def test_the_table_has_a_cell_per_declared_mechanism_method_and_setting_it_runs_on() -> None:
    """DaFKD declares α̂'s weighting (inert value: a record of each run) and the generator's coverage (inert value 0);
    FedAvg declares nothing. Per seed, a cell holds the diagnostic's mean and its inert value where the run recorded
    the diagnostic (seed 2 did not run); α̂ is below 95 % of log 4 on seed 0 only (mixed), coverage above 0.5 where
    recorded (active)."""
    configs = {(method, setting, seed): CASES[method][0]() for method in ("dafkd", "fedavg") for setting in "ab"
               for seed in (0, 1, 2)}
    suite = SimpleNamespace(methods=["dafkd", "fedavg"], settings=["a", "b"], seeds=[0, 1, 2],
                            runs_on=lambda method, setting: (method, setting) != ("dafkd", "b"),
                            config=lambda method, setting, seed: configs[method, setting, seed])
    runs: dict[tuple[str, str, int], FinishedRun] = {
        ("dafkd", "a", 0): Run("1,alpha_entropy,,1.0\n2,alpha_entropy,,1.2\n1,alpha_entropy_uniform,,1.386\n"
                               "2,alpha_entropy_uniform,,1.386\n1,gen_coverage,,0.9\n1,d_real,,0.8\n"),
        ("dafkd", "a", 1): Run("1,alpha_entropy,,1.38\n1,alpha_entropy_uniform,,1.386\n"),
        ("dafkd", "b", 0): Run("1,gen_coverage,,0.0\n")}  # a setting DaFKD does not run on is not read
    cells = mechanism_cells(suite, runs)
    assert [(c.method, c.setting, c.mechanism) for c in cells] == [("dafkd", "a", dafkd.DOMAIN_WEIGHTS),
                                                                  ("dafkd", "a", dafkd.GENERATED_CLASSES)]
    weights, coverage = cells
    assert weights.values == {0: pytest.approx(1.1), 1: 1.38} and weights.inert == {0: 1.386, 1: 1.386}
    assert weights.beside == {"d_real": {0: 0.8}} and coverage.beside == {}
    assert coverage.values == {0: 0.9} and coverage.inert == {0: 0.0}
    assert statuses(cells) == {("dafkd", "a"): {"alpha_entropy": "mixed", "gen_coverage": "active"}}
