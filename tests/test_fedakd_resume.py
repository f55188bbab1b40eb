"""Resume of the state kinds FedAKD's methods added (tests/test_resume.py shows the pattern): a run killed after
round 2 and started again gives the records of an uninterrupted run bitwise — FedAKD's selected sets (the code
order carries them into the next round), the reputations and shares of CFFL / CGSV / FedAVE, FedSAC's
contributions and sub-model masks, pFedCK's interactive models and their optimisers, FedDC's drift and
correction variables."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import small_config
from tests.test_resume import assert_resumes_bitwise


@pytest.mark.parametrize("algorithm", [
    {"name": "fedakd", "mode": "code"},
    {"name": "cffl"},
    {"name": "cgsv", "mode": "code"},
    {"name": "fedave"},
    {"name": "fedsac", "contribution_epochs": 2, "allocation_round": 2, "model": "cnn"},  # conv filters to allocate
    {"name": "pfedck"},
    {"name": "feddc"},
    {"name": "fedas"},
], ids=lambda a: "-".join(str(v) for v in a.values()))
def test_a_resumed_run_equals_an_uninterrupted_one(data_dir: Path, tmp_path: Path, algorithm: dict) -> None:
    model = algorithm.pop("model", "mlp")
    cfg = small_config(algorithm=algorithm, training={"rounds": 3, "optimizer": {"name": "adam", "lr": 0.003}},
                       partition={"num_clients": 4, "local_test_fraction": 0.2, "validation_fraction": 0.1},
                       model={"name": model})
    assert_resumes_bitwise(cfg, data_dir, tmp_path)
