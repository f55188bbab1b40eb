"""CFFL — Lyu, Xu, Wang, Yu et al., "Collaborative Fairness in Federated Learning", in *Federated Learning:
Privacy and Incentive*, LNCS 12500, 2020 (pipelines/fedakd/NOTES.md §4 CFFL).

Each round, every client still in the federation (reputation r_k > 0):

1. trains one local pass; its update Δ_k (parameters only, no BN buffers) is clipped to L2 norm
   ``clip_norm`` and sparsified to its θ_u largest-magnitude entries: u_k;
2. the server aggregates u = Σ_k n_k·u_k / Σ_k n_k and sets w_g ← w_g + u;
3. scores each client by the validation accuracy of w_g + u_k and updates the reputations
   (:func:`reputation_update`): c_k = sinh(α·acc_k/Σ_j acc_j) normalised, r ← ½r + ½c normalised,
   clients with r_k < c_th leave (r_k = 0) and r is normalised again;
4. rewards each client with a share of the others' updates (:func:`download`).

The reward (step 4) differs between the two modes; ``reward_share`` records it per client and round:

- ``paper`` [I, pipelines/fedakd/NOTES.md §4 CFFL's summary of the paper]: the client downloads the ⌊q_k·D⌋ largest-magnitude
  entries of the others' aggregate u − (n_k/Σn)·u_k, q_k = r_k / max_j r_j, and adds them to the personal
  model it trained (``download: reputation``).
- ``code`` (FedAKD's ``cffl.py``, §4 [C]): the whole aggregate less the client's own upload scaled by its
  data size, g_k = u − (n_k/max_j n_j)·u_k; the personal model becomes its locally trained copy of the
  global model + u_k + g_k (``download: size``; its own update counts twice). Reputation then only removes
  clients. It trains on, and is scored on, all its local data (``data: all``); the validation set is the
  first 10 % of each client's stored data, test images included (``validation: stored``); see :mod:`bench.algorithms.rewards`.

Defaults θ_u = 0.5, clip 5.0, c_th = 0.05, α = 1 [P Table 6]. The global model's BN buffers never change
(only parameter updates are exchanged), as in both.

CFFL's authors' code (pipelines/fedakd/NOTES.md §4 CFFL) differs from both in two ways the options here reproduce,
kept off by default because FedAKD's Table 6 fixes c_th and α for its comparison:

- ``download: authors``: the client receives the ⌊(r_k/max r)·(n_k/max n)·D⌋ largest entries of the whole
  aggregate u, and its own upload is then taken out of them, (n_k/Σn)·u_k on every entry
  (:func:`download_then_remove`); the paper reading takes it out before choosing the entries;
- ``threshold_rule: adaptive``: c_th = (1/3)/|R|, |R| the clients still in the federation, instead of a fixed
  c_th; their code calls the sinh mapping with α = 3 or 5 (``alpha``).

Their reputation as a 0.2/0.8 moving average is not reproduced (FedAKD's ½/½ in both modes).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.readings import reading
from bench.algorithms.rewards import RewardedClient, RewardedClients, RewardParams, Reputations, VectorUpload
from bench.engine.aggregate import copy_state
from bench.engine.protocol import Metrics
from bench.engine.state import Client, Server
from bench.engine.vectors import (SparseVector, clip_norm, largest_fraction, load_vector, model_vector, parameter_keys,
                                  weighted_sum)


class CFFLParams(RewardParams):
    """CFFL's hyperparameters (Table 6) and its readings."""

    upload_fraction: float = Field(0.5, gt=0, le=1, description="θ_u: share of the update's entries uploaded")
    clip_norm: float = Field(5.0, gt=0, description="L2 bound of a client's update")
    threshold: float = Field(0.05, ge=0, description="c_th: reputation below which a client leaves")
    alpha: float = Field(1.0, gt=0, description="α of the sinh reputation mapping")
    threshold_rule: Literal["fixed", "adaptive"] = Field("fixed", description=(
        "fixed: c_th = threshold; adaptive: c_th = (1/3)/|R|, |R| the clients still in (CFFL's authors' code)"))
    download: Literal["reputation", "size", "authors"] = reading(
        "reputation", "size", "a client's reward: the top q_k = r_k/max r share of the others' aggregate "
        "u − (n_k/Σn)·u_k, added to the personal model; or all of u − (n_k/max n)·u_k, the personal model becoming "
        "its trained copy of w_g + u_k + that (§4 [C]); authors (an option of neither mode): the top "
        "(r_k/max r)·(n_k/max n) share of u, less (n_k/Σn)·u_k, added to the personal model (CFFL's authors' code)")


def reputation_update(reputation: torch.Tensor, accuracy: torch.Tensor, alpha: float, threshold: float) -> torch.Tensor:
    """CFFL's reputation step (§4 [C]): c = sinh(α·acc/Σacc)/Σ; r ← (½r + ½c)/Σ; r_k < c_th → 0, normalised
    again (the code's +1e-9 in each normaliser kept). Clients not scored have accuracy 0."""
    rep = reputation.clone()
    if accuracy.sum() > 0:
        c = torch.sinh(alpha * accuracy / accuracy.sum())
        c = c / (c.sum() + 1e-9)
        rep = 0.5 * rep + 0.5 * c
        rep = rep / (rep.sum() + 1e-9)
    rep[rep < threshold] = 0.0
    if rep.sum() > 0:
        rep = rep / rep.sum()
    return rep


def download(aggregate: torch.Tensor, own: torch.Tensor, size_share: float, fraction: float | None) -> SparseVector:
    """What a client receives: the aggregate less its own upload scaled by ``size_share``, sparsified to
    its ``fraction`` largest entries (``None``: all of it, the code)."""
    others = aggregate - size_share * own
    return SparseVector(None, others, others.numel()) if fraction is None else largest_fraction(others, fraction)


def download_then_remove(aggregate: torch.Tensor, own: torch.Tensor, size_share: float, fraction: float) -> SparseVector:
    """CFFL's authors' reward: the ``fraction`` largest entries of the whole aggregate, less the client's own upload
    scaled by ``size_share`` (on every entry, so its own update is removed whether or not it was chosen)."""
    reward = largest_fraction(aggregate, fraction).dense() - size_share * own
    return SparseVector(None, reward, reward.numel())


def adaptive_threshold(remaining: int) -> float:
    """CFFL's authors' c_th = (1/3)/|R| for |R| clients still in the federation."""
    return 1.0 / (3.0 * remaining)


@register_algorithm("cffl")
class CFFL(RewardedClients[VectorUpload]):
    """Up: the clipped update's θ_u largest entries; down: the reward (paper: the top q_k share of the others'
    aggregate; code: the others' whole aggregate)."""

    Params = CFFLParams
    params: CFFLParams

    def keys(self, model: torch.nn.Module) -> list[str]:
        return parameter_keys(model)

    def taking_part(self, server: Server[Reputations], cids: list[int]) -> list[int]:
        """The clients still in the federation (r_k > 0); when every client has left, nothing is trained or sent."""
        assert server.state.reputation is not None
        return [cid for cid in cids if server.state.reputation[cid] > 0]

    def upload(self, client: Client[RewardedClient], delta: torch.Tensor) -> VectorUpload:
        """u_k: Δ_k clipped to ``clip_norm``, its θ_u largest entries."""
        upload = largest_fraction(clip_norm(delta, self.params.clip_norm), self.params.upload_fraction)
        client.state.sent = upload.dense()
        return VectorUpload(client.cid, len(self.pool(client)[1]), upload)

    def aggregate(self, round_index: int, server: Server[Reputations], updates: list[VectorUpload]) -> Metrics:
        """Steps 2-4: the aggregate, the reputations from each w_g + u_k's validation accuracy, each client's reward."""
        p, state = self.params, server.state
        assert server.model is not None and state.reputation is not None
        state.share = {}
        if not updates:  # every client has left: nothing was trained
            return {"train_loss": 0.0, "clients_left": 0.0}
        keys = self.keys(server.model)
        uploads = [u.vector.dense() for u in updates]
        sizes = torch.tensor([float(u.num_samples) for u in updates], dtype=torch.float64)
        aggregate = weighted_sum(uploads, (sizes / sizes.sum()).tolist())
        global_vector = model_vector(server.model, keys) + aggregate
        load_vector(server.model, global_vector, keys)

        val_x, val_y = self.validation()
        probe = self.scoring_model
        copy_state(probe, server.model)
        accuracy = torch.zeros(len(state.reputation), dtype=torch.float64)
        for update, upload in zip(updates, uploads):
            load_vector(probe, global_vector + upload, keys)
            accuracy[update.cid] = self.ctx.accuracy(probe, val_x, val_y)
        threshold = p.threshold if p.threshold_rule == "fixed" else adaptive_threshold(len(updates))
        state.reputation = reputation_update(state.reputation, accuracy, p.alpha, threshold)

        top = float(state.reputation.max())
        for update, upload, size in zip(updates, uploads, sizes.tolist()):
            if p.download == "size":
                state.rewards[update.cid] = download(aggregate, upload, size / float(sizes.max()), None)
                state.share[update.cid] = 1.0
            elif p.download == "authors":
                fraction = (float(state.reputation[update.cid]) / top if top > 0 else 0.0) * size / float(sizes.max())
                own_share = size / float(sizes.sum()) if fraction > 0 else 0.0  # a client that left gets nothing
                state.rewards[update.cid] = download_then_remove(aggregate, upload, own_share, fraction)
                state.share[update.cid] = fraction
            else:
                fraction = float(state.reputation[update.cid]) / top if top > 0 else 0.0
                state.rewards[update.cid] = download(aggregate, upload, size / float(sizes.sum()), fraction)
                state.share[update.cid] = fraction
        return {"clients_left": float(len(updates))}

    def take_reward(self, client: Client[RewardedClient], reward: torch.Tensor, keys: list[str]) -> None:
        """Paper: the reward added to the personal model; code: its own upload and the others' aggregate, g_k."""
        if self.params.download == "size":
            assert client.state.sent is not None
            reward = client.state.sent + reward
        super().take_reward(client, reward, keys)
