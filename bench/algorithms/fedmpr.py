"""FedMPR — Goksu & Pugeault, "Robust Federated Learning in the Face of Covariate Shift: A Magnitude Pruning
with Hybrid Regularization Framework for Enhanced Model Aggregation", arXiv 2412.15010, 2024
(pipelines/fedakd/NOTES.md §4 FedMPR).

Local objective: CE + (λ/2)·‖θ‖² over the parameters (λ = ``weight_decay`` = 1e-4: the code's Adam weight
decay, whose gradient λ·θ this term has), with hybrid regularisation — dropout of rate ``dropout`` on the
features before the classifier and Gaussian noise of std ``input_noise`` added to the inputs (both drawn from
the loop's seeded stream). After local training, global magnitude pruning (:func:`magnitude_prune`): the
``prune_fraction`` quantile of |θ| over *all* parameters (BN weights and biases included) is the threshold
and every smaller entry is set to 0. The server averages the pruned state dicts.

``mode: code`` is FedAKD's ``fedmpr.py`` [C]: no dropout or noise layers, equal aggregation weights (the switches
of :class:`FedMPRParams`); the paper names dropout and noise injection [I: the rates 0.2 and 0.1 are readings, the
paper and the reading notes give none] and FedAvg's data-size weights [I]. Prune fraction 0.1 [P Table 6].
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ModelAveraging
from bench.algorithms.readings import ModeParams, reading
from bench.engine.loop import Step
from bench.engine.messages import Update
from bench.engine.state import Client, NoState


class FedMPRParams(ModeParams, AveragingParams):
    """FedMPR's hyperparameters (Table 6) and its readings."""

    prune_fraction: float = Field(0.1, ge=0, lt=1, description="quantile of |θ| below which entries are pruned")
    weight_decay: float = Field(1e-4, ge=0, description="λ of the L2 term (λ/2)‖θ‖²")
    dropout: float = reading(0.2, 0.0, "dropout rate on the features (hybrid regularisation)", ge=0, lt=1)
    input_noise: float = reading(0.1, 0.0, "std of Gaussian noise on the inputs (hybrid regularisation)", ge=0)
    weighting: Literal["samples", "uniform"] = reading("samples", "uniform", "aggregation weights n_k, or 1")


@torch.no_grad()
def magnitude_prune(model: nn.Module, fraction: float) -> float:
    """Zero every parameter entry below the ``fraction`` quantile of |θ| over all parameters; the threshold."""
    params = list(model.parameters())
    threshold = torch.quantile(torch.cat([p.reshape(-1).abs() for p in params]), fraction)
    for p in params:
        p.mul_(p.abs() >= threshold)
    return float(threshold)


def l2_penalty(params: list[torch.Tensor]) -> torch.Tensor:
    """½‖θ‖² over the parameters."""
    return 0.5 * sum((p * p).sum() for p in params)  # type: ignore[return-value]  # typeshed: sum() is Tensor | Literal[0]


@register_algorithm("fedmpr")
class FedMPR(ModelAveraging[NoState, NoState]):
    Params = FedMPRParams
    params: FedMPRParams

    def local_loss(self, step: Step, client: Client, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p = self.params
        if p.input_noise:
            x = x + p.input_noise * torch.randn(x.shape, generator=step.rng).to(x.device)
        features, logits = client.model(x)
        if p.dropout:
            keep = (torch.rand(features.shape, generator=step.rng) >= p.dropout).to(features.device)
            logits = client.model.classifier(features * keep / (1 - p.dropout))  # type: ignore[operator]  # torch: Module attributes are Tensor | Module
        loss = F.cross_entropy(logits, y)
        return loss + p.weight_decay * l2_penalty(list(client.model.parameters())) if p.weight_decay else loss

    def local_update(self, round_index: int, client: Client[NoState]) -> tuple[Update[None], float]:
        needs_rng = self.params.input_noise or self.params.dropout
        rng = self.ctx.stream("fedmpr-noise", client.cid, round_index) if needs_rng else None
        loss = self.ctx.local_train(client, round_index, self.local_loss, rng=rng)
        magnitude_prune(client.model, self.params.prune_fraction)
        return self.update(client), loss
