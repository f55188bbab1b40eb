"""A paper suite's report (``paper.md``), rendered from the paper's definition and module
(bench/suites/paper.py): each table cell beside the pinned and the paper's values, with ranks; the
paper module's extra sections; the proposed method's ranks; the paper's claims checked on our
results and on the paper's own tables.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.report.paired import Pair, sensitivity
from bench.report.paper_figures import DrawnFigure, run_curve
from bench.report.pinned import PinnedFile
from bench.report.runs import RunKey, RunRecord, statistic_value
from bench.suites import Suite
from bench.config import ExperimentConfig
from bench.suites.paper import TIME_RATIO, BandCell, Figure, Measure, Paper, PaperDefinition, ReportColumn, Results, \
    Section, Trace, band_cells
from bench.suites.mechanisms import MechanismCell, mechanism_cells, statuses
from bench.suites.statistics import Statistic, aggregate
from bench.suites.verdicts import ALPHA, POWER, TARGET_POINTS, detectable_difference, mean, sample_std, \
    seeds_label, seeds_to_detect

Cells = dict[tuple[str, str, str], tuple[float, float | None]]  # (method, column, measure) -> (mean, spread)


def table_rows(suite: Suite, column: ReportColumn) -> list[str]:
    """The rows of a report column: the suite's methods that the paper prints in the column's table, or
    in none of its tables (extra rows, e.g. a code-mode variant), and that run on its setting."""
    assert suite.paper is not None, "a paper's report needs the suite's paper"
    d = suite.paper.definition
    return [m for m in suite.params.methods if d.shown(column.table, m) and suite.runs_on(m, column.setting)]


SeedValues = dict[tuple[str, str, str], dict[tuple[str, int], float]]  # (method, column, measure) -> (setting, seed)
REFERENCE = "fedavg"  # per-round times are reported as ratios to this algorithm


def reference_method(suite: Suite) -> str | None:
    """The first method running the reference algorithm (a method's algorithm name defaults to its key)."""
    return next((m for m, entry in suite.params.methods.items() if entry.algorithm_name(m) == REFERENCE), None)


def seed_values(suite: Suite, runs: dict[RunKey, RunRecord],
                columns: list[ReportColumn]) -> tuple[SeedValues, SeedValues]:
    """Per (method, column, measure): the statistic of each seed's run, and for a run that never reached a
    rounds-to-target statistic's target (inf) the least its value can be (its rounds + 1); a cell some seed lacks
    (or that diverged) is left out. The per-seed time per round as a ratio to the reference method's on the same
    setting and seed is the measure :data:`TIME_RATIO`."""
    paper = suite.paper
    assert paper is not None
    seeds = suite.params.suite.seeds
    values: SeedValues = {}
    bounds: SeedValues = {}
    for column in columns:
        for name in paper.definition.tables[column.table].measures:
            statistic = column.statistics[name]
            for method in table_rows(suite, column):
                found = {(column.setting, seed): v for seed in seeds if (key := (method, column.setting, seed)) in runs
                         and (v := statistic_value(suite, runs, key, statistic)) is not None}
                if len(found) == len(seeds):
                    values[method, column.key, name] = found
                    bounds[method, column.key, name] = {
                        pair: runs[method, pair[0], pair[1]].metrics["rounds"] + 1.0
                        for pair, v in found.items() if math.isinf(v)}
    if (ref := reference_method(suite)) is not None:
        for column in columns:
            for method in suite.params.methods:
                keys = [((method, column.setting, seed), (ref, column.setting, seed)) for seed in seeds]
                if all(k in runs and r in runs for k, r in keys):
                    values[method, column.key, TIME_RATIO] = {
                        (column.setting, k[2]): runs[k].seconds_per_round / runs[r].seconds_per_round for k, r in keys}
    return values, bounds


def our_cells(suite: Suite, values: SeedValues) -> Cells:
    """Per (method, column, measure): the statistic over seeds, as the measure's mean and spread."""
    paper = suite.paper
    assert paper is not None
    columns = {c.key: c for c in paper.definition.columns_for(list(suite.params.settings))}
    return {(method, key, name): aggregate(list(by_seed.values()),
                                           paper.definition.tables[columns[key].table].measures[name].spread)
            for (method, key, name), by_seed in values.items() if name != TIME_RATIO}


def our_results(suite: Suite, columns: list[ReportColumn], cells: Cells, values: SeedValues, bounds: SeedValues,
                summary: dict[str, dict[str, dict]], runs: dict[RunKey, RunRecord]) -> Results:
    """Our means per cell with each seed's value (what the claims' tests read), per column the time per round as a
    ratio to FedAvg (the summary's, its per-seed ratios beside it), and whether each declared mechanism was active
    (bench/suites/mechanisms.py)."""
    assert suite.paper is not None
    results = Results(suite.paper.definition, list(suite.params.methods), columns,
                      {key: mean for key, (mean, _) in cells.items()}, values, bounds,
                      statuses(mechanism_cells(suite, runs)))
    for method, by_setting in summary.items():
        for column in columns:
            if (ratio := by_setting[column.setting].get("time_vs_fedavg")) is not None:
                results.values[method, column.key, TIME_RATIO] = ratio
    return results


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or math.isnan(value):
        return "—"
    return "not reached" if math.isinf(value) else f"{value:.{digits}f}"


def _scaled(value: float | None, measure: Measure) -> float | None:
    return None if value is None else value * measure.scale


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def _section(section: Section) -> str:
    return "\n\n".join([f"## {section.title}", section.note, markdown_table(section.header, section.rows)])


def _measures_line(measures: dict[str, Measure], statistics: dict[str, Statistic]) -> str:
    """What each measure is: its statistic (bench/suites/statistics.py), scale and spread over seeds."""
    return "Measures: " + "; ".join(
        f"**{measure.label}** `{statistics[name].name}`" + ("†" if statistics[name].secondary else "")
        + (f" ×{measure.scale:g}" if measure.scale != 1 else "")
        + (" (± max absolute deviation over seeds)" if measure.spread == "max_abs_dev" else "")
        for name, measure in measures.items()) + "."


def paper_results(suite: Suite, runs: dict[RunKey, RunRecord],
                  summary: dict[str, dict[str, dict]]) -> tuple[list[ReportColumn], Cells, Results]:
    """The report columns of the suite's settings, our cells (mean and spread) and our results."""
    assert suite.paper is not None, "a paper report needs a suite with a paper"
    columns = suite.paper.definition.columns_for(list(suite.params.settings))
    values, bounds = seed_values(suite, runs, columns)
    cells = our_cells(suite, values)
    results = our_results(suite, columns, cells, values, bounds, summary, runs)
    results.derived = suite.paper.derive(results, run_trace(suite, runs))
    return columns, cells, results


def run_trace(suite: Suite, runs: dict[RunKey, RunRecord]) -> Trace:
    """A finished run's points as a figure of the suite's paper draws them (bench/suites/paper.py: ``Trace``)."""
    assert suite.paper is not None
    figures = suite.paper.definition.figures

    def trace(figure: str, method: str, setting: str, seed: int) -> tuple[list[float], list[float]] | None:
        key = (method, setting, seed)
        if key not in runs:
            return None
        x, y = run_curve(suite, figures[figure], key, runs[key])
        return [float(v) for v in x], [float(v) for v in y]

    return trace


def paper_markdown(suite: Suite, runs: dict[RunKey, RunRecord], summary: dict[str, dict[str, dict]],
                   pinned: PinnedFile | None, provenance: str = "", figures: list[DrawnFigure] | None = None) -> str:
    """The paper section of the report (``paper.md``); ``provenance``: the commits of the runs and of the
    pinned file (provenance.py), placed before the tables; ``figures``: the paper's figures (images relative
    to the report), after the tables."""
    paper = suite.paper
    assert paper is not None, "a paper report needs a suite with a paper"
    d = paper.definition
    columns, cells, ours = paper_results(suite, runs, summary)
    printed = paper.printed()
    seeds = suite.params.suite.seeds
    first = suite.config(next(iter(suite.params.methods)), columns[0].setting, seeds[0]) if columns else None
    dataset = first.dataset.name if first else "?"
    bands = {(c.method, c.column.key, c.measure): c for c in band_cells(d, ours)}
    unranked = [d.label(m) for m in suite.params.methods if m not in d.methods]
    band = d.acceptance
    band_note = "" if band is None else (
        f" with the acceptance band (✓: within ±{band.tight:g}, ~: within ±{band.within:g}, ✗: outside)"
        if band.tight is not None else f" with the acceptance band (✓: within ±{band.within:g}, ✗: outside)")
    parts = [f"# {d.title} — paper tables, suite `{suite.name}`",
             *([protocol_line(suite.params.profile, first)] if first else []),
             (f"Each cell: ours (mean ± std over seeds {seeds}), the pinned mean, the paper's value ({d.source}) and "
              f"the difference Δ{band_note}. Ranks: among {d.ranked_among}, ours and (in "
              "brackets) the paper's."
              if ours.by_value else
              f"This profile runs the paper's methods and protocol on `{dataset}` instead of the paper's datasets, "
              f"so its numbers are not comparable with the paper's: each cell shows ours (mean ± std over seeds "
              f"{seeds}) and the pinned mean, and the paper's values ({d.source}) of the columns it stands for "
              f"({' / '.join(d.groups.values()) or 'in order'}) for orientation; the ranks (ours; paper per column "
              f"it stands for, among {d.ranked_among}) and the claims below are the comparison.")
             + (f" Not ranked (not rows of the paper's tables): {', '.join(unranked)}." if unranked else ""),
             "†: secondary statistic (optimistic: it selects on the test set). ‡: a printed value the reading notes "
             "doubt (low confidence).",
             *([provenance] if provenance else [])]

    def pinned_mean(method: str, column: ReportColumn, measure: str) -> float | None:
        cell = pinned.values.get(method, {}).get(column.setting) if pinned else None
        return cell.mean.get(column.statistics[measure].name) if cell else None

    for name, table in d.tables.items():
        cols = [c for c in columns if c.table == name]
        if not cols:
            continue
        table_statistics = {m: measure.statistic for m, measure in table.measures.items()}
        parts += [f"## {table.title}"]
        if any(c.statistics == table_statistics for c in cols):  # else each column states its own
            parts.append(_measures_line(table.measures, table_statistics))
        for column in cols:
            rows = []
            for method in table_rows(suite, column):
                if method not in d.methods and not any((method, column.key, m) in cells for m in table.measures):
                    continue  # an extra row without these statistics (e.g. FedAvg's global model only)
                row = [d.label(method)]
                for m, measure in table.measures.items():
                    mean, spread = cells.get((method, column.key, m), (None, None))
                    values = [d.value(method, key, m) for key in column.stands_for]
                    row += [_fmt(_scaled(mean, measure), measure.digits)
                            + (f" ± {_fmt(_scaled(spread, measure), measure.digits)}" if spread is not None else ""),
                            _fmt(_scaled(pinned_mean(method, column, m), measure), measure.digits),
                            " / ".join(_fmt(v, measure.digits) + ("‡" if (method, key, m) in d.low_confidence else "")
                                       for key, v in zip(column.stands_for, values))]
                    if ours.by_value:
                        delta = None if mean is None or values[0] is None else mean * measure.scale - values[0]
                        checked = bands.get((method, column.key, m))
                        row.append(_fmt(delta, measure.digits) + ("" if checked is None or band is None else
                                                                   " " + MARKS[checked.grade(band)]))
                ranks = [f"{ours.rank(method, column, m) or '—'} ("
                         + "/".join(str(printed.rank(method, printed.column(key), m) or "—")
                                    for key in column.stands_for) + ")"
                         for m, measure in table.measures.items() if measure.ranked]
                rows.append(row + ranks)
            header = ["method"]
            for measure in table.measures.values():
                header += [f"{measure.label} ours", "pinned", "paper"] + (["Δ"] if ours.by_value else [])
            header += [f"rank {measure.label} (paper)" for measure in table.measures.values() if measure.ranked]
            parts.append(f"### {column.label}")
            if column.statistics != table_statistics:
                parts.append(_measures_line(table.measures, column.statistics))
            parts.append(markdown_table(header, rows))

    for figure in figures or []:
        parts += [f"## {figure.title}", *([figure.caption] if figure.caption else []),
                  f"![{figure.name}]({figure.image})",
                  *([markdown_table(list(figure.header), [list(r) for r in figure.rows])] if figure.rows else [])]
    parts += [_section(s) for s in paper.sections(suite, ours)]
    if band is not None:
        parts += [acceptance_section(d, ours, list(bands.values()))]
    parts += [ranking_section(paper, ours, printed)]
    parts += [detection_section(d, ours), headline_section(suite, ours), mechanism_section(suite, runs),
              claims_section(paper, ours, printed)]
    return "\n\n".join(parts) + "\n"


MARKS = {"tight": "✓", "within": "~", "outside": "✗"}


def detection_section(d: PaperDefinition, ours: Results) -> str:
    """What this profile can detect, per table and statistic: the paired sensitivity of the table's rows over the
    (setting, seed) pairs of its columns (bench.report.paired.sensitivity, what `bench sensitivity` prints), in the
    measure's units. Rows with a value that is not finite (a target never reached) are left out of the noise."""
    rows = []
    for name, table in d.tables.items():
        for measure_name, measure in table.measures.items():
            for statistic, values in table_values(d, ours, name, measure_name).items():
                widest = max(len(v) for v in values.values())
                kept = {m: v for m, v in values.items() if len(v) == widest and all(map(math.isfinite, v.values()))}
                pairs = sorted(next(iter(values.values())))
                label = [table.title, measure.label, f"`{statistic.name}`", str(len({s for _, s in pairs}))]
                if len(kept) < 2:
                    rows.append(label + [str(len(kept)), str(widest), "—", "—"])
                    continue
                found = sensitivity(statistic.name, kept)
                rows.append(label + [str(found.methods), str(found.pairs),
                                     _fmt(measure.scale * found.pair_noise, measure.digits),
                                     _fmt(None if found.detectable is None else measure.scale * found.detectable,
                                          measure.digits)])
    return "\n\n".join([
        "## What this profile can detect",
        "Per table and statistic, over the table's rows that have every (setting, seed) pair of its columns, in the "
        "measure's units: **pair noise**, the sample std over seeds of the difference between two methods on the "
        "same setting and seed, pooled over method pairs and settings; **detectable**, the smallest mean difference "
        f"the paired t-test of the verdicts finds with power {POWER:g} at α = {ALPHA:g} over these pairs with that "
        "noise (docs/verdicts.md; as `bench sensitivity` computes it). A claimed difference below it is one this "
        "profile could not have told apart from the seed noise. Rows whose value is not finite (a target never "
        "reached) are left out.",
        markdown_table(["table", "measure", "statistic", "seeds", "methods", "pairs", "pair noise",
                        f"detectable (power {POWER:g})"], rows)])


@dataclass(frozen=True)
class Headline:
    """The proposed method against its strongest rival on one statistic, paired on the (setting, seed) pairs both
    have (how many, over how many settings and seeds): the mean difference (proposed − rival), the sample std of the
    per-pair differences (over every pair, not pooled within settings as the table above pools it; None for one
    pair) and the detectable difference."""

    rival: str
    pairs: int
    settings: int
    seeds: int
    difference: float
    spread: float | None
    detectable: float | None

    def seeds_for(self, shift: float) -> int | None:
        """The seeds, over these settings, with which this spread lets the paired t-test detect ``shift`` with power
        ``POWER`` (:func:`seeds_to_detect`; None: beyond its count, or no spread measured): where the detectable
        difference reaches ``shift`` if the spread stays as measured. The spread holds the difference's variation
        between settings too, which more seeds do not shrink, so over several settings the count errs high."""
        return None if self.spread is None else seeds_to_detect(shift, self.spread, self.settings)


def headline(mine: Mapping[Pair, float], rivals: Mapping[str, Mapping[Pair, float]], higher: bool) -> Headline | None:
    """The proposed method's values ``mine`` against the rival with the best mean over the pairs both have (in the
    statistic's direction; :func:`strongest`); pairs with a value that is not finite on either side are left out.
    None: no rival shares a pair."""
    kept = {p: v for p, v in mine.items() if math.isfinite(v)}
    shared = {m: [p for p in kept if p in v and math.isfinite(v[p])] for m, v in rivals.items()}
    scored = {m: math.fsum(rivals[m][p] for p in both) / len(both) for m, both in shared.items() if both}
    if not scored:
        return None
    rival = strongest(scored, higher)
    pairs = sorted(shared[rival])
    differences = [kept[p] - rivals[rival][p] for p in pairs]
    spread = sample_std(differences) if len(differences) > 1 else None
    return Headline(rival, len(pairs), len({setting for setting, _ in pairs}), len({seed for _, seed in pairs}),
                    mean(differences), spread, None if spread is None else detectable_difference(spread, len(pairs)))


def strongest(means: Mapping[str, float], higher: bool) -> str:
    """The method with the best mean (the highest, or the lowest where fewer is better); the first on a tie."""
    return max(means, key=lambda m: means[m] if higher else -means[m])


def headline_section(suite: Suite, ours: Results) -> str:
    """The headline comparison (:func:`headline`): in each table that prints the proposed method, per ranked measure
    and statistic, the proposed method against its strongest rival there, among the table's rows that do not run the
    proposed algorithm. A run that never reached a rounds-to-target statistic's target counts as its rounds + 1, the
    least its value can be (as the claims count it). The pooled table above mixes every pair of rows; a paper's
    headline is this one pair."""
    assert suite.paper is not None, "a paper's report needs the suite's paper"
    d = suite.paper.definition
    algorithm = _algorithm(suite, d.proposed)
    rows = []
    for name, table in d.tables.items():
        if d.proposed not in d.rows(name):
            continue
        for measure_name, measure in table.measures.items():
            if not measure.ranked:
                continue
            for statistic, values in table_values(d, ours, name, measure_name, bounded=True).items():
                mine = values.pop(d.proposed, {})
                found = headline({p: measure.scale * v for p, v in mine.items()},
                                 {m: {p: measure.scale * v for p, v in vs.items()} for m, vs in values.items()
                                  if _algorithm(suite, m) != algorithm},
                                 statistic.higher_is_better)
                if found is not None:
                    rows.append([table.title, measure.label, f"`{statistic.name}`",
                                 f"{d.label(d.proposed)} vs {d.label(found.rival)}", str(found.pairs),
                                 f"{found.difference:+.{measure.digits}f}", _fmt(found.spread, measure.digits),
                                 _fmt(found.detectable, measure.digits), _seeds_for_target(found, statistic, measure)])
    return "\n\n".join([
        "## The headline comparison",
        f"In each table that prints {d.label(d.proposed)}, per ranked measure: {d.label(d.proposed)} against its "
        "strongest rival there (the other row, not one that runs the same algorithm, with the best mean of ours over "
        "the (setting, seed) pairs both have), paired on those pairs: the mean **difference** (ours − rival, in the "
        "measure's units; a rounds-to-target measure is better lower), the **spread** of the per-pair differences "
        "(their sample std over every pair, where the table above pools it within settings) and the smallest mean "
        f"difference the paired t-test detects with power {POWER:g} at α = {ALPHA:g} with that spread over these "
        "pairs. A run that never reached a rounds-to-target statistic's target counts as its rounds + 1, the least "
        "its value can be; a pair with a value that is still not finite is left out. **Seeds for "
        f"{TARGET_POINTS:g} points**, for an accuracy: how many seeds over the same settings bring the detectable "
        f"difference to {TARGET_POINTS:g} accuracy points (the proxies' target, docs/verdicts.md) if the spread stays "
        "as measured, beside how many ran; over several settings the spread includes how the difference varies "
        "between them, which more seeds do not shrink, so the count errs high.",
        markdown_table(["table", "measure", "statistic", "comparison", "pairs", "difference", "spread",
                        f"detectable (power {POWER:g})", f"seeds for {TARGET_POINTS:g} points (ran)"], rows) if rows else
        f"No table has per-seed values of {d.label(d.proposed)} and a rival."])


def _seeds_for_target(found: Headline, statistic: Statistic, measure: Measure) -> str:
    """The headline's seeds for ``TARGET_POINTS`` accuracy points (its spread is in the measure's printed units:
    ``measure.scale`` × the fraction, and a point is a hundredth of it) and, in brackets, the seeds it ran; "—" for a
    statistic that is not an accuracy or a headline over one pair."""
    if not statistic.accuracy or found.spread is None:
        return "—"
    return seeds_label(found.seeds_for(TARGET_POINTS / 100 * measure.scale), found.seeds)


def table_values(d: PaperDefinition, ours: Results, table: str, measure: str,
                 bounded: bool = False) -> dict[Statistic, dict[str, dict[Pair, float]]]:
    """Per statistic of the table's columns for ``measure``, each of its rows' value of ours on every (setting, seed)
    pair of those columns; ``bounded``: a run that never reached a rounds-to-target statistic's target (inf) counts
    as its bound, the least its value can be (:attr:`Results.bounds`)."""
    found: dict[Statistic, dict[str, dict[Pair, float]]] = {}
    for column in ours.table(table):
        for method in d.rows(table):
            if (seeds := ours.seeds.get(key := (method, column.key, measure))) is not None:
                least = ours.bounds.get(key, {}) if bounded else {}
                found.setdefault(column.statistics[measure], {}).setdefault(method, {}).update(
                    {p: least.get(p, v) if math.isinf(v) else v for p, v in seeds.items()})
    return found


def _algorithm(suite: Suite, method: str) -> str:
    """The algorithm a row runs (a row the suite does not run: its key)."""
    entry = suite.params.methods.get(method)
    return method if entry is None else entry.algorithm_name(method)


def mechanism_section(suite: Suite, runs: dict[RunKey, RunRecord]) -> str:
    """Is the mechanism active on this profile? Per method, setting and declared mechanism, each seed's mean
    diagnostic over its rounds beside its inert value, and the status (bench/suites/mechanisms.py)."""
    assert suite.paper is not None, "a paper's report needs the suite's paper"
    d = suite.paper.definition
    cells = mechanism_cells(suite, runs)
    rows = [[d.label(c.method), c.setting, c.mechanism.name, f"`{c.mechanism.rule}`",
             "; ".join(f"{v:.3g} ({c.inert[seed]:.3g})" for seed, v in sorted(c.values.items())) or "—",
             f"**{c.status}**" if c.status in ("inert", "mixed") else c.status] for c in cells]
    return "\n\n".join([
        "## Is the mechanism active on this profile?",
        "Each mechanism a method's paper claims, as the method declares it (`mechanisms()` in its file under "
        "bench/algorithms/): per seed, the mean over the run's rounds of its diagnostic and, in brackets, the value "
        "the diagnostic has when the mechanism does nothing (chance, uniform weights); **active** when beyond the "
        "declared margin on every seed, **inert** on none, **mixed** otherwise, not recorded for runs trained before "
        "the method recorded its diagnostic (no claim is then marked not exercised). A claim resting on an inert "
        "mechanism reads *not exercised*."
        + ("" if cells else " No method of this suite declares a mechanism."),
        *([markdown_table(["method", "setting", "mechanism", "active when", "per seed: diagnostic (inert)",
                           "status"], rows)] if rows else []),
        *beside_table(d, cells)])


def beside_table(d: PaperDefinition, cells: list[MechanismCell]) -> list[str]:
    """The records a mechanism names to show why its diagnostic stands where it does (``Mechanism.beside``): per
    method, setting and record, each seed's mean over the run's rounds; nothing when no cell has one."""
    rows = [[d.label(c.method), c.setting, c.mechanism.name, f"`{name}`",
             "; ".join(f"{seed}: {v:.3g}" for seed, v in sorted(means.items()))]
            for c in cells for name, means in c.beside.items()]
    return ["What the runs recorded beside those diagnostics (each mechanism names these records in its declaration, "
            "because they show why its diagnostic stands where it does): per seed, the mean over the run's rounds.",
            markdown_table(["method", "setting", "mechanism", "record", "seed: mean"], rows)] if rows else []


def claims_section(paper: Paper, ours: Results, printed: Results) -> str:
    """Each claim judged on the paper's printed tables (by their values) and on ours (by the rule of
    bench/suites/verdicts.py, docs/verdicts.md): the verdict, the deciding comparison's effect with its 95 % interval
    and test, and the counts."""
    def shown(verdict: str) -> str:
        return f"**{verdict}**" if verdict in ("supported", "contradicted", "holds", "fails") else verdict

    rows = []
    for o, p in zip(paper.claims(ours), paper.claims(printed)):
        rows.append([o.text, f"{shown(p.verdict)} ({p.evidence})", shown(o.verdict),
                     "—" if o.deciding is None else o.deciding.describe(), o.evidence])
    return "\n\n".join([
        "## The paper's claims",
        "Each claim judged on the paper's own tables (by their printed values: they have no seeds) and on ours, by "
        "the rule of docs/verdicts.md: each comparison is a paired t-test over the (setting, seed) pairs both sides "
        f"share (Welch's t-test across settings), Holm-corrected over the claim's comparisons at α = {ALPHA:g}; "
        "**supported** when enough comparisons hold, **contradicted** when too many fail for that, **inconclusive** "
        "when the seeds cannot tell, **not measured** for exact ties (a target nobody reaches) or cells we lack, "
        "**not exercised** when the mechanism the claim rests on was inert in the runs (the mechanism table above). "
        "The comparison shown is the one deciding the verdict (the weakest of those a supported claim needs, the "
        "strongest against a contradicted one): effect in the measure's units (claim's side positive), its 95 % "
        "interval, the test and its p-value (Holm-adjusted where the claim has several comparisons). An analogue "
        "column standing for several paper columns counts once.",
        markdown_table(["claim", "paper", "ours", "deciding comparison (effect [95 % interval]; test)", "ours: counts"],
                       rows)])


def protocol_line(profile: str | None, config: ExperimentConfig) -> str:
    """Which profile and protocol produced the runs, read from a run's config (methods may override it)."""
    t = config.training
    schedule = ("constant" if t.lr_decay.every is None
                else f"×{t.lr_decay.factor:g} every {t.lr_decay.every} rounds")
    length = f"{t.local_epochs} local epochs" if t.local_steps is None else f"{t.local_steps} local steps"
    return (f"Profile `{profile or 'none (the params file top level)'}`. Protocol (from the runs' configs): "
            f"{t.rounds} rounds, {length} of batch {t.batch_size}{' (drop_last)' if t.drop_last else ''}, "
            f"{t.optimizer.name} lr {t.optimizer.lr:g} ({schedule}), gradient clipping "
            f"{'none' if t.grad_clip is None else f'at norm {t.grad_clip:g}'}, device {config.device}.")


def acceptance_section(d: PaperDefinition, ours: Results, cells: list[BandCell]) -> str:
    """Per cell of the paper's own columns, whether ours lies within the acceptance band; the count and a
    pass/fail line (pass: every checked cell within the band). Where the columns are analogues (a
    scaled-down profile), the check does not apply and the section says so."""
    band = d.acceptance
    assert band is not None
    title = f"## Acceptance band ({band.source})"
    if not ours.by_value:
        return "\n\n".join([title, "The band check does not apply: this profile's columns are analogues of the "
                              "paper's, on other data, so their numbers are not comparable with the printed ones. "
                              "It applies to a profile that runs the paper's own columns."])
    grades = [c.grade(band) for c in cells]
    inside, tight = sum(g != "outside" for g in grades), sum(g == "tight" for g in grades)
    verdict = "**pass**" if cells and inside == len(cells) else "**fail**" if cells else "not measured"
    outside = []
    for cell, grade in zip(cells, grades):
        measure = d.tables[cell.column.table].measures[cell.measure]
        if grade == "outside":
            outside.append([d.label(cell.method), cell.column.label, measure.label,
                            *(_fmt(v, measure.digits) for v in (cell.ours, cell.printed, cell.delta))])
    lines = [title,
             f"{verdict}: {inside} of {len(cells)} cells within "
             + (f"their band (±{band.within:g} unless named below)" if band.overrides else f"±{band.within:g}")
             + " of the printed value"
             + (f" ({tight} within ±{band.tight:g})" if band.tight is not None else "")
             + (f"; bands of their own: {', '.join(f'{k} ±{v:g}' for k, v in band.overrides.items())}; pass needs "
                "every cell within its band." if band.overrides else f"; pass needs every cell within ±{band.within:g}.")
             + " Checked: the measures "
             f"{', '.join(band.measures)} of the paper's {len(d.methods)} methods in the paper's columns this suite "
             "runs, low-confidence printed values (‡) left out."]
    if outside:
        lines.append(markdown_table(["method", "column", "measure", "ours", "paper", "Δ"], outside))
    return "\n\n".join(lines)


def ranking_section(paper: Paper, ours: Results, printed: Results) -> str:
    """The proposed method's rank among the paper's methods in every cell, ours beside the paper's."""
    d = paper.definition
    focus = d.proposed
    rows, mine, theirs = [], [], []
    for column in ours.columns:
        if focus not in d.rows(column.table):
            continue
        for m, measure in d.tables[column.table].measures.items():
            if not measure.ranked:
                continue
            rank = ours.rank(focus, column, m)
            printed_ranks = [r for key in column.stands_for if (r := printed.rank(focus, printed.column(key), m))]
            mine += [rank] if rank else []
            theirs += printed_ranks
            rows.append([column.label, measure.label, str(rank or "—"), " / ".join(map(str, printed_ranks)) or "—"])
    mean = lambda ranks: f"{sum(ranks) / len(ranks):.1f}" if ranks else "—"  # noqa: E731
    return "\n\n".join([f"## {d.label(focus)}'s rank among {d.ranked_among}",
                        f"Mean rank: ours {mean(mine)}, the paper's {mean(theirs)} (1 = best; the paper's ranks are "
                        "those of the columns each of ours stands for).",
                        markdown_table(["column", "measure", "ours", "paper"], rows)])
