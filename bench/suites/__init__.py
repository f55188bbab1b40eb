"""Suites: which runs make which table cell.

A suite is described by a params file (the root ``params.yaml`` for the default suite,
``pipelines/<paper>/params.yaml`` for a paper) with this shape::

    suite:    {name, seeds, jobs, executor: serial|processes|ray, ray: {address, cpus_per_run, gpus_per_run,
               max_retries}, paper: <optional: a paper of PAPERS whose tables this suite makes>,
               statistics: [<statistic name>, ...],   # pinned and compared (default: DEFAULT_STATISTICS)
               timing: <optional: per-round times file of `time_of` budgets, relative to the root>,
               base: <experiment config shared by every run>}
    settings: {<setting>: <config overlay: partition, dataset, model, budget, ...;
                           optional methods: [<method>, ...]: only these run on it;
                           optional method_config: {<method>: <overlay of that method's runs here>}>, ...}
    methods:  {<method>: {name: <algorithm, default: the key>, <hyperparameters>...,        # rows
                          config: <optional: overlay of any config section, e.g. {training: {local_steps: 5}}>,
                          needs: <optional: [<method whose run this one needs>, ...]>}, ...}
    profile:  <optional: the name of one entry of `profiles`>
    figures:  {<figure>: <config overlay of a partition to draw>, ...}              # optional
    profiles: {<profile>: {suite: <deep-merged>, settings/methods/figures: <replace>}}

A run is ``(method, setting, seed)`` for every method that runs on the setting (all of them unless the
setting names its ``methods``: a paper table with fewer rows); its config is ``base`` deep-merged with the
setting's overlay, the method's ``config`` overlay and the setting's ``method_config`` of the method (e.g. a
per-dataset learning rate of one method), then the method's algorithm section and the seed. ``budget``
(in ``base``, a setting or a method's ``config``; the last one given wins) sets the training
length: ``{rounds: R}``, or ``{iterations: I}`` for R = I / training.local_steps (FedAL's
iteration budgets with per-method τ, specs/fedal.md A11, A15), or ``{time_of: {method: M, rounds: R}}``:
the rounds this method completes in the wall-clock time M takes for R rounds, ⌊R·s_M/s⌋ with s the
seconds per round the suite's ``timing`` file records for the setting (``bench suite time`` measures
them; FedAKD's Table 3, specs/fedakd.md §8 R8), so the runs stay deterministic given that file. With a profile the suite is named
``<name>-<profile>``. Results live in ``results/<suite>/<method>/<setting>/seed<seed>/`` and
partitions in ``partitions/<suite>/<setting>/``, both under the params file's folder.

A run may depend on another method's run on the same setting and seed: through ``needs``, or
because a statistic compares with it (CF against Standalone, specs/fedakd.md §3.1).
:meth:`Suite.dependencies` lists them, :meth:`Suite.train_order` trains them first.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bench.config import ExperimentConfig, apply_overrides, describe_validation, read_yaml_mapping
from bench.experiment import build_config
from bench.runner.executor import RunRequest
from bench.errors import BenchError
from bench.suites import fedakd, fedhkd
from bench.suites.paper import Paper
from bench.suites.statistics import Statistic

PAPERS: dict[str, Paper] = {paper.definition.name: paper for paper in (fedhkd.PAPER, fedakd.PAPER)}
DEFAULT_STATISTICS = ("final_global_acc", "last5_global_acc", "final_local_acc", "last5_local_acc")


class RaySection(BaseModel):
    """Ray settings (``executor: ray``); docs/scale.md."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    address: str | None = Field(None, description="an existing cluster (e.g. 'auto', 'head:6379'); None: a local one")
    cpus_per_run: float = Field(1.0, gt=0)
    gpus_per_run: float = Field(0.0, ge=0, description="a fraction lets several runs share one GPU")
    max_retries: int = Field(3, ge=0, description="retries of a run whose worker or node died (it resumes)")


class SuiteSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    paper: str | None = Field(None, description="the paper (a key of PAPERS) whose tables this suite makes")
    seeds: list[int] = Field(min_length=1)
    jobs: int = Field(2, ge=1, description="parallel single-threaded runs (processes, or a local Ray cluster's CPUs)")
    executor: Literal["serial", "processes", "ray"] = Field("processes", description="where runs execute")
    ray: RaySection = Field(default_factory=lambda: RaySection())
    statistics: list[Statistic] = Field(
        default_factory=lambda: [Statistic.model_validate(s) for s in DEFAULT_STATISTICS],
        description="pinned and compared for every run; the paper's cells add theirs")
    timing: str | None = Field(None, description="the per-round times file of `time_of` budgets (bench suite time), "
                                                 "relative to the suite's root")
    base: dict[str, Any] = Field(default_factory=dict)


class Method(BaseModel):
    """A table row: the algorithm section (``name`` plus flat hyperparameters), an overlay of any
    other config section, and the methods whose runs this one needs."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str | None = Field(None, description="the algorithm (default: the method's key)")
    config: dict[str, Any] = Field(default_factory=dict)
    needs: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _no_algorithm_overlay(self) -> Method:
        if "algorithm" in self.config:
            raise ValueError("config.algorithm: put the algorithm's keys beside `name`, not under `config`")
        return self

    def algorithm(self, key: str) -> dict[str, Any]:
        return {**(self.model_extra or {}), "name": self.name or key}


class TimeOf(BaseModel):
    """The wall-clock time ``method`` takes for ``rounds`` rounds on the same setting and hardware."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    method: str
    rounds: int = Field(ge=1)


class Budget(BaseModel):
    """The training length: rounds, iterations (rounds × training.local_steps, specs/fedal.md A11), or the
    wall-clock time of another method's rounds (``time_of``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rounds: int | None = Field(None, ge=1)
    iterations: int | None = Field(None, ge=1)
    time_of: TimeOf | None = None

    @model_validator(mode="after")
    def _one(self) -> Budget:
        if sum(v is not None for v in (self.rounds, self.iterations, self.time_of)) != 1:
            raise ValueError("give exactly one of budget.rounds and budget.iterations (or budget.time_of)")
        return self

    def to_rounds(self, local_steps: int | None, seconds: dict[str, float] | None = None, method: str = "") -> int:
        """The rounds; a ``time_of`` budget needs ``seconds`` (per method, the setting's seconds per round;
        None: the reference's rounds, for what only needs the config's shape, e.g. partitions)."""
        if self.rounds is not None:
            return self.rounds
        if self.time_of is not None:
            if seconds is None:
                return self.time_of.rounds
            return equal_time_rounds(self.time_of.rounds, seconds[self.time_of.method], seconds[method])
        assert self.iterations is not None
        if local_steps is None:
            raise BenchError(f"budget.iterations={self.iterations} needs training.local_steps (iterations per "
                             "round); set it, or give budget.rounds")
        if self.iterations % local_steps:
            raise BenchError(f"budget.iterations={self.iterations} is not a multiple of training.local_steps="
                             f"{local_steps}; change one so that rounds = iterations / local_steps is whole")
        return self.iterations // local_steps


class SuiteParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    suite: SuiteSection
    settings: dict[str, dict[str, Any]] = Field(min_length=1)
    methods: dict[str, Method] = Field(min_length=1)
    figures: dict[str, dict[str, Any]] = Field(default_factory=dict)  # name -> config overlay of a partition figure
    profile: str | None = None
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)


@dataclass(frozen=True)
class Suite:
    params: SuiteParams
    root: Path  # folder results/ and partitions/ are relative to
    params_file: Path | None = None

    @property
    def name(self) -> str:
        profile = self.params.profile
        return f"{self.params.suite.name}-{profile}" if profile else self.params.suite.name

    def results_dir(self, method: str | None = None) -> Path:
        base = self.root / "results" / self.name
        return base / method if method else base

    def partition_dir(self, setting: str) -> Path:
        return self.root / "partitions" / self.name / setting

    def run_dir(self, method: str, setting: str, seed: int) -> Path:
        return self.results_dir(method) / setting / f"seed{seed}"

    def __post_init__(self) -> None:
        p = self.params
        if p.suite.paper is not None and p.suite.paper not in PAPERS:
            raise BenchError(f"suite {self.name}: paper {p.suite.paper!r} is not one of: {', '.join(PAPERS)}")
        for method in p.methods:
            for needed in self.dependencies(method):
                if needed not in p.methods:
                    raise BenchError(f"suite {self.name}: method {method} needs the runs of {needed!r} (`needs`, or "
                                     f"a statistic comparing with it), which is not a method; add it to methods")
        for setting, overlay in p.settings.items():
            if unknown := [m for m in overlay.get("method_config") or {} if m not in p.methods]:
                raise BenchError(f"suite {self.name}: settings.{setting}.method_config names methods the suite lacks: "
                                 f"{', '.join(map(str, unknown))}")
            named = overlay.get("methods")
            if named is None:
                continue
            if not isinstance(named, list) or (unknown := [m for m in named if m not in p.methods]):
                raise BenchError(f"suite {self.name}: settings.{setting}.methods must list methods of the suite"
                                 + (f"; unknown: {', '.join(map(str, unknown))}" if isinstance(named, list) else ""))
            for method in named:
                if missing := [d for d in self.dependencies(method) if d not in named]:
                    raise BenchError(f"suite {self.name}: {method} runs on {setting} and needs the runs of "
                                     f"{', '.join(missing)} there; add them to settings.{setting}.methods")

    def runs_on(self, method: str, setting: str) -> bool:
        """Whether ``method`` runs on ``setting`` (every method does unless the setting names its ``methods``)."""
        named = self.params.settings[setting].get("methods")
        return named is None or method in named

    @property
    def paper(self) -> Paper | None:
        """The paper whose tables this suite makes, if any."""
        return PAPERS[self.params.suite.paper] if self.params.suite.paper else None

    def statistics(self, setting: str) -> list[Statistic]:
        """Every statistic of this setting's runs: the suite's, then those of the paper's cells on it."""
        named = list(self.params.suite.statistics)
        if self.paper is not None:
            named += [s for c in self.paper.definition.columns_for([setting]) for s in c.statistics.values()]
        return list({s.name: s for s in named}.values())

    def dependencies(self, method: str) -> list[str]:
        """The methods whose run (same setting and seed) this method's statistics or ``needs`` use."""
        references = [s.reference for setting in self.params.settings for s in self.statistics(setting)
                      if s.reference is not None]
        return [m for m in dict.fromkeys([*self.params.methods[method].needs, *references]) if m != method]

    def train_order(self, methods: list[str]) -> list[str]:
        """``methods`` with each after those of its dependencies that are among them (else in the order given)."""
        order: list[str] = []

        def visit(method: str, path: tuple[str, ...]) -> None:
            if method in path:
                raise BenchError(f"suite {self.name}: methods depend on each other in a circle "
                                 f"({' -> '.join((*path, method))}); remove one of their `needs`")
            for needed in self.dependencies(method):
                if needed in methods:
                    visit(needed, (*path, method))
            if method not in order:
                order.append(method)

        for method in methods:
            visit(method, ())
        return order

    def config(self, method: str, setting: str, seed: int, timed: bool = True) -> ExperimentConfig:
        """The run's resolved config. ``timed`` False resolves a ``time_of`` budget to the reference's rounds
        without its timing file (partitions, cost estimates)."""
        p = self.params
        if method not in p.methods:
            raise BenchError(f"suite {self.name} has no method {method!r}; methods: {', '.join(p.methods)}")
        if setting not in p.settings:
            raise BenchError(f"suite {self.name} has no setting {setting!r}; settings: {', '.join(p.settings)}")
        raw, budget = _merge([p.suite.base, p.settings[setting], p.methods[method].config,
                              (p.settings[setting].get("method_config") or {}).get(method, {})])
        raw["algorithm"] = p.methods[method].algorithm(method)
        raw["seed"] = seed
        raw["name"] = f"{self.name}-{method}-{setting}"
        raw.setdefault("tracking", {})["experiment"] = f"suite-{self.name}"
        try:
            if budget is not None:
                training = raw.setdefault("training", {})
                parsed = _budget(budget)
                seconds = self.round_seconds(setting, [method, parsed.time_of.method]) \
                    if parsed.time_of is not None and timed else None
                training["rounds"] = parsed.to_rounds(training.get("local_steps"), seconds, method)
            return build_config(raw)
        except BenchError as exc:
            raise BenchError(f"suite {self.name}, method {method}, setting {setting}: {exc}") from None

    def requests(self, method: str, data_dir: Path | None = None) -> list[RunRequest]:
        return [RunRequest(self.config(method, setting, seed), self.run_dir(method, setting, seed), data_dir,
                           self.partition_dir(setting) if (self.partition_dir(setting) / "partition.json").exists()
                           else None)
                for setting in self.params.settings if self.runs_on(method, setting) for seed in self.params.suite.seeds]

    def figure_config(self, figure: str) -> ExperimentConfig:
        """The config whose dataset and partition make one of the paper's partition figures."""
        raw, _ = _merge([self.params.suite.base, self.params.figures[figure]])
        raw.pop("public", None)  # a figure draws the partition only
        try:
            return build_config(raw)
        except BenchError as exc:
            raise BenchError(f"suite {self.name}, figure {figure}: {exc}") from None

    def partition_config(self, setting: str) -> ExperimentConfig:
        """The config whose dataset and partition make this setting's partition (any method will do)."""
        method = next(m for m in self.params.methods if self.runs_on(m, setting))
        return self.config(method, setting, self.params.suite.seeds[0], timed=False)

    def timed_settings(self) -> list[str]:
        """The settings whose budget (in ``base``, the setting or a method's ``config``) is ``time_of``."""
        p = self.params
        return [s for s in p.settings if any(
            (b := self.budget(key, s)) is not None and b.time_of is not None for key in p.methods if self.runs_on(key, s))]

    def budget(self, method: str, setting: str) -> Budget | None:
        """The budget of the method's runs on the setting (the last one its layers give), if any."""
        p = self.params
        raw = _merge([p.suite.base, p.settings[setting], p.methods[method].config,
                      (p.settings[setting].get("method_config") or {}).get(method, {})])[1]
        return None if raw is None else _budget(raw)

    @property
    def timing_path(self) -> Path:
        """The per-round times file (``suite.timing``, under the root, as results/ and partitions/ are)."""
        if self.params.suite.timing is None:
            raise BenchError(f"suite {self.name} has a time_of budget but no suite.timing file; name one "
                             "(e.g. timing/<suite>.json) and measure it with `bench suite time`")
        return self.root / self.params.suite.timing

    def round_seconds(self, setting: str, methods: list[str]) -> dict[str, float]:
        """The seconds per round the timing file records for ``methods`` on ``setting``."""
        path = self.timing_path
        try:
            recorded = json.loads(path.read_text())["settings"]
        except FileNotFoundError:
            raise BenchError(f"suite {self.name}: {path} not found; measure the per-round times of the time_of "
                             f"budgets first: `bench suite time --params {self.params_file}`") from None
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise BenchError(f"suite {self.name}: {path} is not a timing file ({exc}); measure it again with "
                             "`bench suite time`") from None
        missing = [m for m in methods if m not in recorded.get(setting, {})]
        if missing:
            raise BenchError(f"suite {self.name}: {path} has no time per round of {missing} on {setting}; measure "
                             "it again with `bench suite time`")
        return {m: float(recorded[setting][m]) for m in methods}

    @property
    def methods(self) -> list[str]:
        return list(self.params.methods)

    @cached_property
    def _paper_profile(self) -> Suite:
        return self.reload(["profile=null"])

    def paper_config(self, method: str, setting: str, seed: int) -> ExperimentConfig:
        """The config of a run of the ``paper`` profile (the params file's top level, no profile)."""
        return self._paper_profile.config(method, setting, seed)

    def reload(self, overrides: list[str]) -> Suite:
        """The suite its params file gives with ``overrides`` (e.g. another profile); itself if it has no file."""
        return load_suite(self.params_file, self.root, overrides) if self.params_file else self


def load_suite(params_file: str | Path, root: str | Path | None = None,
               overrides: list[str] | None = None) -> Suite:
    """Read a suite's params file; ``root`` (default: the file's folder) holds results/ and partitions/."""
    path = Path(params_file)
    raw = apply_overrides(read_yaml_mapping(path, "suite params file"), overrides or [])
    profile = raw.get("profile")
    if profile is not None:
        profiles = raw.get("profiles") or {}
        if profile not in profiles:
            raise BenchError(f"suite params file {path}: profile {profile!r} is not one of: "
                             f"{', '.join(profiles) or 'none defined'}")
        overlay = profiles[profile]
        raw = {**raw, "suite": deep_merge(raw.get("suite", {}), overlay.get("suite", {})),
               **{k: overlay[k] for k in ("settings", "methods", "figures") if k in overlay}}
    try:
        params = SuiteParams.model_validate(raw)
    except ValidationError as exc:
        raise BenchError(f"suite params file {path}: {describe_validation(exc)}") from None
    return Suite(params, Path(root) if root is not None else path.parent, path)


def _merge(layers: list[dict[str, Any]]) -> tuple[dict[str, Any], Any]:
    """The layers deep-merged in order without their ``budget`` (and a setting's ``methods``), and the last
    budget given (or None)."""
    raw: dict[str, Any] = {}
    for layer in layers:
        raw = deep_merge(raw, {k: v for k, v in layer.items() if k not in ("budget", "methods", "method_config")})
    return raw, next((layer["budget"] for layer in reversed(layers) if "budget" in layer), None)


def equal_time_rounds(reference_rounds: int, reference_seconds: float, seconds: float) -> int:
    """⌊R·s_ref / s⌋ (at least 1): the rounds completed in the time the reference takes for R rounds."""
    return max(1, math.floor(reference_rounds * reference_seconds / seconds + 1e-9))


def _budget(raw: Any) -> Budget:
    try:
        return Budget.model_validate(raw)
    except ValidationError as exc:
        raise BenchError(f"invalid budget: {describe_validation(exc)}") from None


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overlay`` merged in, recursively for nested mappings (neither is modified)."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else copy.deepcopy(value)
    return out
