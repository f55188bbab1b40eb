"""FedProto as the FedAL paper adapts it (pipelines/fedal/NOTES.md §3.2.2): "clients and the server conduct KD
using the intermediate features before the fully-connected layer of client models, instead of model
outputs in FedMD", on the unlabelled public set, τ = 1.

The FedMD pipeline of :mod:`bench.algorithms.knowledge_transfer` with penultimate features φ_n(x) ∈ ℝ^d
in place of logits: per global iteration each client uploads φ_n(x) for the public batch (d·B floats),
the server returns their mean φ̄, and each client minimises

    λ · MSE(φ_n(x), φ̄_{−n}(x)),   φ̄_{−n} = (N·φ̄ − φ_n)/(N − 1)   (mean over batch and dimension),

λ = 1 (FedProto's default weight and L2 distance [EXTERNAL]); the local stage is plain CE. Readings
[ASSUMPTION, §3.2.2]: the leave-one-out mean as FedMD's (``teacher: all`` for the mean over all
clients); the feature is each model's ``features`` output (ResNet: the 512-d pooled vector; WRN: after
the final BN-ReLU-pool; LEAF CNN: the 800-d flattened map; LeNet5: the 84-d input of the last layer).
Every client needs the same feature dimension, so it does not run on SVHN's WRN mix (64/64/128-d): a
config mixing dimensions is refused.

Not ``fedproto`` (:mod:`bench.algorithms.fedproto`), the FedHKD paper's FedProto (per-class prototypes
of private data, FedAvg aggregation, no public set).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.knowledge_transfer import KnowledgeTransfer, PublicOutputs, TransferParams
from bench.engine.loop import Step
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server
from bench.errors import BenchError
from bench.models import build_model


class FedProtoFedALParams(TransferParams):
    weight: float = Field(1.0, ge=0, description="λ, weight of the feature distance (FedProto: 1)")
    teacher: Literal["others", "all"] = Field("others", description="mean of the other clients' features, or all")


def feature_distance(features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """MSE(φ_n, target): the squared difference's mean over batch and feature dimension (nn.MSELoss)."""
    return F.mse_loss(features, target)


@dataclass(frozen=True)
class FeatureUpload:
    """A client's features φ_n(x) on the public batch (B × d)."""

    features: torch.Tensor


@dataclass(frozen=True)
class FeatureReply:
    """The mean φ̄ over the round's ``clients`` clients."""

    mean: torch.Tensor
    clients: int


@register_algorithm("fedproto_fedal")
class FedProtoFedAL(KnowledgeTransfer[NoState, NoState, FeatureUpload, FeatureReply]):
    """Up: each client's features on the public batch; down: their mean."""

    Params = FedProtoFedALParams
    params: FedProtoFedALParams

    def min_clients(self) -> int:
        return 2 if self.params.teacher == "others" else 1

    def init_server(self) -> Server[NoState]:
        with torch.device("meta"):  # shapes only
            dims = {name: build_model(name, self.ctx.in_shape, self.ctx.num_classes, **self.ctx.model_kwargs(name)
                                      ).feature_dim for name in set(self.ctx.architectures)}
        if len(set(dims.values())) > 1:
            raise BenchError(f"fedproto_fedal distils features, so every client needs one feature dimension; the "
                             f"clients' architectures have {dims} (FedAL does not run it on SVHN's WRN mix)")
        return super().init_server()

    def upload(self, client: Client[NoState], outputs: PublicOutputs) -> FeatureUpload:
        return FeatureUpload(outputs.features.detach())

    def serve(self, round_index: int, server: Server[NoState], cids: list[int], x: torch.Tensor,
              uploads: list[FeatureUpload]) -> tuple[list[FeatureReply], Metrics]:
        mean = torch.stack([u.features for u in uploads]).mean(0)
        return [FeatureReply(mean, len(cids)) for _ in cids], {}

    def transfer_loss(self, step: Step, client: Client[NoState], x: torch.Tensor, outputs: PublicOutputs,
                      reply: FeatureReply) -> torch.Tensor:
        own = outputs.features.detach()
        n = reply.clients
        target = (n * reply.mean - own) / (n - 1) if self.params.teacher == "others" else reply.mean
        return self.params.weight * feature_distance(outputs.features, target)
