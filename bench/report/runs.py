"""Reading a suite's run records (metrics.json, curves.csv, timing.json, provenance.json)."""
from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.suites import Suite

ACC_METRICS = ("global_acc", "local_acc")
RunKey = tuple[str, str, int]  # (method, setting, seed)


@dataclass(frozen=True)
class RunRecord:
    """One finished run's records."""
    run_dir: Path
    metrics: dict[str, Any]
    timing: dict[str, float]
    provenance: dict[str, Any]

    def value(self, statistic: str, metric: str) -> float | None:
        """``statistic`` is a metrics.json group (``final``, ``last5_mean``, ``best``)."""
        return self.metrics.get(statistic, {}).get(metric)

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


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof=1; None for one value) over seeds, in seed order."""
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def run_keys(suite: Suite) -> Iterator[RunKey]:
    """Every (method, setting, seed) of the suite, in table order."""
    p = suite.params
    for method in p.methods:
        for setting in p.settings:
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


def find_runs(suite: Suite) -> tuple[dict[RunKey, RunRecord], dict[RunKey, str]]:
    """The suite's finished runs and, separately, why each other run is unavailable (missing,
    failed, or stale: trained with a config other than the suite's current one)."""
    found: dict[RunKey, RunRecord] = {}
    problems: dict[RunKey, str] = {}
    for key in run_keys(suite):
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


def missing_runs_message(suite: Suite, problems: dict[RunKey, str]) -> str:
    return (f"suite {suite.name}: {len(problems)} run(s) missing or failed:\n  "
            + "\n  ".join(problems.values())
            + f"\nproduce them with {train_command(suite, {m for m, _, _ in problems})}")


def require_runs(suite: Suite) -> dict[RunKey, RunRecord]:
    """Every run of the suite; a clear :class:`BenchError` naming each missing or failed one."""
    found, problems = find_runs(suite)
    if problems:
        raise BenchError(missing_runs_message(suite, problems))
    return found
