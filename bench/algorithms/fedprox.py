"""FedProx — Li et al., "Federated optimization in heterogeneous networks", MLSys 2020.

Local objective:  CE(w) + (μ/2)·‖w − w^t‖²  over trainable parameters (not BN buffers), with w^t
the frozen global model received this round (specs/fedhkd.md §4, specs/dafkd.md §2.2). Server:
FedAvg. Default μ = 0.01 (specs/dafkd.md §2.2 [I]); FedHKD's tables use μ = 0.5.
"""
from __future__ import annotations

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ParameterAveraging
from bench.engine.state import Client, Server


class FedProxParams(AveragingParams):
    mu: float = Field(0.01, ge=0, description="proximal coefficient μ")


@register_algorithm("fedprox")
class FedProx(ParameterAveraging):
    Params = FedProxParams
    params: FedProxParams
    resident_models = 2  # the local model and the frozen global copy w^t

    def broadcast(self, server: Server, client: Client) -> None:
        super().broadcast(server, client)
        client.extra["global_params"] = [p.detach().clone() for p in client.model.parameters()]

    def local_loss(self, client: Client, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = super().local_loss(client, x, y)
        if self.params.mu == 0:
            return loss
        proximal = sum(((w - w_t) ** 2).sum() for w, w_t in zip(client.model.parameters(),
                                                                client.extra["global_params"]))
        return loss + 0.5 * self.params.mu * proximal
