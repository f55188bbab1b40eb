"""The bare PyTorch loop the benchmarks measure the engine against."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bench.config import ExperimentConfig
from bench.data import load_dataset
from bench.engine.setup import configure_torch
from bench.runner.federation import partition_for, to_tensor

Split = tuple[torch.Tensor, torch.Tensor]


def bare_data(cfg: ExperimentConfig, dataset: str,
              data_dir: Path) -> tuple[torch.device, Any, Split, Split, list[Split]]:
    """What a bare loop trains on, prepared as the runner prepares it: (device, partition, train, test,
    each client's train shard)."""
    device = configure_torch(1, True, "cpu")
    data = load_dataset(dataset, data_dir)
    partition = partition_for(cfg, data, None)
    x, test_x = to_tensor(data.train_x, data, device), to_tensor(data.test_x, data, device)
    y, test_y = torch.from_numpy(data.train_y), torch.from_numpy(data.test_y)
    return device, partition, (x, y), (test_x, test_y), [(x[p], y[p]) for p in map(torch.from_numpy, partition.train)]


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
