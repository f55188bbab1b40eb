"""FedMD — Li & Wang, "FedMD: Heterogenous federated learning via model distillation", arXiv:1910.03581
(2019), as the FedHKD paper adapts it: distillation on a public set plus FedAvg aggregation
(pipelines/fedhkd/NOTES.md §4 "FedMD", §5.5).

Every round, after local training, each client computes its soft predictions Q(z_pub, T) =
softmax(G_ω(R_φ(x_pub))/T), T = 0.5, in eval mode on the whole public set in its fixed order; the
server averages them (unweighted) over the participating clients into the consensus C (N_pub × n) and
FedAvg-aggregates the models (:class:`ParameterAveraging`). In the next round a client's loss on its
private batch b is CE + λ_md·D(Q(z_pub,b, T), C_b), where pub,b is the b-th public batch in the fixed
order, forwarded in train mode; round 1 is CE only. The public set is the config's ``public`` set
(``public.size`` training images held by no client; the paper takes its size = a client's local
train size).

Not to be confused with ``fedmd_fedal`` (:mod:`bench.algorithms.fedmd_fedal`), FedMD as the FedAL paper
runs it: black-box clients without model averaging, one public mini-batch per iteration in lockstep,
KL to the mean of the other clients' logits (pipelines/fedal/NOTES.md §3.2.1).

Readings (the released code, pipelines/fedhkd/NOTES.md §4 [C], where the paper is silent):
* b is the batch's index within its local epoch; public batches have the private batch size and the
  config's ``drop_last``, and a private batch whose index has no public batch gets no distillation
  term (the code's ``if idx == batch_idx`` loop over the public loader);
* D = KL(C_b ‖ Q_b), batch mean; λ_md = 0.05. ``mode: code`` takes the code's D and λ_md (the switches of
  :class:`FedMDParams`). Not reproduced: the code's public set of 1000 images drawn with replacement from
  the global test set (an algorithm sees no test data — only the federation's evaluation does — and
  using it would leak the evaluation set); set ``public.size: 1000`` for the code's size. Nor is the
  code's skipping of gradient clipping in distillation rounds (clipping is the engine's, every round).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ParameterAveraging
from bench.algorithms.readings import ModeParams, reading
from bench.engine.chunks import chunk_size
from bench.engine.distillation import soft_target_kl
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Step
from bench.engine.messages import Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server
from bench.engine.streams import batches_per_pass
from bench.errors import BenchError


class FedMDParams(ModeParams, AveragingParams):
    """FedMD's hyperparameters as the FedHKD paper runs it, and the released code's readings (§4 [C])."""

    lambda_md: float = reading(0.05, 0.1, "distillation weight λ_md (the code's hard-coded 0.1)", ge=0,
                               omitted=("paper", "code"), as_null=True)
    distance: Literal["kl", "negated_kldivloss"] = reading(
        "kl", "negated_kldivloss", "D(Q, C): KL(C ‖ Q), batch mean; or −KLDivLoss()(Q, C) with the probabilities "
        "(not log-probabilities) as input and the element-wise mean, −mean(C·(log C − Q))", omitted=("paper", "code"))
    temperature: float = Field(0.5, gt=0, description="softmax temperature T of the soft predictions")


def distillation_loss(logits: torch.Tensor, consensus: torch.Tensor, temperature: float) -> torch.Tensor:
    """D(Q(z, T), C) = KL(C ‖ Q), batch mean."""
    return soft_target_kl(logits, consensus, temperature)


def code_distillation_loss(logits: torch.Tensor, consensus: torch.Tensor, temperature: float) -> torch.Tensor:
    """The code's D: −KLDivLoss()(Q, C) on probabilities, KLDivLoss's element-wise mean written out (torch deprecates
    reduction="mean" for kl_div)."""
    return -(torch.xlogy(consensus, consensus) - consensus * F.softmax(logits / temperature, dim=1)).mean()


DISTANCES = {"kl": distillation_loss, "negated_kldivloss": code_distillation_loss}


@dataclass
class Consensus(NoState):
    """The consensus C (N_pub × n): computed by the server, received by each client (None in round 1)."""

    consensus: torch.Tensor | None = None


@register_algorithm("fedmd")
class FedMD(ParameterAveraging[Consensus, Consensus, torch.Tensor | None, torch.Tensor]):
    """The broadcast carries the consensus C besides the model, the update the client's soft predictions
    Q(z_pub, T) on the whole public set."""

    Params = FedMDParams
    params: FedMDParams
    ClientState = ServerState = Consensus

    def init_server(self) -> Server[Consensus]:
        if self.ctx.public_x is None:
            raise BenchError("fedmd distils on a public set: set public.size (the paper uses a client's local "
                             "train size)")
        return super().init_server()

    def broadcast_payload(self, round_index: int, server: Server[Consensus], cid: int) -> torch.Tensor | None:
        return server.state.consensus

    def receive_payload(self, client: Client[Consensus], payload: torch.Tensor | None) -> None:
        client.state.consensus = payload

    def update_payload(self, client: Client[Consensus]) -> torch.Tensor:
        return self.soft_predictions(client.model)

    def local_loss(self, step: Step, client: Client[Consensus], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        _, logits = client.model(x)
        loss = F.cross_entropy(logits, y)
        consensus = client.state.consensus
        if consensus is None:
            return loss
        train = self.ctx.config.training
        public_x = self.ctx.public_x
        assert public_x is not None
        b = step.index % batches_per_pass(client.data.num_samples, train.batch_size, train.drop_last)
        if b >= batches_per_pass(len(public_x), train.batch_size, train.drop_last):
            return loss
        size = min(train.batch_size, len(public_x))
        _, public_logits = client.model(public_x[b * size:(b + 1) * size])
        distance = DISTANCES[self.params.distance]
        return loss + self.params.lambda_md * distance(public_logits, consensus[b * size:(b + 1) * size],
                                                       self.params.temperature)

    @torch.no_grad()
    def soft_predictions(self, model: torch.nn.Module) -> torch.Tensor:
        """Q(z_pub, T) on the whole public set in its fixed order, eval mode, in evaluation chunks
        (:func:`~bench.engine.chunks.chunk_size`)."""
        public_x = self.ctx.public_x
        assert public_x is not None
        with eval_mode(model):
            size = chunk_size(model, public_x, self.ctx.config.evaluation.batch_size)
            return torch.cat([F.softmax(model(public_x[s:s + size])[1] / self.params.temperature, dim=1)
                              for s in range(0, len(public_x), size)])

    def aggregate(self, round_index: int, server: Server[Consensus], updates: list[Update[torch.Tensor]]) -> Metrics:
        server.state.consensus = torch.stack([u.payload for u in updates]).mean(0)
        return super().aggregate(round_index, server, updates)
