"""The interface every method implements.

A method declares its round as phases (:meth:`Algorithm.phases`, :mod:`bench.engine.protocol`) that the runner
drives (:mod:`bench.runner.rounds`), counting every message it delivers in the run's communication ledger: what a
method's message functions return is all that crosses between its clients and its server. By default a round is
one exchange: the server broadcasts to each selected client (:meth:`Algorithm.broadcast`, server side), the client
takes the broadcast in (:meth:`Algorithm.receive_broadcast`), trains (:meth:`Algorithm.local_update`, by default
:meth:`Algorithm.local_loss` over its batches) and answers with its update (:meth:`Algorithm.update`); the server
aggregates the updates in client-id order (:meth:`Algorithm.aggregate`). The FedAvg family
(:class:`ParameterAveraging`) sends the model's shared weights and its update, each with the method's typed payload
(:mod:`bench.engine.messages`), and usually overrides only :meth:`Algorithm.local_loss`; methods with other
communication patterns (logits on a public set, rewards after aggregation) declare their own phases.

Each method declares its typed state: ``ClientState`` and ``ServerState`` (dataclasses deriving from
:class:`~bench.engine.state.NoState`); ``personal_parameters`` names the state-dict prefixes that stay
with each client (never averaged, never overwritten by the broadcast; FL-bench's personal/shared
split); :meth:`Algorithm.evaluations` declares which models are evaluated on which splits, and
:meth:`Algorithm.mechanisms` which mechanisms its paper claims and the diagnostics that show them at work.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Generic, Literal, TypeVar

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from bench.engine.aggregate import load_state, weighted_average
from bench.engine.context import Context
from bench.engine.evaluation import CLIENT_GLOBAL_ACC, GLOBAL_ACC, LOCAL_ACC, VAL_ACC, Evaluation
from bench.engine.ledger import Message
from bench.engine.loop import Step
from bench.engine.mechanisms import Mechanism
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.protocol import Exchange, Metrics, Phase
from bench.engine.state import Client, ClientStateT, NoState, Server, ServerStateT
from bench.errors import BenchError

DownT = TypeVar("DownT", bound=Message)  # what the server broadcasts to a client
UpT = TypeVar("UpT", bound=Message)  # what a client sends back after its local update
DownP = TypeVar("DownP")  # the payload of a parameter-averaging method's broadcast, besides the model
UpP = TypeVar("UpP")  # the payload of its update, besides the model


class AlgorithmParams(BaseModel):
    """Hyperparameters of a method; subclasses add fields with the paper's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Algorithm(Generic[ClientStateT, ServerStateT, DownT, UpT]):
    name: ClassVar[str] = ""
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams
    ClientState: ClassVar[type[NoState]] = NoState
    ServerState: ClassVar[type[NoState]] = NoState
    has_global_model: ClassVar[bool] = True
    averages_models: ClassVar[bool] = False  # combines the clients' models entry by entry: one architecture for all
    personal_parameters: ClassVar[tuple[str, ...]] = ()  # state-dict key prefixes kept by each client
    resident_models: ClassVar[int] = 1  # copies of the client model held during local training
    metrics_order: ClassVar[tuple[str, ...]] = ()  # metrics that lead a round's record rows, in this order

    def resident_parameters(self, model: torch.nn.Module) -> int:
        """Parameters held in memory during local training (FedHKD Table 1 "Params"): ``resident_models``
        copies of the client model; methods with extra models (FedGen's generator) add them."""
        return self.resident_models * sum(p.numel() for p in model.parameters())

    def __init__(self, params: AlgorithmParams, ctx: Context) -> None:
        self.params = params
        self.ctx = ctx

    # -- set-up ---------------------------------------------------------------------------------

    def init_server(self) -> Server[ServerStateT]:
        if self.averages_models and set(self.ctx.architectures) != {self.ctx.config.model.name}:
            raise BenchError(f"{self.name} averages parameters, so every client needs the architecture "
                             f"{self.ctx.config.model.name!r}; drop model.candidates")
        if self.ctx.config.training.vectorize_clients:
            self.check_vectorizable()
        model = self.ctx.build_model("server") if self.has_global_model else None
        return Server(model, self.init_server_state(model))

    def init_server_state(self, model: torch.nn.Module | None) -> ServerStateT:
        return self.ServerState()  # type: ignore[return-value]  # a ClassVar cannot hold a type variable (PEP 526)

    def init_client_state(self, cid: int) -> ClientStateT:
        return self.ClientState()  # type: ignore[return-value]  # a ClassVar cannot hold a type variable (PEP 526)

    def init_client_model(self, cid: int, server: Server[ServerStateT]) -> torch.nn.Module:
        """A client's model (its assigned architecture): a copy of the global model when there is one
        of the same architecture, else its own initialisation."""
        name = self.ctx.architectures[cid]
        model = self.ctx.build_model("client", cid, name=name)
        if server.model is not None and name == self.ctx.config.model.name:
            model.load_state_dict(server.model.state_dict())
        return model

    def shared_keys(self, model: torch.nn.Module) -> list[str] | None:
        """The state-dict keys the server shares (None: all): every key not under ``personal_parameters``."""
        if not self.personal_parameters:
            return None
        return [k for k in model.state_dict() if not k.startswith(self.personal_parameters)]

    # -- one round ------------------------------------------------------------------------------

    def phases(self, round_index: int) -> Sequence[Phase[ClientStateT, ServerStateT]]:
        """The round's phases, which the runner drives: by default one exchange (module docstring), its clients
        in id order, or one after another in a seeded order when the method is :meth:`sequential`."""
        together = self.update_together if self.ctx.config.training.vectorize_clients else None
        return [Exchange(self.broadcast, self.client_update, self.aggregate, sequential=self.sequential(),
                         take_each=self.receive, work_together=together)]

    def sequential(self) -> bool:
        """The communication pattern: False (default), every selected client starts from the server state
        of the round's start; True, clients train one after another in a seeded random order
        (:meth:`~bench.engine.context.Context.client_order`) and the server takes in each update
        (:meth:`receive`) before the next client's broadcast (FedHKD's released code, pipelines/fedhkd/NOTES.md §3.9)."""
        return False

    def broadcast(self, round_index: int, server: Server[ServerStateT], cid: int) -> DownT:
        """Server side: what the server sends client ``cid`` at the start of its update."""
        raise NotImplementedError(f"{self.name} declares no broadcast")

    def receive_broadcast(self, client: Client[ClientStateT], message: DownT) -> None:
        """Client side: the client takes the broadcast in (nothing to take in by default)."""

    def client_update(self, round_index: int, client: Client[ClientStateT], message: DownT) -> tuple[UpT, Metrics]:
        """Client side, the default exchange's work: take the broadcast in, train, answer with the update; the
        mean training loss is the round's ``train_loss``."""
        self.receive_broadcast(client, message)
        update, loss = self.local_update(round_index, client)
        return update, {"train_loss": loss}

    def local_update(self, round_index: int, client: Client[ClientStateT]) -> tuple[UpT, float]:
        """Client side: the local epochs or steps on :meth:`local_loss`; the update and the mean loss."""
        loss = self.ctx.local_train(client, round_index, self.local_loss)
        return self.update(client), loss

    def local_loss(self, step: Step, client: Client[ClientStateT], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The per-batch local objective; plain cross-entropy by default."""
        _, logits = client.model(x)
        return F.cross_entropy(logits, y)

    def update(self, client: Client[ClientStateT]) -> UpT:
        """Client side: what the client sends the server after its local training."""
        raise NotImplementedError(f"{self.name} declares no update")

    def update_together(self, round_index: int, clients: list[Client[ClientStateT]],
                        messages: list[DownT]) -> list[tuple[UpT, Metrics]]:
        """:meth:`client_update` of every client at once (``training.vectorize_clients``): each takes its broadcast
        in, their :meth:`local_loss` is minimised together (:meth:`~bench.engine.context.Context.train_together`),
        each answers with its update — what :meth:`client_update` computes, to float32 rounding
        (bench/engine/vectorized.py)."""
        for client, message in zip(clients, messages):
            self.receive_broadcast(client, message)
        losses = self.ctx.train_together(clients, round_index, self.local_loss)
        return [(self.update(client), {"train_loss": loss}) for client, loss in zip(clients, losses)]

    def check_vectorizable(self) -> None:
        """Refuse ``training.vectorize_clients`` where it cannot apply: it batches the local training of
        methods defined by their :meth:`local_loss` alone (FedAvg, FedProx, Standalone), on one architecture."""
        own = [name for name in ("phases", "client_update", "local_update")
               if getattr(type(self), name) is not getattr(Algorithm, name)]
        if own or self.sequential():
            raise BenchError(f"training.vectorize_clients batches the local training of methods defined by their "
                             f"local_loss alone (fedavg, fedprox, standalone); {self.name} has its own "
                             f"{' and '.join(own) or 'sequential round'}: set training.vectorize_clients: false")
        if len(set(self.ctx.architectures)) > 1:
            raise BenchError("training.vectorize_clients batches clients of one architecture; drop model.candidates "
                             "or set training.vectorize_clients: false")

    def receive(self, round_index: int, server: Server[ServerStateT], update: UpT) -> None:
        """Server side: a :meth:`sequential` method's server taking in one client's update within the round."""

    def aggregate(self, round_index: int, server: Server[ServerStateT], updates: list[UpT]) -> Metrics:
        """Server side: combine the clients' updates (client-id order) into the server state; the server's
        metrics for the round. Methods without one do nothing."""
        return {}

    # -- mechanisms -----------------------------------------------------------------------------

    @classmethod
    def mechanisms(cls, params: AlgorithmParams) -> tuple[Mechanism, ...]:
        """The mechanisms the method's paper claims, each with the per-round diagnostic its records show it by
        (:mod:`bench.engine.mechanisms`); none by default. From the parameters alone (a variant with the mechanism
        switched off declares none), so a report reads them from a run's config."""
        return ()

    # -- evaluation (PFLlib's per-method evaluation hook) ---------------------------------------

    def evaluations(self) -> list[Evaluation]:
        """Which models are evaluated on which splits: from the config's ``evaluation`` section (the global
        model only when the method has one; the validation split when the partition holds one out)."""
        cfg = self.ctx.config
        chosen = [(GLOBAL_ACC, cfg.evaluation.global_model and self.has_global_model),
                  (LOCAL_ACC, cfg.evaluation.local_models),
                  (CLIENT_GLOBAL_ACC, cfg.evaluation.clients_on_global_test),
                  (VAL_ACC, cfg.partition.validation_fraction > 0)]
        return [evaluation for evaluation, wanted in chosen if wanted]

    def global_model(self, server: Server[ServerStateT]) -> torch.nn.Module | None:
        """The model evaluated as the global model, if the method has one."""
        return server.model

    def client_model(self, server: Server[ServerStateT], client: Client[ClientStateT]) -> torch.nn.Module:
        """The model evaluated as the client's (its personalised model)."""
        return client.model

    def method_model(self, metric: str, server: Server[ServerStateT],
                     clients: list[Client[ClientStateT]]) -> torch.nn.Module | None:
        """The model an evaluation of role ``method`` measures under ``metric`` (its ``forward`` returns
        ``(features, logits)``; the argmax of the logits is its prediction); None: nothing to measure this
        round. Only methods declaring such evaluations implement it."""
        raise NotImplementedError(f"{self.name} declares no evaluation of role 'method' ({metric})")

    def extra_metrics(self, server: Server[ServerStateT], clients: list[Client[ClientStateT]]) -> dict[str, float]:
        """Values the method records on evaluation rounds beside its evaluations (FedHKD's classes with knowledge)."""
        return {}

    def client_records(self, server: Server[ServerStateT],
                       clients: list[Client[ClientStateT]]) -> dict[str, dict[int, float]]:
        """Per-client values the method records after every round (``records.csv``, one row per client), e.g.
        the reward each client received (a reputation, a download share, a sub-model size): metric ->
        client id -> value, for this round's ``clients``."""
        return {}


class AveragingParams(AlgorithmParams):
    weighting: Literal["samples", "uniform"] = Field("samples", description="aggregation weights n_k or 1")


class ParameterAveraging(Algorithm[ClientStateT, ServerStateT, ModelBroadcast[DownP], Update[UpP]]):
    """The FedAvg family: the server broadcasts its model's shared weights and buffers with the method's payload
    (:meth:`broadcast_payload`), each client loads them (:meth:`receive_payload` takes the payload in), trains and
    sends its model with its payload (:meth:`update_payload`), and the server takes
    θ^{t+1} = Σ_{k∈S_t} (n_k / Σ_{j∈S_t} n_j) θ_k^t over the full state dict, BatchNorm running
    statistics included, ``num_batches_tracked`` copied (pipelines/fedhkd/NOTES.md §4 and §11.3,
    pipelines/dafkd/NOTES.md §2.1); personal parameters are neither sent nor averaged. ``weighting: uniform`` is the
    unweighted mean some released code uses (FedHKD's, pipelines/fedhkd/NOTES.md §11.3)."""

    Params = AveragingParams
    params: AveragingParams
    averages_models = True

    def global_state(self, server: Server[ServerStateT], cid: int) -> dict[str, torch.Tensor]:
        """The model state the server shares with client ``cid``: its global model's entries but the personal ones."""
        assert server.model is not None
        keys = self.shared_keys(server.model)
        return {k: v for k, v in server.model.state_dict().items() if keys is None or k in keys}

    def broadcast(self, round_index: int, server: Server[ServerStateT], cid: int) -> ModelBroadcast[DownP]:
        return ModelBroadcast(self.global_state(server, cid), self.broadcast_payload(round_index, server, cid))

    def broadcast_payload(self, round_index: int, server: Server[ServerStateT], cid: int) -> DownP:
        """What the server sends besides its model."""
        raise NotImplementedError(f"{self.name} declares no broadcast payload")

    def receive_broadcast(self, client: Client[ClientStateT], message: ModelBroadcast[DownP]) -> None:
        """The shared weights and buffers overwrite the client's (its personal ones stay); then the payload."""
        load_state(client.model, message.state, strict=not self.personal_parameters)
        self.receive_payload(client, message.payload)

    def receive_payload(self, client: Client[ClientStateT], payload: DownP) -> None:
        """The client takes in what came besides the model (nothing to do by default)."""

    def update(self, client: Client[ClientStateT]) -> Update[UpP]:
        return Update(client.cid, client.data.num_samples, client.model.state_dict(), self.update_payload(client))

    def update_payload(self, client: Client[ClientStateT]) -> UpP:
        """What the client sends besides its model."""
        raise NotImplementedError(f"{self.name} declares no update payload")

    def aggregate(self, round_index: int, server: Server[ServerStateT], updates: list[Update[UpP]]) -> Metrics:
        assert server.model is not None
        weights = [u.num_samples if self.params.weighting == "samples" else 1.0 for u in updates]
        keys = self.shared_keys(server.model)
        load_state(server.model, weighted_average([u.state for u in updates], weights, keys), strict=keys is None)
        return {}


class ModelAveraging(ParameterAveraging[ClientStateT, ServerStateT, None, None]):
    """A parameter-averaging method that sends nothing besides the model (FedAvg, FedProx, MOON, ...)."""

    def broadcast_payload(self, round_index: int, server: Server[ServerStateT], cid: int) -> None:
        return None

    def update_payload(self, client: Client[ClientStateT]) -> None:
        return None
