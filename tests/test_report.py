"""`bench suite report`, `bench pin` and `bench compare` on a tiny suite trained once per module."""
from __future__ import annotations

import csv
import json
import os
import shutil
import statistics
from pathlib import Path

import pytest

from bench.cli import main
from bench.data import prepare_dataset

PARAMS = """
suite:
  name: tiny
  seeds: [0, 1]
  jobs: 1
  base:
    dataset: {name: digits}
    partition: {num_clients: 4, local_test_fraction: 0.2, seed: 0}
    model: {name: cnn}
    training: {rounds: 3, local_epochs: 1, batch_size: 32, optimizer: {name: sgd, lr: 0.05}}
    tracking: {mlflow: false}
settings:
  iid: {partition: {scheme: iid}}
  dir0.5: {partition: {scheme: dirichlet, alpha: 0.5, mode: per_class, min_size: 10}}
methods:
  fedavg: {}
  standalone: {}
"""
METHODS, SETTINGS, SEEDS = ["fedavg", "standalone"], ["iid", "dir0.5"], [0, 1]


@pytest.fixture(scope="module")
def suite_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained tiny suite: params.yaml, data/, partitions/ and results/ in one folder."""
    root = tmp_path_factory.mktemp("suite")
    (root / "params.yaml").write_text(PARAMS)
    prepare_dataset("digits", root / "data")
    common = ["--params", str(root / "params.yaml"), "--data-dir", str(root / "data")]
    assert main(["suite", "partition", *common]) == 0
    assert main(["suite", "train", *common]) == 0
    return root


def bench(root: Path, *args: str) -> int:
    return main([*args, "--params", str(root / "params.yaml")])


def seed_metrics(root: Path, method: str, setting: str) -> list[dict]:
    return [json.loads((root / "results/tiny" / method / setting / f"seed{s}" / "metrics.json").read_text())
            for s in SEEDS]


def test_report_tables_match_the_runs(suite_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    stale = [out / "metrics.json", out / "metrics" / "gone" / "fedavg.json", out / "plots" / "curves_gone.csv"]
    for path in stale:  # an earlier version's file, a setting the suite no longer has
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    assert bench(suite_root, "suite", "report", "--out", str(out)) == 0
    assert not any(path.exists() for path in stale)
    for name in ["summary.md", "summary.csv"] + [f"metrics/{s}/{m}.json" for s in SETTINGS for m in METHODS] + [
            f"{folder}/{kind}_{s}.{ext}" for s in SETTINGS
            for folder, kind, ext in (("plots", "curves", "csv"), ("figures", "curves", "png"),
                                      ("figures", "partition", "png"))]:
        assert (out / name).stat().st_size > 0, name
    markdown = (out / "summary.md").read_text()
    tables = {}  # section title -> {method: {column: cell}}
    for section in markdown.split("\n## ")[1:]:
        lines = [line for line in section.splitlines() if line.startswith("|")]
        if lines:
            header = [c.strip() for c in lines[0].strip("|").split("|")]
            rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
            tables[section.splitlines()[0]] = {r[0]: dict(zip(header, r)) for r in rows}
    global_table = next(t for title, t in tables.items() if title.startswith("Global accuracy"))
    local_table = next(t for title, t in tables.items() if title.startswith("Local accuracy"))
    assert list(global_table) == METHODS and list(local_table) == METHODS
    assert list(global_table["fedavg"]) == ["method"] + [f"{s} {k}" for s in SETTINGS
                                                         for k in ("final", "last-5", "best†")]
    with open(out / "summary.csv", newline="") as handle:
        summary = {(row["method"], row["setting"]): row for row in csv.DictReader(handle)}
    for setting in SETTINGS:
        metrics = {m: json.loads((out / "metrics" / setting / f"{m}.json").read_text()) for m in METHODS}
        for method, table, metric in [("fedavg", global_table, "global_acc"), ("fedavg", local_table, "local_acc"),
                                      ("standalone", local_table, "local_acc")]:
            finals = [m["final"][metric] for m in seed_metrics(suite_root, method, setting)]
            mean, std = statistics.fmean(finals), statistics.stdev(finals)
            assert table[method][f"{setting} final"] == f"{100 * mean:.2f} ± {100 * std:.2f}"
            assert metrics[method][f"final_{metric}"] == pytest.approx(mean, abs=1e-12)
            assert float(summary[method, setting][f"final_{metric}_mean"]) == pytest.approx(mean, abs=1e-12)
        assert global_table["standalone"][f"{setting} final"] == "—"  # no global model
        # metrics files: what a person reads in `dvc metrics show`, the rest is in summary.csv
        assert set(metrics["fedavg"]) == {"final_global_acc", "last5_global_acc", "final_local_acc", "last5_local_acc"}
        assert set(metrics["standalone"]) == {"final_local_acc", "last5_local_acc"}
        assert float(summary["fedavg", setting]["time_vs_fedavg"]) == 1.0
        with open(out / "plots" / f"curves_{setting}.csv", newline="") as handle:
            curves = list(csv.DictReader(handle))
        assert list(curves[0]) == ["round", "setting", "method", "metric", "accuracy", "method_index"]
        assert {(r["method"], r["method_index"]) for r in curves} == {("fedavg", "0"), ("standalone", "1")}
        assert {(r["method"], r["metric"]) for r in curves} == {
            ("fedavg", "global_acc"), ("fedavg", "local_acc"), ("standalone", "local_acc")}
        assert {r["setting"] for r in curves} == {setting}
        fedavg_final = next(r for r in curves if r["method"] == "fedavg" and r["metric"] == "global_acc"
                            and r["round"] == "3")
        finals = [m["final"]["global_acc"] for m in seed_metrics(suite_root, "fedavg", setting)]
        assert float(fedavg_final["accuracy"]) == pytest.approx(statistics.fmean(finals), abs=1e-12)
    assert "× fedavg" in markdown and "![curves_iid](figures/curves_iid.png)" in markdown


def test_pin_then_compare(suite_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pinned = tmp_path / "pinned.json"
    assert bench(suite_root, "pin", "--out", str(pinned)) == 0
    data = json.loads(pinned.read_text())
    assert (data["format"], data["format_version"], data["suite"]) == ("fkd-bench-pinned", 1, "tiny")
    assert {"machine", "torch", "uv_lock_sha256", "python", "git_commit", "platform"} <= set(data["environment"])
    first = seed_metrics(suite_root, "fedavg", "iid")[0]
    assert data["values"]["fedavg"]["iid"]["seeds"]["0"]["values"]["final_global_acc"] == first["final"]["global_acc"]
    capsys.readouterr()
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 0
    assert "0 DRIFT, 0 MISSING" in capsys.readouterr().out

    # exact in the same environment: the smallest change fails, and the output names the cell
    data["values"]["fedavg"]["dir0.5"]["seeds"]["1"]["values"]["last5_local_acc"] += 1e-12
    pinned.write_text(json.dumps(data))
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 1
    out = capsys.readouterr().out
    assert "DRIFT: fedavg/dir0.5/seed1 last5_local_acc" in out and "1 DRIFT" in out
    assert any(line.split()[:4] == ["fedavg", "dir0.5", "1", "last5_local_acc"] and line.endswith("DRIFT")
               for line in out.splitlines())

    # another environment: the file's absolute tolerances apply
    data["environment"]["torch"] = "0.0.0"
    data["values"]["fedavg"]["iid"]["seeds"]["0"]["values"]["final_global_acc"] += 0.03
    pinned.write_text(json.dumps(data))
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 0
    data["values"]["fedavg"]["iid"]["mean"]["final_global_acc"] += 0.1
    pinned.write_text(json.dumps(data))
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 1
    assert "DRIFT: fedavg/iid/mean final_global_acc" in capsys.readouterr().out


def test_only_runs_on_the_pinned_processor_compare_bitwise(suite_root: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The kernel pinning does not make two processors compute the same bits (measured, docs/determinism.md):
    a pin records the processor, a run on another one — or against a file pinned before the processor was
    recorded — compares with the tolerance, and the same processor still compares bitwise."""
    pinned = tmp_path / "pinned.json"
    assert bench(suite_root, "pin", "--out", str(pinned)) == 0
    data = json.loads(pinned.read_text())
    assert data["environment"]["cpu"] and "cpu" in data["tolerance"]["fingerprint"]
    data["values"]["fedavg"]["iid"]["seeds"]["0"]["values"]["final_global_acc"] += 0.03
    pinned.write_text(json.dumps(data))
    capsys.readouterr()
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 1  # same processor: exact
    assert "DRIFT: fedavg/iid/seed0 final_global_acc" in capsys.readouterr().out
    data["environment"]["cpu"] = "GenuineIntel family 6 model 85 stepping 7 (another); flags 000000000000"
    pinned.write_text(json.dumps(data))
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 0  # another processor: tolerance
    del data["environment"]["cpu"]
    data["tolerance"]["fingerprint"].remove("cpu")  # a file pinned before the processor was recorded
    pinned.write_text(json.dumps(data))
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 0


PORTABLE = "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=AVX2"


def test_runs_at_other_cpu_kernels_than_the_pins_compare_within_the_tolerance_and_say_so(
        suite_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pin records its CPU kernels; native runs against portable pins are never compared bitwise, and
    compare says so in one line with the fix; runs at the pins' kernels compare bitwise and say nothing."""
    from bench import cpu_kernels_in_force, describe_cpu_kernels, kernel_level_name

    ours = describe_cpu_kernels(cpu_kernels_in_force())  # the level the fixture's runs trained at
    other = PORTABLE if ours == "native" else "native"
    pinned = tmp_path / "pinned.json"
    assert bench(suite_root, "pin", "--out", str(pinned)) == 0
    data = json.loads(pinned.read_text())
    assert data["environment"]["cpu_kernels"] == ours and "cpu_kernels" in data["tolerance"]["fingerprint"]
    data["values"]["fedavg"]["iid"]["seeds"]["0"]["values"]["final_global_acc"] += 0.03
    pinned.write_text(json.dumps(data))
    capsys.readouterr()
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 1  # the pins' kernels: exact
    assert "CPU kernels:" not in capsys.readouterr().out
    data["environment"]["cpu_kernels"] = other
    pinned.write_text(json.dumps(data))
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 0  # other kernels: the tolerance
    out = capsys.readouterr().out
    assert "CPU kernels: runs trained at other kernels than the pins (" in out
    assert (f" at {kernel_level_name(ours)}; pinned at {kernel_level_name(other)}: {other}) compare within the "
            "pinned tolerance, not bitwise; to compare them bitwise, re-train them at the pins' kernels") in out


def test_a_pinned_suite_trains_at_its_pins_cpu_kernels(suite_root: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench suite train` of a suite pinned at portable kernels trains its runs at them (in started processes,
    this one being native), so that its stage's compare stays exact; without a pin, or when the environment
    chooses kernels, the runs take this process's."""
    from bench import CPU_KERNEL_VARIABLES

    for key in (*CPU_KERNEL_VARIABLES, "BENCH_CPU_KERNELS"):
        monkeypatch.delenv(key, raising=False)
    root = tmp_path / "suite"
    shutil.copytree(suite_root, root, ignore=shutil.ignore_patterns("results", "reports"))
    assert bench(suite_root, "pin", "--out", str(root / "reports" / "pinned" / "tiny.json")) == 0
    path = root / "reports" / "pinned" / "tiny.json"
    pin = json.loads(path.read_text())
    pin["environment"]["cpu_kernels"] = PORTABLE  # whatever level the fixture's runs had
    path.write_text(json.dumps(pin))
    common = ["--params", str(root / "params.yaml"), "--data-dir", str(root / "data")]
    assert main(["suite", "train", *common, "--method", "fedavg", "-S", "suite.base.training.rounds=1"]) == 0
    recorded = {json.loads(p.read_text())["cpu_kernels"] for p in (root / "results/tiny/fedavg").rglob("provenance.json")}
    assert recorded == {PORTABLE}
    monkeypatch.setenv("BENCH_CPU_KERNELS", "native")  # the environment's choice wins
    assert main(["suite", "train", *common, "--method", "standalone", "-S", "suite.base.training.rounds=1"]) == 0
    recorded = {json.loads(p.read_text())["cpu_kernels"] for p in (root / "results/tiny/standalone").rglob("provenance.json")}
    assert recorded == {"native"}


def _forge(folder: Path) -> None:
    """Swap two training indices of a saved partition and rewrite the sha256 its partition.json records."""
    import numpy as np

    from bench.data.partition import Partition, load_partition

    part = load_partition(folder)
    part.train[0][[0, 1]] = part.train[0][[1, 0]]
    Partition.save(part, folder)
    assert load_partition(folder).sha256 == part.sha256  # it passes its own check: only making it again tells


def test_compare_fails_on_a_forged_partition(suite_root: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 29 item 4: two indices swapped and the sha256 rewritten; compare used to say every value ok."""
    root = tmp_path / "copy"
    shutil.copytree(suite_root, root)
    pinned = tmp_path / "pinned.json"
    data = ["--data-dir", str(root / "data")]
    assert bench(root, "pin", "--out", str(pinned)) == 0
    assert bench(root, "compare", "--pinned", str(pinned), *data) == 0
    assert "partitions: 2 of 2 verified against their data, scheme and seed" in capsys.readouterr().out
    _forge(root / "partitions" / "tiny" / "iid")
    assert bench(root, "compare", "--pinned", str(pinned), *data) == 1
    out = capsys.readouterr().out
    assert "0 DRIFT, 0 MISSING" in out and "partitions: 1 of 2 verified" in out
    assert f"PARTITION: partition iid ({root / 'partitions/tiny/iid'}): FORGED or stale: its arrays hash to " in out
    # without the data at hand, the partition the runs recorded still tells
    assert bench(root, "compare", "--pinned", str(pinned), "--data-dir", str(tmp_path / "nothing")) == 1
    out = capsys.readouterr().out
    assert "but the runs trained on" in out and "digits is not prepared in" in out


def test_a_suite_nobody_pinned_compares_as_not_pinned(suite_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 29 item 8: a profile without a pinned file (FedAL's smoke) failed at the compare stage."""
    assert bench(suite_root, "compare", "--data-dir", str(suite_root / "data")) == 0
    out = capsys.readouterr().out
    assert f"against {suite_root / 'reports/pinned/tiny.json'} (absent: nothing pinned; `bench pin` pins the runs): " \
           "0 ok, 0 CHANGED, 0 DRIFT, 0 MISSING, 36 not pinned; partitions: 2 of 2 verified" in out
    assert bench(suite_root, "compare", "--pinned", str(suite_root / "absent.json")) == 2  # named, it must exist


def test_new_method_is_not_pinned_and_missing_pinned_run_fails(
        suite_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pinned = tmp_path / "pinned.json"
    assert bench(suite_root, "pin", "--out", str(pinned)) == 0
    data = json.loads(pinned.read_text())
    data["values"]["fedprox"] = data["values"].pop("standalone")  # standalone new; fedprox pinned, never run
    pinned.write_text(json.dumps(data))
    capsys.readouterr()
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 1
    out = capsys.readouterr().out
    assert any(line.startswith("standalone") and line.endswith("not pinned") for line in out.splitlines())
    assert "MISSING: fedprox/iid/seed0 (final_local_acc, last5_local_acc): not in the suite's params" in out
    assert "0 DRIFT, 12 MISSING, 12 not pinned" in out
    assert "the suite no longer has fedprox/iid, fedprox/dir0.5: if removed deliberately, re-pin" in out
    assert "not pinned: standalone (12 values, new since the pin: `bench pin` adds them)" in out
    del data["values"]["fedprox"]
    pinned.write_text(json.dumps(data))
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 0


@pytest.mark.parametrize("problem, expected", [
    ("missing", "not found"),
    ("corrupt", "is not valid JSON"),
    ("schema", "is not a fkd-bench-pinned v1 file"),
    ("other suite", "is for suite 'other', not 'tiny'"),
])
def test_compare_rejects_bad_pinned_file(suite_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         problem: str, expected: str) -> None:
    pinned = tmp_path / "pinned.json"
    assert bench(suite_root, "pin", "--out", str(pinned)) == 0
    data = json.loads(pinned.read_text())
    if problem == "missing":
        pinned.unlink()
    elif problem == "corrupt":
        pinned.write_text(pinned.read_text()[:100])
    elif problem == "schema":
        del data["values"]["fedavg"]["iid"]["mean"]
        pinned.write_text(json.dumps(data))
    else:
        data["suite"] = "other"
        pinned.write_text(json.dumps(data))
    capsys.readouterr()
    assert bench(suite_root, "compare", "--pinned", str(pinned)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: pinned file {pinned}") and expected in err and "`bench pin`" in err
    assert len(err.strip().splitlines()) == 1


def test_missing_or_failed_run_is_named(suite_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench(suite_root, "suite", "report", "-S", "suite.seeds=[0,7]", "--out", str(tmp_path / "r")) == 2
    err = capsys.readouterr().err
    assert f"{suite_root}/results/tiny/standalone/dir0.5/seed7: not run (no metrics.json)" in err
    assert "bench suite train --method fedavg --method standalone" in err and "Traceback" not in err

    root = tmp_path / "copy"
    shutil.copytree(suite_root, root, ignore=shutil.ignore_patterns("data"))
    assert bench(root, "pin", "--out", str(tmp_path / "pinned.json")) == 0
    run = root / "results/tiny/standalone/iid/seed1"
    (run / "metrics.json").unlink()
    (run / "failure.json").write_text(json.dumps({"status": "failed", "reason": "diverged at round 2"}))
    for command in (["suite", "report"], ["pin", "--out", str(tmp_path / "pinned2.json")]):
        assert bench(root, *command) == 2
        err = capsys.readouterr().err
        assert f"{run}: failed (diverged at round 2)" in err and "bench suite train --method standalone" in err
    assert not (tmp_path / "pinned2.json").exists()
    assert bench(root, "compare", "--pinned", str(tmp_path / "pinned.json")) == 1
    out = capsys.readouterr().out
    assert f"MISSING: standalone/iid/seed1 (final_local_acc, last5_local_acc): {run}: failed (diverged at round 2)" \
        in out
    assert "standalone/iid/mean" not in out.split("\n\n")[-1]  # its mean fails too, but the seed says why
    assert "produce the runs with `bench suite train --method standalone`" in out


def test_a_diverged_run_is_an_outcome_counted_per_cell(suite_root: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`bench suite train` records a diverged run (failure.json) and succeeds; the report counts the cell's
    diverged seeds and computes its statistics over the others; pin and compare accept it."""
    from bench.suites import load_suite
    from bench.tracking import write_failure

    root = tmp_path / "copy"
    shutil.copytree(suite_root, root, ignore=shutil.ignore_patterns("data"))
    common = ["--params", str(root / "params.yaml"), "--data-dir", str(suite_root / "data")]
    explode = ["-S", "methods.standalone.config={training: {optimizer: {name: sgd, lr: 1.0e+6}}}", "-S", "suite.seeds=[1]"]
    capsys.readouterr()
    assert main(["suite", "train", *common, *explode, "--method", "standalone"]) == 0
    assert "DIVERGED" in capsys.readouterr().out
    exploded = root / "results/tiny/standalone/iid/seed1"
    assert (exploded / "failure.json").exists() and not (exploded / "metrics.json").exists()
    assert main(["suite", "report", *common, *explode, "--out", str(tmp_path / "r1")]) == 0
    assert "| standalone | — (1/1 diverged) |" in (tmp_path / "r1" / "summary.md").read_text()

    # seed 1 diverged under the suite's own config, seed 0 finished
    suite = load_suite(root / "params.yaml")
    for setting in SETTINGS:  # back to the runs of the suite's config
        shutil.rmtree(root / "results/tiny/standalone" / setting / "seed1")
        shutil.copytree(suite_root / "results/tiny/standalone" / setting / "seed1",
                        root / "results/tiny/standalone" / setting / "seed1")
    shutil.rmtree(exploded)
    write_failure(exploded, suite.config("standalone", "iid", 1), "diverged at round 2 (client 0): the loss became NaN")
    assert main(["suite", "report", *common, "--out", str(tmp_path / "r")]) == 0
    summary = (tmp_path / "r" / "summary.md").read_text()
    local = next(line for line in summary.split("## Local accuracy")[1].splitlines() if line.startswith("| standalone"))
    final = seed_metrics(suite_root, "standalone", "iid")[0]["final"]["local_acc"]
    assert f"| {100 * final:.2f} (1/2 diverged) |" in local  # the statistics of seed 0 alone
    assert main(["pin", *common, "--out", str(tmp_path / "pinned.json")]) == 0
    cell = json.loads((tmp_path / "pinned.json").read_text())["values"]["standalone"]["iid"]
    assert cell["seeds"]["1"]["values"] == {} and cell["mean"]["final_local_acc"] == final
    capsys.readouterr()
    assert main(["compare", *common, "--pinned", str(tmp_path / "pinned.json")]) == 0


def test_pinned_values_are_the_same_from_records_or_metrics(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The pinned keys and values of runs with per-client records.csv are metrics.json's, bitwise; a run
    without records.csv (trained before it existed) compares exactly against them from its curves.csv."""
    import numpy as np

    from bench.suites import load_suite
    from tests.fabricated import random_run

    (tmp_path / "params.yaml").write_text(PARAMS)
    suite = load_suite(tmp_path / "params.yaml")
    rng = np.random.default_rng(0)
    metrics = {(m, s, seed): random_run(suite.run_dir(m, s, seed), suite.config(m, s, seed), rng, m == "fedavg")
               for m in METHODS for s in SETTINGS for seed in SEEDS}
    assert bench(tmp_path, "pin") == 0
    pinned = json.loads((tmp_path / "reports/pinned/tiny.json").read_text())["values"]
    for (method, setting, seed), m in metrics.items():
        expected = {f"{name}_{metric}": m[group][metric] for name, group in (("final", "final"), ("last5", "last5_mean"))
                    for metric in ("global_acc", "local_acc") if metric in m[group]}
        assert pinned[method][setting]["seeds"][str(seed)]["values"] == expected
    for records in (tmp_path / "results").rglob("records.csv"):
        records.unlink()
    capsys.readouterr()
    assert bench(tmp_path, "compare") == 0
    assert "36 ok, 0 CHANGED, 0 DRIFT, 0 MISSING, 0 not pinned" in capsys.readouterr().out


def test_changed_config_fails_in_any_environment(suite_root: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A method re-trained with another config fails as CHANGED even where the tolerance would let its
    numbers pass (another environment), is counted in the summary line and names the fix; `bench pin`
    after the deliberate change passes again."""
    import yaml

    root = tmp_path / "copy"
    shutil.copytree(suite_root, root, ignore=shutil.ignore_patterns("data"))
    pinned = tmp_path / "pinned.json"
    assert bench(root, "pin", "--out", str(pinned)) == 0
    data = json.loads(pinned.read_text())
    data["environment"]["torch"] = "0.0.0"  # away from the pinning machine: tolerance, not exact
    for cells in data["tolerance"], :
        cells.update(per_seed_abs=1.0, mean_abs=1.0)  # so wide that no number can drift
    pinned.write_text(json.dumps(data))
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["methods"]["fedavg"] = {"config": {"training": {"optimizer": {"name": "sgd", "lr": 0.0501}}}}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    assert bench(root, "suite", "train", "--method", "fedavg", "--data-dir", str(suite_root / "data")) == 0
    capsys.readouterr()
    drift = tmp_path / "drift.md"
    assert bench(root, "compare", "--pinned", str(pinned), "--out", str(drift)) == 1
    out = capsys.readouterr().out
    # fedavg: 2 settings x (2 seeds + mean) x 4 values
    assert f"suite tiny against {pinned}: 12 ok, 24 CHANGED, 0 DRIFT, 0 MISSING, 0 not pinned" in out
    assert "CHANGED: fedavg/iid: seeds 0, 1 trained with another config than pinned (12 values)" in out
    assert "re-pin with `bench pin` and say why in the commit" in out
    table = drift.read_text()
    assert any(line.split()[:4] == ["fedavg", "iid", "0", "final_global_acc"]
               and "CHANGED (config changed since pinned: sha256" in line for line in table.splitlines())
    assert bench(root, "pin", "--out", str(pinned)) == 0  # the deliberate change, re-pinned
    assert bench(root, "compare", "--pinned", str(pinned)) == 0


def test_compare_with_out_prints_the_summary_and_what_failed(suite_root: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    pinned, drift = tmp_path / "pinned.json", tmp_path / "drift.md"
    assert bench(suite_root, "pin", "--out", str(pinned)) == 0
    capsys.readouterr()
    data_dir = ["--data-dir", str(suite_root / "data")]
    assert bench(suite_root, "compare", "--pinned", str(pinned), "--out", str(drift), *data_dir) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"suite tiny against {pinned}: 36 ok, 0 CHANGED, 0 DRIFT, 0 MISSING, 0 not pinned; partitions: 2 of 2 verified "
        f"against their data, scheme and seed (full table: {drift})"]
    assert len(drift.read_text().splitlines()) == 1 + 36 + 1 + 2 + 2  # header, a row per value, the partitions, summary

    data = json.loads(pinned.read_text())
    data["values"]["fedavg"]["iid"]["seeds"]["1"]["values"]["final_global_acc"] += 1e-9
    pinned.write_text(json.dumps(data))
    assert bench(suite_root, "compare", "--pinned", str(pinned), "--out", str(drift)) == 1  # no data: not made again
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"35 ok, 0 CHANGED, 1 DRIFT, 0 MISSING, 0 not pinned; partitions: 0 of 2 verified against "
                             f"their data, scheme and seed (the data is not at hand for the others: --data-dir) "
                             f"(full table: {drift})")
    assert lines[1].startswith("  DRIFT: fedavg/iid/seed1 final_global_acc: pinned ") and "tolerance exact" in lines[1]
    assert lines[2].startswith("DRIFT: a number left its tolerance") and len(lines) == 3


def test_compare_before_anything_ran_names_the_command(suite_root: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    pinned = tmp_path / "pinned.json"
    assert bench(suite_root, "pin", "--out", str(pinned)) == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(suite_root / "params.yaml", fresh)
    capsys.readouterr()
    assert bench(fresh, "compare", "--pinned", str(pinned)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "MISSING" not in err
    assert f"suite tiny has none of its 8 runs in {fresh}/results/tiny to compare with {pinned}; run " in err
    assert err.rstrip().endswith("run `bench suite train` (same --params/--root/-S as this command) first")
    (fresh / "dvc.yaml").write_text("stages: {}\n")  # a pipeline beside the params: its command first
    assert bench(fresh, "compare", "--pinned", str(pinned)) == 2
    err = capsys.readouterr().err
    assert f"; run `dvc repro {os.path.relpath(fresh / 'dvc.yaml')}` (or `bench suite train" in err, err


def test_reports_name_the_commits_of_their_runs_and_pins(suite_root: Path, tmp_path: Path) -> None:
    from bench.report.pinned import load_pinned
    from bench.report.provenance import provenance_markdown
    from bench.report.runs import RunRecord
    from bench.suites import load_suite

    root = tmp_path / "copy"
    shutil.copytree(suite_root, root, ignore=shutil.ignore_patterns("data"))
    assert bench(root, "pin") == 0  # reports/pinned/tiny.json, which the report shows
    assert bench(root, "suite", "report") == 0
    summary = (root / "reports" / "tiny" / "summary.md").read_text()
    run = json.loads((root / "results/tiny/fedavg/iid/seed0/provenance.json").read_text())
    assert "## Provenance" in summary and f"- Runs (8): git commit `{run['git_commit']}`." in summary
    assert f"- Pinned values (`reports/pinned/tiny.json`): from runs of git commit `{run['git_commit']}`, the " \
           "same commit as these runs'." in summary
    assert run["code_sha256"] in summary

    suite = load_suite(root / "params.yaml")
    pinned = load_pinned(root / "reports/pinned/tiny.json", suite)
    assert pinned.environment["code_sha256"] == run["code_sha256"]
    records = {("fedavg", "iid", 0): RunRecord(root, {}, {}, {"git_commit": "c1" * 20 + "-dirty", "code_sha256": "x"}),
               ("fedprox", "iid", 0): RunRecord(root, {}, {}, {"git_commit": "c2" * 20, "code_sha256": "y"})}
    pinned = pinned.model_copy(update={"environment": {**pinned.environment, "git_commit": "c3" * 20}})
    text = provenance_markdown(records, ["fedavg", "fedprox"], pinned, "reports/pinned/tiny.json")
    assert ("from 2 git commits (a method's runs are re-trained when its code or params change): "
            f"`{'c1' * 20}-dirty`: fedavg; `{'c2' * 20}`: fedprox.") in text
    assert f"**Not reproducible from a commit:** the runs of `{'c1' * 20}-dirty` were trained from uncommitted" in text
    assert f"from runs of git commit `{'c3' * 20}`, **another commit than these runs'**; the compare stage" in text
    assert "Pinned values: none" in provenance_markdown(records, ["fedavg", "fedprox"], None, None)

    from bench.report.pinned import pin_warnings  # `bench pin` warns about runs of uncommitted code

    data = json.loads((root / "reports/pinned/tiny.json").read_text())
    for commit, warned in (("abc", False), ("abc-dirty", True), (["abc", "def-dirty"], True)):
        data["environment"]["git_commit"] = commit
        (tmp_path / "p.json").write_text(json.dumps(data))
        assert bool(pin_warnings(tmp_path / "p.json")) == warned


def test_curves_figure_gives_each_method_its_own_colour_and_keeps_the_legend_off_the_curves() -> None:
    import numpy as np
    from matplotlib.colors import to_hex

    from bench.report.suite_report import PALETTE, curves_figure

    methods = [f"method{i}" for i in range(23)]
    rounds = np.arange(1, 21)
    rng = np.random.default_rng(0)
    curves = {(m, metric): rng.uniform(0.5, 1.0, (3, 20)) for m in methods for metric in ("global_acc", "local_acc")}
    fig = curves_figure(rounds, curves, "test")
    fig.canvas.draw()
    for ax in fig.axes:
        styles = [(to_hex(line.get_color()), line.get_linestyle()) for line in ax.get_lines()]
        assert len(styles) == len(methods) and len(set(styles)) == len(methods)
        assert len({colour for colour, _ in styles[:len(PALETTE)]}) == len(PALETTE)  # 21 distinct colours
        assert styles[0][0] != styles[10][0]  # FedAvg and the 11th method (FedHKD-code) no longer share blue
    assert [t.get_text() for t in fig.legends[0].get_texts()] == methods
    legend = fig.legends[0].get_window_extent()
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent()), "the legend covers a panel"


def test_dvc_plots_template_colours_methods_as_the_figures_do() -> None:
    from bench.report.suite_report import PALETTE

    template = json.loads((Path(__file__).resolve().parents[1] / ".dvc" / "plots" / "fkd_methods.json").read_text())
    encoding = template["spec"]["encoding"]
    assert encoding["color"]["field"] == "method" and encoding["color"]["scale"]["range"] == list(PALETTE)
    assert encoding["x"]["field"] == "<DVC_METRIC_X>" and encoding["y"]["field"] == "<DVC_METRIC_Y>"
    assert template["data"]["values"] == "<DVC_METRIC_DATA>"
