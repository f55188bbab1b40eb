"""CFFL — Lyu, Xu, Wang, Yu et al., "Collaborative Fairness in Federated Learning", in *Federated Learning:
Privacy and Incentive*, LNCS 12500, 2020 (specs/fedakd.md §4 CFFL).

Each round, every client still in the federation (reputation r_k > 0):

1. trains one local pass; its update Δ_k (parameters only, no BN buffers) is clipped to L2 norm
   ``clip_norm`` and sparsified to its θ_u largest-magnitude entries: u_k;
2. the server aggregates u = Σ_k n_k·u_k / Σ_k n_k and sets w_g ← w_g + u;
3. scores each client by the validation accuracy of w_g + u_k and updates the reputations
   (:func:`reputation_update`): c_k = sinh(α·acc_k/Σ_j acc_j) normalised, r ← ½r + ½c normalised,
   clients with r_k < c_th leave (r_k = 0) and r is normalised again;
4. rewards each client with a share of the others' updates (:func:`download`).

The reward (step 4) differs between the two modes; ``reward_share`` records it per client and round:

- ``paper`` [I, the spec's summary of the paper]: the client downloads the ⌊q_k·D⌋ largest-magnitude
  entries of the others' aggregate u − (n_k/Σn)·u_k, q_k = r_k / max_j r_j, and adds them to the personal
  model it trained (``download: reputation``).
- ``code`` (FedAKD's ``cffl.py``, §4 [C]): the whole aggregate less the client's own upload scaled by its
  data size, g_k = u − (n_k/max_j n_j)·u_k; the personal model becomes its locally trained copy of the
  global model + u_k + g_k (``download: size``; its own update counts twice). Reputation then only removes
  clients. It trains on, and is scored on, all its local data (``data: all``); the validation set is the
  first 10 % of each client's data (``validation: head``); see :mod:`bench.algorithms.rewards`.

Defaults θ_u = 0.5, clip 5.0, c_th = 0.05, α = 1 [P Table 6]. The global model's BN buffers never change
(only parameter updates are exchanged), as in both.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.rewards import Reputations, RewardedClients, RewardParams
from bench.engine.aggregate import copy_state
from bench.engine.state import Client, Server
from bench.engine.vectors import clip_norm, keep_fraction, load_vector, model_vector, parameter_keys, weighted_sum


class CFFLParams(RewardParams):
    MODE_DEFAULTS: ClassVar[dict[str, dict[str, Any]]] = {
        "paper": {"start": "own", "data": "train", "validation": "split", "download": "reputation"},
        "code": {"start": "global", "data": "all", "validation": "head", "download": "size"},
    }
    upload_fraction: float = Field(0.5, gt=0, le=1, description="θ_u: share of the update's entries uploaded")
    clip_norm: float = Field(5.0, gt=0, description="L2 bound of a client's update")
    threshold: float = Field(0.05, ge=0, description="c_th: reputation below which a client leaves")
    alpha: float = Field(1.0, gt=0, description="α of the sinh reputation mapping")
    download: Literal["reputation", "size"] = "reputation"


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


def download(aggregate: torch.Tensor, own: torch.Tensor, size_share: float, fraction: float | None) -> torch.Tensor:
    """What a client receives: the aggregate less its own upload scaled by ``size_share``, sparsified to
    its ``fraction`` largest entries (``None``: all of it, the code)."""
    others = aggregate - size_share * own
    return others if fraction is None else keep_fraction(others, fraction)


@register_algorithm("cffl")
class CFFL(RewardedClients):
    Params = CFFLParams
    params: CFFLParams

    def __init__(self, params: CFFLParams, ctx: Any) -> None:
        super().__init__(params, ctx)
        self._probe: torch.nn.Module | None = None  # scratch: a copy of w_g to score w_g + u_k on

    def run_round(self, round_index: int, server: Server[Reputations], clients: list[Client]) -> dict[str, float]:
        assert server.model is not None and server.state.reputation is not None
        p, state = self.params, server.state
        keys = parameter_keys(server.model)
        alive = [c for c in clients if state.reputation[c.cid] > 0]
        if not alive:  # every client has left: nothing is trained or exchanged
            state.share = {}
            return {"train_loss": 0.0, "clients_left": 0.0}
        deltas, loss = self.local_deltas(round_index, server, alive, keys)
        uploads = [keep_fraction(clip_norm(delta, p.clip_norm), p.upload_fraction) for delta in deltas]
        sizes = torch.tensor([float(len(self.pool(c)[1])) for c in alive], dtype=torch.float64)
        aggregate = weighted_sum(uploads, (sizes / sizes.sum()).tolist())
        global_vector = model_vector(server.model, keys) + aggregate
        load_vector(server.model, global_vector, keys)

        val_x, val_y = self.validation(clients)
        probe = self.probe(server)
        accuracy = torch.zeros(len(state.reputation), dtype=torch.float64)
        for client, upload in zip(alive, uploads):
            load_vector(probe, global_vector + upload, keys)
            accuracy[client.cid] = self.ctx.accuracy(probe, val_x, val_y)
        state.reputation = reputation_update(state.reputation, accuracy, p.alpha, p.threshold)

        state.share = {}
        top = float(state.reputation.max())
        for client, upload, size in zip(alive, uploads, sizes.tolist()):
            if p.download == "size":
                reward = upload + download(aggregate, upload, size / float(sizes.max()), None)
                state.share[client.cid] = 1.0
            else:
                fraction = float(state.reputation[client.cid]) / top if top > 0 else 0.0
                reward = download(aggregate, upload, size / float(sizes.sum()), fraction)
                state.share[client.cid] = fraction
            self.add_to(client, reward, keys)
        return {"train_loss": loss, "clients_left": float(len(alive))}

    def probe(self, server: Server) -> torch.nn.Module:
        """A copy of the global model to score candidate parameters on (scratch, overwritten before every use)."""
        assert server.model is not None
        if self._probe is None:
            self._probe = self.ctx.build_model("cffl-probe")
        copy_state(self._probe, server.model)
        return self._probe
