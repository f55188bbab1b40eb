"""FedAvg with label-smoothed local cross-entropy: an example of a method shipped in its own package
and found by fkd-bench through the ``fkd_bench.algorithms`` entry point (see ../../README.md).

Local objective: CE with smoothing ε, i.e. (1 − ε)·CE(y) + ε·mean over classes of −log p; server: FedAvg.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ModelAveraging
from bench.engine.loop import Step
from bench.engine.state import Client, NoState


class LabelSmoothingParams(AveragingParams):
    smoothing: float = Field(0.1, ge=0, lt=1, description="label smoothing ε")


@register_algorithm("fedavg_ls")
class FedAvgLabelSmoothing(ModelAveraging[NoState, NoState]):
    Params = LabelSmoothingParams
    params: LabelSmoothingParams

    def local_loss(self, step: Step, client: Client[NoState], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        _, logits = client.model(x)
        return F.cross_entropy(logits, y, label_smoothing=self.params.smoothing)
