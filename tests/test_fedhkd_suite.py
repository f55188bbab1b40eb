"""The FedHKD paper module: transcribed values, table columns per profile, claims on the paper's tables."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.suites import fedhkd, load_suite

PARAMS = Path(__file__).resolve().parents[1] / "pipelines" / "fedhkd" / "params.yaml"


def test_transcribed_tables_reproduce_the_specs_derived_numbers() -> None:
    """specs/fedhkd.md §6.1: relative gains of FedHKD over FedAvg and time ratios, recomputed."""
    def gain(dataset: str, column: str) -> float:
        ours, base = (fedhkd.paper_value("table1", dataset, m, column) for m in ("fedhkd", "fedavg"))
        return round(100 * (ours / base - 1), 1)

    assert [gain("svhn", c) for c in ("local_10", "local_20", "local_50", "global_10", "global_20", "global_50")] \
        == [19.5, 14.4, 20.6, 37.0, 15.6, 39.5]
    assert [gain("cifar10", f"global_{m}") for m in (10, 20, 50)] == [10.0, 4.0, 45.6]
    assert [gain("cifar100", f"local_{m}") for m in (10, 20, 50)] == [26.3, 23.6, 27.0]
    ratios = {m: round(fedhkd.paper_value("table1", "cifar10", m, "time_s")
                       / fedhkd.paper_value("table1", "cifar10", "fedavg", "time_s"), 2) for m in fedhkd.PAPER_METHODS}
    assert ratios == {"fedavg": 1.0, "fedprox": 1.18, "moon": 2.36, "fedalign": 4.16, "fedgen": 1.21,
                      "fedmd": 2.58, "fedproto": 1.34, "fedhkd_star": 1.29, "fedhkd": 1.47}
    assert fedhkd.paper_value("table2", "svhn", "fedavg", "global_b0.2") == 0.2581


def test_claims_hold_on_the_papers_own_tables() -> None:
    """Every claim the report checks holds on the printed numbers, with the spec's counts (§6.1)."""
    claims = fedhkd.claims(fedhkd.paper_results(), paper_profile=True)
    assert all(c.holds for c in claims)
    evidence = [c.evidence for c in claims]
    assert evidence[:5] == ["9/9", "9/9", "6/6", "8/9", "18/18"]
    assert evidence[-1] == "top-2 in 23/26 cells"


def test_paper_ranks() -> None:
    """FedHKD's ranks among the 9 rows, as the spec recomputes them (§6.1)."""
    paper = fedhkd.paper_results()
    svhn = {c.setting: c for c in paper.columns}
    assert [paper.rank("fedhkd", svhn[f"svhn-m{m}"], "local") for m in (10, 20, 50)] == [1, 1, 4]
    assert paper.rank("fedhkd", svhn["cifar10-b0.2"], "local") == 2  # FedHKD* is best there


@pytest.mark.parametrize("profile, settings", [
    ("paper", ["svhn-m10", "svhn-m20", "svhn-m50", "cifar10-m10", "cifar10-m20", "cifar10-m50", "cifar100-m10",
               "cifar100-m20", "cifar100-m50", "cifar10-b0.2", "cifar10-b5", "svhn-b0.2", "svhn-b5"]),
    ("proxy", ["m5", "m10", "m20", "m10-b0.2", "m10-b5"]),
])
def test_every_setting_is_a_table_column(profile: str, settings: list[str]) -> None:
    suite = load_suite(PARAMS, overrides=[f"profile={profile}"])
    assert list(suite.params.settings) == settings
    assert [c.setting for c in fedhkd.columns(settings)] == settings
    for setting in settings:  # every run config validates (datasets need not be present to validate)
        for method in suite.params.methods:
            suite.config(method, setting, 0)


def test_paper_profile_follows_the_protocol() -> None:
    cfg = load_suite(PARAMS, overrides=["profile=paper"]).config("fedprox", "cifar100-m50", 2)
    assert (cfg.dataset.name, cfg.model.name, cfg.model.kwargs["latent_dim"]) == ("cifar100", "fedhkd_resnet18", 64)
    assert (cfg.partition.scheme, cfg.partition.num_clients, cfg.partition.scheme_params["alpha"]) == ("fedhkd", 50, 0.5)
    t = cfg.training
    assert (t.rounds, t.local_epochs, t.batch_size, t.optimizer.name, t.optimizer.lr) == (50, 5, 64, "adam", 0.001)
    assert (t.lr_decay.every, t.lr_decay.factor, cfg.algorithm.params["mu"]) == (10, 0.5, 0.5)


def test_smoke_profile_end_to_end(tmp_path: Path) -> None:
    """The FedHKD pipeline's commands at smoke scale: partitions, figures, all methods, the paper report."""
    from bench.cli import main

    common = ["--params", str(PARAMS), "--root", str(tmp_path), "--data-dir", str(tmp_path / "data"),
              "-S", "profile=smoke", "-S", "suite.base.tracking.mlflow=false"]
    for command in (["suite", "partition"], ["suite", "figures"], ["suite", "train"], ["suite", "report"]):
        assert main([*command, *common]) == 0, command
    report = tmp_path / "reports" / "fedhkd-smoke"
    assert (report / "paper-figures" / "figure1-m5.png").stat().st_size > 0
    paper = (report / "paper.md").read_text()
    for label in fedhkd.LABELS.values():
        assert f"| {label} |" in paper
    assert "### m=5 (paper m=10)" in paper and "### m=10 β=0.2" in paper and "`synthetic32`" in paper
    assert "| FedAvg | 1.286 | 1.286 | 11.209 | 11.209 | 11.215 | 11.215 |" in paper  # Params: ours | paper
    assert "rank among the paper's 9 methods" in paper
    assert paper.count("**holds**") + paper.count("**fails**") + paper.count("not measured") >= 18
