"""What the gradient-reward methods of FedAKD's comparison share (CFFL, CGSV, FedAVE; pipelines/fedakd/NOTES.md §4):
each client keeps a personal model — its reward, evaluated as its model — and uploads its local update as
a flat vector; the server scores the clients (a reputation) and gives each a different part of the
aggregate. The scores and the share each client received are typed server state, recorded every round.

A round is two exchanges (:mod:`bench.engine.protocol`): the server sends each client the global model (when
the client starts from it), the client trains and uploads its update (:class:`VectorUpload`, sparse where the
method sparsifies it), the server aggregates, scores and computes each client's reward; then it sends each
client its reward (a :class:`~bench.engine.vectors.SparseVector`), which the client adds to its model.

Every such method has the switches of :class:`RewardParams` (``paper``: the method as published, on the train
split; ``code``: FedAKD's released scripts, §4 [C]).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Generic, Literal, TypeVar

import torch
from torch import nn

from bench.algorithms.base import Algorithm
from bench.algorithms.readings import ModeParams, reading
from bench.engine.aggregate import load_state
from bench.engine.evaluation import LOCAL_ACC, Evaluation
from bench.engine.messages import ModelBroadcast
from bench.engine.protocol import Exchange, Metrics, Phase, no_metrics
from bench.engine.state import Client, NoState, Server
from bench.engine.validation import ValidationSource
from bench.engine.vectors import SparseVector, load_vector, model_vector


class RewardParams(ModeParams):
    """The switches every gradient-reward method has."""

    start: Literal["own", "global"] = reading(
        "own", "global", "what a client trains: its personal model; or a copy of the global model (the personal "
        "model is rebuilt from it each round)")
    data: Literal["train", "all"] = reading(
        "train", "all", "what a client trains on and is scored on: its train split (and its local test split); or "
        "all its local data, train and local test splits (§0.8)")
    validation: ValidationSource = reading(
        "split", "stored", "the server's validation set: the clients' validation splits (partition.validation_fraction); "
        "or (stored) the first 10 % of each client's stored data, train and local test splits together, which it also "
        "trains on and which holds some of its test images (§2.5 [C], leakage); head: the first 10 % of each "
        "train split")


@dataclass
class Reputations(NoState):
    """The server's view of the clients: a reputation per client (None before the first round), the
    share of the aggregate each received in the last round (the reward; NaN for a client that got none), and the
    rewards computed this round and not yet sent."""

    reputation: torch.Tensor | None = None
    share: dict[int, float] = field(default_factory=dict)
    rewards: dict[int, SparseVector] = field(default_factory=dict)


@dataclass
class RewardedClient(NoState):
    """What a client remembers between its upload and its reward in one round: its model before training (as a
    vector of the method's keys) and the update it sent (dense)."""

    start: torch.Tensor | None = None
    sent: torch.Tensor | None = None


@dataclass(frozen=True)
class VectorUpload:
    """A client's upload: its update of the method's keys as a flat vector (sparse where the method sparsifies
    it) and the number of samples it trained on."""

    cid: int
    num_samples: int
    vector: SparseVector


UploadT = TypeVar("UploadT", bound=VectorUpload)


class RewardedClients(Algorithm[RewardedClient, Reputations, ModelBroadcast[None] | None, UploadT], Generic[UploadT]):
    """The shared mechanics; a method adds its keys, its upload, its scoring and rewards (:meth:`aggregate`) and how
    a client takes its reward in (:meth:`take_reward`)."""

    Params = RewardParams
    averages_models = True
    params: RewardParams
    ClientState = RewardedClient
    ServerState = Reputations

    def pool(self, client: Client[RewardedClient]) -> tuple[torch.Tensor, torch.Tensor]:
        """What the client trains on: its train split, or all its local data (``data: all``)."""
        return (client.data.x, client.data.y) if self.params.data == "train" else client.data.with_test

    def evaluations(self) -> list[Evaluation]:
        """``data: all`` scores the personal model on all the local data it trained on (§0.8 [C])."""
        chosen = super().evaluations()
        if self.params.data == "all":
            chosen = [Evaluation(e.metric, e.model, "local_all") if e == LOCAL_ACC else e for e in chosen]
        return chosen

    def init_server_state(self, model: nn.Module | None) -> Reputations:
        k = self.ctx.config.partition.num_clients
        return Reputations(torch.full((k,), 1.0 / k, dtype=torch.float64))

    def validation(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.ctx.server_validation(self.params.validation)

    def keys(self, model: nn.Module) -> list[str]:
        """The state-dict entries the method's vectors hold."""
        raise NotImplementedError

    @cached_property
    def scoring_model(self) -> nn.Module:
        """The server's scratch model to score candidate parameters on (overwritten before every use)."""
        return self.ctx.build_model("scoring-model")

    # -- the round ---------------------------------------------------------------------------------

    def phases(self, round_index: int) -> Sequence[Phase[RewardedClient, Reputations]]:
        return [Exchange(self.broadcast, self.client_update, self.aggregate, who=self.taking_part),
                Exchange(self.send_reward, self.receive_reward, no_metrics, who=self.rewarded)]

    def taking_part(self, server: Server[Reputations], cids: list[int]) -> list[int]:
        """The clients that train this round: all the selected ones (CFFL: those that have not left)."""
        return cids

    def broadcast(self, round_index: int, server: Server[Reputations], cid: int) -> ModelBroadcast[None] | None:
        """``start: global``: the global model, which the client trains a copy of; ``own``: nothing."""
        assert server.model is not None
        return ModelBroadcast(server.model.state_dict(), None) if self.params.start == "global" else None

    def client_update(self, round_index: int, client: Client[RewardedClient],
                      message: ModelBroadcast[None] | None) -> tuple[UploadT, Metrics]:
        """One local pass over :meth:`pool` from the start model; the update of :meth:`keys` as a flat vector
        (new − start) goes up as :meth:`upload` makes it."""
        keys = self.keys(client.model)
        client.state.start = model_vector(client.model, keys)
        if message is not None:
            load_state(client.model, message.state)
        before = model_vector(client.model, keys)
        loss = self.ctx.local_train(client, round_index, self.local_loss, data=self.pool(client))
        return self.upload(client, model_vector(client.model, keys) - before), {"train_loss": loss}

    def upload(self, client: Client[RewardedClient], delta: torch.Tensor) -> UploadT:
        """What the client sends for its update ``delta``."""
        raise NotImplementedError

    def rewarded(self, server: Server[Reputations], cids: list[int]) -> list[int]:
        return [cid for cid in cids if cid in server.state.rewards]

    def send_reward(self, round_index: int, server: Server[Reputations], cid: int) -> SparseVector:
        return server.state.rewards.pop(cid)

    def receive_reward(self, round_index: int, client: Client[RewardedClient],
                       reward: SparseVector) -> tuple[None, Metrics]:
        """The client's model becomes what :meth:`take_reward` makes of it; the round's scratch is dropped."""
        self.take_reward(client, reward.dense(), self.keys(client.model))
        client.state.start = client.state.sent = None
        return None, {}

    @torch.no_grad()
    def take_reward(self, client: Client[RewardedClient], reward: torch.Tensor, keys: list[str]) -> None:
        """The client's personal model plus its ``reward`` on ``keys``."""
        load_vector(client.model, model_vector(client.model, keys) + reward, keys)

    def client_records(self, server: Server[Reputations],
                       clients: list[Client[RewardedClient]]) -> dict[str, dict[int, float]]:
        state = server.state
        out: dict[str, dict[int, float]] = {"reward_share": {c.cid: state.share[c.cid] for c in clients
                                                             if c.cid in state.share}}
        if state.reputation is not None:
            out["reputation"] = {c.cid: float(state.reputation[c.cid]) for c in clients}
        return out
