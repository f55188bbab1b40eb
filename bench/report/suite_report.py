"""A suite's report: summary tables, learning curves and per-round time, from its run records.

Writes to ``reports/<suite>/``:

- ``summary.md`` / ``summary.csv``: method x setting; for global, local and client accuracy the final-round
  value, the mean of the last 5 rounds and (secondary, optimistic: it selects on the test set) the best
  over rounds (the statistics ``final_``, ``last5_``, ``max_<metric>`` of bench/suites/statistics.py,
  computed from the runs' records), each as mean ± sample std over seeds; and the mean wall time per round
  (``train_time_s / rounds``) as a ratio to FedAvg.
- ``metrics/<setting>/<method>.json``: what a person reads in ``dvc metrics show`` (one row per method and
  setting): the mean over seeds of the final and last-5 global and local accuracy (``final_global_acc``,
  ...). Everything else (spreads, best round, time) is in ``summary.csv``.
- ``plots/curves_<setting>.csv``: the learning curves in long form (mean over seeds; rounds not
  evaluated left out), ``round,setting,method,metric,accuracy,method_index``, for ``dvc plots show``:
  dvc.yaml declares ``x: round``, ``y: accuracy`` and the template ``.dvc/plots/fkd_methods.json``,
  which draws one line per method (coloured as in the figures) and one panel per metric.
- ``figures/curves_<setting>.png``: mean over seeds with a min-max band, global and local accuracy panels;
  each method has its own colour (and line style), the legend is outside the axes.
- ``figures/partition_<setting>.png``: each setting's partition figure.
- ``paper.md`` (a suite with a paper): the paper's tables, sections and claims (paper_report.py), and its
  figures of curves, ``figures/paper_<figure>.png`` (paper_figures.py); the figures of other kinds its plug-in
  draws itself (:meth:`~bench.suites.paper.Paper.own_figures`).

``summary.md`` and ``paper.md`` name the git commit(s) and code hash of their runs and the commit of the
pinned file they show, and say so where those differ or the runs came from uncommitted code (provenance.py).
"""
from __future__ import annotations

import csv
import io
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.fileio import atomic_write, write_json, write_text
from bench.report.paper_figures import DrawnFigure, record_figures
from bench.report.paper_report import markdown_table, paper_markdown, paper_results, reference_method
from bench.report.pinned import PinnedFile, default_pinned_path, load_pinned
from bench.report.provenance import pinned_display_name, provenance_markdown
from bench.report.runs import ACC_METRICS, RunRecord, diverged_runs, require_runs
from bench.suites import Suite
from bench.suites.paper import LineFigure
from bench.suites.statistics import Statistic, mean_std

STATISTICS = {"final": "final", "last5": "last5", "best": "max"}  # report name -> statistic's rounds
LABELS = {"final": "final", "last5": "last-5", "best": "best†"}
METRIC_TITLES = {"global_acc": "Global accuracy (global model, global test set)",
                 "local_acc": "Local accuracy (each client's model on its local test split, averaged)",
                 "client_global_acc": "Client accuracy (each client's model on the global test set, averaged)"}
METRICS = ("final_global_acc", "last5_global_acc", "final_local_acc", "last5_local_acc",  # metrics/*.json
           "final_client_global_acc", "last5_client_global_acc")
# One colour per method, in suite order: tab10, black, then tab20's light shades (21 colours); methods
# past the first 10 are also dashed, so no two share colour and line style. .dvc/plots/fkd_methods.json
# (dvc plots show) uses the same colours in the same order.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#000000", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2",
           "#c7c7c7", "#dbdb8d", "#9edae5")
LINESTYLES = ("-", "--", ":", "-.")


def cell_stats(records: list[RunRecord], diverged: int = 0) -> dict[str, float | int]:
    """One (method, setting) cell over its finished seeds: ``<stat>_<metric>_mean``/``_std``, time per
    round; ``diverged``: how many of its seeds diverged instead (:func:`~bench.report.runs.diverged_runs`)."""
    out: dict[str, float | int] = {"seeds": len(records), "diverged": diverged}
    if not records:
        return out
    for name, rounds in STATISTICS.items():
        for metric in ACC_METRICS:
            statistic = Statistic.model_validate(f"{rounds}_{metric}")
            values = [v for r in records if (v := statistic.compute(r.records)) is not None]
            if len(values) < len(records):
                continue
            mean, std = mean_std(values)
            out[f"{name}_{metric}_mean"] = mean
            if std is not None:
                out[f"{name}_{metric}_std"] = std
    out["seconds_per_round"] = mean_std([r.seconds_per_round for r in records])[0]
    return out


def summarize(suite: Suite, runs: dict[tuple[str, str, int], RunRecord]) -> dict[str, dict[str, dict]]:
    """``{method: {setting: cell_stats}}`` (over the finished seeds, counting the diverged ones) plus
    ``time_vs_fedavg`` where the suite has FedAvg."""
    p = suite.params
    keys = [(m, s, seed) for m in p.methods for s in suite.settings_of(m) for seed in p.suite.seeds]
    diverged = diverged_runs(suite, [k for k in keys if k not in runs])
    table = {m: {s: cell_stats([runs[m, s, seed] for seed in p.suite.seeds if (m, s, seed) in runs],
                               sum((m, s, seed) in diverged for seed in p.suite.seeds)) for s in p.settings}
             for m in p.methods}
    if (ref := reference_method(suite)) is not None:
        for cells in table.values():
            for setting, cell in cells.items():
                if "seconds_per_round" in cell and "seconds_per_round" in table[ref][setting]:
                    cell["time_vs_fedavg"] = cell["seconds_per_round"] / table[ref][setting]["seconds_per_round"]
    return table


def _pct(cell: dict, key: str) -> str:
    diverged = f" ({cell['diverged']}/{cell['diverged'] + cell['seeds']} diverged)" if cell["diverged"] else ""
    if f"{key}_mean" not in cell:
        return "—" + diverged
    std = cell.get(f"{key}_std")
    return f"{100 * cell[f'{key}_mean']:.2f}" + (f" ± {100 * std:.2f}" if std is not None else "") + diverged


def summary_markdown(suite: Suite, table: dict, runs: dict[tuple[str, str, int], RunRecord],
                     images: list[str], provenance: str = "") -> str:
    p = suite.params
    records = list(runs.values())
    rounds = sorted({r.metrics["rounds"] for r in records})
    parts = [f"# Suite `{suite.name}`",
             f"{len(p.methods)} methods × {len(p.settings)} settings × {len(p.suite.seeds)} seeds "
             f"({', '.join(map(str, p.suite.seeds))}), {', '.join(map(str, rounds))} rounds.",
             *([provenance] if provenance else []),
             ("Accuracy in %, mean ± sample std over seeds. **final**: the last round; **last-5**: the mean "
              "of the last 5 rounds; **best†**: the best round (secondary: optimistic, it selects on the "
              "test set). — : the method has no such model, or does not run on that setting. (k/n diverged): k of the cell's n seeds diverged "
              "(loss or parameters NaN, inf or exploded; their failure.json says when) and the statistics "
              "are over the others.")]
    for metric in ACC_METRICS:
        if not any(f"final_{metric}_mean" in c for cells in table.values() for c in cells.values()):
            continue
        header = ["method"] + [f"{s} {LABELS[name]}" for s in p.settings for name in STATISTICS]
        rows = [[m] + [_pct(table[m][s], f"{name}_{metric}") for s in p.settings for name in STATISTICS]
                for m in p.methods]
        parts += [f"## {METRIC_TITLES[metric]}", markdown_table(header, rows)]
    ref = reference_method(suite)
    header = ["method"] + [f"{s} s/round" for s in p.settings] + ([f"× {ref}"] if ref else [])
    def ratio(m: str) -> str:
        ratios = [table[m][s]["time_vs_fedavg"] for s in p.settings if "time_vs_fedavg" in table[m][s]]
        return f"{np.mean(ratios):.2f}" if ratios else "—"

    rows = [[m] + [f"{table[m][s]['seconds_per_round']:.3f}" if "seconds_per_round" in table[m][s] else "—"
                   for s in p.settings] + ([ratio(m)] if ref else [])
            for m in p.methods]
    parts += ["## Training time per round",
              "Mean over seeds of `train_time_s / rounds` (timing.json: local training and aggregation; set-up "
              "and evaluation excluded)"
              + (f"; the last column is the mean over settings of the ratio to `{ref}`." if ref else "."),
              markdown_table(header, rows), "## Plots"]
    parts += [f"![{Path(image).stem}]({image})" for image in images]
    return "\n\n".join(parts) + "\n"


def summary_csv(table: dict) -> str:
    columns = ["method", "setting", *dict.fromkeys(k for cells in table.values() for c in cells.values() for k in c)]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, columns, lineterminator="\n")
    writer.writeheader()
    for method, cells in table.items():
        for setting, cell in cells.items():
            writer.writerow({"method": method, "setting": setting, **{k: repr(v) for k, v in cell.items()}})
    return buf.getvalue()


def metrics_files(table: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """``{"<setting>/<method>.json": {final_global_acc: mean, ...}}``: the files ``dvc metrics show`` reads
    (a row each), with the mean over seeds of each of :data:`METRICS` the method has."""
    return {f"{setting}/{method}.json": {k: cell[f"{k}_mean"] for k in METRICS if f"{k}_mean" in cell}
            for method, cells in table.items() for setting, cell in cells.items()}


def setting_curves(suite: Suite, runs: dict[tuple[str, str, int], RunRecord],
                   setting: str) -> tuple[np.ndarray, dict[tuple[str, str], np.ndarray]]:
    """The rounds of any method's runs and, per (method, metric), a (seeds x rounds) array on them (NaN where
    not evaluated: methods may run different numbers of rounds, e.g. FedAL's τ per method, or FedAKD's
    Table 3 equal wall-clock budgets)."""
    per_method: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    for method in suite.params.methods:
        curves = [runs[run].curves() for seed in suite.params.suite.seeds if (run := (method, setting, seed)) in runs]
        if not curves:  # every seed diverged, or the method does not run on this setting
            continue
        rounds = np.array(curves[0]["round"], dtype=int)
        for metric in ACC_METRICS:
            if all(metric in c for c in curves):
                per_method[method, metric] = rounds, np.array([c[metric] for c in curves], dtype=float)
    every = np.array(sorted({int(r) for rounds, _ in per_method.values() for r in rounds}), dtype=int)
    out: dict[tuple[str, str], np.ndarray] = {}
    for key, (rounds, values) in per_method.items():
        grid = np.full((len(values), len(every)), np.nan)
        grid[:, np.searchsorted(every, rounds)] = values
        out[key] = grid
    return every, out


def curves_csv(setting: str, rounds: np.ndarray, curves: dict[tuple[str, str], np.ndarray]) -> str:
    """``round,setting,method,metric,accuracy,method_index``: the mean over seeds, one row per evaluated
    round, method and metric (long form: ``dvc plots show`` draws one line per method without naming the
    methods in dvc.yaml); ``method_index``, the method's place in the suite, gives it its figure colour."""
    index = {m: i for i, m in enumerate(dict.fromkeys(method for method, _ in curves))}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["round", "setting", "method", "metric", "accuracy", "method_index"])
    for (method, metric), values in curves.items():
        mean = values.mean(axis=0)
        writer.writerows([int(r), setting, method, metric, repr(float(v)), index[method]]
                         for r, v in zip(rounds, mean) if not np.isnan(v))
    return buf.getvalue()


def method_style(index: int) -> tuple[str, str]:
    """The colour and line style of the suite's ``index``-th method: no two of the first 42 methods share both."""
    return PALETTE[index % len(PALETTE)], LINESTYLES[(index // 10) % len(LINESTYLES)]


def curves_figure(rounds: np.ndarray, curves: dict[tuple[str, str], np.ndarray], title: str):  # -> Figure
    """One panel per accuracy metric: mean over seeds (line) and min-max over seeds (band); one legend
    for all panels, outside them."""
    from matplotlib.figure import Figure  # no pyplot: no global state, Agg canvas
    from matplotlib.ticker import MaxNLocator

    methods = list(dict.fromkeys(method for method, _ in curves))
    metrics = [m for m in ACC_METRICS if any(k[1] == m for k in curves)]
    fig = Figure(figsize=(5 * len(metrics) + 1.8, 4.0), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    handles = {}
    for ax, metric in zip(axes, metrics):
        for i, method in enumerate(methods):
            if (values := curves.get((method, metric))) is None:
                continue
            colour, style = method_style(i)  # the same in every panel and every setting's figure
            evaluated = ~np.isnan(values).any(axis=0)
            x, v = rounds[evaluated], values[:, evaluated]
            handles[method], = ax.plot(x, v.mean(axis=0), color=colour, linestyle=style, label=method)
            ax.fill_between(x, v.min(axis=0), v.max(axis=0), color=colour, alpha=0.12, linewidth=0)
        ax.set(xlabel="round", ylabel="accuracy", title=metric.replace("_acc", " accuracy"))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.legend([handles[m] for m in methods if m in handles], [m for m in methods if m in handles],
               loc="outside right upper", fontsize="small", title="method")
    fig.suptitle(f"{title} (line: mean over seeds; band: min-max over seeds)", fontsize="medium")
    return fig


def plot_curves(rounds: np.ndarray, curves: dict[tuple[str, str], np.ndarray], title: str, path: Path) -> None:
    fig = curves_figure(rounds, curves, title)
    atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))


def line_figure(figure: LineFigure, labels: dict[str, str], order: list[str]):  # -> Figure
    """A paper figure (bench/suites/paper.py): one panel per :class:`Panel`, one line per method in the suite's
    colours (markers at the points; with ``fit``, the points and a least-squares cubic through them)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * len(figure.panels) + 1.8, 3.8), layout="constrained")
    axes = fig.subplots(1, len(figure.panels), squeeze=False)[0]
    handles = {}
    for ax, panel in zip(axes, figure.panels):
        for method, points in panel.series.items():
            if not points:
                continue
            colour, style = method_style(order.index(method) if method in order else len(order))
            x, y = np.array(points, dtype=float).T
            if panel.fit and len(x) > 3:
                ax.scatter(x, y, color=colour, s=12)
                grid = np.linspace(x.min(), x.max(), 100)
                handles[method], = ax.plot(grid, np.polyval(np.polyfit(x, y, 3), grid), color=colour, linestyle=style)
            else:
                handles[method], = ax.plot(x, y, color=colour, linestyle=style, marker="o", markersize=3)
        if panel.log_x:
            ax.set_xscale("log")
        ax.set(xlabel=figure.x_label, ylabel=figure.y_label, title=panel.title)
        ax.grid(alpha=0.3)
    methods = [m for m in order if m in handles] + [m for m in handles if m not in order]
    fig.legend([handles[m] for m in methods], [labels.get(m, m) for m in methods], loc="outside right upper",
               fontsize="small", title="method")
    fig.suptitle(figure.title, fontsize="medium")
    return fig


def computed_figures(suite: Suite, runs: dict[tuple[str, str, int], RunRecord], table: dict,
                     folder: Path) -> list[DrawnFigure]:
    """The figures the suite's paper module computes (:meth:`~bench.suites.paper.Paper.figures`), as
    ``paper_<name>.png``."""
    paper = suite.paper
    if paper is None:
        return []
    _, _, ours = paper_results(suite, runs, table)
    by_setting = {s: setting_curves(suite, runs, s) for s in suite.params.settings}

    def curve(method: str, setting: str) -> list[tuple[int, float]]:
        rounds, curves = by_setting[setting]
        values = curves.get((method, "global_acc"))
        if values is None:
            return []
        mean = values.mean(axis=0)
        return [(int(r), float(v)) for r, v in zip(rounds, mean) if not np.isnan(v)]

    written = []
    for figure in paper.figures(ours, curve):
        fig = line_figure(figure, {m: paper.definition.label(m) for m in suite.methods}, suite.methods)
        path = folder / f"paper_{figure.name}.png"
        atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))
        written.append(DrawnFigure(figure.name, figure.title, path))
    return written


def partition_figures(suite: Suite, folder: Path) -> list[Path]:
    """Each setting's partition figure (the client x class heatmap of FedHKD Figs. 1-3, or the
    figure its scheme's paper uses)."""
    from bench.data.partition import load_partition
    from bench.report.partition_plots import plot_partition

    return [plot_partition(load_partition(suite.partition_dir(setting)), folder / f"partition_{setting}.png")
            for setting in suite.params.settings if (suite.partition_dir(setting) / "partition.json").exists()]


def write_report(suite: Suite, out: Path | None = None, data_dir: Path | None = None) -> list[Path]:
    """Write every report file of the suite (default folder ``<root>/reports/<suite>``), with the figures its
    paper draws (:mod:`bench.report.paper_figures`, from ``data_dir``'s datasets); return their paths.

    Raises :class:`~bench.errors.BenchError` naming each missing, failed or stale run."""
    out = Path(out) if out is not None else suite.root / "reports" / suite.name
    runs = require_runs(suite)
    table = summarize(suite, runs)
    pinned_path = default_pinned_path(suite.params_file, suite.name) if suite.params_file else None
    pinned: PinnedFile | None = load_pinned(pinned_path, suite) if pinned_path and pinned_path.exists() else None
    provenance = provenance_markdown(runs, suite.methods, pinned, pinned_display_name(
        pinned_path, Path(suite.params_file).parent if suite.params_file else None) if pinned_path else None)
    written = [write_text(out / "summary.csv", summary_csv(table))]
    written += [write_json(out / "metrics" / name, values) for name, values in metrics_files(table).items()]
    for setting in suite.params.settings:
        rounds, curves = setting_curves(suite, runs, setting)
        written.append(write_text(out / "plots" / f"curves_{setting}.csv", curves_csv(setting, rounds, curves)))
        plot_curves(rounds, curves, f"{suite.name}: {setting}", out / "figures" / f"curves_{setting}.png")
        written.append(out / "figures" / f"curves_{setting}.png")
    written += partition_figures(suite, out / "figures")
    figures = record_figures(suite, runs, out / "figures", method_style) + computed_figures(suite, runs, table,
                                                                                          out / "figures")
    written += [figure.image for figure in figures]
    if suite.paper is not None:
        written += suite.paper.own_figures(suite, runs, out / "figures", data_dir)
    _remove_stale(out, written)
    images = [str(p.relative_to(out)) for p in written if p.suffix == ".png" and not p.name.startswith("paper_")]
    written.append(write_text(out / "summary.md", summary_markdown(suite, table, runs, images, provenance)))
    if suite.paper is not None:
        written.append(write_text(out / "paper.md", paper_markdown(suite, runs, table, pinned, provenance, [
            replace(figure, image=figure.image.relative_to(out)) for figure in figures])))
    return written


def _remove_stale(out: Path, written: list[Path]) -> None:
    """Remove what an earlier report left in ``out`` that this one does not write: metrics, plot and figure
    files of methods or settings the suite no longer has, and the one-file ``metrics.json`` of earlier
    versions (``dvc repro`` deletes a stage's outputs first; ``bench suite report`` by hand does not)."""
    keep = {p.resolve() for p in written}
    stale = [*(out / "metrics").rglob("*.json"), *(out / "plots").glob("*.csv"), out / "metrics.json",
             *(out / "figures").glob("curves_*.png"), *(out / "figures").glob("partition_*.png"),
             *(out / "figures").glob("paper_*.png")]
    for path in stale:
        if path.is_file() and path.resolve() not in keep:
            path.unlink()
