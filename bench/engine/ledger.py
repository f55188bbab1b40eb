"""Communication accounting: the bytes every method sends upstream (client → server) and downstream
(server → client) each round, counted from its typed messages (pipelines/fedal/NOTES.md §2.3, Fig. 11).

A message is what a phase's message function returns (:mod:`bench.engine.protocol`): a dataclass (a
:class:`~bench.engine.messages.Update`, logits on a public batch, a sparse vector ...), a tensor, or None.
:func:`payload_bytes` counts the bytes of the tensors it holds (``numel × element_size``, at the tensor's own
dtype: float32 logits are 4 bytes a value), recursing into dataclasses, mappings and sequences; a module counts
as its state dict; an object that knows its own size on the wire (a quantised payload packing b-bit codes) says so
with a ``wire_bytes()`` method. Python scalars (client ids, sample counts, a trace) and ``None`` count nothing.

The runner holds the run's :class:`Ledger` and counts each message as it delivers it (:mod:`bench.runner.rounds`);
methods never see the ledger. It records each round's totals (``upload_bytes``, ``download_bytes``, summed over the
round's clients) in ``records.csv``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Union

import torch
from torch import nn


class DataclassInstance(Protocol):
    """Any dataclass instance (what ``dataclasses.is_dataclass`` accepts)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


Message = Union[DataclassInstance, torch.Tensor, None]
"""What crosses between a client and the server: a dataclass of typed fields, a tensor, or None (nothing)."""


def payload_bytes(message: object) -> int:
    """The bytes ``message`` (a :data:`Message`, or any value inside one) takes on the wire (module docstring)."""
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

    def up(self, message: Message) -> None:
        """One client sent ``message`` to the server."""
        self.upload += payload_bytes(message)

    def down(self, message: Message) -> None:
        """The server sent ``message`` to one client."""
        self.download += payload_bytes(message)

    def take(self) -> dict[str, float]:
        """This round's totals as record values; the ledger starts the next round at zero."""
        totals = {"upload_bytes": float(self.upload), "download_bytes": float(self.download)}
        self.upload = self.download = 0
        return totals
