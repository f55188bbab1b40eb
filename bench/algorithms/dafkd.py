"""DaFKD — Wang, Li, Xu, Li, Zhan, Zeng, "DaFKD: Domain-aware Federated Knowledge Distillation", CVPR 2023
(pipelines/dafkd/NOTES.md).

Client k (Algorithm 1 lines 16-26, §1.3-§1.4) receives the global extractor φ and classifier head h_c and
the generator θ^g; its domain head h_d^k stays its own (a personal parameter: never averaged, never
overwritten; every client starts from the common initial head, A10, A21). On each mini-batch (x, y),
with x̂ = G_k(z), z ~ N(0, I) (B fake samples, detached), f = σ(h_d(φ(·))):

    (9)  min_{φ, h_c, h_d}  CE(h_c(φ(x)), y) + L_adv
    (2)  L_adv = −[Σ_x log f(x) + Σ_x̂ log(1 − f(x̂))] / (|x| + |x̂|)
    (3)  min_{G_k}  −mean_z log f(G_k(z))          (non-saturating, [C], A7)

then one generator step on fresh noise (the discriminator's gradients are not kept), and uploads φ, h_c,
h_d^k and G_k. The real and fake batches pass the extractor separately (§7, BatchNorm; A29:
``real_fake_forward: joint`` passes them as one batch).

Server: ŵ = Σ ω_k w_k (Eq. 6), θ^g = Σ ω_k θ_k^g (Eq. 4), ω_k = n_k/Σn (A12; ``weighting: uniform`` 1/K_t),
BatchNorm buffers included; D̂^g = ``distill_batches`` batches of G(z) with fresh noise, G in train mode
(A9: the aggregated θ_{t+1}^g, A11); then with the clients' models in eval mode (A11)

    (7)  α̂_{k,i} = f_k(x_i) / Σ_{j∈S_t} f_j(x_i)      computed as softmax_k(logsigmoid(h_d^k(φ_k(x_i)))) (§7)
    (8)  min over ŵ's φ, h_c:  τ²·mean_i KL(Σ_k α̂_{k,i} softmax(z_k(x_i)/τ) ‖ softmax(s(x_i)/τ))

for ``distill_epochs`` passes over D̂^g (Adam, lr 1e-2, the student in train mode), τ = 20 ([C] script, A4),
1,280 samples and 1,600 steps per round (A5); round 1 has no distillation (the generator is untrained, A25).

Variants (Table 3, §1.5): ``correlation: uniform`` is DaFKD^{no-correlation} (α̂ = 1/K_t, everything else
unchanged); ``sharing: separate`` is DaFKD^{no-sharing}: the classifier trains on CE alone and a separate
discriminator D_k (``dafkd_discriminator``, the official ``model/gan.py``; persistent per client, uploaded
in full, common initial weights) plays Eqs. 2-3 against G_k and gives α̂. Other readings, each a
parameter: the conditional generator G-cond fed a random label (``generator: cond``, A6), the literal
saturating Eq. 3 (``gen_loss: saturating``, A7), distillation without the first-round skip
(``skip_first_distill: false``), and the BatchNorm statistics the distilled model carries, the rule shared with
FedDF, FedFTG and FedGen (``student_bn_stats``, bench/algorithms/server_bn.py, A27): by default, as in §1.7.12 and
A11, as the student's train-mode forwards on D̂^g left them — on the digits proxy, whose generated samples are far
from the data, that alone costs the distilled model more than its updates gain; ``clients`` re-estimates them on the
clients' training data, the recommended reading (pipelines/dafkd/README.md). E counts epochs or steps as the run's
``training`` section says (A1).

``mode: code`` switches to the released code's behaviour (§1.7, §1.8): the twelve switches of :class:`DaFKDParams`,
each with its paper and code value; the code's local update is :class:`ReleasedLocalGAN`, apart from the paper's
(:class:`LocalGAN`). Among them: the distilled model evaluated with test-set BatchNorm statistics (§1.7.17,
``student_bn_stats: test`` — test data leaks into the evaluation), the broadcast generator that of the client that
trained last whenever the server distils (§1.7.18, ``generator_broadcast``; with ``local_gan: early`` it takes no
step after round 5), and one discriminator head passed from client to client in a seeded random order (§1.7.3,
``head: shared``). Every client starts from the round's global model, as the code does on CUDA (§1.7.19); its CPU
behaviour (each client starting from the previous client's model) is not reproduced. The code's hyperparameters (lr 1e-4 local and distillation, no weight decay on the
classifier, 1e-4 on the generator) are the run's: the suite's code row sets them. The code's other protocol differences — its
Dirichlet-partitioned, ``drop_last`` test loaders (§1.7.15), binarised MNIST-type images (A15), the
2-D noise bug (§1.7.16) — are not reproduced. Every run logs the diagnostics of §6 R10 and §7: the
accuracy on the test set of the α̂-weighted and of the uniform ensemble of the round's client models
(``ensemble_acc``, ``uniform_ensemble_acc``; α̂ from the clients' discriminators on the test images) and
of ŵ before distillation (``pre_kd_acc``); per round the mean entropy and maximum of α̂ on D̂^g (and log K_t,
``alpha_entropy_uniform``, its value when uniform), how many classes the teacher finds in D̂^g (``gen_coverage``,
:func:`class_coverage`), the mean discriminator outputs on real and fake samples, the generator and distillation
losses. The first two are the diagnostics of its mechanisms (:data:`DOMAIN_WEIGHTS`, :data:`GENERATED_CLASSES`).
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn
from torch.func import functional_call

from bench.algorithms import register_algorithm
from bench.algorithms.base import AlgorithmParams
from bench.algorithms.readings import ModeParams, reading
from bench.algorithms.server_bn import BN_RULE_DOC, BNRule, ServerBNParams, ServerBNRule
from bench.engine.aggregate import copy_state, load_state, weighted_average
from bench.engine.distillation import soft_target_kl
from bench.engine.evaluation import Evaluation
from bench.engine.loop import Loop, Step
from bench.engine.mechanisms import Mechanism
from bench.engine.messages import Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server
from bench.engine.streams import batches_per_pass
from bench.errors import BenchError
from bench.models import build_model

HEAD = "discriminator."  # the state-dict prefix of the domain head h_d on dafkd_resnet11
EARLY_D_ROUNDS, EARLY_G_ROUNDS, EARLY_EPOCHS = 3, 5, 5  # §1.7.2: round_idx < 3 / < 5 and epoch < 5, 0-based
ENSEMBLE_ACC = Evaluation("ensemble_acc", "method", "global_test")
UNIFORM_ENSEMBLE_ACC = Evaluation("uniform_ensemble_acc", "method", "global_test")
PRE_KD_ACC = Evaluation("pre_kd_acc", "method", "global_test")

class DaFKDParams(ModeParams, ServerBNParams):
    """DaFKD's hyperparameters (§1.4 profile P, A4, A5), the variants of Table 3, and the paper's and the released
    code's readings (§1.7)."""

    correlation: Literal["discriminator", "uniform"] = Field(
        "discriminator", description="α̂ from the domain discriminators (Eq. 7), or 1/K_t (DaFKD^no-correlation)")
    sharing: Literal["shared", "separate"] = Field(
        "shared", description="discriminator head on the classifier's extractor, or a separate network "
                              "(DaFKD^no-sharing)")
    generator: Literal["dcgan", "cond"] = Field("dcgan", description="G-DCGAN, or G-cond fed a random label (A6)")
    noise_dim: int = Field(100, ge=1, description="d, the generator's noise dimension")
    generator_width: int = Field(64, ge=1, description="the DCGAN generator's smallest hidden width (64 as printed)")
    generator_lr: float = Field(1e-3, gt=0)
    generator_betas: tuple[float, float] = (0.5, 0.99)
    generator_weight_decay: float = Field(1e-3, ge=0)
    generator_amsgrad: bool = True
    gen_loss: Literal["non_saturating", "saturating"] = Field("non_saturating", description="Eq. 3 as [C], or literal")
    real_fake_forward: Literal["separate", "joint"] = Field(
        "separate", exclude_if=lambda v: v == "separate",
        description="how the real and the generated batch pass the network that gives ℓ (the shared extractor, or "
        "D_k) in the client's steps: in separate forwards (§7, as the released code does; in train mode each batch is "
        "normalised by its own BatchNorm statistics) or as one batch (shared statistics; with the shared extractor "
        "the classifier's forward then includes the generated samples). The paper is silent (A29). Code mode's "
        "gradient-penalty interpolates and its step-less generator forward pass alone either way. Left out of a "
        "resolved config at its default, so the configs pinned before it existed stay the same")
    temperature: float = Field(20.0, gt=0, description="τ of the distillation (A4)")
    distill_lr: float = Field(1e-2, gt=0, description="Adam learning rate of the server distillation")
    distill_batches: int = Field(40, ge=1, description="generated batches per round (A5: 40 × 32 = 1,280 samples)")
    distill_epochs: int = Field(40, ge=1, description="passes over them per round (A5: 1,600 steps)")
    distill_batch_size: int | None = Field(None, ge=1, description="generated samples per batch (None: training.batch_size)")
    skip_first_distill: bool = Field(True, description="no distillation in round 1 (A25)")
    local_gan: Literal["always", "early"] = reading(
        "always", "early", "§1.7.2: the adversarial term and the generator step in every batch; or the adversarial "
        "term only in rounds 1-3 and the generator step only in rounds 1-5, both only in local epochs 1-5 (the "
        "generator's forward still runs)")
    adv_loss: Literal["joint", "separate"] = reading(
        "joint", "separate", "§1.7.4: Eq. 2's one mean over real and fake; or BCE(real) + BCE(fake)")
    gradient_penalty: float = reading(
        0.0, 0.3, "§1.7.4: λ of the code's penalty λ·mean((‖∇_x̃ f(x̃)‖₂ over dim 1 − 1)²), x̃ = u·x + (1−u)·x̂ "
        "(0: none)", ge=0)
    head: Literal["personal", "shared"] = reading(
        "personal", "shared", "§1.7.3, A10: each client's own domain head; or one head that each client continues in "
        "turn (the clients train one after another in a seeded order)")
    distill_gen: Literal["post_round", "pre_round"] = reading(
        "post_round", "pre_round", "§1.7.6, A9: D̂^g from the aggregated θ_{t+1}^g; or from the round's θ_t^g")
    teacher: Literal["probabilities", "logits"] = reading(
        "probabilities", "logits", "§1.7.8, A8: Σ α̂ softmax(z/τ); or softmax(Σ α̂ z / τ)")
    kd_reduction: Literal["batchmean", "mean"] = reading(
        "batchmean", "mean", "§1.7.8: the KL summed over classes; or KLDivLoss 'mean' (÷ C too)")
    distill_schedule: Literal["constant", "plateau"] = reading(
        "constant", "plateau", "§1.7.9: a constant distillation learning rate; or ReduceLROnPlateau(0.2, patience 2) "
        "on the running mean distillation loss, per distillation epoch")
    local_schedule: Literal["constant", "plateau"] = reading(
        "constant", "plateau", "§1.6: a constant client learning rate; or the same scheduler on the client's "
        "optimiser between local epochs, on the running mean of each epoch's last-batch cross-entropy (as coded)")
    server_bn: Literal["eval", "train"] = reading(
        "eval", "train", "§1.7.12, A11: the client models in eval mode for α̂ and the teacher; or in train mode "
        "(batch statistics; their buffers untouched)")
    student_bn_stats: BNRule = reading(
        "distilled", "test", "§1.7.17, A11, A27: " + BN_RULE_DOC + "; the code's: test-set passes after distillation")
    generator_broadcast: Literal["averaged", "last_client"] = reading(
        "averaged", "last_client", "§1.7.18: θ^g is Eq. 4's average every round; or, in every round the server "
        "distils, the generator of the client that trained last (the code's one trainer object)", omitted=("paper",))

    @model_validator(mode="after")
    def _one_head_needs_the_shared_extractor(self) -> DaFKDParams:
        if self.head == "shared" and self.sharing == "separate":
            raise ValueError("head: shared (the code's one discriminator head) needs sharing: shared; "
                             "set head: personal for DaFKD^no-sharing")
        return self


# -- the losses (each checked by hand in tests/test_dafkd.py) -------------------------------------------


def generator_model(generator: Literal["dcgan", "cond"], width: int) -> tuple[str, dict[str, int]]:
    """The registered model G_k is built as, with its keyword arguments (``generator``, ``generator_width``; the
    noise dimension apart)."""
    return ("dcgan_generator", {"width": width}) if generator == "dcgan" else ("cond_image_generator", {})


def adversarial_loss(real_logit: torch.Tensor, fake_logit: torch.Tensor,
                     form: Literal["joint", "separate"]) -> torch.Tensor:
    """Eq. 2 from discriminator logits ℓ (f = σ(ℓ); −log σ(ℓ) = softplus(−ℓ), −log(1 − σ(ℓ)) = softplus(ℓ)):
    ``joint`` −[Σ log f(x) + Σ log(1 − f(x̂))] / (|x| + |x̂|); ``separate`` (the code's two BCE means)
    −mean log f(x) − mean log(1 − f(x̂))."""
    real, fake = F.softplus(-real_logit), F.softplus(fake_logit)
    if form == "joint":
        return (real.sum() + fake.sum()) / (len(real) + len(fake))
    return real.mean() + fake.mean()


def generator_loss(fake_logit: torch.Tensor, form: Literal["non_saturating", "saturating"]) -> torch.Tensor:
    """Eq. 3 for G_k to minimise: ``non_saturating`` −mean log f(G(z)) ([C]); ``saturating`` mean log(1 − f(G(z)))
    (the literal max of −log(1 − f))."""
    if form == "non_saturating":
        return F.softplus(-fake_logit).mean()
    return -F.softplus(fake_logit).mean()


def gradient_penalty(discriminator: Callable[[torch.Tensor], torch.Tensor], real: torch.Tensor, fake: torch.Tensor,
                     mix: torch.Tensor, weight: float) -> torch.Tensor:
    """The released code's penalty (§1.7.4): λ·mean((‖∇_x̃ f(x̃)‖₂ − 1)²) on x̃ = u·x + (1 − u)·x̂, u = ``mix``
    (one per sample), the norm taken over dimension 1 (the channels) only, as coded; f = σ(ℓ)."""
    u = mix.view(-1, *([1] * (real.dim() - 1)))
    mixed = (u * real + (1 - u) * fake).requires_grad_(True)
    out = torch.sigmoid(discriminator(mixed))
    grads = torch.autograd.grad(out, mixed, torch.ones_like(out), create_graph=True)[0]
    return weight * ((grads.norm(2, dim=1) - 1) ** 2).mean()


def correlation_weights(domain_logits: torch.Tensor) -> torch.Tensor:
    """Eq. 7: α̂_{k,i} = f_k(x_i) / Σ_j f_j(x_i) from the (clients × samples) discriminator logits, computed as
    softmax over clients of logsigmoid (exact, and no 0/0 when every f underflows, §7)."""
    return torch.softmax(F.logsigmoid(domain_logits), dim=0)


def uniform_weights(domain_logits: torch.Tensor) -> torch.Tensor:
    """DaFKD^{no-correlation}: α̂_{k,i} = 1/K_t, shaped as :func:`correlation_weights`' result."""
    return torch.full_like(domain_logits, 1.0 / len(domain_logits))


def ensemble_teacher(logits: torch.Tensor, weights: torch.Tensor, temperature: float,
                     form: Literal["probabilities", "logits"]) -> torch.Tensor:
    """The teacher of Eq. 8 from the (clients × samples × classes) logits and (clients × samples) α̂:
    ``probabilities`` Σ_k α̂_{k,i} softmax(z_k(x_i)/τ) (App. B); ``logits`` softmax(Σ_k α̂_{k,i} z_k(x_i) / τ) ([C])."""
    if form == "probabilities":
        return (weights.unsqueeze(2) * torch.softmax(logits / temperature, dim=2)).sum(0)
    return torch.softmax((weights.unsqueeze(2) * logits).sum(0) / temperature, dim=1)


def distillation_loss(student_logits: torch.Tensor, teacher: torch.Tensor, temperature: float,
                      reduction: Literal["batchmean", "mean"]) -> torch.Tensor:
    """Eq. 8: τ²·KL(teacher ‖ softmax(s/τ)), summed over classes and averaged over samples (``batchmean``), or
    averaged over samples and classes (``mean``, KLDivLoss's default in [C])."""
    kl = soft_target_kl(student_logits, teacher, temperature)
    return temperature ** 2 * (kl if reduction == "batchmean" else kl / student_logits.shape[1])


def weight_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean over samples of the entropy of α̂_{·,i} (log K_t: the weighting is inert, §7)."""
    return -(weights * torch.log(weights.clamp_min(1e-30))).sum(0).mean()


def class_coverage(teacher: torch.Tensor) -> float:
    """How many classes the generated samples span, by the teacher's (samples × classes) verdicts: the effective
    number of classes exp(H) of the histogram of its argmax, as (exp(H) − 1)/(C − 1): 0 when every sample is one
    class (the generator collapsed, or carries no class), 1 when the classes are equally often named."""
    shares = torch.bincount(teacher.argmax(1), minlength=teacher.shape[1]).double() / len(teacher)
    entropy = -(shares[shares > 0] * shares[shares > 0].log()).sum()
    return float((entropy.exp() - 1) / (teacher.shape[1] - 1))


DOMAIN_WEIGHTS = Mechanism(
    "α̂ weights the clients by domain", "alpha_entropy", "alpha_entropy_uniform", "below", 0.05, relative=True,
    why="α̂'s entropy at log K_t is the uniform weighting of DaFKD^no-correlation; 5 % below it is the least we read "
        "as weights that tell the samples' domains apart",
    beside=("d_real", "d_fake"))  # discriminators that call real and generated samples alike (0.5) give uniform α̂
GENERATED_CLASSES = Mechanism(
    "the generated samples span the classes", "gen_coverage", 0.0, "above", 0.5,
    why="distilling on samples the teacher assigns to one class transfers nothing about the others; an effective "
        "number of classes over half the way from one to all is the least we read as a generator that carries them")


# -- state and messages -----------------------------------------------------------------------------------


@dataclass
class DaFKDServer(NoState):
    """The server's generator θ^g; the code's one discriminator head (``head: shared``); the last round's
    clients S_t and ŵ before distillation, which the diagnostics evaluate; the clients whose updates it took in
    one by one this round (``head: shared``), in that order."""

    generator: nn.Module | None = None
    head: dict[str, torch.Tensor] | None = None
    selected: list[int] = field(default_factory=list)
    averaged: dict[str, torch.Tensor] | None = None
    taken_in: list[int] = field(default_factory=list)


@dataclass
class DaFKDClient(NoState):
    """DaFKD^{no-sharing}: the client's own discriminator D_k, kept across rounds (its optimiser is the
    client's, over the classifier's and D_k's parameters)."""

    discriminator: nn.Module | None = None


@dataclass(frozen=True)
class GeneratorBroadcast:
    """What a client receives besides φ and h_c: the generator θ^g, and the code's one discriminator head
    (``head: shared``; None: the client keeps its own h_d^k)."""

    generator: nn.Module
    head: dict[str, torch.Tensor] | None


@dataclass(frozen=True)
class DomainUpload:
    """What a client sends besides φ, h_c and h_d^k: G_k, D_k (DaFKD^{no-sharing}), and the diagnostics of its
    local training: the mean discriminator outputs on real and fake samples and the mean generator loss (NaN: the
    generator took no step)."""

    generator: dict[str, torch.Tensor]
    discriminator: dict[str, torch.Tensor] | None
    d_real: float
    d_fake: float
    g_loss: float


class DomainEnsemble(nn.Module):
    """The round's client models as one classifier (§6 R10): per test image, α̂ from each client's
    discriminator (or 1/K_t), combined as the distillation teacher; ``forward`` returns (α̂ as samples ×
    clients, scores). Every member is evaluated in eval mode."""

    def __init__(self, members: list[nn.Module], discriminators: list[nn.Module] | None, weighting: Callable,
                 temperature: float, form: Literal["probabilities", "logits"]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        self.discriminators = None if discriminators is None else nn.ModuleList(discriminators)
        self.weighting, self.temperature, self.form = weighting, temperature, form
        self.eval()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, domain = [], []
        for k, member in enumerate(self.members):
            features, out = member(x)
            logits.append(out)
            domain.append(member.domain_logit(features) if self.discriminators is None  # type: ignore[operator]  # torch: Module attributes are Tensor | Module
                          else self.discriminators[k](x)[1].squeeze(1))
        weights = self.weighting(torch.stack(domain))
        return weights.T, ensemble_teacher(torch.stack(logits), weights, self.temperature, self.form)


# -- a client's local training (Algorithm 1, lines 19-24) -------------------------------------------------


class LocalGAN:
    """One client's local update as the paper gives it: for each local epoch, on each mini-batch (x, y), one step
    of φ, h_c and h_d on Eq. 9 against B fake samples x̂ = G_k(z) (z from the stream ``("dafkd-fake", k, t)``),
    then one step of G_k on Eq. 3 on fresh noise (stream ``("dafkd-gen", k, t)``). The classifier's steps use the
    client's optimiser and clipping; G_k an Adam of its own, fresh each round."""

    def __init__(self, method: DaFKD, client: Client[DaFKDClient], round_index: int) -> None:
        p, ctx = method.params, method.ctx
        self.params, self.round, self.sample = p, round_index, method.sample
        self.generator = method.local_generator.train()
        self.model, self.separate = client.model, client.state.discriminator
        trained = [*self.model.parameters(), *(self.separate.parameters() if self.separate is not None else ())]
        if self.separate is not None:
            self.separate.train()
            if client.optimizer is None:  # one Adam over the classifier and D_k: the same as one each
                client.optimizer = ctx.make_optimizer(trained)
        self.optimizer = ctx.client_optimizer(client, round_index)
        self.model.train()
        g_optimizer = torch.optim.Adam(self.generator.parameters(), lr=p.generator_lr, betas=p.generator_betas,
                                       weight_decay=p.generator_weight_decay, amsgrad=p.generator_amsgrad)
        self.classifier_loop = Loop(self.optimizer, trained, round_index, client.cid, ctx.config.training.grad_clip,
                                    ctx.stream("dafkd-fake", client.cid, round_index), guard=ctx.loss_guard)
        self.generator_loop = Loop(g_optimizer, list(self.generator.parameters()), round_index, "generator",
                                   rng=ctx.stream("dafkd-gen", client.cid, round_index), backward_inputs=True)
        self.losses: list[float] = []
        self.g_losses: list[float] = []
        self.real_out: list[torch.Tensor] = []
        self.fake_out: list[torch.Tensor] = []

    def train(self, epochs: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
        """Algorithm 1 lines 19-24 over the local epochs' mini-batches."""
        for epoch, batches in enumerate(epochs):
            for batch in batches:
                self.losses.append(self.classifier_loop.run(
                    [batch], lambda step, b: self.classifier_loss(step, epoch, *b)))
                if self.generator_trains(epoch):
                    self.g_losses.append(self.generator_loop.run([batch], self.generator_objective))
            if epoch < len(epochs) - 1:
                self.between_epochs()

    def domain_logit(self, x: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """ℓ with f = σ(ℓ): h_d on φ(x) (the shared extractor's ``features`` when given), or D_k(x)."""
        if self.separate is not None:
            return self.separate(x)[1].squeeze(1)
        return self.model.domain_logit(self.model(x)[0] if features is None else features)  # type: ignore[operator]  # torch: Module attributes are Tensor | Module

    def real_and_fake(self, x: torch.Tensor, fake: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """h_c(φ(x)), ℓ(x) and ℓ(x̂). The two batches pass the network that gives ℓ (the shared extractor, or D_k) in
        separate forwards, or (``real_fake_forward: joint``) as one batch, so that train-mode BatchNorm normalises
        them with the same statistics; a classifier that gives no ℓ (DaFKD^no-sharing's) sees x alone."""
        if self.params.real_fake_forward == "separate":
            features, logits = self.model(x)
            return logits, self.domain_logit(x, features), self.domain_logit(fake)
        both, n = torch.cat([x, fake]), len(x)
        if self.separate is not None:
            domain = self.domain_logit(both)
            return self.model(x)[1], domain[:n], domain[n:]
        features, logits = self.model(both)
        domain = self.domain_logit(both, features)
        return logits[:n], domain[:n], domain[n:]

    def classifier_loss(self, step: Step, epoch: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Eq. 9: CE(h_c(φ(x)), y) + L_adv (Eq. 2) on x and x̂ = G_k(z) (detached)."""
        assert step.rng is not None
        with torch.no_grad():
            fake = self.sample(self.generator, len(x), step.rng)
        logits, real_logit, fake_logit = self.real_and_fake(x, fake)
        self.record(real_logit, fake_logit)
        return F.cross_entropy(logits, y) + adversarial_loss(real_logit, fake_logit, self.params.adv_loss)

    def generator_objective(self, step: Step, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Eq. 3 on B fresh fake samples (``real_fake_forward: joint``: passed with the real batch as one)."""
        assert step.rng is not None
        fake = self.sample(self.generator, len(batch[1]), step.rng)
        if self.params.real_fake_forward == "separate":
            return generator_loss(self.domain_logit(fake), self.params.gen_loss)
        x = batch[0]
        return generator_loss(self.domain_logit(torch.cat([x, fake]))[len(x):], self.params.gen_loss)

    def generator_trains(self, epoch: int) -> bool:
        """Whether G_k takes its step after each classifier step of ``epoch``: always, in the paper."""
        return True

    def between_epochs(self) -> None:
        """Between two local epochs: nothing, in the paper."""

    def record(self, real_logit: torch.Tensor, fake_logit: torch.Tensor) -> None:
        self.real_out.append(torch.sigmoid(real_logit.detach()).mean())
        self.fake_out.append(torch.sigmoid(fake_logit.detach()).mean())

    def upload(self) -> DomainUpload:
        """G_k, D_k and the diagnostics."""
        return DomainUpload({k: v.detach().clone() for k, v in self.generator.state_dict().items()},
                            None if self.separate is None else self.separate.state_dict(),
                            float(torch.stack(self.real_out).mean()), float(torch.stack(self.fake_out).mean()),
                            sum(self.g_losses) / len(self.g_losses) if self.g_losses else math.nan)

    @property
    def loss(self) -> float:
        """The mean classifier loss over the update's steps."""
        return sum(self.losses) / max(len(self.losses), 1)


class ReleasedLocalGAN(LocalGAN):
    """The released code's local update (§1.7.2, §1.7.4, §1.6), each behaviour at its own switch:
    ``local_gan: early`` trains adversarially only in rounds 1-3 and steps G_k only in rounds 1-5, both only in local
    epochs 1-5 (the generator's forward still runs when it takes no step, moving its BatchNorm statistics and the
    extractor's, here before the classifier step's update); ``gradient_penalty`` λ > 0 adds the code's penalty on
    interpolates (computed in every step, added with the adversarial term); ``local_schedule: plateau`` steps a
    ReduceLROnPlateau(0.2, patience 2) on the client's optimiser between local epochs, on the running mean over
    epochs of each epoch's last-batch cross-entropy (the code resets its batch list every batch)."""

    # the switches it implements: any of them off its paper value picks this class over LocalGAN
    switches: ClassVar[tuple[str, ...]] = ("local_gan", "gradient_penalty", "local_schedule")

    def __init__(self, method: DaFKD, client: Client[DaFKDClient], round_index: int) -> None:
        super().__init__(method, client, round_index)
        self.scheduler = (torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimizer, factor=0.2, patience=2)
                          if self.params.local_schedule == "plateau" else None)
        self.epoch_losses: list[float] = []
        self.last_batch: tuple[torch.Tensor, torch.Tensor] | None = None  # (logits, labels) of the latest batch

    def adversarial(self, epoch: int) -> bool:
        return self.params.local_gan == "always" or (self.round <= EARLY_D_ROUNDS and epoch < EARLY_EPOCHS)

    def generator_trains(self, epoch: int) -> bool:
        return self.params.local_gan == "always" or (self.round <= EARLY_G_ROUNDS and epoch < EARLY_EPOCHS)

    def classifier_loss(self, step: Step, epoch: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert step.rng is not None
        p = self.params
        with torch.no_grad():
            fake = self.sample(self.generator, len(x), step.rng)
        logits, real_logit, fake_logit = self.real_and_fake(x, fake)
        loss = F.cross_entropy(logits, y)
        penalty = (gradient_penalty(self.domain_logit, x, fake, torch.rand(len(x), generator=step.rng).to(x.device),
                                    p.gradient_penalty) if p.gradient_penalty else None)
        if self.adversarial(epoch):
            loss = loss + adversarial_loss(real_logit, fake_logit, p.adv_loss)
            if penalty is not None:
                loss = loss + penalty
        if not self.generator_trains(epoch):  # the code's generator forward, without its step
            with torch.no_grad():
                self.domain_logit(self.sample(self.generator, len(x), step.rng))
        self.record(real_logit, fake_logit)
        self.last_batch = logits.detach(), y
        return loss

    def between_epochs(self) -> None:
        if self.scheduler is not None and self.last_batch is not None:
            self.epoch_losses.append(float(F.cross_entropy(*self.last_batch)))
            self.scheduler.step(sum(self.epoch_losses) / len(self.epoch_losses))


# -- the method -------------------------------------------------------------------------------------------


@register_algorithm("dafkd")
class DaFKD(ServerBNRule[DaFKDClient, DaFKDServer, GeneratorBroadcast, DomainUpload]):
    """The broadcast carries θ^g (and the code's shared head) besides φ and h_c; the update G_k, D_k and the
    client's diagnostics besides φ, h_c and h_d^k."""

    Params = DaFKDParams
    params: DaFKDParams
    ClientState = DaFKDClient
    ServerState = DaFKDServer
    personal_parameters = (HEAD,)

    @classmethod
    def mechanisms(cls, params: AlgorithmParams) -> tuple[Mechanism, ...]:
        """Domain awareness (Eq. 7: α̂ departs from uniform; not DaFKD^no-correlation's 1/K_t) and the generator
        (its samples span the classes the teacher knows)."""
        assert isinstance(params, DaFKDParams)  # validated by cls.Params (bench/suites/mechanisms.py)
        domain = (DOMAIN_WEIGHTS,) if params.correlation == "discriminator" else ()
        return (*domain, GENERATED_CLASSES)

    # -- models ---------------------------------------------------------------------------------------

    def _build_generator(self) -> nn.Module:
        p = self.params
        name, kwargs = generator_model(p.generator, p.generator_width)
        return build_model(name, self.ctx.in_shape, self.ctx.num_classes, seed=self.ctx.seed, key=("init", "generator"),
                           noise_dim=p.noise_dim, **kwargs).to(self.ctx.device)

    def _build_discriminator(self) -> nn.Module:
        return build_model("dafkd_discriminator", self.ctx.in_shape, 1, seed=self.ctx.seed,
                           key=("init", "discriminator")).to(self.ctx.device)

    @cached_property
    def local_generator(self) -> nn.Module:
        """G_k: the generator a client trains this round (loaded from the received θ^g)."""
        return self._build_generator()

    @cached_property
    def _teacher_template(self) -> nn.Module:
        """The classifier architecture the server runs the uploads through (``functional_call``)."""
        return self.ctx.build_model("teacher")

    @cached_property
    def _discriminator_template(self) -> nn.Module:
        return self._build_discriminator()

    def resident_parameters(self, model: nn.Module) -> int:
        """The client model, G_k and (no-sharing) D_k, held during local training."""
        count = super().resident_parameters(model) + sum(p.numel() for p in self._build_generator().parameters())
        if self.params.sharing == "separate":
            count += sum(p.numel() for p in self._build_discriminator().parameters())
        return count

    def init_server_state(self, model: nn.Module | None) -> DaFKDServer:
        if model is None or not callable(getattr(model, "domain_logit", None)):
            raise BenchError(f"dafkd needs a classifier with a domain-discriminator head (dafkd_resnet11); "
                             f"{self.ctx.config.model.name!r} has none")
        head = ({k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith(HEAD)}
                if self.params.head == "shared" else None)
        return DaFKDServer(self._build_generator(), head)

    def init_client_state(self, cid: int) -> DaFKDClient:
        return DaFKDClient(self._build_discriminator() if self.params.sharing == "separate" else None)

    # -- one round --------------------------------------------------------------------------------------

    def sequential(self) -> bool:
        return self.params.head == "shared"

    def broadcast_payload(self, round_index: int, server: Server[DaFKDServer], cid: int) -> GeneratorBroadcast:
        assert server.state.generator is not None
        return GeneratorBroadcast(server.state.generator, server.state.head)

    def receive_payload(self, client: Client[DaFKDClient], payload: GeneratorBroadcast) -> None:
        """G_k starts from θ^g; the code's one head, as the previous client left it, replaces h_d^k."""
        copy_state(self.local_generator, payload.generator)
        if payload.head is not None:
            load_state(client.model, payload.head, strict=False)

    def local_update(self, round_index: int, client: Client[DaFKDClient]) -> tuple[Update[DomainUpload], float]:
        """Algorithm 1, lines 19-24 (:class:`LocalGAN`; the released code's, :class:`ReleasedLocalGAN`, where a
        switch asks for it), then the upload of φ, h_c, h_d^k, G_k (and D_k)."""
        p, train = self.params, self.ctx.config.training
        released = p.departs_from_paper(*ReleasedLocalGAN.switches)
        gan = (ReleasedLocalGAN if released else LocalGAN)(self, client, round_index)
        per_epoch = batches_per_pass(client.data.num_samples, train.batch_size, train.drop_last)
        gan.train(local_epochs(self.ctx.client_batches(client, round_index), per_epoch))
        return Update(client.cid, client.data.num_samples, client.model.state_dict(), gan.upload()), gan.loss

    def sample(self, generator: nn.Module, n: int, rng: torch.Generator) -> torch.Tensor:
        """n generated samples: z ~ N(0, I_d) (and, for G-cond, a uniform random label, A6) from ``rng``."""
        z = torch.randn(n, self.params.noise_dim, generator=rng).to(self.ctx.device)
        if self.params.generator == "cond":
            return generator(z, torch.randint(self.ctx.num_classes, (n,), generator=rng).to(self.ctx.device))
        return generator(z)

    def receive(self, round_index: int, server: Server[DaFKDServer], update: Update[DomainUpload]) -> None:
        """``head: shared``: the next client continues the head this one trained."""
        server.state.head = {k: v.detach().clone() for k, v in update.state.items() if k.startswith(HEAD)}
        server.state.taken_in.append(update.cid)

    # -- server ---------------------------------------------------------------------------------------

    def aggregate(self, round_index: int, server: Server[DaFKDServer], updates: list[Update[DomainUpload]]) -> Metrics:
        """Eqs. 6 and 4, then (from round 2) Eqs. 7-8 on D̂^g; the round's diagnostics: the clients' (averaged in
        the order they trained) and the server's."""
        p = self.params
        generator = server.state.generator
        assert generator is not None and server.model is not None
        metrics = client_diagnostics(updates, server.state.taken_in)
        last = server.state.taken_in[-1] if server.state.taken_in else updates[-1].cid
        server.state.taken_in = []
        samples = self.distillation_set(round_index, generator) if p.distill_gen == "pre_round" else None
        super().aggregate(round_index, server, updates)
        if p.generator_broadcast == "last_client" and self.server_trains(round_index):
            load_state(generator, next(u.payload.generator for u in updates if u.cid == last))
        else:
            weights = [u.num_samples if p.weighting == "samples" else 1.0 for u in updates]
            load_state(generator, weighted_average([u.payload.generator for u in updates], weights))
        server.state.selected = [u.cid for u in updates]
        server.state.averaged = {k: v.detach().clone() for k, v in server.model.state_dict().items()}
        if not self.server_trains(round_index):
            return metrics
        samples = samples if samples is not None else self.distillation_set(round_index, generator)
        logits, domain = self.teacher_outputs(updates, samples)
        alpha = (correlation_weights if p.correlation == "discriminator" else uniform_weights)(domain)
        metrics["alpha_entropy"] = float(weight_entropy(alpha))
        metrics["alpha_max"] = float(alpha.max(0).values.mean())
        teacher = ensemble_teacher(logits, alpha, p.temperature, p.teacher)
        metrics["alpha_entropy_uniform"] = math.log(len(updates))
        metrics["gen_coverage"] = class_coverage(teacher)
        metrics["kd_loss"] = self.distil(round_index, server.model, samples, teacher)
        return metrics

    def server_trains(self, round_index: int) -> bool:
        """Every round but the first (A25, ``skip_first_distill``)."""
        return not (round_index == 1 and self.params.skip_first_distill)

    def distillation_set(self, round_index: int, generator: nn.Module) -> torch.Tensor:
        """D̂^g: ``distill_batches`` batches of generated samples, fresh noise every round (stream
        ``("dafkd-distill", t)``), G in train mode (A11)."""
        p = self.params
        size = p.distill_batch_size or self.ctx.config.training.batch_size
        rng = self.ctx.stream("dafkd-distill", round_index)
        generator.train()
        with torch.no_grad():
            return torch.cat([self.sample(generator, size, rng) for _ in range(p.distill_batches)])

    @torch.no_grad()
    def teacher_outputs(self, updates: list[Update[DomainUpload]], samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each upload's classifier logits (clients × samples × classes) and discriminator logits (clients ×
        samples) on D̂^g, computed once per round; the clients' models in eval mode, or with batch statistics
        (``server_bn: train``), per distillation batch."""
        p = self.params
        size = p.distill_batch_size or self.ctx.config.training.batch_size
        needs_domain = p.correlation == "discriminator"
        logits, domain = [], []
        for update in updates:
            client_logits, client_domain = [], []
            head = {k[len(HEAD):]: v for k, v in update.state.items() if k.startswith(HEAD)}
            for batch in samples.split(size):
                features, out = self._run(self._teacher_template, update.state, batch)
                client_logits.append(out)
                if needs_domain:
                    client_domain.append(
                        self._run(self._discriminator_template, update.payload.discriminator, batch)[1].squeeze(1)
                        if update.payload.discriminator is not None
                        else functional_call(self._teacher_template.discriminator, head, (features,)).squeeze(1))  # type: ignore[arg-type]  # torch: Module attributes are Tensor | Module
            logits.append(torch.cat(client_logits))
            domain.append(torch.cat(client_domain) if needs_domain else torch.zeros(len(samples), device=samples.device))
        return torch.stack(logits), torch.stack(domain)

    def _run(self, template: nn.Module, state: dict[str, torch.Tensor],
             x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``template``'s (features, logits) with the parameters and buffers of ``state`` on x: in eval mode, or (``server_bn:
        train``) with batch statistics and copies of the running buffers, so that no upload changes."""
        if self.params.server_bn == "eval":
            template.eval()
            return functional_call(template, state, (x,))
        template.train()
        return functional_call(template, {k: v.clone() if not v.is_floating_point() or "running" in k else v
                                          for k, v in state.items()}, (x,))

    def distil(self, round_index: int, student: nn.Module, samples: torch.Tensor, teacher: torch.Tensor) -> float:
        """Eq. 8: ``distill_epochs`` passes over D̂^g in order, Adam on the student's shared parameters (its own
        domain head is not the clients'), the student in train mode; the mean loss."""
        p = self.params
        size = p.distill_batch_size or self.ctx.config.training.batch_size
        params = [param for name, param in student.named_parameters() if not name.startswith(HEAD)]
        optimizer = torch.optim.Adam(params, lr=p.distill_lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.2, patience=2) \
            if p.distill_schedule == "plateau" else None
        student.train()
        loop = Loop(optimizer, params, round_index, "server")
        batches = list(zip(samples.split(size), teacher.split(size)))

        def step_fn(step: Step, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            x, target = batch
            return distillation_loss(student(x)[1], target, p.temperature, p.kd_reduction)

        losses = []
        for _ in range(p.distill_epochs):
            losses.append(loop.run(batches, step_fn))
            if scheduler is not None:  # [C]: on the running mean of every distillation loss so far
                scheduler.step(sum(losses) / len(losses))
        return sum(losses) / len(losses)

    # -- diagnostics (§6 R10, §7) ---------------------------------------------------------------------

    def evaluations(self) -> list[Evaluation]:
        return [*super().evaluations(), ENSEMBLE_ACC, UNIFORM_ENSEMBLE_ACC, PRE_KD_ACC]

    def method_model(self, metric: str, server: Server[DaFKDServer],
                     clients: list[Client[DaFKDClient]]) -> nn.Module | None:
        """``pre_kd_acc``: ŵ before distillation; ``ensemble_acc`` / ``uniform_ensemble_acc``: the round's client
        models weighted by α̂ from their discriminators on the test images / uniformly."""
        if not server.state.selected:
            return None
        if metric == PRE_KD_ACC.metric:
            assert server.model is not None and server.state.averaged is not None
            model = copy.deepcopy(server.model)
            load_state(model, server.state.averaged)
            return model
        members = [clients[cid] for cid in server.state.selected]
        weighting = correlation_weights if metric == ENSEMBLE_ACC.metric else uniform_weights
        separate = [c.state.discriminator for c in members if c.state.discriminator is not None]
        return DomainEnsemble([c.model for c in members], separate or None, weighting, self.params.temperature,
                              self.params.teacher)


def local_epochs(batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
                 per_epoch: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """A client's batch stream cut into local epochs of ``per_epoch`` batches (the last may be shorter when the
    budget is in steps)."""
    stream = list(batches)
    return [stream[i:i + per_epoch] for i in range(0, len(stream), per_epoch)]


def client_diagnostics(updates: list[Update[DomainUpload]], order: list[int]) -> Metrics:
    """The clients' mean discriminator outputs and generator loss (over the clients whose generator stepped), the
    clients taken in the given ``order`` (the order they trained; empty: the updates' order)."""
    rank = {cid: i for i, cid in enumerate(order)}
    ordered = sorted(updates, key=lambda u: rank[u.cid]) if order else updates
    g_losses = [u.payload.g_loss for u in ordered if not math.isnan(u.payload.g_loss)]
    metrics = {"d_real": sum(u.payload.d_real for u in ordered) / len(ordered),
               "d_fake": sum(u.payload.d_fake for u in ordered) / len(ordered)}
    return {**metrics, "g_loss": sum(g_losses) / len(g_losses)} if g_losses else metrics
