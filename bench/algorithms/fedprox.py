"""FedProx — Li et al., "Federated optimization in heterogeneous networks", MLSys 2020.

Local objective:  CE(w) + (μ/2)·‖w − w^t‖²  over trainable parameters (not BN buffers), with w^t
the frozen global model received this round (pipelines/fedhkd/NOTES.md §4, pipelines/dafkd/NOTES.md §2.2). Server:
FedAvg. Default μ = 0.01 (pipelines/dafkd/NOTES.md §2.2 [I]); FedHKD's tables use μ = 0.5.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ModelAveraging
from bench.engine.loop import Step
from bench.engine.messages import ModelBroadcast
from bench.engine.state import Client, NoState


class FedProxParams(AveragingParams):
    mu: float = Field(0.01, ge=0, description="proximal coefficient μ")


@dataclass
class FedProxClient(NoState):
    global_params: list[torch.Tensor] = field(default_factory=list)  # w^t, as received this round


def proximal_term(params: list[torch.Tensor], global_params: list[torch.Tensor]) -> torch.Tensor:
    """‖w − w^t‖² over the trainable parameters."""
    return sum(((w - w_t) ** 2).sum() for w, w_t in zip(params, global_params))  # type: ignore[return-value]  # typeshed: sum() is Tensor | Literal[0]


@register_algorithm("fedprox")
class FedProx(ModelAveraging[FedProxClient, NoState]):
    Params = FedProxParams
    params: FedProxParams
    ClientState = FedProxClient
    resident_models = 2  # the local model and the frozen global copy w^t

    def receive_broadcast(self, client: Client[FedProxClient], message: ModelBroadcast[None]) -> None:
        super().receive_broadcast(client, message)
        client.state.global_params = [p.detach().clone() for p in client.model.parameters()]

    def local_loss(self, step: Step, client: Client[FedProxClient], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = super().local_loss(step, client, x, y)
        if self.params.mu == 0:
            return loss
        return loss + 0.5 * self.params.mu * proximal_term(list(client.model.parameters()), client.state.global_params)
