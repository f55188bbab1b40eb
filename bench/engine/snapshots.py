"""Frozen snapshots of a model: a teacher that is the same model at an earlier moment (FedAL's
less-forgetting terms θ^{t,0} and θ^{t+½,0}, pipelines/fedal/NOTES.md §2.1; FCCL's previous-round model).

A snapshot is a copy whose parameters need no gradient; it is built once and refreshed in place
afterwards, so a method keeps one per client in its typed state (and so in the checkpoint) without
allocating a model every stage.
"""
from __future__ import annotations

import copy
from typing import Literal

from torch import nn

from bench.engine.aggregate import copy_state


def refresh_snapshot(snapshot: nn.Module | None, model: nn.Module,
                     mode: Literal["eval", "train"] = "eval") -> nn.Module:
    """``model``'s current weights and buffers in ``snapshot`` (a frozen deep copy the first time), put in
    ``mode`` (eval: BatchNorm uses the running statistics the model had)."""
    if snapshot is None:
        snapshot = copy.deepcopy(model)
        snapshot.requires_grad_(False)
        snapshot.zero_grad(set_to_none=True)
    else:
        copy_state(snapshot, model)
    return snapshot.train(mode == "train")
