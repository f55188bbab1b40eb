"""FedAS — Yang, Huang, Ye, "FedAS: Bridging Inconsistency in Personalized Federated Learning", CVPR 2024
(pipelines/fedakd/NOTES.md §4 FedAS; no code was published with FedAKD, the readings follow FL-bench's port [I]).

Each client's personalised model is the model it trained last; it is what the client is evaluated with.
A round, per client:

1. Federated parameter alignment: the received global model's feature extractor (every parameter but the
   classifier's) is trained for ``alignment_epochs`` with SGD at ``alignment_lr`` so that, per class of the
   batch, the mean of its features matches that class's prototype — the mean feature of the class under
   the client's previous personalised model over its train split (:func:`class_prototypes`,
   :func:`alignment_loss`, MSE).
2. Local training (cross-entropy) of the aligned model, which becomes the new personalised model.
3. Client synchronisation: its Fisher-information trace, the sum over train batches of ‖∇θ mean NLL‖²
   of the trained model (:func:`fisher_trace`), is its aggregation weight, sent with its model; the server
   averages the models with these weights (normalised), so clients whose parameters are better trained count
   more.

Round 1 aligns the global model to its own prototypes (there is no previous model). Defaults: alignment lr
0.01, 1 epoch (FL-bench); the model's classifier is ``classifier`` (every model of this suite has one).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ParameterAveraging
from bench.engine.aggregate import load_state, weighted_average
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Loop
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server


class FedASParams(AveragingParams):
    alignment_lr: float = Field(0.01, gt=0, description="SGD learning rate of the parameter alignment")
    alignment_epochs: int = Field(1, ge=0, description="epochs of parameter alignment before local training")


@torch.no_grad()
def class_prototypes(model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Per class, the mean feature of its samples under ``model`` (eval mode); NaN rows for absent classes."""
    with eval_mode(model):
        features = torch.cat([model(x[s:s + 1024])[0] for s in range(0, len(y), 1024)])
    sums = torch.zeros(num_classes, features.shape[1], dtype=features.dtype, device=features.device)
    sums.index_add_(0, y, features)
    counts = torch.bincount(y, minlength=num_classes).to(features.dtype).unsqueeze(1)
    return sums / counts


def alignment_loss(features: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """Σ over the classes of the batch that have a prototype of MSE(batch mean feature of the class, prototype)."""
    loss = features.new_zeros(())
    for label in torch.unique(y).tolist():
        target = prototypes[label]
        if not torch.isnan(target).any():
            loss = loss + F.mse_loss(features[y == label].mean(0), target)
    return loss


def fisher_trace(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Σ over batches of Σ_θ (∂ mean NLL / ∂θ)², the model in eval mode (FL-bench's FIM trace)."""
    total = 0.0
    with eval_mode(model):
        for x, y in batches:
            model.zero_grad(set_to_none=True)
            _, logits = model(x)
            F.nll_loss(F.log_softmax(logits, dim=1), y).backward()
            total += float(sum((p.grad ** 2).sum() for p in model.parameters() if p.grad is not None))
        model.zero_grad(set_to_none=True)
    return total


@dataclass
class FedASClient(NoState):
    """The previous personalised model, held from the broadcast until the alignment is done, and the Fisher trace
    of the model it trained last (None before its first round)."""

    previous: nn.Module | None = None
    fisher: float | None = None


@register_algorithm("fedas")
class FedAS(ParameterAveraging[FedASClient, NoState, None, float]):
    """The update's payload is the trained model's Fisher trace."""

    Params = FedASParams
    params: FedASParams
    ClientState = FedASClient
    resident_models = 2  # the model being trained and the previous personalised model

    def broadcast_payload(self, round_index: int, server: Server[NoState], cid: int) -> None:
        return None

    def receive_broadcast(self, client: Client[FedASClient], message: ModelBroadcast[None]) -> None:
        client.state.previous = copy.deepcopy(client.model).requires_grad_(False)
        super().receive_broadcast(client, message)

    def align(self, round_index: int, client: Client[FedASClient]) -> float:
        """Step 1: the feature extractor towards the previous model's class prototypes."""
        assert client.state.previous is not None
        data = client.data
        prototypes = class_prototypes(client.state.previous, data.x, data.y, self.ctx.num_classes)
        classifier = {id(p) for p in client.model.classifier.parameters()}  # type: ignore[union-attr]  # torch: Module attributes are Tensor | Module
        body = [p for p in client.model.parameters() if id(p) not in classifier]
        loop = Loop(torch.optim.SGD(body, lr=self.params.alignment_lr), body, round_index, client.cid,
                    guard=None)
        client.model.train()
        losses = [loop.run(self.ctx.batches(data.x, data.y, "fedas-align", client.cid, round_index, epoch),
                           lambda step, batch: alignment_loss(client.model(batch[0])[0], batch[1], prototypes))
                  for epoch in range(self.params.alignment_epochs)]
        return sum(losses) / len(losses) if losses else 0.0

    def local_update(self, round_index: int, client: Client[FedASClient]) -> tuple[Update[float], float]:
        try:
            self.align(round_index, client)
        finally:
            client.state.previous = None
        loss = self.ctx.local_train(client, round_index, self.local_loss)
        batches = list(self.ctx.batches(client.data.x, client.data.y, "fedas-fim", client.cid, round_index))
        client.state.fisher = fisher_trace(client.model, batches)
        return self.update(client), loss

    def update_payload(self, client: Client[FedASClient]) -> float:
        assert client.state.fisher is not None
        return client.state.fisher

    def aggregate(self, round_index: int, server: Server[NoState], updates: list[Update[float]]) -> Metrics:
        """Step 3: the models averaged with weights F_k / Σ_j F_j (equal weights if every trace is 0)."""
        assert server.model is not None
        weights = [u.payload for u in updates] if sum(u.payload for u in updates) > 0 else [1.0] * len(updates)
        load_state(server.model, weighted_average([u.state for u in updates], weights))
        return {}

    def client_records(self, server: Server[NoState], clients: list[Client[FedASClient]]) -> dict[str, dict[int, float]]:
        return {"fisher_trace": {c.cid: c.state.fisher for c in clients if c.state.fisher is not None}}
