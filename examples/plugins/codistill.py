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

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.engine.distillation import kd_loss
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Step
from bench.engine.state import Client, NoState, Server


class CoDistillParams(AlgorithmParams):
    distill_steps: int = Field(5, ge=0, description="lockstep public iterations per round")
    public_batch_size: int = Field(32, ge=1, description="public mini-batch size")
    temperature: float = Field(2.0, gt=0, description="distillation temperature T")


@torch.no_grad()
def upload(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A client's logits on the public batch, in eval mode."""
    with eval_mode(model):
        return model(x)[1]


@register_algorithm("codistill")
class CoDistill(Algorithm[NoState, NoState]):
    Params = CoDistillParams
    params: CoDistillParams
    has_global_model = False

    def run_round(self, round_index: int, server: Server[NoState], clients: list[Client[NoState]]) -> dict[str, float]:
        p = self.params
        train = [self.ctx.local_train(c, round_index, self.local_loss) for c in clients]
        public = self.ctx.shared_public(p.public_batch_size, round_index)  # a fresh order every round
        loops = [self.ctx.client_loop(c, round_index) for c in clients]
        distill = []
        for i in range(p.distill_steps):
            x = public.batch(i)  # the same batch for every client in iteration i
            consensus = torch.stack([upload(c.model, x) for c in clients]).mean(0)
            for client, loop in zip(clients, loops):
                distill.append(loop.run([x], lambda step, batch: self.distill_step(step, client, batch, consensus)))
        out = {"train_loss": sum(train) / len(train)}
        if distill:
            out["distill_loss"] = sum(distill) / len(distill)
        return out

    def distill_step(self, step: Step, client: Client[NoState], x: torch.Tensor, consensus: torch.Tensor) -> torch.Tensor:
        _, logits = client.model(x)
        return kd_loss(logits, consensus, self.params.temperature)
