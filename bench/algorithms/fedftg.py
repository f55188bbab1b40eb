"""FedFTG — Zhang, Shen, Ding, Tao, Duan, "Fine-tuning global model via data-free knowledge distillation for
non-IID federated learning", CVPR 2022, as DaFKD's experiments run it (pipelines/dafkd/NOTES.md §2.5; the official
code's ``train_global_model_cgan_bs_weight_iloop_fz_dis``).

Clients train as in FedAvg (cross-entropy), starting from the fine-tuned global model, and report their
label histograms n_k^y (over their whole train set). The server averages (n_k-weighted, Eq. 6 of DaFKD),
then fine-tunes the average with its persistent conditional generator G (G-cond, ``cond_image_generator``,
nz = 100) for ``iterations`` I = 10 iterations. The round's 10·B labels are cut in proportion to
n^y = Σ_{k∈S_t} n_k^y (the code's cumulative-share cut) and shuffled; α_{k,y} = n_k^y / (n^y + 1e-6). In
iteration e, with the next B labels y and z ~ N(0, I) (the same z for both phases; the labels, then each
iteration's z, from the stream ``("fedftg-server", t)``):

* generator: for each selected client k (client-id order) ``generator_steps`` Adam step(s) on
  L_md + λ_cls·L_cls + λ_dis·L_div / K_t, with x̃ = G(z, y), t = z_k(x̃) (eval mode), s = the student's
  logits (eval mode):
      L_md  = −mean_i(α_{k,y_i} · mean_c |s_ic − t_ic|)          (t detached: hard samples)
      L_cls = mean_i(α_{k,y_i} · CE(t_i, y_i))                    (``cls_weighting: sample``)
      L_div = exp(−mean_{ij}(mean_d (z_i − z_j)² · mean_p |x̃_i − x̃_j|))   (FedGen's diversity loss)
* student: ``student_steps`` = 5 SGD steps (student in train mode, G in eval mode) on x̃ = G(z, y), detached:
      −mean_{i,c} T_ic · log softmax(s_i)_c,   T_i = Σ_k α_{k,y_i} softmax(t_k(x̃_i))

Both optimisers are fresh every round, as in the code: G Adam (lr 0.01·0.998^(t−1)), the student SGD with
the local weight decay (lr 0.01·0.998^(t−1): DaFKD's "0.01 for distillation"; the official 0.1 is
``student_lr: 0.1``). λ_cls = λ_dis = 1. ``cls_weighting: batch`` is the official code's
mean_i CE(t_i, y_i) · mean_i α_{k,y_i} (its ``CrossEntropyLoss(reduction='mean')`` times the weight vector).

Mechanism diagnostic (FedGen's :data:`~bench.algorithms.fedgen.GENERATED_LABELS`): ``gen_fidelity``, the share of each
iteration's x̃ whose label y the student's target T names (argmax), averaged over the iterations, against chance
``gen_chance`` = 1/n.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn
from torch.func import functional_call

from bench.algorithms import register_algorithm
from bench.algorithms.base import AlgorithmParams
from bench.algorithms.fedgen import GENERATED_LABELS, diversity_loss, named_share
from bench.algorithms.server_bn import ServerBNParams, ServerBNRule
from bench.engine.loop import Loop, Step
from bench.engine.mechanisms import Mechanism
from bench.engine.messages import Update
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server
from bench.models import build_model


class FedFTGParams(ServerBNParams):
    noise_dim: int = Field(100, ge=1, description="nz of the conditional generator (pipelines/dafkd/NOTES.md §2.5: 100)")
    iterations: int = Field(10, ge=1, description="fine-tuning iterations I per round")
    generator_steps: int = Field(1, ge=1, description="generator steps per client and iteration (inner_round_g)")
    student_steps: int = Field(5, ge=1, description="student steps per iteration (inner_round_d)")
    generator_lr: float = Field(1e-2, gt=0, description="Adam learning rate of the generator")
    student_lr: float = Field(1e-2, gt=0, description="SGD learning rate of the student (official code: 0.1)")
    student_weight_decay: float | None = Field(None, ge=0, description="None: training.optimizer.weight_decay")
    lr_decay: float = Field(0.998, gt=0, le=1, description="both learning rates × lr_decay^(t−1) in round t")
    batch_size: int | None = Field(None, ge=2, description="labels per iteration (None: training.batch_size)")
    cls_weight: float = Field(1.0, ge=0, description="λ_cls")
    diversity_weight: float = Field(1.0, ge=0, description="λ_dis")
    cls_weighting: Literal["sample", "batch"] = Field(
        "sample", description="α_{k,y} per sample (the paper's sum), or the code's mean CE × mean α")


def label_schedule(counts: torch.Tensor, number: int, rng: torch.Generator) -> torch.Tensor:
    """``number`` labels cut in proportion to the class counts n^y (class c gets the indices between the
    cumulative shares' cuts, ``int`` truncation as the code's ``generate_labels``), then shuffled."""
    shares = counts.double() / counts.sum()
    cuts = (torch.cumsum(shares, 0) * number).long()[:-1].tolist()
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, number])]
    labels = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(sizes))
    return labels[torch.randperm(number, generator=rng)]


def class_client_weights(counts: torch.Tensor) -> torch.Tensor:
    """α_{k,y} = n_k^y / (Σ_j n_j^y + 1e-6), from the (clients × classes) histograms of the round's clients."""
    return counts / (counts.sum(0, keepdim=True) + 1e-6)


def discrepancy_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """L_md = −mean_i(α_i · mean_c |s_ic − t_ic|), the teacher detached (the generator seeks disagreement)."""
    return -((student_logits - teacher_logits.detach()).abs().mean(1) * weights).mean()


def weighted_cross_entropy(teacher_logits: torch.Tensor, y: torch.Tensor, weights: torch.Tensor,
                           form: Literal["sample", "batch"]) -> torch.Tensor:
    """L_cls: mean_i(α_i · CE(t_i, y_i)) (``sample``), or mean_i CE(t_i, y_i) · mean_i α_i (``batch``, the code)."""
    if form == "sample":
        return (F.cross_entropy(teacher_logits, y, reduction="none") * weights).mean()
    return F.cross_entropy(teacher_logits, y) * weights.mean()


def soft_cross_entropy(student_logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """−mean over samples and classes of T_ic · log softmax(s_i)_c (the code's student loss, no temperature)."""
    return -(teacher * F.log_softmax(student_logits, dim=1)).mean()


@dataclass
class GeneratorServer(NoState):
    """The server's conditional generator G, kept across rounds (its optimiser is fresh each round)."""

    generator: nn.Module | None = None


@register_algorithm("fedftg")
class FedFTG(ServerBNRule[NoState, GeneratorServer, None, torch.Tensor]):
    """The update carries the client's label histogram n_k^y (over its train set) besides the model."""

    Params = FedFTGParams
    params: FedFTGParams
    ServerState = GeneratorServer

    @classmethod
    def mechanisms(cls, params: AlgorithmParams) -> tuple[Mechanism, ...]:
        return (GENERATED_LABELS,)

    def _build_generator(self) -> nn.Module:
        return build_model("cond_image_generator", self.ctx.in_shape, self.ctx.num_classes, seed=self.ctx.seed,
                           key=("init", "generator"), noise_dim=self.params.noise_dim).to(self.ctx.device)

    def init_server_state(self, model: nn.Module | None) -> GeneratorServer:
        return GeneratorServer(self._build_generator())

    @cached_property
    def _teacher_template(self) -> nn.Module:
        """The classifier architecture the server runs the uploads through (eval mode, ``functional_call``)."""
        return self.ctx.build_model("teacher").eval()

    def broadcast_payload(self, round_index: int, server: Server[GeneratorServer], cid: int) -> None:
        return None

    def update_payload(self, client: Client[NoState]) -> torch.Tensor:
        return torch.bincount(client.data.y, minlength=self.ctx.num_classes).to(torch.float32)

    def aggregate(self, round_index: int, server: Server[GeneratorServer], updates: list[Update[torch.Tensor]]) -> Metrics:
        super().aggregate(round_index, server, updates)
        return {"gen_fidelity": self.fine_tune(round_index, server, updates), "gen_chance": 1 / self.ctx.num_classes}

    def fine_tune(self, round_index: int, server: Server[GeneratorServer], updates: list[Update[torch.Tensor]]) -> float:
        """The server's data-free fine-tuning of the averaged model (module docstring); the mean share of x̃ whose
        label the target names."""
        p, ctx = self.params, self.ctx
        student, generator = server.model, server.state.generator
        assert student is not None and generator is not None
        size = p.batch_size or ctx.config.training.batch_size
        decay = p.lr_decay ** (round_index - 1)
        g_optimizer = torch.optim.Adam(generator.parameters(), lr=p.generator_lr * decay)
        student_params = list(student.parameters())
        s_optimizer = torch.optim.SGD(student_params, lr=p.student_lr * decay,
                                      weight_decay=ctx.config.training.optimizer.weight_decay
                                      if p.student_weight_decay is None else p.student_weight_decay)
        g_loop = Loop(g_optimizer, list(generator.parameters()), round_index, "generator", backward_inputs=True)
        s_loop = Loop(s_optimizer, student_params, round_index, "server")
        counts = torch.stack([u.payload for u in updates])
        alpha = class_client_weights(counts)  # clients × classes
        rng = ctx.stream("fedftg-server", round_index)
        labels = label_schedule(counts.sum(0).cpu(), p.iterations * size, rng).to(ctx.device)
        teacher = self._teacher_template

        def teacher_logits(k: int, x: torch.Tensor) -> torch.Tensor:
            return functional_call(teacher, updates[k].state, (x,))[1]

        named: list[float] = []  # per iteration, the share of x̃ whose label y the target names

        for e in range(p.iterations):
            y = labels[e * size:(e + 1) * size]
            z = torch.randn(size, p.noise_dim, generator=rng).to(ctx.device)
            generator.train()
            student.eval()
            for k in range(len(updates)):
                def g_step(step: Step, _: int, k: int = k) -> torch.Tensor:
                    fake = generator(z, y)
                    t = teacher_logits(k, fake)
                    return (discrepancy_loss(student(fake)[1], t, alpha[k, y])
                            + p.cls_weight * weighted_cross_entropy(t, y, alpha[k, y], p.cls_weighting)
                            + p.diversity_weight * diversity_loss(z, fake.flatten(1)) / len(updates))
                g_loop.run(range(p.generator_steps), g_step)
            generator.eval()
            student.train()
            with torch.no_grad():
                fake = generator(z, y)
                target: torch.Tensor = sum(  # type: ignore[assignment]  # typeshed: sum() is Tensor | Literal[0]
                    alpha[k, y].unsqueeze(1) * torch.softmax(teacher_logits(k, fake), dim=1) for k in range(len(updates)))
                named.append(named_share(target, y))
            s_loop.run(range(p.student_steps), lambda step, _: soft_cross_entropy(student(fake)[1], target))
        return sum(named) / len(named)
