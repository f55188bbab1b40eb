"""FedProto — Tan et al., AAAI 2022, "FedProto: Federated prototype learning across heterogeneous
clients", as FedHKD adapts it (specs/fedhkd.md §4 FedProto).

After local training each client computes its class prototypes, the mean latent R(x) per class over
its train set (eval mode, no noise, no threshold), and uploads them with its class counts. The server
FedAvg-aggregates the models (so there is a global model, Table 1) and combines the prototypes class
by class. Local objective, from round 2 on (round 1 has no prototypes: plain CE):

    CE + λ_proto·(1/B)Σ_k ‖R(x_k) − C^{y_k}‖²,   λ_proto = 0.05 [P],

a sample whose class has no global prototype contributing 0. Options: ``proto_agg: counts`` (the
[R] count weighting of FedHKD Eq. 9, default) or ``uniform`` (original FedProto: the unweighted mean
over the clients holding the class); ``distance: sq_l2`` (the spec's formula, default) or ``mse``
(``nn.MSELoss`` as FedProto's code, i.e. additionally divided by d).
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ParameterAveraging
from bench.engine.knowledge import ClassStatistics, aggregate_class_statistics, class_statistics, feature_alignment
from bench.engine.state import Client, Server, Update


class FedProtoParams(AveragingParams):
    lam: float = Field(0.05, ge=0, description="λ_proto, weight of the prototype term")
    proto_agg: Literal["counts", "uniform"] = Field("counts", description="prototype weights N_i^j or 1")
    distance: Literal["sq_l2", "mse"] = Field("sq_l2", description="‖h − C^y‖², or that over d")


@register_algorithm("fedproto")
class FedProto(ParameterAveraging):
    Params = FedProtoParams
    params: FedProtoParams

    def broadcast(self, server: Server, client: Client) -> None:
        super().broadcast(server, client)
        client.extra["prototypes"] = server.extra.get("prototypes")

    def local_loss(self, client: Client, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        features, logits = client.model(x)
        loss = F.cross_entropy(logits, y)
        prototypes: ClassStatistics | None = client.extra.get("prototypes")
        if prototypes is None or self.params.lam == 0:
            return loss
        return loss + self.params.lam * feature_alignment(features, y, prototypes, self.params.distance)

    def local_update(self, round_index: int, server: Server, client: Client) -> tuple[Update, float]:
        update, loss = super().local_update(round_index, server, client)
        update.extra["prototypes"] = class_statistics(client.model, client.data.x, client.data.y,
                                                      self.ctx.num_classes)
        return update, loss

    def aggregate(self, round_index: int, server: Server, updates: list[Update]) -> None:
        super().aggregate(round_index, server, updates)
        server.extra["prototypes"] = aggregate_class_statistics([u.extra["prototypes"] for u in updates],
                                                                self.params.proto_agg)
