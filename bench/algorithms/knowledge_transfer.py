"""The round of black-box knowledge transfer on a shared public set (pipelines/fedal/NOTES.md §2.2, §3.2): the
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
  forward pass (pipelines/fedal/NOTES.md A4), through its :class:`~bench.engine.loop.Loop`.

``public_first`` (FCCL's official order) runs the global stage before the local one. The round is two phases
(:mod:`bench.engine.protocol`): an exchange in which nothing crosses (the local stage) and a lockstep stage whose
messages the runner counts. Clients' architectures may differ: nothing but the messages crosses between them (no
parameters, no architectures). The client optimiser is the config's
(``training.optimizer``): with ``persistent: true`` one optimiser per client serves both stages and
every round (pipelines/fedal/NOTES.md A9 default); with ``persistent: false`` it is re-created at every stage.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

import torch
from pydantic import Field

from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.engine.ledger import Message
from bench.engine.loop import Loop, Step
from bench.engine.protocol import Exchange, Lockstep, Metrics, Phase
from bench.engine.state import Client, ClientStateT, Server, ServerStateT
from bench.errors import BenchError

UploadT = TypeVar("UploadT", bound=Message)  # what a client sends for a public batch
ReplyT = TypeVar("ReplyT", bound=Message)  # what the server answers each client


class TransferParams(AlgorithmParams):
    global_steps: int | None = Field(None, ge=1, description=(
        "global-transfer iterations per round; None: training.local_steps (τ for both stages, Algorithm 1)"))
    public_batch_size: int | None = Field(None, ge=1, description="public mini-batch size; None: training.batch_size")


@dataclass
class PublicOutputs:
    """A client's forward pass on the public batch, with its graph (kept on the client's side)."""

    features: torch.Tensor
    logits: torch.Tensor


@dataclass(frozen=True)
class LogitsUpload:
    """A client's logits f_n(x) on the public batch (B × K): FedMD's and FedAL's upstream message."""

    logits: torch.Tensor


class KnowledgeTransfer(Algorithm[ClientStateT, ServerStateT, None, None], Generic[ClientStateT, ServerStateT,
                                                                                   UploadT, ReplyT]):
    """Two stages of τ iterations per round (module docstring); subclasses define the messages (``UploadT`` up,
    ``ReplyT`` down) and the losses."""

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

    def phases(self, round_index: int) -> Sequence[Phase[ClientStateT, ServerStateT]]:
        steps = self.global_steps
        public = self.ctx.shared_public(self.params.public_batch_size, "transfer")
        local = Exchange(self.broadcast, self.client_update, self.aggregate)
        transfer = Lockstep(steps, lambda i: public.batch((round_index - 1) * steps + i), self.start_public,
                            self.forward_public, self.upload, self.serve, self.transfer_loss,
                            min_clients=self.min_clients())
        return [transfer, local] if self.public_first else [local, transfer]

    def min_clients(self) -> int:
        """Clients a round needs (a leave-one-out teacher needs 2)."""
        return 1

    # -- local training: nothing crosses --------------------------------------------------------

    def broadcast(self, round_index: int, server: Server[ServerStateT], cid: int) -> None:
        return None

    def update(self, client: Client[ClientStateT]) -> None:
        return None

    def local_update(self, round_index: int, client: Client[ClientStateT]) -> tuple[None, float]:
        self.before_local(round_index, client)
        loss = self.ctx.local_train(client, round_index, self.local_loss)
        self.after_local(round_index, client)
        return None, loss

    def before_local(self, round_index: int, client: Client[ClientStateT]) -> None:
        """Hook at the start of the client's local stage (FedAL's snapshot θ^{t,0})."""

    def after_local(self, round_index: int, client: Client[ClientStateT]) -> None:
        """Hook at the end of the client's local stage (FCCL's previous-round model)."""

    # -- global knowledge transfer ----------------------------------------------------------------

    def start_public(self, round_index: int, client: Client[ClientStateT]) -> Loop:
        """The client's start of the global stage: its loop for the stage's steps, its own optimiser (FedAL takes
        its snapshot θ^{t+½,0} first, FCCL may pre-train or use a fresh optimiser)."""
        return self.ctx.client_loop(client, round_index)

    def forward_public(self, client: Client[ClientStateT], x: torch.Tensor) -> PublicOutputs:
        """The client's one train-mode forward pass on the public batch (pipelines/fedal/NOTES.md A4)."""
        client.model.train()
        features, logits = client.model(x)
        return PublicOutputs(features, logits)

    def upload(self, client: Client[ClientStateT], outputs: PublicOutputs) -> UploadT:
        """What the client sends for the public batch (FedMD, FedAL, CFD, FCCL: its logits, :class:`LogitsUpload`)."""
        raise NotImplementedError

    def serve(self, round_index: int, server: Server[ServerStateT], cids: list[int], x: torch.Tensor,
              uploads: list[UploadT]) -> tuple[list[ReplyT], Metrics]:
        """The server's answer to each client (``cids``, in the uploads' order) for the public batch ``x`` (public:
        the server holds it too), and its metrics for the round."""
        raise NotImplementedError

    def transfer_loss(self, step: Step, client: Client[ClientStateT], x: torch.Tensor, outputs: PublicOutputs,
                      reply: ReplyT) -> torch.Tensor:
        """The client's global-stage objective, built on ``outputs`` (its forward pass of this iteration)."""
        raise NotImplementedError


def logits_upload(outputs: PublicOutputs) -> LogitsUpload:
    """The usual upload: the client's logits on the public batch, detached."""
    return LogitsUpload(outputs.logits.detach())


def stacked_logits(uploads: list[LogitsUpload]) -> torch.Tensor:
    """The uploaded logits as one N × B × K tensor, in the clients' order."""
    return torch.stack([u.logits for u in uploads])
