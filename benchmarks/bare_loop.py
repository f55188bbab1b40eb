"""The bare PyTorch loop the benchmarks measure the engine against."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def bare_local_training(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                        epochs: int, batch_size: int, gen: torch.Generator) -> None:
    """One client's local training as a bare loop: ``epochs`` shuffled passes in batches of ``batch_size``,
    cross-entropy on the model's logits, one optimiser step a batch."""
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), batch_size):
            idx = perm[i:i + batch_size]
            loss = F.cross_entropy(model(x[idx])[1], y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
