"""FedAL — Han, Shi, Huang, "FedAL: Black-Box Federated Knowledge Distillation Enabled by Adversarial
Learning", arXiv:2311.16584 (pipelines/fedal/NOTES.md §2). The first runnable FedAL: the paper has no code.

Black-box clients (each its own architecture) alternate two stages of τ = 5 iterations per round
(:mod:`bench.algorithms.knowledge_transfer`, Algorithm 1):

* local training on private batches, eq. (16)-(17):   V_loc = CE(y, f_n(x)) + r_loc(x),
  r_loc(x) = 𝒦(ψ(f_n(x; θ_n^{t,0}), E_LF) ‖ ψ(f_n(x; θ_n), E_LF)), θ_n^{t,0} frozen at the stage's start;
* global knowledge transfer on lockstep public batches, eq. (18)-(19):
  V_glo = 𝒦(p̄_{−n} ‖ ψ(f_n, E_KD)) + U_n + r_glo,   r_glo against θ_n^{t+½,0} frozen at the stage's start.

Per global iteration each client uploads its logits f_n(x) (K·B floats); the server (lines 12-16)
first takes one optimiser step of its discriminator h(·; w): K → 32 → 265 → N on the mean client-index
cross-entropy of ψ(f_m, E_adv), m = 1..N (= −𝒰, eq. (8), ascent on 𝒰 as eq. (15)), then answers each
client with the mean logits f̄ = (1/N) Σ_m f_m and ∂U_n/∂f_n computed with the *updated* discriminator
at the same logits (2K·B floats, §2.3), where U_n = −CE(n, h(ψ(f_n, E_adv))) = log softmax(h(·))_n,
batch mean (eq. (7), A3). The client's teacher is p̄_{−n} = ψ((N·f̄ − f_n)/(N−1), E_KD) (eq. (5)-(6));
its U_n enters through the surrogate Σ f_n ⊙ ∂U_n/∂f_n, whose θ-gradient is [∇_θ f_n]ᵀ ∂U_n/∂f_n =
∇_θ U_n (eq. (21)): the client back-propagates the server's vector, never holds the discriminator.
Clients minimise U_n (the saturating min-max form as written). Every term has weight 1 (§2.1).

Defaults (§2.5): τ = 5 (``training.local_steps``), E_adv = 2, E_KD = 1, η_d = 1e-4; the clients' Adam
at 1e-3, batch 32, is the run's ``training`` config (persistent per client, A9). Readings of the
paper's silences (§2.6), each an option with the recommended default:

* A1 ``teacher: others`` (eq. (5), leave-one-out) or ``all`` (Algorithm 1 line 15, f̄ itself);
* A2 ``teacher_average: logits`` (average the logits, then the softmax, eqs. (5)-(6)) or
  ``probabilities`` (the mean of ψ(f_m, E_KD), the equilibrium analysis' form);
* A5 ``lf_temperature`` E_LF = 1; ``snapshot_mode: train``: a frozen snapshot computes its outputs as the live
  model does (BatchNorm on the batch's statistics), so it *is* the model at the stage's start, θ_n^{t,0} or
  θ_n^{t+½,0}, and r_loc, r_glo are exactly 0 at a stage's first step (``eval``: the snapshot uses its BatchNorm
  running statistics, which makes the regulariser non-zero there with BatchNorm models); ``lf_first_round:
  true`` applies r_loc in round 1 against the random initialisation, as the literal algorithm does (false: skip
  it there);
* A6 one discriminator step per global iteration on 𝒰 = (1/N) Σ_n U_n over all N·B outputs;
* A7 ``disc_hidden: [32, 265]`` (265 as printed, probably meaning 256) and ``disc_activation: relu``
  (or ``leaky_relu``, slope 0.2), PyTorch's default initialisation: the paper's "two fully-connected layers
  with 32 and 265 neurons" read as two *hidden* layers, followed by a third linear layer to the N output
  logits the game needs (N: the federation's clients; a client's target is its id);
* A8 ``disc_optimizer: sgd``: plain gradient ascent on 𝒰 at η_d, as the text ("according to SGD") and
  line 13 read (``adam``: Adam at η_d);
* A9 the client optimiser: ``training.optimizer.persistent`` (true: one Adam per client for both stages
  and all rounds; false: re-created at every stage).

The ablations of Table VIII are configurations of this file: ``adv_weight: 0`` is FedMD-LF (no
discriminator is built; registered as ``fedmd_lf``), and ``adv_weight: 0`` with ``lf_local_weight:
lf_global_weight: 0`` and τ = 1 is FedMD as the FedAL paper runs it (``fedmd_fedal``, a different
protocol from the FedHKD paper's ``fedmd``). ``kd_weight`` scales the distillation term.

Mechanism diagnostics, per global iteration (averaged over the round's), from what the server holds anyway:
``disc_acc``, the share of the uploaded outputs whose client the discriminator names before its step (against
``disc_chance`` = 1/N), and ``adv_share``, the norm of the adversarial gradients it sends over that of the
distillation gradients at the same logits (:data:`ADVERSARIAL_MECHANISMS`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import AlgorithmParams
from bench.algorithms.knowledge_transfer import (KnowledgeTransfer, LogitsUpload, PublicOutputs, TransferParams,
                                                 logits_upload, stacked_logits)
from bench.engine.context import Context
from bench.engine.distillation import soft_target_kl
from bench.engine.loop import Loop, Step
from bench.engine.mechanisms import Mechanism
from bench.engine.protocol import Metrics
from bench.engine.snapshots import refresh_snapshot
from bench.engine.state import Client, NoState, Server
from bench.models import build_model


class AdversarialParams(AlgorithmParams):
    """The adversarial term and the server discriminator (FedAL; FedDF-AL reuses them)."""

    adv_weight: float = Field(1.0, ge=0, description="weight of U_n (0: no discriminator; FedMD-LF)")
    adv_temperature: float = Field(2.0, gt=0, description="E of the discriminator's input ψ(f_n, E) (paper: 2)")
    disc_hidden: tuple[int, int] = Field((32, 265), description="A7: the discriminator's two hidden widths")
    disc_activation: Literal["relu", "leaky_relu"] = Field("relu", description="A7: hidden activation")
    disc_optimizer: Literal["sgd", "adam"] = Field("sgd", description=(
        "A8: plain SGD ascent at η_d (the paper: \"according to SGD\", Alg. 1 line 13) or Adam at η_d"))
    disc_lr: float = Field(1e-4, gt=0, description="η_d")


class LessForgettingParams(AlgorithmParams):
    """The less-forgetting terms r_loc and r_glo (FedAL; FedDF-AL reuses them)."""

    lf_local_weight: float = Field(1.0, ge=0, description="weight of r_loc (0 with lf_global_weight 0: no LF)")
    lf_global_weight: float = Field(1.0, ge=0, description="weight of r_glo")
    lf_temperature: float = Field(1.0, gt=0, description="E of r_loc and r_glo (A5: unstated; 1)")
    lf_first_round: bool = Field(True, description="A5: r_loc in round 1, against the random initialisation")
    snapshot_mode: Literal["train", "eval"] = Field("train", description=(
        "A5: BatchNorm mode of the frozen snapshots: train (batch statistics, as the live model's forward: r = 0 at "
        "a stage's first step, the paper's θ^{t,0}, θ^{t+½,0}) or eval (the running statistics the model had)"))


class FedALParams(TransferParams, AdversarialParams, LessForgettingParams):
    kd_weight: float = Field(1.0, ge=0, description="weight of the distillation term 𝒦(p̄_{−n} ‖ p_n)")
    kd_temperature: float = Field(1.0, gt=0, description="E of the distillation KL (paper: 1)")
    teacher: Literal["others", "all"] = Field("others", description="A1: mean of the other clients' logits (eq. 5) "
                                                                      "or of all clients' (Alg. 1 line 15)")
    teacher_average: Literal["logits", "probabilities"] = Field(
        "logits", description="A2: average the logits then take ψ, or average ψ(f_m)")


# -- the loss terms (pure functions of tensors) -----------------------------------------------------


def lf_loss(logits: torch.Tensor, snapshot_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """r_loc or r_glo (eqs. 13-14): 𝒦(ψ(f_n(x; θ_frozen), E) ‖ ψ(f_n(x; θ), E)), batch mean, no E² factor (§1:
    the paper's 𝒦 has none; E = 1 there)."""
    return soft_target_kl(logits, F.softmax(snapshot_logits / temperature, dim=1), temperature)


def teacher_distribution(mean: torch.Tensor, own: torch.Tensor, clients: int, teacher: Literal["others", "all"],
                         average: Literal["logits", "probabilities"], temperature: float) -> torch.Tensor:
    """p̄_{−n} from what the server sends (``mean``: f̄, or the mean of ψ(f_m, E)) and the client's own
    ``own`` (its logits, or ψ(f_n, E)): the leave-one-out (N·mean − own)/(N − 1) (eq. 5) or the mean over
    all; logits are then put through ψ(·, E) (eq. 6)."""
    centre = (clients * mean - own) / (clients - 1) if teacher == "others" else mean
    return F.softmax(centre / temperature, dim=1) if average == "logits" else centre


def uses_local_lf(params: LessForgettingParams, round_index: int) -> bool:
    """Whether r_loc applies in ``round_index`` (A5: in round 1 too, unless ``lf_first_round`` is false)."""
    return params.lf_local_weight > 0 and (params.lf_first_round or round_index > 1)


def local_objective(model: nn.Module, snapshot: nn.Module | None, x: torch.Tensor, y: torch.Tensor,
                    params: LessForgettingParams, round_index: int) -> torch.Tensor:
    """V_loc = CE(y, f(x)) + r_loc(x) (eqs. 16-17), r_loc against the frozen ``snapshot`` where it applies."""
    _, logits = model(x)
    loss = F.cross_entropy(logits, y)
    if not uses_local_lf(params, round_index):
        return loss
    assert snapshot is not None
    with torch.no_grad():
        _, frozen = snapshot(x)
    return loss + params.lf_local_weight * lf_loss(logits, frozen, params.lf_temperature)


def discriminator_scores(discriminator: nn.Module, logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """h(ψ(f_n(x), E)) for ``logits`` N × B × K: the (N·B) × N client-index scores, client by client."""
    n, b, k = logits.shape
    return discriminator(F.softmax(logits / temperature, dim=2).reshape(n * b, k))[1]


def discriminator_loss(discriminator: nn.Module, logits: torch.Tensor, targets: torch.Tensor,
                       temperature: float) -> torch.Tensor:
    """−𝒰 (eq. 8): the mean over clients and samples of CE(n, h(ψ(f_n(x), E))), for ``logits`` N × B × K and
    ``targets`` the N clients' indices."""
    return F.cross_entropy(discriminator_scores(discriminator, logits, temperature),
                           targets.repeat_interleave(logits.shape[1]))


@torch.no_grad()
def client_recognition(discriminator: nn.Module, logits: torch.Tensor, targets: torch.Tensor,
                       temperature: float) -> float:
    """The diagnostic of the discriminator at work: the share of the N·B outputs whose client it names (chance:
    1/N), before its step on them."""
    scores = discriminator_scores(discriminator, logits, temperature)
    return float((scores.argmax(1) == targets.repeat_interleave(logits.shape[1])).double().mean())


def distillation_gradient(logits: torch.Tensor, target: torch.Tensor, temperature: float) -> torch.Tensor:
    """∂𝒦(target ‖ ψ(f, E))/∂f of the batch-mean KL (:func:`~bench.engine.distillation.soft_target_kl`) for
    ``logits`` (… × B × K): (ψ(f, E) − target)/(E·B)."""
    return (F.softmax(logits / temperature, dim=-1) - target) / (temperature * logits.shape[-2])


def adversarial_share(adversarial: torch.Tensor, distillation: torch.Tensor) -> float:
    """The diagnostic of the adversarial term at work: ‖the weighted ∂U_n/∂f_n‖ / ‖the weighted distillation
    gradient‖, Frobenius norms over every client's B × K logits (0: the term moves nothing)."""
    return float(torch.linalg.vector_norm(adversarial.double()) / torch.linalg.vector_norm(distillation.double()))


def payoffs(discriminator: nn.Module, logits: torch.Tensor, targets: torch.Tensor,
            temperature: float) -> torch.Tensor:
    """U_n (eq. 7) per client: the batch mean of log softmax(h(ψ(f_n(x), E)))_n, for ``logits`` N × B × K."""
    n, b, _ = logits.shape
    scores = discriminator_scores(discriminator, logits, temperature)
    picked = F.log_softmax(scores, dim=1).gather(1, targets.repeat_interleave(b).unsqueeze(1))
    return picked.view(n, b).mean(1)


def adversarial_gradients(discriminator: nn.Module, logits: torch.Tensor, targets: torch.Tensor,
                          temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """∂U_n/∂f_n for every client at once (N × B × K; U_n depends on f_n alone) and the U_n themselves,
    through the frozen discriminator: what the server sends back (eq. 21, line 16)."""
    at = logits.detach().requires_grad_(True)
    values = payoffs(discriminator, at, targets, temperature)
    (gradient,) = torch.autograd.grad(values.sum(), at)
    return gradient, values.detach()


def adversarial_term(logits: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """The surrogate Σ f_n ⊙ ∂U_n/∂f_n: its gradient in θ_n is [∇_θ f_n]ᵀ ∂U_n/∂f_n = ∇_θ U_n (eq. 21)."""
    return (logits * gradient).sum()


ADVERSARIAL_MECHANISMS = (
    Mechanism("the discriminator tells the clients apart", "disc_acc", "disc_chance", "above", 0.25, relative=True,
              why="a discriminator at chance (1/N) sends a gradient that carries nothing about the clients; a quarter "
                  "above chance is the least we read as telling them apart"),
    Mechanism("the adversarial gradient moves the clients", "adv_share", 0.0, "above", 0.1,
              why="the adversarial gradient at a client's logits below a tenth of its distillation gradient's norm "
                  "leaves the distillation to do the moving"))


# -- state and messages -----------------------------------------------------------------------------


@dataclass
class FedALClient(NoState):
    """The client's frozen snapshot (θ_n^{t,0} in the local stage, θ_n^{t+½,0} in the global stage)."""

    snapshot: nn.Module | None = None


@dataclass
class DiscriminatorState(NoState):
    """The server's discriminator h(·; w) and its own optimiser (None without the adversarial term)."""

    discriminator: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None


@dataclass(frozen=True)
class TeacherReply:
    """What the server sends client n: the mean over the round's ``clients`` clients (f̄, or of ψ(f_m, E_KD))
    and ∂U_n/∂f_n (None without the adversarial term)."""

    mean: torch.Tensor
    adversarial: torch.Tensor | None
    clients: int


def discriminator_state(ctx: Context, params: AdversarialParams, players: int) -> DiscriminatorState:
    """A new discriminator K → hidden → ``players`` (stream ``("init", "discriminator")``) and its optimiser
    at η_d; empty without the adversarial term."""
    if params.adv_weight == 0:
        return DiscriminatorState()
    discriminator = build_model("fedal_discriminator", (ctx.num_classes,), players, seed=ctx.seed,
                                key=("init", "discriminator"), hidden=params.disc_hidden,
                                activation=params.disc_activation).to(ctx.device)
    optimizer: torch.optim.Optimizer = (torch.optim.Adam(discriminator.parameters(), lr=params.disc_lr)
                                        if params.disc_optimizer == "adam"
                                        else torch.optim.SGD(discriminator.parameters(), lr=params.disc_lr))
    return DiscriminatorState(discriminator, optimizer)


def discriminator_round(state: DiscriminatorState, round_index: int, logits: torch.Tensor, targets: torch.Tensor,
                        temperature: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The server's part of one global iteration (Algorithm 1 lines 13, 16): one optimiser step of the
    discriminator on −𝒰 at ``logits`` (N × B × K; w^{t,i} → w^{t,i+1}, through a :class:`Loop`), then
    ∂U_n/∂f_n and U_n with the updated discriminator at the same logits; returns (gradients, U_n, −𝒰)."""
    discriminator, optimizer = state.discriminator, state.optimizer
    assert discriminator is not None and optimizer is not None
    discriminator.train()
    loss = Loop(optimizer, list(discriminator.parameters()), round_index, "discriminator").run(
        [logits], lambda step, z: discriminator_loss(discriminator, z, targets, temperature))
    gradients, values = adversarial_gradients(discriminator, logits, targets, temperature)
    return gradients, values, loss


@register_algorithm("fedal")
class FedAL(KnowledgeTransfer[FedALClient, DiscriminatorState, LogitsUpload, TeacherReply]):
    """Up: each client's logits on the public batch; down: the mean and the client's ∂U_n/∂f_n."""

    Params = FedALParams
    params: FedALParams
    ClientState = FedALClient
    ServerState = DiscriminatorState

    @classmethod
    def mechanisms(cls, params: AlgorithmParams) -> tuple[Mechanism, ...]:
        """Adversarial learning (eqs. 7-8, 15): the discriminator must tell the clients apart better than chance
        for its gradient to carry anything, and that gradient must move the clients next to the distillation term;
        none without the term (``adv_weight: 0``, FedMD-LF)."""
        assert isinstance(params, FedALParams)  # validated by cls.Params (bench/suites/mechanisms.py)
        return ADVERSARIAL_MECHANISMS if params.adv_weight > 0 else ()

    def min_clients(self) -> int:
        return 2 if self.params.teacher == "others" else 1

    def init_server_state(self, model: nn.Module | None) -> DiscriminatorState:
        return discriminator_state(self.ctx, self.params, self.ctx.config.partition.num_clients)

    # -- local training -------------------------------------------------------------------------

    def before_local(self, round_index: int, client: Client[FedALClient]) -> None:
        if uses_local_lf(self.params, round_index):  # θ_n^{t,0}
            client.state.snapshot = refresh_snapshot(client.state.snapshot, client.model, self.params.snapshot_mode)

    def local_loss(self, step: Step, client: Client[FedALClient], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return local_objective(client.model, client.state.snapshot, x, y, self.params, step.round)

    # -- global knowledge transfer --------------------------------------------------------------

    def start_public(self, round_index: int, client: Client[FedALClient]) -> Loop:
        if self.params.lf_global_weight > 0:  # θ_n^{t+½,0}
            client.state.snapshot = refresh_snapshot(client.state.snapshot, client.model, self.params.snapshot_mode)
        return super().start_public(round_index, client)

    def upload(self, client: Client[FedALClient], outputs: PublicOutputs) -> LogitsUpload:
        return logits_upload(outputs)

    def serve(self, round_index: int, server: Server[DiscriminatorState], cids: list[int], x: torch.Tensor,
              uploads: list[LogitsUpload]) -> tuple[list[TeacherReply], Metrics]:
        p = self.params
        logits = stacked_logits(uploads)
        mean = (logits if p.teacher_average == "logits" else F.softmax(logits / p.kd_temperature, dim=2)).mean(0)
        state = server.state
        if state.discriminator is None:
            return [TeacherReply(mean, None, len(cids)) for _ in cids], {}
        targets = torch.tensor(cids, device=logits.device)  # a client's class is its id
        recognised = client_recognition(state.discriminator, logits, targets, p.adv_temperature)
        gradients, values, disc_loss = discriminator_round(state, round_index, logits, targets, p.adv_temperature)
        replies = [TeacherReply(mean, g, len(cids)) for g in gradients]
        return replies, {"disc_loss": disc_loss, "adv_payoff": float(values.mean()), "disc_acc": recognised,
                         "disc_chance": 1 / len(cids), "adv_share": self.adversarial_share(logits, replies)}

    def adversarial_share(self, logits: torch.Tensor, replies: list[TeacherReply]) -> float:
        """:func:`adversarial_share` of what the server sends: every client's adversarial gradient against the gradient
        of its distillation term towards p̄_{−n}, both at its uploaded logits and with their weights."""
        p = self.params
        own = logits if p.teacher_average == "logits" else F.softmax(logits / p.kd_temperature, dim=2)
        kd = torch.stack([p.kd_weight * distillation_gradient(
            z, teacher_distribution(r.mean, o, r.clients, p.teacher, p.teacher_average, p.kd_temperature),
            p.kd_temperature) for z, o, r in zip(logits, own, replies)])
        adversarial = torch.stack([p.adv_weight * r.adversarial for r in replies if r.adversarial is not None])
        return adversarial_share(adversarial, kd)

    def transfer_loss(self, step: Step, client: Client[FedALClient], x: torch.Tensor, outputs: PublicOutputs,
                      reply: TeacherReply) -> torch.Tensor:
        p = self.params
        logits = outputs.logits
        own = logits.detach() if p.teacher_average == "logits" else F.softmax(logits.detach() / p.kd_temperature, 1)
        target = teacher_distribution(reply.mean, own, reply.clients, p.teacher, p.teacher_average, p.kd_temperature)
        loss = p.kd_weight * soft_target_kl(logits, target, p.kd_temperature)
        if p.lf_global_weight > 0:
            assert client.state.snapshot is not None
            with torch.no_grad():
                _, frozen = client.state.snapshot(x)
            loss = loss + p.lf_global_weight * lf_loss(logits, frozen, p.lf_temperature)
        if reply.adversarial is not None and p.adv_weight > 0:
            loss = loss + p.adv_weight * adversarial_term(logits, reply.adversarial)
        return loss


class FedMDLFParams(FedALParams):
    adv_weight: float = Field(0.0, ge=0, description="FedMD-LF: no adversarial term")


@register_algorithm("fedmd_lf")
class FedMDLF(FedAL):
    """FedMD-LF (Table VIII): FedAL without the adversarial term (``adv_weight: 0``: no discriminator),
    τ = 5 (A17) — the same code as ``fedal`` with that weight at 0."""

    Params = FedMDLFParams
