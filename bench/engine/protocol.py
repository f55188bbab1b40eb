"""A round as data: the phases a method declares and the runner drives (:mod:`bench.runner.rounds`).

What crosses between the clients and the server is what the phases' message functions return, and nothing else:

* an :class:`Exchange`: the server sends each taking-part client a message (``send``, server side: it sees the
  server and the client's id), the client works on it and answers (``work``, client side: it sees its own client
  and the message), the server takes the answers in (``take``);
* a :class:`Lockstep`: iterations on shared public batches, in each of which every client forwards the batch and
  uploads (``upload``), the server answers each (``serve``) and each client steps on its answer (``loss``).

A server-side function never receives a client, a client-side one never the server, so a method's only way to
move information between them is to return it in a message; the runner counts every message in the run's
communication ledger (:mod:`bench.engine.ledger`) as it delivers it. A message is a typed value: a dataclass, a
tensor, or None for nothing sent.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, Union

import torch

from bench.engine.ledger import Message
from bench.engine.loop import Loop, Step
from bench.engine.state import Client, ClientStateT, Server, ServerStateT

D = TypeVar("D", bound=Message)  # what the server sends each client
U = TypeVar("U", bound=Message)  # what each client sends the server
O = TypeVar("O")  # what a client keeps of its forward pass on a public batch (never sent)
R = TypeVar("R", bound=Message)  # the server's answer to each client in a lockstep iteration

Metrics = dict[str, float]
"""Named values of a round (a loss, a diagnostic) for its records."""


@dataclass(frozen=True)
class Exchange(Generic[ClientStateT, ServerStateT, D, U]):
    """Server → each client → server. Each client's ``work`` returns its upload and its metrics (averaged over the
    clients in id order); ``take`` gets the uploads in client-id order and returns the server's metrics.

    ``sequential``: the clients work one after another in a seeded order (``Context.client_order``) and the server
    takes in each upload at once (``take_each``), so a later client's message already carries it. ``who``: which of
    the round's clients take part (server side, from their ids; default all). ``work_together``: the clients' work
    batched into one call (``training.vectorize_clients``), the same results to float rounding."""

    send: Callable[[int, Server[ServerStateT], int], D]
    work: Callable[[int, Client[ClientStateT], D], tuple[U, Metrics]]
    take: Callable[[int, Server[ServerStateT], list[U]], Metrics]
    sequential: bool = False
    take_each: Callable[[int, Server[ServerStateT], U], None] | None = None
    who: Callable[[Server[ServerStateT], list[int]], list[int]] | None = None
    work_together: Callable[[int, list[Client[ClientStateT]], list[D]], list[tuple[U, Metrics]]] | None = None


@dataclass(frozen=True)
class Lockstep(Generic[ClientStateT, ServerStateT, O, U, R]):
    """``steps`` iterations on public batches (``batch(i)``, the same for every client). Each client first prepares
    (``start``: its loop for the stage); per iteration it forwards the batch (``forward``, kept on its side),
    uploads (``upload``), the server answers every client at once (``serve``: one reply per client in the clients'
    order, and its metrics) and each client takes one step of its loop on ``loss``. The round reports the mean of
    the clients' losses as ``loss_name`` and the mean of each served metric. A round with fewer than
    ``min_clients`` clients is refused."""

    steps: int
    batch: Callable[[int], torch.Tensor]
    start: Callable[[int, Client[ClientStateT]], Loop]
    forward: Callable[[Client[ClientStateT], torch.Tensor], O]
    upload: Callable[[Client[ClientStateT], O], U]
    serve: Callable[[int, Server[ServerStateT], list[int], torch.Tensor, list[U]], tuple[list[R], Metrics]]
    loss: Callable[[Step, Client[ClientStateT], torch.Tensor, O, R], torch.Tensor]
    loss_name: str = "transfer_loss"
    min_clients: int = 1


Phase = Union[Exchange[ClientStateT, ServerStateT, Any, Any], Lockstep[ClientStateT, ServerStateT, Any, Any, Any]]
"""One phase of a round; each phase's message types are its own (checked where it is built)."""


def nothing(*_: object) -> None:
    """The message of a side that sends nothing."""
    return None


def no_metrics(*_: object) -> Metrics:
    """The ``take`` of a server that takes nothing in."""
    return {}
