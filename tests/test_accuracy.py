"""FedAvg on digits learns what a centralised model of the same kind learns, and degrades as α falls."""
from __future__ import annotations

from pathlib import Path

from bench.runner.federation import run_federation
from tests.conftest import small_config

ROUNDS = 30


def _final_global_acc(data_dir: Path, **sections: object) -> float:
    cfg = small_config(training={"rounds": ROUNDS}, evaluation={"local_models": False}, **sections)
    return run_federation(cfg, data_dir).summary()["final"]["global_acc"]


def test_fedavg_tracks_centralised_and_degrades_with_heterogeneity(data_dir: Path) -> None:
    # centralised: one client with all the data, the same epochs, batch size and learning rate
    central = _final_global_acc(data_dir, partition={"num_clients": 1, "local_test_fraction": 0.0})
    iid = _final_global_acc(data_dir, partition={"scheme": "iid", "local_test_fraction": 0.0})
    mild = _final_global_acc(data_dir, partition={"scheme": "dirichlet", "alpha": 1.0, "local_test_fraction": 0.0})
    severe = _final_global_acc(data_dir, partition={"scheme": "dirichlet", "alpha": 0.05,
                                                    "local_test_fraction": 0.0})
    print(f"centralised {central:.4f}  iid {iid:.4f}  alpha=1 {mild:.4f}  alpha=0.05 {severe:.4f}")
    assert central > 0.95
    assert abs(central - iid) <= 0.03  # "within a few points"
    assert severe < iid - 0.01  # heterogeneity costs accuracy ...
    assert severe > 0.5  # ... gracefully, not a collapse
    assert mild > severe
