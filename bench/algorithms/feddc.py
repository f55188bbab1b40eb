"""FedDC — Gao, Fu, Li, Chen, Xu, Xu, "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling
and Correction", CVPR 2022 (pipelines/fedakd/NOTES.md §4 FedDC).

Each client keeps a local drift h_k (initially 0). Local objective, w the global parameters received:

    CE(θ) + (α/2)·‖θ + h_k − w‖² + ⟨θ, g − g_k⟩            (:func:`drift_penalty`, :func:`correction_term`)

The server broadcasts w and (with the correction) g. After local training h_k ← h_k + (θ − w) and the client
uploads θ + h_k (BN buffers as trained) and how much g_k moved; the server takes the unweighted mean. The gradient correction (third term) follows the official code
(gaoliang13/FedDC, ``state_gadient_diffs``): after training, g_k ← g_k − g − (θ − w)/(K·η) with K the local
steps and η the learning rate, and the server's g moves by Σ_k (n_k/Σn)(g_k^new − g_k^old) [I: the code's
per-client rescaling of α and g by n_k·K/Σn is left out, all clients weighed as equal].

``mode: code`` (FedAKD's ``feddc.py``, §4 [C]) has no correction (the switch of :class:`FedDCParams`). α = 1, h_k = 0 at the start [P Table 6]. FedAKD's script computes FedDC's CF against random
numbers (§0.9); here CF is a statistic of the suite, computed the same way for every method.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ParameterAveraging
from bench.algorithms.readings import ModeParams, reading
from bench.engine.loop import Step
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server


class FedDCParams(ModeParams, AveragingParams):
    """FedDC's hyperparameters (Table 6) and its reading of the code."""

    alpha: float = Field(1.0, ge=0, description="α of the drift penalty")
    correction: bool = reading(True, False, "the gradient-correction term ⟨θ, g − g_k⟩; or none")
    weighting: Literal["samples", "uniform"] = "uniform"


@dataclass
class FedDCClient(NoState):
    drift: list[torch.Tensor] = field(default_factory=list)  # h_k, per parameter (empty: zeros)
    correction: list[torch.Tensor] = field(default_factory=list)  # g_k, per parameter (empty: zeros)
    global_params: list[torch.Tensor] = field(default_factory=list)  # w, as received this round
    server_correction: list[torch.Tensor] = field(default_factory=list)  # g, as received this round


@dataclass
class FedDCServer(NoState):
    correction: list[torch.Tensor] = field(default_factory=list)  # g, per parameter


def drift_penalty(params: Sequence[torch.Tensor], drift: list[torch.Tensor], global_params: list[torch.Tensor]) -> torch.Tensor:
    """‖θ + h − w‖² over the parameters."""
    return sum(((p + h - w) ** 2).sum() for p, h, w in zip(params, drift, global_params))  # type: ignore[return-value]  # typeshed: sum() is Tensor | Literal[0]


def correction_term(params: Sequence[torch.Tensor], correction: list[torch.Tensor], own: list[torch.Tensor]) -> torch.Tensor:
    """⟨θ, g − g_k⟩ over the parameters."""
    return sum((p * (g - gk)).sum() for p, g, gk in zip(params, correction, own))  # type: ignore[return-value]  # typeshed: sum() is Tensor | Literal[0]


def corrected_state(own: list[torch.Tensor], server: list[torch.Tensor], delta: list[torch.Tensor],
                    steps: int, lr: float) -> list[torch.Tensor]:
    """g_k ← g_k − g − (θ − w)/(K·η) (the official code's ``state_g``)."""
    return [gk - g - d / (steps * lr) for gk, g, d in zip(own, server, delta)]


@register_algorithm("feddc")
class FedDC(ParameterAveraging[FedDCClient, FedDCServer, list[torch.Tensor], list[torch.Tensor]]):
    """The broadcast's payload is the server's correction g (empty without the correction term); the update's
    model is θ + h_k and its payload how much g_k moved (empty without it), both built by :meth:`local_update`."""
    Params = FedDCParams
    params: FedDCParams
    ClientState = FedDCClient
    ServerState = FedDCServer
    resident_models = 3  # θ, the drift h and the received w

    def init_server_state(self, model: torch.nn.Module | None) -> FedDCServer:
        assert model is not None
        return FedDCServer([torch.zeros_like(p.detach()) for p in model.parameters()])

    def broadcast_payload(self, round_index: int, server: Server[FedDCServer], cid: int) -> list[torch.Tensor]:
        return server.state.correction if self.params.correction else []

    def receive_broadcast(self, client: Client[FedDCClient], message: ModelBroadcast[list[torch.Tensor]]) -> None:
        super().receive_broadcast(client, message)
        state = client.state
        state.global_params = [p.detach().clone() for p in client.model.parameters()]
        state.server_correction = message.payload
        if not state.drift:
            state.drift = [torch.zeros_like(w) for w in state.global_params]
            state.correction = [torch.zeros_like(w) for w in state.global_params]

    def local_loss(self, step: Step, client: Client[FedDCClient], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = super().local_loss(step, client, x, y)
        params, state = list(client.model.parameters()), client.state
        if self.params.alpha:
            loss = loss + 0.5 * self.params.alpha * drift_penalty(params, state.drift, state.global_params)
        if self.params.correction:
            loss = loss + correction_term(params, state.server_correction, state.correction)
        return loss

    def local_update(self, round_index: int, client: Client[FedDCClient]) -> tuple[Update[list[torch.Tensor]], float]:
        steps = sum(1 for _ in self.ctx.batch_indices(client.data.num_samples, client.cid, round_index))
        loss = self.ctx.local_train(client, round_index, self.local_loss)
        state = client.state
        with torch.no_grad():
            delta = [p.detach() - w for p, w in zip(client.model.parameters(), state.global_params)]
            state.drift = [h + d for h, d in zip(state.drift, delta)]
            change = []
            if self.params.correction:
                new = corrected_state(state.correction, state.server_correction, delta, steps, self.ctx.lr_at(round_index))
                change = [n - gk for n, gk in zip(new, state.correction)]
                state.correction = new
            upload = dict(client.model.state_dict())
            for (name, p), h in zip(client.model.named_parameters(), state.drift):
                upload[name] = p.detach() + h
        return Update(client.cid, client.data.num_samples, upload, change), loss

    def aggregate(self, round_index: int, server: Server[FedDCServer], updates: list[Update[list[torch.Tensor]]]) -> Metrics:
        """The mean of θ_k + h_k; g moves by Σ_k (n_k/Σn)·(g_k^new − g_k^old)."""
        super().aggregate(round_index, server, updates)
        if not self.params.correction:
            return {}
        total = float(sum(u.num_samples for u in updates))
        for u in updates:
            for g, change in zip(server.state.correction, u.payload):
                g.add_(change, alpha=u.num_samples / total)
        return {}
