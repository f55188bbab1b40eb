"""Typed run state: everything a run needs to continue lives in these objects.

A :class:`Client` holds its data, its model, its optimiser and its method's typed state; the
:class:`Server` holds the global model (when the method has one) and the method's typed server state.
Each method declares its state as dataclasses (subclasses of :class:`NoState`; its messages are typed too,
:mod:`bench.engine.messages`), so a checkpoint of these objects is the complete state of a run. RNG streams are
not stored: every stream is a pure function of ``(seed, key)`` (:mod:`bench.rng`), so the round
index is enough to continue.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Generic, TypeVar

import torch
from torch import nn


@dataclass
class ClientData:
    """A client's data as in-memory tensors on the run's device (float images, int64 labels): its
    train split, its local test split and (when the partition holds one out) its validation split."""

    x: torch.Tensor
    y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    val_x: torch.Tensor | None = None
    val_y: torch.Tensor | None = None
    # positions in ``with_test`` of the client's samples in the order its partition stores them (ascending
    # train-split index); None where the local test split is not drawn from the train split
    stored_order: torch.Tensor | None = None

    @property
    def num_samples(self) -> int:
        return len(self.y)

    @cached_property
    def with_test(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The train and local test splits together: all of the client's local data (released code that
        trains or evaluates on it, pipelines/fedakd/NOTES.md §0.8)."""
        return torch.cat([self.x, self.test_x]), torch.cat([self.y, self.test_y])


@dataclass
class NoState:
    """A method's per-client or server state; methods subclass it with typed fields."""


ClientStateT = TypeVar("ClientStateT", bound=NoState)
ServerStateT = TypeVar("ServerStateT", bound=NoState)


@dataclass
class Client(Generic[ClientStateT]):
    cid: int
    data: ClientData
    model: nn.Module
    state: ClientStateT
    optimizer: torch.optim.Optimizer | None = None  # its state kept across rounds only when the config says so


@dataclass
class Server(Generic[ServerStateT]):
    model: nn.Module | None  # the global model, for methods that have one
    state: ServerStateT
