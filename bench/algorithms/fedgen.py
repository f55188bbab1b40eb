"""FedGen — Zhu, Hong, Zhou, "Data-free knowledge distillation for heterogeneous federated learning",
ICML 2021, as the FedHKD paper runs it (pipelines/fedhkd/NOTES.md §4 "FedGen", §5.5; context: pipelines/dafkd/NOTES.md §2.4).

Server, every round after local training and before the FedAvg step (:class:`ParameterAveraging`):
train the conditional feature generator G_w(ε, y) (``fedgen_generator``: [ε ~ U(0,1)^64 ; onehot(y)] →
Linear(→512) → BN → ReLU → Linear(→d), d = the classifier's ``feature_dim``) for ``generator_epochs`` ×
``teacher_iters`` Adam steps (lr 3e-4 · 0.98^(t−1) in round t, weight decay 1e-2, state kept across
rounds). Each step draws ``server_batch_size`` labels uniformly from the qualified labels and minimises

    teacher_weight · Σ_u mean_b[w_{y_b,u} · CE(G_ω^u(G_w(ε_b, y_b)), y_b)] + diversity_weight · L_div,

with G_ω^u client u's uploaded classifier head, w_{y,u} = c_{u,y} / Σ_{u'} c_{u',y} and
L_div = exp(−mean_{b,b'}(mean_k (ε_b − ε_b')² · mean_k |h_b − h_b'|)) (no adversarial student term).

Client, from round 2 (round 1 is CE only), per batch (x, y) of size B, generator frozen in eval mode:

    CE(x, y) + (B_gen/B)·α_t·CE(G_ω(G_w(ε, ŷ)), ŷ) + β_t·KL(softmax(G_ω(G_w(ε, y))) ‖ softmax(logits(x)))

with ŷ ~ U{0..n−1} of size B_gen = 32, the KL "batchmean" and its target detached, and
α_t = β_t = max(1e-4, 10·0.98^(t−1)) in 1-based round t (FedGen's 0-indexed round glob_iter is t − 1).

Readings (FedGen's code where the paper is silent, as pipelines/dafkd/NOTES.md §2.4 records it):
* label counts c_{u,y} start at 1 for every label and add the labels of every batch the client trained
  on this round (all local epochs); "qualified" labels are those with max_u c_{u,y} > 1;
* the teacher heads are the selected clients' classifiers after local training, applied with their
  uploaded parameters; the generator's gradient alone is computed (the heads stay untouched);
* B is ``training.batch_size`` (gen_ratio = 32/64 = 0.5 at the paper's batch 64); the server's batch
  is 64 (FedGen trains its generator at the clients' batch size);
* the generator is the classifier's latent generator: every bench model exposes its head G_ω as
  ``classifier`` and its latent size as ``feature_dim``.

DaFKD's experiments run this FedGen with its own values (pipelines/dafkd/NOTES.md §2.4, set in its suite): noise 32,
hidden 256, 10 × 5 generator steps of batch 32, β = 10 (1 on EMNIST), generator lr 1e-4 on EMNIST; its
claim that FedGen used the paper's two-embedding generator is ``generator: embed``.

Mechanism diagnostic (:data:`GENERATED_LABELS`): ``gen_fidelity``, the share of the round's last generator batch whose
label the clients' weighted heads name, against chance ``gen_chance`` = 1/n.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn
from torch.func import functional_call

from bench.algorithms import register_algorithm
from bench.algorithms.base import AlgorithmParams
from bench.algorithms.server_bn import ServerBNParams, ServerBNRule
from bench.engine.distillation import soft_target_kl
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Loop, Step
from bench.engine.mechanisms import Mechanism
from bench.engine.messages import Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server
from bench.engine.streams import NoiseStream
from bench.errors import BenchError
from bench.models import build_model

HEAD = "classifier"  # the attribute holding G_ω on every bench classifier
MIN_KD_WEIGHT = 1e-4  # FedGen's floor on the decayed α_t, β_t


class FedGenParams(ServerBNParams):
    noise_dim: int = Field(64, ge=1, description="generator noise dimension (FedGen default)")
    hidden: int = Field(512, ge=1, description="generator hidden width")
    generator_lr: float = Field(3e-4, gt=0, description="server Adam learning rate of the generator")
    generator_weight_decay: float = Field(1e-2, ge=0)
    generator_lr_decay: float = Field(0.98, gt=0, le=1, description="ExponentialLR factor per round")
    generator_epochs: int = Field(5, ge=1, description="generator epochs per round")
    teacher_iters: int = Field(5, ge=1, description="Adam steps per generator epoch")
    server_batch_size: int = Field(64, ge=2, description="labels per generator step")
    teacher_weight: float = Field(1.0, ge=0, description="weight of the teacher loss (FedGen ensemble_alpha)")
    diversity_weight: float = Field(1.0, ge=0, description="weight of the diversity loss (FedGen ensemble_eta)")
    gen_batch_size: int = Field(32, ge=1, description="generated latents per client step, B_gen")
    alpha: float = Field(10.0, ge=0, description="initial α (generated-latent CE weight)")
    beta: float = Field(10.0, ge=0, description="initial β (latent KL weight)")
    kd_decay: float = Field(0.98, gt=0, le=1, description="per-round decay of α and β")
    generator: Literal["fedgen", "embed"] = Field("fedgen", exclude_if=lambda v: v == "fedgen", description=(
        "fedgen: FedGen's generator; embed: separate noise and label embeddings, as the DaFKD paper describes the "
        "generator it gave FedGen (pipelines/dafkd/NOTES.md §2.4, reading dafkd_embed); left out of the resolved config at its "
        "default, so the runs from before it keep their hash"))


def kd_weight(initial: float, decay: float, round_index: int) -> float:
    """α_t or β_t in 1-based ``round_index``: max(1e-4, initial · decay^(t−1))."""
    return max(MIN_KD_WEIGHT, initial * decay ** (round_index - 1))


def label_weights(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """From label counts (users × classes, each starting at 1): the weights w_{y,u} (classes × users)
    and the qualified labels (max over users > 1)."""
    return (counts / counts.sum(0, keepdim=True)).T, torch.nonzero(counts.max(0).values > 1).flatten()


def diversity_loss(noise: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
    """exp(−mean_{b,b'}(mean_k (ε_b − ε_b')² · mean_k |h_b − h_b'|)) (FedGen ``DiversityLoss``, l1)."""
    noise_dist = (noise[None] - noise[:, None]).pow(2).mean(2)
    latent_dist = (latents[None] - latents[:, None]).abs().mean(2)
    return torch.exp(-(noise_dist * latent_dist).mean())


def teacher_loss(head: nn.Module, head_states: list[dict[str, torch.Tensor]], latents: torch.Tensor,
                 y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_u mean_b[w_{y_b,u} · CE(G_ω^u(h_b), y_b)], with ``head`` run on each user's parameters."""
    return sum((F.cross_entropy(functional_call(head, state, (latents,)), y, reduction="none")  # type: ignore[return-value]  # typeshed: sum() is Tensor | Literal[0]
                * weights[y, u]).mean() for u, state in enumerate(head_states))


@torch.no_grad()
def teacher_fidelity(head: nn.Module, head_states: list[dict[str, torch.Tensor]], latents: torch.Tensor,
                     y: torch.Tensor, weights: torch.Tensor) -> float:
    """The diagnostic of the generator at work: the share of generated latents whose label y the teacher names,
    the teacher being Σ_u w_{y,u} softmax(G_ω^u(h)) (chance: 1/n)."""
    teacher = sum(weights[y, u].unsqueeze(1) * F.softmax(functional_call(head, state, (latents,)), dim=1)
                  for u, state in enumerate(head_states))
    assert isinstance(teacher, torch.Tensor)
    return named_share(teacher, y)


def named_share(teacher: torch.Tensor, y: torch.Tensor) -> float:
    """The share of samples whose label ``y`` the teacher's (samples × classes) argmax names (chance: 1/n)."""
    return float((teacher.argmax(1) == y).double().mean())


GENERATED_LABELS = Mechanism(
    "the generator produces the labels it is asked for", "gen_fidelity", "gen_chance", "above", 1.0, relative=True,
    why="a generator whose samples the teacher labels at chance carries no class knowledge to distil; twice chance is "
        "the least we read as one that does")


@dataclass
class GeneratorState(NoState):
    """The server's generator G_w and its Adam optimiser (state kept across rounds)."""

    generator: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None


@dataclass
class FedGenClient(NoState):
    """What a client holds during local training: the received generator (frozen) and the label
    counts c_{u,y} of the batches it trained on this round."""

    generator: nn.Module | None = None
    label_counts: torch.Tensor | None = None


@register_algorithm("fedgen")
class FedGen(ServerBNRule[FedGenClient, GeneratorState, nn.Module, torch.Tensor]):
    """The broadcast carries the generator G_w besides the model, the update the label counts c_{u,y} (starting at
    1 for every label)."""

    Params = FedGenParams
    params: FedGenParams
    ClientState = FedGenClient
    ServerState = GeneratorState

    @classmethod
    def mechanisms(cls, params: AlgorithmParams) -> tuple[Mechanism, ...]:
        return (GENERATED_LABELS,)

    def _build_generator(self, feature_dim: int) -> nn.Module:
        p = self.params
        name = "fedgen_generator" if p.generator == "fedgen" else "embed_feature_generator"
        return build_model(name, (feature_dim,), self.ctx.num_classes, seed=self.ctx.seed,
                           key=("init", "generator"), noise_dim=p.noise_dim, hidden=p.hidden).to(self.ctx.device)

    def resident_parameters(self, model: nn.Module) -> int:
        """The client model plus the (frozen) generator it samples latents from: Table 1's Params (pipelines/fedhkd/NOTES.md
        §10 R6). Added to the base count truncated to 3 decimals (as the paper's FedProx/MOON values are) this
        generator gives the printed CIFAR-10/100 values but 1.341 for SVHN's 1.357, which only a 64-dim
        generator without BN parameters fits (tests/test_models.py, pipelines/fedhkd/README.md)."""
        generator = self._build_generator(model.feature_dim)  # type: ignore[arg-type]  # torch: Module attributes are Tensor | Module
        return super().resident_parameters(model) + sum(p.numel() for p in generator.parameters())

    def init_server_state(self, model: nn.Module | None) -> GeneratorState:
        if model is None or not isinstance(getattr(model, HEAD, None), nn.Module) or not hasattr(model, "feature_dim"):
            raise BenchError(f"fedgen needs a model with a `{HEAD}` head and a `feature_dim`; "
                             f"{self.ctx.config.model.name!r} has none")
        generator = self._build_generator(model.feature_dim)  # type: ignore[arg-type]  # torch: Module attributes are Tensor | Module
        p = self.params
        return GeneratorState(generator, torch.optim.Adam(generator.parameters(), lr=p.generator_lr,
                                                          weight_decay=p.generator_weight_decay))

    # -- client ---------------------------------------------------------------------------------

    def broadcast_payload(self, round_index: int, server: Server[GeneratorState], cid: int) -> nn.Module:
        assert server.state.generator is not None
        return server.state.generator

    def receive_payload(self, client: Client[FedGenClient], payload: nn.Module) -> None:
        client.state.generator = payload

    def local_update(self, round_index: int, client: Client[FedGenClient]) -> tuple[Update[torch.Tensor], float]:
        assert client.state.generator is not None
        client.state.generator.eval()
        client.state.label_counts = torch.ones(self.ctx.num_classes, device=self.ctx.device)
        loss = self.ctx.local_train(client, round_index, self.local_loss,
                                    rng=self.ctx.stream("fedgen-client", client.cid, round_index))
        update = Update(client.cid, client.data.num_samples, client.model.state_dict(), client.state.label_counts)
        client.state.generator = client.state.label_counts = None
        return update, loss

    def local_loss(self, step: Step, client: Client[FedGenClient], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert client.state.label_counts is not None and client.state.generator is not None and step.rng is not None
        client.state.label_counts += torch.bincount(y, minlength=self.ctx.num_classes)
        _, logits = client.model(x)
        loss = F.cross_entropy(logits, y)
        t = step.round
        if t == 1:
            return loss
        p, generator = self.params, client.state.generator
        noise = NoiseStream(step.rng, generator.noise_dim, self.ctx.device)  # type: ignore[arg-type]  # torch: Module attributes are Tensor | Module
        head = getattr(client.model, HEAD)
        with torch.no_grad():
            target = F.softmax(head(generator(noise.batch(len(y)), y)), dim=1)
            y_gen = torch.randint(self.ctx.num_classes, (p.gen_batch_size,), generator=step.rng).to(self.ctx.device)
            latents = generator(noise.batch(len(y_gen)), y_gen)
        latent_kl = soft_target_kl(logits, target, 1.0)
        gen_ce = F.cross_entropy(head(latents), y_gen)
        gen_ratio = p.gen_batch_size / self.ctx.config.training.batch_size
        return (loss + gen_ratio * kd_weight(p.alpha, p.kd_decay, t) * gen_ce
                + kd_weight(p.beta, p.kd_decay, t) * latent_kl)

    # -- server ---------------------------------------------------------------------------------

    def aggregate(self, round_index: int, server: Server[GeneratorState], updates: list[Update[torch.Tensor]]) -> Metrics:
        fidelity = self.train_generator(round_index, server, updates)
        return {**super().aggregate(round_index, server, updates), "gen_fidelity": fidelity,
                "gen_chance": 1 / self.ctx.num_classes}

    def train_generator(self, round_index: int, server: Server[GeneratorState], updates: list[Update[torch.Tensor]]) -> float:
        """``generator_epochs`` × ``teacher_iters`` Adam steps on the teacher and diversity losses; the teacher's
        fidelity on the last step's latents (:func:`teacher_fidelity`)."""
        p = self.params
        generator, optimizer = server.state.generator, server.state.optimizer
        assert server.model is not None and generator is not None and optimizer is not None
        for group in optimizer.param_groups:
            group["lr"] = p.generator_lr * p.generator_lr_decay ** (round_index - 1)
        weights, qualified = label_weights(torch.stack([u.payload for u in updates]))
        prefix = f"{HEAD}."
        head_states = [{k[len(prefix):]: v for k, v in u.state.items() if k.startswith(prefix)} for u in updates]
        head = getattr(server.model, HEAD)
        generator.train()
        rng = self.ctx.stream("fedgen-server", round_index)
        noise = NoiseStream(rng, generator.noise_dim, self.ctx.device)  # type: ignore[arg-type]  # torch: Module attributes are Tensor | Module

        last: list[tuple[torch.Tensor, torch.Tensor]] = []  # the latest step's latents and labels

        def step_fn(step: Step, _: int) -> torch.Tensor:
            y = qualified[torch.randint(len(qualified), (p.server_batch_size,), generator=rng).to(qualified.device)]
            eps = noise.batch(len(y))
            latents = generator(eps, y)
            last[:] = [(latents.detach(), y)]
            return (p.teacher_weight * teacher_loss(head, head_states, latents, y, weights)
                    + p.diversity_weight * diversity_loss(eps, latents))

        with eval_mode(head):
            Loop(optimizer, list(generator.parameters()), round_index, "generator",
                 backward_inputs=True).run(range(p.generator_epochs * p.teacher_iters), step_fn)
            return teacher_fidelity(head, head_states, *last[0], weights)
