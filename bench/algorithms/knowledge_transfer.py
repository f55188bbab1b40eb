"""The round of black-box knowledge transfer on a shared public set (specs/fedal.md §2.2, §3.2): the
protocol FedAL and its black-box baselines (FedMD as FedAL runs it, FedProto adapted, CFD, FCCL, FCCL+)
share; each method is one subclass that says what is sent and what each side minimises.

A round has two stages of τ iterations each (τ = ``training.local_steps``; the global stage's count is
``global_steps``, None: τ as in FedAL's Algorithm 1):

* **local training**: τ mini-batch steps on the client's private data minimising :meth:`local_loss`
  (``ctx.local_train``: the client's own optimiser, batches from the stream ``("batches", cid, round)``);
* **global knowledge transfer**: τ iterations, each on one public mini-batch that every client sees
  (lockstep: iteration g of the run is batch g of the stream ``("public", "transfer")``, g counting
  on across rounds). Each client forwards it once in train mode (:meth:`forward_public`) and uploads a
  typed message (:meth:`upload`: its logits, features, ...); the server answers each client
  (:meth:`serve`); each client takes one optimiser step on :meth:`transfer_loss`, built on the same
  forward pass (specs/fedal.md A4), through its :class:`~bench.engine.loop.Loop`.

``public_first`` (FCCL's official order) runs the global stage before the local one. Every message
goes through the run's communication ledger. Clients' architectures may differ: nothing but the
messages crosses between them (no parameters, no architectures). The client optimiser is the config's
(``training.optimizer``): with ``persistent: true`` one optimiser per client serves both stages and
every round (specs/fedal.md A9 default); with ``persistent: false`` it is re-created at every stage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Generic

import torch
from pydantic import Field

from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.engine.loop import Loop, Step
from bench.engine.state import Client, ClientStateT, Server, ServerStateT
from bench.errors import BenchError


class TransferParams(AlgorithmParams):
    global_steps: int | None = Field(None, ge=1, description=(
        "global-transfer iterations per round; None: training.local_steps (τ for both stages, Algorithm 1)"))
    public_batch_size: int | None = Field(None, ge=1, description="public mini-batch size; None: training.batch_size")


@dataclass
class PublicOutputs:
    """A client's forward pass on the public batch, with its graph (kept on the client's side)."""

    features: torch.Tensor
    logits: torch.Tensor


@dataclass
class LogitsUpload:
    """A client's logits f_n(x) on the public batch (B × K): FedMD's and FedAL's upstream message."""

    logits: torch.Tensor


Served = tuple[list[object], dict[str, float]]
"""What the server answers: one message per client (in the clients' order) and its own metrics."""


class KnowledgeTransfer(Algorithm[ClientStateT, ServerStateT], Generic[ClientStateT, ServerStateT]):
    """Two stages of τ iterations per round (module docstring); subclasses define the messages and losses."""

    Params = TransferParams
    params: TransferParams
    has_global_model = False
    public_first: ClassVar[bool] = False

    @property
    def local_steps(self) -> int:
        steps = self.ctx.config.training.local_steps
        if steps is None:
            raise BenchError(f"{self.name} alternates τ local steps and τ public iterations: set training.local_steps "
                             "(τ), not local_epochs")
        return steps

    @property
    def global_steps(self) -> int:
        return self.params.global_steps or self.local_steps

    def init_server(self) -> Server[ServerStateT]:
        if self.ctx.public_x is None:
            raise BenchError(f"{self.name} transfers knowledge on an unlabelled public set: set public.size "
                             "(FedAL: 1000)")
        return super().init_server()

    # -- one round ------------------------------------------------------------------------------

    def run_round(self, round_index: int, server: Server[ServerStateT],
                  clients: list[Client[ClientStateT]]) -> dict[str, float]:
        if len(clients) < self.min_clients():
            raise BenchError(f"{self.name} needs at least {self.min_clients()} clients in a round, got {len(clients)}; "
                             "raise partition.num_clients or participation.fraction")
        self.prepare(round_index, server, clients)
        stages = (self.public_stage, self.local_stage) if self.public_first else (self.local_stage, self.public_stage)
        metrics: dict[str, float] = {}
        for stage in stages:
            metrics.update(stage(round_index, server, clients))
        return metrics

    def min_clients(self) -> int:
        """Clients a round needs (a leave-one-out teacher needs 2)."""
        return 1

    def prepare(self, round_index: int, server: Server[ServerStateT], clients: list[Client[ClientStateT]]) -> None:
        """Work before the round's stages (FCCL's pre-training of a client at its first round)."""

    def local_stage(self, round_index: int, server: Server[ServerStateT],
                    clients: list[Client[ClientStateT]]) -> dict[str, float]:
        self.before_local(round_index, clients)
        losses = [self.ctx.local_train(c, round_index, self.local_loss) for c in clients]
        self.after_local(round_index, clients)
        return {"train_loss": sum(losses) / len(losses)}

    def before_local(self, round_index: int, clients: list[Client[ClientStateT]]) -> None:
        """Hook at the start of the local stage (FedAL's snapshot θ^{t,0})."""

    def after_local(self, round_index: int, clients: list[Client[ClientStateT]]) -> None:
        """Hook at the end of the local stage (FCCL's previous-round model)."""

    def before_public(self, round_index: int, clients: list[Client[ClientStateT]]) -> None:
        """Hook at the start of the global stage (FedAL's snapshot θ^{t+½,0})."""

    def public_stage(self, round_index: int, server: Server[ServerStateT],
                     clients: list[Client[ClientStateT]]) -> dict[str, float]:
        """τ lockstep iterations: every client forwards batch g, uploads, the server answers, each client steps."""
        self.before_public(round_index, clients)
        steps = self.global_steps
        public = self.ctx.shared_public(self.params.public_batch_size, "transfer")
        loops = [self.public_loop(c, round_index) for c in clients]
        ledger = self.ctx.ledger
        losses: list[float] = []
        served: dict[str, list[float]] = {}
        for i in range(steps):
            x = public.batch((round_index - 1) * steps + i)
            outputs = [self.forward_public(c, x) for c in clients]
            uploads = [self.upload(c, out) for c, out in zip(clients, outputs)]
            for message in uploads:
                ledger.up(message)
            replies, metrics = self.serve(round_index, server, clients, x, uploads)
            for message in replies:
                ledger.down(message)
            for name, value in metrics.items():
                served.setdefault(name, []).append(value)
            for client, loop, out, reply in zip(clients, loops, outputs, replies):
                losses.append(loop.run([x], lambda step, batch, c=client, o=out, r=reply:
                                       self.transfer_loss(step, c, batch, o, r)))
        return {"transfer_loss": sum(losses) / len(losses), **{k: sum(v) / len(v) for k, v in served.items()}}

    def public_loop(self, client: Client[ClientStateT], round_index: int) -> Loop:
        """The loop of the client's global-stage steps: its own optimiser (FCCL may use a fresh one)."""
        return self.ctx.client_loop(client, round_index)

    # -- what a method defines ------------------------------------------------------------------

    def forward_public(self, client: Client[ClientStateT], x: torch.Tensor) -> PublicOutputs:
        """The client's one train-mode forward pass on the public batch (specs/fedal.md A4)."""
        client.model.train()
        features, logits = client.model(x)
        return PublicOutputs(features, logits)

    def upload(self, client: Client[ClientStateT], outputs: PublicOutputs) -> object:
        """What the client sends: its logits on the public batch (FedMD, FedAL, CFD, FCCL)."""
        return LogitsUpload(outputs.logits.detach())

    def serve(self, round_index: int, server: Server[ServerStateT], clients: list[Client[ClientStateT]],
              x: torch.Tensor, uploads: list[object]) -> Served:
        """The server's answer to each client for the public batch ``x`` (public: the server holds it too),
        and its metrics for the round."""
        raise NotImplementedError

    def transfer_loss(self, step: Step, client: Client[ClientStateT], x: torch.Tensor, outputs: PublicOutputs,
                      reply: object) -> torch.Tensor:
        """The client's global-stage objective, built on ``outputs`` (its forward pass of this iteration)."""
        raise NotImplementedError


def stacked_logits(uploads: list[object]) -> torch.Tensor:
    """The uploaded logits as one N × B × K tensor, in the clients' order."""
    if not all(isinstance(u, LogitsUpload) for u in uploads):
        raise TypeError("stacked_logits needs LogitsUpload messages")
    return torch.stack([u.logits for u in uploads])  # type: ignore[attr-defined]
