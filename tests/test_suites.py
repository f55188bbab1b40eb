from __future__ import annotations

from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.suites import load_suite

PARAMS = """
suite:
  name: demo
  seeds: [0, 1]
  base:
    partition: {num_clients: 5}
    training: {rounds: 40}
settings:
  a: {partition: {scheme: iid}}
  b: {partition: {scheme: dirichlet, alpha: 0.3}, model: {name: mlp}}
methods:
  fedavg: {name: fedavg}
  prox: {name: fedprox, mu: 0.2}
profiles:
  small:
    suite: {seeds: [0], base: {training: {rounds: 2}}}
    settings: {only: {partition: {scheme: shards}}}
"""


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS)
    return path


def test_run_config_merges_base_setting_method_and_seed(params_file: Path) -> None:
    suite = load_suite(params_file)
    cfg = suite.config("prox", "b", 1)
    assert (cfg.partition.scheme, cfg.partition.scheme_params["alpha"], cfg.partition.num_clients) == ("dirichlet", 0.3, 5)
    assert cfg.model.name == "mlp" and cfg.training.rounds == 40 and cfg.seed == 1
    assert cfg.algorithm.name == "fedprox" and cfg.algorithm.params["mu"] == 0.2
    assert suite.config("fedavg", "a", 0).model.name == "cnn"  # a setting overlays only what it names
    assert suite.run_dir("prox", "b", 1) == params_file.parent / "results" / "demo" / "prox" / "b" / "seed1"
    assert len(suite.requests("prox")) == 4


def test_profile_overlays_suite_and_replaces_settings(params_file: Path) -> None:
    suite = load_suite(params_file, overrides=["profile=small"])
    assert suite.name == "demo-small" and suite.params.suite.seeds == [0]
    assert list(suite.params.settings) == ["only"] and list(suite.params.methods) == ["fedavg", "prox"]
    cfg = suite.config("fedavg", "only", 0)
    assert cfg.training.rounds == 2 and cfg.partition.num_clients == 5 and cfg.partition.scheme == "shards"


@pytest.mark.parametrize("overrides, message", [
    (["profile=large"], "profile 'large' is not one of: small"),
    (["suite.seeds=[]"], "suite.seeds"),
    (["settingz={}"], "settingz: unknown key"),
])
def test_bad_suite_params(params_file: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(BenchError, match=message):
        load_suite(params_file, overrides=overrides)


def test_bad_run_config_names_method_and_setting(params_file: Path) -> None:
    suite = load_suite(params_file, overrides=["methods.prox.mu=-1"])
    with pytest.raises(BenchError, match="method prox, setting a: invalid config: algorithm.mu"):
        suite.config("prox", "a", 0)
