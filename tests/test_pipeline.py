"""End to end: the real dvc.yaml at smoke scale, offline, in a scratch copy of the project."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_dvc

ROOT = Path(__file__).resolve().parents[1]



def _scratch_project(folder: Path, seeds: list[int], rounds: int, settings: list[str],
                     methods: list[str] | None = None, **suite: Any) -> Path:
    """dvc.yaml and bench/ copied into ``folder``; params.yaml = the default suite shrunk as asked (``suite``:
    more keys of its suite section)."""
    shutil.copy(ROOT / "dvc.yaml", folder)
    shutil.copytree(ROOT / "bench", folder / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["suite"].update(seeds=seeds, jobs=1, **suite)
    params["suite"]["base"]["training"]["rounds"] = rounds
    params["settings"] = {k: params["settings"][k] for k in settings}
    if methods is not None:
        params["methods"] = {k: params["methods"][k] for k in methods}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    assert run_dvc(folder, "init", "--no-scm", "-q").returncode == 0
    shutil.copytree(ROOT / ".dvc" / "plots", folder / ".dvc" / "plots")  # the plot template dvc.yaml names
    return folder


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default suite at smoke scale: one seed, 2 rounds, two settings, every method."""
    return _scratch_project(tmp_path_factory.mktemp("project"), [0], 2, ["iid", "dir0.1"])


def test_dvc_repro_report_pin_compare(project: Path) -> None:
    methods = list(yaml.safe_load((project / "params.yaml").read_text())["methods"])

    first = run_dvc(project, "repro", "report")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = (project / "reports" / "default" / "summary.md").read_text()
    assert all(f"| {m} |" in summary for m in methods)
    # `dvc metrics show`: one row per setting and method, with final and last-5 accuracy only
    shown = run_dvc(project, "metrics", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    files = json.loads(shown.stdout)[""]["data"]
    assert not any("error" in f for f in files.values())
    rows = {path: f["data"] for path, f in files.items()}
    assert set(rows) == {f"reports/default/metrics/{s}/{m}.json" for s in ("iid", "dir0.1") for m in methods}
    assert set(rows["reports/default/metrics/iid/fedavg.json"]) == {
        "final_global_acc", "last5_global_acc", "final_local_acc", "last5_local_acc"}
    assert set(rows["reports/default/metrics/iid/standalone.json"]) == {"final_local_acc", "last5_local_acc"}

    pin = subprocess.run([sys.executable, "-m", "bench.cli", "pin"], cwd=project, capture_output=True, text=True)
    assert pin.returncode == 0, pin.stderr
    passing = run_dvc(project, "repro")
    assert passing.returncode == 0, passing.stderr[-3000:]
    drift_table = (project / "reports" / "default" / "drift.md").read_text()
    assert "0 CHANGED, 0 DRIFT, 0 MISSING" in drift_table
    assert any(line.split()[:3] == ["fedavg", "iid", "0"] for line in drift_table.splitlines())
    # the log: the summary line, not the table
    assert ("0 DRIFT, 0 MISSING, 0 not pinned; partitions: 2 of 2 verified against their data, scheme and seed "
            "(full table: reports/default/drift.md)") in passing.stdout
    assert not any(line.split()[:3] == ["fedavg", "iid", "0"] for line in passing.stdout.splitlines())

    again = run_dvc(project, "repro")
    assert again.returncode == 0 and "Data and pipelines are up to date" in again.stdout
    status = run_dvc(project, "status", "dvc.yaml")  # what docs/running.md tells to check
    assert status.returncode == 0 and "Data and pipelines are up to date" in status.stdout, status.stdout

    pinned_path = project / "reports" / "pinned" / "default.json"
    pinned = json.loads(pinned_path.read_text())
    pinned["values"]["fedavg"]["iid"]["seeds"]["0"]["values"]["final_global_acc"] += 0.001
    pinned_path.write_text(json.dumps(pinned))
    failing = run_dvc(project, "repro")
    assert failing.returncode != 0
    drift = (project / "reports" / "default" / "drift.md").read_text()
    assert "DRIFT" in drift and "fedavg" in drift and "final_global_acc" in drift
    assert "DRIFT: fedavg/iid/seed0 final_global_acc: pinned" in failing.stdout  # printed where the user sees it


def test_a_changed_config_fails_until_pinned(project: Path) -> None:
    """FedProx's mu changed tenfold: its runs are re-trained and compare fails (CHANGED) whatever the
    tolerance, until `bench pin` records the deliberate change."""
    pin = subprocess.run([sys.executable, "-m", "bench.cli", "pin"], cwd=project, capture_output=True, text=True)
    assert pin.returncode == 0, pin.stderr
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["methods"]["fedprox"]["mu"] *= 10
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    changed = run_dvc(project, "repro")
    assert changed.returncode != 0
    # fedprox: 2 settings x (1 seed + the mean) x 4 values
    assert (", 16 CHANGED, 0 DRIFT, 0 MISSING, 0 not pinned; partitions: 2 of 2 verified against their data, scheme "
            "and seed (full table: reports/default/drift.md)") in changed.stdout
    assert "CHANGED: fedprox/iid: seed 0 trained with another config than pinned (8 values)" in changed.stdout
    assert "re-pin with `bench pin`" in changed.stdout
    pin = subprocess.run([sys.executable, "-m", "bench.cli", "pin"], cwd=project, capture_output=True, text=True)
    assert pin.returncode == 0, pin.stderr
    again = run_dvc(project, "repro")
    assert again.returncode == 0, again.stdout[-3000:]


def test_dvc_plots_draw_every_method(project: Path, tmp_path: Path) -> None:
    """`dvc plots show` writes one Vega-Lite plot per setting whose data hold every method's curve for
    every metric it has, coloured by method (checked in the HTML's specs; no browser needed)."""
    methods = list(yaml.safe_load((project / "params.yaml").read_text())["methods"])
    assert run_dvc(project, "repro", "report").returncode == 0
    html = tmp_path / "dvc_plots"
    shown = run_dvc(project, "plots", "show", "-o", str(html))
    assert shown.returncode == 0 and "failed" not in shown.stderr.lower(), shown.stderr
    page = (html / "index.html").read_text()
    specs = [json.loads(match) for match in re.findall(r"var spec = (\{.*?\});\n", page, flags=re.DOTALL)]
    assert len(specs) == 2  # one per setting
    for spec in specs:
        values = spec["data"]["values"]
        assert {v["setting"] for v in values} in ({"iid"}, {"dir0.1"})
        assert spec["facet"]["column"]["field"] == "metric"
        encoding = spec["spec"]["encoding"]
        assert (encoding["x"]["field"], encoding["y"]["field"], encoding["color"]["field"]) == (
            "round", "accuracy", "method")
        assert {v["method"] for v in values if v["metric"] == "local_acc"} == set(methods)
        assert {v["method"] for v in values if v["metric"] == "global_acc"} == set(methods) - {"standalone"}
        assert {v["round"] for v in values} == {"1", "2"}
        # the figures' colour order: the suite's order of methods (the template sorts the colours by it)
        assert {(v["method"], v["method_index"]) for v in values} == {(m, str(i)) for i, m in enumerate(methods)}
        assert encoding["color"]["sort"] == {"field": "fkd_method_order", "op": "min"}


@pytest.fixture(scope="module")
def small_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default suite's dvc.yaml with one method, one setting, two seeds and 8 rounds, a checkpoint after
    every round."""
    return _scratch_project(tmp_path_factory.mktemp("small"), [0, 1], 8, ["iid"], ["fedavg"], checkpoint_interval_s=0)


def test_a_stage_killed_mid_run_resumes_with_dvc_repro(small_project: Path) -> None:
    """kill -9 in the middle of `dvc repro`'s train stage, then `dvc repro`: the killed run continues
    from its checkpoint and every number equals the uninterrupted run's (compare is exact here)."""
    import signal
    import time

    assert run_dvc(small_project, "repro", "report").returncode == 0
    pin = subprocess.run([sys.executable, "-m", "bench.cli", "pin"], cwd=small_project, capture_output=True, text=True)
    assert pin.returncode == 0, pin.stderr
    assert run_dvc(small_project, "repro").returncode == 0
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "dvc", "repro", "-f", "-s", "train@fedavg"], cwd=small_project,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    results = small_project / "results" / "default" / "fedavg" / "iid"
    deadline = time.monotonic() + 300
    while not list(results.glob("seed*/checkpoint.pt")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the stage finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = run_dvc(small_project, "repro")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    timings = [json.loads(p.read_text()) for p in results.glob("seed*/timing.json")]
    assert any("resumed_from_round" in t for t in timings)
    assert not list(results.glob("seed*/checkpoint.pt"))
    drift = (small_project / "reports" / "default" / "drift.md").read_text()
    assert "0 DRIFT, 0 MISSING" in drift and "exact" in drift
