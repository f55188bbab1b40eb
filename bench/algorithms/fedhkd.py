"""FedHKD — Chen, Wang, Vikalo, ICLR 2023, "The Best of Both Worlds: Accurate Global and Personalized
Models through Federated Learning with Data-Free Hyper-Knowledge Distillation" (pipelines/fedhkd/NOTES.md).

FedAvg plus hyper-knowledge. After local training each client computes, per class j, the mean
latent h̄_i^j and the mean tempered prediction q̄_i^j = mean softmax(G(h)/T) over its whole train
set in eval mode (Eq. 4, §3.1), adds Gaussian DP noise of std σ·2ζ/N_i^j per element to h̄ only (Eq. 7,
§3.3) and uploads (h̃, q̄, N_i^j). The server FedAvg-aggregates the models (Eq. 1) and combines the
knowledge class-wise with weights N_i^j/N^j (Eq. 9, §3.4). The local objective (Eq. 11, §3.5) is

    CE + λ·(1/n)Σ_{j∈J} ‖softmax(G_ω(𝓗^j)/T) − 𝓠^j‖₂ + γ·(1/B)Σ_k ‖R_φ(x_k) − 𝓗^{y_k}‖₂,

J the classes with global knowledge; round 1 has none, so it is plain CE (§3.6). FedHKD* is this
algorithm with ``gamma: 0`` (§4). Defaults λ = γ = 0.05, T = 0.5, σ = 7, ζ = 3, ν = 0.25 (§5.5). The mechanism's
diagnostic, ``knowledge_share``, is the mean over a client's local steps of the share of this objective its two
knowledge terms make (:data:`KNOWLEDGE_MOVES_LOSS`).

Readings of the ambiguities (§3.8), each a parameter: A1 ``nu_mode: none`` (every held class is
shared, the [R] reading and the code's; ``fraction`` shares class j iff N_i^j/N_i ≥ ν); A9 the feature
term averages over the mini-batch; missing classes are dropped with the literal normalisers 1/n and
1/B (``kd_norm``/``feat_norm: present`` divide by |J| / the samples with knowledge instead).

``mode: code`` switches to the released code's behaviour (§3.9): the switches of :class:`FedHKDParams`, each
with its paper and code value (A2, A3, A4, A5, A7 and the code's client-by-client knowledge, naive softmax and
loader knowledge).

Round 1 is plain CE in both modes (§3.6; in ``hk_update: client`` the knowledge written during round 1
is first used in round 2, as in the code). λ, γ, T, σ, ζ, ν keep the paper's values in both modes (the
2022 scripts used λ = γ = 0.1, §3.9). The code's other differences live in the run config, not here:
constant lr (A6, ``training.lr_decay.every: null`` vs 10), clipping 1.1 (A11, ``training.grad_clip``),
``drop_last`` loaders and its partition (A8), its batch-averaged accuracies (§3.7,
``evaluation.accuracy: batches``), its ``Normalize(0.5, 0.5)`` inputs (§5.1, ``dataset.normalize:
half``) and its training on with NaN weights after a NaN loss (``training.on_divergence: train_on``; the run
still ends as diverged). The optional coordinate clipping of h for rigorous DP (§3.3 (a)) is not implemented; the paper
does not clip.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import AlgorithmParams, AveragingParams, ParameterAveraging
from bench.algorithms.readings import ModeParams, reading
from bench.engine.knowledge import (ClassStatistics, aggregate_class_statistics, class_statistics,
                                    feature_alignment, last_writer_class_statistics)
from bench.engine.loop import Step
from bench.engine.mechanisms import Mechanism
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server
from bench.rng import numpy_stream, torch_stream

class FedHKDParams(ModeParams, AveragingParams):
    """FedHKD's hyperparameters (§5.5), the readings of its ambiguities (§3.8) and the released code's (§3.9)."""

    lam: float = Field(0.05, ge=0, description="λ, weight of the classifier-distillation term (Eq. 11)")
    gamma: float = Field(0.05, ge=0, description="γ, weight of the feature term (Eq. 11); 0 gives FedHKD*")
    temperature: float = Field(0.5, gt=0, description="T of the soft predictions (Eq. 2)")
    sigma: float = Field(7.0, ge=0, description="DP noise multiplier σ (noise: paper)")
    zeta: float = Field(3.0, gt=0, description="bound ζ on |h(l)|; sensitivity 2ζ/N_i^j (Lemma 1)")
    nu: float = Field(0.25, ge=0, le=1, description="sharing threshold ν on N_i^j/N_i (nu_mode: fraction)")
    nu_mode: Literal["none", "fraction"] = Field("none", description="A1: every held class is shared (the [R] "
                                                                       "reading and the code's), or N_i^j/N_i ≥ ν")
    noise: Literal["paper", "const", "none"] = reading(
        "paper", "const", "A5: per element std σ·2ζ/N_i^j; or one vector of std noise_std per client and round for "
        "all classes")
    noise_std: float = Field(2.0, ge=0, description="std of the code's constant noise (noise: const)")
    hk_agg: Literal["weighted", "last_writer"] = reading(
        "weighted", "last_writer", "A4: Eq. 9; or the last client (random order) holding the class wins and the "
        "knowledge persists across rounds")
    kd_dist: Literal["l2", "kl"] = reading(
        "l2", "kl", "A2 term 2: ‖Q − 𝓠‖₂; or KLDivLoss(log Q, 𝓠) = KL(𝓠‖Q)/n")
    kd_norm: Literal["classes", "present"] = reading(
        "classes", "present", "A2 term 2's normaliser: n; or |J| (KLDivLoss 'mean')")
    feat_dist: Literal["l2", "mse"] = reading(
        "l2", "mse", "A3 term 3: ‖h − 𝓗^y‖₂; or ‖h − 𝓗^y‖²/d (MSELoss)")
    feat_norm: Literal["batch", "present"] = Field("batch", description="A3 term 3's normaliser: B (the code too: "
                                                                          "missing rows count as 0 in B·d), or the "
                                                                          "samples with knowledge")
    weighting: Literal["samples", "uniform"] = reading(
        "samples", "uniform", "A7: FedAvg's weights N_i; or the unweighted mean")
    hk_update: Literal["round", "client"] = reading(
        "round", "client", "§3.4/§3.9: the server's knowledge fixed for the round (Eq. 9 after all clients); or "
        "updated after each client, the clients training one after another in a seeded random order, so later "
        "clients distil from knowledge earlier ones wrote this round (needs hk_agg: last_writer)",
        omitted=("paper",))
    softmax: Literal["stable", "naive"] = reading(
        "stable", "naive", "§3.9: Q(z, T) (Eq. 2) with the max shift and term 2 through log_softmax; or the code's "
        "soft_predict exp(z/T)/Σexp(z/T) then log: exp overflows to inf/inf = NaN for z/T > 88 and underflows to "
        "log 0 = -inf, both of which end the run as diverged", omitted=("paper",))
    hk_data: Literal["all", "loader"] = reading(
        "all", "loader", "§3.1: knowledge over the whole train set; or over one pass of the shuffled train loader "
        "(the training config's batch size and drop_last), which skips the last partial batch", omitted=("paper",))

    @model_validator(mode="after")
    def _client_updates_overwrite(self) -> FedHKDParams:
        if self.hk_update == "client" and self.hk_agg != "last_writer":
            raise ValueError("hk_update: client updates the knowledge after each client, which only "
                             "hk_agg: last_writer defines; set hk_agg: last_writer or hk_update: round")
        return self


def gaussian_sigma_threshold(epsilon: float, delta: float) -> float:
    """The smallest σ for which the Gaussian mechanism is (ε, δ)-DP: √(2 ln(1.25/δ))/ε (Theorem 1)."""
    return math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def dp_noise_std(sigma: float, zeta: float, counts: torch.Tensor) -> torch.Tensor:
    """Per-element noise std σ·S_f with sensitivity S_f = 2ζ/N_i^j of the class mean (Lemma 1, Eq. 7)."""
    return sigma * 2 * zeta / counts.to(torch.float32)


def tempered_softmax(logits: torch.Tensor, temperature: float, kind: Literal["stable", "naive"]) -> torch.Tensor:
    """Q(z, T)_c = exp(z_c/T) / Σ_c' exp(z_c'/T) (Eq. 2): ``stable`` shifts by the max first; ``naive``
    does not, as the released code's ``soft_predict`` (§3.9): exp(z/T) overflows to inf (inf/inf = NaN)
    for z/T > 88 and underflows to 0 for z/T < −103 in float32."""
    if kind == "stable":
        return torch.softmax(logits / temperature, dim=1)
    e = torch.exp(logits / temperature)
    return e / e.sum(1, keepdim=True)


def classifier_distillation(classifier: nn.Module, knowledge: ClassStatistics, temperature: float,
                            distance: Literal["l2", "kl"], normalise: Literal["classes", "present"],
                            softmax: Literal["stable", "naive"] = "stable") -> torch.Tensor:
    """Eq. 11 term 2: the local classifier on the global prototypes 𝓗^j against 𝓠^j, j ∈ J, summed and
    divided by n (``classes``) or |J| (``present``). Only ω gets gradients (𝓗, 𝓠 are constants).
    ``softmax: naive`` takes ``log`` of :func:`tempered_softmax` (the code's ``Q_help.log()``), which is
    −inf wherever it underflowed; ``stable`` uses log_softmax."""
    present = knowledge.present
    logits = classifier(knowledge.features[present])
    log_q = (F.log_softmax(logits / temperature, dim=1) if softmax == "stable"
             else tempered_softmax(logits, temperature, "naive").log())
    target = knowledge.soft[present]
    if distance == "l2":
        per_class = torch.linalg.vector_norm(log_q.exp() - target, dim=1)
    else:
        per_class = F.kl_div(log_q, target, reduction="none").mean(1)
    return per_class.sum() / (len(knowledge.counts) if normalise == "classes" else len(per_class))


@dataclass
class Knowledge(NoState):
    """The global hyper-knowledge (𝓗^j, 𝓠^j, N^j): held by the server, received by each client
    (None before the first aggregation)."""

    knowledge: ClassStatistics | None = None


def knowledge_share(loss: torch.Tensor, terms: list[torch.Tensor]) -> float:
    """The diagnostic of the hyper-knowledge at work: the share of one batch's objective its knowledge terms make
    (0 without them)."""
    return sum(float(t.detach()) for t in terms) / float(loss.detach())


KNOWLEDGE_MOVES_LOSS = Mechanism(
    "the hyper-knowledge moves the local loss", "knowledge_share", 0.0, "above", 0.05,
    why="terms that make under 5 % of the local objective leave local training what plain cross-entropy makes it")


@register_algorithm("fedhkd")
class FedHKD(ParameterAveraging[Knowledge, Knowledge, ClassStatistics | None, ClassStatistics]):
    """The broadcast carries the global hyper-knowledge (𝓗, 𝓠, N) besides the model, the update the client's
    local hyper-knowledge (h̃_i^j, q̄_i^j, N_i^j)."""

    Params = FedHKDParams
    params: FedHKDParams
    ClientState = ServerState = Knowledge
    resident_models = 1  # Table 1: FedHKD holds one model

    @classmethod
    def mechanisms(cls, params: AlgorithmParams) -> tuple[Mechanism, ...]:
        """Hyper-knowledge distillation (Eq. 11): its terms must weigh in the local objective; none with λ = γ = 0."""
        assert isinstance(params, FedHKDParams)  # validated by cls.Params (bench/suites/mechanisms.py)
        return (KNOWLEDGE_MOVES_LOSS,) if params.lam or params.gamma else ()

    def broadcast_payload(self, round_index: int, server: Server[Knowledge], cid: int) -> ClassStatistics | None:
        return server.state.knowledge

    def receive_payload(self, client: Client[Knowledge], payload: ClassStatistics | None) -> None:
        client.state.knowledge = payload

    def local_loss(self, step: Step, client: Client[Knowledge], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.objective(step, client, x, y)[0]

    def objective(self, step: Step, client: Client[Knowledge], x: torch.Tensor,
                  y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Eq. 11 on one batch (summed in the equation's order), and its hyper-knowledge terms (none in round 1)."""
        features, logits = client.model(x)
        loss = F.cross_entropy(logits, y)
        knowledge = client.state.knowledge
        if step.round == 1 or knowledge is None or not knowledge.present.any():  # round 1: plain CE
            return loss, []
        p, terms = self.params, []
        if p.lam:
            terms.append(p.lam * classifier_distillation(client.model.classifier, knowledge, p.temperature,  # type: ignore[arg-type]  # torch: Module attributes are Tensor | Module
                                                         p.kd_dist, p.kd_norm, p.softmax))
            loss = loss + terms[-1]
        if p.gamma:
            terms.append(p.gamma * feature_alignment(features, y, knowledge, p.feat_dist, p.feat_norm))
            loss = loss + terms[-1]
        return loss, terms

    def client_update(self, round_index: int, client: Client[Knowledge],
                      message: ModelBroadcast[ClassStatistics | None]) -> tuple[Update[ClassStatistics], Metrics]:
        """Take the broadcast in, train on Eq. 11, answer with the model and the local hyper-knowledge; with the
        mean training loss, the mechanism's diagnostic ``knowledge_share``: the mean over the local steps of the
        share of the local objective the hyper-knowledge terms make (:data:`KNOWLEDGE_MOVES_LOSS`)."""
        self.receive_broadcast(client, message)
        shares: list[float] = []

        def loss_fn(step: Step, c: Client[Knowledge], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            loss, terms = self.objective(step, c, x, y)
            shares.append(knowledge_share(loss, terms))
            return loss

        loss = self.ctx.local_train(client, round_index, loss_fn)
        update = Update(client.cid, client.data.num_samples, client.model.state_dict(),
                        self.local_knowledge(client, round_index))
        return update, {"train_loss": loss, "knowledge_share": sum(shares) / max(len(shares), 1)}

    def local_knowledge(self, client: Client[Knowledge], round_index: int) -> ClassStatistics:
        """The client's hyper-knowledge (h̃_i^j, q̄_i^j, N_i^j) of the classes it shares (§3.1–§3.3);
        the classes it does not share get count 0 and zeros."""
        p = self.params
        x, y = client.data.x, client.data.y
        if p.hk_data == "loader":  # one pass of the shuffled train loader (§3.1 [C])
            idx = torch.cat(list(self.ctx.shuffled_pass(client.data.num_samples, "hk-batches", client.cid,
                                                        round_index)))
            x, y = x[idx], y[idx]
        stats = class_statistics(client.model, x, y, self.ctx.num_classes, p.temperature,
                                 soft=lambda logits: tempered_softmax(logits, p.temperature, p.softmax))
        shared = stats.present
        if p.nu_mode == "fraction":
            shared = shared & (stats.counts / stats.counts.sum() >= p.nu)
        gen = torch_stream(self.ctx.seed, "dp-noise", client.cid, round_index)
        num_classes, dim = stats.features.shape
        if p.noise == "paper":
            std = dp_noise_std(p.sigma, p.zeta, stats.counts.clamp(min=1).cpu()).unsqueeze(1)
            noise = std * torch.randn(num_classes, dim, generator=gen)
        elif p.noise == "const":  # one vector for all classes (§3.3 (d))
            noise = p.noise_std * torch.randn(1, dim, generator=gen)
        else:
            noise = torch.zeros(1, dim)
        rows = shared.unsqueeze(1)
        return ClassStatistics(torch.where(rows, stats.features + noise.to(stats.features.device), 0.0),
                               torch.where(rows, stats.soft, 0.0), torch.where(shared, stats.counts, 0))

    def sequential(self) -> bool:
        return self.params.hk_update == "client"

    def receive(self, round_index: int, server: Server[Knowledge], update: Update[ClassStatistics]) -> None:
        """``hk_update: client``: the code's ``dict.update`` with this client's knowledge, at once (§3.9)."""
        server.state.knowledge = last_writer_class_statistics([update.payload], server.state.knowledge)

    def aggregate(self, round_index: int, server: Server[Knowledge], updates: list[Update[ClassStatistics]]) -> Metrics:
        super().aggregate(round_index, server, updates)
        if self.sequential():  # already taken in, client by client
            return {}
        local = [u.payload for u in updates]
        if self.params.hk_agg == "weighted":  # Eq. 9, recomputed every round
            server.state.knowledge = aggregate_class_statistics(local, "counts")
        else:  # the code's dict.update over a random client order, persisting across rounds
            order = numpy_stream(self.ctx.seed, "hk-order", round_index).permutation(len(local))
            server.state.knowledge = last_writer_class_statistics([local[i] for i in order], server.state.knowledge)
        return {}

    def extra_metrics(self, server: Server[Knowledge], clients: list[Client[Knowledge]]) -> dict[str, float]:
        knowledge = server.state.knowledge
        return {"knowledge_classes": 0 if knowledge is None else int(knowledge.present.sum())}
