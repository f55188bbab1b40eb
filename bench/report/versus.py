"""The method author's command, ``bench versus``: a new method on exactly a suite's pinned partitions
and seeds, compared with each pinned baseline by paired statistics (paired.py); and ``bench
sensitivity``: whether the suite's pinned seeds can tell methods apart at all.

The baselines' values are the pinned file's per-seed values (``reports/pinned/<suite>.json``): they
are never re-trained. With ``from_runs`` they are read from the suite's run records instead (after a
``dvc repro`` or ``dvc pull``). The new method's runs go to ``<out>/runs/<setting>/seed<k>/`` and are
reused when their config is unchanged. Outputs: ``versus.md``, ``versus.csv``, ``versus.png`` (per
setting, each baseline's difference with its t interval and each seed's difference), and one
MLflow run in the experiment ``versus-<suite>`` holding the numbers and those files.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from bench.config import describe_validation
from bench.errors import BenchError
from bench.fileio import atomic_write, write_text
from bench.report.paired import Paired, Sensitivity, compare_all
from bench.report.paired import sensitivity as paired_sensitivity
from bench.suites.verdicts import ALPHA, CONFIDENCE, POWER, TARGET_POINTS, mean, paired_test, seeds_label
from bench.report.paper_report import markdown_table
from bench.report.partition_check import check_partitions
from bench.report.pinned import PinnedFile
from bench.report.runs import RunKey, find_runs, read_run
from bench.runner.executor import RunRequest
from bench.suites import Suite
from bench.suites.statistics import Records, Statistic

Values = dict[tuple[str, int], float]  # (setting, seed) -> value


def pinned_values(pinned: PinnedFile, method: str, statistic: Statistic) -> Values:
    """A pinned method's per-seed values of ``statistic``; a clear error when it is not pinned."""
    if method not in pinned.values:
        raise BenchError(f"method {method!r} is not pinned in suite {pinned.suite} (pinned: "
                         f"{', '.join(pinned.values)}); pin it with `bench pin`, or leave it out of --baseline")
    out: Values = {}
    for setting, cell in pinned.values[method].items():
        for seed, entry in cell.seeds.items():
            if statistic.name not in entry.values:
                raise BenchError(f"{statistic.name} of {method}/{setting}/seed{seed} is not pinned (pinned: "
                                 f"{', '.join(entry.values)}); choose one of those with --statistic")
            out[setting, seed] = entry.values[statistic.name]
    return out


def run_values(suite: Suite, method: str, statistic: Statistic) -> Values:
    """The method's values of ``statistic`` from the suite's run records; a clear error when some are missing."""
    keys: list[RunKey] = [(method, s, seed) for s in suite.settings_of(method) for seed in suite.params.suite.seeds]
    found, problems = find_runs(suite, keys)
    if problems:
        raise BenchError(f"{len(problems)} run(s) of {method} missing ({next(iter(problems.values()))}); fetch "
                         "them with `dvc pull`, or produce them with `dvc repro`")
    return {(s, seed): _value(found[method, s, seed].records, statistic, f"{method}/{s}/seed{seed}")
            for _, s, seed in keys}


def parse_statistic(name: str) -> Statistic:
    """A statistic from its name; a one-line error naming the problem."""
    try:
        return Statistic.model_validate(name)
    except ValidationError as exc:
        raise BenchError(f"--statistic {name}: {describe_validation(exc)}") from None


def has_statistic(suite: Suite, pinned: PinnedFile | None, method: str, statistic: Statistic) -> bool:
    """Whether the method has the statistic at all (Standalone has no global model): in its pinned values,
    or in the records of its first run."""
    if pinned is not None:
        return any(statistic.name in e.values for c in pinned.values.get(method, {}).values() for e in c.seeds.values())
    settings = suite.settings_of(method)
    if not settings:
        return False
    record = read_run(suite.run_dir(method, settings[0], suite.params.suite.seeds[0]))
    return not isinstance(record, str) and statistic.metric in record.records.values


def default_baselines(suite: Suite, pinned: PinnedFile | None, method: str,
                      statistic: Statistic) -> tuple[list[str], list[str]]:
    """Every pinned method (or, without a pinned file, every suite method) but ``method``: those that
    have the statistic on every setting, and those left out because they have none (or run on some
    settings only: a method's ``settings``)."""
    candidates = [m for m in (pinned.values if pinned else suite.params.methods) if m != method]
    everywhere = set(suite.params.settings)
    kept = [m for m in candidates if has_statistic(suite, pinned, m, statistic)
            and (set(pinned.values[m]) if pinned else set(suite.settings_of(m))) >= everywhere]
    return kept, [m for m in candidates if m not in kept]


def _value(records: Records, statistic: Statistic, run: str) -> float:
    value = statistic.compute(records)
    if value is None or not math.isfinite(value):
        raise BenchError(f"{run} has no finite {statistic.name}; choose another --statistic")
    return value


# ---------------------------------------------------------------- sensitivity: can the suite tell methods apart?

def _setting_order(pinned: PinnedFile) -> list[str]:
    """The pinned file's settings, in the order they first appear."""
    return list(dict.fromkeys(s for cells in pinned.values.values() for s in cells))


def comparable(pinned: PinnedFile, statistic: Statistic) -> dict[str, Values]:
    """The per-seed values of ``statistic`` of the pinned methods on the settings they share most. Each method has it
    for every seed on a set of settings; of those sets and their intersections, the one whose methods (two at least)
    fill the most (method, setting) cells wins, on a tie the one with more methods, then the one whose settings come
    first in the pinned file. Each method that has every setting of it counts, on those settings only; {} where no
    two methods share a setting. A suite whose methods run different columns (a paper's ablations, sweeps) is judged
    on its widest common ground."""
    order = _setting_order(pinned)
    having = {m: frozenset(s for s, cell in cells.items()
                           if all(statistic.name in e.values for e in cell.seeds.values()))
              for m, cells in pinned.values.items()}
    candidates = {h for h in having.values() if h}
    while new := {a & b for a in candidates for b in candidates if a & b} - candidates:
        candidates |= new

    def cover(settings: frozenset[str]) -> tuple[int, int, list[int]]:
        methods = sum(settings <= h for h in having.values())
        first = sorted(-order.index(s) for s in settings)  # higher for settings that come earlier
        return (methods * len(settings) if methods > 1 else 0), methods, first

    shared = max(candidates, key=cover, default=frozenset())
    if cover(shared)[0] == 0:
        return {}
    return {m: {(s, seed): e.values[statistic.name] for s in order if s in shared
                for seed, e in pinned.values[m][s].seeds.items()} for m, h in having.items() if shared <= h}


def sensitivity(pinned: PinnedFile, statistic: Statistic, values: dict[str, Values] | None = None) -> Sensitivity:
    """The suite's sensitivity for ``statistic`` over its pinned methods that share settings for it
    (:func:`comparable`, unless ``values`` gives them)."""
    values = comparable(pinned, statistic) if values is None else values
    if len(values) < 2:
        raise BenchError(f"suite {pinned.suite}: no two pinned methods share a setting for {statistic.name}")
    try:
        return paired_sensitivity(statistic.name, values)
    except ValueError as e:
        raise BenchError(f"suite {pinned.suite}: {e}; pin every method on the same seeds") from None


def sensitivity_rows(pinned: PinnedFile, statistics: list[Statistic],
                     named: bool) -> tuple[list[tuple[Statistic, Sensitivity]], list[str]]:
    """`bench sensitivity`'s rows, and the statistics left out because no two pinned methods share a setting for
    them; ``named`` (asked for by name): such a statistic is an error instead."""
    rows, left_out = [], []
    for statistic in statistics:
        values = comparable(pinned, statistic)
        if not named and len(values) < 2:
            left_out.append(statistic.name)
        else:
            rows.append((statistic, sensitivity(pinned, statistic, values)))
    if not rows:
        raise BenchError(f"suite {pinned.suite}: no statistic of the suite is pinned for two methods; name one with "
                         "--statistic")
    return rows, left_out


def narrowed(pinned: PinnedFile, statistic: Statistic) -> str | None:
    """A line naming what the sensitivity of ``statistic`` is judged on when that is not every pinned setting and
    method that has it (:func:`comparable`): the settings, and the methods left out for not having every one of
    them; None when nothing is left out, or nothing is compared."""
    values = comparable(pinned, statistic)
    if not values:
        return None
    order = _setting_order(pinned)
    used = [s for s in order if any(setting == s for v in values.values() for setting, _ in v)]
    others = [m for m, cells in pinned.values.items() if m not in values
              and any(statistic.name in e.values for c in cells.values() for e in c.seeds.values())]
    if not others and len(used) == len(order):
        return None
    return (f"`{statistic.name}`: {len(values)} methods on {', '.join(used)}"
            + (f"; left out, not on every one of these: {', '.join(others)}" if others else "") + ".")


def sensitivity_row(statistic: Statistic, r: Sensitivity) -> list[str]:
    """One statistic's cells of `bench sensitivity`'s table, spreads in accuracy points."""
    def pts(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:.2f}"

    seeds = seeds_label(r.seeds_for(TARGET_POINTS / 100), r.seeds) \
        if statistic.accuracy and math.isfinite(r.pair_noise) else "—"
    return [f"`{r.statistic}`", str(r.methods), str(r.pairs), pts(r.seed_spread), pts(r.method_spread),
            pts(r.pair_noise), pts(r.detectable), seeds, f"{r.separated} / {r.method_pairs}"]


SENSITIVITY_HEADER = ["statistic", "methods", "pairs", "seed spread", "method spread", "pair noise",
                      f"detectable (power {POWER:g})", f"seeds for {TARGET_POINTS:g} points (ran)",
                      f"method pairs separated (p < {ALPHA:g})"]


def sensitivity_markdown(suite: str, rows: list[tuple[Statistic, Sensitivity]]) -> str:
    return "\n\n".join([
        f"## Can suite `{suite}` tell methods apart?",
        "In accuracy points, from the pinned per-seed values, on the settings the pinned methods share most (the "
        "set covering the most (method, setting) cells). **seed spread**: the sample std over seeds within a "
        "(method, setting), pooled; **method spread**: the std of the methods' means within a setting, averaged "
        "over settings; **pair noise**: the std over seeds of the difference between two methods on the same "
        "setting and seed, pooled over method pairs and settings; **detectable**: the smallest mean difference "
        f"the two-sided paired t-test (the rule of the verdicts, bench/suites/verdicts.py) finds with power {POWER:g} "
        f"at {ALPHA:g} over the suite's (setting, seed) pairs, if the differences scatter normally with that pair "
        f"noise; **seeds for {TARGET_POINTS:g} points**, for an accuracy: how many seeds over the same settings "
        f"bring the detectable difference to {TARGET_POINTS:g} points (docs/verdicts.md) if the pair noise stays as "
        "measured, beside how many the pins have; **method pairs separated**: how many pairs of pinned methods "
        "that test separates on the pinned values (uncorrected).",
        markdown_table(SENSITIVITY_HEADER, [sensitivity_row(s, r) for s, r in rows])]) + "\n"


# ---------------------------------------------------------------- bench versus

@dataclass(frozen=True)
class Versus:
    suite: str
    method: str
    statistic: Statistic
    source: str  # where the baselines' values come from
    pairs: tuple[tuple[str, int], ...]
    new: tuple[float, ...]
    comparisons: list[Paired]
    skipped: tuple[str, ...] = ()  # suite methods without the statistic (e.g. Standalone: no global model)


def verified_partitions(suite: Suite, data_dir: Path | None) -> dict[tuple[str, int | None], str]:
    """Each setting's saved partition sha256, once it is verified to be the partition the setting's data,
    scheme and seed make (:mod:`bench.report.partition_check`); a one-line error for the first that is not."""
    checks = check_partitions(suite, suite.params.settings, data_dir, prepare=True)
    for check in checks:
        if check.saved is None and "absent" in check.why:
            raise BenchError(f"partition {check.folder} not found; fetch the suite's partitions with `dvc pull`, or "
                             f"write them with `bench suite partition --params {suite.params_file}`")
        if not check.verified:
            raise BenchError(check.line())
    return {suite.partition_key(check.setting, check.seed): str(check.saved) for check in checks}


def versus_requests(suite: Suite, method: str, out: Path, data_dir: Path | None,
                    partitions: dict[tuple[str, int | None], str]) -> list[RunRequest]:
    """The new method's runs on the suite's pinned partitions (``partitions``: each setting's verified
    sha256) and seeds that ``out`` lacks (a run whose records hold the same config and partition is reused)."""
    requests = []
    for setting in suite.params.settings:
        for seed in suite.params.suite.seeds:
            config = suite.config(method, setting, seed)
            run_dir = out / "runs" / setting / f"seed{seed}"
            record = read_run(run_dir)
            if isinstance(record, str) or record.metrics.get("config_sha256") != config.sha256 \
                    or record.provenance.get("partition_sha256") != partitions[suite.partition_key(setting, seed)]:
                requests.append(RunRequest(config, run_dir, data_dir, suite.partition_dir(setting, seed)))
    return requests


def compare_method(suite: Suite, method: str, out: Path, statistic: Statistic, baselines: list[str],
                   pinned: PinnedFile | None, skipped: list[str] | None = None) -> Versus:
    """The new method's runs in ``out`` against each baseline's pinned values (or, with ``pinned``
    None, the suite's runs), paired on (setting, seed)."""
    if statistic.reference is not None:
        raise BenchError(f"--statistic {statistic.name} compares with another method's run; bench versus compares "
                         "statistics of one run (e.g. final_local_acc, last3_clientmax_local_acc)")
    if not baselines:
        raise BenchError(f"{statistic.name} is {'not pinned' if pinned else 'in no run'} for any baseline"
                         f"{' (' + ', '.join(skipped) + ')' if skipped else ''}; choose a statistic the "
                         f"{'pinned file' if pinned else 'runs'} hold, e.g. final_global_acc")
    pairs = tuple((s, seed) for s in suite.params.settings for seed in suite.params.suite.seeds)
    new = []
    for setting, seed in pairs:
        record = read_run(out / "runs" / setting / f"seed{seed}")
        if isinstance(record, str):
            raise BenchError(f"{record}; run `bench versus` without --no-train to train it")
        new.append(_value(record.records, statistic, f"{method}/{setting}/seed{seed}"))
    base: dict[str, Values] = {}
    for baseline in baselines:
        values = pinned_values(pinned, baseline, statistic) if pinned else run_values(suite, baseline, statistic)
        if missing := [p for p in pairs if p not in values]:
            raise BenchError(f"{baseline} has no pinned value for {len(missing)} (setting, seed) pairs of the suite, "
                             f"e.g. {missing[0]}; re-pin the suite (`bench pin`) or drop that baseline")
        base[baseline] = values
    comparisons = compare_all(pairs, new, {b: [v[p] for p in pairs] for b, v in base.items()})
    return Versus(suite.name, method, statistic, "pinned" if pinned else "runs", pairs, tuple(new), comparisons,
                  tuple(skipped or ()))


def _pts(x: float | None, sign: bool = True) -> str:
    return "—" if x is None else f"{100 * x:+.2f}" if sign else f"{100 * x:.2f}"


def _p(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def versus_markdown(v: Versus, figure: str | None) -> str:
    settings = list(dict.fromkeys(s for s, _ in v.pairs))
    seeds = sorted({seed for _, seed in v.pairs})
    rows = [[c.baseline, str(len(c.differences)), _pts(c.mean),
             "—" if c.interval is None else f"[{_pts(c.interval[0])}, {_pts(c.interval[1])}]",
             f"{c.wins} / {c.ties} / {c.losses}", "—" if c.test is None else _p(c.test.p), _p(c.p_holm),
             _pts(c.detectable, sign=False), f"**{c.verdict}**"] for c in v.comparisons]
    per_setting = [[c.baseline] + [_pts(mean(d)) for d in c.by_setting().values()] for c in v.comparisons]
    parts = [f"# `{v.method}` versus the baselines of suite `{v.suite}`",
             f"Statistic `{v.statistic.name}`, in accuracy points; differences are {v.method} − baseline over "
             f"{len(v.pairs)} (setting, seed) pairs: settings {', '.join(settings)} × seeds "
             f"{', '.join(map(str, seeds))}, on the suite's pinned partitions (verified: their data, scheme and seed "
             "make them). Baselines: their "
             + ("pinned per-seed values (`reports/pinned/`), not re-trained." if v.source == "pinned"
                else "runs in the suite's results folder.")
             + f" Mean of {v.method}: {_pts(mean(v.new), sign=False)}.",
             "The rule of the paper reports' verdicts (bench/suites/verdicts.py): per baseline the paired t-test of "
             f"the differences, its {CONFIDENCE:.0%} t interval, Holm's correction across the baselines; **better** or "
             f"**worse** when the Holm-adjusted p < {ALPHA:g}, **inconclusive** otherwise, **not measured** when every "
             f"difference is zero. W/T/L: pairs where {v.method} is better / equal / worse. **Detectable**: the "
             f"smallest mean difference the test finds with power {POWER:g} over these pairs, given the spread of "
             "these differences — a difference below it is one this suite could not have told.",
             *([f"Not compared (no `{v.statistic.name}` on every setting): {', '.join(v.skipped)}."]
               if v.skipped else []),
             markdown_table(["baseline", "pairs", "mean diff", "95 % interval", "W / T / L", "p", "Holm p",
                             "detectable", "verdict"], rows),
             "## Mean difference per setting (over seeds)",
             markdown_table(["baseline", *settings], per_setting)]
    if figure:
        parts.append(f"![differences]({figure})")
    return "\n\n".join(parts) + "\n"


def versus_csv(v: Versus) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["baseline", "setting", "seed", "new", "difference"])
    for c in v.comparisons:
        writer.writerows([c.baseline, s, seed, repr(n), repr(d)] for (s, seed), n, d in zip(c.pairs, v.new, c.differences))
    return buf.getvalue()


def versus_figure(v: Versus):  # -> Figure
    """One panel per setting: per baseline the mean difference with its t interval, and each seed's."""
    from matplotlib.figure import Figure

    settings = list(dict.fromkeys(s for s, _ in v.pairs))
    fig = Figure(figsize=(2.2 + 0.45 * len(v.comparisons) * len(settings), 3.8), layout="constrained")
    axes = fig.subplots(1, len(settings), sharey=True, squeeze=False)[0]
    for ax, setting in zip(axes, settings):
        for x, c in enumerate(v.comparisons):
            d = 100 * np.array(c.by_setting()[setting])
            interval = paired_test(list(d)).interval if len(d) > 1 and d.any() else None
            low, high = interval if interval else (d.mean(), d.mean())
            ax.errorbar([x], [d.mean()], yerr=[[d.mean() - low], [high - d.mean()]], fmt="o", color="#1f77b4",
                        capsize=3)
            ax.scatter(np.full(len(d), x + 0.18), d, s=10, color="#7f7f7f", zorder=3)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(v.comparisons)), [c.baseline for c in v.comparisons], rotation=60, ha="right",
                      fontsize="small")
        ax.set_title(setting)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(f"{v.method} − baseline ({v.statistic.name}, points)")
    fig.suptitle(f"{v.suite}: mean over seeds with {CONFIDENCE:.0%} t interval; grey: each seed",
                 fontsize="medium")
    return fig


def write_versus(v: Versus, out: Path) -> list[Path]:
    fig = versus_figure(v)
    figure = atomic_write(out / "versus.png", lambda handle: fig.savefig(handle, format="png", dpi=110))
    return [write_text(out / "versus.csv", versus_csv(v)), figure,
            write_text(out / "versus.md", versus_markdown(v, figure.name))]


def log_versus(v: Versus, files: list[Path]) -> str:
    """Log the comparison as one MLflow run (experiment ``versus-<suite>``); return its id."""
    import mlflow

    from bench.tracking import init_mlflow, mlflow_uri, store_lock

    experiment = init_mlflow(f"versus-{v.suite}")
    client = mlflow.MlflowClient(mlflow_uri())
    with store_lock():
        run = client.create_run(experiment, run_name=f"{v.method}-{v.statistic.name}",
                                tags={"method": v.method, "suite": v.suite, "baselines_from": v.source})
        run_id = run.info.run_id
        client.log_param(run_id, "statistic", v.statistic.name)
        client.log_param(run_id, "pairs", len(v.pairs))
        client.log_metric(run_id, "mean_new", mean(v.new))
        for c in v.comparisons:
            metrics = {"mean_diff": c.mean, "wins": c.wins, "ties": c.ties, "losses": c.losses,
                       "ci_low": c.interval and c.interval[0], "ci_high": c.interval and c.interval[1],
                       "p": None if c.test is None else c.test.p, "p_holm": c.p_holm, "detectable": c.detectable}
            for name, value in metrics.items():
                if value is not None:
                    client.log_metric(run_id, f"{c.baseline}.{name}", float(value))
        for path in files:
            client.log_artifact(run_id, str(path))
        client.set_terminated(run_id)
    return run_id

