"""FedDF — Lin, Kong, Stich, Jaggi, "Ensemble distillation for robust model fusion in federated
learning", NeurIPS 2020: FedAvg within each architecture group, then ensemble distillation of the
round's received client models into each group's server model on unlabelled proxy data (AVGLOGITS).
As FedAL runs it in its shareable-model setting (pipelines/fedal/NOTES.md §3.2.8, Fig. 10) and as DaFKD runs it
("FEDDFUSION", pipelines/dafkd/NOTES.md §2.3).

The server holds one model θ_g per architecture group g (clients with the same architecture; a
homogeneous federation is one group, whose model is the global model). Per round:

1. each selected client starts from its group's θ_g and trains locally (the config's local steps or
   epochs; CE);
2. per group, θ̂_g = Σ_{n∈g} (|𝒟_n| / Σ_{m∈g} |𝒟_m|) θ_n over the group's received models
   (:class:`~bench.algorithms.base.ParameterAveraging`'s average; ``weighting: uniform`` for 1/|g|);
3. ``distill_steps`` server steps per group on public batches x (the run's ``public`` set, batches of
   ``distill_batch_size``, lockstep stream ``("public", "distill")``), each minimising

       T² · 𝒦(ψ(mean_{n∈S_t} f_n(x) / T) ‖ ψ(f_{θ_g}(x) / T)),

   the teacher being the mean logits of **all** the round's received client models (every group's;
   eval mode), the student θ_g (train mode), with a fresh ``distill_optimizer`` (Adam, ``distill_lr``)
   each round; groups that received no model this round are left as they are;
4. θ_g ← the student. Every client of group g holds θ_g from its next broadcast on: the client model
   evaluated is its group's model once the client has taken part (FedAL: "every client in group g
   holds θ_g"; before that, its initial copy of θ_g). A client receives its group's θ_g and sends its trained
   model, as in FedAvg.

At T = 1 the loss is FedAL's E = 1 distillation KL. With one architecture FedDF is FedAvg plus server
ensemble distillation (with ``distill_steps: 0``, FedAvg exactly). FedDF's original early stopping on a
validation plateau (up to 10⁴ steps) is not reproduced: the budget is ``distill_steps`` per round
(FedAL: τ = 10, the same as the local steps; DaFKD: 1,600).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeVar

import torch
from pydantic import Field
from torch import nn
from torch.func import functional_call

from bench.algorithms import register_algorithm
from bench.algorithms.base import ModelAveraging
from bench.algorithms.server_bn import ServerBNParams, ServerBNRule
from bench.engine.aggregate import copy_state, load_state, weighted_average
from bench.engine.distillation import kd_loss
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Loop
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server
from bench.errors import BenchError


class FedDFParams(ServerBNParams):
    distill_steps: int = Field(10, ge=0, description="server distillation steps per round and architecture group "
                                                     "(FedAL's FedDF: τ = 10)")
    distill_lr: float = Field(1e-3, gt=0, description="the distillation optimiser's learning rate")
    distill_batch_size: int | None = Field(None, ge=1, description="public batch size; None: training.batch_size")
    temperature: float = Field(1.0, gt=0, description="T of AVGLOGITS (the loss is T²·KL)")
    distill_optimizer: Literal["adam", "sgd"] = Field("adam", description="fresh each round (FedDF: Adam)")


@dataclass
class GroupModels(NoState):
    """The server's model of each architecture group (architecture name -> model)."""

    models: dict[str, nn.Module] = field(default_factory=dict)


@dataclass
class GroupMember(NoState):
    """Whether the client has taken part (from then on it holds its group's θ_g)."""

    joined: bool = False


MemberT = TypeVar("MemberT", bound=GroupMember)
GroupsT = TypeVar("GroupsT", bound=GroupModels)


@register_algorithm("feddf")
class FedDF(ServerBNRule[MemberT, GroupsT, None, None], ModelAveraging[MemberT, GroupsT]):
    """Generic over its states, which FedDF-AL extends (:mod:`bench.algorithms.feddf_al`)."""

    Params = FedDFParams
    params: FedDFParams
    ClientState: ClassVar[type[NoState]] = GroupMember
    ServerState: ClassVar[type[NoState]] = GroupModels

    def init_server(self) -> Server[GroupsT]:
        if self.ctx.public_x is None:
            raise BenchError(f"{self.name} distils on unlabelled proxy data: set public.size (and public.source)")
        name = self.ctx.config.model.name
        models = {arch: self.ctx.build_model("server") if arch == name else self.ctx.build_model("server", arch,
                                                                                                   name=arch)
                  for arch in sorted(set(self.ctx.architectures))}
        state = self.init_server_state(None)
        state.models = models
        return Server(next(iter(models.values())) if len(models) == 1 else None, state)

    def group_model(self, server: Server[GroupsT], cid: int) -> nn.Module:
        return server.state.models[self.ctx.architectures[cid]]

    def init_client_model(self, cid: int, server: Server[GroupsT]) -> nn.Module:
        model = self.ctx.build_model("client", cid, name=self.ctx.architectures[cid])
        copy_state(model, self.group_model(server, cid))
        return model

    def global_state(self, server: Server[GroupsT], cid: int) -> dict[str, torch.Tensor]:
        """Client ``cid``'s group model θ_g."""
        group = self.group_model(server, cid)
        keys = self.shared_keys(group)
        return {k: v for k, v in group.state_dict().items() if keys is None or k in keys}

    def receive_broadcast(self, client: Client[MemberT], message: ModelBroadcast[None]) -> None:
        super().receive_broadcast(client, message)
        client.state.joined = True

    def client_model(self, server: Server[GroupsT], client: Client[MemberT]) -> nn.Module:
        return self.group_model(server, client.cid) if client.state.joined else client.model

    # -- server ---------------------------------------------------------------------------------

    def aggregate(self, round_index: int, server: Server[GroupsT], updates: list[Update[None]]) -> Metrics:
        received: dict[str, list[Update[None]]] = {}
        for update in updates:
            received.setdefault(self.ctx.architectures[update.cid], []).append(update)
        for arch, group in sorted(received.items()):
            model = server.state.models[arch]
            weights = [u.num_samples if self.params.weighting == "samples" else 1.0 for u in group]
            keys = self.shared_keys(model)
            load_state(model, weighted_average([u.state for u in group], weights, keys), strict=keys is None)
        if self.params.distill_steps:
            self.distill(round_index, server, updates, sorted(received))
        return {}

    def ensemble_logits(self, server: Server[GroupsT], updates: list[Update[None]], x: torch.Tensor) -> torch.Tensor:
        """The mean of the received client models' logits on ``x``, each model run in eval mode on its uploaded
        weights (its group's server model as the architecture)."""
        total: torch.Tensor | None = None
        for update in updates:
            with torch.no_grad(), eval_mode(self.group_model(server, update.cid)) as template:
                _, logits = functional_call(template, update.state, (x,))
            total = logits if total is None else total + logits
        assert total is not None
        return total / len(updates)

    def make_distill_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        p = self.params
        if p.distill_optimizer == "adam":
            return torch.optim.Adam(model.parameters(), lr=p.distill_lr)
        return torch.optim.SGD(model.parameters(), lr=p.distill_lr)

    def distill(self, round_index: int, server: Server[GroupsT], updates: list[Update[None]], groups: list[str]) -> None:
        """``distill_steps`` lockstep public batches; per batch, the ensemble teacher, then a step of each group."""
        p = self.params
        public = self.ctx.shared_public(p.distill_batch_size, "distill")
        students = [server.state.models[g] for g in groups]
        loops = [Loop(self.make_distill_optimizer(s), list(s.parameters()), round_index, "server") for s in students]
        for i in range(p.distill_steps):
            x = public.batch((round_index - 1) * p.distill_steps + i)
            teacher = self.ensemble_logits(server, updates, x)
            self.distill_step(round_index, server, groups, loops, x, teacher)

    def distill_step(self, round_index: int, server: Server[GroupsT], groups: list[str], loops: list[Loop],
                     x: torch.Tensor, teacher: torch.Tensor) -> None:
        """One step of every group's student on 𝒦 towards the ensemble (FedDF-AL adds its terms)."""
        for group, loop in zip(groups, loops):
            student = server.state.models[group].train()
            loop.run([x], lambda step, batch: kd_loss(student(batch)[1], teacher, self.params.temperature))
