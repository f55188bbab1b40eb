"""A paper's tables as data, and what its plug-in adds in code.

A paper is a plug-in (:mod:`bench.suites.plugins`): in this repository a folder ``pipelines/<paper>/`` whose
``paper.yaml`` is its :class:`PaperDefinition` and whose ``paper.py`` builds its :class:`Paper` and registers it.

:class:`PaperDefinition` holds every table the suite
reproduces: its measures (each a named statistic, bench/suites/statistics.py), its columns (each
measured on one suite setting) and the paper's printed values, transcribed as printed
(:class:`Block`). So every cell names (method, setting, metric, statistic) and carries the printed
value (None where the paper prints none). ``analogues`` are the columns of scaled-down profiles:
each stands for paper columns and is compared with them by rank and by the paper's claims, not by
value. ``acceptance`` is the band a cell of the paper's own columns must lie in around the printed
value (:func:`band_cells`). Ranks are always among the paper's rows (``methods``): a suite's other
methods (e.g. a code-mode variant) are shown but unranked.

:class:`Paper` is what the plug-in provides: the definition, the papers' (model, dataset) configurations
with the parameter counts it prints (``bench models``), and hooks the report calls: the paper's claims as
functions over :class:`Results` (ours, or the paper's own tables), extra report sections (e.g. FedHKD's
Params and Time columns), figures computed from the results (:meth:`Paper.figures`) and figures of other
kinds it draws itself (:meth:`Paper.own_figures`). The report renders any paper from these.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from bench.config import ExperimentConfig, describe_validation, read_yaml_mapping
from bench.errors import BenchError
from bench.models.paper_configs import PaperConfig
from bench.suites.statistics import Records, Statistic


class SuiteView(Protocol):
    """What a paper's hooks may ask of the suite being reported (:class:`bench.suites.Suite` is one):
    its name, methods (the rows), settings and seeds, which method runs on which setting, the config of any
    of its runs and of any run of its ``paper`` profile, a setting's partition (its config and folder), and
    the seconds per round its timing file records (``time_of`` budgets)."""

    @property
    def name(self) -> str: ...

    @property
    def methods(self) -> list[str]: ...

    @property
    def settings(self) -> list[str]: ...

    @property
    def seeds(self) -> list[int]: ...

    def runs_on(self, method: str, setting: str) -> bool: ...

    def config(self, method: str, setting: str, seed: int, timed: bool = True) -> ExperimentConfig: ...

    def paper_config(self, method: str, setting: str, seed: int) -> ExperimentConfig: ...

    def partition_config(self, setting: str) -> ExperimentConfig: ...

    def partition_dir(self, setting: str) -> Path: ...

    def round_seconds(self, setting: str, methods: list[str]) -> dict[str, float]: ...


class FinishedRun(Protocol):
    """What a paper's own figures may read of one finished run (:class:`bench.report.runs.RunRecord` is one):
    its folder (e.g. a saved ``model.pt``), its records and its training time per round."""

    @property
    def run_dir(self) -> Path: ...

    @property
    def records(self) -> Records: ...

    @property
    def seconds_per_round(self) -> float: ...


RunKey = tuple[str, str, int]  # (method, setting, seed)

TIME_RATIO = "time_ratio"  # a measure every Results may hold: training time per round / FedAvg's
CellKey = tuple[str, str, str]  # (method, column key, measure)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Measure(_Strict):
    """A quantity a table prints for every (method, column), e.g. FedHKD's local accuracy."""

    label: str
    statistic: Statistic
    spread: Literal["std", "max_abs_dev"] = Field("std", description="over seeds, as the paper reports it")
    scale: float = Field(1.0, gt=0, description="printed value = ours × scale (100 for a paper printing %)")
    digits: int = Field(4, ge=0, description="decimals shown")
    ranked: bool = Field(True, description="methods are ranked on it (false: a spread, e.g. FedAL's ± over clients)")


class Column(_Strict):
    """A column of the paper's table, measured on ``setting`` (default: the column's key)."""

    label: str
    setting: str | None = None
    group: str | None = Field(None, description="a key of the definition's groups, e.g. the dataset")
    statistic: dict[str, Any] = Field(default_factory=dict, description="overrides of every measure's "
                                      "statistic in this column, e.g. {target: 0.85}")


class Analogue(_Strict):
    """A column of a scaled-down profile, measured on ``setting`` (default: its key), standing for
    paper columns of one table."""

    label: str
    setting: str | None = None
    stands_for: list[str] = Field(min_length=1)
    statistic: dict[str, Any] = Field(default_factory=dict)


class Block(_Strict):
    """A contiguous part of a printed table, transcribed as printed: per method, the values of
    ``columns`` × ``measures`` (measure-major), then those of ``extra`` (printed columns that are
    not run statistics, e.g. FedHKD's Params and Time), which belong to ``group``."""

    group: str | None = None
    columns: list[str] = Field(min_length=1)
    measures: list[str] = Field(min_length=1)
    extra: list[str] = Field(default_factory=list)
    rows: dict[str, list[float | None]] = Field(min_length=1)


class Acceptance(_Strict):
    """The acceptance band of the paper's own columns: a cell passes when |ours − printed| ≤ ``within``
    (in printed units); the cells within ``tight`` are counted too (e.g. pipelines/fedhkd/NOTES.md §10 (a):
    ±3–5 points). Low-confidence cells are left out."""

    source: str = Field(description="where the band is stated")
    measures: list[str] = Field(min_length=1, description="the measures checked (keys of the tables' measures)")
    groups: list[str] | None = Field(None, description="the column groups checked (e.g. the datasets the band is "
                                                       "stated for); None: every column")
    within: float = Field(gt=0)
    tight: float | None = Field(None, gt=0)
    overrides: dict[str, float] = Field(default_factory=dict, description=(
        "a band of its own for '<measure>' or '<measure>@<column group>' (e.g. pipelines/fedakd/NOTES.md §8: CF ±15, "
        "CIFAR-10 accuracy ±3); the most specific wins"))

    @model_validator(mode="after")
    def _order(self) -> Acceptance:
        if self.tight is not None and self.tight > self.within:
            raise ValueError(f"acceptance.tight ({self.tight}) is wider than within ({self.within})")
        return self

    def band(self, measure: str, group: str | None = None) -> float:
        """The half-width of the band of a cell of ``measure`` in a column of ``group``."""
        return self.overrides.get(f"{measure}@{group}", self.overrides.get(measure, self.within))

    def grade(self, delta: float, within: float | None = None) -> Literal["tight", "within", "outside"]:
        """Where a difference ours − printed lies (compared at 9 decimals: printed values are short), in the
        band ``within`` (default: the general one)."""
        distance = round(abs(delta), 9)
        if self.tight is not None and distance <= self.tight:
            return "tight"
        return "within" if distance <= (self.within if within is None else within) else "outside"


class Table(_Strict):
    title: str
    caption: str = ""
    measures: dict[str, Measure] = Field(min_length=1)
    columns: dict[str, Column] = Field(min_length=1)
    printed: list[Block] = Field(min_length=1)


@dataclass(frozen=True)
class ReportColumn:
    """A column of a report: measured on our ``setting``, standing for the paper columns
    ``stands_for`` (just itself for a paper column), with each measure's statistic."""

    key: str
    table: str
    label: str
    setting: str
    stands_for: tuple[str, ...]
    statistics: dict[str, Statistic] = field(compare=False)  # measure -> statistic

    @property
    def exact(self) -> bool:
        """The paper's own column, so compared by value."""
        return self.stands_for == (self.key,)


class Figure(_Strict):
    """A figure of curves the report draws from the runs' records: one panel per paper column of
    ``panels`` (our column standing for it; panels that map to one of ours are drawn once), one line per
    method of ``methods`` that runs there, the mean over seeds of ``metric`` (``metric_for``: another
    metric for some methods, e.g. FedAvg's global model) against ``x``:

    * ``rounds``; ``iterations`` = rounds × ``training.local_steps`` (pipelines/fedal/NOTES.md A11);
    * ``upload_mb``: the cumulative upstream volume per client (the ``upload_bytes`` records over the
      round's clients), in MB;
    * ``modelled_time``: the measured training time per round × rounds + the cumulative volume up and
      down per client over a link of ``bandwidth_mbps`` (pipelines/fedal/NOTES.md R10)."""

    title: str
    caption: str = ""
    panels: list[str] = Field(min_length=1, description="paper column keys, one panel each")
    methods: list[str] = Field(min_length=1)
    metric: str = "client_global_acc"
    metric_for: dict[str, str] = Field(default_factory=dict, description="method -> the metric drawn for it")
    x: Literal["rounds", "iterations", "upload_mb", "modelled_time"] = "iterations"
    bandwidth_mbps: float = Field(20.0, gt=0, description="modelled_time: the assumed link, Mbit/s")


class PaperDefinition(_Strict):
    """A paper's tables (module docstring); ``methods`` are the rows of its tables, in order."""

    name: str
    title: str
    source: str = Field(description="where the printed values come from, e.g. pipelines/fedhkd/NOTES.md §6")
    proposed: str = Field(description="the paper's own method, whose rank the report states")
    methods: dict[str, str] = Field(min_length=1, description="method -> label")
    labels: dict[str, str] = Field(default_factory=dict, description="labels of suite methods not in the tables")
    groups: dict[str, str] = Field(default_factory=dict, description="column group -> label, e.g. dataset")
    tables: dict[str, Table] = Field(min_length=1)
    analogues: dict[str, Analogue] = Field(default_factory=dict)
    low_confidence: list[tuple[str, str, str]] = Field(default_factory=list, description=(
        "(method, column, measure) cells whose printed value the reading notes doubt"))
    acceptance: Acceptance | None = None
    figures: dict[str, Figure] = Field(default_factory=dict, description="curves drawn from the records")
    _values: dict[CellKey, float | None] = PrivateAttr(default_factory=dict)
    _extra: dict[tuple[str, str | None, str], float | None] = PrivateAttr(default_factory=dict)
    _rows: dict[str, list[str]] = PrivateAttr(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> PaperDefinition:
        try:
            return cls.model_validate(read_yaml_mapping(path, "paper definition"))
        except ValidationError as exc:
            raise BenchError(f"paper definition {path}: {describe_validation(exc)}") from None

    @model_validator(mode="after")
    def _check(self) -> PaperDefinition:
        if self.proposed not in self.methods:
            raise ValueError(f"proposed: {self.proposed!r} is not one of the methods")
        owner: dict[str, str] = {}
        for name, table in self.tables.items():
            for key, column in table.columns.items():
                if key in owner:
                    raise ValueError(f"tables.{name}: column {key!r} is also in {owner[key]}; column keys are unique")
                if column.group is not None and column.group not in self.groups:
                    raise ValueError(f"tables.{name}.columns.{key}.group: {column.group!r} is not one of the groups")
                owner[key] = name
                for measure in table.measures.values():
                    _override(measure.statistic, column.statistic)
            self._transcribe(name, table)
        for key, analogue in self.analogues.items():
            tables = {owner.get(c) for c in analogue.stands_for}
            if key in owner or None in tables or len(tables) != 1:
                raise ValueError(f"analogues.{key}: its key must be no paper column's and stands_for paper "
                                 f"columns of one table ({analogue.stands_for})")
            for measure in self.tables[owner[analogue.stands_for[0]]].measures.values():
                _override(measure.statistic, analogue.statistic)
        for key, figure in self.figures.items():
            if unknown := [c for c in figure.panels if c not in owner]:
                raise ValueError(f"figures.{key}.panels: {unknown} are not columns of the tables")
            if unknown := [m for m in figure.methods if m not in self.methods and m not in self.labels]:
                raise ValueError(f"figures.{key}.methods: {unknown} are neither methods nor labelled extras")
        for cell in self.low_confidence:
            if cell not in self._values:
                raise ValueError(f"low_confidence: {list(cell)} is not a printed (method, column, measure)")
        if self.acceptance is not None:
            known = {m for table in self.tables.values() for m in table.measures}
            if unknown := [m for m in self.acceptance.measures if m not in known]:
                raise ValueError(f"acceptance.measures: {unknown} are not measures of the tables")
        return self

    def _transcribe(self, name: str, table: Table) -> None:
        """Each block's values into cells; every method a table prints has every cell exactly once."""
        for index, block in enumerate(table.printed):
            where = f"tables.{name}.printed[{index}]"
            unknown = [*(c for c in block.columns if c not in table.columns),
                       *(m for m in block.measures if m not in table.measures),
                       *(m for m in block.rows if m not in self.methods)]
            if unknown:
                raise ValueError(f"{where}: {unknown} are not columns, measures or methods of the table")
            if block.extra and block.group is None:
                raise ValueError(f"{where}: extra values need the block's group")
            for method, row in block.rows.items():
                width = len(block.columns) * len(block.measures) + len(block.extra)
                if len(row) != width:
                    raise ValueError(f"{where}.rows.{method}: {len(row)} values, the block has {width} columns")
                cells = [(method, c, m) for m in block.measures for c in block.columns]
                for cell, value in zip(cells, row):
                    if cell in self._values:
                        raise ValueError(f"{where}.rows.{method}: {list(cell)} is printed twice")
                    self._values[cell] = value
                for extra, value in zip(block.extra, row[len(cells):]):
                    self._extra[extra, block.group, method] = value
        self._rows[name] = [m for m in self.methods if any(m in block.rows for block in table.printed)]
        for method in self._rows[name]:
            if missing := [(c, m) for c in table.columns for m in table.measures if (method, c, m) not in self._values]:
                raise ValueError(f"tables.{name}: {method} has no printed value for (column, measure) {missing}; "
                                 "transcribe it (null where the paper prints none)")

    def rows(self, table: str) -> list[str]:
        """The methods the table prints (its rows, in ``methods`` order): ranks in its columns are among them."""
        return self._rows[table]

    @property
    def ranked_among(self) -> str:
        """Who ranks are among, in words: the paper's methods when every table prints them all."""
        if all(len(rows) == len(self.methods) for rows in self._rows.values()):
            return f"the paper's {len(self.methods)} methods"
        return "the rows of each table"

    def shown(self, table: str, method: str) -> bool:
        """Whether a suite method appears in the table's columns: a row of it, or a row of no table (an extra
        such as a code-mode variant, shown unranked)."""
        return method in self._rows[table] or not any(method in rows for rows in self._rows.values())

    def label(self, method: str) -> str:
        return self.methods.get(method) or self.labels.get(method, method)

    def value(self, method: str, column: str, measure: str) -> float | None:
        """The printed value of a cell (None: not printed)."""
        return self._values.get((method, column, measure))

    def extra(self, name: str, group: str, method: str) -> float | None:
        """A printed value that is not a run statistic (a block's ``extra``), e.g. FedHKD's ``time_s``."""
        return self._extra.get((name, group, method))

    def column(self, key: str) -> Column:
        return next(t.columns[key] for t in self.tables.values() if key in t.columns)

    def table_of(self, column: str) -> str:
        return next(name for name, t in self.tables.items() if column in t.columns)

    def columns_for(self, settings: list[str]) -> list[ReportColumn]:
        """The report columns these settings make, per table: its paper columns, then its analogues."""
        out: list[ReportColumn] = []
        for name, table in self.tables.items():
            entries: list[tuple[str, str, str, tuple[str, ...], dict[str, Any]]] = [
                (key, c.label, c.setting or key, (key,), c.statistic) for key, c in table.columns.items()]
            entries += [(key, a.label, a.setting or key, tuple(a.stands_for), a.statistic)
                        for key, a in self.analogues.items() if self.table_of(a.stands_for[0]) == name]
            out += [ReportColumn(key, name, label, setting, stands_for,
                                 {m: _override(measure.statistic, overrides) for m, measure in table.measures.items()})
                    for key, label, setting, stands_for, overrides in entries if setting in settings]
        return out

    def results(self) -> Results:
        """The paper's own tables as results, so every claim is also checked on the printed numbers."""
        settings = [c.setting or key for t in self.tables.values() for key, c in t.columns.items()]
        columns = [c for c in self.columns_for(settings) if c.exact]
        return Results(self, list(self.methods), columns,
                       {(m, c.key, measure): v for m in self.methods for c in columns
                        for measure in self.tables[c.table].measures
                        if (v := self.value(m, c.key, measure)) is not None})


def _override(statistic: Statistic, overrides: dict[str, Any]) -> Statistic:
    """``statistic`` with some fields replaced (a column's ``statistic``)."""
    if not overrides:
        return statistic
    try:
        return Statistic.model_validate({**statistic.model_dump(), **overrides})
    except ValidationError as exc:
        raise ValueError(f"statistic {statistic.name} with {overrides}: {describe_validation(exc)}") from None


@dataclass
class Results:
    """One number per (method, report column, measure): ours (mean over seeds) or the paper's printed
    value; :data:`TIME_RATIO` is a measure too where known."""

    paper: PaperDefinition
    methods: list[str]
    columns: list[ReportColumn]
    values: dict[CellKey, float] = field(default_factory=dict)

    @property
    def by_value(self) -> bool:
        """Every column is the paper's own (not an analogue)."""
        return all(c.exact for c in self.columns)

    def table(self, name: str) -> list[ReportColumn]:
        return [c for c in self.columns if c.table == name]

    def column(self, paper_column: str) -> ReportColumn | None:
        """Our column standing for this paper column, if any."""
        return next((c for c in self.columns if paper_column in c.stands_for), None)

    def groups(self, column: ReportColumn) -> list[str | None]:
        """The groups (e.g. datasets) of the paper columns ``column`` stands for."""
        return [self.paper.column(key).group for key in column.stands_for]

    def value(self, method: str, column: ReportColumn | None, measure: str) -> float | None:
        return None if column is None else self.values.get((method, column.key, measure))

    def mean(self, method: str, measure: str, table: str) -> float | None:
        """The mean over the table's columns that have a value, in column order."""
        values = [v for c in self.table(table) if (v := self.value(method, c, measure)) is not None]
        return sum(values) / len(values) if values else None

    def rank(self, method: str, column: ReportColumn | None, measure: str) -> int | None:
        """1 + the number of the table's rows (the methods the paper prints in it) strictly better in this
        cell; None for a method that is not one of them (unranked), has no value here, or a measure that is
        not ranked."""
        mine = self.value(method, column, measure)
        rows = [] if column is None else self.paper.rows(column.table)
        if column is None or mine is None or method not in rows or not self.paper.tables[column.table].measures[
                measure].ranked:
            return None
        higher = self.paper.tables[column.table].measures[measure].statistic.higher_is_better
        others = [v for m in rows if (v := self.value(m, column, measure)) is not None]
        return 1 + sum((v > mine) if higher else (v < mine) for v in others)


@dataclass(frozen=True)
class Claim:
    text: str
    holds: bool | None  # None: not measurable with these results
    evidence: str


TIE = 1e-9
"""Differences at most this small are float rounding, not a difference (claims over means of runs)."""


def pairs_claim(text: str, pairs: list[tuple[float | None, float | None]], need: Literal["all", "most"]) -> Claim:
    """The claim that a beats b (strictly, by more than float rounding: ``TIE``) in all or in most of the pairs
    (a, b) that have both values. Two means over seeds can be equal but for the order of their sums (FedAL
    and FedMD-LF on the FedAL proxy: 0.9576851851851852 against ...51): such a tie is no win."""
    valid = [(a, b) for a, b in pairs if a is not None and b is not None]
    wins = sum(a - b > TIE for a, b in valid)
    holds = None if not valid else (wins == len(valid) if need == "all" else wins > len(valid) / 2)
    return Claim(text, holds, f"{wins}/{len(valid)}")


def range_claim(text: str, value: float | None, low: float | None, high: float | None) -> Claim:
    """``value`` (a ratio) lies within [low, high] (an open end: None)."""
    if value is None:
        return Claim(text, None, "—")
    holds = (low is None or value >= low) and (high is None or value <= high)
    return Claim(text, holds, f"{value:.2f}×")


def stated_claim(text: str, items: list[tuple[str, float | None, float]], tolerance: float) -> Claim:
    """Each (label, computed, stated) value is at least the stated one, less ``tolerance`` (the
    paper's rounding); the evidence names those below. Not measured where nothing is computed."""
    valid = [(label, c, s) for label, c, s in items if c is not None]
    below = [f"{label} {c:+.1f} vs {s:+.1f}" for label, c, s in valid if c < s - tolerance]
    evidence = f"{len(valid) - len(below)}/{len(valid)}" + (f"; below: {', '.join(below)}" if below else "")
    return Claim(text, None if not valid else not below, evidence if valid else "—")


@dataclass(frozen=True)
class BandCell:
    """One cell checked against the acceptance band: ours, the printed value (printed units), and
    whether it lies within the band and within its tight part."""

    method: str
    column: ReportColumn
    measure: str
    ours: float
    printed: float
    within: float | None = None  # the cell's band (None: the general one)

    @property
    def delta(self) -> float:
        return self.ours - self.printed

    def grade(self, band: Acceptance) -> Literal["tight", "within", "outside"]:
        return band.grade(self.delta, self.within)


def band_cells(definition: PaperDefinition, ours: Results) -> list[BandCell]:
    """The cells of ``ours`` the acceptance band applies to: the paper's own columns (not analogues),
    the band's measures and groups, the table's rows, both values present, not low-confidence."""
    band = definition.acceptance
    if band is None:
        return []
    out = []
    for column in ours.columns:
        if not column.exact or (band.groups is not None and definition.column(column.key).group not in band.groups):
            continue
        measures = definition.tables[column.table].measures
        for name in (m for m in band.measures if m in measures):
            for method in definition.rows(column.table):
                mine, printed = ours.value(method, column, name), definition.value(method, column.key, name)
                if mine is not None and printed is not None and \
                        (method, column.key, name) not in definition.low_confidence:
                    out.append(BandCell(method, column, name, mine * measures[name].scale, printed,
                                        band.band(name, definition.column(column.key).group)))
    return out


@dataclass(frozen=True)
class Section:
    """An extra report section a paper module supplies: a title, a note and a table of text cells."""

    title: str
    note: str
    header: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Panel:
    """One panel of a :class:`LineFigure`: per method, its (x, y) points in x order; ``fit`` also draws a
    least-squares cubic through each method's points (a "fitted learning curve")."""

    title: str
    series: dict[str, list[tuple[float, float]]]
    log_x: bool = False
    fit: bool = False


@dataclass(frozen=True)
class LineFigure:
    """A figure of the paper the report draws (``figures/paper_<name>.png``), e.g. accuracy against α."""

    name: str
    title: str
    x_label: str
    y_label: str
    panels: list[Panel]


Curve = Callable[[str, str], list[tuple[int, float]]]
"""``(method, setting) -> [(round, value)]``: the mean over seeds of the global accuracy at each evaluated
round (empty where the method has no finished run there)."""


class Paper:
    """A paper's definition and code; a plug-in subclasses it to add claims, sections and figures, and passes
    its (model, dataset) configurations with the parameter counts the paper prints (``model_configs``)."""

    def __init__(self, definition: PaperDefinition, model_configs: tuple[PaperConfig, ...] = ()) -> None:
        self.definition = definition
        self.model_configs = model_configs

    def printed(self) -> Results:
        """The paper's own tables as results (a subclass may add measures, e.g. :data:`TIME_RATIO`)."""
        return self.definition.results()

    def claims(self, results: Results) -> list[Claim]:
        """The paper's claims checked on ``results`` (ours or :meth:`printed`), in a fixed order."""
        return []

    def sections(self, suite: SuiteView, ours: Results) -> list[Section]:
        """Report sections beyond the tables, e.g. FedHKD's Params and Time columns."""
        return []

    def figures(self, ours: Results, curve: Curve) -> list[LineFigure]:
        """The paper's figures drawn from our results (e.g. accuracy against α from a table's cells) and
        learning curves."""
        return []

    def own_figures(self, suite: SuiteView, runs: Mapping[RunKey, FinishedRun], folder: Path,
                    data_dir: Path | None) -> list[Path]:
        """Figures of other kinds the paper draws itself into ``folder`` (partitions, contributions, feature
        densities) from the suite's partitions, finished runs and datasets (``data_dir``); the files written."""
        return []
