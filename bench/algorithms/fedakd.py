"""FedAKD — Yu, Wang, Wang, Lin, Liu, Yee, Ma, "Towards Collaborative Fairness in Federated Learning Under
Imbalanced Covariate Shift", KDD 2025 (pipelines/fedakd/NOTES.md §1).

Federated *asynchronous* knowledge distillation. Each client k keeps a personal model w_k, never
overwritten by the global model w_g. In round t, for every client (Algorithm 1, §1.3):

1. Global → local (Eq. 2): one epoch over D_k of   L→ = CE(w_k; D_k) + α·KD(w_k; w_g, D_k)   (teacher w_g
   frozen, in eval mode).
2. Selection: I_k = {(x, y) ∈ D_k : argmax f(x; w_k) = y} — the samples the updated local model gets right;
   "high confidence" has no probability threshold (§0.1).
3. Local → global (Eq. 5): a copy w_{g,k} of w_g, one epoch over I_k of   L← = CE(w_{g,k}; I_k) +
   β·KD(w_{g,k}; w_k, I_k)   (teacher w_k frozen); an empty I_k takes no step and uploads w_g unchanged.
4. Server: w_g ← Σ_k |D_k|·w_{g,k} / Σ_k |D_k| over the whole state dict, BN statistics included.

KD(student; teacher, S) = τ²·KL(softmax(z_t/τ) ‖ softmax(z_s/τ)), the batch mean (``F.kl_div`` with
``batchmean``, §1.2 [C]); α = β = τ = 1 [P Table 6]. Each phase builds a fresh optimiser (the run's
``training.optimizer``, Adam in the paper's suite, §0.3); the client's G→L optimiser is reset each round
unless the config makes it persistent.

``mode: code`` is the released fedack.py, which made the paper's tables (§1.4): its two switches, the round's
``order`` and the ``data`` D_k, are declared on :class:`FedAKDParams`.

The ablations of Table 4 (§1.7) are switches of the same method: ``selection: all`` (All-Data: L→G over
all of D_k), ``global_to_local: false`` (Single-Dist: no G→L distillation; "each client simply overwrites its
local model with w_g", paper §5.3), ``weighting: correct`` (Correct-Agg.: weights |I_k|). Single-Dist has two
readings [I] (§1.7, A12): ``single_dist: trained`` (default) — w_k ← w_g, then one epoch of plain cross-entropy
on D_k (the G→L step without its KD term), and that w_k selects I_k and teaches L→G; ``copied`` — w_k ← w_g
and nothing else, so a copy of w_g selects and teaches and no local model ever trains. The paper's Single-Dist
loses 7 points of Avg against Full (Table 4); ``copied`` collapses (the README has both measured).

Readings [I] (§1.6): one epoch of mini-batches per phase (Algorithm 1 writes one gradient step); the
model evaluated as Acc_p is the suite's choice (``evaluation.local_model: global`` gives the code's
w_g on each local test split, ``own`` the personal w_k). Each client's |I_k|/|D_k| is recorded every
round (``selected_share``): the diagnostic of the selection at work (:data:`SELECTION`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm, AlgorithmParams
from bench.algorithms.readings import ModeParams, reading
from bench.engine.aggregate import load_state, weighted_average
from bench.engine.chunks import chunk_size
from bench.engine.distillation import kd_loss
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Loop, Step
from bench.engine.mechanisms import Mechanism
from bench.engine.messages import ModelBroadcast
from bench.engine.protocol import Exchange, Metrics, Phase, no_metrics
from bench.engine.state import Client, NoState, Server


class FedAKDParams(ModeParams):
    """FedAKD's hyperparameters (Table 6), the ablations of Table 4, and the paper's and the code's readings."""

    alpha: float = Field(1.0, ge=0, description="α, weight of KD in global→local distillation (Eq. 2)")
    beta: float = Field(1.0, ge=0, description="β, weight of KD in local→global distillation (Eq. 5)")
    temperature: float = Field(1.0, gt=0, description="τ of the KD softmaxes (Table 6 T)")
    order: Literal["paper", "code"] = reading(
        "paper", "code", "the round: G→L, select, L→G, aggregate (Algorithm 1); or L→G on last round's I_k (round 1: "
        "all of D_k, teacher the untrained w_k = w_g), aggregate, then G→L from the new w_g and select (§1.4)")
    data: Literal["train", "train_and_test"] = reading(
        "train", "train_and_test", "D_k: the train split; or train + local test split, so G→L and the selection see "
        "the test data the global model is scored on (§0.8, leakage), and the weights |D_k| count both")
    selection: Literal["correct", "all"] = Field("correct", description="L→G data: I_k, or all of D_k (All-Data)")
    global_to_local: bool = Field(True, description="Step 1; false: w_k ← w_g instead (Single-Dist)")
    single_dist: Literal["trained", "copied"] = Field("trained", description=(
        "Single-Dist's local model (global_to_local: false, pipelines/fedakd/NOTES.md §1.7, A12): trained: w_k ← w_g, "
        "then one epoch of plain cross-entropy on D_k (Step 1 without its KD term), which selects I_k and teaches "
        "L→G; copied: w_k ← w_g and nothing else, so a copy of w_g selects and teaches and w_k never trains"))
    weighting: Literal["data", "correct"] = Field("data", description="aggregation weights |D_k|, or |I_k| "
                                                                       "(Correct-Agg.)")


def distillation_objective(student_logits: torch.Tensor, teacher_logits: torch.Tensor, y: torch.Tensor,
                           weight: float, temperature: float) -> torch.Tensor:
    """CE(student; y) + weight·KD(student; teacher), KD the engine's τ²·KL (§1.2 [C]): Eq. 2 (local student, global teacher, weight α) and
    Eq. 5 (global student, local teacher, weight β)."""
    loss = F.cross_entropy(student_logits, y)
    return loss + weight * kd_loss(student_logits, teacher_logits, temperature) if weight else loss


@torch.no_grad()
def correctly_predicted(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The indices i with argmax f(x_i; w) = y_i (Step 2, §0.1), the model in eval mode, in index order."""
    with eval_mode(model):
        size = chunk_size(model, x, batch_size)
        hits = [model(x[s:s + size])[1].argmax(1) == y[s:s + size] for s in range(0, len(y), size)]
    return torch.cat(hits).nonzero().flatten() if hits else torch.zeros(0, dtype=torch.long, device=y.device)


@dataclass
class FedAKDClient(NoState):
    """What a client carries between rounds: its selected set I_k as indices into D_k (the code's order
    distils from the previous round's; None before the first selection: all of D_k)."""

    selected: torch.Tensor | None = None


@dataclass(frozen=True)
class DistilledCopy:
    """A client's upload: its copy w_{g,k} of the global model after local → global distillation, and its
    aggregation weight (|D_k|, or |I_k| for Correct-Agg.)."""

    state: dict[str, torch.Tensor]
    weight: float


SELECTION = Mechanism(
    "local → global distils from the samples the local model gets right", "selected_share", 1.0, "below", 0.05,
    why="with every sample selected (|I_k| = |D_k| for every client) the distillation weights are the data sizes and "
        "FedAKD is its All-Data ablation; the selection must leave out more than 5 % of the clients' data on average")


@register_algorithm("fedakd")
class FedAKD(Algorithm[FedAKDClient, NoState, ModelBroadcast[None], DistilledCopy]):
    """Down: the global model (twice a round in the code's order: before L→G and after the aggregation, for G→L);
    up: the distilled copy and its weight."""

    Params = FedAKDParams
    averages_models = True
    params: FedAKDParams
    ClientState = FedAKDClient
    resident_models = 3  # the personal model, the working copy of the global model and the frozen teacher
    metrics_order = ("train_loss", "distill_loss")

    @classmethod
    def mechanisms(cls, params: AlgorithmParams) -> tuple[Mechanism, ...]:
        """The selection I_k (Step 2), which sets each client's share of the local → global distillation; none for
        the All-Data ablation (``selection: all``)."""
        assert isinstance(params, FedAKDParams)  # validated by cls.Params (bench/suites/mechanisms.py)
        return (SELECTION,) if params.selection == "correct" else ()

    @cached_property
    def global_copy(self) -> nn.Module:
        """A client's copy of the global model w_g (its teacher in G→L, its student w_{g,k} in L→G), loaded from the
        received model before every use."""
        return self.ctx.build_model("fedakd-student")

    # -- data ----------------------------------------------------------------------------------

    def pool(self, client: Client[FedAKDClient]) -> tuple[torch.Tensor, torch.Tensor]:
        """D_k: the train split, or (``data: train_and_test``, the released code) train + local test."""
        return (client.data.x, client.data.y) if self.params.data == "train" else client.data.with_test

    # -- the three client steps ----------------------------------------------------------------

    def global_to_local(self, round_index: int, client: Client[FedAKDClient], received: ModelBroadcast[None]) -> float:
        """Step 1 (Eq. 2): w_k learns from D_k and from the frozen global model. Single-Dist overwrites w_k with w_g
        and then trains it on D_k by cross-entropy alone (``single_dist: trained``), or stops there (``copied``)."""
        distil = self.params.global_to_local
        if not distil:
            load_state(client.model, received.state)
            if self.params.single_dist == "copied":
                return 0.0
        teacher = self.global_copy
        if distil:
            load_state(teacher, received.state)
            teacher.eval()
        x, y = self.pool(client)

        def step(_: Step, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            bx, by = batch
            if not distil:
                return F.cross_entropy(client.model(bx)[1], by)
            with torch.no_grad():
                _, teacher_logits = teacher(bx)
            _, logits = client.model(bx)
            return distillation_objective(logits, teacher_logits, by, self.params.alpha, self.params.temperature)

        return self.ctx.client_loop(client, round_index).run(self.ctx.batches(x, y, client.cid, round_index), step)

    def select(self, client: Client[FedAKDClient]) -> None:
        """Step 2: I_k from the local model (All-Data: every sample)."""
        x, y = self.pool(client)
        client.state.selected = (torch.arange(len(y), device=y.device) if self.params.selection == "all" else
                                 correctly_predicted(client.model, x, y, self.ctx.config.evaluation.batch_size))

    def local_to_global(self, round_index: int, client: Client[FedAKDClient], received: ModelBroadcast[None],
                        weight: float) -> tuple[DistilledCopy, float]:
        """Step 3 (Eq. 5): a copy of w_g learns from I_k and from the frozen local model; the copy with the client's
        ``weight``, and the mean loss (an empty I_k takes no step: w_g itself, loss 0)."""
        student = self.global_copy
        load_state(student, received.state)
        student.train()
        teacher = client.model.eval()
        x, y = self.pool(client)
        chosen = client.state.selected if client.state.selected is not None else torch.arange(len(y), device=y.device)
        loop = Loop(self.ctx.make_optimizer(student.parameters(), self.ctx.lr_at(round_index)),
                    list(student.parameters()), round_index, client.cid, self.ctx.config.training.grad_clip,
                    guard=self.ctx.loss_guard)

        def step(_: Step, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            bx, by = batch
            with torch.no_grad():
                _, teacher_logits = teacher(bx)
            _, logits = student(bx)
            return distillation_objective(logits, teacher_logits, by, self.params.beta, self.params.temperature)

        loss = loop.run(self.ctx.batches(x[chosen], y[chosen], "l2g", client.cid, round_index), step) if len(chosen) else 0.0
        client.model.train()
        return DistilledCopy({k: v.clone() for k, v in student.state_dict().items()}, weight), loss

    def weight(self, client: Client[FedAKDClient]) -> float:
        """|D_k| (Algorithm 1 line 26), or |I_k| for Correct-Agg."""
        if self.params.weighting == "correct" and client.state.selected is not None:
            return float(len(client.state.selected))
        return float(len(self.pool(client)[1]))

    # -- the round -------------------------------------------------------------------------------

    def phases(self, round_index: int) -> Sequence[Phase[FedAKDClient, NoState]]:
        """Algorithm 1: one exchange (G→L, select, L→G; aggregate). The code's order: L→G on last round's I_k and
        the aggregation, then a second exchange in which each client receives the new w_g for G→L and selects."""
        if self.params.order == "paper":
            return [Exchange(self.broadcast, self.client_update, self.aggregate)]
        return [Exchange(self.broadcast, self.distil_to_global, self.aggregate),
                Exchange(self.broadcast, self.distil_to_local, no_metrics)]

    def broadcast(self, round_index: int, server: Server[NoState], cid: int) -> ModelBroadcast[None]:
        assert server.model is not None
        return ModelBroadcast(server.model.state_dict(), None)

    def client_update(self, round_index: int, client: Client[FedAKDClient],
                      received: ModelBroadcast[None]) -> tuple[DistilledCopy, Metrics]:
        """Steps 1-3 in the paper's order; the weight once I_k is selected."""
        g2l = self.global_to_local(round_index, client, received)
        self.select(client)
        upload, l2g = self.local_to_global(round_index, client, received, self.weight(client))
        return upload, {"train_loss": g2l, "distill_loss": l2g}

    def distil_to_global(self, round_index: int, client: Client[FedAKDClient],
                         received: ModelBroadcast[None]) -> tuple[DistilledCopy, Metrics]:
        """The code's first half: Step 3 on last round's I_k (all of D_k in round 1), weighted before it."""
        upload, l2g = self.local_to_global(round_index, client, received, self.weight(client))
        return upload, {"distill_loss": l2g}

    def distil_to_local(self, round_index: int, client: Client[FedAKDClient], received: ModelBroadcast[None]) -> tuple[None, Metrics]:
        """The code's second half: Steps 1 and 2 from the new w_g."""
        g2l = self.global_to_local(round_index, client, received)
        self.select(client)
        return None, {"train_loss": g2l}

    def aggregate(self, round_index: int, server: Server[NoState], updates: list[DistilledCopy]) -> Metrics:
        """Step 4: the weighted average of the uploaded global copies (all clients weigh 0: unchanged)."""
        assert server.model is not None
        weights = [u.weight for u in updates]
        if sum(weights) > 0:
            load_state(server.model, weighted_average([u.state for u in updates], weights))
        return {}

    def client_records(self, server: Server[NoState], clients: list[Client[FedAKDClient]]) -> dict[str, dict[int, float]]:
        return {"selected_share": {c.cid: len(c.state.selected) / len(self.pool(c)[1])
                                   for c in clients if c.state.selected is not None}}
