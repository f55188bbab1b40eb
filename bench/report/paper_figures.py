"""A paper's figures of curves (``figures:`` in its definition, :class:`~bench.suites.paper.Figure`), drawn
from the runs' records: accuracy against iterations, rounds, upstream volume or modelled time, one panel
per column, one line per method (mean over seeds, min-max band), and each line's end point as a table
for ``paper.md``. Nothing here is specific to one paper. Every drawn paper figure, these and the ones a
paper module computes (:meth:`~bench.suites.paper.Paper.figures`), reaches ``paper.md`` as a
:class:`DrawnFigure`.

A paper's figures of other kinds (partitions, contributions, feature densities) are drawn by its plug-in
(:meth:`~bench.suites.paper.Paper.own_figures`, e.g. FedAKD's ``pipelines/fedakd/figures.py``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.fileio import atomic_write
from bench.report.runs import RunKey, RunRecord
from bench.suites import Suite
from bench.suites.paper import Figure, ReportColumn

X_LABELS = {"rounds": "round", "iterations": "iterations (rounds × τ)", "upload_mb": "upstream volume per client (MB)",
            "modelled_time": "modelled time (s)"}


@dataclass(frozen=True)
class DrawnFigure:
    """A paper figure written to ``image``, as ``paper.md`` shows it: title, caption, the image and a table
    (e.g. each line's end point; no rows: no table)."""

    name: str
    title: str
    image: Path
    caption: str = ""
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Curve:
    """One method's line in one panel: x and the metric per seed (seeds × evaluated rounds)."""

    method: str
    x: np.ndarray
    values: np.ndarray

    @property
    def final(self) -> tuple[float, float]:
        """The last point: x and the mean over seeds."""
        return float(self.x[-1]), float(self.values[:, -1].mean())


def _cumulative(record: RunRecord, metric: str) -> dict[int, float]:
    """Round -> the cumulative sum of a run-level per-round record up to that round."""
    series = record.records.values.get(metric, {})
    total, out = 0.0, {}
    for round_ in sorted(series):
        total += series[round_][None]
        out[round_] = total
    return out


def run_curve(suite: Suite, figure: Figure, key: RunKey, record: RunRecord) -> tuple[np.ndarray, np.ndarray]:
    """x and y of one run: the evaluated rounds of the figure's metric (mean over clients)."""
    method, setting, seed = key
    metric = figure.metric_for.get(method, figure.metric)
    series = record.records.series(metric)
    rounds = np.array(sorted(series), dtype=int)
    y = np.array([series[r] for r in rounds], dtype=float)
    config = suite.config(method, setting, seed)
    clients = config.partition.num_clients * config.participation.fraction
    if figure.x == "rounds":
        x = rounds.astype(float)
    elif figure.x == "iterations":
        x = rounds * float(config.training.local_steps or 1)
    else:
        up = _cumulative(record, "upload_bytes")
        volume = np.array([up.get(r, 0.0) for r in rounds]) / clients
        if figure.x == "upload_mb":
            x = volume / 1e6
        else:
            down = _cumulative(record, "download_bytes")
            both = volume + np.array([down.get(r, 0.0) for r in rounds]) / clients
            x = rounds * record.seconds_per_round + both * 8 / (figure.bandwidth_mbps * 1e6)
    return x, y


def panel_curves(suite: Suite, figure: Figure, column: ReportColumn, runs: dict[RunKey, RunRecord]) -> list[Curve]:
    """The lines of one panel: each figure method that runs on the column's setting with every seed finished
    (seeds share their rounds; x is the mean over seeds)."""
    curves = []
    for method in figure.methods:
        if method not in suite.params.methods or not suite.runs_on(method, column.setting):
            continue
        keys = [(method, column.setting, seed) for seed in suite.params.suite.seeds]
        if not all(k in runs for k in keys):
            continue
        points = [run_curve(suite, figure, k, runs[k]) for k in keys]
        if any(len(p[1]) != len(points[0][1]) for p in points) or not len(points[0][1]):
            continue
        curves.append(Curve(method, np.mean([p[0] for p in points], axis=0), np.array([p[1] for p in points])))
    return curves


def figure_panels(suite: Suite, figure: Figure, columns: list[ReportColumn]) -> list[ReportColumn]:
    """Our columns standing for the figure's panels, in panel order, each once."""
    out: list[ReportColumn] = []
    for key in figure.panels:
        column = next((c for c in columns if key in c.stands_for), None)
        if column is not None and column not in out:
            out.append(column)
    return out


Style = Callable[[int], tuple[str, str]]
"""The colour and line style of the suite's i-th method (the suite report's, so figures agree)."""


def draw_figure(suite: Suite, figure: Figure, panels: list[tuple[ReportColumn, list[Curve]]], path: Path,
                method_style: Style) -> Path:
    from matplotlib.figure import Figure as MplFigure  # no pyplot: no global state, Agg canvas

    fig = MplFigure(figsize=(max(8.0, 4.6 * len(panels) + 1.8), 4.2), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    methods = list(suite.params.methods)
    handles = {}
    for ax, (column, curves) in zip(axes, panels):
        for curve in curves:
            colour, style = method_style(methods.index(curve.method))
            handles[curve.method], = ax.plot(curve.x, curve.values.mean(axis=0), color=colour, linestyle=style)
            ax.fill_between(curve.x, curve.values.min(axis=0), curve.values.max(axis=0), color=colour, alpha=0.12,
                            linewidth=0)
        if figure.x == "upload_mb":
            ax.set_xscale("log")
        ax.set(xlabel=X_LABELS[figure.x], ylabel="accuracy", title=column.label)
        ax.grid(alpha=0.3)
    label = suite.paper.definition.label if suite.paper is not None else str
    fig.legend(list(handles.values()), [label(m) for m in handles], loc="outside right upper", fontsize="small")
    fig.suptitle(f"{figure.title}\nsuite {suite.name}; line: mean over seeds, band: min-max", fontsize="medium")
    return atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))


def record_figures(suite: Suite, runs: dict[RunKey, RunRecord], folder: Path, method_style: Style) -> list[DrawnFigure]:
    """Draw every figure of the suite's paper definition that has a panel here, with a row per (panel,
    method): the final x and the final value (mean over seeds)."""
    if suite.paper is None:
        return []
    d = suite.paper.definition
    columns = d.columns_for(list(suite.params.settings))
    out = []
    for name, figure in d.figures.items():
        panels = [(c, curves) for c in figure_panels(suite, figure, columns)
                  if (curves := panel_curves(suite, figure, c, runs))]
        if not panels:
            continue
        path = draw_figure(suite, figure, panels, folder / f"paper_{name}.png", method_style)
        rows = tuple((column.label, d.label(curve.method), f"{curve.final[0]:.4g}", f"{curve.final[1]:.4f}")
                     for column, curves in panels for curve in curves)
        out.append(DrawnFigure(name, figure.title, path, figure.caption,
                               ("column", "method", f"final {X_LABELS[figure.x]}", f"final {figure.metric}"), rows))
    return out

