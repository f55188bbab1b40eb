"""CGSV — Xu, Lyu, Ma, Miao, Foo, Low, "Gradient Driven Rewards to Guarantee Fairness in Collaborative Machine
Learning", NeurIPS 2021 (pipelines/fedakd/NOTES.md §4 CGSV).

Each round every client computes its local update Δ_k (one local pass) and uploads it normalised, Γ·Δ_k/‖Δ_k‖
(:func:`normalised`: CGSV's gradient normalisation, in its paper and its authors' code, which keeps a client
from buying reputation or weight with a large update; ``upload: raw`` sends Δ_k as FedAKD's script does). The
server aggregates the uploads into u,
values each client by the cosine gradient Shapley value ψ_k = max(0, cos(Δ_k, u)) (:func:`cosine_values`),
updates the reputations r ← α·r + (1 − α)·ψ, normalised (:func:`reputation_update`), and rewards client k
with the ⌊q_k·D⌋ largest-magnitude entries of u, q_k = tanh(β·r_k) / max_j tanh(β·r_j) (β the altruism
degree; :func:`reward_count`) — so the better a client's update aligns with the federation's, the more of
the aggregate it gets. ``reward_share`` records q_k per client and round.

``mode: code`` is FedAKD's ``cgsv.py`` [C], ``paper`` the summary of the paper in
pipelines/fedakd/NOTES.md §4 CGSV [P/I]: the switches of
:class:`CGSVParams` (the aggregate's weights, the update's entries, what the reward is added to) and those of
:mod:`bench.algorithms.rewards` (code: a copy of the global model, all local data).

Defaults α = 0.9, β (altruism) = 1, sparse rewards [P Table 6; "BETA = 2.0" of Table 6 is unused by the code];
Γ = 0.5, CGSV's authors' value for MNIST (0.15 for CIFAR-10), which FedAKD's Table 6 does not list. Other
differences from CGSV's authors' code are kept and listed in pipelines/fedakd/NOTES.md §4 CGSV (round 1 weighted by
data size, ψ without max(0, ·), a per-layer reward).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.readings import reading
from bench.algorithms.rewards import RewardedClient, RewardedClients, RewardParams, Reputations, VectorUpload
from bench.engine.protocol import Metrics
from bench.engine.state import Client, Server
from bench.engine.vectors import (SparseVector, largest_entries, load_vector, model_vector, parameter_keys, state_keys,
                                  weighted_sum)


class CGSVParams(RewardParams):
    """CGSV's hyperparameters (Table 6) and its readings."""

    alpha: float = Field(0.9, ge=0, le=1, description="α: weight of the old reputation in the moving average")
    altruism: float = Field(1.0, gt=0, description="β: the altruism degree in tanh(β·r)")
    sparse: bool = Field(True, description="reward with the top-q_k share of u (false: all of u)")
    gamma: float = Field(0.5, gt=0, description="Γ: the norm of a normalised upload (CGSV's authors' MNIST value)")
    upload: Literal["normalised", "raw"] = reading(
        "normalised", "raw", "what a client uploads: Γ·Δ_k/‖Δ_k‖ (CGSV's paper and its authors' code); or Δ_k as "
        "trained (FedAKD's script)")
    aggregate: Literal["reputation", "mean"] = reading(
        "reputation", "mean", "u = Σ_k r_k·Δ_k; or u = (1/K)Σ_k Δ_k (equal weights)")
    keys: Literal["parameters", "state"] = reading(
        "parameters", "state", "the update's entries: the parameters; or the whole state dict, BN buffers and the "
        "integer num_batches_tracked included, as the code flattens it")
    reward: Literal["own", "trained"] = reading(
        "own", "trained", "what the reward is added to: the personal model before training (its local update "
        "reaches it through u); or the locally trained copy of the global model, w_g ← w_g + u")


def normalised(delta: torch.Tensor, gamma: float) -> torch.Tensor:
    """Γ·Δ/(‖Δ‖ + 1e-7), the authors' guard against a zero update."""
    return gamma * delta / (torch.linalg.vector_norm(delta) + 1e-7)


def cosine_values(deltas: list[torch.Tensor], aggregate: torch.Tensor) -> torch.Tensor:
    """ψ_k = max(0, cos(Δ_k, u)), each norm with the code's +1e-9."""
    direction = aggregate / (torch.linalg.vector_norm(aggregate) + 1e-9)
    return torch.tensor([max(0.0, float(torch.dot(d / (torch.linalg.vector_norm(d) + 1e-9), direction)))
                         for d in deltas], dtype=torch.float64)


def reputation_update(reputation: torch.Tensor, values: torch.Tensor, alpha: float) -> torch.Tensor:
    """r ← α·r + (1 − α)·ψ, normalised to sum 1 (unchanged if it sums to 0)."""
    rep = alpha * reputation + (1 - alpha) * values
    return rep / rep.sum() if rep.sum() > 0 else rep


def reward_count(reputation: torch.Tensor, altruism: float, dim: int) -> list[int]:
    """⌊D·tanh(β·r_k)/(max_j tanh(β·r_j) + 1e-9)⌋ entries of the aggregate for each client (the code's form)."""
    t = torch.tanh(altruism * reputation)
    return [int(dim * float(v) / (float(t.max()) + 1e-9)) for v in t]


@register_algorithm("cgsv")
class CGSV(RewardedClients[VectorUpload]):
    """Up: the whole update Δ_k (normalised to Γ in paper mode); down: the reward, the ⌊q_k·D⌋ largest entries of u
    (all of u without ``sparse``)."""

    Params = CGSVParams
    params: CGSVParams

    def keys(self, model: torch.nn.Module) -> list[str]:
        return parameter_keys(model) if self.params.keys == "parameters" else state_keys(model, integers=True)

    def upload(self, client: Client[RewardedClient], delta: torch.Tensor) -> VectorUpload:
        """Δ_k, normalised to Γ (``upload: normalised``) or as trained."""
        if self.params.upload == "normalised":
            delta = normalised(delta, self.params.gamma)
        return VectorUpload(client.cid, len(self.pool(client)[1]), SparseVector(None, delta, delta.numel()))

    def aggregate(self, round_index: int, server: Server[Reputations], updates: list[VectorUpload]) -> Metrics:
        """u from the updates, ψ_k, the reputations, w_g ← w_g + u and each client's reward."""
        p, state = self.params, server.state
        assert server.model is not None and state.reputation is not None
        keys = self.keys(server.model)
        cids = [u.cid for u in updates]
        deltas = [u.vector.dense() for u in updates]
        weights = [float(state.reputation[cid]) for cid in cids] if p.aggregate == "reputation" else [1.0] * len(cids)
        aggregate = weighted_sum(deltas, [w / sum(weights) for w in weights])
        values = torch.zeros_like(state.reputation)
        values[cids] = cosine_values(deltas, aggregate)
        rep = state.reputation.clone()
        rep[cids] = reputation_update(state.reputation, values, p.alpha)[cids]
        state.reputation = rep / rep.sum()
        load_vector(server.model, model_vector(server.model, keys) + aggregate, keys)

        counts = reward_count(state.reputation, p.altruism, len(aggregate)) if p.sparse else None
        state.share = {}
        for cid in cids:
            count = counts[cid] if counts is not None else len(aggregate)
            state.rewards[cid] = largest_entries(aggregate, count)
            state.share[cid] = count / len(aggregate)
        return {}

    def take_reward(self, client: Client[RewardedClient], reward: torch.Tensor, keys: list[str]) -> None:
        """``reward: own``: the personal model before training plus the reward; ``trained``: the trained copy plus it."""
        if self.params.reward == "own":
            assert client.state.start is not None
            load_vector(client.model, client.state.start + reward, keys)
        else:
            super().take_reward(client, reward, keys)
