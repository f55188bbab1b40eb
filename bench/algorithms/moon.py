"""MOON — Li, He, Song, "Model-contrastive federated learning", CVPR 2021, as FedHKD compares it
(pipelines/fedhkd/NOTES.md §4 MOON, §5.5).

Local objective: CE + μ·ℓ_con with, averaged over the batch,
ℓ_con = −log[ e^{cos(z, z_glob)/τ} / (e^{cos(z, z_glob)/τ} + e^{cos(z, z_prev)/τ}) ],
where z = R_φ(x) of the model being trained, z_glob comes from a frozen copy of the global model
received this round and z_prev from a frozen copy of the model this client produced at its previous
participation. z is the d-dim representation itself, with no projection head (Table 1 counts MOON's
Params as exactly 3 models, §4; representation = ``forward``'s features, §2). Server: FedAvg.
μ = 1, τ = 0.5 [P].

Readings:

- The previous local model is the client's own model as it stands when the broadcast arrives: it
  starts as a copy of the initial global model (:meth:`Algorithm.init_client_model`), so at round 1
  prev = glob (pipelines/fedhkd/NOTES.md §4 MOON), and a client left out by partial participation keeps its last trained model.
- ``frozen_mode``: the frozen copies run in ``eval`` mode (BN running statistics), as MOON's code
  does (``global_model.eval()``, ``old_net.eval()``); ``train`` normalises with batch statistics, as
  FedAlign's port of MOON leaves them.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ModelAveraging
from bench.engine.loop import Step
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.state import Client, NoState


class MoonParams(AveragingParams):
    mu: float = Field(1.0, ge=0, description="μ_moon: weight of the model-contrastive loss")
    temperature: float = Field(0.5, gt=0, description="τ of the cosine similarities")
    frozen_mode: Literal["eval", "train"] = Field("eval", description="BN mode of the frozen global/previous "
                                                                      "copies: eval (MOON code) or train")


def contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, temperature: float) -> torch.Tensor:
    """ℓ_con, batch mean: cross-entropy of [cos(z, z_glob), cos(z, z_prev)]/τ with the positive at 0."""
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=-1), F.cosine_similarity(z, z_prev, dim=-1)], dim=1)
    return F.cross_entropy(logits / temperature, torch.zeros(len(z), dtype=torch.long, device=z.device))


@dataclass
class MoonClient(NoState):
    """The frozen copies, held only during local training."""

    global_model: nn.Module | None = None  # the global model received this round
    prev_model: nn.Module | None = None  # the model this client produced at its previous participation


@register_algorithm("moon")
class Moon(ModelAveraging[MoonClient, NoState]):
    Params = MoonParams
    params: MoonParams
    ClientState = MoonClient
    resident_models = 3  # the local model and the frozen global and previous copies

    def _frozen(self, model: nn.Module) -> nn.Module:
        """A copy of ``model`` without gradients, in ``frozen_mode``."""
        copied = copy.deepcopy(model).requires_grad_(False)
        for p in copied.parameters():
            p.grad = None  # deepcopy also copies the last step's .grad
        return copied.train(self.params.frozen_mode == "train")

    def receive_broadcast(self, client: Client[MoonClient], message: ModelBroadcast[None]) -> None:
        client.state.prev_model = self._frozen(client.model)
        super().receive_broadcast(client, message)
        client.state.global_model = self._frozen(client.model)

    def local_update(self, round_index: int, client: Client[MoonClient]) -> tuple[Update[None], float]:
        """Local training; the frozen copies are held only meanwhile."""
        try:
            return super().local_update(round_index, client)
        finally:
            client.state.prev_model = client.state.global_model = None

    def local_loss(self, step: Step, client: Client[MoonClient], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z, logits = client.model(x)
        loss = F.cross_entropy(logits, y)
        if self.params.mu == 0:
            return loss
        assert client.state.global_model is not None and client.state.prev_model is not None
        with torch.no_grad():
            z_glob, _ = client.state.global_model(x)
            z_prev, _ = client.state.prev_model(x)
        return loss + self.params.mu * contrastive_loss(z, z_glob, z_prev, self.params.temperature)
