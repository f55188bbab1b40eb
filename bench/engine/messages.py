"""The messages of the parameter-averaging family, generic over what a method sends besides the model.

Every message is a typed value (a dataclass, a tensor, or None for nothing) and only messages cross between a
client and the server (:mod:`bench.engine.protocol`). The FedAvg family's two are here: the server's
:class:`ModelBroadcast` (its model's shared weights and buffers, and the method's payload, e.g. FedHKD's global
hyper-knowledge) and a client's :class:`Update` (its trained model and its payload, e.g. FedHKD's local
hyper-knowledge). A message may share tensors with the object it was read from: the receiver copies what it keeps
(:func:`~bench.engine.aggregate.load_state`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

P = TypeVar("P")


@dataclass(frozen=True)
class ModelBroadcast(Generic[P]):
    """What the server sends a client at the start of an exchange: the global model's shared state (every entry
    not under the method's personal parameters; empty without a global model) and the method's ``payload``."""

    state: dict[str, torch.Tensor]
    payload: P


@dataclass(frozen=True)
class Update(Generic[P]):
    """What a client sends the server after its local training: its id, its train-split size (the FedAvg
    weight n_k), its model's state dict and the method's ``payload``."""

    cid: int
    num_samples: int
    state: dict[str, torch.Tensor]
    payload: P
