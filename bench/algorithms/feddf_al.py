"""FedDF-AL — FedAL's adversarial and less-forgetting components added to FedDF in the shareable-model
setting (pipelines/fedal/NOTES.md §3.2.8, Fig. 10). The paper names it and gives τ = 15 and E = 2 but not its
design; this is the reading of pipelines/fedal/NOTES.md §3.2.8 [ASSUMPTION]:

* FedDF (:mod:`bench.algorithms.feddf`): one server model θ_g per architecture group, FedAvg within the
  group, ensemble distillation towards the mean logits of all the round's received client models;
* local steps minimise FedAL's V_loc = CE + r_loc, r_loc against θ_g as broadcast at the round's start;
* after averaging, the G group students θ̂_g play FedAL's global knowledge transfer: per distillation
  step the server's G-way discriminator h: K → 32 → 265 → G takes one optimiser step on the students'
  ψ(f_g(x), E_adv) (:func:`~bench.algorithms.fedal.discriminator_round`, a student's class its group's
  index among the sorted architectures), and each student takes one step on

      𝒦(ψ(teacher) ‖ ψ(f_g)) + U_g + r_glo,   r_glo against θ̂_g frozen at the distillation's start,

  the distillation term FedDF's (T²·KL, T = 1: FedAL's E_KD = 1 term), U_g through the surrogate
  Σ f_g ⊙ ∂U_g/∂f_g as in FedAL;
* ``distill_steps`` = τ = 15 (the local steps are the config's, τ = 15 too), η_d = 1e-4, E_adv = 2.

The teacher is FedDF's ensemble, so the difference from FedDF isolates AL and LF. With one group the
discriminator has one output and U_g is constant: FedDF-AL is then FedDF with the LF terms. Not
implemented: the alternative (pipelines/fedal/NOTES.md §3.2.8) of playing the game among the N client
models before averaging.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.fedal import (AdversarialParams, DiscriminatorState, LessForgettingParams, adversarial_term,
                                    discriminator_round, discriminator_state, lf_loss, local_objective)
from bench.algorithms.feddf import FedDF, FedDFParams, GroupMember, GroupModels
from bench.engine.distillation import kd_loss
from bench.engine.loop import Loop, Step
from bench.engine.snapshots import refresh_snapshot
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.state import Client, Server


class FedDFALParams(FedDFParams, AdversarialParams, LessForgettingParams):
    distill_steps: int = Field(15, ge=0, description="τ = 15 (FedDF-AL)")


@dataclass
class FedDFALClient(GroupMember):
    """The group model reference and the frozen θ_g of the round's start (r_loc)."""

    snapshot: nn.Module | None = None


@dataclass
class FedDFALServer(GroupModels, DiscriminatorState):
    """The group models, the G-way discriminator with its optimiser, and each group's frozen θ̂_g (r_glo)."""

    snapshots: dict[str, nn.Module] | None = None


@register_algorithm("feddf_al")
class FedDFAL(FedDF[FedDFALClient, FedDFALServer]):
    Params = FedDFALParams
    params: FedDFALParams
    ClientState = FedDFALClient
    ServerState = FedDFALServer

    def init_server(self) -> Server[FedDFALServer]:
        server = super().init_server()
        discriminator = discriminator_state(self.ctx, self.params, len(server.state.models))
        server.state.discriminator, server.state.optimizer = discriminator.discriminator, discriminator.optimizer
        return server

    def receive_broadcast(self, client: Client[FedDFALClient], message: ModelBroadcast[None]) -> None:
        super().receive_broadcast(client, message)
        client.state.snapshot = refresh_snapshot(client.state.snapshot, client.model, self.params.snapshot_mode)

    def local_loss(self, step: Step, client: Client[FedDFALClient], x: torch.Tensor,
                   y: torch.Tensor) -> torch.Tensor:
        """V_loc = CE + r_loc (FedAL eq. 17), r_loc against θ_g as broadcast this round."""
        return local_objective(client.model, client.state.snapshot, x, y, self.params, step.round)

    def distill(self, round_index: int, server: Server[FedDFALServer], updates: list[Update[None]],
                groups: list[str]) -> None:
        if self.params.lf_global_weight > 0:  # θ̂_g
            old = server.state.snapshots or {}
            server.state.snapshots = {g: refresh_snapshot(old.get(g), m, self.params.snapshot_mode)
                                      for g, m in server.state.models.items()}
        super().distill(round_index, server, updates, groups)

    def distill_step(self, round_index: int, server: Server[FedDFALServer], groups: list[str],
                     loops: list[Loop], x: torch.Tensor, teacher: torch.Tensor) -> None:
        p, state = self.params, server.state
        students = [state.models[g].train() for g in groups]
        logits = [s(x)[1] for s in students]
        gradients: list[torch.Tensor | None] = [None] * len(groups)
        if state.discriminator is not None:
            order = sorted(state.models)
            targets = torch.tensor([order.index(g) for g in groups], device=x.device)
            grads, _, _ = discriminator_round(state, round_index, torch.stack([z.detach() for z in logits]), targets,
                                              p.adv_temperature)
            gradients = list(grads)
        for group, loop, z, gradient in zip(groups, loops, logits, gradients):
            def loss(step: Step, batch: torch.Tensor, g: str = group, z: torch.Tensor = z,
                     gradient: torch.Tensor | None = gradient) -> torch.Tensor:
                total = kd_loss(z, teacher, p.temperature)
                if p.lf_global_weight > 0:
                    assert state.snapshots is not None
                    with torch.no_grad():
                        _, frozen = state.snapshots[g](batch)
                    total = total + p.lf_global_weight * lf_loss(z, frozen, p.lf_temperature)
                if gradient is not None:
                    total = total + p.adv_weight * adversarial_term(z, gradient)
                return total
            loop.run([x], loss)
