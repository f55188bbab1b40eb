"""pFedCK — Zhang & Shi, "A Personalized Federated Learning Method Based on Clustering and Knowledge
Distillation", Electronics 13(5):857, 2024 (specs/fedakd.md §4 pFedCK). No code and no hyperparameters
were published; every choice below is a reading [I] of the spec's summary, each a parameter.

Each client holds a personalised model P_k (kept locally, evaluated as its model) and an interactive
model I_k (shared). One local pass trains both on each batch with mutual distillation
(:func:`mutual_losses`):

    L_P = CE(P) + λ·KD(P; I)          L_I = CE(I) + λ·KD(I; P) + μ·MSE(h_I, h_P)

(KD as FedAKD's, τ = 1; h the features; each model's teacher is the other, frozen for its step; λ = μ = 1).
The client uploads I_k. The server clusters the clients by the cosine similarity of their interactive-model
updates ΔI_k (:func:`cluster_updates`: agglomerative, average linkage, ``clusters`` = 3 groups, deterministic)
and gives each client the data-size-weighted average of the interactive models of its cluster; the global
model (reported as ``global_acc``) is the average over all clients. Each client's cluster is recorded every
round (``cluster``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.engine.aggregate import load_state, weighted_average
from bench.engine.distillation import kd_loss
from bench.engine.loop import Loop, Step
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
    interactive: nn.Module | None = None  # I_k: the shared model, its cluster's average as received
    optimizer: torch.optim.Optimizer | None = None  # I_k's optimiser (reset each round unless persistent)
    cluster: int = 0


@register_algorithm("pfedck")
class PFedCK(Algorithm[PFedCKClient, NoState]):
    Params = PFedCKParams
    params: PFedCKParams
    ClientState = PFedCKClient
    resident_models = 2  # the personalised and the interactive model

    def interactive(self, server: Server, client: Client[PFedCKClient]) -> nn.Module:
        """I_k, a copy of the initial global model before the first round."""
        state = client.state
        if state.interactive is None:
            assert server.model is not None
            state.interactive = copy.deepcopy(server.model)
        return state.interactive

    def local_pass(self, round_index: int, server: Server, client: Client[PFedCKClient]) -> float:
        """One pass of mutual distillation over the train split; the mean of L_P."""
        p, state = self.params, client.state
        personal, interactive = client.model, self.interactive(server, client)
        personal.train()
        interactive.train()
        if state.optimizer is None or not self.ctx.config.training.optimizer.persistent:
            state.optimizer = self.ctx.make_optimizer(interactive.parameters(), self.ctx.lr_at(round_index))
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

    def run_round(self, round_index: int, server: Server, clients: list[Client[PFedCKClient]]) -> dict[str, float]:
        assert server.model is not None
        keys = state_keys(server.model)
        starts = [flatten(self.interactive(server, c).state_dict(), keys) for c in clients]
        losses = [self.local_pass(round_index, server, c) for c in clients]
        states = [{k: v.clone() for k, v in self.interactive(server, c).state_dict().items()} for c in clients]
        updates = [flatten(state, keys) - start for state, start in zip(states, starts)]
        labels = cluster_updates(updates, self.params.clusters)
        sizes = [float(c.data.num_samples) for c in clients]
        for label in sorted(set(labels)):
            members = [i for i, lab in enumerate(labels) if lab == label]
            average = weighted_average([states[i] for i in members], [sizes[i] for i in members])
            for i in members:
                load_state(self.interactive(server, clients[i]), average)
                clients[i].state.cluster = label
        load_state(server.model, weighted_average(states, sizes))
        return {"train_loss": sum(losses) / len(losses), "clusters": float(len(set(labels)))}

    def client_records(self, server: Server, clients: list[Client[PFedCKClient]]) -> dict[str, dict[int, float]]:
        return {"cluster": {c.cid: float(c.state.cluster) for c in clients}}
