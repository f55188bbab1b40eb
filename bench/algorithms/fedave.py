"""FedAVE — Wang, Peng, Fan, Wang, Wu, Yu et al., "FedAVE: Adaptive data value evaluation framework for
collaborative fairness in federated learning", Neurocomputing 574 (2024) 127227 (pipelines/fedakd/NOTES.md §4 FedAVE).

Each round every client trains one local pass and uploads the ``upload_fraction`` largest-magnitude entries
of its update, u_k. The server aggregates them by data size, u = Σ_k n_k·u_k / Σ_k n_k, sets w_g ← w_g + u,
scores each client by its locally trained model's accuracy on the server's validation set, s_k (so the client
sends its trained model with its update, as the released code's server reads every client's model), and updates
the reputations r ← α·r + (1 − α)·s, normalised (:func:`reputation_update`). Client k's reward is the
f_k = clip(base + (1 − base)·tanh(β·r_k), 0, 1) share of u (:func:`download_fraction`): its largest-magnitude
entries, added to the model it trained. ``reward_share`` records f_k per client and round.

Data distribution (``distribution: kl``, paper mode). FedAVE's reputation also weighs how far each client's data
lies from the server's (FedAVE paper; its authors' code, pipelines/fedakd/NOTES.md §4 FedAVE): before training, the
client's start model gives its per-batch mean losses on the client's training data and the server the same model's
per-batch losses on the validation set (batches of 64, the shorter list's length); κ_k = 1/KL(train ‖ validation)
of the two lists normalised to distributions, divided by Σκ and then by max κ (:func:`distribution_factors`). The
score becomes s_k·κ_k² and the share f_k·κ_k, as their code weighs them. FedAKD's script has no such term
(``distribution: none``, code mode). The other differences of their code (normalised uploads, per-layer rewards,
q = tanh/max tanh) are not reproduced: the formulas are FedAKD's script's in both modes. ``mode``
switches the start model and the validation set (:mod:`bench.algorithms.rewards`: paper trains the personal
model on its train split and scores on the validation splits; code trains a copy of the global model and
scores on the first 10 % of each client's train split) and the update's keys (``keys``: paper the parameters,
as FedAVE's authors' code, each client keeping its own BatchNorm statistics — the averaged updates of the running
variances, added as rewards, drove some negative on the domaindigits proxy and the models' outputs to NaN with the
earlier reading ``floats``; code the whole state dict, ``num_batches_tracked`` included, as FedAKD's script).
Defaults: upload 0.5, base 0.3, α = 0.9, β = 1 [P Table 6].
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.readings import reading
from bench.algorithms.rewards import RewardedClient, RewardedClients, RewardParams, Reputations, VectorUpload
from bench.engine.aggregate import load_state
from bench.engine.evaluation import eval_mode
from bench.engine.messages import ModelBroadcast
from bench.engine.protocol import Metrics
from bench.engine.state import Client, Server
from bench.engine.vectors import (largest_fraction, load_vector, model_vector, parameter_keys, state_keys,
                                  weighted_sum)


class FedAVEParams(RewardParams):
    """FedAVE's hyperparameters (Table 6) and its readings."""

    data: Literal["train", "all"] = Field("train", description="what a client trains on and is scored on: its train "
                                                               "split (the paper's and FedAVE's code alike, §4 [C])")
    upload_fraction: float = Field(0.5, gt=0, le=1, description="share of the update's entries uploaded")
    base: float = Field(0.3, ge=0, le=1, description="DOWNLOAD_FRAC_BASE: the share every client gets at r = 0")
    alpha: float = Field(0.9, ge=0, le=1, description="α: weight of the old reputation in the moving average")
    beta: float = Field(1.0, gt=0, description="β in tanh(β·r)")
    distribution: Literal["kl", "none"] = reading(
        "kl", "none", "the reputation's data-distribution term: score s_k·κ_k², share f_k·κ_k, κ_k from the KL "
        "divergence of the client's per-batch train losses from the validation set's (FedAVE's paper and authors' "
        "code); or none (FedAKD's script)")
    keys: Literal["parameters", "floats", "state"] = reading(
        "parameters", "state", "the update's entries: the parameters, as FedAVE's authors' code exchanges them (each "
        "client keeps its BatchNorm statistics); or the whole state dict, num_batches_tracked included, as FedAKD's "
        "script flattens it; floats (an option): every floating entry, BN statistics included")


def reputation_update(reputation: torch.Tensor, scores: torch.Tensor, alpha: float) -> torch.Tensor:
    """r ← α·r + (1 − α)·s over every client (unscored: s = 0), normalised to sum 1."""
    rep = alpha * reputation + (1 - alpha) * scores
    return rep / rep.sum() if rep.sum() > 0 else rep


def download_fraction(reputation: float, base: float, beta: float) -> float:
    """f = clip(base + (1 − base)·tanh(β·r), 0, 1)."""
    return min(1.0, max(0.0, base + (1 - base) * float(torch.tanh(torch.tensor(beta * reputation)))))


LOSS_BATCH = 64  # FedAVE's authors' loader batch for the loss lists of the distribution term


@torch.no_grad()
def batch_losses(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = LOSS_BATCH) -> torch.Tensor:
    """The model's mean cross-entropy on each batch of ``batch`` samples, in order (eval mode)."""
    with eval_mode(model):
        return torch.tensor([float(F.cross_entropy(model(x[i:i + batch])[1], y[i:i + batch]))
                             for i in range(0, len(y), batch)], dtype=torch.float64)


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL(p ‖ q) of two non-negative lists, each normalised to sum 1, over the shorter one's length (scipy's
    entropy(p, q) after FedAVE's authors' truncation)."""
    n = min(len(p), len(q))
    p, q = p[:n] / p[:n].sum(), q[:n] / q[:n].sum()
    return float((p * torch.log(p / q)).sum())


def distribution_factors(train: list[torch.Tensor], validation: list[torch.Tensor]) -> torch.Tensor:
    """κ_k = 1/KL(train_k ‖ validation_k), divided by Σκ and by max κ (the most typical client gets 1). A KL of 0
    (identical lists) counts as 1e-12, where their code would divide by zero."""
    inverse = torch.tensor([1.0 / max(kl_divergence(t, v), 1e-12) for t, v in zip(train, validation)],
                           dtype=torch.float64)
    inverse = inverse / inverse.sum()
    return inverse / inverse.max()


@dataclass(frozen=True)
class ScoredUpload(VectorUpload):
    """FedAVE's upload: the sparsified update, and the trained model the server scores (its state dict); with the
    distribution term, the model the client started from (which FedAVE's server holds) and its per-batch losses on
    the client's training data."""

    model: dict[str, torch.Tensor]
    start: dict[str, torch.Tensor] | None = None
    train_losses: torch.Tensor | None = None


@register_algorithm("fedave")
class FedAVE(RewardedClients[ScoredUpload]):
    """Up: the update's ``upload_fraction`` largest entries and the trained model, which the server scores on its
    validation set; down: the reward, the f_k share of u."""

    Params = FedAVEParams
    params: FedAVEParams

    def keys(self, model: torch.nn.Module) -> list[str]:
        if self.params.keys == "parameters":
            return parameter_keys(model)
        return state_keys(model, integers=self.params.keys == "state")

    def client_update(self, round_index: int, client: Client[RewardedClient],
                      message: ModelBroadcast[None] | None) -> tuple[ScoredUpload, Metrics]:
        """The shared local pass; with the distribution term, first the start model's per-batch training losses."""
        if self.params.distribution == "none":
            return super().client_update(round_index, client, message)
        if message is not None:
            load_state(client.model, message.state)
        start = {k: v.clone() for k, v in client.model.state_dict().items()}
        losses = batch_losses(client.model, *self.pool(client))
        upload, metrics = super().client_update(round_index, client, message)
        return replace(upload, start=start, train_losses=losses), metrics

    def upload(self, client: Client[RewardedClient], delta: torch.Tensor) -> ScoredUpload:
        return ScoredUpload(client.cid, len(self.pool(client)[1]), largest_fraction(delta, self.params.upload_fraction),
                            client.model.state_dict())

    def distribution(self, updates: list[ScoredUpload], val_x: torch.Tensor, val_y: torch.Tensor) -> torch.Tensor:
        """κ_k of each update's client (all 1 without the term): its start model's losses on the validation set
        against the training losses it sent."""
        if self.params.distribution == "none":
            return torch.ones(len(updates), dtype=torch.float64)
        validation = []
        for update in updates:
            assert update.start is not None and update.train_losses is not None
            load_state(self.scoring_model, update.start)
            validation.append(batch_losses(self.scoring_model, val_x, val_y))
        return distribution_factors([u.train_losses for u in updates if u.train_losses is not None], validation)

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
        kappa = self.distribution(updates, val_x, val_y)
        scores = torch.zeros_like(state.reputation)
        for update, factor in zip(updates, kappa.tolist()):
            load_state(self.scoring_model, update.model)
            scores[update.cid] = self.ctx.accuracy(self.scoring_model, val_x, val_y) * factor ** 2
        state.reputation = reputation_update(state.reputation, scores, p.alpha)
        state.share = {}
        for update, factor in zip(updates, kappa.tolist()):
            fraction = download_fraction(float(state.reputation[update.cid]), p.base, p.beta) * factor
            state.rewards[update.cid] = largest_fraction(aggregate, fraction)
            state.share[update.cid] = fraction
        return {}
