"""Communication accounting: the bytes every method sends upstream (client → server) and downstream
(server → client) each round, counted from its typed messages (specs/fedal.md §2.3, Fig. 11).

A message is whatever a method sends: an :class:`~bench.engine.state.Update` (a state dict and typed
fields), a tensor of logits or features, a dataclass of tensors. :func:`payload_bytes` counts the
bytes of the tensors it holds (``numel × element_size``, at the tensor's own dtype: float32 logits are
4 bytes a value), recursing into dataclasses, mappings and sequences; an object that knows its own
size on the wire (a quantised payload packing b-bit codes) says so with a ``wire_bytes()`` method.
Python scalars (client ids, sample counts) and ``None`` count nothing.

The :class:`Ledger` is the run's (``Context.ledger``): the default round (:meth:`Algorithm.run_round`)
feeds it each client's :class:`Update` and each broadcast, methods with their own communication
pattern feed it their messages, and the runner records each round's totals (``upload_bytes``,
``download_bytes``, summed over the round's clients) in ``records.csv``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn


def payload_bytes(message: object) -> int:
    """The bytes ``message`` takes on the wire (module docstring)."""
    wire = getattr(message, "wire_bytes", None)
    if callable(wire):
        return int(wire())
    if isinstance(message, torch.Tensor):
        return message.numel() * message.element_size()
    if isinstance(message, nn.Module):
        return payload_bytes(message.state_dict())
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return sum(payload_bytes(getattr(message, f.name)) for f in dataclasses.fields(message))
    if isinstance(message, Mapping):
        return sum(payload_bytes(v) for v in message.values())
    if isinstance(message, (list, tuple)):
        return sum(payload_bytes(v) for v in message)
    return 0


@dataclass
class Ledger:
    """Bytes sent in the current round, summed over clients (the runner takes and resets them after
    every round)."""

    upload: int = 0
    download: int = 0

    def up(self, message: object) -> None:
        """One client sent ``message`` to the server."""
        self.upload += payload_bytes(message)

    def down(self, message: object, clients: int = 1) -> None:
        """The server sent ``message`` to each of ``clients`` clients."""
        self.download += clients * payload_bytes(message)

    def take(self) -> dict[str, float]:
        """This round's totals as record values; the ledger starts the next round at zero."""
        totals = {"upload_bytes": float(self.upload), "download_bytes": float(self.download)}
        self.upload = self.download = 0
        return totals
