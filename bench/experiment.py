"""Resolving a raw config into an :class:`~bench.config.ExperimentConfig` checked against the registries.

:mod:`bench.config` holds the schemas and imports no other room; this module sits above the
registries (datasets, partition schemes, models, algorithms) and checks what the schemas cannot:
that every name is registered, that the algorithm's and the scheme's flat parameters are valid (their
defaults filled in, so the config hash covers them), and that the dataset can hold the federation.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.algorithms import get_algorithm
from bench.config import (ExperimentConfig, apply_overrides, describe_validation, read_yaml_mapping,
                          validate_params)
from bench.data import get_dataset_spec
from bench.data.partition import get_partitioner
from bench.errors import BenchError
from bench.models import CLASSIFIER, get_model_entry


def _schema(raw: dict[str, Any]) -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise BenchError(f"invalid config: {describe_validation(exc)}") from None


def build_config(raw: dict[str, Any], overrides: list[str] | None = None) -> ExperimentConfig:
    """Validate a raw config dict (plus ``key.path=value`` overrides) into a resolved config."""
    raw = apply_overrides(raw or {}, overrides or [])
    cfg = _schema(raw)
    spec = get_dataset_spec(cfg.dataset.name)
    for name in (cfg.model.name, *cfg.model.candidates):
        if (kind := get_model_entry(name).kind) != CLASSIFIER:
            raise BenchError(f"invalid config: model {name!r} is a {kind}, not a classifier; `bench models` lists "
                             "the classifiers")
    if cfg.partition.num_clients > spec.num_train:
        raise BenchError(f"invalid config: partition.num_clients={cfg.partition.num_clients} exceeds the "
                         f"{spec.num_train} training samples of {spec.name}")
    if cfg.training.batch_size > spec.num_train:
        raise BenchError(f"invalid config: training.batch_size={cfg.training.batch_size} exceeds the "
                         f"{spec.num_train} training samples of {spec.name}; no client holds that many")
    partition = validate_params(get_partitioner(cfg.partition.scheme).params, cfg.partition.scheme_params,
                                "partition")
    algorithm = validate_params(get_algorithm(cfg.algorithm.name).Params, cfg.algorithm.params, "algorithm")
    if cfg.training.on_divergence == "train_on" and algorithm.get("mode") == "paper":
        raise BenchError("invalid config: training.on_divergence: train_on reproduces a released code that trains on "
                         "after a divergence; it needs algorithm.mode: code (paper mode stops at a divergence)")
    resolved = cfg.to_dict()
    resolved["partition"] = {k: v for k, v in resolved["partition"].items() if k not in cfg.partition.scheme_params}
    resolved["partition"].update(partition)
    resolved["algorithm"] = {"name": cfg.algorithm.name, **algorithm}
    return _schema(resolved)


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    return build_config(read_yaml_mapping(path), overrides)
