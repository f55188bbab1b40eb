"""Reading a suite's run records (metrics.json, records.csv, curves.csv, timing.json,
provenance.json) and computing their named statistics."""
from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.suites import Suite
from bench.suites.statistics import Records, Statistic

ACC_METRICS = ("global_acc", "local_acc", "client_global_acc")  # those a suite's runs have are reported
RunKey = tuple[str, str, int]  # (method, setting, seed)


@dataclass(frozen=True)
class RunRecord:
    """One finished run's records."""
    run_dir: Path
    metrics: dict[str, Any]
    timing: dict[str, float]
    provenance: dict[str, Any]

    @cached_property
    def records(self) -> Records:
        """records.csv; for a run trained before it existed, the run-level values of curves.csv."""
        path = self.run_dir / "records.csv"
        if path.exists():
            return Records.from_csv(path.read_text(), str(path))
        return Records.from_curves((self.run_dir / "curves.csv").read_text(), str(self.run_dir / "curves.csv"))

    @property
    def seconds_per_round(self) -> float:
        """Training time per round (timing.json ``train_time_s / rounds``): local training and
        aggregation, without set-up and evaluation, which are the same for every method."""
        return self.timing["train_time_s"] / self.metrics["rounds"]

    def curves(self) -> dict[str, list[float]]:
        """curves.csv as columns; an empty cell (round not evaluated) becomes NaN."""
        with open(self.run_dir / "curves.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        columns = rows[0].keys() if rows else ["round"]
        return {c: [float(r[c]) if r[c] else math.nan for r in rows] for c in columns}


def run_keys(suite: Suite) -> Iterator[RunKey]:
    """Every (method, setting, seed) the suite runs, in table order."""
    p = suite.params
    for method in p.methods:
        for setting in suite.settings_of(method):
            for seed in p.suite.seeds:
                yield method, setting, seed


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BenchError(f"{path} is not valid JSON ({exc}); re-run that run") from None


def read_run(run_dir: Path) -> RunRecord | str:
    """The run's records, or why it cannot be read (missing, failed)."""
    if (run_dir / "failure.json").exists():
        reason = _read_json(run_dir / "failure.json").get("reason", "unknown reason")
        return f"{run_dir}: failed ({reason})"
    if not (run_dir / "metrics.json").exists():
        return f"{run_dir}: not run (no metrics.json)"
    provenance = run_dir / "provenance.json"
    return RunRecord(run_dir, _read_json(run_dir / "metrics.json"), _read_json(run_dir / "timing.json"),
                     _read_json(provenance) if provenance.exists() else {})


def find_runs(suite: Suite, keys: list[RunKey] | None = None) -> tuple[dict[RunKey, RunRecord], dict[RunKey, str]]:
    """The suite's finished runs (of ``keys``, default all) and, separately, why each other run is
    unavailable (missing, failed, or stale: trained with a config other than the suite's current one)."""
    found: dict[RunKey, RunRecord] = {}
    problems: dict[RunKey, str] = {}
    for key in keys if keys is not None else run_keys(suite):
        record = read_run(suite.run_dir(*key))
        if isinstance(record, str):
            problems[key] = record
        elif record.metrics.get("config_sha256") != suite.config(*key).sha256:
            problems[key] = f"{record.run_dir}: stale (trained with another config than the suite's)"
        else:
            found[key] = record
    return found, problems


def train_command(suite: Suite, methods: set[str]) -> str:
    """The command producing these methods' runs, dependencies first."""
    ordered = suite.train_order(sorted(methods, key=list(suite.params.methods).index))
    return (f"`bench suite train {' '.join(f'--method {m}' for m in ordered)}` "
            "(same --params/--root/-S as this command)")


def repro_command(suite: Suite, methods: set[str] | None = None) -> str:
    """The command producing the suite's runs (of ``methods``, default all): ``dvc repro`` of the
    dvc.yaml beside its params file when the runs live there too, then `bench suite train`."""
    every = methods is None or set(methods) >= set(suite.params.methods)
    train = ("`bench suite train` (same --params/--root/-S as this command)" if every
             else train_command(suite, set(methods or ())))
    if suite.params_file is None:
        return train
    folder = Path(suite.params_file).parent
    if not (folder / "dvc.yaml").exists() or folder.resolve() != suite.root.resolve():
        return train
    target = os.path.relpath(folder / "dvc.yaml")
    target = str((folder / "dvc.yaml").resolve()) if target.startswith("..") else target
    return f"`dvc repro{'' if target == 'dvc.yaml' else ' ' + target}` (or {train})"


def missing_runs_message(suite: Suite, problems: dict[RunKey, str]) -> str:
    return (f"suite {suite.name}: {len(problems)} run(s) missing or failed:\n  "
            + "\n  ".join(problems.values())
            + f"\nproduce them with {train_command(suite, {m for m, _, _ in problems})}")


def diverged_runs(suite: Suite, keys: list[RunKey] | None = None) -> dict[RunKey, str]:
    """The runs (of ``keys``, default all) that diverged with the suite's current config, and why: their
    failure.json is their record. A diverged run is an outcome of its method (the report counts such seeds
    per cell), not a missing run."""
    out: dict[RunKey, str] = {}
    for key in keys if keys is not None else run_keys(suite):
        path = suite.run_dir(*key) / "failure.json"
        if path.exists() and (failure := _read_json(path)).get("config_sha256") == suite.config(*key).sha256:
            out[key] = str(failure.get("reason", "unknown reason"))
    return out


def require_runs(suite: Suite) -> dict[RunKey, RunRecord]:
    """Every finished run of the suite; a clear :class:`BenchError` naming each missing, failed or stale
    one. Runs that diverged with the suite's config are not among them and no error (:func:`diverged_runs`)."""
    found, problems = find_runs(suite)
    diverged = diverged_runs(suite, list(problems))
    problems = {k: v for k, v in problems.items() if k not in diverged}
    if problems:
        raise BenchError(missing_runs_message(suite, problems))
    return found


def statistic_value(suite: Suite, runs: Mapping[RunKey, RunRecord], key: RunKey,
                    statistic: Statistic) -> float | None:
    """``statistic`` of the run ``key`` (in ``runs``); a statistic comparing with another method's run
    (CF) reads that run on the same setting and seed, and its absence is a :class:`BenchError`. The
    reference method's own CF is not reported (it would be 100, pipelines/fedakd/NOTES.md §3.1)."""
    if statistic.reference is None:
        return statistic.compute(runs[key].records)
    method, setting, seed = key
    if method == statistic.reference:
        return None
    ref_key = (statistic.reference, setting, seed)
    reference = runs.get(ref_key)
    if reference is None:
        found, problems = find_runs(suite, [ref_key])
        if ref_key not in found:
            raise BenchError(f"{statistic.name} of {method}/{setting}/seed{seed} needs the run of "
                             f"{statistic.reference} on the same setting and seed ({problems[ref_key]}); produce it "
                             f"with {train_command(suite, {statistic.reference})}")
        reference = found[ref_key]
    return statistic.compute(runs[key].records, reference.records)


def run_values(suite: Suite, runs: Mapping[RunKey, RunRecord], key: RunKey,
               statistics: list[Statistic]) -> dict[str, float]:
    """The run's value of each statistic it has, by name (a metric it lacks, or an undefined value, is left out)."""
    return {s.name: value for s in statistics if (value := statistic_value(suite, runs, key, s)) is not None}
