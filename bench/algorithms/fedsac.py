"""FedSAC — Wang, Wang, Lyu, Peng, Yang, Wen, Fan, "FedSAC: Dynamic Submodel Allocation for Collaborative
Fairness in Federated Learning", KDD 2024 (pipelines/fedakd/NOTES.md §4 FedSAC). No code of the authors is public;
``mode: code`` follows FedAKD's ``fedsac.py`` (§4 [C]), ``mode: paper`` the notes' summary of the paper (§4 FedSAC) [I].

Contribution and reputation. c_k is client k's standalone accuracy; r_k = 100·exp(β·c_k)/max_j exp(β·c_j)
(:func:`reputations`, β = 2). FedAKD's script reads c_k from the Standalone run's file; a run cannot read
another run's output, so FedSAC measures it itself before round 1, exactly as the Standalone method trains
(``contribution_epochs`` epochs of the client's own model, initialised from the stream Standalone uses, with
a persistent optimiser at ``contribution_lr_factor`` × the run's learning rate, the same batch streams, accuracy on its local test split;
paper: on its validation split) — with the Standalone run's protocol these are the Standalone run's numbers
bit for bit (a test checks it).

Submodels. The neurons are the output channels (filters) of the model's convolutions (96 in SimpleCNN). At an
allocation round the server scores each filter by the increase of the global model's validation loss when
the filter's weights and bias are zeroed, clipped at 0 and normalised to sum 100 (:func:`filter_importance`),
and gives client k its ``keep`` most important filters (:func:`submodel_mask`: code ⌊r_k⌋ filters, paper
⌊r_k·N/100⌋; at least 1). The mask is the client's reward, typed client state, recorded as ``submodel_share``.

The paper's reading [I] allocates every round from the first allocation on, trains each client's submodel and
aggregates each filter over the clients holding it; its reward is the client's submodel of the new global model.
The code's [C] switches are declared on :class:`FedSACParams`; the code evaluates every client with the global
model (``evaluation.local_model: global``, the suite's setting).

Between allocations (before the first, and in code mode after it) a round is plain local training of the
global model and that aggregation with full masks.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm
from bench.algorithms.readings import ModeParams, reading
from bench.engine.aggregate import load_state, weighted_average
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Loop
from bench.engine.protocol import Exchange, Metrics, Phase, no_metrics, nothing
from bench.engine.state import Client, NoState, Server
from bench.engine.validation import ValidationSource
from bench.errors import BenchError


class FedSACParams(ModeParams):
    """FedSAC's hyperparameters (Table 6) and its readings (paper [I], code [C])."""

    beta: float = Field(2.0, ge=0, description="β of the reputation mapping exp(β·c)")
    contribution_epochs: int = Field(20, ge=1, description="epochs of standalone training that measure c_k")
    contribution_lr_factor: float = Field(1.0, gt=0, description="its learning rate, × training.optimizer.lr (the "
                                                                  "Standalone run's ratio: 0.1 in FedAKD's suite)")
    allocation_round: int | None = Field(None, ge=1, description="first allocation round (null: as "
                                                                  "first_allocation says)")
    first_allocation: Literal["three_quarters", "half"] = reading(
        "three_quarters", "half", "the first allocation round when allocation_round is null: ⌊0.75·R⌋ + 1 (Table 6's "
        "mid_round 15 of 20, 0-based); or the code's ⌊R/2⌋ + 1", omitted=("paper", "code"))
    allocation: Literal["once", "every"] = reading(
        "every", "once", "allocate every round from the first allocation on; or once, at it")
    train: Literal["submodel", "layer_freeze"] = reading(
        "submodel", "layer_freeze", "what a client trains: its submodel (the global model with its un-kept filters "
        "zeroed), the un-kept filters' gradients masked to 0; or the full global model, each conv layer frozen whole "
        "iff its last filter is un-kept (the code's requires_grad bug)")
    aggregate: Literal["dynamic", "masked_mean"] = reading(
        "dynamic", "masked_mean", "each filter averaged over the clients holding it (data-size weights), every other "
        "entry over all clients; or the mean over all clients of conv/fc weights and biases, un-kept filters as "
        "zeros, BN never aggregated (the global BN stays at its init)")
    keep: Literal["share", "count"] = reading(
        "share", "count", "a client's filters: its ⌊r_k·N/100⌋ most important; or its ⌊r_k⌋ most important")
    validation: ValidationSource = reading(
        "split", "stored", "the server's validation set: the clients' validation splits; or (stored) the first 10 % of "
        "each client's stored data, train and local test together (§2.5 [C], leakage); head: of its train split")
    contribution_split: Literal["validation", "test"] = reading(
        "validation", "test", "where c_k is measured: the client's validation split; or its local test split")


Filter = tuple[str, str | None, int]  # (weight key, bias key or None, output channel) of one convolution filter


def conv_filters(model: nn.Module) -> list[Filter]:
    """Every output channel of every Conv2d, in module order: the neurons FedSAC allocates."""
    return [(f"{name}.weight", f"{name}.bias" if module.bias is not None else None, i)
            for name, module in model.named_modules() if isinstance(module, nn.Conv2d)
            for i in range(module.out_channels)]


def _filter_keys(weight: str, bias: str | None) -> list[str]:
    return [weight] if bias is None else [weight, bias]


def reputations(contribution: torch.Tensor, beta: float) -> torch.Tensor:
    """r_k = 100·exp(β·c_k) / max_j exp(β·c_j)."""
    r = torch.exp(beta * contribution)
    return 100 * r / r.max()


def submodel_mask(reputation: float, importance: torch.Tensor, keep: Literal["share", "count"]) -> torch.Tensor:
    """The client's filters: the ⌊r⌋ (``count``) or ⌊r·N/100⌋ (``share``) most important, at least 1 and at
    most N; ties by filter order (a stable sort)."""
    n = len(importance)
    count = int(reputation) if keep == "count" else int(reputation * n / 100)
    order = torch.sort(-importance, stable=True).indices[:max(1, min(count, n))]
    mask = torch.zeros(n, dtype=torch.bool)
    mask[order] = True
    return mask


@torch.no_grad()
def filter_importance(model: nn.Module, filters: list[Filter], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per filter, max(0, loss with the filter zeroed − loss), normalised to sum 100 (all zero: zeros)."""
    state = model.state_dict()

    def loss() -> float:
        return float(F.cross_entropy(model(x)[1], y))

    with eval_mode(model):
        base = loss()
        scores = torch.zeros(len(filters), dtype=torch.float64)
        for i, (weight, bias, channel) in enumerate(filters):
            keys = _filter_keys(weight, bias)
            saved = [state[k][channel].clone() for k in keys]
            for k in keys:
                state[k][channel] = 0
            scores[i] = max(0.0, loss() - base)
            for k, value in zip(keys, saved):
                state[k][channel] = value
    return scores / scores.sum() * 100 if scores.sum() > 0 else scores


@torch.no_grad()
def apply_mask(state: dict[str, torch.Tensor], filters: list[Filter], mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """A copy of ``state`` with the un-kept filters' weights and biases set to 0."""
    out = {k: v.clone() for k, v in state.items()}
    for (weight, bias, channel), kept in zip(filters, mask.tolist()):
        if not kept:
            for k in _filter_keys(weight, bias):
                out[k][channel] = 0
    return out


@dataclass
class FedSACClient(NoState):
    mask: torch.Tensor | None = None  # the filters allocated to this client (None: all)


@dataclass
class FedSACServer(NoState):
    contribution: torch.Tensor | None = None  # c_k, measured before round 1
    reputation: torch.Tensor | None = None  # r_k
    importance: torch.Tensor | None = None  # the filters' importance at the last allocation
    masks: dict[int, torch.Tensor] = field(default_factory=dict)  # each client's filters (none: all)


@dataclass(frozen=True)
class Contribution:
    """A client's standalone accuracy c_k, sent once."""

    accuracy: torch.Tensor


@dataclass(frozen=True)
class Submodel:
    """A client's part of the global model: the state dict (un-kept filters zeroed where the method sends a
    submodel) and the filters the client keeps (None: all)."""

    state: dict[str, torch.Tensor]
    mask: torch.Tensor | None


@dataclass(frozen=True)
class TrainedModel:
    """A client's upload: its trained model and its train-split size."""

    cid: int
    state: dict[str, torch.Tensor]
    num_samples: int


@register_algorithm("fedsac")
class FedSAC(Algorithm[FedSACClient, FedSACServer, Submodel, TrainedModel]):
    """Before round 1 each client sends its contribution c_k. A round: the server (re)allocates the submodels, sends
    each client its submodel to train and takes in the trained models; then it sends each client its submodel of
    the new global model, its reward."""

    Params = FedSACParams
    averages_models = True
    params: FedSACParams
    ClientState = FedSACClient
    ServerState = FedSACServer

    # -- contribution --------------------------------------------------------------------------

    def contribution(self, client: Client[FedSACClient]) -> float:
        """c_k: the accuracy of the client's own model after ``contribution_epochs`` of training alone, as
        the Standalone method trains it (same init stream, batch streams and persistent optimiser)."""
        model = self.ctx.build_model("client", client.cid, name=self.ctx.architectures[client.cid])
        lr = self.params.contribution_lr_factor * self.ctx.config.training.optimizer.lr
        optimizer = self.ctx.make_optimizer(model.parameters(), lr)
        alone = Client(client.cid, client.data, model, FedSACClient())  # mask None: every filter
        for epoch in range(1, self.params.contribution_epochs + 1):
            model.train()
            Loop(optimizer, list(model.parameters()), epoch, client.cid, self.ctx.config.training.grad_clip,
                 guard=self.ctx.loss_guard).run(self.ctx.client_batches(alone, epoch),
                                                lambda step, batch: self.local_loss(step, alone, *batch))
        d = client.data
        x, y = (d.test_x, d.test_y) if self.params.contribution_split == "test" else (d.val_x, d.val_y)
        if x is None or y is None:
            raise BenchError("FedSAC measures contributions on the validation splits; set "
                             "partition.validation_fraction > 0, or contribution_split: test")
        return self.ctx.accuracy(model, x, y)

    # -- a round ---------------------------------------------------------------------------------

    def allocates(self, round_index: int) -> bool:
        """An allocation round: from the first allocation on (``allocation: every``), or only then (``once``)."""
        rounds = self.ctx.config.training.rounds
        first = self.params.allocation_round or (int(0.75 * rounds) + 1 if self.params.first_allocation == "three_quarters"
                                                 else rounds // 2 + 1)
        return round_index == first if self.params.allocation == "once" else round_index >= first

    def phases(self, round_index: int) -> Sequence[Phase[FedSACClient, FedSACServer]]:
        return [Exchange(nothing, self.measure_contribution, self.allocate, who=self.unmeasured),
                Exchange(self.broadcast, self.client_update, self.aggregate),
                Exchange(self.reward, self.receive_reward, no_metrics)]

    def unmeasured(self, server: Server[FedSACServer], cids: list[int]) -> list[int]:
        """Every client before the contributions are known; nobody after."""
        return cids if server.state.contribution is None else []

    def measure_contribution(self, round_index: int, client: Client[FedSACClient],
                             message: None) -> tuple[Contribution, Metrics]:
        return Contribution(torch.tensor(self.contribution(client), dtype=torch.float64)), {}

    def allocate(self, round_index: int, server: Server[FedSACServer], contributions: list[Contribution]) -> Metrics:
        """The reputations from the contributions (once), then at an allocation round each client's filters by the
        global model's filter importance on the server's validation set (code: the masks are dropped after it)."""
        assert server.model is not None
        state, p = server.state, self.params
        if contributions:
            state.contribution = torch.stack([c.accuracy for c in contributions])
            state.reputation = reputations(state.contribution, p.beta)
        if self.allocates(round_index):
            x, y = self.ctx.server_validation(p.validation)
            state.importance = filter_importance(server.model, conv_filters(server.model), x, y)
            assert state.reputation is not None
            k = self.ctx.config.partition.num_clients
            state.masks = {cid: submodel_mask(float(state.reputation[cid]), state.importance, p.keep)
                           for cid in range(k)}
        elif p.allocation == "once":
            state.masks = {}
        return {}

    def submodel(self, server: Server[FedSACServer], cid: int, train: bool) -> Submodel:
        """Client ``cid``'s submodel of the global model: un-kept filters zeroed, unless it is for training and the
        client trains the full model with the code's freezing (``train: layer_freeze``)."""
        assert server.model is not None
        mask = server.state.masks.get(cid)
        state = server.model.state_dict()
        if mask is None or (train and self.params.train == "layer_freeze"):
            return Submodel(state, mask)
        return Submodel(apply_mask(state, conv_filters(server.model), mask), mask)

    def broadcast(self, round_index: int, server: Server[FedSACServer], cid: int) -> Submodel:
        return self.submodel(server, cid, train=True)

    def client_update(self, round_index: int, client: Client[FedSACClient],
                      message: Submodel) -> tuple[TrainedModel, Metrics]:
        client.state.mask = message.mask
        loss = self.train(round_index, client, message)
        return TrainedModel(client.cid, {k: v.clone() for k, v in client.model.state_dict().items()},
                            client.data.num_samples), {"train_loss": loss}

    def train(self, round_index: int, client: Client[FedSACClient], submodel: Submodel) -> float:
        """Local training of the client's submodel (paper) or of the global model with the code's freezing."""
        model = client.model
        load_state(model, submodel.state)
        filters = conv_filters(model)
        mask = submodel.mask if submodel.mask is not None else torch.ones(len(filters), dtype=torch.bool)
        handles, frozen = [], []
        if not bool(mask.all()):
            modules = dict(model.named_modules())
            for name in dict.fromkeys(w.rsplit(".", 1)[0] for w, _, _ in filters):
                conv = modules[name]
                kept = torch.tensor([bool(k) for (w, _, _), k in zip(filters, mask.tolist())
                                     if w == f"{name}.weight"], device=conv.weight.device)
                params = [p for p in (conv.weight, conv.bias) if p is not None]
                if self.params.train == "submodel":  # gradients of the un-kept filters masked to 0
                    handles += [p.register_hook(lambda g, k=kept: g * k.view(-1, *[1] * (g.dim() - 1)))
                                for p in params]
                elif not bool(kept[-1]):  # the code: the whole layer follows its last filter
                    frozen += params
        for param in frozen:
            param.requires_grad_(False)
        try:
            return self.ctx.local_train(client, round_index, self.local_loss)
        finally:
            for handle in handles:
                handle.remove()
            for param in frozen:
                param.requires_grad_(True)

    @torch.no_grad()
    def aggregate(self, round_index: int, server: Server[FedSACServer], updates: list[TrainedModel]) -> Metrics:
        assert server.model is not None
        filters = conv_filters(server.model)
        full = torch.ones(len(filters), dtype=torch.bool)
        masks = [server.state.masks.get(u.cid, full) for u in updates]
        uploads, sizes = [u.state for u in updates], [float(u.num_samples) for u in updates]
        if self.params.aggregate == "masked_mean":  # the code: conv/fc weights and biases, uniform, zeros included
            keys = [k for k, _ in server.model.named_parameters()
                    if not isinstance(dict(server.model.named_modules())[k.rsplit(".", 1)[0]], nn.BatchNorm2d)]
            masked = [apply_mask(u, filters, m) for u, m in zip(uploads, masks)]
            load_state(server.model, weighted_average(masked, [1.0] * len(masked), keys), strict=False)
            return {}
        new = weighted_average(uploads, sizes)
        current = server.model.state_dict()
        for i, (weight, bias, channel) in enumerate(filters):
            holders = [j for j, m in enumerate(masks) if bool(m[i])]
            total = sum(sizes[j] for j in holders)
            for key in _filter_keys(weight, bias):
                new[key][channel] = (sum(sizes[j] / total * uploads[j][key][channel] for j in holders) if holders
                                     else current[key][channel])
        load_state(server.model, new)
        return {}

    def reward(self, round_index: int, server: Server[FedSACServer], cid: int) -> Submodel:
        """The client's submodel of the new global model."""
        return self.submodel(server, cid, train=False)

    def receive_reward(self, round_index: int, client: Client[FedSACClient], reward: Submodel) -> tuple[None, Metrics]:
        load_state(client.model, reward.state)
        return None, {}

    def client_records(self, server: Server[FedSACServer], clients: list[Client[FedSACClient]]) -> dict[str, dict[int, float]]:
        out: dict[str, dict[int, float]] = {
            "submodel_share": {c.cid: float(c.state.mask.float().mean()) if c.state.mask is not None else 1.0
                               for c in clients}}
        if server.state.contribution is not None and server.state.reputation is not None:
            out["contribution"] = {c.cid: float(server.state.contribution[c.cid]) for c in clients}
            out["reputation"] = {c.cid: float(server.state.reputation[c.cid]) for c in clients}
        return out
