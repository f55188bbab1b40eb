"""FedAVE — Wang, Peng, Fan, Wang, Wu, Yu et al., "FedAVE: Adaptive data value evaluation framework for
collaborative fairness in federated learning", Neurocomputing 574 (2024) 127227 (pipelines/fedakd/NOTES.md §4 FedAVE).

Each round every client trains one local pass and uploads the ``upload_fraction`` largest-magnitude entries
of its update, u_k. The server aggregates them by data size, u = Σ_k n_k·u_k / Σ_k n_k, sets w_g ← w_g + u,
scores each client by its locally trained model's accuracy on the server's validation set, s_k (so the client
sends its trained model with its update, as the released code's server reads every client's model), and updates
the reputations r ← α·r + (1 − α)·s, normalised (:func:`reputation_update`). Client k's reward is the
f_k = clip(base + (1 − base)·tanh(β·r_k), 0, 1) share of u (:func:`download_fraction`): its largest-magnitude
entries, added to the model it trained. ``reward_share`` records f_k per client and round.

The formulas are those of FedAKD's ``fedave.py`` (§4 [C]) in both modes: the paper's reputation also weighs
each client's data distribution, a term known from FedAVE's own code (pipelines/fedakd/NOTES.md §4, FedAVE) but
not implemented (A32) [I]. ``mode``
switches the start model and the validation set (:mod:`bench.algorithms.rewards`: paper trains the personal
model on its train split and scores on the validation splits; code trains a copy of the global model and
scores on the first 10 % of each client's train split) and the update's keys (``keys``: paper the floating
state entries; code the whole state dict, ``num_batches_tracked`` included, as the code flattens it).
Defaults: upload 0.5, base 0.3, α = 0.9, β = 1 [P Table 6].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.readings import reading
from bench.algorithms.rewards import RewardedClient, RewardedClients, RewardParams, Reputations, VectorUpload
from bench.engine.aggregate import load_state
from bench.engine.protocol import Metrics
from bench.engine.state import Client, Server
from bench.engine.vectors import largest_fraction, load_vector, model_vector, state_keys, weighted_sum


class FedAVEParams(RewardParams):
    """FedAVE's hyperparameters (Table 6) and its readings."""

    data: Literal["train", "all"] = Field("train", description="what a client trains on and is scored on: its train "
                                                               "split (the paper's and FedAVE's code alike, §4 [C])")
    upload_fraction: float = Field(0.5, gt=0, le=1, description="share of the update's entries uploaded")
    base: float = Field(0.3, ge=0, le=1, description="DOWNLOAD_FRAC_BASE: the share every client gets at r = 0")
    alpha: float = Field(0.9, ge=0, le=1, description="α: weight of the old reputation in the moving average")
    beta: float = Field(1.0, gt=0, description="β in tanh(β·r)")
    keys: Literal["floats", "state"] = reading(
        "floats", "state", "the update's entries: the floating state entries; or the whole state dict, "
        "num_batches_tracked included, as the code flattens it")


def reputation_update(reputation: torch.Tensor, scores: torch.Tensor, alpha: float) -> torch.Tensor:
    """r ← α·r + (1 − α)·s over every client (unscored: s = 0), normalised to sum 1."""
    rep = alpha * reputation + (1 - alpha) * scores
    return rep / rep.sum() if rep.sum() > 0 else rep


def download_fraction(reputation: float, base: float, beta: float) -> float:
    """f = clip(base + (1 − base)·tanh(β·r), 0, 1)."""
    return min(1.0, max(0.0, base + (1 - base) * float(torch.tanh(torch.tensor(beta * reputation)))))


@dataclass(frozen=True)
class ScoredUpload(VectorUpload):
    """FedAVE's upload: the sparsified update, and the trained model the server scores (its state dict)."""

    model: dict[str, torch.Tensor]


@register_algorithm("fedave")
class FedAVE(RewardedClients[ScoredUpload]):
    """Up: the update's ``upload_fraction`` largest entries and the trained model, which the server scores on its
    validation set; down: the reward, the f_k share of u."""

    Params = FedAVEParams
    params: FedAVEParams

    def keys(self, model: torch.nn.Module) -> list[str]:
        return state_keys(model, integers=self.params.keys == "state")

    def upload(self, client: Client[RewardedClient], delta: torch.Tensor) -> ScoredUpload:
        return ScoredUpload(client.cid, len(self.pool(client)[1]), largest_fraction(delta, self.params.upload_fraction),
                            client.model.state_dict())

    def aggregate(self, round_index: int, server: Server[Reputations], updates: list[ScoredUpload]) -> Metrics:
        """u by data size, w_g ← w_g + u, the scores s_k and reputations, each client's reward."""
        p, state = self.params, server.state
        assert server.model is not None and state.reputation is not None
        keys = self.keys(server.model)
        uploads = [u.vector.dense() for u in updates]
        sizes = [float(u.num_samples) for u in updates]
        aggregate = weighted_sum(uploads, [n / sum(sizes) for n in sizes])
        load_vector(server.model, model_vector(server.model, keys) + aggregate, keys)

        val_x, val_y = self.validation()
        scores = torch.zeros_like(state.reputation)
        for update in updates:
            load_state(self.scoring_model, update.model)
            scores[update.cid] = self.ctx.accuracy(self.scoring_model, val_x, val_y)
        state.reputation = reputation_update(state.reputation, scores, p.alpha)
        state.share = {}
        for update in updates:
            fraction = download_fraction(float(state.reputation[update.cid]), p.base, p.beta)
            state.rewards[update.cid] = largest_fraction(aggregate, fraction)
            state.share[update.cid] = fraction
        return {}
