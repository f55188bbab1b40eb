"""Suites: which runs make which table cell.

A suite is described by a params file (the root ``params.yaml`` for the default suite,
``pipelines/<paper>/params.yaml`` for a paper) with this shape::

    suite:    {name, seeds, jobs, base: <experiment config shared by every run>}
    settings: {<setting>: <config overlay: partition, dataset, model, ...>, ...}   # table columns
    methods:  {<method>: {name: <algorithm, default: the key>, <hyperparameters>...}, ...}  # rows
    profile:  <optional: the name of one entry of `profiles`>
    figures:  {<figure>: <config overlay of a partition to draw>, ...}              # optional
    profiles: {<profile>: {suite: <deep-merged>, settings/methods/figures: <replace>}}

A run is ``(method, setting, seed)``; its config is ``base`` deep-merged with the setting's overlay,
the method's algorithm section and the seed. With a profile the suite is named
``<name>-<profile>``. Results live in ``results/<suite>/<method>/<setting>/seed<seed>/`` and
partitions in ``partitions/<suite>/<setting>/``, both under the params file's folder.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.config import ExperimentConfig, apply_overrides, describe_validation, read_yaml_mapping
from bench.experiment import build_config
from bench.runner.executor import RunRequest
from bench.errors import BenchError


class SuiteSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    paper: str | None = Field(None, description="the paper module in bench/suites/ whose tables this suite makes")
    seeds: list[int] = Field(min_length=1)
    jobs: int = Field(2, ge=1, description="parallel single-threaded run processes")
    base: dict[str, Any] = Field(default_factory=dict)


class SuiteParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    suite: SuiteSection
    settings: dict[str, dict[str, Any]] = Field(min_length=1)
    methods: dict[str, dict[str, Any]] = Field(min_length=1)
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

    def config(self, method: str, setting: str, seed: int) -> ExperimentConfig:
        p = self.params
        if method not in p.methods:
            raise BenchError(f"suite {self.name} has no method {method!r}; methods: {', '.join(p.methods)}")
        if setting not in p.settings:
            raise BenchError(f"suite {self.name} has no setting {setting!r}; settings: {', '.join(p.settings)}")
        raw = deep_merge(p.suite.base, p.settings[setting])
        algorithm = dict(p.methods[method])
        algorithm.setdefault("name", method)
        raw["algorithm"] = algorithm
        raw["seed"] = seed
        raw["name"] = f"{self.name}-{method}-{setting}"
        raw.setdefault("tracking", {})["experiment"] = f"suite-{self.name}"
        try:
            return build_config(raw)
        except BenchError as exc:
            raise BenchError(f"suite {self.name}, method {method}, setting {setting}: {exc}") from None

    def requests(self, method: str, data_dir: Path | None = None) -> list[RunRequest]:
        return [RunRequest(self.config(method, setting, seed), self.run_dir(method, setting, seed), data_dir,
                           self.partition_dir(setting) if (self.partition_dir(setting) / "partition.json").exists()
                           else None)
                for setting in self.params.settings for seed in self.params.suite.seeds]

    def figure_config(self, figure: str) -> ExperimentConfig:
        """The config whose dataset and partition make one of the paper's partition figures."""
        raw = deep_merge(self.params.suite.base, self.params.figures[figure])
        raw.pop("public", None)  # a figure draws the partition only
        try:
            return build_config(raw)
        except BenchError as exc:
            raise BenchError(f"suite {self.name}, figure {figure}: {exc}") from None

    def partition_config(self, setting: str) -> ExperimentConfig:
        """The config whose dataset and partition make this setting's partition (any method will do)."""
        return self.config(next(iter(self.params.methods)), setting, self.params.suite.seeds[0])


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



def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overlay`` merged in, recursively for nested mappings (neither is modified)."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else copy.deepcopy(value)
    return out
