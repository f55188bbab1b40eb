"""Explicit run state: everything a run needs to continue lives in these objects.

``Client`` and ``Server`` hold models, optimiser state and method-specific state (``extra``);
RNG streams are not stored because every stream is a pure function of ``(seed, key)``
(:mod:`bench.engine.rng`), so the round index is enough to continue a run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class ClientData:
    """A client's data as in-memory tensors on the run's device (float images, int64 labels)."""

    x: torch.Tensor
    y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    @property
    def num_samples(self) -> int:
        return len(self.y)


@dataclass
class Client:
    cid: int
    data: ClientData
    model: nn.Module
    optimizer: torch.optim.Optimizer | None = None  # kept across rounds only when the config says so
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Server:
    model: nn.Module | None = None  # the global model, for methods that have one
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Update:
    """What a client sends the server after local training."""

    cid: int
    num_samples: int
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
