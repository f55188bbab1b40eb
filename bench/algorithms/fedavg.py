"""FedAvg — McMahan et al., "Communication-efficient learning of deep networks from decentralized
data", AISTATS 2017.

Local objective: cross-entropy. Server:  θ^{t+1} = Σ_{k∈S_t} (n_k / Σ_{j∈S_t} n_j) θ_k^t
(specs/fedhkd.md §4, specs/dafkd.md §2.1), applied to the full state dict, BatchNorm running
statistics included; ``num_batches_tracked`` is copied (specs/fedhkd.md §11.3, fedakd.md §1.6).
``weighting: uniform`` gives the unweighted mean some official code uses (anchors.md §2.2).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.engine.aggregate import weighted_average
from bench.engine.state import Server, Update


class FedAvgParams(AlgorithmParams):
    weighting: Literal["samples", "uniform"] = Field("samples", description="aggregation weights n_k or 1")


@register_algorithm("fedavg")
class FedAvg(Algorithm):
    Params = FedAvgParams
    params: FedAvgParams

    def aggregate(self, round_index: int, server: Server, updates: list[Update]) -> None:
        assert server.model is not None
        weights = [u.num_samples if self.params.weighting == "samples" else 1.0 for u in updates]
        server.model.load_state_dict(weighted_average([u.state for u in updates], weights))
