"""FD — Jeong, Oh, Kim, Park, Bennis, Kim, "Communication-efficient on-device machine learning: federated
distillation and augmentation under non-IID private data", NeurIPS 2018 MLPCD workshop, as the FedAL
paper compares with it in Tables VI-VII (pipelines/fedal/NOTES.md §3.2.6; the FedAL authors could not reproduce
it and report 0.12-0.17: their rows are a failed reproduction, not a target).

No public data, no model exchange. During its local training each client accumulates, per label k,
the mean of its (train-mode) logits on its samples of class k, F_{n,k} (K × K floats, with the K
counts, uploaded once per round). The server averages them per label over the clients holding the
label: G_k = mean_{m∈S_k} F_{m,k}, and sends G with |S_k|. In the next round client n distils towards
the others' mean F̂_{n,k} = (|S_k|·G_k − F_{n,k})/(|S_k| − 1) (its own last upload removed; ``teacher:
all`` keeps G_k) on every sample of class k:

    CE(f_n(x), y) + β · CE(ψ(F̂_{n,y}, T), ψ(f_n(x), T)),   β = 1, T = 1 [ASSUMPTION],

the distillation term summed over the samples whose label has a teacher and divided by the batch size
(a sample of a label no other client holds contributes 0). Round 1 is CE only. The FAug (GAN
augmentation) half of the FD paper is not used. τ local steps per round; an "iteration" is one local step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.engine.loop import Step
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server


class FDParams(AlgorithmParams):
    beta: float = Field(1.0, ge=0, description="β, weight of the distillation term")
    temperature: float = Field(1.0, gt=0, description="T of both distributions")
    teacher: Literal["others", "all"] = Field("others", description="leave-one-out per-label mean, or the mean of all")


def label_means(logits: torch.Tensor, labels: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-label sums of ``logits`` (K × K, row k: the sum over samples of class k) and counts (K)."""
    onehot = F.one_hot(labels, num_classes).to(logits.dtype)
    return onehot.T @ logits, onehot.sum(0)


def teacher_targets(global_means: torch.Tensor, holders: torch.Tensor, own: torch.Tensor | None,
                    own_counts: torch.Tensor | None, teacher: Literal["others", "all"]) -> tuple[torch.Tensor, torch.Tensor]:
    """F̂_{n,k} per label (K × K) and which labels have one: (|S_k|·G_k − F_{n,k})/(|S_k| − 1) where client n
    holds k (its own upload ``own``, ``own_counts`` > 0), else G_k; a label no other client holds has none."""
    held = own_counts > 0 if own_counts is not None else torch.zeros_like(holders, dtype=torch.bool)
    if teacher == "all" or own is None:
        return global_means, holders > 0
    others = holders - held.to(holders.dtype)
    loo = (holders.unsqueeze(1) * global_means - held.unsqueeze(1) * own) / others.clamp(min=1).unsqueeze(1)
    return torch.where(held.unsqueeze(1), loo, global_means), others > 0


def distillation_term(logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor,
                      temperature: float) -> torch.Tensor:
    """Σ_{i: valid[y_i]} CE(ψ(F̂_{y_i}, T), ψ(f(x_i), T)) / B."""
    soft = F.softmax(targets[labels] / temperature, dim=1)
    per_sample = -(soft * F.log_softmax(logits / temperature, dim=1)).sum(1)
    return (per_sample * valid[labels].to(per_sample.dtype)).sum() / len(labels)


@dataclass
class FDClient(NoState):
    """The targets received (per-label means and holder counts; None in round 1), the client's last upload
    (to remove itself from the mean) and this round's running per-label sums."""

    global_means: torch.Tensor | None = None
    holders: torch.Tensor | None = None
    own: torch.Tensor | None = None
    own_counts: torch.Tensor | None = None
    sums: torch.Tensor | None = None
    counts: torch.Tensor | None = None


@dataclass
class FDServer(NoState):
    """G_k and |S_k| from the last round (None before)."""

    global_means: torch.Tensor | None = None
    holders: torch.Tensor | None = None


@dataclass
class LabelLogits:
    """What a client uploads: its per-label mean logits F_{n,k} (K × K) and its samples of each label this round."""

    means: torch.Tensor
    counts: torch.Tensor


@dataclass
class LabelTargets:
    """What the server broadcasts: G (K × K) and |S_k| (K)."""

    global_means: torch.Tensor | None
    holders: torch.Tensor | None


@register_algorithm("fd")
class FD(Algorithm[FDClient, FDServer, LabelTargets, LabelLogits]):
    Params = FDParams
    params: FDParams
    ClientState = FDClient
    ServerState = FDServer
    has_global_model = False

    def broadcast(self, round_index: int, server: Server[FDServer], cid: int) -> LabelTargets:
        return LabelTargets(server.state.global_means, server.state.holders)

    def receive_broadcast(self, client: Client[FDClient], message: LabelTargets) -> None:
        client.state.global_means, client.state.holders = message.global_means, message.holders

    def local_update(self, round_index: int, client: Client[FDClient]) -> tuple[LabelLogits, float]:
        k = self.ctx.num_classes
        state = client.state
        state.sums = torch.zeros(k, k, device=self.ctx.device)
        state.counts = torch.zeros(k, device=self.ctx.device)
        loss = self.ctx.local_train(client, round_index, self.local_loss)
        means = state.sums / state.counts.clamp(min=1).unsqueeze(1)
        update = LabelLogits(means, state.counts)
        state.own, state.own_counts, state.sums, state.counts = means, update.counts, None, None
        return update, loss

    def local_loss(self, step: Step, client: Client[FDClient], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        state = client.state
        _, logits = client.model(x)
        sums, counts = label_means(logits.detach(), y, self.ctx.num_classes)
        assert state.sums is not None and state.counts is not None  # local_update's accumulators
        state.sums += sums
        state.counts += counts
        loss = F.cross_entropy(logits, y)
        if state.global_means is None or state.holders is None or self.params.beta == 0:
            return loss
        targets, valid = teacher_targets(state.global_means, state.holders, state.own, state.own_counts,
                                         self.params.teacher)
        return loss + self.params.beta * distillation_term(logits, y, targets, valid, self.params.temperature)

    def aggregate(self, round_index: int, server: Server[FDServer], updates: list[LabelLogits]) -> Metrics:
        held = torch.stack([(u.counts > 0).to(u.means.dtype) for u in updates])  # clients x K
        sums = sum(h.unsqueeze(1) * u.means for h, u in zip(held, updates))
        holders = held.sum(0)
        server.state.global_means = sums / holders.clamp(min=1).unsqueeze(1)
        server.state.holders = holders
        return {}
