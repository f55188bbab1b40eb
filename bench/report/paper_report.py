"""A paper suite's report: each table cell beside the paper's value and the pinned value, the
Params and Time columns, and the paper's claims checked on our results and on the paper's own.

The paper module (``bench/suites/<paper>.py``, named by ``suite.paper`` in the params file)
provides ``LABELS``, ``DATASETS``, ``PAPER_METHODS``, ``FOCUS`` (the proposed method),
``columns(settings)``, ``paper_value(...)``, ``paper_results()``, ``claims(results, paper_profile)``
and ``parameter_counts(suite)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import import_module
from types import ModuleType
from typing import Any

import numpy as np

from bench.errors import BenchError
from bench.suites import Suite

METRICS = ("local", "global")


@dataclass(frozen=True)
class Column:
    """One column of a paper table: our ``setting`` and the paper cells it stands for
    (``paper``: dataset -> column key, e.g. ``{"svhn": "10"}`` for Table 1's 10-client column)."""

    table: str
    label: str
    setting: str
    paper: dict[str, str]


@dataclass(frozen=True)
class Claim:
    text: str
    holds: bool | None  # None: not measurable with these results
    evidence: str


@dataclass
class PaperResults:
    """Mean final accuracies per (method, setting, metric) and time ratios to FedAvg."""

    methods: list[str]
    columns: list[Column]
    values: dict[tuple[str, str, str], float] = field(default_factory=dict)
    time_ratios: dict[str, float] = field(default_factory=dict)

    def acc(self, method: str, column: Column | None, metric: str) -> float | None:
        if column is None:
            return None
        return self.values.get((method, column.setting, metric))

    def time_ratio(self, method: str) -> float | None:
        return self.time_ratios.get(method)

    def rank(self, method: str, column: Column, metric: str, among: list[str] | None = None) -> int | None:
        """1 + the number of methods (of ``among``, default all) strictly better in this cell."""
        mine = self.acc(method, column, metric)
        if mine is None:
            return None
        others = [v for m in among or self.methods if (v := self.acc(m, column, metric)) is not None]
        return 1 + sum(v > mine for v in others)


def paper_module(suite: Suite) -> ModuleType:
    name = suite.params.suite.paper
    try:
        return import_module(f"bench.suites.{name}")
    except ModuleNotFoundError:
        raise BenchError(f"suite {suite.name}: paper {name!r} has no module bench/suites/{name}.py") from None


def our_results(suite: Suite, table: dict[str, dict[str, dict]], columns: list[Column]) -> PaperResults:
    """Our means (final round) per cell; time ratio = mean over the Table-1 columns."""
    results = PaperResults(list(suite.params.methods), columns)
    for method, cells in table.items():
        for setting, cell in cells.items():
            for metric in METRICS:
                if (value := cell.get(f"final_{metric}_acc_mean")) is not None:
                    results.values[method, setting, metric] = value
        ratios = [cells[c.setting]["time_vs_fedavg"] for c in columns
                  if c.table == "table1" and "time_vs_fedavg" in cells.get(c.setting, {})]
        if ratios:
            results.time_ratios[method] = float(np.mean(ratios))
    return results


def _fmt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def paper_markdown(suite: Suite, table: dict[str, dict[str, dict]], pinned: dict[str, Any] | None) -> str:
    """The paper section of the report (``paper.md``)."""
    module = paper_module(suite)
    columns = module.columns(list(suite.params.settings))
    ours = our_results(suite, table, columns)
    paper = module.paper_results()
    paper_profile = all(len(c.paper) == 1 for c in columns)
    dataset = suite.config(next(iter(suite.params.methods)), columns[0].setting, 0).dataset.name if columns else "?"
    labels = module.LABELS
    parts = [f"# {suite.params.suite.paper} — paper tables, suite `{suite.name}`",
             ("Each cell: our final-round accuracy (mean ± std over seeds "
              f"{suite.params.suite.seeds}), the pinned mean, the paper's value and the difference."
              if paper_profile else
              f"This profile runs the paper's methods and protocol on `{dataset}` instead of the "
              "paper's datasets, so its numbers are not comparable with the paper's: each cell shows ours (mean ± std over seeds "
              f"{suite.params.suite.seeds}) and the pinned mean, and the paper's values of the columns it stands "
              f"for ({' / '.join(module.DATASETS.values())}) for orientation; the ranks (ours; paper per dataset) "
              "and the claims below are the comparison.")]

    def pinned_mean(method: str, setting: str, metric: str) -> float | None:
        try:
            return pinned["values"][method][setting]["mean"][f"final_{metric}_acc"]  # type: ignore[index]
        except (KeyError, TypeError):
            return None

    for name in ("table1", "table2"):
        cols = [c for c in columns if c.table == name]
        if not cols:
            continue
        parts.append(f"## {name.replace('table', 'Table ')}")
        for column in cols:
            rows = []
            for method in suite.params.methods:
                cell = table[method][column.setting]
                row = [labels.get(method, method)]
                for metric in METRICS:
                    mean, std = cell.get(f"final_{metric}_acc_mean"), cell.get(f"final_{metric}_acc_std")
                    printed = [module.paper_value(column.table, d, method, f"{metric}_{k}") for d, k in column.paper.items()]
                    row += [_fmt(mean) + (f" ± {std:.4f}" if std is not None else ""),
                            _fmt(pinned_mean(method, column.setting, metric)),
                            " / ".join(_fmt(p) for p in printed)]
                    if paper_profile:
                        row.append(_fmt(None if mean is None or printed[0] is None else mean - printed[0], 4))
                ranks = [f"{ours.rank(method, column, m) or '—'} ("
                         + "/".join(str(paper.rank(method, _paper_column(paper, column.table, d, k), m) or "—")
                                    for d, k in column.paper.items()) + ")" for m in METRICS]
                rows.append(row + ranks)
            header = ["method"]
            for metric in METRICS:
                header += [f"{metric} ours", "pinned", "paper"] + (["Δ"] if paper_profile else [])
            parts += [f"### {column.label}", _table(header + ["rank local (paper)", "rank global (paper)"], rows)]

    counts = module.parameter_counts(suite)
    datasets = list(module.DATASETS)
    parts += ["## Params (M): models held in memory during local training",
              "Ours counted from the paper-scale models and truncated to 3 decimals; the paper's Table 1 values "
              "beside them (the paper truncates one model's count before multiplying it, so FedProx and MOON "
              "can differ in the last digit).",
              _table(["method"] + [f"{module.DATASETS[d]} {who}" for d in datasets for who in ("ours", "paper")],
                     [[labels.get(m, m)] + [cell for d in datasets for cell in (
                         f"{math.floor(counts[m][d] / 1e3) / 1e3:.3f}",
                         _fmt(module.paper_value("table1", d, m, "params_m"), 3))] for m in suite.params.methods])]
    parts += ["## Time per round, as a ratio to FedAvg",
              "Ours: training time per round (timing.json), mean over seeds and the Table-1 columns; paper: "
              "Table 1's Time column divided by FedAvg's, per dataset (absolute seconds are hardware-specific).",
              _table(["method", "ours", *(f"paper {module.DATASETS[d]}" for d in datasets)],
                     [[labels.get(m, m), _fmt(ours.time_ratio(m), 2)]
                      + [_fmt(_ratio(module.paper_value("table1", d, m, "time_s"),
                                     module.paper_value("table1", d, "fedavg", "time_s")), 2) for d in datasets]
                      for m in suite.params.methods])]
    parts += [ranking_section(module, columns, ours, paper)]
    ours_claims, paper_claims = module.claims(ours, paper_profile), module.claims(paper, True)
    verdict = {True: "**holds**", False: "**fails**", None: "not measured"}
    parts += ["## The paper's claims",
              "Each claim checked on our results and on the paper's own tables.",
              _table(["claim", "paper", "ours"],
                     [[o.text, f"{verdict[p.holds]} ({p.evidence})", f"{verdict[o.holds]} ({o.evidence})"]
                      for o, p in zip(ours_claims, paper_claims)])]
    return "\n\n".join(parts) + "\n"


def ranking_section(module: ModuleType, columns: list[Column], ours: PaperResults, paper: PaperResults) -> str:
    """The proposed method's rank among the paper's methods in every cell, ours beside the paper's."""
    focus, among = module.FOCUS, module.PAPER_METHODS
    rows, mine, theirs = [], [], []
    for column in columns:
        for metric in METRICS:
            rank = ours.rank(focus, column, metric, among)
            printed = [paper.rank(focus, c, metric) for d, k in column.paper.items()
                       if (c := _paper_column(paper, column.table, d, k)) is not None]
            mine += [rank] if rank else []
            theirs += [r for r in printed if r]
            rows.append([column.label, metric, str(rank or "—"), " / ".join(str(r) for r in printed) or "—"])
    label = module.LABELS[focus]
    mean = lambda ranks: f"{sum(ranks) / len(ranks):.1f}" if ranks else "—"  # noqa: E731
    return "\n\n".join([f"## {label}'s rank among the paper's {len(among)} methods",
                         f"Mean rank: ours {mean(mine)}, the paper's {mean(theirs)} (1 = best; the paper's ranks are "
                         "those of the columns each of ours stands for).",
                         _table(["column", "accuracy", "ours", "paper"], rows)])


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def _paper_column(paper: PaperResults, table: str, dataset: str, key: str) -> Column | None:
    return next((c for c in paper.columns if c.table == table and c.paper == {dataset: key}), None)
