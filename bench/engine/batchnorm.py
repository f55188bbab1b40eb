"""BatchNorm running statistics as data: a model's BatchNorm buffers, their estimate on a set of batches, and the
pooled estimate of several holders' estimates weighted by how many samples each saw."""
from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.swa_utils import update_bn

MEAN, VAR = "running_mean", "running_var"


def batchnorm_layers(model: nn.Module) -> list[str]:
    """The names of ``model``'s BatchNorm layers that keep running statistics."""
    return [name for name, module in model.named_modules()
            if isinstance(module, _BatchNorm) and module.track_running_stats]


def running_statistics(model: nn.Module) -> dict[str, torch.Tensor]:
    """The running means and variances of ``model``'s BatchNorm layers, by state-dict key (copies)."""
    keys = {f"{layer}.{stat}" if layer else stat for layer in batchnorm_layers(model) for stat in (MEAN, VAR)}
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k in keys}


@torch.no_grad()
def estimate_statistics(model: nn.Module, batches: Iterable[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The running statistics of ``model``'s BatchNorm layers re-estimated on ``batches`` by torch's
    ``update_bn`` on a copy (``model`` is unchanged): each layer normalises with its batch's statistics, and its
    estimate is the mean over batches of the batch means and of the unbiased batch variances."""
    work = copy.deepcopy(model)
    update_bn(batches, work)
    return running_statistics(work)


def pooled_statistics(statistics: Sequence[dict[str, torch.Tensor]],
                      counts: Sequence[int]) -> dict[str, torch.Tensor]:
    """The pooled estimate of several holders' BatchNorm statistics, holder k having seen n_k samples:
    μ = Σ_k n_k μ_k / N and σ² = Σ_k n_k (σ_k² + (μ_k − μ)²) / N (the law of total variance, so the spread between
    the holders' means counts as it would in batches drawn from all their data)."""
    total = float(sum(counts))
    out: dict[str, torch.Tensor] = {}
    for key in statistics[0]:
        if not key.endswith(MEAN):
            continue
        var_key = key[:-len(MEAN)] + VAR
        mean = sum(n / total * s[key] for s, n in zip(statistics, counts))
        assert isinstance(mean, torch.Tensor)
        out[key] = mean
        var = sum(n / total * (s[var_key] + (s[key] - mean) ** 2) for s, n in zip(statistics, counts))
        assert isinstance(var, torch.Tensor)
        out[var_key] = var
    return out
