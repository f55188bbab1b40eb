from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

# The tests run at the CPU-kernel level the pinned suites use (docs/determinism.md "CPU kernels"), set before
# `bench` is imported: several compare two code paths bitwise or to float32 rounding (the no-correlation ablation
# against uniform weights, clients trained together against the serial loop), which the pins' level was checked
# to give; the levels themselves are tested in test_architecture.py with explicit environments. The benchmarks
# (benchmarks/conftest.py) keep the native default.
os.environ.setdefault("BENCH_CPU_KERNELS", "portable")

from bench.config import ExperimentConfig  # noqa: E402
from bench.experiment import build_config  # noqa: E402
from bench.data import prepare_dataset  # noqa: E402


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with the embedded digits prepared once per session."""
    folder = tmp_path_factory.mktemp("data")
    prepare_dataset("digits", folder)
    return folder


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests never touch the project's data/ or mlflow.db."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)


def small_config(**sections: Any) -> ExperimentConfig:
    """A fast digits config (3 rounds, MLflow off) with sections merged in."""
    raw: dict[str, Any] = {"training": {"rounds": 3}, "tracking": {"mlflow": False}}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return build_config(raw)


def copy_pipeline(paper: str, project: Path) -> Path:
    """``pipelines/<paper>/``'s dvc.yaml and paper plug-in (paper.yaml and the folder's modules) copied into a
    scratch ``project``; returns the copy's folder, whose params.yaml the caller writes."""
    folder = project / "pipelines" / paper
    folder.mkdir(parents=True)
    for path in (Path(__file__).resolve().parents[1] / "pipelines" / paper).iterdir():
        if path.name in ("dvc.yaml", "paper.yaml") or path.suffix == ".py":
            shutil.copy(path, folder)
    return folder


def run_dvc(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``dvc ARGS`` in ``project`` with this environment's interpreter (and its ``bench`` on PATH), offline."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DVC_NO_ANALYTICS": "1"}
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=1800)


class DiagonalLinear(torch.nn.Module):
    """(features, logits) as the project's models return them, with features = x and logits = x · diag(1, 2): a model
    whose losses a test computes by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.classifier = torch.nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            self.classifier.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.classifier(x)
