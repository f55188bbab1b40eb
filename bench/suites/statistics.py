"""Named statistics of a run, computed from its per-round, per-client records (docs/architecture.md "Suites, statistics and papers").

A statistic reduces one metric's records to one number in two steps: per evaluated round, the
values of the clients (client-id order) to one value (``clients``), then the rounds to one number
(``rounds``). Its name, used in suites, pinned files and reports, reads the same way::

    <rounds>_[<clients>_]<metric>
    rounds:  final | last<k> | max | reach<target> | count
    clients: clientmax | clientmin | clientstd | cf(<method>) | cfcode(<method>)   (omitted: the mean over clients)

e.g. ``final_global_acc``, ``last5_local_acc`` (mean over clients, then over the last 5 rounds),
``final_clientmax_local_acc`` (FedAKD's Max Client Accuracy), ``final_cf(standalone)_local_acc``
(FedAKD's CF coefficient as the paper defines it, pipelines/fedakd/NOTES.md §3.1), ``last3_cfcode(standalone)_local_acc``
(CF as the released code computes it, §3.2), ``final_clientstd_client_global_acc`` (the spread over
clients, population std: FedAL's "±" read as dispersion over clients, pipelines/fedal/NOTES.md A14),
``reach0.85_global_acc`` (DaFKD's rounds to 85%, pipelines/dafkd/NOTES.md §3.6), ``count_train_loss`` (the rounds a
run completed: FedAKD's Table 3 "Round"). ``max`` over rounds selects on the test set: it is secondary
(optimistic).
A run-level metric (no client column) takes no client reduction.

Records are ``records.csv`` (``round,metric,client,value``, client empty for run-level values)
or, for a run trained before per-client records existed, its ``curves.csv`` (run-level only).
"""
from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.stats import pearsonr

from bench.errors import BenchError

RECORDS_HEADER = ["round", "metric", "client", "value"]
NAME = re.compile(r"(?:(?P<rounds>final|max|count)|last(?P<k>\d+)|reach(?P<target>\d+(?:\.\d+)?(?:e-\d+)?))_"
                  r"(?:client(?P<clients>max|min|std)_|(?P<cf>cf|cfcode)\((?P<reference>[\w.-]+)\)_)?(?P<metric>\w+)")

Series = dict[int, float]  # round -> value, in round order


def final(series: Series, last_round: int) -> float:
    """The value at the run's last round (a missing last round is an error: "final" must be final)."""
    if last_round not in series:
        raise BenchError(f"not recorded at the last round {last_round}; re-train the run (the runner always "
                         "evaluates the last rounds)")
    return series[last_round]


def last_k(series: Series, last_round: int, k: int) -> float:
    """Mean of the values at the run's last ``k`` rounds (all of them if it has fewer), numpy's mean as
    metrics.json's ``last5_mean``."""
    rounds = range(max(1, last_round - k + 1), last_round + 1)
    if missing := [r for r in rounds if r not in series]:
        raise BenchError(f"not recorded at rounds {missing} of the last {k}; use a smaller k or evaluate "
                         "every one of the last k rounds")
    return float(np.mean(np.array([series[r] for r in rounds], dtype=float)))


def max_over_rounds(series: Series) -> float:
    """The best evaluated round's value (secondary: it selects on the test set)."""
    return float(np.max(np.array(list(series.values()), dtype=float)))


def rounds_to_target(series: Series, target: float) -> float:
    """The first round whose value is ≥ ``target`` (pipelines/dafkd/NOTES.md §3.6); ``inf``: never reached."""
    return float(next((r for r, v in series.items() if v >= target), math.inf))


def cf(standalone: Sequence[float], federated: Sequence[float]) -> float:
    """Collaborative fairness: 100 · Pearson(Acc_s, Acc_p) across clients (pipelines/fedakd/NOTES.md §3.1);
    NaN where undefined (fewer than 2 clients, or a constant vector)."""
    x, y = np.asarray(standalone, dtype=float), np.asarray(federated, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(100 * pearsonr(x, y).statistic)


def cf_code(standalone: Sequence[float], federated: Sequence[float]) -> float:
    """CF as FedAKD's released scripts compute it (pipelines/fedakd/NOTES.md §3.2): Acc_s read back from the standalone
    script's text file (``Client k: 0.xxxx``, 4 decimals, float32), then ``100·np.corrcoef(acc_p, acc_s)[0, 1]``,
    set to 0 when either vector is all zeros; NaN where the correlation is undefined (a constant vector)."""
    acc_s = np.array([round(float(v), 4) for v in standalone], dtype=np.float32)
    acc_p = np.asarray(federated, dtype=float)
    if not acc_p.any() or not acc_s.any():
        return 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(100 * np.corrcoef(acc_p, acc_s)[0, 1])


def reduce_clients(values: Sequence[float], how: Literal["mean", "max", "min", "std"]) -> float:
    """One round's per-client values (client-id order) to one; ``mean`` is numpy's, as the runner's; ``std``
    the population standard deviation over the clients (numpy's, ddof 0)."""
    array = np.asarray(values, dtype=float)
    reducers: dict[str, Callable[[np.ndarray], Any]] = {"mean": np.mean, "max": np.max, "min": np.min, "std": np.std}
    return float(reducers[how](array))


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof=1; None for one value) over seeds, in seed order."""
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def mean_max_abs_dev(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and maximum absolute deviation from it over seeds, as DaFKD reports rounds to a target
    (pipelines/dafkd/NOTES.md §3.7); None for one value."""
    mean = math.fsum(values) / len(values)
    return mean, (max(abs(v - mean) for v in values) if len(values) > 1 else None)


def aggregate(values: Sequence[float], spread: Literal["std", "max_abs_dev"]) -> tuple[float, float | None]:
    """Over seeds: the mean and ``spread``; a seed that never reached its target (inf) makes the cell inf."""
    if any(math.isinf(v) for v in values):
        return math.inf, None
    return (mean_std if spread == "std" else mean_max_abs_dev)(values)


@dataclass(frozen=True)
class Records:
    """One run's records: metric -> round -> client (None: run-level) -> value; ``source`` names the file."""

    values: dict[str, dict[int, dict[int | None, float]]]
    last_round: int
    source: str

    @classmethod
    def from_csv(cls, text: str, source: str) -> Records:
        """Parse ``records.csv`` (header ``round,metric,client,value``)."""
        rows = csv.reader(io.StringIO(text))
        if next(rows, None) != RECORDS_HEADER:
            raise BenchError(f"{source}: header is not {','.join(RECORDS_HEADER)}; re-train the run")
        values: dict[str, dict[int, dict[int | None, float]]] = {}
        try:
            for round_, metric, client, value in rows:
                values.setdefault(metric, {}).setdefault(int(round_), {})[int(client) if client else None] = \
                    float(value)
        except ValueError as exc:
            raise BenchError(f"{source}: malformed row ({exc}); re-train the run") from None
        return cls(values, max((r for by_round in values.values() for r in by_round), default=0), source)

    @classmethod
    def from_curves(cls, text: str, source: str) -> Records:
        """Run-level records from ``curves.csv`` (one row per round, an empty cell where not evaluated)."""
        rows = list(csv.DictReader(io.StringIO(text)))
        values: dict[str, dict[int, dict[int | None, float]]] = {}
        for row in rows:
            for metric, value in row.items():
                if metric != "round" and value:
                    values.setdefault(metric, {})[int(row["round"])] = {None: float(value)}
        return cls(values, max((int(r["round"]) for r in rows), default=0), source)

    def clients(self, metric: str, round_: int) -> dict[int, float]:
        """Client id -> value at ``round_`` (client-id order); a run-level metric has none."""
        return dict(sorted((c, v) for c, v in self.values[metric][round_].items() if c is not None))

    def series(self, metric: str, how: Literal["mean", "max", "min", "std"] = "mean") -> Series:
        """Per evaluated round, the run-level value or the clients' values reduced by ``how``."""
        out: Series = {}
        for round_, by_client in sorted(self.values[metric].items()):
            if None in by_client:
                if how != "mean":
                    raise BenchError(f"{metric} has no per-client values to take the {how} of; "
                                     "it is run-level, or the run predates records.csv (re-train it)")
                out[round_] = by_client[None]
            else:
                out[round_] = reduce_clients(list(self.clients(metric, round_).values()), how)
        return out

    def cf_series(self, metric: str, reference: Records, how: Literal["cf", "cfcode"] = "cf") -> Series:
        """Per evaluated round, CF of this run's clients against ``reference``'s at its last round: the paper's
        definition (:func:`cf`) or the released code's computation (:func:`cf_code`)."""
        if metric not in reference.values or reference.last_round not in reference.values[metric]:
            raise BenchError(f"{reference.source}: no {metric} at its last round {reference.last_round} to use as "
                             "the standalone accuracies of CF; re-train that run")
        acc_s = reference.clients(metric, reference.last_round)
        out: Series = {}
        for round_ in sorted(self.values[metric]):
            acc_p = self.clients(metric, round_)
            if list(acc_p) != list(acc_s):
                raise BenchError(f"CF needs {metric} of the same clients as {reference.source} "
                                 f"(round {round_}: {list(acc_p)} vs {list(acc_s)}); re-train both on one partition")
            out[round_] = (cf if how == "cf" else cf_code)(list(acc_s.values()), list(acc_p.values()))
        return out


class Statistic(BaseModel):
    """One named statistic (module docstring); built from its name or from its fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str = Field(pattern=r"^\w+$")
    rounds: Literal["final", "last", "max", "reach", "count"] = "final"
    k: int | None = Field(None, ge=1, description="rounds: last")
    target: float | None = Field(None, description="rounds: reach")
    clients: Literal["mean", "max", "min", "std", "cf", "cfcode"] = "mean"
    reference: str | None = Field(None, description="clients: cf, cfcode — the method whose run gives Acc_s")

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        if not isinstance(data, str):
            return data
        match = NAME.fullmatch(data)
        if match is None:
            raise ValueError(f"{data!r} is not a statistic name (<final|last<k>|max|reach<target>>_"
                             "[<clientmax|clientmin|clientstd|cf(<method>)|cfcode(<method>)>_]<metric>)")
        rounds = match["rounds"] or ("last" if match["k"] else "reach")
        clients = match["cf"] or match["clients"] or "mean"
        return {"metric": match["metric"], "rounds": rounds, "k": match["k"], "target": match["target"],
                "clients": clients, "reference": match["reference"]}

    @model_validator(mode="after")
    def _complete(self) -> Statistic:
        for field, needed in (("k", self.rounds == "last"), ("target", self.rounds == "reach"),
                              ("reference", self.clients in ("cf", "cfcode"))):
            if needed != (getattr(self, field) is not None):
                raise ValueError(f"{field} is {'required' if needed else 'not allowed'} with rounds={self.rounds}, "
                                 f"clients={self.clients}")
        return self

    @property
    def name(self) -> str:
        rounds = {"last": f"last{self.k}", "reach": f"reach{self.target!r}"}.get(self.rounds, self.rounds)
        clients = {"mean": "", "cf": f"cf({self.reference})_", "cfcode": f"cfcode({self.reference})_"}.get(
            self.clients, f"client{self.clients}_")
        return f"{rounds}_{clients}{self.metric}"

    @property
    def secondary(self) -> bool:
        """Optimistic (selects on the test set): reports mark it."""
        return self.rounds == "max"

    @property
    def higher_is_better(self) -> bool:
        return self.rounds != "reach"

    @property
    def accuracy(self) -> bool:
        """Its value is an accuracy, a fraction of test images (×100: points): an ``_acc`` metric reduced by a mean,
        maximum or minimum over clients and a round or rounds' value (not rounds to a target, a count, a spread or
        CF)."""
        return self.metric.endswith("_acc") and self.rounds in ("final", "last", "max") \
            and self.clients in ("mean", "max", "min")

    def compute(self, records: Records, reference: Records | None = None) -> float | None:
        """This statistic of one run (``reference``: the run CF compares against); None where the run
        has no such metric or the value is undefined (CF of constant accuracies); inf: target not reached."""
        if self.metric not in records.values:
            return None
        try:
            if self.clients == "cf" or self.clients == "cfcode":
                assert reference is not None, "a cf statistic needs its reference run's records"
                series = records.cf_series(self.metric, reference, self.clients)
            else:
                series = records.series(self.metric, self.clients)
            if self.rounds == "final":
                value = final(series, records.last_round)
            elif self.rounds == "last":
                assert self.k is not None  # _complete requires k with rounds=last
                value = last_k(series, records.last_round, self.k)
            elif self.rounds == "max":
                value = max_over_rounds(series)
            elif self.rounds == "count":
                value = float(len(series))
            else:
                assert self.target is not None  # _complete requires target with rounds=reach
                value = rounds_to_target(series, self.target)
        except BenchError as exc:
            raise BenchError(f"{records.source}: {self.name}: {exc}") from None
        return None if math.isnan(value) else value
