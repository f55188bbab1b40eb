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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from bench.config import ExperimentConfig, describe_validation, read_yaml_mapping
from bench.errors import BenchError
from bench.models.paper_configs import PaperConfig
from bench.suites.statistics import Records, Statistic
from bench.suites.verdicts import ALL, Need, Outcome, Test, Verdict, decide, holm, paired_test, welch_test


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

    def partition_config(self, setting: str, seed: int | None = None) -> ExperimentConfig: ...

    def partition_dir(self, setting: str, seed: int | None = None) -> Path: ...

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


Pair = tuple[str, int]  # (setting, seed)
MechanismStatus = Literal["active", "inert", "mixed", "not recorded"]


@dataclass
class Results:
    """Per (method, report column, measure): our mean over seeds and, in ``seeds``, the value of every (setting,
    seed) pair it comes from — or the paper's printed value (``seeds`` empty: the printed tables have no seeds);
    :data:`TIME_RATIO` is a measure too where known. ``bounds``: for a run that never reached a rounds-to-target
    statistic's target (inf), the rounds it trained + 1, the least its value can be. ``mechanisms``: per (method,
    setting), whether each mechanism the method declares (its diagnostic metric) was active in those runs
    (:mod:`bench.suites.mechanisms`). ``derived``: per (method, report column, name), a quantity the paper's
    plug-in derives from several runs' curves (:meth:`Paper.derive`, e.g. the accuracy each method has at a running
    time every method reached), with its per-seed values; empty on the printed tables."""

    paper: PaperDefinition
    methods: list[str]
    columns: list[ReportColumn]
    values: dict[CellKey, float] = field(default_factory=dict)
    seeds: dict[CellKey, dict[Pair, float]] = field(default_factory=dict)
    bounds: dict[CellKey, dict[Pair, float]] = field(default_factory=dict)
    mechanisms: dict[tuple[str, str], dict[str, MechanismStatus]] = field(default_factory=dict)
    derived: dict[CellKey, Sample] = field(default_factory=dict)

    @property
    def by_value(self) -> bool:
        """Every column is the paper's own (not an analogue)."""
        return all(c.exact for c in self.columns)

    @property
    def seeded(self) -> bool:
        """Ours, with per-seed values: claims are judged by the paired tests (bench/suites/verdicts.py); the printed
        tables' claims by their values."""
        return bool(self.seeds)

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
        higher = self.higher(measure, column)
        others = [v for m in rows if (v := self.value(m, column, measure)) is not None]
        return 1 + sum((v > mine) if higher else (v < mine) for v in others)

    def higher(self, measure: str, column: ReportColumn) -> bool:
        """Whether a higher value of ``measure`` is better (rounds to a target: fewer is better)."""
        return measure == TIME_RATIO or self.paper.tables[column.table].measures[measure].statistic.higher_is_better

    def _scale(self, measure: str, column: ReportColumn) -> tuple[float, int]:
        if measure == TIME_RATIO:
            return 1.0, 2
        m = self.paper.tables[column.table].measures[measure]
        return m.scale if self.seeded else 1.0, m.digits

    def sample(self, method: str, column: ReportColumn | None, measure: str) -> Sample | None:
        """The value of one cell as a :class:`Sample` (None: no value): its mean and per-seed values (ours), or the
        printed value. Two cells of one setting and statistic (analogue columns standing for several tables) are
        the same sample."""
        point = self.value(method, column, measure)
        if column is None or point is None:
            return None
        key: tuple[Any, ...] = (method, column.setting, column.statistics[measure].name if measure in
                                column.statistics else measure) if self.seeded else (method, column.key, measure)
        scale, digits = self._scale(measure, column)
        where = column.setting if self.seeded else column.label
        return Sample(f"{self.paper.label(method)} @ {where}", point, self.seeds.get((method, column.key, measure), {}),
                      frozenset({method}), key, self.bounds.get((method, column.key, measure), {}), scale, digits)

    def pooled(self, method: str, measure: str, table: str) -> Sample | None:
        """One quantity over the table's columns: the mean over its columns (:meth:`mean`) and, ours, the values of
        every (setting, seed) pair of them (a setting two columns share counted once), e.g. a time ratio."""
        point = self.mean(method, measure, table)
        if point is None:
            return None
        values: dict[Pair, float] = {}
        for column in self.table(table):
            values.update(self.seeds.get((method, column.key, measure), {}))
        columns = self.table(table)
        scale, digits = self._scale(measure, columns[0])
        return Sample(f"{self.paper.label(method)} @ {self.paper.tables[table].title}", point, values,
                      frozenset({method}), (method, table, measure, tuple(sorted(values))), {}, scale, digits)

    def beats(self, a: str, b: str, column: ReportColumn | None, measure: str, margin: float = 0.0,
              strict: bool = True) -> Comparison | None:
        """``a`` is better than ``b`` in this cell (by more than ``margin``, in the measure's units): paired on the
        column's seeds. ``strict`` concerns the printed values only: False counts a tie as holding ("not beaten")."""
        x, y = self.sample(a, column, measure), self.sample(b, column, measure)
        if x is None or y is None or column is None:
            return None
        return Comparison(x, y, self.higher(measure, column), margin, strict)

    def inert(self, comparison: Comparison, rests_on: Sequence[tuple[str, str]]) -> bool:
        """Whether the comparison rests on a mechanism (method, diagnostic) that was inert where it was measured."""
        return any(self.mechanisms.get((method, setting), {}).get(diagnostic) == "inert"
                   for method, diagnostic in rests_on if method in comparison.methods
                   for setting in comparison.settings)


@dataclass(frozen=True)
class Sample:
    """One quantity a claim compares: ``point`` (our mean over seeds, or the printed value) and, ours, its value on
    every (setting, seed) pair. ``key`` says what it is (two samples with one key are the same data); ``bounds``:
    the least value of a pair never reaching its target (its rounds + 1); ``scale`` and ``digits``: how the report
    prints it. A difference of two samples on the same pairs, or a multiple of one, is a sample."""

    label: str
    point: float
    values: Mapping[Pair, float]
    methods: frozenset[str]
    key: tuple[Any, ...]
    bounds: Mapping[Pair, float] = field(default_factory=dict)
    scale: float = 1.0
    digits: int = 4

    def __sub__(self, other: Sample) -> Sample:
        if set(self.values) != set(other.values):
            raise ValueError(f"{self.label} − {other.label}: not on the same (setting, seed) pairs")
        return Sample(f"({self.label} − {other.label})", self.point - other.point,
                      {p: v - other.values[p] for p, v in self.values.items()}, self.methods | other.methods,
                      ("-", self.key, other.key), {}, self.scale, self.digits)

    def __mul__(self, factor: float) -> Sample:
        return Sample(f"{factor:g}·{self.label}", self.point * factor, {p: v * factor for p, v in self.values.items()},
                      self.methods, ("*", factor, self.key), {}, self.scale, self.digits)

    __rmul__ = __mul__

    @property
    def settings(self) -> set[str]:
        return {setting for setting, _ in self.values}


TIE = 1e-9
"""Printed values differing by at most this much are equal (float rounding, not a difference)."""


def _difference(x: float, y: float, x_bound: float | None = None, y_bound: float | None = None) -> float:
    """x − y where either may be inf (a target never reached): both never reached is a tie (0); one never reached
    is at least its ``bound`` (its rounds + 1), so the difference is the one to that bound when the other was
    reached before it, and a tie when not (indeterminate). So a censored difference is never larger than the true
    one, on either side."""
    if math.isinf(x) and math.isinf(y):
        return 0.0
    if math.isinf(x) or math.isinf(y):
        infinite, bound, other = (x, x_bound, y) if math.isinf(x) else (y, y_bound, x)
        if bound is None:
            return x - y
        if other >= bound:
            return 0.0
        x, y = (bound, y) if math.isinf(x) else (x, bound)
    return x - y


@dataclass(frozen=True)
class Comparison:
    """The claim that ``x`` is better than ``y`` (or, with ``y`` None, than the ``margin`` itself) by more than
    ``margin``: ``d = x − y`` (``higher``) or ``y − x`` (fewer is better) exceeds it. Paired on the (setting, seed)
    pairs both samples have, unpaired (Welch) when they have none in common (e.g. one method at two α).
    ``strict`` applies to the printed values only (a tie counts as holding when False)."""

    x: Sample
    y: Sample | None
    higher: bool = True
    margin: float = 0.0
    strict: bool = True

    @property
    def key(self) -> tuple[Any, ...]:
        return self.x.key, None if self.y is None else self.y.key, self.higher, self.margin, self.strict

    @property
    def methods(self) -> frozenset[str]:
        return self.x.methods | (self.y.methods if self.y is not None else frozenset())

    @property
    def settings(self) -> set[str]:
        return self.x.settings | (self.y.settings if self.y is not None else set())

    @property
    def label(self) -> str:
        return self.x.label + ("" if self.y is None else f" vs {self.y.label}")

    def _oriented(self, d: float) -> float:
        return d if self.higher else -d

    def on_points(self) -> bool:
        """Whether it holds on the points (the printed values; a tie, within :data:`TIE`, holds only when not
        ``strict``)."""
        d = self._oriented(_difference(self.x.point, 0.0 if self.y is None else self.y.point)) - self.margin
        return d > TIE if self.strict else d >= -TIE

    def on_values(self) -> str:
        """The comparison with its two values, as printed (what a claim on the printed tables names when it fails)."""
        def shown(sample: Sample) -> str:
            return f"{sample.label} {sample.scale * sample.point:.{sample.digits}f}"

        margin = f" by {self.margin:+g}" if self.margin and self.y is not None else ""
        return shown(self.x) + (f" vs {self.margin:g}" if self.y is None else f" vs {shown(self.y)}{margin}")

    def test(self) -> Test | None:
        """The test of the per-seed values (bench/suites/verdicts.py); None: an exact tie, or no per-seed values
        (not measured)."""
        x, y = self.x, self.y
        if not x.values or (y is not None and not y.values):
            return None
        if y is None:
            return paired_test([self._oriented(v) for v in x.values.values()], self.margin)
        common = [p for p in x.values if p in y.values]
        if common:
            raw = [_difference(x.values[p], y.values[p], x.bounds.get(p), y.bounds.get(p)) for p in common]
            if all(d == 0 for d in raw):
                return None
            return paired_test([self._oriented(d) for d in raw], self.margin)
        xs, ys = list(x.values.values()), list(y.values.values())
        if not all(math.isfinite(v) for v in xs + ys) or sorted(xs) == sorted(ys):
            return None
        return welch_test(*((xs, ys) if self.higher else (ys, xs)), self.margin)


@dataclass(frozen=True)
class Judged:
    """One comparison of a claim as judged: its test (None: not measured or not exercised), the Holm-adjusted
    p-value and what it came to."""

    comparison: Comparison
    test: Test | None
    p_holm: float | None
    outcome: Outcome | Literal["not measured", "not exercised"]

    def describe(self) -> str:
        """The effect with its interval and the test, in the measure's printed units (what the report prints)."""
        if self.test is None:
            return f"{self.comparison.label}: {self.outcome}"
        c, t = self.comparison, self.test
        s, digits = c.x.scale, c.x.digits
        p = "untestable" if t.p is None else f"p = {t.p:.2g}" + ("" if self.p_holm in (None, t.p) else
                                                                f", Holm {self.p_holm:.2g}")
        if c.y is None:  # a value against a bound: shown as the value, its interval and the bound
            sign = 1 if c.higher else -1
            interval = ""
            if t.interval is not None:
                low, high = sorted(sign * v for v in t.interval)
                interval = f" [{s * low:.{digits}f}, {s * high:.{digits}f}]"
            bound = f"{'>' if c.higher else '<'} {s * sign * t.margin:.{digits}f}"
            return f"{c.label}: {s * sign * t.effect:.{digits}f}{interval}, claimed {bound}; {t.name}, {p}"
        interval = "" if t.interval is None else f" [{s * t.interval[0]:+.{digits}f}, {s * t.interval[1]:+.{digits}f}]"
        margin = f" (margin {s * t.margin:+.{digits}f})" if t.margin else ""
        return f"{c.label}: {s * t.effect:+.{digits}f}{interval}{margin}; {t.name}, {p}"


PointVerdict = Literal["holds", "fails", "not measured"]


@dataclass(frozen=True)
class Claim:
    """A claim of the paper as judged: on ours a :data:`~bench.suites.verdicts.Verdict` (the rule of
    bench/suites/verdicts.py), on the printed tables holds / fails / not measured by their values; ``evidence``
    counts the comparisons; ``deciding`` is the comparison whose effect and interval the report prints;
    ``comparisons`` every one, judged."""

    text: str
    verdict: Verdict | PointVerdict
    evidence: str
    deciding: Judged | None = None
    comparisons: tuple[Judged, ...] = ()

    @property
    def holds(self) -> bool | None:
        """True where supported (or, printed, holds), False where contradicted (fails), None otherwise."""
        return {"holds": True, "supported": True, "fails": False, "contradicted": False}.get(self.verdict)


Group = Sequence[Comparison | None]


def claim(text: str, results: Results, comparisons: Group, need: Need = ALL,
          rests_on: Sequence[tuple[str, str]] = (), note: str = "") -> Claim:
    """The claim that ``need`` of the comparisons hold (None: a cell without values, left out)."""
    return grouped_claim(text, results, [[c] for c in comparisons], need, ALL, rests_on, note)


def grouped_claim(text: str, results: Results, groups: Sequence[Group], need: Need = ALL, within: Need = ALL,
                  rests_on: Sequence[tuple[str, str]] = (), note: str = "") -> Claim:
    """The claim that ``need`` of the groups hold, a group holding when ``within`` of its comparisons do (e.g. "first
    in most columns": per column, beats every other row). The same comparison or group twice (an analogue column
    standing for several paper columns) counts once. On ours, the rule of bench/suites/verdicts.py; a comparison
    resting on a mechanism (``rests_on``: (method, diagnostic)) that was inert where it ran is not exercised, and a
    claim all of whose comparisons are is **not exercised**. On the printed values: each comparison holds or not
    by its values, and the claim holds when ``need`` groups do. ``note`` is added to the evidence."""
    unique: dict[tuple[Any, ...], list[Comparison]] = {}
    for group in groups:
        members = list({c.key: c for c in group if c is not None}.values())
        if members:
            unique.setdefault(tuple(c.key for c in members), members)
    kept = list(unique.values())
    suffix = f"; {note}" if note else ""
    if not results.seeded:
        if not kept:
            return Claim(text, "not measured", "—" + suffix)
        held = [sum(c.on_points() for c in g) >= within.of(len(g)) for g in kept]
        missed = [c.on_values() for g, ok in zip(kept, held) if not ok for c in g if not c.on_points()]
        shown = "; ".join(missed[:4]) + (f"; … {len(missed) - 4} more" if len(missed) > 4 else "")
        verdict: PointVerdict = "holds" if sum(held) >= need.of(len(kept)) else "fails"
        named = f"; not held: {shown}" if missed and verdict == "fails" else ""
        return Claim(text, verdict, f"{sum(held)}/{len(held)}" + named + suffix)
    judged_groups = _judge(results, kept, rests_on)
    flat = [j for g in judged_groups for j in g]
    states = []
    for judged_group in judged_groups:
        measured = [j for j in judged_group if j.outcome not in ("not measured", "not exercised")]
        states.append(decide(sum(j.outcome == "holds" for j in measured), sum(j.outcome == "fails" for j in measured),
                             len(measured), within))
    measured_groups = [s for s in states if s != "not measured"]
    verdict_: Verdict = decide(states.count("supported"), states.count("contradicted"), len(measured_groups), need)
    if verdict_ == "not measured" and any(j.outcome == "not exercised" for j in flat):
        verdict_ = "not exercised"  # nothing measured because the mechanism it rests on was inert
    return Claim(text, verdict_, _evidence(flat, states, within, need) + suffix, _deciding(flat, verdict_), tuple(flat))


def _judge(results: Results, groups: list[list[Comparison]],
           rests_on: Sequence[tuple[str, str]]) -> list[list[Judged]]:
    """Each comparison tested (or not measured, not exercised), Holm across all of them."""
    tests = [[None if results.inert(c, rests_on) else c.test() for c in g] for g in groups]
    adjusted = iter(holm([t.p if t is not None else None for g in tests for t in g]))
    out = []
    for group, group_tests in zip(groups, tests):
        judged = []
        for c, t in zip(group, group_tests):
            p = next(adjusted)
            outcome = ("not exercised" if results.inert(c, rests_on) else "not measured" if t is None
                       else t.outcome(p))
            judged.append(Judged(c, t, p, outcome))
        out.append(judged)
    return out


def _evidence(flat: list[Judged], states: Sequence[str], within: Need, need: Need) -> str:
    count = {o: sum(j.outcome == o for j in flat) for o in ("holds", "fails", "not measured", "not exercised")}
    measured = len(flat) - count["not measured"] - count["not exercised"]
    parts = [f"{count['holds']}/{measured} hold, {count['fails']} against"]
    if within != ALL or len(states) != len(flat):
        parts.append(f"{states.count('supported')}/{len(states) - states.count('not measured')} groups supported "
                     f"(each needs {within.label})")
    parts.append(f"needs {need.label}")
    parts += [f"{count[o]} {o}" for o in ("not measured", "not exercised") if count[o]]
    return "; ".join(parts)


def _deciding(flat: list[Judged], verdict: str) -> Judged | None:
    """The comparison the report prints: the strongest against a contradicted claim, else the weakest of those
    measured (the largest Holm p: what stands between the claim and support)."""
    measured = [j for j in flat if j.test is not None]
    if not measured:
        return None
    if verdict == "contradicted":
        return min((j for j in measured if j.outcome == "fails"), key=lambda j: j.p_holm or 0.0)
    pool = [j for j in measured if j.outcome == "holds"] if verdict == "supported" else measured
    return max(pool, key=lambda j: 1.0 if j.p_holm is None else j.p_holm)


def range_claim(text: str, results: Results, sample: Sample | None, low: float | None, high: float | None) -> Claim:
    """``sample`` (a ratio) lies within [low, high] (an open end: None): above ``low`` and below ``high``."""
    comparisons = [None if sample is None or low is None else Comparison(sample, None, True, low, False),
                   None if sample is None or high is None else Comparison(sample, None, False, -high, False)]
    return claim(text, results, comparisons, ALL, note="" if sample is None else f"{sample.point:.2f}×")


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


Trace = Callable[[str, str, str, int], tuple[list[float], list[float]] | None]
"""``(figure, method, setting, seed) -> (x, y)``: one finished run's points as the paper definition's figure draws
them (x: iterations, upstream MB or modelled seconds; y: its accuracy metric), in round order; None where the run
is not there."""

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

    def derive(self, ours: Results, trace: Trace) -> dict[CellKey, Sample]:
        """Quantities a claim compares that need several runs' curves (``trace``), per (method, report column,
        name), e.g. FedAL's accuracy at a running time every method reached; the report stores them in
        ``ours.derived`` before the claims are judged."""
        return {}

    def figures(self, ours: Results, curve: Curve) -> list[LineFigure]:
        """The paper's figures drawn from our results (e.g. accuracy against α from a table's cells) and
        learning curves."""
        return []

    def own_figures(self, suite: SuiteView, runs: Mapping[RunKey, FinishedRun], folder: Path,
                    data_dir: Path | None) -> list[Path]:
        """Figures of other kinds the paper draws itself into ``folder`` (partitions, contributions, feature
        densities) from the suite's partitions, finished runs and datasets (``data_dir``); the files written."""
        return []
