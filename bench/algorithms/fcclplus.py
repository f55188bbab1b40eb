"""FCCL+ — Huang, Ye, Shi, Du, "Generalizable heterogeneous federated cross-correlation and instance
similarity learning", IEEE TPAMI 2023, as the FedAL paper compares with it (pipelines/fedal/NOTES.md §3.2.5; the
official code WenkeHuang/FCCL, ``fccl+/models/fcclplus.py``, read for the details).

No pre-training. Each round, public first (as FCCL, :mod:`bench.algorithms.fccl`):

* **Collaborative update**: per lockstep public batch each client uploads its logits Z_n (B × K) and its
  instance-similarity logits S_n (B × (B − 1)): its penultimate features L2-normalised, F Fᵀ with the
  diagonal removed, divided by ``temp`` = 0.02 (B × B does not depend on the feature dimension, so it
  works across architectures). The server returns the means over all clients Z̄ and S̄; the client
  minimises FCCL's cross-correlation loss (λ_col = 0.0051) + ``dis_power`` · 𝒦(ψ(S̄) ‖ ψ(S_n)), dis_power = 3.
* **Local update, non-target distillation**: τ steps of CE + T²·𝒦(q^inter ‖ q_n) where q = ψ(f(x)/T) with
  the target class's entry removed and **not** renormalised (the official code takes the log of those
  entries directly), T = ``local_dis_power`` = 3, θ^inter the model at the end of the previous round's
  local update (initially the client's initial model, the official ``ini``).

Upstream per public batch: B·K + B·(B − 1) floats (§5.3 Fig. 11 table). The public-step optimiser, the
teachers' BatchNorm mode and the local weight decay read as in FCCL (its docstring).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.fccl import Collaborative, CollaborativeParams, FCCLClient, cross_correlation_loss
from bench.algorithms.knowledge_transfer import PublicOutputs
from bench.engine.distillation import kd_loss
from bench.engine.loop import Step
from bench.engine.protocol import Metrics
from bench.engine.snapshots import refresh_snapshot
from bench.engine.state import Client, NoState, Server


class FCCLPlusParams(CollaborativeParams):
    temp: float = Field(0.02, gt=0, description="temperature of the instance-similarity logits")
    dis_power: float = Field(3.0, ge=0, description="weight of the similarity distillation")
    local_dis_power: float = Field(3.0, gt=0, description="T of the non-target distillation")


def similarity_logits(features: torch.Tensor, temp: float) -> torch.Tensor:
    """S = (F̂ F̂ᵀ without its diagonal) / temp, F̂ the L2-normalised features: B × (B − 1)."""
    unit = F.normalize(features, dim=1)
    sim = unit @ unit.T
    b = len(sim)
    off = ~torch.eye(b, dtype=torch.bool, device=sim.device)
    return sim[off].view(b, b - 1) / temp


def non_target_kd(logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
                  temperature: float) -> torch.Tensor:
    """T²·𝒦(q^teacher ‖ q) over the non-target entries of q = ψ(logits/T) (not renormalised), batch mean."""
    keep = ~F.one_hot(labels, logits.shape[1]).bool()
    b = len(logits)
    student = F.softmax(logits / temperature, dim=1)[keep].view(b, -1)
    teacher = F.softmax(teacher_logits / temperature, dim=1)[keep].view(b, -1)
    return temperature ** 2 * F.kl_div(torch.log(student), teacher, reduction="batchmean")


@dataclass(frozen=True)
class LogitsAndSimilarity:
    """FCCL+'s upstream message: logits (B × K) and instance-similarity logits (B × (B − 1))."""

    logits: torch.Tensor
    similarity: torch.Tensor


@register_algorithm("fcclplus")
class FCCLPlus(Collaborative[LogitsAndSimilarity, LogitsAndSimilarity]):
    """Up: each client's logits and similarity logits on the public batch; down: both means over all clients."""

    Params = FCCLPlusParams
    params: FCCLPlusParams

    def start(self, round_index: int, client: Client[FCCLClient]) -> None:
        """No pre-training: θ^inter starts as the client's initial model."""
        client.state.inter = refresh_snapshot(None, client.model, self.params.teacher_mode)

    def upload(self, client: Client[FCCLClient], outputs: PublicOutputs) -> LogitsAndSimilarity:
        return LogitsAndSimilarity(outputs.logits.detach(), similarity_logits(outputs.features, self.params.temp).detach())

    def serve(self, round_index: int, server: Server[NoState], cids: list[int], x: torch.Tensor,
              uploads: list[LogitsAndSimilarity]) -> tuple[list[LogitsAndSimilarity], Metrics]:
        mean = LogitsAndSimilarity(torch.stack([u.logits for u in uploads]).mean(0),
                                   torch.stack([u.similarity for u in uploads]).mean(0))
        return [mean] * len(cids), {}

    def transfer_loss(self, step: Step, client: Client[FCCLClient], x: torch.Tensor, outputs: PublicOutputs,
                      reply: LogitsAndSimilarity) -> torch.Tensor:
        p = self.params
        similarity = similarity_logits(outputs.features, p.temp)
        distill = kd_loss(similarity, reply.similarity, 1.0)
        return cross_correlation_loss(outputs.logits, reply.logits, p.off_diagonal_weight) + p.dis_power * distill

    def local_loss(self, step: Step, client: Client[FCCLClient], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert client.state.inter is not None
        _, logits = client.model(x)
        with torch.no_grad():
            _, inter = client.state.inter(x)
        return F.cross_entropy(logits, y) + non_target_kd(logits, inter, y, self.params.local_dis_power)
