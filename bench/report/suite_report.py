"""A suite's report: summary tables, learning curves and per-round time, from its run records.

Writes to ``reports/<suite>/``:

- ``summary.md`` / ``summary.csv``: method x setting; for global and local accuracy the final-round
  value, the mean of the last 5 rounds and (secondary, optimistic: it selects on the test set) the best
  over rounds (the statistics ``final_``, ``last5_``, ``max_<metric>`` of bench/suites/statistics.py,
  computed from the runs' records), each as mean ± sample std over seeds; and the mean wall time per round
  (``train_time_s / rounds``) as a ratio to FedAvg.
- ``metrics.json``: ``{method: {setting: {final_global_acc_mean: ..., ...}}}`` for ``dvc metrics show``.
- ``plots/curves_<setting>.csv``: ``round`` and one column per method and metric (``fedavg_global_acc``),
  the mean over seeds (empty where not evaluated), for ``dvc plots show`` (dvc.yaml declares the folder).
- ``figures/curves_<setting>.png``: mean over seeds with a min-max band, global and local accuracy panels.
- ``figures/partition_<setting>.png``: each setting's partition figure.
- ``paper.md`` (a suite with a paper): the paper's tables, sections and claims (paper_report.py).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from bench.fileio import atomic_write, write_json, write_text
from bench.report.paper_report import markdown_table, paper_markdown
from bench.report.pinned import default_pinned_path, load_pinned
from bench.report.runs import ACC_METRICS, RunRecord, require_runs
from bench.suites import Suite
from bench.suites.statistics import Statistic, mean_std

STATISTICS = {"final": "final", "last5": "last5", "best": "max"}  # report name -> statistic's rounds
LABELS = {"final": "final", "last5": "last-5", "best": "best†"}
METRIC_TITLES = {"global_acc": "Global accuracy (global model, global test set)",
                 "local_acc": "Local accuracy (each client's model on its local test split, averaged)"}
REFERENCE = "fedavg"  # per-round times are reported as ratios to this algorithm


def cell_stats(records: list[RunRecord]) -> dict[str, float | int]:
    """One (method, setting) cell over its seeds: ``<stat>_<metric>_mean``/``_std``, time per round."""
    out: dict[str, float | int] = {"seeds": len(records)}
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


def _reference_method(suite: Suite) -> str | None:
    """The first method running the reference algorithm (a method's algorithm name defaults to its key)."""
    return next((m for m, entry in suite.params.methods.items() if (entry.name or m) == REFERENCE), None)


def summarize(suite: Suite, runs: dict[tuple[str, str, int], RunRecord]) -> dict[str, dict[str, dict]]:
    """``{method: {setting: cell_stats}}`` plus ``time_vs_fedavg`` where the suite has FedAvg."""
    p = suite.params
    table = {m: {s: cell_stats([runs[m, s, seed] for seed in p.suite.seeds]) for s in p.settings}
             for m in p.methods}
    if (ref := _reference_method(suite)) is not None:
        for cells in table.values():
            for setting, cell in cells.items():
                cell["time_vs_fedavg"] = cell["seconds_per_round"] / table[ref][setting]["seconds_per_round"]
    return table


def _pct(cell: dict, key: str) -> str:
    if f"{key}_mean" not in cell:
        return "—"
    std = cell.get(f"{key}_std")
    return f"{100 * cell[f'{key}_mean']:.2f}" + (f" ± {100 * std:.2f}" if std is not None else "")


def summary_markdown(suite: Suite, table: dict, runs: dict[tuple[str, str, int], RunRecord],
                     images: list[str]) -> str:
    p = suite.params
    records = list(runs.values())
    rounds = sorted({r.metrics["rounds"] for r in records})
    prov = {k: sorted({str(r.provenance.get(k, "unknown")) for r in records})
            for k in ("git_commit", "torch", "machine", "python")}
    parts = [f"# Suite `{suite.name}`",
             f"{len(p.methods)} methods × {len(p.settings)} settings × {len(p.suite.seeds)} seeds "
             f"({', '.join(map(str, p.suite.seeds))}), {', '.join(map(str, rounds))} rounds. "
             + "; ".join(f"{k}: {', '.join(v)}" for k, v in prov.items()) + ".",
             ("Accuracy in %, mean ± sample std over seeds. **final**: the last round; **last-5**: the mean "
              "of the last 5 rounds; **best†**: the best round (secondary: optimistic, it selects on the "
              "test set). — : the method has no such model.")]
    for metric in ACC_METRICS:
        if not any(f"final_{metric}_mean" in c for cells in table.values() for c in cells.values()):
            continue
        header = ["method"] + [f"{s} {LABELS[name]}" for s in p.settings for name in STATISTICS]
        rows = [[m] + [_pct(table[m][s], f"{name}_{metric}") for s in p.settings for name in STATISTICS]
                for m in p.methods]
        parts += [f"## {METRIC_TITLES[metric]}", markdown_table(header, rows)]
    ref = _reference_method(suite)
    header = ["method"] + [f"{s} s/round" for s in p.settings] + ([f"× {ref}"] if ref else [])
    rows = [[m] + [f"{table[m][s]['seconds_per_round']:.3f}" for s in p.settings]
            + ([f"{np.mean([table[m][s]['time_vs_fedavg'] for s in p.settings]):.2f}"] if ref else [])
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


def setting_curves(suite: Suite, runs: dict[tuple[str, str, int], RunRecord],
                   setting: str) -> tuple[np.ndarray, dict[tuple[str, str], np.ndarray]]:
    """Rounds and, per (method, metric), a (seeds x rounds) array (NaN where not evaluated)."""
    rounds: np.ndarray | None = None
    out: dict[tuple[str, str], np.ndarray] = {}
    for method in suite.params.methods:
        curves = [runs[method, setting, seed].curves() for seed in suite.params.suite.seeds]
        rounds = np.array(curves[0]["round"], dtype=int)
        for metric in ACC_METRICS:
            if all(metric in c for c in curves):
                out[method, metric] = np.array([c[metric] for c in curves], dtype=float)
    assert rounds is not None  # a suite has at least one method
    return rounds, out


def curves_csv(rounds: np.ndarray, curves: dict[tuple[str, str], np.ndarray]) -> str:
    columns = {f"{method}_{metric}": values.mean(axis=0) for (method, metric), values in curves.items()}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["round", *columns])
    for i, r in enumerate(rounds):
        writer.writerow([int(r), *("" if np.isnan(v[i]) else repr(float(v[i])) for v in columns.values())])
    return buf.getvalue()


def plot_curves(rounds: np.ndarray, curves: dict[tuple[str, str], np.ndarray], title: str, path: Path) -> None:
    """One panel per accuracy metric: mean over seeds (line) and min-max over seeds (band)."""
    from matplotlib.figure import Figure  # no pyplot: no global state, Agg canvas

    methods = list(dict.fromkeys(method for method, _ in curves))
    metrics = [m for m in ACC_METRICS if any(k[1] == m for k in curves)]
    fig = Figure(figsize=(5 * len(metrics), 3.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        for i, method in enumerate(methods):
            if (values := curves.get((method, metric))) is None:
                continue
            evaluated = ~np.isnan(values).any(axis=0)
            x, v = rounds[evaluated], values[:, evaluated]
            ax.plot(x, v.mean(axis=0), color=f"C{i}", label=method)  # one colour per method in every panel
            ax.fill_between(x, v.min(axis=0), v.max(axis=0), color=f"C{i}", alpha=0.2, linewidth=0)
        ax.set(xlabel="round", ylabel="accuracy", title=metric.replace("_acc", " accuracy"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{title} (line: mean over seeds; band: min-max over seeds)", fontsize="medium")
    atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))


def partition_figures(suite: Suite, folder: Path) -> list[Path]:
    """Each setting's partition figure (the client x class heatmap of FedHKD Figs. 1-3, or the
    figure its scheme's paper uses)."""
    from bench.data.partition import load_partition
    from bench.report.partition_plots import plot_partition

    return [plot_partition(load_partition(suite.partition_dir(setting)), folder / f"partition_{setting}.png")
            for setting in suite.params.settings if (suite.partition_dir(setting) / "partition.json").exists()]


def write_report(suite: Suite, out: Path | None = None) -> list[Path]:
    """Write every report file of the suite (default folder ``<root>/reports/<suite>``); return their paths.

    Raises :class:`~bench.errors.BenchError` naming each missing, failed or stale run."""
    out = Path(out) if out is not None else suite.root / "reports" / suite.name
    runs = require_runs(suite)
    table = summarize(suite, runs)
    written = [write_json(out / "metrics.json", table), write_text(out / "summary.csv", summary_csv(table))]
    for setting in suite.params.settings:
        rounds, curves = setting_curves(suite, runs, setting)
        written.append(write_text(out / "plots" / f"curves_{setting}.csv", curves_csv(rounds, curves)))
        plot_curves(rounds, curves, f"{suite.name}: {setting}", out / "figures" / f"curves_{setting}.png")
        written.append(out / "figures" / f"curves_{setting}.png")
    written += partition_figures(suite, out / "figures")
    images = [str(p.relative_to(out)) for p in written if p.suffix == ".png"]
    written.append(write_text(out / "summary.md", summary_markdown(suite, table, runs, images)))
    if suite.paper is not None:
        pinned_path = default_pinned_path(suite.params_file, suite.name) if suite.params_file else None
        pinned = load_pinned(pinned_path, suite) if pinned_path and pinned_path.exists() else None
        written.append(write_text(out / "paper.md", paper_markdown(suite, runs, table, pinned)))
    return written
