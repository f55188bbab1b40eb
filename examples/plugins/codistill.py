"""Lockstep co-distillation on a public set — the worked example of docs/architecture.md: a method
with an unusual communication pattern in one file, using only the engine's toolkit. It is not one of
the four papers' methods.

Each round every selected client first trains on its private data (cross-entropy). Then, for
``distill_steps`` iterations i, every client receives the *same* public mini-batch x_i (the lockstep
stream :class:`~bench.engine.streams.SharedBatches`), uploads its logits z_k(x_i) (eval mode), the
server averages them into the consensus z̄(x_i) = (1/K) Σ_k z_k(x_i), and each client takes one step on

    T² · KL(softmax(z̄/T) ‖ softmax(z_k/T))            (Hinton et al.'s scaled distillation loss).

No parameters are exchanged, so the clients' architectures may differ (``model.candidates``). Load it
with ``import examples.plugins.codistill`` (or an ``fkd_bench.algorithms`` entry point) and run it as
``algorithm: {name: codistill}``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.engine.distillation import kd_loss
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Loop, Step
from bench.engine.protocol import Exchange, Lockstep, Metrics, Phase
from bench.engine.state import Client, NoState, Server


class CoDistillParams(AlgorithmParams):
    distill_steps: int = Field(5, ge=0, description="lockstep public iterations per round")
    public_batch_size: int = Field(32, ge=1, description="public mini-batch size")
    temperature: float = Field(2.0, gt=0, description="distillation temperature T")


@dataclass(frozen=True)
class Logits:
    """A client's logits z_k(x_i) on the public batch (eval mode): what it uploads."""

    logits: torch.Tensor


@dataclass(frozen=True)
class Consensus:
    """The mean z̄(x_i) of the clients' logits: what the server sends back."""

    logits: torch.Tensor


@register_algorithm("codistill")
class CoDistill(Algorithm[NoState, NoState, None, None]):
    Params = CoDistillParams
    params: CoDistillParams
    has_global_model = False

    def phases(self, round_index: int) -> Sequence[Phase[NoState, NoState]]:
        """Private training (nothing crosses), then ``distill_steps`` lockstep iterations on the public batches of
        a fresh order every round; the round reports ``train_loss`` and ``distill_loss``."""
        public = self.ctx.shared_public(self.params.public_batch_size, round_index)
        return [Exchange(self.broadcast, self.client_update, self.aggregate),
                Lockstep(self.params.distill_steps, public.batch, self.start, self.predict,
                         self.upload, self.serve, self.distill_loss, loss_name="distill_loss")]

    def broadcast(self, round_index: int, server: Server[NoState], cid: int) -> None:
        return None

    def update(self, client: Client[NoState]) -> None:
        return None

    def start(self, round_index: int, client: Client[NoState]) -> Loop:
        """The client's loop for the distillation steps: its own optimiser."""
        return self.ctx.client_loop(client, round_index)

    @torch.no_grad()
    def predict(self, client: Client[NoState], x: torch.Tensor) -> torch.Tensor:
        """The client's logits on the public batch, in eval mode (its step forwards again, in train mode)."""
        with eval_mode(client.model):
            return client.model(x)[1]

    def upload(self, client: Client[NoState], logits: torch.Tensor) -> Logits:
        return Logits(logits)

    def serve(self, round_index: int, server: Server[NoState], cids: list[int], x: torch.Tensor,
              uploads: list[Logits]) -> tuple[list[Consensus], Metrics]:
        consensus = Consensus(torch.stack([u.logits for u in uploads]).mean(0))
        return [consensus] * len(cids), {}

    def distill_loss(self, step: Step, client: Client[NoState], x: torch.Tensor, logits: torch.Tensor,
                     consensus: Consensus) -> torch.Tensor:
        """T²·KL(softmax(z̄/T) ‖ softmax(z_k/T)) on a train-mode forward pass."""
        _, student = client.model(x)
        return kd_loss(student, consensus.logits, self.params.temperature)
