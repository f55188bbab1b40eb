"""Checkpoints: the complete state of a run after a round, written atomically, so a run killed at any
moment (``kill -9`` included) continues from its last checkpoint to a bitwise-identical result.

A checkpoint pickles the typed run state in one :func:`torch.save` call — models, optimisers (whose
parameters stay the models' own: pickle keeps object identity within one file), each method's client
and server state, the curves and records so far — and the identity of the run: config, dataset,
partition and source code hashes. A checkpoint of another identity is never resumed. RNG streams
are not stored: each is a pure function of the seed and its key (:mod:`bench.rng`).
Checkpoints are the runner's own files: load only those you wrote (they are pickles).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bench.engine.state import NoState, Server
from bench.fileio import atomic_write

CHECKPOINT = "checkpoint.pt"
Record = tuple[int, str, int | None, float]
"""``(round, metric, client or None, value)``: one line of ``records.csv``."""


@dataclass
class ClientSnapshot:
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    state: NoState


@dataclass
class Checkpoint:
    identity: dict[str, str]
    round: int
    server: Server
    clients: list[ClientSnapshot]
    curves: list[dict[str, float]]
    records: list[Record]
    timing: dict[str, float] = field(default_factory=dict)
    loss_reference: float | None = None  # the divergence guard's reference (the run's first step loss)


def save_checkpoint(folder: Path, checkpoint: Checkpoint) -> Path:
    return atomic_write(Path(folder) / CHECKPOINT, lambda handle: torch.save(checkpoint, handle))


def load_checkpoint(folder: Path, identity: dict[str, str], device: torch.device) -> Checkpoint | None:
    """The checkpoint in ``folder`` if it belongs to the run of this ``identity``; else None."""
    path = Path(folder) / CHECKPOINT
    if not path.exists():
        return None
    try:
        checkpoint: Any = torch.load(path, map_location=device, weights_only=False)
    except Exception:  # a checkpoint from another torch or a damaged file: start afresh
        return None
    if not isinstance(checkpoint, Checkpoint) or checkpoint.identity != identity:
        return None
    return checkpoint


def remove_checkpoint(folder: Path) -> None:
    """Delete the checkpoint and any temporary file a killed write left behind."""
    folder = Path(folder)
    for path in [folder / CHECKPOINT, *folder.glob(f".{CHECKPOINT}.*.tmp")]:
        path.unlink(missing_ok=True)
