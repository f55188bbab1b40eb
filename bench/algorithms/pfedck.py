"""pFedCK — Zhang & Shi, "A Personalized Federated Learning Method Based on Clustering and Knowledge
Distillation", Electronics 13(5):857, 2024 (pipelines/fedakd/NOTES.md §4 pFedCK). No code and no hyperparameters
were published; every choice below is a reading [I] of the summary in pipelines/fedakd/NOTES.md §4 pFedCK, each a parameter.

Each client holds a personalised model P_k (kept locally, evaluated as its model) and an interactive
model I_k (shared). One local pass trains both on each batch with mutual distillation
(:func:`mutual_losses`):

    L_P = CE(P) + λ·KD(P; I)          L_I = CE(I) + λ·KD(I; P) + μ·MSE(h_I, h_P)

(KD as FedAKD's, τ = 1; h the features; each model's teacher is the other, frozen for its step; λ = μ = 1).
The client uploads I_k. The server clusters the clients by the cosine similarity of their interactive-model
updates ΔI_k (I_k less the model the server sent it; :func:`cluster_updates`: agglomerative, average linkage,
``clusters`` = 3 groups, deterministic) and keeps the data-size-weighted average of the interactive models of each
cluster; the global model (reported as ``global_acc``) is the average over all clients. When a client takes part
the server sends it its cluster's average as it last computed it (before the client belongs to a cluster, the
global model), and the client's I_k starts from it. Each client's cluster is recorded every round (``cluster``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.engine.aggregate import load_state, weighted_average
from bench.engine.distillation import kd_loss
from bench.engine.loop import Loop, Step
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server
from bench.engine.vectors import flatten, state_keys


class PFedCKParams(AlgorithmParams):
    clusters: int = Field(3, ge=1, description="number of client clusters")
    kd_weight: float = Field(1.0, ge=0, description="λ: weight of the mutual KD terms")
    feature_weight: float = Field(1.0, ge=0, description="μ: weight of the interactive model's feature MSE")
    temperature: float = Field(1.0, gt=0)


def mutual_losses(p_out: tuple[torch.Tensor, torch.Tensor], i_out: tuple[torch.Tensor, torch.Tensor],
                  y: torch.Tensor, kd_weight: float, feature_weight: float,
                  temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_P, L_I) from each model's (features, logits); each distils from the other, detached."""
    (h_p, z_p), (h_i, z_i) = p_out, i_out
    loss_p = F.cross_entropy(z_p, y) + kd_weight * kd_loss(z_p, z_i.detach(), temperature)
    loss_i = (F.cross_entropy(z_i, y) + kd_weight * kd_loss(z_i, z_p.detach(), temperature)
              + feature_weight * F.mse_loss(h_i, h_p.detach()))
    return loss_p, loss_i


def cluster_updates(updates: list[torch.Tensor], clusters: int) -> list[int]:
    """Cluster labels of the update vectors by cosine distance (agglomerative, average linkage), relabelled in
    order of first appearance so client 0 is in cluster 0; fewer clients than clusters: one cluster each."""
    if len(updates) <= clusters:
        return list(range(len(updates)))
    from sklearn.cluster import AgglomerativeClustering

    matrix = torch.stack(updates).double().cpu().numpy()
    raw = AgglomerativeClustering(n_clusters=clusters, metric="cosine", linkage="average").fit_predict(matrix)
    order = {label: i for i, label in enumerate(dict.fromkeys(raw.tolist()))}
    return [order[label] for label in raw.tolist()]


@dataclass
class PFedCKClient(NoState):
    interactive: nn.Module | None = None  # I_k: the shared model, as received at the round's start and trained
    optimizer: torch.optim.Optimizer | None = None  # I_k's optimiser (reset each round unless persistent)


@dataclass
class Clusters(NoState):
    """Each cluster's average interactive model from the last round, and each client's cluster."""

    models: list[dict[str, torch.Tensor]] = field(default_factory=list)
    membership: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class InteractiveModel:
    """What the server sends a client: the interactive model its I_k starts from."""

    state: dict[str, torch.Tensor]


@dataclass(frozen=True)
class InteractiveUpdate:
    """A client's upload: its trained I_k and its train-split size."""

    cid: int
    num_samples: int
    state: dict[str, torch.Tensor]


@register_algorithm("pfedck")
class PFedCK(Algorithm[PFedCKClient, Clusters, InteractiveModel, InteractiveUpdate]):
    """Down: the client's cluster's interactive model; up: its trained I_k."""

    Params = PFedCKParams
    params: PFedCKParams
    ClientState = PFedCKClient
    ServerState = Clusters
    resident_models = 2  # the personalised and the interactive model

    def local_pass(self, round_index: int, client: Client[PFedCKClient]) -> float:
        """One pass of mutual distillation over the train split; the mean of L_P."""
        p, state = self.params, client.state
        personal, interactive = client.model, state.interactive
        assert interactive is not None
        personal.train()
        interactive.train()
        if state.optimizer is None or not self.ctx.config.training.optimizer.persistent:
            state.optimizer = self.ctx.make_optimizer(interactive.parameters())
        for group in state.optimizer.param_groups:  # this round's learning rate, as the personal model's
            group["lr"] = self.ctx.lr_at(round_index)
        i_loop = Loop(state.optimizer, list(interactive.parameters()), round_index, client.cid,
                      self.ctx.config.training.grad_clip, guard=self.ctx.loss_guard)
        p_loop = self.ctx.client_loop(client, round_index)

        def personal_step(_: Step, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            x, y = batch
            with torch.no_grad():
                i_out = interactive(x)
            return mutual_losses(personal(x), i_out, y, p.kd_weight, p.feature_weight, p.temperature)[0]

        def interactive_step(_: Step, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            x, y = batch
            with torch.no_grad():
                p_out = personal(x)
            return mutual_losses(p_out, interactive(x), y, p.kd_weight, p.feature_weight, p.temperature)[1]

        losses = []
        for batch in self.ctx.client_batches(client, round_index):
            losses.append(p_loop.run([batch], personal_step))
            i_loop.run([batch], interactive_step)
        return sum(losses) / max(len(losses), 1)

    # -- the round -------------------------------------------------------------------------------

    def sent(self, server: Server[Clusters], cid: int) -> dict[str, torch.Tensor]:
        """The interactive model the server sends client ``cid``: its cluster's, or the global model."""
        cluster = server.state.membership.get(cid)
        if cluster is None:
            assert server.model is not None
            return server.model.state_dict()
        return server.state.models[cluster]

    def broadcast(self, round_index: int, server: Server[Clusters], cid: int) -> InteractiveModel:
        return InteractiveModel(self.sent(server, cid))

    def receive_broadcast(self, client: Client[PFedCKClient], message: InteractiveModel) -> None:
        if client.state.interactive is None:
            client.state.interactive = self.ctx.build_model("pfedck-interactive", client.cid)
        load_state(client.state.interactive, message.state)

    def local_update(self, round_index: int, client: Client[PFedCKClient]) -> tuple[InteractiveUpdate, float]:
        loss = self.local_pass(round_index, client)
        assert client.state.interactive is not None
        return InteractiveUpdate(client.cid, client.data.num_samples,
                                 {k: v.clone() for k, v in client.state.interactive.state_dict().items()}), loss

    def aggregate(self, round_index: int, server: Server[Clusters], updates: list[InteractiveUpdate]) -> Metrics:
        """The clusters of the updates ΔI_k, each cluster's average, and the global model over all clients."""
        assert server.model is not None
        keys = state_keys(server.model)
        states = [u.state for u in updates]
        deltas = [flatten(u.state, keys) - flatten(self.sent(server, u.cid), keys) for u in updates]
        labels = cluster_updates(deltas, self.params.clusters)
        sizes = [float(u.num_samples) for u in updates]
        models = []
        for label in sorted(set(labels)):
            members = [i for i, lab in enumerate(labels) if lab == label]
            models.append(weighted_average([states[i] for i in members], [sizes[i] for i in members]))
            for i in members:
                server.state.membership[updates[i].cid] = label
        server.state.models = models
        load_state(server.model, weighted_average(states, sizes))
        return {"clusters": float(len(set(labels)))}

    def client_records(self, server: Server[Clusters], clients: list[Client[PFedCKClient]]) -> dict[str, dict[int, float]]:
        membership = server.state.membership
        return {"cluster": {c.cid: float(membership[c.cid]) for c in clients if c.cid in membership}}
