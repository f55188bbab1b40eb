"""A paper suite other than FedHKD, end to end on fabricated runs: a typed definition whose cells name
(method, setting, metric, statistic) — Max Client Accuracy and CF against Standalone (FedAKD-style),
rounds to a target with mean ± max absolute deviation (DaFKD-style) — its report, pin and compare."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from pydantic import ValidationError

from bench.cli import main
from bench.errors import BenchError
from bench.report.paper_report import Headline, _seeds_for_target, headline, headline_section, strongest
from bench.suites import Method, load_suite
from bench.suites.paper import Claim, Measure, Paper, PaperDefinition, Results, claim
from bench.suites.plugins import PAPERS
from bench.suites.statistics import Statistic
from bench.suites.verdicts import detectable_difference, seeds_to_detect
from tests.fabricated import fabricate_run

DEFINITION = """
name: demo
title: Demo (a FedAKD/DaFKD-like paper)
source: tests/test_paper.py
proposed: fedavg
methods: {standalone: Standalone, fedavg: FedAvg, fedprox: FedProx}
groups: {d: digits}
tables:
  fairness:
    title: Table 1
    measures:
      max: {label: Max, statistic: final_clientmax_local_acc, scale: 100, digits: 2}
      cf: {label: CF, statistic: final_cf(standalone)_local_acc, digits: 2}
    columns:
      iid: {label: IID, group: d}
      dir: {label: DIR, group: d}
    printed:
      - columns: [iid, dir]
        measures: [max, cf]
        rows:
          standalone: [70.0, 75.0, null, null]
          fedavg:     [91.0, 88.0, 85.5, 80.0]
          fedprox:    [90.0, 89.0, -20.0, 10.0]
  rounds:
    title: Table 2
    measures:
      rounds: {label: rounds, statistic: reach0.5_global_acc, spread: max_abs_dev, digits: 2}
    columns:
      dir-50: {label: DIR 50%, setting: dir}
      dir-90: {label: DIR 90%, setting: dir, statistic: {target: 0.9}}
    printed:
      - columns: [dir-50, dir-90]
        measures: [rounds]
        rows:
          fedavg:  [2.33, 4.0]
          fedprox: [3.0, null]
low_confidence: [[fedprox, dir, cf]]
"""
PARAMS = """
suite:
  name: demo
  paper: demo
  seeds: [0, 1, 2]
  base: {partition: {num_clients: 4}, training: {rounds: 4}, evaluation: {every: 1}, tracking: {mlflow: false}}
settings:
  iid: {partition: {scheme: iid}}
  dir: {partition: {scheme: dirichlet, alpha: 0.5}}
methods:
  fedprox: {name: fedprox, mu: 0.1}
  fedavg: {}
  standalone: {}
"""
STANDALONE = [0.2, 0.4, 0.6, 0.8]  # every setting and seed: Acc_s at the last round
FEDAVG = [0.3, 0.5, 0.7, 0.9]      # CF 100 against Acc_s, max 0.9
FEDPROX = [0.9, 0.7, 0.5, 0.3]     # CF -100
GLOBAL = {0: [0.2, 0.5, 0.6, 0.95], 1: [0.4, 0.45, 0.5, 0.7], 2: [0.45, 0.6, 0.7, 0.8]}  # rounds 1-4 per seed


class Demo(Paper):
    def claims(self, results: Results) -> list[Claim]:
        return [claim("FedAvg is fairer than FedProx", results,
                      [results.beats("fedavg", "fedprox", c, "cf") for c in results.table("fairness")])]


@pytest.fixture
def definition() -> PaperDefinition:
    return PaperDefinition.model_validate(yaml.safe_load(DEFINITION))


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, definition: PaperDefinition) -> Path:
    """The demo suite with every run fabricated: per-client local accuracy at each round (the same for
    every round), the global model's accuracy per seed, no global model for Standalone."""
    monkeypatch.setitem(PAPERS, "demo", Demo(definition))
    (tmp_path / "params.yaml").write_text(PARAMS)
    suite = load_suite(tmp_path / "params.yaml")
    for method, accs in (("standalone", STANDALONE), ("fedavg", FEDAVG), ("fedprox", FEDPROX)):
        for setting in suite.params.settings:
            for seed in suite.params.suite.seeds:
                run_level = {"train_loss": {r: 1.0 / r for r in range(1, 5)}}
                if method != "standalone":
                    run_level["global_acc"] = dict(enumerate(GLOBAL[seed], start=1))
                fabricate_run(suite.run_dir(method, setting, seed), suite.config(method, setting, seed),
                              {"local_acc": {r: accs for r in range(1, 5)}}, run_level)
    return tmp_path


def test_cells_name_method_setting_statistic_and_printed_value(definition: PaperDefinition) -> None:
    columns = {c.key: c for c in definition.columns_for(["iid", "dir"])}
    assert list(columns) == ["iid", "dir", "dir-50", "dir-90"]
    assert (columns["dir-90"].setting, columns["dir-90"].statistics["rounds"].name) == ("dir", "reach0.9_global_acc")
    assert columns["iid"].statistics["cf"].reference == "standalone" and columns["iid"].exact
    assert definition.value("fedprox", "dir-50", "rounds") == 3.0
    assert definition.value("fedprox", "dir-90", "rounds") is None  # printed blank
    assert definition.value("standalone", "dir-50", "rounds") is None  # not a row of Table 2
    printed = definition.results()
    assert printed.rank("fedavg", printed.column("dir-50"), "rounds") == 1  # fewer rounds is better
    assert printed.rank("fedprox", printed.column("iid"), "cf") == 2


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["tables"]["rounds"]["printed"][0]["rows"].update(fedavg=[1.0]), "fedavg: 1 values, the block has 2"),
    (lambda d: d["tables"]["rounds"]["printed"].append(d["tables"]["rounds"]["printed"][0]), "printed twice"),
    (lambda d: d["tables"]["rounds"]["printed"][0].update(columns=["dir-50"], rows={"fedavg": [2.0]}),
     r"fedavg has no printed value for \(column, measure\) \[\('dir-90', 'rounds'\)\]"),
    (lambda d: d["tables"]["rounds"]["columns"].update(iid={"label": "x"}), "column 'iid' is also in fairness"),
    (lambda d: d["tables"]["rounds"]["columns"]["dir-90"].update(statistic={"k": 3}), "k is not allowed"),
    (lambda d: d.update(analogues={"m5": {"label": "x", "stands_for": ["iid", "dir-50"]}}), "of one table"),
    (lambda d: d.update(low_confidence=[["fedavg", "dir", "rounds"]]), "is not a printed"),
    (lambda d: d.update(proposed="fedmd"), "'fedmd' is not one of the methods"),
])
def test_definition_errors(tmp_path: Path, edit, message: str) -> None:
    raw = yaml.safe_load(DEFINITION)
    edit(raw)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(BenchError, match=f"paper definition {tmp_path / 'demo.yaml'}: .*{message}"):
        PaperDefinition.load(tmp_path / "demo.yaml")


def test_suite_knows_the_cells_statistics_and_the_cf_dependency(root: Path) -> None:
    suite = load_suite(root / "params.yaml")
    assert [s.name for s in suite.statistics("dir")] == [
        "final_global_acc", "last5_global_acc", "final_local_acc", "last5_local_acc", "final_clientmax_local_acc",
        "final_cf(standalone)_local_acc", "reach0.5_global_acc", "reach0.9_global_acc"]
    assert suite.dependencies("fedavg") == ["standalone"] and suite.dependencies("standalone") == []
    assert suite.train_order(list(suite.params.methods)) == ["standalone", "fedprox", "fedavg"]
    with pytest.raises(BenchError, match="method fedavg needs the runs of 'standalone'.*add it to methods"):
        load_suite(root / "params.yaml", overrides=["methods={fedavg: {}}"])


def test_report_renders_the_definition(root: Path) -> None:
    assert main(["suite", "report", "--params", str(root / "params.yaml")]) == 0
    paper = (root / "reports" / "demo" / "paper.md").read_text()
    assert paper.startswith("# Demo (a FedAKD/DaFKD-like paper) — paper tables, suite `demo`")
    assert "Measures: **Max** `final_clientmax_local_acc` ×100; **CF** `final_cf(standalone)_local_acc`." in paper
    # FedProx on DIR: max 90.00 (0.9 × 100, every seed), CF -100 (paper -20.0, doubted), ranks 1 and 2 of 3
    assert ("| FedProx | 90.00 ± 0.00 | — | 89.00 | 1.00 | -100.00 ± 0.00 | — | 10.00‡ | -110.00 | 1 (1) | 2 (2) |"
            in paper)
    # rounds to 50%: seeds reach it at rounds 2, 3, 2 -> 2.33 ± 0.67 (max absolute deviation); to 90%: 4, never, never
    assert "| FedAvg | 2.33 ± 0.67 | — | 2.33 | 0.00 | 1 (1) |" in paper
    assert "| FedAvg | not reached | — | 4.00 | not reached | 1 (1) |" in paper
    # Standalone's own CF is blank, as the paper prints it (pipelines/fedakd/NOTES.md §3.1)
    assert "| Standalone | 80.00 ± 0.00 | — | 75.00 | 5.00 | — | — | — | — | 3 (3) | — (—) |" in paper
    assert "Measures: **rounds** `reach0.9_global_acc` (± max absolute deviation over seeds)." in paper
    # CF: FedAvg +100, FedProx -100 on every seed of both columns, so the difference is +200 without spread
    assert ("| FedAvg is fairer than FedProx | **holds** (2/2) | **supported** | FedAvg @ iid vs FedProx @ iid: +200.00 "
            "[+200.00, +200.00]; paired t, 3 pairs, p = 0 | 2/2 hold, 0 against; needs all |") in paper
    assert "## FedAvg's rank among the rows of each table" in paper
    # What the profile can detect: FedAvg and FedProx reach 50 % at the same rounds on every seed (no pair noise);
    # nobody but FedAvg's seed 0 reaches 90 %, so that statistic has no finite pair to measure noise on
    assert "| Table 2 | rounds | `reach0.5_global_acc` | 3 | 2 | 3 | 0.00 | 0.00 |" in paper
    assert "| Table 2 | rounds | `reach0.9_global_acc` | 3 | 0 | 3 | — | — |" in paper  # Table 2 prints two of the three
    # The headline comparison: FedAvg against its strongest rival in each measure. Max: FedProx (90) over Standalone
    # (80), a tie on every pair; CF: FedProx (Standalone has none), +200 each pair; rounds to 90 %: one finite pair
    # without spread one seed would do (two settings: two pairs); CF is not an accuracy: no seeds for points
    assert "| Table 1 | Max | `final_clientmax_local_acc` | FedAvg vs FedProx | 6 | +0.00 | 0.00 | 0.00 | 1 (3) |" \
        in paper
    assert "| Table 1 | CF | `final_cf(standalone)_local_acc` | FedAvg vs FedProx | 6 | +200.00 | 0.00 | 0.00 | — |" \
        in paper
    assert "| Table 2 | rounds | `reach0.5_global_acc` | FedAvg vs FedProx | 3 | +0.00 | 0.00 | 0.00 |" in paper
    # rounds to 90 %: only seed 0 reaches it; the others count as 4 rounds + 1, on both sides
    assert "| Table 2 | rounds | `reach0.9_global_acc` | FedAvg vs FedProx | 3 | +0.00 | 0.00 | 0.00 |" in paper


def test_headline_comparison_is_the_proposed_method_against_its_strongest_rival(root: Path) -> None:
    """FedProx's best client on IID falls to 80 and 70 on seeds 1 and 2: FedAvg − FedProx in Max is 0, 10, 20 on
    IID and 0, 0, 0 on DIR (×100), so the difference is 5 and its pair noise the sample std of those six, √70;
    FedProx (mean 85) stays the rival over Standalone (80)."""
    suite = load_suite(root / "params.yaml")
    for seed, accs in ((1, [0.8, 0.6, 0.4, 0.2]), (2, [0.7, 0.5, 0.3, 0.1])):
        fabricate_run(suite.run_dir("fedprox", "iid", seed), suite.config("fedprox", "iid", seed),
                      {"local_acc": {r: accs for r in range(1, 5)}},
                      {"train_loss": {r: 1.0 / r for r in range(1, 5)}, "global_acc": dict(enumerate(GLOBAL[seed], 1))})
    assert main(["suite", "report", "--params", str(root / "params.yaml")]) == 0
    paper = (root / "reports" / "demo" / "paper.md").read_text()
    noise = math.sqrt(70.0)
    assert (f"| Table 1 | Max | `final_clientmax_local_acc` | FedAvg vs FedProx | 6 | +5.00 | {noise:.2f} | "
            f"{detectable_difference(noise, 6):.2f} | {seeds_to_detect(1.5, noise, settings=2)} (3) |") in paper
    assert seeds_to_detect(1.5, noise, settings=2) == 124  # 1.5 points under √70 ≈ 8.4 points of spread


def test_strongest_rival_is_the_best_mean_in_the_measures_direction() -> None:
    means = {"fedprox": 3.0, "feddf": 5.0, "fedgen": 5.0}
    assert strongest(means, higher=True) == "feddf"  # the first of a tie
    assert strongest(means, higher=False) == "fedprox"  # rounds to a target: fewer is better


P0, P1, P2, Q0, Q1 = ("s", 0), ("s", 1), ("s", 2), ("t", 0), ("t", 1)


def test_headline_pairs_the_proposed_method_with_its_rival_on_the_pairs_both_have() -> None:
    # differences 1, 2, 3: mean 2, sample std 1
    found = headline({P0: 1.0, P1: 2.0, P2: 3.0}, {"w": {P0: 0.0, P1: 0.0, P2: 0.0}}, higher=True)
    assert found == Headline("w", 3, 1, 3, 2.0, 1.0, detectable_difference(1.0, 3))
    # the rival is scored on the shared pairs only: "a" averages 0.9 there (0.45 over all its pairs), above "b"'s 0.6
    found = headline({P0: 0.5, P1: 0.5, P2: 0.5}, {"a": {P0: 0.9, Q0: 0.0}, "b": {P0: 0.6, P1: 0.6, P2: 0.6}}, True)
    assert found == Headline("a", 1, 1, 1, pytest.approx(-0.4), None, None)
    # fewer is better: "x" (mean 3) is the rival, not "y" (mean 6)
    assert headline({P0: 3.0, P1: 5.0}, {"x": {P0: 2.0, P1: 4.0}, "y": {P0: 6.0, P1: 6.0}}, higher=False) == \
        Headline("x", 2, 1, 2, 1.0, 0.0, 0.0)
    # a pair with a value that is not finite on either side is left out
    assert headline({P0: math.inf, P1: 2.0, P2: 4.0}, {"z": {P0: 1.0, P1: 1.0, P2: math.inf}}, True) == \
        Headline("z", 1, 1, 1, 1.0, None, None)
    assert headline({P0: 1.0}, {"z": {P1: 1.0}}, True) is None  # no shared pair
    # pairs over two settings and two seeds; the seeds for a shift count over both settings
    found = headline({P0: 1.0, P1: 2.0, Q0: 3.0, Q1: 5.0}, {"v": {P0: 0.0, P1: 0.0, Q0: 0.0, Q1: 0.0}}, True)
    assert found is not None and found.spread is not None and (found.pairs, found.settings, found.seeds) == (4, 2, 2)
    assert found.seeds_for(1.0) == seeds_to_detect(1.0, found.spread, settings=2)
    assert Headline("z", 1, 1, 1, 1.0, None, None).seeds_for(1.0) is None  # one pair: no spread


def test_the_seeds_for_the_target_read_the_spread_in_the_measures_units() -> None:
    """1.5 points is 0.015 of an accuracy printed as a fraction and 1.5 of one printed in %: FedAL's headline
    (spread 0.0065 over 3 settings) needs 2 seeds either way; a statistic that is not an accuracy, or one pair, has
    no count, and beyond the most seeds counted the cell says so."""
    acc = Statistic.model_validate("final_global_acc")
    fraction, percent = (Measure(label="acc", statistic=acc, scale=scale) for scale in (1.0, 100.0))
    found = Headline("r", 9, 3, 3, 0.0186, 0.0065, None)
    assert _seeds_for_target(found, acc, fraction) == "2 (3)" == _seeds_for_target(
        Headline("r", 9, 3, 3, 1.86, 0.65, None), acc, percent)
    assert _seeds_for_target(Headline("r", 9, 3, 3, 1.86, 0.0065, None), acc, percent) == "1 (3)"  # ×100 too small
    assert _seeds_for_target(found, Statistic.model_validate("reach0.5_global_acc"), fraction) == "—"
    assert _seeds_for_target(Headline("r", 1, 1, 1, 0.02, None, None), acc, fraction) == "—"
    assert _seeds_for_target(Headline("r", 9, 3, 3, 0.0, 10.0, None), acc, fraction) == "more than 10000 (3)"


def test_headline_rival_never_runs_the_proposed_algorithm(definition: PaperDefinition) -> None:
    """With FedProx's row running FedAvg's algorithm (a variant of the proposed FedAvg), Standalone is the rival."""
    entries = {"fedavg": Method(), "fedprox": Method(name="fedavg"), "standalone": Method()}
    suite = SimpleNamespace(paper=SimpleNamespace(definition=definition), params=SimpleNamespace(methods=entries))
    seeds = {("fedavg", "iid", "max"): {("iid", 0): 0.9, ("iid", 1): 0.9},
             ("fedprox", "iid", "max"): {("iid", 0): 0.95, ("iid", 1): 0.95},
             ("standalone", "iid", "max"): {("iid", 0): 0.8, ("iid", 1): 0.8}}
    ours = Results(definition, list(entries), definition.columns_for(["iid"]),
                   {k: sum(v.values()) / 2 for k, v in seeds.items()}, seeds)
    section = headline_section(suite, ours)  # type: ignore[arg-type]  # the two attributes it reads
    assert "| Table 1 | Max | `final_clientmax_local_acc` | FedAvg vs Standalone | 2 | +10.00 | 0.00 | 0.00 |" in section
    entries["fedprox"] = Method(name="fedprox")
    assert "FedAvg vs FedProx | 2 | -5.00 |" in headline_section(suite, ours)  # type: ignore[arg-type]


def test_pin_and_compare_cover_every_declared_statistic(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--params", str(root / "params.yaml")]
    assert main(["pin", *common]) == 0
    pinned = root / "reports" / "pinned" / "demo.json"
    data = json.loads(pinned.read_text())
    dir_fedavg = data["values"]["fedavg"]["dir"]
    assert dir_fedavg["seeds"]["1"]["values"]["final_cf(standalone)_local_acc"] == pytest.approx(100.0)
    assert dir_fedavg["seeds"]["1"]["values"]["reach0.5_global_acc"] == 3.0
    assert dir_fedavg["seeds"]["1"]["values"]["reach0.9_global_acc"] == "Infinity"  # never reached, pinned as such
    assert dir_fedavg["seeds"]["0"]["values"]["reach0.9_global_acc"] == 4.0
    assert dir_fedavg["mean"]["final_clientmax_local_acc"] == pytest.approx(0.9)
    assert dir_fedavg["mean"]["reach0.9_global_acc"] == "Infinity"  # a seed that never reaches it: the cell neither
    assert "final_cf(standalone)_local_acc" not in data["values"]["standalone"]["dir"]["mean"]  # blank, as printed
    assert "reach0.5_global_acc" not in data["values"]["fedavg"]["iid"]["mean"]  # no Table-2 column on iid
    dir_fedavg["seeds"]["0"]["values"]["max_global_acc"] = 0.95  # a pinned statistic the suite does not declare
    pinned.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["compare", *common]) == 0
    out = capsys.readouterr().out
    assert "0 DRIFT, 0 MISSING, 3 not pinned" in out  # computed for the cell's other seeds and mean too
    assert any(line.split()[:4] == ["fedavg", "dir", "0", "max_global_acc"] for line in out.splitlines())
    dir_fedavg["seeds"]["1"]["values"]["reach0.9_global_acc"] = 4.0  # pinned as reached; now never reached
    pinned.write_text(json.dumps(data))
    assert main(["compare", *common]) == 1
    assert "1 DRIFT, 0 MISSING, 3 not pinned" in capsys.readouterr().out
    dir_fedavg["seeds"]["1"]["values"]["reach0.9_global_acc"] = "Infinity"
    pinned.write_text(json.dumps(data))

    (root / "results/demo/standalone/dir/seed1/metrics.json").unlink()
    assert main(["compare", *common]) == 2
    err = capsys.readouterr().err
    assert "final_cf(standalone)_local_acc of fedprox/dir/seed1 needs the run of standalone on the same setting " \
           "and seed (" in err and "not run (no metrics.json)); produce it with `bench suite train --method " \
           "standalone`" in err


def test_rank_of_not_reached_is_last(definition: PaperDefinition) -> None:
    results = Results(definition, ["fedavg", "fedprox"], definition.columns_for(["dir"]),
                      {("fedavg", "dir-90", "rounds"): math.inf, ("fedprox", "dir-90", "rounds"): 12.0})
    column = results.column("dir-90")
    assert (results.rank("fedavg", column, "rounds"), results.rank("fedprox", column, "rounds")) == (2, 1)


def test_ranks_are_among_the_papers_rows_only(definition: PaperDefinition) -> None:
    """A suite method that is not a row of the paper's tables (a code-mode variant) is shown but unranked,
    and does not move the ranks of the paper's rows."""
    results = Results(definition, ["fedavg", "fedprox", "variant"], definition.columns_for(["dir"]),
                      {("fedavg", "dir-50", "rounds"): 3.0, ("fedprox", "dir-50", "rounds"): 2.0,
                       ("variant", "dir-50", "rounds"): 1.0})
    column = results.column("dir-50")
    assert [results.rank(m, column, "rounds") for m in ("fedavg", "fedprox", "variant")] == [2, 1, None]


@pytest.mark.parametrize("within, verdict, marks", [
    # Max: ours 90 (FedAvg, FedProx) and 80 (Standalone) in both columns; printed: FedAvg 91/88, FedProx 90/89,
    # Standalone 70/75 -> |Δ| 1, 2, 0, 1, 10, 5; CF: 3 cells with |Δ| 0 (FedProx's DIR is low-confidence)
    (5.0, "**fail**: 8 of 9 cells within ±5 of the printed value (7 within ±3)", ("✗", "~")),
    (10.0, "**pass**: 9 of 9 cells within ±10 of the printed value (7 within ±3)", ("~", "~")),
])
def test_acceptance_band_on_fabricated_runs(root: Path, definition: PaperDefinition, within: float, verdict: str,
                                            marks: tuple[str, str]) -> None:
    """The band is checked per cell of the paper's own columns, counted, and gives one pass/fail line;
    low-confidence cells are left out (FedProx's CF on DIR)."""
    raw = yaml.safe_load(DEFINITION)
    raw["acceptance"] = {"source": "tests", "measures": ["max", "cf"], "within": within, "tight": 3.0}
    raw["tables"]["fairness"]["printed"][0]["rows"] = {  # CF printed only where ours is 100 or -100 ± 0
        "standalone": [70.0, 75.0, None, None], "fedavg": [91.0, 88.0, 100.0, 100.0],
        "fedprox": [90.0, 89.0, -100.0, 10.0]}
    PAPERS["demo"] = Demo(PaperDefinition.model_validate(raw))
    assert main(["suite", "report", "--params", str(root / "params.yaml")]) == 0
    paper = (root / "reports" / "demo" / "paper.md").read_text()
    assert f"## Acceptance band (tests)\n\n{verdict}; pass needs every cell within ±{within:g}." in paper
    assert paper.count(" ✓ |") == 4 + 3
    assert "| Standalone | 80.00 ± 0.00 | — | 70.00 | 10.00 " + marks[0] + " |" in paper
    assert "| Standalone | 80.00 ± 0.00 | — | 75.00 | 5.00 " + marks[1] + " |" in paper
    assert "| FedProx | 90.00 ± 0.00 | — | 89.00 | 1.00 ✓ | -100.00 ± 0.00 | — | 10.00‡ | -110.00 |" in paper
    assert ("| Standalone | IID | Max | 80.00 | 70.00 | 10.00 |" in paper) == (within == 5.0)


def test_acceptance_band_definition_errors() -> None:
    raw = yaml.safe_load(DEFINITION)
    raw["acceptance"] = {"source": "x", "measures": ["accuracy"], "within": 5}
    with pytest.raises(ValidationError, match=r"acceptance.measures: \['accuracy'\] are not measures"):
        PaperDefinition.model_validate(raw)
    raw["acceptance"] = {"source": "x", "measures": ["max"], "within": 3, "tight": 5}
    with pytest.raises(ValidationError, match=r"tight \(5.0\) is wider than within \(3.0\)"):
        PaperDefinition.model_validate(raw)


def test_a_tie_to_float_rounding_is_no_win() -> None:
    """FedAL's proxy ablation: FedAL and FedMD-LF have the same mean accuracy over seeds, computed from other
    per-seed values, so the two floats differ in their last bit; "FedAL > FedMD-LF" must not hold on that."""
    fedal = (0.9577777777777778 + 0.9658333333333333 + 0.9494444444444444) / 3
    fedmd_lf = (0.9569444444444444 + 0.966388888888889 + 0.9497222222222221) / 3
    assert fedal > fedmd_lf  # by float rounding only
    assert _printed_claim(fedal, fedmd_lf).holds is False
    assert _printed_claim(fedal + 1e-4, fedmd_lf).holds is True


def _printed_claim(a: float, b: float) -> Claim:
    """"FedAvg beats FedProx" on one cell of values without seeds (a paper's printed table)."""
    d = PaperDefinition.model_validate(yaml.safe_load(DEFINITION))
    column = next(c for c in d.columns_for(["iid"]) if c.key == "iid")
    results = Results(d, list(d.methods), [column], {("fedavg", "iid", "max"): a, ("fedprox", "iid", "max"): b})
    return claim("FedAvg > FedProx", results, [results.beats("fedavg", "fedprox", column, "max")])
