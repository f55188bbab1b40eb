"""Whether each declared mechanism was at work in a suite's runs (bench/engine/mechanisms.py declares them).

Per (method, setting, seed): the mean over the run's recorded rounds of the mechanism's diagnostic (per-client values
averaged over the clients first) and of its inert value (a number, or the mean of the record holding it); the run's
mechanism is active when that mean lies beyond the declared margin on the active side (:meth:`Mechanism.is_active`).
Per (method, setting): **active** when it is in every seed that recorded it, **inert** when in none, **mixed**
otherwise, and **not recorded** when no run recorded the diagnostic (runs trained before it existed). A claim's
comparison resting on a mechanism that is inert where it ran is not exercised (bench/suites/paper.py).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from bench.algorithms import get_algorithm
from bench.engine.mechanisms import Mechanism
from bench.suites.paper import FinishedRun, MechanismStatus, RunKey, SuiteView
from bench.suites.statistics import Records


@dataclass(frozen=True)
class MechanismCell:
    """One mechanism of one method on one setting: per seed, the run's mean diagnostic and inert value, and the mean of
    each record the mechanism names ``beside`` it (record → seed → mean, for the seeds that recorded it)."""

    method: str
    setting: str
    mechanism: Mechanism
    values: dict[int, float]
    inert: dict[int, float]
    beside: dict[str, dict[int, float]] = field(default_factory=dict)

    @property
    def status(self) -> MechanismStatus:
        if not self.values:
            return "not recorded"
        active = [self.mechanism.is_active(v, self.inert[seed]) for seed, v in self.values.items()]
        return "active" if all(active) else "inert" if not any(active) else "mixed"


def run_mean(records: Records, metric: str) -> float | None:
    """The mean over the recorded rounds of a metric (per-client values averaged per round), None if not recorded."""
    if metric not in records.values:
        return None
    series = records.series(metric)
    return math.fsum(series.values()) / len(series)


def seed_means(runs: Mapping[int, FinishedRun | None], metrics: tuple[str, ...]) -> dict[str, dict[int, float]]:
    """Per metric, each seed's run mean (:func:`run_mean`), for the seeds whose run recorded it; a metric no run
    recorded is left out."""
    means = {metric: {seed: mean for seed, run in runs.items()
                      if run is not None and (mean := run_mean(run.records, metric)) is not None}
             for metric in metrics}
    return {metric: by_seed for metric, by_seed in means.items() if by_seed}


def declared(suite: SuiteView, method: str, setting: str) -> tuple[Mechanism, ...]:
    """The mechanisms ``method`` declares with its parameters on ``setting`` (its algorithm, from the run config)."""
    config = suite.config(method, setting, suite.seeds[0])
    algorithm = get_algorithm(config.algorithm.name)
    return algorithm.mechanisms(algorithm.Params.model_validate(config.algorithm.params))


def mechanism_cells(suite: SuiteView, runs: Mapping[RunKey, FinishedRun]) -> list[MechanismCell]:
    """Every declared mechanism of every suite method on every setting it runs on, from its finished runs."""
    cells = []
    for method in suite.methods:
        for setting in (s for s in suite.settings if suite.runs_on(method, s)):
            for mechanism in declared(suite, method, setting):
                values, inert = {}, {}
                seeds = {seed: runs.get((method, setting, seed)) for seed in suite.seeds}
                for seed, run in seeds.items():
                    value = None if run is None else run_mean(run.records, mechanism.metric)
                    reference = (mechanism.inert if not isinstance(mechanism.inert, str) or run is None
                                 else run_mean(run.records, mechanism.inert))
                    if value is not None and isinstance(reference, float | int):
                        values[seed], inert[seed] = value, float(reference)
                cells.append(MechanismCell(method, setting, mechanism, values, inert,
                                           seed_means(seeds, mechanism.beside)))
    return cells


def statuses(cells: list[MechanismCell]) -> dict[tuple[str, str], dict[str, MechanismStatus]]:
    """Per (method, setting): each mechanism's status, by its diagnostic (what claims' ``rests_on`` name)."""
    out: dict[tuple[str, str], dict[str, MechanismStatus]] = {}
    for cell in cells:
        out.setdefault((cell.method, cell.setting), {})[cell.mechanism.metric] = cell.status
    return out
