"""FedProto — Tan et al., AAAI 2022, "FedProto: Federated prototype learning across heterogeneous
clients", as FedHKD adapts it (pipelines/fedhkd/NOTES.md §4 FedProto).

After local training each client computes its class prototypes, the mean latent R(x) per class over
its train set (eval mode, no noise, no threshold), and uploads them with its class counts. The server
FedAvg-aggregates the models (so there is a global model, Table 1) and combines the prototypes class
by class. Local objective, from round 2 on (round 1 has no prototypes: plain CE):

    CE + λ_proto·(1/(B·d))Σ_k ‖R(x_k) − C^{y_k}‖²,   λ_proto = 0.05 [P A.1],

a sample whose class has no global prototype contributing 0 (it still counts in B).

Reading of the distance (``distance``). The squared-norm reading, ``sq_l2``, is
(1/B)Σ_k ‖R(x_k) − C^{y_k}‖²; the MSE reading, ``mse`` (pipelines/fedhkd/NOTES.md §4, as the code does),
divides it by d; the two differ by the factor d (32 on SVHN, 64 on CIFAR). Both
reference implementations use ``nn.MSELoss()`` over the B × d feature matrix, with the feature itself
(detached) as the target of a sample whose class has no prototype:

* FedProto's official code (yuetan031/FedProto, ``lib/update.py`` ``update_weights_het``:
  ``loss2 = nn.MSELoss()(proto_new, protos)``; ``loss = loss1 + loss2 * args.ld``, ``--ld`` 1 by
  default in ``lib/options.py``, 0.1 in its README's CIFAR-10 command);
* FedHKD's released FedProto baseline (CityChan/Federated-Hyper-Knowledge-Distillation,
  ``Client/ClientFedProto.py`` ``update_weights_Proto``: ``loss2 = self.mse(F, target_features)`` with
  ``self.mse = nn.MSELoss()`` from ``Client/ClientBase.py``; ``loss = loss1 + gamma*loss2``, ``--gamma``
  0.05 by default in ``option.py``, 0.1 in the 2022-07 ``cifar10_training.sh``).

So the default is ``mse`` (the references' reading; the weight stays the paper's λ_proto = 0.05), and
``sq_l2`` (the squared-norm reading, d times stronger) is the option.

Prototype aggregation (``proto_agg``): ``counts`` (the [R] count weighting of FedHKD Eq. 9, default) or
``uniform`` (original FedProto: the unweighted mean over the clients holding the class).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ParameterAveraging
from bench.engine.knowledge import ClassStatistics, aggregate_class_statistics, class_statistics, feature_alignment
from bench.engine.loop import Step
from bench.engine.messages import Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server


class FedProtoParams(AveragingParams):
    lam: float = Field(0.05, ge=0, description="λ_proto, weight of the prototype term")
    proto_agg: Literal["counts", "uniform"] = Field("counts", description="prototype weights N_i^j or 1")
    distance: Literal["mse", "sq_l2"] = Field("mse", description="‖h − C^y‖² over d (nn.MSELoss, the references), "
                                                                   "or not divided by d (the squared-norm reading)")


@dataclass
class Prototypes(NoState):
    """The global prototypes C^j: held by the server, received by each client (None in round 1)."""

    prototypes: ClassStatistics | None = None


@register_algorithm("fedproto")
class FedProto(ParameterAveraging[Prototypes, Prototypes, ClassStatistics | None, ClassStatistics]):
    """Both messages carry prototypes besides the model: the global ones down, the client's class prototypes and
    counts up."""

    Params = FedProtoParams
    params: FedProtoParams
    ClientState = ServerState = Prototypes

    def broadcast_payload(self, round_index: int, server: Server[Prototypes], cid: int) -> ClassStatistics | None:
        return server.state.prototypes

    def receive_payload(self, client: Client[Prototypes], payload: ClassStatistics | None) -> None:
        client.state.prototypes = payload

    def local_loss(self, step: Step, client: Client[Prototypes], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        features, logits = client.model(x)
        loss = F.cross_entropy(logits, y)
        prototypes = client.state.prototypes
        if prototypes is None or self.params.lam == 0:
            return loss
        return loss + self.params.lam * feature_alignment(features, y, prototypes, self.params.distance)

    def update_payload(self, client: Client[Prototypes]) -> ClassStatistics:
        return class_statistics(client.model, client.data.x, client.data.y, self.ctx.num_classes)

    def aggregate(self, round_index: int, server: Server[Prototypes], updates: list[Update[ClassStatistics]]) -> Metrics:
        super().aggregate(round_index, server, updates)
        server.state.prototypes = aggregate_class_statistics([u.payload for u in updates], self.params.proto_agg)
        return {}
