"""Suites: which runs make which table cell.

A suite is described by a params file (the root ``params.yaml`` for the default suite,
``pipelines/<paper>/params.yaml`` for a paper) with this shape::

    suite:    {name, seeds, jobs, executor: serial|processes|ray, ray: {address, cpus_per_run, gpus_per_run,
               max_retries}, checkpoint_every: <rounds, default 1>,
               checkpoint_interval_s: <seconds, default 60>,
               paper: <optional: the paper whose tables this suite makes: its plug-in's module file relative to
                       this params file (paper.py), or a registered paper's name; bench/suites/plugins.py>,
               statistics: [<statistic name>, ...],   # pinned and compared (default: DEFAULT_STATISTICS)
               timing: <optional: per-round times file of `time_of` budgets, relative to the root>,
               base: <experiment config shared by every run>}
    settings: {<setting>: <config overlay: partition, dataset, model, budget, ...; optional `methods:`
               [<the methods run on this setting>, ...], default every method; optional `method_config:`
               {<method>: <overlay of that method's runs here>}>, ...}                      # columns
    methods:  {<method>: {name: <algorithm, default: the key>, <hyperparameters>...,        # rows
                          config: <optional: overlay of any config section, e.g. {training: {local_steps: 5}}>,
                          needs: <optional: [<method whose run this one needs>, ...]>,
                          settings: <optional: [<setting>, ...], the only settings it runs on>,
                          per_setting: <optional: {<setting>: {<hyperparameter>: value, config: <overlay>}}>}, ...}
    profile:  <optional: the name of one entry of `profiles`>
    figures:  {<figure>: <config overlay of a partition to draw; `plot: heatmap|bubbles`>, ...}   # optional
    profiles: {<profile>: {suite: <deep-merged>, settings/methods/figures: <replace>,
                           overlay: {settings/methods: {<name>: <deep-merged into that entry>}}}}

A run is ``(method, setting, seed)`` wherever the method runs: on every setting unless the setting names
its ``methods`` (a paper table whose column has fewer rows) or the method names its ``settings`` (a
sensitivity study of one method, an ablation on some columns); both lists filter. Its config is ``base``
deep-merged with the setting's overlay, the method's ``config`` overlay, its ``per_setting`` entry for
the setting and the setting's ``method_config`` of the method (per-(method, setting) values are declared on
either side: a method's ``per_setting`` also takes hyperparameters, e.g. FedGen's EMNIST values; a setting's
``method_config`` moves with the setting into a profile, e.g. Standalone's per-dataset learning rate), then
the method's algorithm section and the seed;
``evaluation.every_iterations: I`` evaluates every I / training.local_steps rounds. ``budget``
(in ``base``, a setting or a method's ``config``; the last one given wins) sets the training
length: ``{rounds: R}``, or ``{iterations: I}`` for R = I / training.local_steps (FedAL's
iteration budgets with per-method τ, pipelines/fedal/NOTES.md A11, A15), or ``{time_of: {method: M, rounds: R}}``:
the rounds this method completes in the wall-clock time M takes for R rounds, ⌊R·s_M/s⌋ with s the
seconds per round the suite's ``timing`` file records for the setting (``bench suite time`` measures
them; FedAKD's Table 3, pipelines/fedakd/NOTES.md §8 R8), so the runs stay deterministic given that file. With a profile the suite is named
``<name>-<profile>``. Results live in ``results/<suite>/<method>/<setting>/seed<seed>/`` and
partitions in ``partitions/<suite>/<setting>/``, both under the params file's folder.

A run may depend on another method's run on the same setting and seed: through ``needs``, or
because a statistic compares with it (CF against Standalone, pipelines/fedakd/NOTES.md §3.1).
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
from bench.runner.checkpoint import CheckpointPolicy
from bench.runner.executor import RunRequest
from bench.errors import BenchError
from bench.suites.paper import Paper
from bench.suites.plugins import find_paper
from bench.suites.statistics import Statistic

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
    paper: str | None = Field(None, description=(
        "the paper whose tables this suite makes: its plug-in's module file relative to the params file "
        "(e.g. paper.py), or the name of a registered paper (bench/suites/plugins.py)"))
    seeds: list[int] = Field(min_length=1)
    jobs: int = Field(2, ge=1, description="parallel single-threaded runs (processes, or a local Ray cluster's CPUs)")
    executor: Literal["serial", "processes", "ray"] = Field("processes", description="where runs execute")
    ray: RaySection = Field(default_factory=lambda: RaySection())
    statistics: list[Statistic] = Field(
        default_factory=lambda: [Statistic.model_validate(s) for s in DEFAULT_STATISTICS],
        description="pinned and compared for every run; the paper's cells add theirs")
    checkpoint_every: int = Field(1, ge=0, description=(
        "each run may write its checkpoint after every this many rounds (0: never). Results never depend on it"))
    checkpoint_interval_s: float = Field(60.0, ge=0, allow_inf_nan=False, description=(
        "and at least this many seconds apart, and 50 times as long as the last one took to write (at most 2 % "
        "of a run's time; 0: after every checkpoint_every-th round whatever it costs; "
        "bench/runner/checkpoint.py). Results never depend on it"))
    timing: str | None = Field(None, description="the per-round times file of `time_of` budgets (bench suite time), "
                                                 "relative to the suite's root")
    partition_seed: Literal["setting", "run"] = Field("setting", description=(
        "setting: every run of a setting trains on the one partition `partition.seed` draws (partitions/<suite>/"
        "<setting>/); run: each run seed s draws its own, with partition seed `partition.seed` + s (partitions/"
        "<suite>/<setting>/seed<s>/), so the spread over seeds includes the partition's"))
    base: dict[str, Any] = Field(default_factory=dict)


class Method(BaseModel):
    """A table row: the algorithm section (``name`` plus flat hyperparameters), an overlay of any
    other config section, and the methods whose runs this one needs."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str | None = Field(None, description="the algorithm (default: the method's key)")
    config: dict[str, Any] = Field(default_factory=dict)
    needs: list[str] = Field(default_factory=list)
    settings: list[str] | None = Field(None, min_length=1, description=(
        "the settings this method runs on (a sensitivity study, an ablation's columns); None: every setting"))
    per_setting: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "hyperparameters (and a `config` overlay) that differ on some settings, e.g. FedGen's EMNIST values or "
        "FedDF's public set of 10 % of each dataset; over the method's own"))

    @model_validator(mode="after")
    def _no_algorithm_overlay(self) -> Method:
        overlays = [self.config, *(layer.get("config") or {} for layer in self.per_setting.values())]
        if any("algorithm" in overlay for overlay in overlays):
            raise ValueError("config.algorithm: put the algorithm's keys beside `name`, not under `config`")
        return self

    def algorithm_name(self, key: str) -> str:
        """The algorithm this entry runs: its ``name``, defaulting to its key in ``methods``."""
        return self.name or key

    def algorithm(self, key: str, setting: str | None = None) -> dict[str, Any]:
        specific = {k: v for k, v in self.per_setting.get(setting or "", {}).items() if k != "config"}
        return {**(self.model_extra or {}), **specific, "name": self.algorithm_name(key)}

    def overlay(self, setting: str) -> dict[str, Any]:
        """The method's config overlay on ``setting``: its ``config``, then that setting's ``per_setting`` one."""
        return deep_merge(self.config, self.per_setting.get(setting, {}).get("config", {}))


class TimeOf(BaseModel):
    """The wall-clock time ``method`` takes for ``rounds`` rounds on the same setting and hardware."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    method: str
    rounds: int = Field(ge=1)


class Budget(BaseModel):
    """The training length: rounds, iterations (rounds × training.local_steps, pipelines/fedal/NOTES.md A11), or the
    wall-clock time of another method's rounds (``time_of``); ``rounding: down`` takes the whole rounds
    within the iterations where τ does not divide them (FedAL's FedDF-AL, τ = 15, at 5000 iterations: 333
    rounds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rounds: int | None = Field(None, ge=1)
    iterations: int | None = Field(None, ge=1)
    rounding: Literal["exact", "down"] = Field("exact", description="iterations not a multiple of local_steps: "
                                                                     "an error (exact) or the rounds that fit (down)")
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
        if self.iterations % local_steps and self.rounding == "down" and self.iterations >= local_steps:
            return self.iterations // local_steps
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

    def partition_seeds(self) -> list[int | None]:
        """The run seeds that draw their own partition (``partition_seed: run``); [None]: one partition a setting."""
        return list(self.params.suite.seeds) if self.params.suite.partition_seed == "run" else [None]

    def partition_key(self, setting: str, seed: int | None) -> tuple[str, int | None]:
        """Which saved partition the run (setting, seed) trains on: (setting, seed), or (setting, None) when the
        setting has one."""
        return setting, seed if self.params.suite.partition_seed == "run" else None

    def partition_dir(self, setting: str, seed: int | None = None) -> Path:
        """The folder of the partition the run (setting, ``seed``) trains on (``seed`` None: the first seed's)."""
        folder = self.root / "partitions" / self.name / setting
        if self.params.suite.partition_seed == "run":
            return folder / f"seed{self.params.suite.seeds[0] if seed is None else seed}"
        return folder

    def run_dir(self, method: str, setting: str, seed: int) -> Path:
        return self.results_dir(method) / setting / f"seed{seed}"

    def __post_init__(self) -> None:
        p = self.params
        try:
            self.paper  # finds (imports) the paper's plug-in now: a wrong `suite.paper` fails on loading the suite
        except BenchError as exc:
            raise BenchError(f"suite {self.name}: {exc}") from None
        for setting, overlay in p.settings.items():
            for field in ("methods", "method_config"):
                if unknown := [m for m in overlay.get(field) or () if m not in p.methods]:
                    raise BenchError(f"suite {self.name}: settings.{setting}.{field} names methods {unknown} that the "
                                     f"suite does not have (methods: {', '.join(p.methods)})")
        for method, entry in p.methods.items():
            for field in ("settings", "per_setting"):
                if unknown := [s for s in getattr(entry, field) or () if s not in p.settings]:
                    raise BenchError(f"suite {self.name}: method {method} lists settings {unknown} that are not "
                                     f"settings of the suite ({', '.join(p.settings)}); fix its `{field}`")
            for needed in self.dependencies(method):
                if needed not in p.methods:
                    raise BenchError(f"suite {self.name}: method {method} needs the runs of {needed!r} (`needs`, or "
                                     f"a statistic comparing with it), which is not a method; add it to methods")
                if missing := [s for s in self.settings_of(method) if s not in self.settings_of(needed)]:
                    raise BenchError(f"suite {self.name}: method {method} needs the runs of {needed} on {missing}, "
                                     f"where {needed} does not run; add them to its `settings`")

    def runs_on(self, method: str, setting: str) -> bool:
        """Whether the suite runs ``method`` on ``setting``: the setting names it in its ``methods`` (default:
        every method) and the method names the setting in its ``settings`` (default: every setting)."""
        chosen = self.params.settings[setting].get("methods")
        only = self.params.methods[method].settings
        return (chosen is None or method in chosen) and (only is None or setting in only)

    def settings_of(self, method: str) -> list[str]:
        """The settings ``method`` runs on, in the suite's order."""
        return [s for s in self.params.settings if self.runs_on(method, s)]

    @cached_property
    def paper(self) -> Paper | None:
        """The paper whose tables this suite makes, if any (its plug-in, bench/suites/plugins.py)."""
        reference = self.params.suite.paper
        if reference is None:
            return None
        return find_paper(reference, self.params_file.parent if self.params_file else self.root)

    @property
    def settings(self) -> list[str]:
        return list(self.params.settings)

    @property
    def seeds(self) -> list[int]:
        return list(self.params.suite.seeds)

    def statistics(self, setting: str) -> list[Statistic]:
        """Every statistic of this setting's runs: the suite's, then those of the paper's cells on it."""
        named = list(self.params.suite.statistics)
        if self.paper is not None:
            named += [s for c in self.paper.definition.columns_for([setting]) for s in c.statistics.values()]
        return list({s.name: s for s in named}.values())

    def dependencies(self, method: str) -> list[str]:
        """The methods whose run (same setting and seed) this method's statistics or ``needs`` use."""
        references = [s.reference for setting in self.settings_of(method) for s in self.statistics(setting)
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

    def _layers(self, method: str, setting: str) -> list[dict[str, Any]]:
        """The config layers of a run, merged in order: base, the setting, the method's overlay there (its
        ``config`` and ``per_setting``), the setting's ``method_config`` of the method."""
        p = self.params
        return [p.suite.base, p.settings[setting], p.methods[method].overlay(setting),
                (p.settings[setting].get("method_config") or {}).get(method, {})]

    def config(self, method: str, setting: str, seed: int, timed: bool = True) -> ExperimentConfig:
        """The run's resolved config. ``timed`` False resolves a ``time_of`` budget to the reference's rounds
        without its timing file (partitions, cost estimates)."""
        p = self.params
        if method not in p.methods:
            raise BenchError(f"suite {self.name} has no method {method!r}; methods: {', '.join(p.methods)}")
        if setting not in p.settings:
            raise BenchError(f"suite {self.name} has no setting {setting!r}; settings: {', '.join(p.settings)}")
        raw, budget = _merge(self._layers(method, setting))
        raw["algorithm"] = p.methods[method].algorithm(method, setting)
        raw["seed"] = seed
        if p.suite.partition_seed == "run":
            partition = raw.setdefault("partition", {})
            partition["seed"] = int(partition.get("seed", 0)) + seed
        raw["name"] = f"{self.name}-{method}-{setting}"
        raw.setdefault("tracking", {})["experiment"] = f"suite-{self.name}"
        try:
            training = raw.setdefault("training", {})
            if budget is not None:
                parsed = _budget(budget)
                seconds = self.round_seconds(setting, [method, parsed.time_of.method]) \
                    if parsed.time_of is not None and timed else None
                training["rounds"] = parsed.to_rounds(training.get("local_steps"), seconds, method)
            evaluation = raw.get("evaluation") or {}
            if "every_iterations" in evaluation:  # evaluate every I iterations: every I / τ rounds (at least 1)
                every = evaluation.pop("every_iterations")
                steps = training.get("local_steps")
                if steps is None:
                    raise BenchError(f"evaluation.every_iterations={every} needs training.local_steps (iterations per "
                                     "round); set it, or give evaluation.every in rounds")
                evaluation["every"] = max(1, int(every) // int(steps))
            return build_config(raw)
        except BenchError as exc:
            raise BenchError(f"suite {self.name}, method {method}, setting {setting}: {exc}") from None

    def requests(self, method: str, data_dir: Path | None = None) -> list[RunRequest]:
        return [RunRequest(self.config(method, setting, seed), self.run_dir(method, setting, seed), data_dir,
                           self.partition_dir(setting, seed)
                           if (self.partition_dir(setting, seed) / "partition.json").exists() else None, CheckpointPolicy(self.params.suite.checkpoint_every,
                                                       self.params.suite.checkpoint_interval_s))
                for setting in self.settings_of(method) for seed in self.params.suite.seeds]

    def figure_config(self, figure: str) -> ExperimentConfig:
        """The config whose dataset and partition make one of the paper's partition figures."""
        raw, _ = _merge([self.params.suite.base, {k: v for k, v in self.params.figures[figure].items() if k != "plot"}])
        raw.pop("public", None)  # a figure draws the partition only
        raw.pop("evaluation", None)
        try:
            return build_config(raw)
        except BenchError as exc:
            raise BenchError(f"suite {self.name}, figure {figure}: {exc}") from None

    def figure_plot(self, figure: str) -> str:
        """How a partition figure is drawn: ``heatmap`` (client x class counts, FedHKD Figs. 1-3; default) or
        ``bubbles`` (FedAL Fig. 4)."""
        plot = self.params.figures[figure].get("plot", "heatmap")
        if plot not in ("heatmap", "bubbles"):
            raise BenchError(f"suite {self.name}, figure {figure}: plot {plot!r} is not heatmap or bubbles")
        return plot

    def partition_config(self, setting: str, seed: int | None = None) -> ExperimentConfig:
        """The config whose dataset and partition make the partition of the run (setting, ``seed``; None: the
        first seed) — any method run there will do."""
        method = next((m for m in self.params.methods if self.runs_on(m, setting)), next(iter(self.params.methods)))
        return self.config(method, setting, self.params.suite.seeds[0] if seed is None else seed, timed=False)

    def timed_settings(self) -> list[str]:
        """The settings whose budget (in ``base``, the setting or a method's ``config``) is ``time_of``."""
        p = self.params
        return [s for s in p.settings if any(
            (b := self.budget(key, s)) is not None and b.time_of is not None for key in p.methods if self.runs_on(key, s))]

    def budget(self, method: str, setting: str) -> Budget | None:
        """The budget of the method's runs on the setting (the last one its layers give), if any."""
        p = self.params
        raw = _merge(self._layers(method, setting))[1]
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
        for section, entries in (overlay.get("overlay") or {}).items():
            if section not in ("settings", "methods") or not isinstance(entries, dict):
                raise BenchError(f"suite params file {path}: profiles.{profile}.overlay.{section}: only settings and "
                                 "methods entries can be overlaid")
            if unknown := [name for name in entries if name not in (raw.get(section) or {})]:
                raise BenchError(f"suite params file {path}: profiles.{profile}.overlay.{section}: {unknown} are not "
                                 f"{section} of the suite")
            raw[section] = {**raw[section], **{name: deep_merge(raw[section][name], layer)
                                               for name, layer in entries.items()}}
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
