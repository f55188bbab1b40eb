"""The architecture document's worked example: a lockstep public-set method in one file, outside the
package, run by the unchanged engine and runner."""
from __future__ import annotations

from pathlib import Path

import examples.plugins.codistill  # noqa: F401  (registers "codistill")
from bench.runner.federation import run_federation
from tests.conftest import small_config


def test_codistill_runs_black_box_heterogeneous_clients_reproducibly(data_dir: Path) -> None:
    cfg = small_config(algorithm={"name": "codistill", "distill_steps": 3}, public={"size": 64, "source": "carve"},
                       model={"name": "cnn", "candidates": ["cnn", "mlp"]},
                       partition={"num_clients": 4, "local_test_fraction": 0.2}, training={"rounds": 2})
    first, second = run_federation(cfg, data_dir), run_federation(cfg, data_dir)
    assert first.curves == second.curves
    assert {type(c.model).__name__ for c in first.state.clients} == {"SmallCNN", "MLP"}
    assert first.curves[-1]["local_acc"] > 0.3 and first.curves[-1]["distill_loss"] >= 0
    assert "global_acc" not in first.curves[-1]  # no global model
