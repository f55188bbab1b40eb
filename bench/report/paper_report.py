"""A paper suite's report (``paper.md``), rendered from the paper's definition and module
(bench/suites/paper.py): each table cell beside the pinned and the paper's values, with ranks; the
paper module's extra sections; the proposed method's ranks; the paper's claims checked on our
results and on the paper's own tables.
"""
from __future__ import annotations

import math
from pathlib import Path

from bench.report.paper_figures import DrawnFigure
from bench.report.pinned import PinnedFile
from bench.report.runs import RunKey, RunRecord, statistic_value
from bench.suites import Suite
from bench.config import ExperimentConfig
from bench.suites.paper import TIME_RATIO, BandCell, Figure, Measure, Paper, PaperDefinition, ReportColumn, Results, \
    Section, band_cells
from bench.suites.statistics import Statistic, aggregate

Cells = dict[tuple[str, str, str], tuple[float, float | None]]  # (method, column, measure) -> (mean, spread)


def table_rows(suite: Suite, column: ReportColumn) -> list[str]:
    """The rows of a report column: the suite's methods that the paper prints in the column's table, or
    in none of its tables (extra rows, e.g. a code-mode variant), and that run on its setting."""
    assert suite.paper is not None, "a paper's report needs the suite's paper"
    d = suite.paper.definition
    return [m for m in suite.params.methods if d.shown(column.table, m) and suite.runs_on(m, column.setting)]


def our_cells(suite: Suite, runs: dict[RunKey, RunRecord], columns: list[ReportColumn]) -> Cells:
    """Per (method, column, measure): the statistic over seeds, as the measure's mean and spread; a
    cell some seed lacks (or that diverged) is left out."""
    paper = suite.paper
    assert paper is not None
    out: Cells = {}
    for column in columns:
        for name, measure in paper.definition.tables[column.table].measures.items():
            statistic = column.statistics[name]
            for method in table_rows(suite, column):
                keys = [(method, column.setting, seed) for seed in suite.params.suite.seeds]
                values = [v for key in keys if key in runs
                          and (v := statistic_value(suite, runs, key, statistic)) is not None]
                if len(values) == len(suite.params.suite.seeds):
                    out[method, column.key, name] = aggregate(values, measure.spread)
    return out


def our_results(suite: Suite, columns: list[ReportColumn], cells: Cells,
                summary: dict[str, dict[str, dict]]) -> Results:
    """Our means per cell, and per column the time per round as a ratio to FedAvg (the summary's)."""
    assert suite.paper is not None
    results = Results(suite.paper.definition, list(suite.params.methods), columns,
                      {key: mean for key, (mean, _) in cells.items()})
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
    cells = our_cells(suite, runs, columns)
    return columns, cells, our_results(suite, columns, cells, summary)


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
    verdict = {True: "**holds**", False: "**fails**", None: "not measured"}
    parts += ["## The paper's claims",
              "Each claim checked on our results and on the paper's own tables.",
              markdown_table(["claim", "paper", "ours"],
                     [[o.text, f"{verdict[p.holds]} ({p.evidence})", f"{verdict[o.holds]} ({o.evidence})"]
                      for o, p in zip(paper.claims(ours), paper.claims(printed))])]
    return "\n\n".join(parts) + "\n"


MARKS = {"tight": "✓", "within": "~", "outside": "✗"}


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
