"""bench versus and bench sensitivity: the paired statistics against hand computations, and the
method author's whole path with the example plug-in package (examples/plugin_package/), installed
into a scratch folder and found through the ``fkd_bench.algorithms`` entry point."""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scipy import stats

from bench.report.paired import compare, compare_all, pooled_std
from bench.suites.verdicts import detectable_difference, holm, t_power

REPO = Path(__file__).resolve().parents[1]

# Differences (points): mean 15/8 = 1.875, sample std 1.8077 over 8 pairs, standard error 0.6391; the paired t-test
# (7 degrees of freedom) gives t = 2.934, p = 0.0219 (scipy.stats.ttest_1samp), interval 1.875 ± 2.3646·0.6391.
HAND = [1.5, -0.5, 2.0, 3.0, 2.5, -1.0, 4.0, 3.5]


def test_paired_comparison_counts_means_and_the_t_test() -> None:
    pairs = [("a", seed) for seed in range(8)]
    base = [0.90 + 0.001 * i for i in range(8)]
    result = compare("fedavg", pairs, [b + d / 100 for b, d in zip(base, HAND)], base)
    assert (result.wins, result.ties, result.losses) == (6, 0, 2)
    assert result.mean == pytest.approx(sum(HAND) / 800)
    expected = stats.ttest_1samp([d / 100 for d in HAND], 0.0)
    assert result.test.p == pytest.approx(expected.pvalue) and result.test.p == pytest.approx(0.0219, abs=1e-4)
    assert result.interval == pytest.approx(tuple(expected.confidence_interval(0.95)))
    [alone] = compare_all(pairs, [b + d / 100 for b, d in zip(base, HAND)], {"fedavg": base})
    assert alone.p_holm == alone.test.p and alone.verdict == "better"  # one baseline: Holm leaves p as it is


def test_holm_matches_the_hand_computation() -> None:
    # sorted: 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; 0.04 * 1 = 0.04 -> max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, None, 0.03]) == [pytest.approx(0.03), pytest.approx(0.06), None, pytest.approx(0.06)]
    assert holm([0.5, 0.9]) == [pytest.approx(1.0), pytest.approx(1.0)]


def test_better_worse_or_inconclusive_after_holm() -> None:
    """Against three baselines: one clearly below the new method, one clearly above, one within the noise."""
    pairs = [("a", s) for s in range(6)]
    new = [0.90, 0.91, 0.92, 0.90, 0.93, 0.91]
    below = [v - d for v, d in zip(new, (0.02, 0.03, 0.02, 0.025, 0.03, 0.02))]
    above = [v + d for v, d in zip(new, (0.02, 0.03, 0.02, 0.025, 0.03, 0.02))]
    noise = [v + d for v, d in zip(new, (0.01, -0.01, 0.005, -0.008, 0.002, -0.004))]
    found = {c.baseline: c for c in compare_all(pairs, new, {"below": below, "above": above, "noise": noise})}
    assert [found[b].verdict for b in ("below", "above", "noise")] == ["better", "worse", "inconclusive"]
    assert found["below"].p_holm == pytest.approx(3 * found["below"].test.p)  # Holm across the three baselines
    assert found["noise"].detectable > abs(found["noise"].mean)  # a difference this suite could not have told


def test_identical_methods_are_not_measured() -> None:
    same = compare("b", [("a", s) for s in range(6)], [0.9] * 6, [0.9] * 6)
    assert same.test is None and same.interval is None and same.verdict == "not measured"


def test_compare_keeps_its_pairs_and_refuses_values_of_another_length() -> None:
    pairs = [("a", 0), ("a", 1), ("b", 0)]
    result = compare("b", pairs, [0.9, 0.8, 0.7], [0.85, 0.8, 0.6])
    assert result.pairs == (("a", 0), ("a", 1), ("b", 0))
    assert result.differences == pytest.approx((0.05, 0.0, 0.1))
    assert result.by_setting() == {"a": [pytest.approx(0.05), 0.0], "b": [pytest.approx(0.1)]}
    with pytest.raises(ValueError):
        compare("b", pairs, [0.9, 0.8, 0.7], [0.85, 0.8])


def test_holm_across_baselines_leaves_out_one_identical_to_the_new_method() -> None:
    pairs = [("a", s) for s in range(6)]
    new = [0.90, 0.91, 0.92, 0.90, 0.93, 0.91]
    below = [v - d for v, d in zip(new, (0.02, 0.03, 0.02, 0.025, 0.03, 0.02))]
    found = {c.baseline: c for c in compare_all(pairs, new, {"same": list(new), "below": below})}
    assert found["same"].test is None and found["same"].p_holm is None
    assert found["below"].p_holm == pytest.approx(found["below"].test.p)  # one measured comparison: p as it is
    assert found["below"].pairs == tuple(pairs)


def test_pooled_std_weights_each_group_by_its_degrees_of_freedom_and_skips_single_values() -> None:
    # [1, 3]: squares 2 on 1 degree of freedom; [2, 2, 5]: squares 6 on 2; [7]: none -> sqrt(8 / 3)
    assert pooled_std([[1.0, 3.0], [2.0, 2.0, 5.0], [7.0]]) == pytest.approx((8 / 3) ** 0.5)
    assert math.isnan(pooled_std([[7.0], [8.0]]))


def test_detectable_difference_grows_with_noise_and_shrinks_with_pairs() -> None:
    assert detectable_difference(0.01, 1) is None
    small, large = detectable_difference(0.005, 9), detectable_difference(0.01, 9)
    assert small is not None and large is not None and small < large
    assert t_power(large, 0.01, 9) == pytest.approx(0.8, abs=1e-6)
    assert detectable_difference(0.01, 30) < large  # more pairs detect less


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is needed to install the example plug-in package (run the tests with `uv run pytest`)"
    return uv


@pytest.mark.slow
def test_versus_with_a_plugin_package_through_its_entry_point(tmp_path: Path, data_dir: Path) -> None:
    """Pin a small suite, install the example package, then `bench versus` its method against the pins."""
    target = tmp_path / "site"
    subprocess.run([_uv(), "pip", "install", "--no-deps", "--offline", "--quiet", "--target", str(target),
                    str(REPO / "examples" / "plugin_package")], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({
        "suite": {"name": "tiny", "seeds": [0, 1, 2], "jobs": 2,
                  "base": {"dataset": {"name": "digits"}, "partition": {"num_clients": 4, "seed": 0},
                           "training": {"rounds": 3}, "evaluation": {"every": 1}, "tracking": {"mlflow": False}}},
        "settings": {"iid": {"partition": {"scheme": "iid"}},
                     "dir0.3": {"partition": {"scheme": "dirichlet", "alpha": 0.3, "min_size": 5}}},
        "methods": {"fedavg": {"name": "fedavg"}, "fedprox": {"name": "fedprox", "mu": 0.1}}}))

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bench.cli", *args], cwd=tmp_path, env=env, text=True,
                              capture_output=True)

    for step in (["suite", "partition"], ["suite", "train"], ["pin"]):
        done = bench(*step, "--params", str(params), "--data-dir", str(data_dir))
        assert done.returncode == 0, done.stderr
    assert "fedavg_ls" in bench("algorithms").stdout
    done = bench("versus", "fedavg_ls", "--params", str(params), "--data-dir", str(data_dir),
                 "-S", "methods.fedavg_ls.smoothing=0.2")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "runs" / "versus" / "tiny" / "fedavg_ls"
    report = (out / "versus.md").read_text()
    assert "| fedavg | 6 |" in report and "| fedprox | 6 |" in report
    assert (out / "versus.png").stat().st_size > 10_000
    # The differences are the new runs' final global accuracy minus the pinned per-seed values.
    pinned = json.loads((tmp_path / "reports" / "pinned" / "tiny.json").read_text())["values"]
    rows = list(csv.DictReader((out / "versus.csv").open()))
    assert len(rows) == 12
    for row in rows:
        run = out / "runs" / row["setting"] / f"seed{row['seed']}"
        new = json.loads((run / "metrics.json").read_text())["final"]["global_acc"]
        base = pinned[row["baseline"]][row["setting"]]["seeds"][row["seed"]]["values"]["final_global_acc"]
        assert float(row["difference"]) == new - base
        assert yaml.safe_load((run / "config.yaml").read_text())["algorithm"]["smoothing"] == 0.2
        baseline_run = tmp_path / "results" / "tiny" / row["baseline"] / row["setting"] / f"seed{row['seed']}"
        assert (json.loads((run / "provenance.json").read_text())["partition_sha256"]
                == json.loads((baseline_run / "provenance.json").read_text())["partition_sha256"])
    # Logged to MLflow, with the files.
    import mlflow

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    [logged] = mlflow.search_runs(experiment_names=["versus-tiny"], output_format="list")
    assert logged.data.params["statistic"] == "final_global_acc"
    assert {"fedavg.p_holm", "fedprox.mean_diff"} <= set(logged.data.metrics)
    # The baselines were not re-trained; a second call trains nothing either.
    again = bench("versus", "fedavg_ls", "--params", str(params), "--data-dir", str(data_dir), "--no-train",
                  "--no-mlflow", "-S", "methods.fedavg_ls.smoothing=0.2")
    assert again.returncode == 0, again.stderr
    assert "training" not in again.stdout
    bad = bench("versus", "fedavg_ls", "--params", str(params), "--no-train", "--statistic",
                "final_clientmax_local_acc", "-S", "methods.fedavg_ls.smoothing=0.2")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not pinned" in bad.stderr


def _pinned(values: dict[str, dict[str, list[float]]]):
    from bench.report.pinned import PinnedFile

    return PinnedFile.model_validate({
        "format": "fkd-bench-pinned", "format_version": 1, "suite": "s", "environment": {}, "tolerance": {},
        "values": {m: {s: {"seeds": {i: {"config_sha256": "x", "values": {"final_global_acc": v}}
                                     for i, v in enumerate(vs)}, "mean": {}} for s, vs in cells.items()}
                   for m, cells in values.items()}})


def test_sensitivity_spreads_match_the_hand_computation() -> None:
    from bench.report.versus import sensitivity
    from bench.suites.statistics import Statistic

    # a - b per seed: setting x: 0.02, 0.04, 0.06 (std 0.02); setting y: 0.01, 0.01, 0.04 (std 0.01732)
    pinned = _pinned({"a": {"x": [0.92, 0.94, 0.96], "y": [0.81, 0.83, 0.88]},
                      "b": {"x": [0.90, 0.90, 0.90], "y": [0.80, 0.82, 0.84]}})
    result = sensitivity(pinned, Statistic.model_validate("final_global_acc"))
    assert result.pairs == 6 and result.methods == 2 and result.method_pairs == 1
    assert result.pair_noise == pytest.approx(((0.02 ** 2 + 0.01732051 ** 2) / 2) ** 0.5, rel=1e-5)
    # within-cell variances: a/x 0.0004, a/y 0.0013, b/x 0, b/y 0.0004 -> pooled std sqrt(0.0021 / 4)
    assert result.seed_spread == pytest.approx((0.0021 / 4) ** 0.5)
    # method means: x 0.94 vs 0.90, y 0.84 vs 0.82 -> std of two values |d| / sqrt(2), averaged
    assert result.method_spread == pytest.approx((0.04 + 0.02) / 2 / 2 ** 0.5)
    assert result.separated == 1  # six positive differences, mean 0.025, std 0.01761: paired t p = 0.0198
    assert result.detectable is not None and result.detectable < 0.04


def test_sensitivity_counts_the_method_pairs_the_paired_test_separates() -> None:
    from bench.report.paired import sensitivity
    from bench.report.versus import sensitivity_row
    from bench.suites.statistics import Statistic

    b = {("x", 0): 0.80, ("x", 1): 0.82, ("x", 2): 0.84, ("y", 0): 0.70, ("y", 1): 0.72, ("y", 2): 0.74}
    a = {p: v + d for (p, v), d in zip(b.items(), (0.05, 0.06, 0.05, 0.06, 0.05, 0.06))}  # clearly above b and c
    c = {p: v + d for (p, v), d in zip(b.items(), (0.01, -0.01, 0.005, -0.004, 0.008, -0.002))}  # b within noise
    result = sensitivity("final_global_acc", {"a": a, "b": b, "c": c})
    assert (result.separated, result.method_pairs, result.settings, result.seeds) == (2, 3, 2, 3)
    row = sensitivity_row(Statistic.model_validate("final_global_acc"), result)
    assert (row[0], row[1], row[2], row[-1]) == ("`final_global_acc`", "3", "6", "2 / 3")
    with pytest.raises(ValueError, match="final_global_acc: sensitivity needs two or more methods"):
        sensitivity("final_global_acc", {"a": a})
    with pytest.raises(ValueError, match="on the same \\(setting, seed\\) pairs"):
        sensitivity("final_global_acc", {"a": a, "b": {p: v for p, v in b.items() if p != ("y", 2)}})


def test_sensitivity_counts_the_seeds_its_pooled_pair_noise_needs_for_the_target() -> None:
    from bench.report.versus import sensitivity, sensitivity_row
    from bench.suites.statistics import Statistic
    from bench.suites.verdicts import POWER

    # a - b per seed: setting x 0.02, 0.04, 0.06 (std 2 points), setting y 0.00, 0.02, 0.04 (std 2 points):
    # pooled pair noise 2 points over 2 settings of 3 seeds
    pinned = _pinned({"a": {"x": [0.92, 0.94, 0.96], "y": [0.80, 0.84, 0.88]},
                      "b": {"x": [0.90, 0.90, 0.90], "y": [0.80, 0.82, 0.84]}})
    accuracy = Statistic.model_validate("final_global_acc")
    result = sensitivity(pinned, accuracy)
    assert (result.settings, result.seeds) == (2, 3) and result.pair_noise == pytest.approx(0.02)
    seeds = result.seeds_for(0.015)
    # the fewest seeds k whose 2k pairs reach the power: by hand, 2 points of noise need about 16 pairs for 1.5
    assert seeds is not None and t_power(0.015, 0.02, 2 * seeds) >= POWER > t_power(0.015, 0.02, 2 * (seeds - 1))
    assert seeds == 8
    assert sensitivity_row(accuracy, result)[7] == "8 (3)"
    assert result.detectable is not None and result.detectable > 0.015  # 3 seeds detect less: the count is above 3
    # a statistic that is not an accuracy (rounds to a target) has no count in points
    assert sensitivity_row(Statistic.model_validate("reach0.5_global_acc"), result)[7] == "—"


def test_bench_sensitivity_leaves_out_a_suite_statistic_one_method_has_and_refuses_it_by_name() -> None:
    params = REPO / "pipelines" / "fedal" / "params.yaml"  # final_global_acc: FedAvg's alone among the pinned rows
    run = [sys.executable, "-m", "bench.cli", "sensitivity", "--params", str(params)]
    shown = subprocess.run(run, cwd=REPO, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "| `final_client_global_acc` |" in shown.stdout and "| `final_global_acc` |" not in shown.stdout
    assert "- `final_client_global_acc`: 9 methods on het-a1, het-a2, het-a5; left out, not on every one of these: " \
        "fedmd_lf." in shown.stdout  # its other columns hold fewer methods
    assert shown.stdout.rstrip().endswith(
        "Left out, no two pinned methods share a setting for them: `final_global_acc`.")
    named = subprocess.run([*run, "--statistic", "final_global_acc"], cwd=REPO, capture_output=True, text=True)
    assert named.returncode == 2 and named.stdout == ""
    assert named.stderr.strip().splitlines()[-1] == \
        "error: suite fedal-proxy: no two pinned methods share a setting for final_global_acc"


def test_sensitivity_judges_the_methods_on_the_settings_they_share_most() -> None:
    """Of the methods' sets of settings and their intersections, the one whose methods (two at least) fill the most
    (method, setting) cells; on a tie the one with more methods, then the one that comes first in the pinned file."""
    from bench.report.versus import comparable
    from bench.suites.statistics import Statistic

    final = Statistic.model_validate("final_global_acc")

    def chosen(methods: dict[str, str]) -> tuple[list[str], list[tuple[str, int]]]:
        """The methods compared and the first's pairs, for methods given as their settings ("xy": x and y)."""
        found = comparable(_pinned({m: {s: [0.9, 0.8] for s in settings} for m, settings in methods.items()}), final)
        return sorted(found), sorted(next(iter(found.values()))) if found else []

    # 5 methods × 2 settings outnumber 2 × 3 cells; each method on those two only
    assert chosen({"a": "xyz", "b": "xyz", "c": "xy", "d": "xy", "e": "xy"}) == (
        ["a", "b", "c", "d", "e"], [("x", 0), ("x", 1), ("y", 0), ("y", 1)])
    # cells before methods: 2 × 4 cells outnumber 5 × 1
    assert chosen({"a": "wxyz", "b": "wxyz", "c": "x", "d": "x", "e": "x"})[0] == ["a", "b"]
    # a tie in cells (2 × 2 and 4 × 1) goes to the most methods, though {x, y} comes first in the file
    assert chosen({"a": "xy", "b": "xy", "c": "y", "d": "y"}) == (["a", "b", "c", "d"], [("y", 0), ("y", 1)])
    # a full tie goes to the settings that come first in the pinned file, whatever their names
    assert chosen({"a": "yz", "b": "yz", "c": "wx", "d": "wx"}) == (
        ["a", "b"], [("y", 0), ("y", 1), ("z", 0), ("z", 1)])
    # an intersection no method has alone: {x, y} of three overlapping sets
    assert chosen({"a": "xyz", "b": "xyw", "c": "xyv"})[0] == ["a", "b", "c"]
    # one method's wide set never wins: a alone on 6 settings against a and b on 2
    assert chosen({"a": "uvwxyz", "b": "yz"}) == (["a", "b"], [("y", 0), ("y", 1), ("z", 0), ("z", 1)])
    assert chosen({"a": "x", "b": "y"}) == ([], [])  # nothing shared
    # a setting where one seed lacks the statistic is not one of the method's
    pinned = _pinned({"a": {"x": [0.9, 0.8], "y": [0.7, 0.6]}, "b": {"x": [0.85, 0.8], "y": [0.7, 0.65]}})
    del pinned.values["b"]["y"].seeds[1].values["final_global_acc"]
    assert sorted(comparable(pinned, final)["b"]) == [("x", 0), ("x", 1)]


def test_a_narrowed_sensitivity_names_its_settings_and_the_methods_left_out() -> None:
    from bench.report.versus import narrowed
    from bench.suites.statistics import Statistic

    final, local = Statistic.model_validate("final_global_acc"), Statistic.model_validate("final_local_acc")
    wide, narrow = {"x": [0.9, 0.8], "y": [0.7, 0.6], "z": [0.5, 0.4]}, {"x": [0.85, 0.8]}
    assert narrowed(_pinned({"a": wide, "b": wide, "c": narrow}), final) == \
        "`final_global_acc`: 2 methods on x, y, z; left out, not on every one of these: c."
    assert narrowed(_pinned({"a": wide, "b": wide, "c": narrow, "d": narrow, "e": narrow, "f": narrow}), final) == \
        "`final_global_acc`: 6 methods on x."  # y and z unused, every method compared
    assert narrowed(_pinned({"a": wide, "b": wide}), final) is None  # every setting and method
    assert narrowed(_pinned({"a": wide, "b": wide, "c": narrow}), local) is None  # nothing compared


def test_sensitivity_rows_leave_out_refuse_or_fail_clearly() -> None:
    from bench.errors import BenchError
    from bench.report.versus import sensitivity, sensitivity_row, sensitivity_rows
    from bench.suites.statistics import Statistic

    pinned = _pinned({"a": {"x": [0.92, 0.94, 0.96], "y": [0.80, 0.84, 0.88]},
                      "b": {"x": [0.90, 0.90, 0.90], "y": [0.80, 0.82, 0.84]}})
    final, local = Statistic.model_validate("final_global_acc"), Statistic.model_validate("final_local_acc")
    rows, left_out = sensitivity_rows(pinned, [final, local], named=False)  # no method has final_local_acc
    assert [s for s, _ in rows] == [final] and left_out == ["final_local_acc"]
    with pytest.raises(BenchError, match="^suite s: no two pinned methods share a setting for final_local_acc$"):
        sensitivity_rows(pinned, [final, local], named=True)
    with pytest.raises(BenchError, match="no statistic of the suite is pinned for two methods; name one"):
        sensitivity_rows(pinned, [local], named=False)
    # one seed a setting: no pair noise, so no count (not "more than 10000")
    single = sensitivity(_pinned({"a": {"x": [0.9], "y": [0.8]}, "b": {"x": [0.8], "y": [0.7]}}), final)
    assert single.detectable is None and sensitivity_row(final, single)[7] == "—"
    # methods pinned on different seeds: one line, not a traceback
    with pytest.raises(BenchError, match="on the same \\(setting, seed\\) pairs; pin every method on the same seeds"):
        sensitivity(_pinned({"a": {"x": [0.9, 0.8]}, "b": {"x": [0.8, 0.7, 0.6]}}), final)


def test_default_baselines_leave_out_methods_without_the_statistic() -> None:
    from bench.report.pinned import load_pinned
    from bench.report.versus import default_baselines
    from bench.suites import load_suite
    from bench.suites.statistics import Statistic

    suite = load_suite(REPO / "params.yaml")
    pinned = load_pinned(REPO / "reports" / "pinned" / "default.json", suite)
    kept, skipped = default_baselines(suite, pinned, "fedavg", Statistic.model_validate("final_global_acc"))
    assert skipped == ["standalone"] and "fedavg" not in kept and len(kept) == len(suite.methods) - 2
