"""The interface every method implements.

A round is ``broadcast -> local_update (per selected client, in client-id order) -> aggregate``; the
default round feeds the run's communication ledger (:mod:`bench.engine.ledger`) with each broadcast
(:meth:`Algorithm.broadcast_payload`) and each client's typed :class:`~bench.engine.state.Update`.
The FedAvg family overrides only the pieces that differ (usually :meth:`Algorithm.local_loss`);
methods with other communication patterns (logits on a public set, generators, prototypes)
override :meth:`Algorithm.run_round` and use the same :class:`~bench.engine.context.Context`.

Each method declares its typed state: ``ClientState`` and ``ServerState`` (dataclasses deriving from
:class:`~bench.engine.state.NoState`) and the messages its clients send (subclasses of
:class:`~bench.engine.state.Update`); ``personal_parameters`` names the state-dict prefixes that stay
with each client (never averaged, never overwritten by the broadcast; FL-bench's personal/shared
split); :meth:`Algorithm.evaluations` declares which models are evaluated on which splits.
"""
from __future__ import annotations

from typing import Any, ClassVar, Generic, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from bench.engine.aggregate import copy_state, load_state, weighted_average
from bench.engine.context import Context
from bench.engine.evaluation import CLIENT_GLOBAL_ACC, GLOBAL_ACC, LOCAL_ACC, VAL_ACC, Evaluation
from bench.engine.loop import Step
from bench.engine.state import Client, ClientStateT, NoState, Server, ServerStateT, Update
from bench.errors import BenchError


class AlgorithmParams(BaseModel):
    """Hyperparameters of a method; subclasses add fields with the paper's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Algorithm(Generic[ClientStateT, ServerStateT]):
    name: ClassVar[str] = ""
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams
    ClientState: ClassVar[type[NoState]] = NoState
    ServerState: ClassVar[type[NoState]] = NoState
    has_global_model: ClassVar[bool] = True
    personal_parameters: ClassVar[tuple[str, ...]] = ()  # state-dict key prefixes kept by each client
    resident_models: ClassVar[int] = 1  # copies of the client model held during local training

    def resident_parameters(self, model: torch.nn.Module) -> int:
        """Parameters held in memory during local training (FedHKD Table 1 "Params"): ``resident_models``
        copies of the client model; methods with extra models (FedGen's generator) add them."""
        return self.resident_models * sum(p.numel() for p in model.parameters())

    def __init__(self, params: AlgorithmParams, ctx: Context) -> None:
        self.params = params
        self.ctx = ctx

    # -- set-up ---------------------------------------------------------------------------------

    def init_server(self) -> Server[ServerStateT]:
        if self.ctx.config.training.vectorize_clients:
            self.check_vectorizable()
        model = self.ctx.build_model("server") if self.has_global_model else None
        return Server(model, self.init_server_state(model))

    def init_server_state(self, model: torch.nn.Module | None) -> ServerStateT:
        return self.ServerState()  # type: ignore[return-value]

    def init_client_state(self, cid: int) -> ClientStateT:
        return self.ClientState()  # type: ignore[return-value]

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

    def sequential(self) -> bool:
        """The communication pattern: False (default), every selected client starts from the server state
        of the round's start; True, clients train one after another in a seeded random order
        (:meth:`~bench.engine.context.Context.client_order`) and the server takes in each update
        (:meth:`receive`) before the next client's broadcast (FedHKD's released code, specs/fedhkd.md §3.9)."""
        return False

    def run_round(self, round_index: int, server: Server[ServerStateT],
                  clients: list[Client[ClientStateT]]) -> dict[str, float]:
        """One communication round over the selected ``clients`` (sorted by id): each is broadcast to and
        trains (in id order, or in the seeded order of a :meth:`sequential` method, whose server takes in
        each update at once); then the updates, in client-id order, are aggregated. Returns metrics."""
        if self.ctx.config.training.vectorize_clients:
            return self.run_round_together(round_index, server, clients)
        order = [clients[i] for i in self.ctx.client_order(round_index, len(clients))] if self.sequential() \
            else clients
        done: dict[int, tuple[Update, float]] = {}
        for client in order:
            self.broadcast(server, client)
            self.ctx.ledger.down(self.broadcast_payload(server, client))
            update, loss = self.local_update(round_index, server, client)
            self.ctx.ledger.up(update)
            if self.sequential():
                self.receive(round_index, server, update)
            done[client.cid] = update, loss
        updates = [done[c.cid][0] for c in clients]
        losses = [done[c.cid][1] for c in clients]
        self.aggregate(round_index, server, updates)
        return {"train_loss": sum(losses) / len(losses)}

    def run_round_together(self, round_index: int, server: Server[ServerStateT],
                           clients: list[Client[ClientStateT]]) -> dict[str, float]:
        """:meth:`run_round` with the clients' local training batched (``training.vectorize_clients``): the
        broadcast to every client, their :meth:`local_loss` minimised together
        (:meth:`~bench.engine.context.Context.train_together`), their models aggregated — what :meth:`run_round`
        computes with the default :meth:`local_update`, to float32 rounding (bench/engine/vectorized.py)."""
        for client in clients:
            self.broadcast(server, client)
        losses = self.ctx.train_together(clients, round_index, self.local_loss)
        self.aggregate(round_index, server, [Update(c.cid, c.data.num_samples, c.model.state_dict()) for c in clients])
        return {"train_loss": sum(losses) / len(losses)}

    def check_vectorizable(self) -> None:
        """Refuse ``training.vectorize_clients`` where it cannot apply: it batches the local training of
        methods defined by their :meth:`local_loss` alone (FedAvg, FedProx, Standalone), on one architecture."""
        own = [name for name in ("run_round", "local_update")
               if getattr(type(self), name) is not getattr(Algorithm, name)]
        if own or self.sequential():
            raise BenchError(f"training.vectorize_clients batches the local training of methods defined by their "
                             f"local_loss alone (fedavg, fedprox, standalone); {self.name} has its own "
                             f"{' and '.join(own) or 'sequential round'}: set training.vectorize_clients: false")
        if len(set(self.ctx.architectures)) > 1:
            raise BenchError("training.vectorize_clients batches clients of one architecture; drop model.candidates "
                             "or set training.vectorize_clients: false")

    def broadcast(self, server: Server[ServerStateT], client: Client[ClientStateT]) -> None:
        """Send the global model to the client: its shared weights and BN buffers overwrite the client's."""
        if server.model is not None:
            copy_state(client.model, server.model, self.shared_keys(server.model))

    def broadcast_payload(self, server: Server[ServerStateT], client: Client[ClientStateT]) -> object:
        """What :meth:`broadcast` sends the client, for the communication ledger (:mod:`bench.engine.ledger`):
        the global model's shared weights and buffers; methods that send more add it."""
        if server.model is None:
            return None
        keys = self.shared_keys(server.model)
        return {k: v for k, v in server.model.state_dict().items() if keys is None or k in keys}

    def local_update(self, round_index: int, server: Server[ServerStateT],
                     client: Client[ClientStateT]) -> tuple[Update, float]:
        loss = self.ctx.local_train(client, round_index, self.local_loss)
        return Update(client.cid, client.data.num_samples, client.model.state_dict()), loss

    def local_loss(self, step: Step, client: Client[ClientStateT], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The per-batch local objective; plain cross-entropy by default."""
        _, logits = client.model(x)
        return F.cross_entropy(logits, y)

    def receive(self, round_index: int, server: Server[ServerStateT], update: Update) -> None:
        """A :meth:`sequential` method's server taking in one client's update within the round."""

    def aggregate(self, round_index: int, server: Server[ServerStateT], updates: list[Update]) -> None:
        """Combine the clients' updates into the server state. Methods without one do nothing."""

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

    def client_model(self, client: Client[ClientStateT]) -> torch.nn.Module:
        """The model evaluated as the client's (its personalised model)."""
        return client.model

    def method_model(self, metric: str, server: Server[ServerStateT],
                     clients: list[Client[ClientStateT]]) -> torch.nn.Module | None:
        """The model an evaluation of role ``method`` measures under ``metric`` (its ``forward`` returns
        ``(features, logits)``; the argmax of the logits is its prediction); None: nothing to measure this
        round. Only methods declaring such evaluations implement it."""
        raise NotImplementedError(f"{self.name} declares no evaluation of role 'method' ({metric})")

    def extra_metrics(self, server: Server[ServerStateT], clients: list[Client[ClientStateT]]) -> dict[str, Any]:
        return {}

    def client_records(self, server: Server[ServerStateT],
                       clients: list[Client[ClientStateT]]) -> dict[str, dict[int, float]]:
        """Per-client values the method records after every round (``records.csv``, one row per client), e.g.
        the reward each client received (a reputation, a download share, a sub-model size): metric ->
        client id -> value, for this round's ``clients``."""
        return {}


def with_mode_defaults(data: Any, defaults: dict[str, dict[str, Any]]) -> Any:
    """Raw parameters with the switches their ``mode`` (default ``paper``) sets filled in under the ones given
    explicitly: the ``mode: paper|code`` of a method whose released code differs from its paper."""
    if isinstance(data, dict) and data.get("mode", "paper") in defaults:
        return {**defaults[data.get("mode", "paper")], **data}
    return data


class AveragingParams(AlgorithmParams):
    weighting: Literal["samples", "uniform"] = Field("samples", description="aggregation weights n_k or 1")


class ParameterAveraging(Algorithm[ClientStateT, ServerStateT]):
    """The FedAvg server step shared by the FedAvg family:
    θ^{t+1} = Σ_{k∈S_t} (n_k / Σ_{j∈S_t} n_j) θ_k^t over the full state dict, BatchNorm running
    statistics included, ``num_batches_tracked`` copied (specs/fedhkd.md §4 and §11.3,
    specs/dafkd.md §2.1); personal parameters are not averaged. ``weighting: uniform`` is the unweighted
    mean some official code uses (anchors.md §2.2)."""

    Params = AveragingParams
    params: AveragingParams

    def init_server(self) -> Server[ServerStateT]:
        if set(self.ctx.architectures) != {self.ctx.config.model.name}:
            raise BenchError(f"{self.name} averages parameters, so every client needs the architecture "
                             f"{self.ctx.config.model.name!r}; drop model.candidates")
        return super().init_server()

    def aggregate(self, round_index: int, server: Server[ServerStateT], updates: list[Update]) -> None:
        assert server.model is not None
        weights = [u.num_samples if self.params.weighting == "samples" else 1.0 for u in updates]
        keys = self.shared_keys(server.model)
        load_state(server.model, weighted_average([u.state for u in updates], weights, keys), strict=keys is None)
