"""bench audit from a fresh clone: the run records come from the repository's DVC remote (dvc-remote/,
committed), a real cell of the default suite is traced and re-run bitwise, and a deliberately altered
record is caught at its round. Also the DVC push/pull round trip and the one-line errors."""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report.audit import find_cell, printed_tables, report_cells
from bench.suites import load_suite
from bench.errors import BenchError

REPO = Path(__file__).resolve().parents[1]
DVC = str(Path(sys.executable).parent / "dvc")
CELL = "global/fedavg/iid final"  # the summary's global-accuracy table, row fedavg, column "iid final"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}
    return subprocess.run(args, cwd=cwd, env=env, text=True, capture_output=True)


def bench(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "bench.cli", *args], cwd)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of this repository's HEAD with the default suite's records pulled from its remote."""
    folder = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(folder)], check=True)
    pulled = _run([DVC, "pull", "dvc.yaml", "pipelines/fedhkd/dvc.yaml"], folder)  # the command the README and docs/integrity.md give
    assert pulled.returncode == 0, pulled.stderr
    return folder


def test_dvc_push_pull_round_trip(clone: Path, tmp_path: Path) -> None:
    """Push the clone's records to another remote, delete them and the cache, pull them back: the same bytes."""
    remote = tmp_path / "remote"
    assert _run([DVC, "remote", "add", "--local", "scratch", str(remote)], clone).returncode == 0
    pushed = _run([DVC, "push", "-r", "scratch", "dvc.yaml"], clone)
    assert pushed.returncode == 0, pushed.stderr
    copy = tmp_path / "before"
    shutil.copytree(clone / "results" / "default", copy)
    shutil.rmtree(clone / "results" / "default" / "fedavg")
    shutil.rmtree(clone / ".dvc" / "cache")
    pulled = _run([DVC, "pull", "-r", "scratch", "dvc.yaml"], clone)
    assert pulled.returncode == 0, pulled.stderr
    compared = filecmp.dircmp(copy / "fedavg", clone / "results" / "default" / "fedavg")
    assert not compared.diff_files and not compared.left_only and not compared.right_only
    assert filecmp.cmp(copy / "fedavg" / "iid" / "seed0" / "records.csv",
                       clone / "results" / "default" / "fedavg" / "iid" / "seed0" / "records.csv", shallow=False)


@pytest.mark.slow
def test_audit_a_real_cell_from_a_fresh_clone_and_catch_an_altered_record(clone: Path) -> None:
    done = bench(clone, "audit", "reports/default/summary.md", CELL)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    pinned = json.loads((clone / "reports" / "pinned" / "default.json").read_text())["values"]["fedavg"]["iid"]
    printed = printed_tables((clone / "reports" / "default" / "summary.md").read_text())
    row = printed[("Global accuracy (global model, global test set)",), "fedavg"]
    assert f"printed  iid final: {dict(row)['iid final']}" in out
    assert "id       fedavg/iid/final_global_acc" in out
    assert f"pinned   mean {pinned['mean']['final_global_acc']!r}" in out
    for seed in (0, 1, 2):
        run = clone / "results" / "default" / "fedavg" / "iid" / f"seed{seed}"
        provenance = json.loads((run / "provenance.json").read_text())
        assert f"run      {run}" in out
        assert f"partition sha256 {provenance['partition_sha256']} (the runs recorded)" in out
        assert f"dataset  digits sha256 {provenance['dataset_sha256']} (matches" in out
        assert f"config hash {provenance['config_sha256']} (the suite's current config)" in out
    assert out.count("(bitwise equal)") == 3  # each seed's value is its pinned value
    assert out.count("each file's md5 is the one dvc.lock's stage output records") == 3
    assert ": sha256 " in out and "verified: its data, scheme and seed make the same arrays" in out
    assert out.endswith("audit    OK: every value, file and hash checked agrees\n")

    # A deliberate mismatch: alter one recorded value, re-run seed 0, and be told where.
    records = clone / "results" / "default" / "fedavg" / "iid" / "seed0" / "records.csv"
    lines = records.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("7,train_loss,"))
    lines[index] = "7,train_loss,,0.123"
    records.write_text("\n".join(lines) + "\n")
    try:
        checked = bench(clone, "audit", "reports/default/summary.md", CELL, "--rerun", "--seed", "0",
                        "--scratch", str(clone.parent))
    finally:
        _restore(clone, "results/default/fedavg")
    assert checked.returncode == 1, checked.stderr
    total = len(lines) - 1
    assert (f"rerun seed 0: MISMATCH: {total - 1} of {total} recorded values bitwise equal" in checked.stdout)
    assert "first difference: round 7, train_loss: recorded 0.123, re-run " in checked.stdout
    value = pinned["seeds"]["0"]["values"]["final_global_acc"]  # the cell's own value still reproduces bitwise
    assert f"statistic recorded {value!r}, re-run {value!r} (bitwise equal); first difference" in checked.stdout


def _restore(clone: Path, *paths: str) -> None:
    done = _run([DVC, "checkout", "--force", *paths], clone)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("edit, found", [
    (lambda run: run.joinpath("metrics.json").write_text(
        run.joinpath("metrics.json").read_text().replace('"status": "ok"', '"status": "ok" ')),
     "seed 0: metrics.json in {run} differ from what `dvc repro` recorded"),
    (lambda run: run.joinpath("records.csv").write_text(
        run.joinpath("records.csv").read_text().replace("\n3,train_loss,,", "\n3,train_loss,,1", 1)),
     "seed 0: records.csv in {run} differ from what `dvc repro` recorded"),  # a record the statistic does not use
    (lambda run: run.joinpath("config.yaml").write_text(run.joinpath("config.yaml").read_text().replace("\nseed: 0\n",
                                                                                                    "\nseed: 9\n")),
     "seed 0: config.yaml is not the config metrics.json names"),
], ids=["metrics.json", "unused-record", "config.yaml"])
def test_audit_fails_when_a_recorded_value_or_file_differs(clone: Path, edit, found: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 29 item 3: without --rerun, audit exited 0 on DIFFERS and never looked at metrics.json or at the
    records the statistic does not use."""
    run = clone / "results" / "default" / "fedavg" / "iid" / "seed0"
    edit(run)
    try:
        done = bench(clone, "audit", "reports/default/summary.md", CELL)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr
        assert "audit    FAILED" in done.stdout and f"  DIFFERS: {found.format(run=run)}" in done.stdout
    finally:
        _restore(clone, "results/default/fedavg")


def test_audit_fails_on_a_value_differing_from_its_pin_and_on_a_forged_partition(clone: Path) -> None:
    """Issue 29 items 3 and 4: a pinned value edited (audit printed DIFFERS and exited 0); two indices of the
    partition swapped and partition.json's sha256 rewritten (audit, compare and versus all passed)."""
    pinned = clone / "reports" / "pinned" / "default.json"
    original = pinned.read_text()
    data = json.loads(original)
    # an edit of 0.1 fails on the pinning processor (bitwise) and on any other (beyond the tolerance of 0.07 a seed)
    data["values"]["fedavg"]["iid"]["seeds"]["1"]["values"]["final_global_acc"] += 0.1
    pinned.write_text(json.dumps(data))
    try:
        done = bench(clone, "audit", "reports/default/summary.md", CELL)
        assert done.returncode == 1 and "audit    FAILED" in done.stdout, done.stdout[-2000:]
        assert "  DIFFERS: seed 1: the value 0.98 differs from the pinned 1.08" in done.stdout
    finally:
        pinned.write_text(original)
    from tests.test_report import _forge

    _forge(clone / "partitions" / "default" / "iid")
    try:
        done = bench(clone, "audit", "reports/default/summary.md", CELL)
        assert done.returncode == 1 and "FORGED or stale: its arrays hash to" in done.stdout, done.stdout[-2000:]
        compared = bench(clone, "compare", "--params", "params.yaml")
        assert compared.returncode == 1 and "PARTITION: partition iid" in compared.stdout
        versus = bench(clone, "versus", "fedprox", "--no-train", "--no-mlflow")
        assert versus.returncode == 2 and versus.stderr.count("\n") == 1 and "FORGED or stale" in versus.stderr
    finally:
        _restore(clone, "partitions/default")


@pytest.mark.slow
def test_the_readme_quotes_the_audit_re_run_as_it_prints(clone: Path) -> None:
    """The sample `--rerun` line of docs/integrity.md is this command's output (issue 29 item 9: it said 108 of 108)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_figures", REPO / ".ci" / "readme_figures.py")
    assert spec is not None and spec.loader is not None
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    done = bench(clone, "audit", *figures.AUDIT, "--scratch", str(clone.parent))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert figures.block(figures.PAGES["audit"].read_text(), "audit") == figures.render_audit(figures.audit_line(
        done.stdout.replace(str(clone.parent), "/tmp")))


def test_audit_a_paper_cell_from_a_fresh_clone(clone: Path) -> None:
    done = bench(clone, "audit", "pipelines/fedhkd/reports/fedhkd-proxy/paper.md", "table 1/m=5/fedavg/local ours")
    assert done.returncode == 0, done.stderr
    assert "id       fedavg/m5/final_local_acc  (suite fedhkd-proxy)" in done.stdout
    assert "paper    svhn-m10 0.6766 / cifar10-m10 0.595 / cifar100-m10 0.2361" in done.stdout  # pipelines/fedhkd/NOTES.md §6
    seeds = load_suite(clone / "pipelines" / "fedhkd" / "params.yaml").params.suite.seeds
    assert len(seeds) == 7 and done.stdout.count("(bitwise equal)") == len(seeds)  # each pinned seed's value
    assert "DIFFERS" not in done.stdout


def test_the_committed_remote_holds_only_small_run_records() -> None:
    files = [p for p in (REPO / "dvc-remote").rglob("*") if p.is_file()]
    assert files, "dvc-remote/ is empty: run `uv run dvc push dvc.yaml pipelines/fedhkd/dvc.yaml`"
    assert max(p.stat().st_size for p in files) < 1_000_000  # no checkpoints, no paper datasets
    assert sum(p.stat().st_size for p in files) < 20_000_000


def test_cells_are_found_as_printed_or_by_id() -> None:
    suite = load_suite(REPO / "params.yaml")
    cells = report_cells(suite, Path("summary.md"))
    assert find_cell(cells, "fedprox/dir0.1/last5_local_acc") == find_cell(cells, "Local/fedprox/dir0.1 last-5")
    assert find_cell(cells, "glob/fedavg/iid best†").statistic.name == "max_global_acc"
    with pytest.raises(BenchError, match="ambiguous"):  # the global and the local table both have it
        find_cell(cells, "fedavg/iid best†")
    with pytest.raises(BenchError, match="not in the report; rows: "):
        find_cell(cells, "global/nomethod/iid final")
    fedhkd = load_suite(REPO / "pipelines" / "fedhkd" / "params.yaml")
    cell = find_cell(report_cells(fedhkd, Path("paper.md")), "table 1/m=5/FedHKD/global ours")
    assert cell.id == "fedhkd/m5/final_global_acc"


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    for args, words in ((["audit", str(REPO / "reports/default/summary.md"), "global/fedavg/nowhere"], "not in the report"),
                        (["audit", str(tmp_path / "summary.md"), CELL], "not found"),
                        (["audit", str(REPO / "reports/default/drift.md"), CELL], "not a report bench audit reads"),
                        (["audit", "/etc/passwd", CELL], "not a report bench audit reads"),  # was an IndexError
                        (["audit", "/summary.md", CELL], "not found"),
                        (["audit", str(REPO / "reports/default/summary.md"), CELL, "--rerun", "--scratch",
                          str(tmp_path / "missing")], "--scratch"),  # was a FileNotFoundError
                        (["audit", str(REPO / "reports/default/summary.md"), CELL, "--seed", "x"], "invalid int")):
        done = bench(tmp_path, *args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr


def test_audit_judges_a_value_against_its_pin_by_compare_s_rule() -> None:
    """Bitwise on the pinned runs' processor and versions; elsewhere within the pinned tolerance, said so."""
    from bench.report.audit import Audit

    assert Audit._against_pin(0.95, 0.95, exact=True, tolerance=0.07) == "bitwise equal"
    assert Audit._against_pin(0.9533, 0.9556, exact=True, tolerance=0.07) == "DIFFERS"
    assert Audit._against_pin(0.9533, 0.9556, exact=False, tolerance=0.07).startswith("within the pinned tolerance")
    assert Audit._against_pin(0.85, 0.9556, exact=False, tolerance=0.07).startswith("DIFFERS by more than")
