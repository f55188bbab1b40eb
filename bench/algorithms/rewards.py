"""What the gradient-reward methods of FedAKD's comparison share (CFFL, CGSV, FedAVE; specs/fedakd.md §4):
each client keeps a personal model — its reward, evaluated as its model — and uploads its local update as
a flat vector; the server scores the clients (a reputation) and gives each a different part of the
aggregate. The scores and the share each client received are typed server state, recorded every round.

Switches every such method has, with the defaults its ``mode`` sets (``paper``: the method as published,
on the train split; ``code``: FedAKD's released scripts, §4 [C]):

    start       own: a client trains its personal model       global: a copy of the global model (the
                                                              personal model is rebuilt from it each round)
    data        train: trains on, and is scored on, the      all: trains on all its local data (train and
                train split and the local test split          local test splits) and is scored on it (CFFL,
                                                              CGSV [C], §0.8); FedAVE [C] uses ``train``
    validation  split: the clients' validation splits        head: the first 10 % of each client's train
                (``partition.validation_fraction``)          split, which it also trains on (§2.5 [C])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from bench.algorithms.base import Algorithm
from bench.algorithms.modes import ModeParams
from bench.engine.aggregate import copy_state
from bench.engine.evaluation import LOCAL_ACC, Evaluation
from bench.engine.state import Client, NoState, Server
from bench.engine.validation import ValidationSource, server_validation
from bench.engine.vectors import load_vector, model_vector


class RewardParams(ModeParams):
    start: Literal["own", "global"] = "own"
    data: Literal["train", "all"] = "train"
    validation: ValidationSource = "split"


@dataclass
class Reputations(NoState):
    """The server's view of the clients: a reputation per client (None before the first round) and the
    share of the aggregate each received in the last round (the reward; NaN for a client that got none)."""

    reputation: torch.Tensor | None = None
    share: dict[int, float] = field(default_factory=dict)


class RewardedClients(Algorithm[NoState, Reputations]):
    """The shared mechanics; a method adds its scoring and its reward in :meth:`run_round`."""

    Params = RewardParams
    params: RewardParams
    ServerState = Reputations

    def pool(self, client: Client) -> tuple[torch.Tensor, torch.Tensor]:
        """What the client trains on: its train split, or all its local data (``data: all``)."""
        return (client.data.x, client.data.y) if self.params.data == "train" else client.data.with_test()

    def evaluations(self) -> list[Evaluation]:
        """``data: all`` scores the personal model on all the local data it trained on (§0.8 [C])."""
        chosen = super().evaluations()
        if self.params.data == "all":
            chosen = [Evaluation(e.metric, e.model, "local_all") if e == LOCAL_ACC else e for e in chosen]
        return chosen

    def init_server_state(self, model: torch.nn.Module | None) -> Reputations:
        k = self.ctx.config.partition.num_clients
        return Reputations(torch.full((k,), 1.0 / k, dtype=torch.float64))

    def validation(self, clients: list[Client]) -> tuple[torch.Tensor, torch.Tensor]:
        return server_validation(clients, self.params.validation)

    def local_deltas(self, round_index: int, server: Server, clients: list[Client],
                     keys: list[str]) -> tuple[list[torch.Tensor], float]:
        """Each client's local pass from its start model (``start``) over :meth:`pool`: the updates of ``keys`` as
        flat vectors (new − start), in client order, and the mean loss. Each client's model holds its trained
        model afterwards."""
        assert server.model is not None
        deltas, losses = [], []
        for client in clients:
            if self.params.start == "global":
                copy_state(client.model, server.model)
            before = model_vector(client.model, keys)
            losses.append(self.ctx.local_train(client, round_index, self.local_loss, data=self.pool(client)))
            deltas.append(model_vector(client.model, keys) - before)
        return deltas, sum(losses) / len(losses)

    @torch.no_grad()
    def add_to(self, client: Client, vector: torch.Tensor, keys: list[str]) -> None:
        """The client's personal model plus ``vector`` on ``keys`` (its reward)."""
        load_vector(client.model, model_vector(client.model, keys) + vector, keys)

    def client_records(self, server: Server[Reputations], clients: list[Client]) -> dict[str, dict[int, float]]:
        state = server.state
        out: dict[str, dict[int, float]] = {"reward_share": {c.cid: state.share[c.cid] for c in clients
                                                             if c.cid in state.share}}
        if state.reputation is not None:
            out["reputation"] = {c.cid: float(state.reputation[c.cid]) for c in clients}
        return out
